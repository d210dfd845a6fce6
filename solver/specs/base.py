"""The base of every spec, and `build`: a spec from a mapping, bad input named by its path.

`build` checks a mapping's values against the spec's field types before pydantic sees them,
so nothing the user wrote is silently changed: pydantic's lax mode turns `true` into 1,
`1e35` into a 36-digit integer, `"8"` into 8 and `1` into true. Here an integer field takes
integers only, a number field integers or finite floats, a boolean field true or false, and
every number must lie in the plausible range of its quantity (`PLAUSIBLE`, by field name: the
unit is in the name), so absurd hardware numbers (a GPU of 1e-20 TFLOP/s) are refused at the
edge with the range instead of overflowing the formulation.
"""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from ..errors import InputError, host_name_reason, path, unsafe_name_reason, validation_error


class Spec(BaseModel):
    """Base of every spec: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _printable(name: str) -> str:
    reason = unsafe_name_reason(name)
    if reason:
        raise ValueError(f"the name {reason}")
    return name


def _host(name: str) -> str:
    reason = host_name_reason(name)
    if reason:
        raise ValueError(reason)
    return name


# A model, GPU or cluster name: printable text (no ANSI escapes, newlines or format characters)
Name = Annotated[str, AfterValidator(_printable)]
# A node or pool name: what hostfiles and launchers accept (a pool's name prefixes its node names)
HostName = Annotated[str, AfterValidator(_host)]


# Plausible range (inclusive) of each quantity a spec or a job mapping states, by field name.
# Wide enough for any real hardware and model of the coming years; narrow enough that times,
# sizes and the solver's integer coefficients stay finite.
PLAUSIBLE: dict[str, tuple[float, float]] = {
    # GPU
    "peak_bf16_tflops": (1.0, 1e5), "peak_fp8_tflops": (1.0, 2e5), "peak_fp4_tflops": (1.0, 4e5), "hbm_gib": (0.5, 1e4),
    "hbm_gbyte_per_s": (10.0, 1e6), "num_sms": (1, 1e5), "sfu_tops": (1e-3, 1e4),
    "layer_overhead_us": (0.0, 1e6), "sharded_layer_overhead_us": (0.0, 1e6), "host_op_us": (0.0, 1e6),
    "runtime_reserve_gib": (0.0, 1e4),
    "tdp_watts": (1.0, 1e5),
    # cluster and links
    "gpus_per_node": (1, 1024), "nvlink_domain_gpus": (1, 1 << 16), "num_nodes": (1, 1 << 20), "nodes_per_leaf": (1, 1 << 20),
    "nvlink_gbyte_per_s": (0.1, 1e5), "nic_gbit_per_s": (0.1, 1e6), "gbit_per_s": (1e-3, 1e6),
    "nvlink_latency_us": (1e-3, 1e6), "network_latency_us": (1e-3, 1e6), "latency_us": (1e-3, 1e6),
    "spine_oversubscription": (1.0, 1e3), "price_per_gpu_hour_usd": (0.0, 1e6),
    "inter_pool_gbit_per_s": (1e-3, 1e6), "inter_pool_latency_us": (1e-3, 1e6),
    # model
    "num_layers": (1, 1 << 16), "hidden_size": (1, 1 << 22), "num_attention_heads": (1, 1 << 20),
    "num_kv_heads": (1, 1 << 20), "kv_channels": (1, 1 << 20), "ffn_hidden_size": (1, 1 << 24),
    "vocab_size": (1, 1 << 26), "rotary_base": (1.0, 1e12), "csa_compress_rotary_base": (1.0, 1e12),
    "rope_scaling_factor": (1e-3, 1e6),
    "norm_epsilon": (1e-30, 1.0), "nominal_params_b": (1e-6, 1e6),
    "num_experts": (1, 1 << 16), "moe_ffn_hidden_size": (1, 1 << 24), "moe_router_topk": (1, 1 << 16),
    "moe_shared_expert_intermediate_size": (1, 1 << 24), "moe_latent_size": (1, 1 << 24), "moe_layer_freq": (1, 1 << 16),
    "moe_router_num_groups": (1, 1 << 16), "moe_router_group_topk": (1, 1 << 16),
    "moe_expert_capacity_factor": (0.01, 1e3),
    "q_lora_rank": (1, 1 << 20), "kv_lora_rank": (1, 1 << 20),
    "qk_head_dim": (1, 1 << 20), "qk_pos_emb_head_dim": (1, 1 << 20), "v_head_dim": (1, 1 << 20),
    "mtp_num_layers": (0, 64), "moe_load_imbalance": (1.0, 64.0),
    # job
    "seq_length": (1, 1 << 24), "global_batch_size": (1, 1 << 24), "num_gpus": (1, 1 << 20),
    # constraints (values of a list, and the bounds)
    **{k: (1, 1 << 30) for k in ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "tp_max", "pp_max", "dp_max",
                                 "cp_max", "vp_max", "micro_batch_size_max", "ep", "etp", "ep_max", "etp_max")},
}
MAX_INT = 1 << 53  # any other integer field


@cache
def _kind(annotation) -> tuple:
    """What a field holds: ("int",), ("float",), ("bool",), ("seq", inner), ("model", cls) or ()."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _kind(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return _kind(members[0]) if len(members) == 1 else ()
    if origin is Literal:
        vals = get_args(annotation)
        return ("int",) if all(isinstance(v, int) and not isinstance(v, bool) for v in vals) else ()
    if origin is tuple:
        args = get_args(annotation)
        return ("seq", _kind(args[0])) if len(args) == 2 and args[1] is Ellipsis else ()
    if annotation is bool:
        return ("bool",)
    if annotation is int:
        return ("int",)
    if annotation is float:
        return ("float",)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    return ()


