"""What a row's parallel block, GPUs per node, model dimensions and measured figures state, as numbers: the
published files write an unstated field as null or 'not stated' (their conventions), a table's "n/a" where a value
does not apply, and a number now and then as a string ("4", "1,234", "41%") or a float (4.0). The readers
(`rows.row_job`, `moe_rows.moe_row_job`) take integers (positive numbers for the measured figures) or None; this
reads every other spelling into one of them and says how in the row's notes, so that no row is refused for the way
a number is written and nothing is read silently."""

from __future__ import annotations

import copy
import math

from ..errors import InputError

# The whole numbers a reader takes (each positive). Shared experts are not here: the files write them "n (size)",
# which `moe_row_model.shared_expert_size` reads. "n/a" states nothing (None), not even for a parallel degree:
# Megatron-Bridge's tables print VP "n/a" for Llama 3 70B on GB300 in MXFP8 (26.02.01) where the recipe nearest it
# sets vp 5 (docs/DESIGN.md section 7); a row whose recipe settles it says so itself (`eras.stated_vp`)
FIELDS: tuple[tuple[str, str], ...] = (
    *(("parallel", name) for name in ("tp", "pp", "cp", "vp", "ep", "etp", "dp", "num_gpus", "mbs", "gbs", "ga")),
    ("hardware", "gpus_per_node"),
    *(("model", name) for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "moe_ffn_hidden",
                                   "vocab", "seq_len", "num_experts", "top_k")),
)
KNOBS = frozenset({"tp", "pp", "cp", "vp", "ep", "etp", "mbs"})  # what the best legal value stands in for
# The measured figures the files' conventions name (a positive number each; MFU a fraction of peak)
MEASURED_FIELDS = ("iteration_time_s", "tokens_per_s_per_gpu", "tokens_per_s_total", "tflops_per_gpu",
                   "model_tflops_per_gpu", "mfu", "aggregate_pflops")
# Other names of a step's time -> (the conventions' name, the factor to seconds)
MEASURED_ALIASES = {"step_time_s": ("iteration_time_s", 1.0), "step_time_ms": ("iteration_time_s", 1e-3),
                    "iteration_time_ms": ("iteration_time_s", 1e-3), "time_per_step_s": ("iteration_time_s", 1.0)}
NO_GLOBAL_BATCH = "global batch not stated: the step time of the measured throughput is undefined"


def _as_int(value) -> int | None:
    """A positive whole number written as one, as an integral float or as a string of one; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value) and value == int(value) and value >= 1:
        return int(value)
    return None


def read_field(block: str, name: str, value) -> tuple[int | None, str | None]:
    """(the value a reader takes, the note saying how it was read; None when taken as written)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value, None
    number = _as_int(value)
    if number is not None:
        return number, f"{block}.{name} {value!r} read as {number}"
    unstated = "not stated, the best legal value" if block == "parallel" and name in KNOBS else "not stated"
    if isinstance(value, str) and not any(ch.isdigit() for ch in value):  # "not stated", "unknown", "-", "n/a"
        return None, f"{block}.{name} {value!r}: {unstated}"
    return None, f"{block}.{name} {value!r} is not a positive whole number: read as {unstated}"


def read_measured(name: str, value) -> tuple[float | None, str | None]:
    """(a measured figure as a positive number or None, the note saying how it was read): "1,234" as 1234, MFU
    written as a percentage ("41%", or 41: a fraction cannot pass 1) as 0.41."""
    plain = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None or plain and math.isfinite(value) and value > 0 and not (name == "mfu" and value > 1):
        return value, None
    text = str(value).strip().replace(",", "")
    try:
        number = float(text.rstrip("%").strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        return None, f"measured.{name} {value!r} is not a positive number: read as not stated"
    if name == "mfu" and (text.endswith("%") or number > 1):
        number /= 100.0
    return number, f"measured.{name} {value!r} read as {number:g}"


def _derived_counts(p: dict) -> list[str]:
    """Fill, in place, the GPU count and the global batch a row leaves out where the numbers it states give them
    (the files' own derivations: GPUs = tp x pp x cp x dp, global batch = micro-batch x accumulation x dp), and
    return what was derived; a row with neither its GPU count nor the degrees that give it is refused in one line."""
    notes = []
    cp = p.get("cp") or 1
    if p.get("num_gpus") is None and all(p.get(k) for k in ("tp", "pp", "dp")):
        p["num_gpus"] = p["tp"] * p["pp"] * cp * p["dp"]
        notes.append(f"parallel.num_gpus not stated: {p['num_gpus']} = tp x pp x cp x dp")
    if p.get("num_gpus") is None:
        raise InputError("parallel.num_gpus", "the row states no number of GPUs, nor tp, pp and dp to count them: "
                                              "add parallel.num_gpus")
    model_parallel = p["tp"] * p["pp"] * cp if p.get("tp") and p.get("pp") else 0
    dp = p.get("dp") or (p["num_gpus"] // model_parallel if model_parallel and p["num_gpus"] % model_parallel == 0
                         else None)
    if p.get("gbs") is None and p.get("mbs") and p.get("ga") and dp:
        p["gbs"] = p["mbs"] * p["ga"] * dp
        notes.append(f"parallel.gbs not stated: {p['gbs']} = mbs x ga x dp")
    return notes


def with_stated_numbers(raw: dict) -> tuple[dict, list[str]]:
    """(`raw` with its parallel degrees, counts and model dimensions read as integers or None, its measured figures
    as positive numbers or None (`read_measured`) and the counts its numbers give filled in (`_derived_counts`), the
    notes of what was read how): the row itself when nothing needed reading."""
    out, notes = copy.deepcopy(raw), []
    for (block, name) in FIELDS:
        fields = out.get(block)
        if isinstance(fields, dict) and name in fields:
            fields[name], note = read_field(block, name, fields[name])
            notes += [note] if note else []
    measured: dict = out["measured"] if isinstance(out.get("measured"), dict) else {}
    for alias, (name, to_s) in MEASURED_ALIASES.items():
        if alias in measured and measured.get(name) is None:
            value, _ = read_measured(name, measured[alias])
            if value is not None:
                measured[name] = value * to_s
                notes.append(f"measured.{alias} {measured[alias]!r} read as {name} {measured[name]:g}")
    for name in (n for n in MEASURED_FIELDS if n in measured):
        measured[name], note = read_measured(name, measured[name])
        notes += [note] if note else []
    if isinstance(out.get("parallel"), dict):
        notes += _derived_counts(out["parallel"])
    return (out, notes) if notes else (raw, [])


YES_NO = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}


def first_yes_no(*values) -> bool | None:
    """The first of `values` that says yes or no: a bool, 1 / 0, or "yes", "true", "on" / "no", "false", "off"."""
    said = (v if isinstance(v, bool) else YES_NO.get(str(v).strip().lower()) for v in values if v is not None)
    return next((v for v in said if v is not None), None)
