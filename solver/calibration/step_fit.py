"""GPU efficiencies, from measured steps of known configurations, predicted through the real
formulation (`plan.make_plan` on each row's configuration, completed once by
`plan.plan_config` like `solveplan evaluate`'s), on the cluster with the fitted links. The
fit is the few-shot fit of `fewshot.py`: the stack's time scale (every GPU-local term) from
2 or more measurements, and one more knob at a time (GEMM, FP8 or attention efficiency,
per-layer or FSDP overhead, network efficiency) only where the measurements identify it and
it improves the fit by BIC, each with the cluster's value as its prior.

Refusals (`InputError`, one line saying what to measure next): fewer than 2 step
measurements; the same configuration measured twice with >25% different times; a knob
pinned at a bound with large residuals (the points do not follow the model).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..catalog import load_model, parse_data, read_text, resize_cluster
from ..errors import InputError
from ..plan import ParallelConfig, make_plan, plan_config
from ..specs import ClusterSpec, JobSpec
from ..specs.base import build
from .fewshot import KNOB_BY_NAME, FewShotFit, RowFacts, calibrated_fields, calibrated_job, fit_few_shot
from .fit import BAD_FIT_RMS, Param

DUPLICATE_SPREAD = 1.25


STEP_COLUMNS = ("model", "tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero",
                "global_batch_size", "seq_length", "step_time_s")
_OPTIONAL = ("dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero", "global_batch_size",
             "seq_length", "num_gpus", "flash_attention", "attention_kernel", "precision", "tp_comm_overlap", "framework",
             "peft", "lora_rank", "lora_target_modules", "ep", "etp", "moe_token_dispatcher", "moe_a2a_overlap", "label",
             "name", "id")
_ALIASES = {"mbs": "micro_batch_size", "gbs": "global_batch_size", "seq_len": "seq_length", "seq": "seq_length",
            "step_time": "step_time_s", "iteration_time_s": "step_time_s", "sp": "sequence_parallel",
            "zero_stage": "zero", "flash": "flash_attention", "expert_parallel": "ep", "expert_tensor_parallel": "etp",
            "dispatcher": "moe_token_dispatcher"}


@dataclass
class StepRow:
    index: int  # 1-based row number in the file
    label: str
    job: JobSpec
    parallel: ParallelConfig  # the row's configuration, completed with the defaults (`plan.plan_config`)
    layers: list[int]
    measured_s: float
    before_s: float = math.nan
    after_s: float = math.nan
    fits_memory: bool | None = None


@dataclass
class StepFit:
    rows: list[StepRow]
    params: list[Param]
    rms_before: float
    rms_after: float
    dof: int
    notes: list[str] = field(default_factory=list)
    gpu_update: dict = field(default_factory=dict)  # GPU fields of the calibrated cluster
    cluster_update: dict = field(default_factory=dict)  # cluster fields (network_efficiency)


def _bool(v, where):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on", "y", "t"):
        return True
    if s in ("0", "false", "no", "off", "n", "f"):
        return False
    raise InputError("steps", f"{where}: expected true/false (got {v!r})")


def _int(v, where, lo=1):
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError("steps", f"{where}: expected an integer (got {v!r})") from None
    if f != int(f) or f < lo:
        raise InputError("steps", f"{where}: expected an integer >= {lo} (got {v!r})")
    return int(f)


# measured steps one calibration fits (each is re-evaluated by the formulation at every step
# of the least-squares fit: 50,000 rows ran for minutes); the published runs are 223
MAX_STEP_ROWS = 1000


def read_steps(path: str | Path) -> list[dict]:
    """Rows of a CSV (header line) or JSON (a list, or {'measurements'|'steps': [...]}) file,
    keys normalised (lower case, '-' -> '_', common aliases), empty cells dropped; at most
    MAX_STEP_ROWS rows."""
    path = Path(path)
    text = read_text(path, "steps")
    if path.suffix.lower() == ".json":
        data = parse_data(text, "steps", path.name, "json")
        if isinstance(data, dict):
            data = data.get("measurements", data.get("steps"))
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError("steps", f"{path.name}: expected a list of objects (or {{\"measurements\": [...]}})")
        rows = data
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise InputError("steps", f"{path.name}: empty file; expected a header line with {', '.join(STEP_COLUMNS)}")
        rows = list(reader)
    if len(rows) > MAX_STEP_ROWS:
        raise InputError("steps", f"{path.name} holds {len(rows):,} rows; at most {MAX_STEP_ROWS:,} measured steps are "
                                  f"fitted (give a representative subset)")
    out: list[dict] = []
    for r in rows:
        norm = {}
        for k, v in r.items():
            if k is None:
                raise InputError("steps", f"{path.name} row {len(out) + 1}: more cells than header columns")
            key = _ALIASES.get(k.strip().lower().replace("-", "_"), k.strip().lower().replace("-", "_"))
            if v is None or (isinstance(v, str) and v.strip() == ""):
                continue
            norm[key] = v.strip() if isinstance(v, str) else v
        out.append(norm)
    return out


def row_cluster(cluster: ClusterSpec, n: int, where: str) -> ClusterSpec:
    """The calibrated cluster with `n` GPUs (one partial node below a node's worth)."""
    if n == cluster.num_gpus:
        return cluster
    g = cluster.gpus_per_node
    if n < g:
        return cluster.model_copy(update={"gpus_per_node": n, "num_nodes": 1})
    if n % g:
        raise InputError("steps", f"{where}: {n} GPUs is not a multiple of {g} GPUs per node of {cluster.name}")
    return resize_cluster(cluster, n // g)


def build_step_rows(rows: list[dict], cluster: ClusterSpec, source: str) -> list[StepRow]:
    """One StepRow per measurement: its job on `cluster` (resized to the row's GPUs) and its
    configuration, completed and checked like any explicit configuration (`plan.plan_config`)."""
    out = []
    for i, r in enumerate(rows, 1):
        where = f"{source} row {i}"
        unknown = sorted(set(r) - set(STEP_COLUMNS) - set(_OPTIONAL))
        if unknown:
            raise InputError("steps", f"{where}: unknown column {unknown[0]!r}; columns are {', '.join(STEP_COLUMNS)} "
                                      "(+ num_gpus, flash_attention, attention_kernel, precision, tp_comm_overlap, framework, "
                                      "peft, lora_rank, lora_target_modules, ep, etp, moe_token_dispatcher, moe_a2a_overlap, "
                                      "label)")
        for req in ("model", "tp", "pp", "step_time_s"):
            if req not in r:
                raise InputError("steps", f"{where}: missing {req}")
        try:
            model = load_model(str(r["model"]))
        except InputError as exc:
            raise InputError("steps", f"{where}: {exc.message}") from None
        tp, pp = _int(r["tp"], f"{where} tp"), _int(r["pp"], f"{where} pp")
        cp = _int(r.get("cp", 1), f"{where} cp")
        if "dp" in r:
            n = tp * pp * cp * _int(r["dp"], f"{where} dp")
            if "num_gpus" in r and _int(r["num_gpus"], f"{where} num_gpus") != n:
                raise InputError("steps", f"{where}: num_gpus {r['num_gpus']} != tp*pp*cp*dp = {n}")
        elif "num_gpus" in r:
            n = _int(r["num_gpus"], f"{where} num_gpus")
        else:
            n = cluster.num_gpus
        try:
            t = float(r["step_time_s"])
        except (TypeError, ValueError):
            raise InputError("steps", f"{where}: step_time_s must be a number of seconds (got {r['step_time_s']!r})") from None
        if not (t > 0 and math.isfinite(t)):
            raise InputError("steps", f"{where}: step_time_s must be positive (got {r['step_time_s']!r})")
        cfg: dict = {"tp": tp, "pp": pp, "cp": cp}
        for key in ("vp", "micro_batch_size", "ep", "etp"):  # ep / etp: a MoE run's expert parallelism
            if key in r:
                cfg[key] = _int(r[key], f"{where} {key}")
        if "recompute" in r:
            cfg["recompute"] = str(r["recompute"]).lower()
        if "sequence_parallel" in r:
            cfg["sequence_parallel"] = _bool(r["sequence_parallel"], f"{where} sequence_parallel")
        if "zero" in r:
            cfg["zero"] = _int(r["zero"], f"{where} zero", lo=0)
        job_kw = dict(model=model, cluster=row_cluster(cluster, n, where),
                      global_batch_size=_int(r.get("global_batch_size", model.global_batch_size), f"{where} global_batch_size"),
                      seq_length=_int(r.get("seq_length", model.seq_length), f"{where} seq_length"),
                      flash_attention=_bool(r.get("flash_attention", True), f"{where} flash_attention"),
                      tp_comm_overlap=_bool(r.get("tp_comm_overlap", False), f"{where} tp_comm_overlap"))
        if "precision" in r:
            job_kw["precision"] = str(r["precision"]).lower()
        if "attention_kernel" in r:  # flash2 for PyTorch FSDP / llm-foundry stacks (the few-shot fit moves its efficiency)
            job_kw["attention_kernel"] = str(r["attention_kernel"]).lower()
        if "framework" in r:  # the stack the step was measured on (formulation/frameworks.py)
            job_kw["framework"] = str(r["framework"]).lower()
        if "moe_token_dispatcher" in r:  # a MoE run's dispatcher (alltoall | flex) and EP all-to-all overlap
            job_kw["moe_token_dispatcher"] = str(r["moe_token_dispatcher"]).lower()
        if "moe_a2a_overlap" in r:
            job_kw["moe_a2a_overlap"] = _bool(r["moe_a2a_overlap"], f"{where} moe_a2a_overlap")
        job_kw.update(_peft_cells(r, where))
        job = build(JobSpec, job_kw, where)
        try:
            plan = plan_config(job, cfg)
        except InputError as exc:
            raise InputError("steps", f"{where}: {exc}") from None
        par = plan.parallel
        label = str(r.get("label") or r.get("name") or r.get("id") or
                    f"{model.name} tp{tp} pp{pp} dp{par.dp}" + (f" cp{cp}" if cp > 1 else "")
                    + (f" vp{par.vp}" if par.vp > 1 else "") + (f" ep{par.ep}" if par.ep > 1 else "")
                    + f" mbs{par.micro_batch_size} {par.recompute}")
        out.append(StepRow(i, label, job, par, plan.layers_per_stage, t, before_s=plan.step_time_s,
                           fits_memory=plan.fits))
    return out


def _peft_cells(r: dict, where: str) -> dict:
    """A LoRA step's settings (specs/peft.py): peft, lora_rank, lora_target_modules (separated by spaces, | or +:
    the file's commas separate its cells)."""
    out: dict = {}
    if "peft" in r:
        out["peft"] = str(r["peft"]).lower()
    if "lora_rank" in r:
        out["lora_rank"] = _int(r["lora_rank"], f"{where} lora_rank")
    if "lora_target_modules" in r:
        out["lora_target_modules"] = [m for m in re.split(r"[\s|+]+", str(r["lora_target_modules"])) if m]
    return out


MIN_STEPS = 2  # one to fit the stack's time scale, one to check it (fewshot.py: K - 1 parameters at most)


def predict_steps(rows: list[StepRow], factors: dict) -> np.ndarray:
    """The formulation's step time of every row on the cluster calibrated by `factors`
    (few-shot knob -> multiplier, `fewshot.calibrated_job`)."""
    return np.array([make_plan(calibrated_job(r.job, factors) if factors else r.job, r.parallel, r.layers).step_time_s
                     for r in rows])


def _check_duplicates(rows: list[StepRow], source: str) -> None:
    """The same configuration measured twice must agree."""
    seen: dict[tuple, StepRow] = {}
    for r in rows:
        key = (r.job.model.name, r.job.cluster.num_gpus, r.job.global_batch_size, r.job.seq_length,
               r.job.flash_attention, r.job.precision, r.job.framework, tuple(sorted(r.parallel.model_dump().items())))
        if key in seen:
            a = seen[key]
            hi, lo = max(a.measured_s, r.measured_s), min(a.measured_s, r.measured_s)
            if hi / lo > DUPLICATE_SPREAD:
                raise InputError("steps", (
                    f"{source} rows {a.index} and {r.index} are the same configuration but measured {a.measured_s:.4g} s "
                    f"and {r.measured_s:.4g} s; remeasure it (skip warm-up steps, average 20+ steps on an idle cluster)"))
        else:
            seen[key] = r


def _knob_params(fit: FewShotFit) -> list[Param]:
    """The knobs the fit moved, as multipliers of the cluster's values (1 = unchanged)."""
    out = []
    for name, f in fit.factors.items():
        b = KNOB_BY_NAME[name].bound_log
        p = Param(name, 1.0, math.exp(-b), math.exp(b), 0.1, "x", value=f, sd=f * fit.sd_log.get(name, math.nan))
        out.append(p)
    return out


def fit_steps(rows: list[StepRow], cluster: ClusterSpec, source: str) -> StepFit:
    """The few-shot fit (`fewshot.fit_few_shot`) on the measured steps: the stack's time scale,
    then only the knobs these measurements identify."""
    if len(rows) < MIN_STEPS:
        raise InputError("steps", (
            f"{len(rows)} measured step(s) in {source}: measure at least {MIN_STEPS} configurations (one fits the "
            "stack's time scale, the other checks it), e.g. the same model at another micro-batch size"))
    _check_duplicates(rows, source)
    meas = np.array([r.measured_s for r in rows])
    facts = [RowFacts.of(r.job, r.parallel.zero) for r in rows]
    fit = fit_few_shot(lambda f: predict_steps(rows, f), meas, facts)
    for r, a in zip(rows, predict_steps(rows, fit.factors)):
        r.after_s = float(a)
    before = np.array([r.before_s for r in rows])
    gpu_update, cluster_update = calibrated_fields(cluster, fit.factors)
    params = _knob_params(fit)
    out = StepFit(rows, params, rms_before=float(np.sqrt(np.mean(np.log(before / meas) ** 2))),
                  rms_after=fit.rms_after, dof=len(rows) - len(params), notes=list(fit.notes),
                  gpu_update=gpu_update, cluster_update=cluster_update)
    for p in params:
        if p.at_bound:
            side = "upper" if p.value >= p.upper * (1 - 1e-6) else "lower"
            if fit.rms_after > BAD_FIT_RMS:
                slower = (side == "lower") == (p.name != "layer_overhead_us" and p.name != "sharded_layer_overhead_us")
                raise InputError("steps", (
                    f"{p.name} is pinned at its {side} bound (x{p.lower if side == 'lower' else p.upper:.3g}) with "
                    f"{fit.rms_after:.0%} rms error: the measured steps in {source} are "
                    f"{'slower' if slower else 'faster'} than the formulation can explain; check the GPU type, the "
                    "cluster size and each row's tp/pp/micro-batch/recompute, then measure again"))
            out.notes.append(f"{p.name} sits at its {side} bound (x{p.value:.3g}); the fit is still within "
                             f"{fit.rms_after:.1%} rms, so it is kept, but the value is a limit, not an estimate.")
    if out.dof == 0:
        out.notes.append("as many measurements as parameters: an exact fit with no check; add measurements.")
    for r in rows:
        if r.fits_memory is False:
            out.notes.append(f"row {r.index} ({r.label}): the formulation's memory estimate says this configuration "
                             "does not fit, yet it ran: the memory model is conservative for it.")
    return out