def _number(value: Any, kind: str, name: str, where: str, bounds: tuple = ()) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(where, f"must be {'an integer' if kind == 'int' else 'a number'} (got {_shown(value)})")
    if kind == "int" and isinstance(value, float):
        raise InputError(where, f"must be an integer, written without a decimal point or exponent (got {value!r})")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(where, f"must be a finite number (got {value!r})")
    if name in PLAUSIBLE:
        bounds = (*PLAUSIBLE[name], False, False)
    lo, hi, lo_open, hi_open = bounds or (-MAX_INT, MAX_INT, False, False)
    inside = (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi)
    if not inside:
        if not bounds:
            raise InputError(where, f"{_shown(value)} is too large: at most {MAX_INT:.4g} in magnitude")
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise InputError(where, f"{_shown(value)} is outside the plausible range {span}")


def _bounds(field_info) -> tuple:
    """(lo, hi, lo_open, hi_open) from a field's own constraints (gt/ge/lt/le), () when it
    states neither end: the range a field not in PLAUSIBLE is checked against and reported with."""
    lo, hi, lo_open, hi_open, stated = -MAX_INT, MAX_INT, False, False, False
    for m in field_info.metadata:
        for attr, is_lo, is_open in (("gt", True, True), ("ge", True, False), ("lt", False, True), ("le", False, False)):
            bound = getattr(m, attr, None)
            if bound is None:
                continue
            stated = True
            if is_lo:
                lo, lo_open = bound, is_open
            else:
                hi, hi_open = bound, is_open
    return (lo, hi, lo_open, hi_open) if stated else ()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def check_types(spec_cls, data: Any, field: str) -> None:
    """Refuse, naming the path, any value of `data` that pydantic would coerce into its field's
    type (booleans as numbers, floats as integers, strings as numbers or booleans, numbers as
    booleans) or that lies outside its quantity's plausible range. Nested specs are checked
    too; values of other types are left to pydantic."""
    if not isinstance(data, dict):
        return
    fields = spec_cls.model_fields
    for name, value in data.items():
        if name not in fields or value is None:
            continue
        _check_value(_kind(fields[name].annotation), value, name, path(field, str(name)), _bounds(fields[name]))


def _check_value(kind: tuple, value: Any, name: str, where: str, bounds: tuple = ()) -> None:
    if not kind:
        return
    if kind[0] in ("int", "float"):
        _number(value, kind[0], name, where, bounds)
    elif kind[0] == "bool":
        if not isinstance(value, bool):
            raise InputError(where, f"must be true or false (got {_shown(value)})")
    elif kind[0] == "seq":
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                _check_value(kind[1], item, name, f"{where}[{i}]")
    elif kind[0] == "model" and isinstance(value, dict):
        check_types(kind[1], value, where)


def build(spec_cls, data: dict, field: str, *, list_keys: bool = False):
    """`spec_cls(**data)`; a bad value is an InputError whose field is its path under `field`
    (`list_keys`: an unknown key's message lists the allowed ones)."""
    check_types(spec_cls, data, field)
    try:
        return spec_cls(**data)
    except ValidationError as exc:
        raise validation_error(exc, field, list(spec_cls.model_fields) if list_keys else None) from None
    except TypeError as exc:
        raise InputError(field, str(exc)) from None


