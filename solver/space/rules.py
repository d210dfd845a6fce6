"""Rules of the space beyond enumeration, each written once:

- `config_violations`: the rules of `enumeration.enumerate_shapes` on one explicit
  configuration, each broken rule named by its field;
- `complete_config`: the only place that completes an explicit configuration with its
  defaults (`solveplan evaluate`, `optimize --compare`, `links place`, calibration's measured
  steps all come here): tp = pp = cp = vp = 1, micro-batch 1, selective recomputation,
  sequence parallelism when tp > 1, the distributed optimizer (zero = 1) when dp*cp > 1 else
  plain data parallelism (zero = 0); a default the job's framework does not run gives way to
  its fallback (`specs/frameworks.py`), and a value it does not run is refused;
- `textbook_shapes`: the usual Megatron-LM configuration (TP inside an NVLink domain: a node, or an NVL72 rack; no CP, no
  interleaving, the planner's own layer split (no embedding / loss counted as layers), selective recomputation, SP with TP, the distributed optimizer; for a MoE
  model etp = 1 and the EP group inside the NVLink domain, as the Megatron MoE README recommends), each default
  giving way only where the job's constraints exclude it;
- `least_memory_job`: the job restricted to the least-memory value of every knob.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputError, path
from ..specs import JobSpec
from ..specs.frameworks import config_conflicts, default_for, expert_conflicts, torchtitan_etp
from ..specs.job import rule_violations
from .enumeration import enumerate_shapes
from .experts import (
    cp_a2a_violations,
    default_etp,
    dsv4_violations,
    ep_violations,
    hsdp_violations,
    hybrid_violations,
    tp_split_widths,
)
from .pipeline_layout import Layout, layout_degrees, priced_split, read_layout
from .pipeline_split import rank_layers, split_problems, unit_split
from .shapes import RECOMPUTE_CODES, Shapes

CONFIG_KEYS = ("tp", "pp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero", "ep", "etp",
               "account_for_embedding", "account_for_loss", "layers", "pipeline_layout", "dp", "num_microbatches")


def config_violations(job: JobSpec, *, tp: int, pp: int, cp: int, vp: int, micro_batch_size: int,
                      recompute: str, sequence_parallel: bool, zero: int, ep: int = 1,
                      etp: int = 1, account_for_embedding: bool = False,
                      account_for_loss: bool = False, layout: bool = False) -> tuple[int, list[tuple[str, str]]]:
    """The derived dp and every rule of `enumerate_shapes` an explicit configuration breaks,
    each as (field, 'what is wrong; the fix'): fields are the configuration's knobs (`tp`,
    `tp/cp/pp` for their product), and `global_batch_size` for the job's batch. The same rules
    as the enumeration (a test checks that both agree), but for a configuration with a pipeline
    layout (`layout`: `pipeline_layout` module), whose virtual stages may outnumber the layers
    (Megatron allows empty stages)."""
    model, N = job.model, job.cluster.num_gpus
    B, s, L = job.global_batch_size, job.seq_length, model.num_pipeline_units  # layers of a dense model
    units = "layers" if L == model.num_layers else "pipeline units of whole layers (ModelSpec.pipeline_units)"
    errs: list[tuple[str, str]] = []
    if N % (tp * cp * pp):
        return 0, [("tp/cp/pp", f"tp*cp*pp = {tp}*{cp}*{pp} = {tp * cp * pp} does not divide the {N} GPUs of "
                                f"{job.cluster.name}; choose degrees whose product divides {N}")]
    dp = N // (tp * cp * pp)
    if model.num_attention_heads % tp:
        errs.append(("tp", f"{tp} does not divide num_attention_heads {model.num_attention_heads}"))
    if model.kv_heads % tp:
        errs.append(("tp", f"{tp} does not divide num_kv_heads {model.num_kv_heads} (Megatron needs query groups divisible by tp)"))
    for width in tp_split_widths(model):
        if width % tp:
            errs.append(("tp", f"{tp} does not divide the width {width} (ffn_hidden_size, "
                               f"moe_shared_expert_intermediate_size, mamba_num_heads / mamba_num_groups, or "
                               f"gdn_num_key_heads / gdn_num_value_heads)"))
    if cp > 1 and not job.flash_attention:
        errs.append(("cp", "context parallelism needs flash attention; turn flash attention on or use cp = 1"))
    if cp > 1 and s % (2 * cp):
        errs.append(("cp", f"seq length {s} must be divisible by 2*cp = {2 * cp}"))
    if pp > L:
        errs.append(("pp", f"{pp} stages for {L} {units}; use pp <= {L}"))
    errs += rule_violations(job, dict(pp=pp, recompute=recompute, zero=zero, etp=etp))  # the settings' rules (specs.job)
    if B % dp:
        errs.append(("global_batch_size", f"{B} is not divisible by the derived dp = {N}/({tp}*{cp}*{pp}) = {dp}"))
    elif (B // dp) % micro_batch_size:
        errs.append(("micro_batch_size", f"{micro_batch_size} does not divide the {B // dp} sequences per data-parallel rank"))
    else:
        m = B // (dp * micro_batch_size)
        if vp > 1:
            if pp < 2:
                errs.append(("vp", "interleaving needs pp >= 2"))
            if pp * vp > L and not (account_for_embedding or account_for_loss or layout):
                errs.append(("vp", f"pp*vp = {pp * vp} exceeds {L} {units}{_accounting_fix(model, pp, vp)}"))
            if m % pp:
                errs.append(("vp", f"interleaving needs the {m} micro-batches to be divisible by pp = {pp}"))
    errs += accounting_violations(model, pp, vp, account_for_embedding, account_for_loss)
    if sequence_parallel and tp == 1:
        errs.append(("sequence_parallel", "needs tp > 1; turn sequence parallelism off"))
    if model.is_dsa and not model.is_moe and tp > 1 and not sequence_parallel:  # a MoE model's rule says it already
        errs.append(("sequence_parallel", "DeepSeek Sparse Attention with tp > 1 needs sequence parallelism "
                                          "(Megatron's AbsorbedMLA); turn it on"))
    if zero and dp * cp == 1:
        errs.append(("zero", f"optimizer sharding needs dp*cp > 1 (dp={dp}, cp={cp}); use zero = 0"))
    if zero == 3 and pp > 1:
        errs.append(("zero", "ZeRO-3 is not combined with pipeline parallelism; use zero = 1 or pp = 1"))
    errs += hybrid_violations(model, tp=tp, cp=cp, account=account_for_embedding or account_for_loss)
    errs += cp_a2a_violations(model, tp=tp, cp=cp) + dsv4_violations(model, tp=tp, cp=cp)
    errs += hsdp_violations(job, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp)
    errs += ep_violations(model, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp, sequence_parallel=sequence_parallel,
                          pp=pp, vp=vp, recompute=recompute, a2a_overlap=job.moe_a2a_overlap)
    return dp, errs


def _accounting_fix(model, pp: int, vp: int) -> str:
    """The fix for pp*vp above the layers when counting the embedding / loss as layers makes it
    legal (Megatron's --account-for-*-in-pipeline-split; `pipeline_split`), else ''."""
    for e, loss in ((True, True), (True, False), (False, True)):
        if unit_split(model, pp, vp, e, loss) is not None:
            knobs = " and ".join(k for k, on in (("account_for_embedding", e), ("account_for_loss", loss)) if on)
            return f"; count the embedding / loss as layers ({knobs}), or use pp*vp <= {model.num_pipeline_units}"
    return f"; use pp*vp <= {model.num_pipeline_units}"


def accounting_violations(model, pp: int, vp: int, embedding: bool, loss: bool) -> list[tuple[str, str]]:
    """Megatron's rules for a split that counts the embedding / loss as layers (`pipeline_split`),
    and the pipeline units of a MoE model (each rank's layers whole units)."""
    errs = split_problems(model.num_layers, pp, vp, embedding, loss)
    if (embedding or loss) and not errs and unit_split(model, pp, vp, embedding, loss) is None:
        field = "account_for_embedding" if embedding else "account_for_loss"
        errs.append((field, f"Megatron's split {rank_layers(model.num_layers, pp, vp, embedding, loss)} gives a rank "
                            f"layers that are not whole pipeline units of {model.name} (ModelSpec.pipeline_units); "
                            f"choose another pp or vp, or leave the embedding and loss out of the split"))
    return errs


def _bool(cfg: Mapping[str, Any], key: str, field: str) -> bool:
    value = cfg.get(key)
    if value is None:
        return False
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(path(field, key), f"must be true or false (got {value!r})")
    return bool(value)


def _int(cfg: Mapping[str, Any], key: str, default: int, field: str, least: int = 1) -> int:
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InputError(path(field, key), f"must be an integer >= {least} (got {value!r})")
    return int(value)


def complete_config(job: JobSpec, cfg: Mapping[str, Any], field: str = "",
                    job_field: str | None = None) -> tuple[dict, list[int] | None]:
    """An explicit configuration (keys `CONFIG_KEYS`; any may be left out) completed with the
    defaults of the module docstring and checked against every rule: (the shape as
    `Shapes.row` gives it, with dp; the layer split, None for the caller's default).
    Bad input is an InputError naming the key under `field`; the job's own fields (the global
    batch) are named under `job_field` (default: `field`)."""
    job_field = field if job_field is None else job_field
    unknown = sorted(set(cfg) - set(CONFIG_KEYS))
    if unknown:
        raise InputError(path(field, unknown[0]), f"unknown key; use {', '.join(CONFIG_KEYS[:14])}")
    tp, pp, cp, vp = (_int(cfg, k, 1, field) for k in ("tp", "pp", "cp", "vp"))
    layout = _config_layout(job, cfg, field) if cfg.get("pipeline_layout") is not None else None
    if layout is not None:
        pp, vp = layout.pp, layout.vp
    mbs = _int(cfg, "micro_batch_size", 1, field)
    recompute = cfg.get("recompute") or default_for(job.framework, "recompute", "selective")
    if recompute not in RECOMPUTE_CODES:
        raise InputError(path(field, "recompute"), f"{recompute!r}: choose none, selective or full")
    sp = cfg.get("sequence_parallel")
    sp = tp > 1 if sp is None else bool(sp)
    N = job.cluster.num_gpus
    divides = N % (tp * cp * pp) == 0
    zero = _int(cfg, "zero", default_for(job.framework, "zero", 1 if divides and N // (tp * cp * pp) * cp > 1 else 0),
                field, least=0)
    ep = _int(cfg, "ep", 1, field)
    etp = _int(cfg, "etp", torchtitan_etp(tp, ep) if job.framework == "torchtitan" and job.model.is_moe
               else default_etp(job.model, tp), field)
    acc = {k: _bool(cfg, k, field) for k in ("account_for_embedding", "account_for_loss")}
    dp, errs = config_violations(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=recompute,
                                 sequence_parallel=sp, zero=zero, ep=ep, etp=etp, **acc, layout=layout is not None)
    errs = config_conflicts(job.framework, dict(tp=tp, pp=pp, cp=cp, vp=vp, recompute=recompute, zero=zero,
                                                ep=ep, **acc)) + errs
    if job.model.is_moe:
        errs = expert_conflicts(job.framework, tp=tp, ep=ep, etp=etp, cp=cp, dp=dp, zero=zero) + errs
    if cfg.get("dp") is not None and not errs and int(cfg["dp"]) != dp:
        errs.append(("dp", f"{cfg['dp']} but tp*cp*pp*dp must equal the {N} GPUs (dp = {dp})"))
    if errs:
        (key, msg), more = errs[0], errs[1:]
        tail = f" (and {len(more)} more: {'; '.join(f'{k}: {m}' for k, m in more)})" if more else ""
        raise InputError(path(job_field if key == "global_batch_size" else field, key), msg + tail)
    layers = cfg.get("layers") if layout is None else layout.rank_layers
    if layers is not None and layout is None:
        layers, L = [int(x) for x in layers], job.model.num_layers
        where = path(field, "layers")
        if len(layers) != pp:
            raise InputError(where, f"{len(layers)} entries for pp={pp}; give one count per stage")
        if min(layers) < 1:
            raise InputError(where, f"every stage needs at least one layer (got {layers})")
        if sum(layers) != L:
            raise InputError(where, f"counts sum to {sum(layers)} but the model has {L} layers")
        if any(acc.values()) and layers != rank_layers(L, pp, vp, *acc.values()):
            raise InputError(where, f"{layers}: with the embedding / loss counted as layers Megatron-LM splits them "
                                    f"{rank_layers(L, pp, vp, *acc.values())} (get_num_layers_to_build); leave "
                                    f"layers out or give that split")
    row = dict(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=recompute, sequence_parallel=sp,
               zero=zero, ep=ep, etp=etp, **acc)
    if layout is not None:
        row["pipeline_layout"] = layout.text
    return row, layers


def _config_layout(job: JobSpec, cfg: Mapping[str, Any], field: str) -> Layout:
    """The configuration's `pipeline_layout` read as Megatron reads it (`pipeline_layout.read_layout`:
    pp given, or derived from a given vp; vp from the layout) and priced (`priced_split`); an
    InputError naming the key, one line with the fix, for every rule it breaks: Megatron's, the
    keys that cannot go with it (TransformerConfig: 'pipeline_model_parallel_layout cannot be set
    with other pipeline layout arguments'), a framework other than Megatron-LM, and what the
    formulation does not model."""
    where, text = path(field, "pipeline_layout"), cfg["pipeline_layout"]
    if not isinstance(text, str):
        raise InputError(where, f"must be a string such as 'Et*4|t*4|t*4|t*4L' (got {type(text).__name__})")
    for key in ("layers", "account_for_embedding", "account_for_loss"):
        if cfg.get(key):
            raise InputError(path(field, key), f"cannot be given with pipeline_layout (Megatron-LM: "
                                               f"'pipeline_model_parallel_layout cannot be set with other pipeline "
                                               f"layout arguments'): the layout fixes the split; leave {key} out")
    if job.framework != "megatron":
        raise InputError(where, f"a Megatron-LM layout: framework {job.framework} does not take one; use framework "
                                f"megatron or give layers")
    try:
        pp, _ = layout_degrees(text, _int(cfg, "pp", 0, field) or None, _int(cfg, "vp", 0, field) or None)
        layout = read_layout(text, pp, job.model)
        priced_split(job.model, layout)
    except ValueError as exc:
        raise InputError(where, str(exc)) from None
    return layout



CONSTRAINED_KNOBS = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero",
                     "ep", "etp", "account_for_embedding", "account_for_loss")


def constrained_config(job: JobSpec, cfg: Mapping[str, Any], field: str = "") -> dict:
    """An explicit configuration under the job's constraints (`evaluate --job`): each knob `cfg`
    leaves out that the constraints fix to one value takes that value, and the completed
    configuration (`complete_config`) must satisfy every constraint -- an InputError naming the
    knob otherwise, so a job's constraints are never silently ignored."""
    cons = job.constraints
    out = dict(cfg)
    for knob in CONSTRAINED_KNOBS:
        fixed = getattr(cons, knob, None)
        if out.get(knob) is None and fixed is not None and len(fixed) == 1:
            out[knob] = fixed[0]
    row, _ = complete_config(job, out, field)
    for knob in CONSTRAINED_KNOBS:
        if cons.allows(knob, row[knob]):
            continue
        fixed, bound = getattr(cons, knob, None), getattr(cons, f"{knob}_max", None)
        allowed = "; ".join(x for x in (fixed and f"{knob} in {list(fixed)}", bound and f"{knob}_max {bound}") if x)
        how = "given" if cfg.get(knob) is not None else "default"
        raise InputError(path(field, knob), f"{row[knob]} ({how}) is outside the job's constraints ({allowed}); "
                                            f"give a value they allow, or change the constraints")
    return out

def textbook_shapes(job: JobSpec) -> Shapes:
    """The legal shapes of the usual Megatron-LM configuration (see the module docstring):
    every shape the job allows, narrowed by each default in turn where some shape keeps it."""
    shapes = enumerate_shapes(job).shapes
    mask = np.ones(len(shapes), dtype=bool)
    for keep in (shapes.cp == 1, shapes.vp == 1, ~shapes.accounted, shapes.recompute == RECOMPUTE_CODES["selective"],
                 shapes.tp <= job.cluster.domain_gpus, shapes.sequence_parallel == (shapes.tp > 1),
                 shapes.zero == np.where(shapes.dp * shapes.cp > 1, 1, 0),
                 shapes.etp == 1, shapes.ep * shapes.etp <= job.cluster.domain_gpus):
        if (mask & keep).any():
            mask &= keep
    return shapes.take(np.flatnonzero(mask))


def least_memory_job(job: JobSpec) -> JobSpec:
    """The job restricted to the least-memory value of every knob the constraints allow.

    Some plan of `job` fits iff some plan of the result fits: per-GPU memory never grows
    with full (over selective, over no) recomputation, with a smaller micro-batch (in-flight
    activations are min(mbs*(p-i), B/dp) micro-batch-sequences; logits scale with mbs), with
    vp = 1 (interleaving keeps more chunks in flight) or with sequence parallelism on; the
    degrees and the ZeRO stage stay free."""
    cons = job.constraints
    order = [r for r in ("full", "selective", "none") if cons.allows("recompute", r)]
    mbs = min((b for b in range(1, job.global_batch_size + 1) if cons.allows("micro_batch_size", b)), default=None)
    update: dict[str, Any] = {"vp": (1,) if cons.allows("vp", 1) else cons.vp}
    if order:
        update["recompute"] = (order[0],)
    if mbs is not None:
        update["micro_batch_size"] = (mbs,)
    if cons.sequence_parallel is None:
        update["sequence_parallel"] = (True, False)  # True where tp > 1; tp = 1 needs False
    return job.model_copy(update={"constraints": cons.model_copy(update=update)})
