"""`optimize(job)`: the fastest plan that fits, with the solver's proof.

Flow: `candidates.prepare` (legal shapes, dominance, memory/time pruning) -> a search method
(`cpsat` by default; the `exhaustive` and `alpa-dp` baselines for comparison) -> the plan,
re-evaluated with the float formulation (`make_plan`) -> checks of the verdict -> on
INFEASIBLE a `Shortfall` (which stage and resource is short, by how much, and what would
help) -> comparisons with the textbook Megatron-LM configuration and with a configuration the
user passes in.

Nothing here prints: progress goes to the `progress` callable (one dict per event).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from .search.candidates import Candidates, prepare
from .errors import InputError
from .formulation.pipeline import step_time_batch
from .formulation.splits import balanced_layers_matrix, balanced_split, least_memory_splits
from .formulation.job import job_coefficients
from .space.shapes import RECOMPUTE_CODES
from .plan import Out, ParallelConfig, Plan, SearchStats, Shortfall, SolveResult, make_plan, parallel_from_row
from .specs import Constraints, JobSpec

GIB = 1024**3
METHODS = ("cpsat", "exhaustive", "alpa-dp")
FEWEST_GPUS_MAX = 65536  # the search for the fewest GPUs that fit stops here
FEWEST_GPUS_BUDGET_S = 20.0


class Comparison(Out):
    """Another configuration evaluated by the same float formulation, against the plan."""

    label: str
    parallel: ParallelConfig
    layers_per_stage: list[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: float
    fits: bool
    speedup: Optional[float] = None  # its step time / the plan's (> 1: the plan is faster)
    note: Optional[str] = None


class OptimizeResult(SolveResult):
    """SolveResult plus the comparisons `optimize` makes."""

    textbook: Optional[Comparison] = None
    compare: Optional[Comparison] = None


# ----------------------------------------------------------------------------- search
def _search_fn(method: str):
    """The search function of `method`, imported lazily; InputError when it is unavailable."""
    if method == "cpsat":
        from .search.cpsat import solve

        return solve.search, {}
    mod_name = {"exhaustive": "exhaustive", "alpa-dp": "alpa_dp", "alpa_dp": "alpa_dp"}.get(method)
    if mod_name is None:
        raise InputError("--method", f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    try:
        import importlib

        mod = importlib.import_module(f"solveplan.search.baselines.{mod_name}")
        fn = getattr(mod, "search")
    except (ImportError, AttributeError) as exc:
        raise InputError("--method", f"method {method} is not available in this installation ({exc}); "
                                     f"use --method cpsat") from None
    try:
        from .search.baselines import PREPARE_KWARGS
    except ImportError:
        PREPARE_KWARGS = {"prune_time": False, "apply_dominance": False}
    return fn, dict(PREPARE_KWARGS)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def optimize(job: JobSpec, method: str = "cpsat", time_limit_s: float = 60, workers: int = 1, top_k: int = 1,
             seed: int = 0, compare: Union[ParallelConfig, Mapping[str, Any], None] = None,
             progress: Optional[Callable[[dict], None]] = None, textbook: bool = True,
             cands: Optional[Candidates] = None) -> OptimizeResult:
    """The fastest plan of `job` that fits, by `method` within `time_limit_s` (including
    enumeration and model building). `compare`: a configuration to compare the plan with
    (ParallelConfig, or a mapping of tp, pp, cp, vp, micro_batch_size, recompute,
    sequence_parallel, zero, layers). `textbook`: also evaluate the usual Megatron-LM
    configuration and report the speedup over it."""
    t0 = time.perf_counter()
    method = "alpa-dp" if method == "alpa_dp" else method
    if method not in METHODS:
        raise InputError("--method", f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if time_limit_s is None or not (time_limit_s > 0):
        raise InputError("--time-limit", f"must be a positive number of seconds (got {time_limit_s})")
    if int(top_k) < 1:
        raise InputError("--top-k", f"must be at least 1 (got {top_k})")
    if int(workers) < 1:
        raise InputError("--workers", f"must be at least 1 (got {workers})")
    search, prep_kwargs = _search_fn(method)
    cmp_plan = _compare_plan(job, compare) if compare is not None else None  # bad input fails fast

    if cands is None:
        if int(top_k) > 1 and method == "cpsat":
            # the time pruning is relative to the best incumbent: it may remove the 2nd..k-th best
            prep_kwargs = {**prep_kwargs, "prune_time": False}
        cands = prepare(job, **prep_kwargs)
    prep_s = time.perf_counter() - t0
    left = max(0.01, float(time_limit_s) - prep_s)
    kwargs = dict(top_k=int(top_k), progress=progress)
    if method == "cpsat":
        kwargs.update(workers=int(workers), seed=int(seed))
    res = search(cands, left, **kwargs)
    notes: list[str] = list((res.stats or {}).get("notes", []))
    status = res.status
    plan, alternatives = None, []
    bound = res.bound_s
    choices = [c for c in (res.top or ([res.best] if res.best else [])) if c is not None]
    if res.best is not None and (not choices or choices[0] is not res.best):
        choices = [res.best] + [c for c in choices if c is not res.best]
    for i, ch in enumerate(choices):
        par = parallel_from_row(job, cands.shapes.row(ch.index))
        p = make_plan(job, par, ch.layers)
        if not p.fits:
            notes.append(f"plan {i + 1} ({_describe(par)}) does not fit under the float formulation: dropped")
            continue
        if not math.isclose(p.step_time_s, ch.objective_s, rel_tol=1e-9, abs_tol=1e-12):
            notes.append(f"{method} reported {ch.objective_s:.9g} s for plan {i + 1}; the float formulation gives "
                         f"{p.step_time_s:.9g} s (reported time is the formulation's)")
        if plan is None:
            plan = p
        else:
            alternatives.append(p)
    if status in ("OPTIMAL", "FEASIBLE") and plan is None:
        notes.append(f"{method} answered {status} but returned no plan that fits")
        status = "UNKNOWN"
    # never trust a verdict unchecked: a fitting plan refutes INFEASIBLE
    if status == "INFEASIBLE" and cands.incumbent_index is not None:
        par = parallel_from_row(job, cands.shapes.row(cands.incumbent_index))
        plan = make_plan(job, par, cands.incumbent_layers)
        notes.append(f"{method} answered INFEASIBLE but {_describe(par)} with layers {cands.incumbent_layers} fits: "
                     f"verdict refuted, returning that plan without a bound")
        status, bound = "FEASIBLE", None
    if plan is not None and bound is not None and bound > plan.step_time_s * (1 + 1e-9):
        notes.append(f"bound {bound:.9g} s exceeds the plan's {plan.step_time_s:.9g} s: bound discarded")
        bound = None
        if status == "OPTIMAL":
            status = "FEASIBLE"
    gap = None
    if plan is not None and bound is not None:
        gap = max(0.0, (plan.step_time_s - bound) / plan.step_time_s)
    tolerance = (res.stats or {}).get("tolerance_s")
    shortfall = shortfall_for(job, cands) if status == "INFEASIBLE" else None

    stats = SearchStats(
        method=method, wall_time_s=time.perf_counter() - t0,
        shapes_legal=cands.num_legal, shapes_dominated=cands.num_dominated,
        shapes_pruned_memory=cands.num_pruned_memory, shapes_pruned_time=cands.num_pruned_time,
        shapes_searched=cands.num_survivors, evaluations=res.evaluations, finished=bool(res.finished),
        solver=_jsonable({**{k: v for k, v in (res.stats or {}).items() if k != "notes"},
                          "prepare_time_s": prep_s}),
    )
    out = OptimizeResult(status=status, plan=plan, bound_step_time_s=bound, gap=gap, tolerance_s=tolerance,
                         alternatives=alternatives, shortfall=shortfall, search=stats, notes=notes)
    if plan is not None:
        if textbook and time.perf_counter() - t0 > float(time_limit_s):
            notes.append("textbook comparison skipped: the time limit is spent")
        elif textbook:
            tb = textbook_plan(job)
            if tb is not None:
                out.textbook = _comparison("textbook Megatron-LM", tb, plan)
                if tb.step_time_s < plan.step_time_s - max(tolerance or 0.0, 1e-9 * tb.step_time_s) and status == "OPTIMAL":
                    notes.append(f"the textbook plan ({tb.step_time_s:.6g} s) beats the optimum ({plan.step_time_s:.6g} s): "
                                 f"a pruning rule is not exact for this job")
        if cmp_plan is not None:
            out.compare = _comparison("compare", cmp_plan, plan)
    elif cmp_plan is not None:
        out.compare = _comparison("compare", cmp_plan, None)
    out.search.wall_time_s = time.perf_counter() - t0
    return out


def _describe(par: ParallelConfig) -> str:
    return (f"tp={par.tp} pp={par.pp} dp={par.dp} cp={par.cp} vp={par.vp} mbs={par.micro_batch_size} "
            f"recompute={par.recompute} sp={'on' if par.sequence_parallel else 'off'} zero={par.zero}")


def _comparison(label: str, other: Plan, plan: Optional[Plan]) -> Comparison:
    note = None if other.fits else "does not fit in GPU memory"
    return Comparison(label=label, parallel=other.parallel, layers_per_stage=other.layers_per_stage,
                      step_time_s=other.step_time_s, tokens_per_s=other.tokens_per_s, mfu=other.mfu,
                      peak_memory_bytes=other.peak_memory_bytes, fits=other.fits,
                      speedup=(other.step_time_s / plan.step_time_s) if plan is not None else None, note=note)


# ----------------------------------------------------------------------------- textbook & compare
def textbook_plan(job: JobSpec) -> Optional[Plan]:
    """The best fitting plan among the usual Megatron-LM defaults: TP inside a node, no CP,
    no interleaving (vp=1), selective recomputation, sequence parallelism when tp > 1, the
    distributed optimizer (zero=1) when there is data parallelism, the balanced layer split;
    any tp, pp and micro-batch size the job allows. Each default gives way only where the
    job's constraints exclude it. None when no such plan fits."""
    from .space.enumeration import enumerate_shapes

    L = job.model.num_layers
    cons = job.constraints
    pref: dict[str, Any] = {"cp": (1,), "vp": (1,), "recompute": ("selective",), "tp_max": job.cluster.gpus_per_node}
    data = cons.model_dump()
    for key, val in pref.items():
        trial = Constraints(**{**data, key: val if not key.endswith("_max") else min(val, data.get(key) or val)})
        if enumerate_shapes(job.model_copy(update={"constraints": trial}), apply_dominance=False).shapes.tp.size:
            data = trial.model_dump()
    tjob = job.model_copy(update={"constraints": Constraints(**data)})
    shapes = enumerate_shapes(tjob, apply_dominance=False).shapes
    if len(shapes) == 0:
        return None
    mask = np.ones(len(shapes), dtype=bool)

    def prefer(cond):
        nonlocal mask
        m2 = mask & cond
        if m2.any():
            mask = m2

    prefer(shapes.sequence_parallel == (shapes.tp > 1))
    prefer(shapes.zero == np.where(shapes.dp * shapes.cp > 1, 1, 0))
    shapes = shapes.take(np.flatnonzero(mask))
    co = job_coefficients(job, shapes)
    step, _, fits = step_time_batch(co, balanced_layers_matrix(L, shapes.pp))
    step = np.where(fits, step, np.inf)
    if not np.isfinite(step).any():
        return None
    # fastest; ties by the canonical key
    best = min(np.flatnonzero(step == step.min()).tolist(),
               key=lambda k: parallel_from_row(job, shapes.row(k)).key())
    par = parallel_from_row(job, shapes.row(best))
    return make_plan(job, par, balanced_split(L, par.pp))


_COMPARE_KEYS = ("tp", "pp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero", "layers", "dp",
                 "num_microbatches")


def _compare_plan(job: JobSpec, compare) -> Plan:
    """Evaluate a user configuration (defaults as `solveplan evaluate`: balanced split,
    selective recompute, SP when tp > 1, zero=1 when dp*cp > 1); InputError when illegal."""
    from .space.enumeration import config_violations

    if isinstance(compare, ParallelConfig):
        cfg: dict[str, Any] = compare.model_dump()
    elif isinstance(compare, Mapping):
        cfg = dict(compare)
    else:
        raise InputError("--compare", "give a configuration such as tp=8,pp=2,mbs=1")
    unknown = sorted(set(cfg) - set(_COMPARE_KEYS))
    if unknown:
        raise InputError("--compare", f"unknown key {unknown[0]!r}; use {', '.join(_COMPARE_KEYS[:9])}")
    tp, pp, cp, vp = (int(cfg.get(k) or 1) for k in ("tp", "pp", "cp", "vp"))
    mbs = int(cfg.get("micro_batch_size") or 1)
    rc = cfg.get("recompute") or "selective"
    if rc not in RECOMPUTE_CODES:
        raise InputError("--compare", f"recompute={rc!r}: choose none, selective or full")
    sp = cfg.get("sequence_parallel")
    sp = (tp > 1) if sp is None else bool(sp)
    N = job.cluster.num_gpus
    zero = cfg.get("zero")
    if zero is None:
        zero = 1 if N % (tp * cp * pp) == 0 and N // (tp * cp * pp) * cp > 1 else 0
    dp, errs = config_violations(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=rc,
                                 sequence_parallel=sp, zero=int(zero))
    if cfg.get("dp") is not None and not errs and int(cfg["dp"]) != dp:
        errs.append(f"--compare: dp={cfg['dp']} but tp*cp*pp*dp must equal the {N} GPUs (dp={dp})")
    if errs:
        raise InputError("--compare", "; ".join(e.replace("--", "") for e in errs))
    layers = cfg.get("layers")
    if layers is None:
        layers = balanced_split(job.model.num_layers, pp)
    else:
        layers = [int(x) for x in layers]
        if len(layers) != pp or min(layers) < 1 or sum(layers) != job.model.num_layers:
            raise InputError("--compare", f"layers={layers}: give {pp} counts >= 1 summing to {job.model.num_layers}")
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=mbs,
                         num_microbatches=job.global_batch_size // (dp * mbs), recompute=rc, sequence_parallel=sp,
                         zero=int(zero))
    return make_plan(job, par, layers)


# ----------------------------------------------------------------------------- infeasible
def memory_frugal(job: JobSpec) -> JobSpec:
    """The job restricted to the least-memory value of every knob the constraints allow.

    Some plan of `job` fits iff some plan of the result fits: per-GPU memory never grows
    with full (over selective, over no) recomputation, with a smaller micro-batch (in-flight
    activations are min(mbs*(p-i), B/dp) micro-batch-sequences; logits scale with mbs), with
    vp = 1 (interleaving keeps more chunks in flight) or with sequence parallelism on; the
    degrees and the ZeRO stage stay free."""
    cons = job.constraints
    order = [r for r in ("full", "selective", "none") if cons.allows("recompute", r)]
    mbs = min((b for b in range(1, job.global_batch_size + 1) if cons.allows("micro_batch_size", b)), default=None)
    update = {"vp": (1,) if cons.allows("vp", 1) else cons.vp}
    if order:
        update["recompute"] = (order[0],)
    if mbs is not None:
        update["micro_batch_size"] = (mbs,)
    if cons.sequence_parallel is None:
        update["sequence_parallel"] = (True, False)  # True where tp > 1; tp = 1 needs False
    return job.model_copy(update={"constraints": cons.model_copy(update=update)})


def _job_fits(job: JobSpec) -> Optional[bool]:
    """Does any plan of `job` fit in memory (exactly: some shape has a fitting split)?"""
    job = memory_frugal(job)
    cands = prepare(job, prune_time=False)
    if cands.incumbent_index is not None:
        return True
    if cands.num_survivors == 0:
        return False
    return bool(cands.feasible.any())


def _fewest_gpus(job: JobSpec, deadline: float) -> tuple[Optional[int], str]:
    """The fewest GPUs of the job's cluster kind (more nodes of the same family) on which some
    plan fits: doubling, then bisection between the last miss and the first hit."""
    from .catalog import _FAMILY_RE, catalog_families, family_cluster

    cl = job.cluster
    m = _FAMILY_RE.match(cl.name.lower())
    fam = m.group("family") if m and m.group("family") in catalog_families() else None

    def cluster(nodes: int):
        if fam is not None:
            return family_cluster(fam, nodes * cl.gpus_per_node)
        links = tuple(x for x in cl.link_overrides if x.src < nodes and x.dst < nodes)
        return cl.model_copy(update={"num_nodes": nodes, "name": f"{cl.name}[{nodes} nodes]", "link_overrides": links})

    label = f"{fam}x<N>" if fam else f"{cl.name} with more nodes"
    seen: dict[int, bool] = {}

    def fits(nodes: int) -> Optional[bool]:
        if time.perf_counter() > deadline:
            return None
        if nodes not in seen:
            seen[nodes] = bool(_job_fits(job.model_copy(update={"cluster": cluster(nodes)})))
        return seen[nodes]

    lo, hi = cl.num_nodes, None
    n = cl.num_nodes * 2
    while n * cl.gpus_per_node <= FEWEST_GPUS_MAX:
        f = fits(n)
        if f is None:
            return None, label
        if f:
            hi = n
            break
        lo = n
        n *= 2
    if hi is None:
        return None, label
    while hi - lo > 1:
        mid = (lo + hi) // 2
        f = fits(mid)
        if f is None:
            break
        if f:
            hi = mid
        else:
            lo = mid
    return hi * cl.gpus_per_node, label


def shape_shortfall(job: JobSpec) -> Shortfall:
    """No legal shape at all: divisibility (heads, batch, layers) or the constraints."""
    N = job.cluster.num_gpus
    cons = job.constraints.model_dump(exclude_defaults=True)
    suggestions = [f"a global batch size divisible by a data-parallel degree that divides {N} GPUs"]
    if cons:
        suggestions.insert(0, f"relax the constraints ({', '.join(sorted(cons))})")
    return Shortfall(resource="legal shapes", suggestions=suggestions,
                     message=(f"no legal parallel shape for {job.model.name} on {N} GPUs with global batch "
                              f"{job.global_batch_size}, sequence {job.seq_length}: divisibility (heads, batch, "
                              f"layers) and the constraints exclude every (tp, cp, pp, dp, micro-batch) combination"))


def shortfall_for(job: JobSpec, cands: Candidates, budget_s: float = FEWEST_GPUS_BUDGET_S) -> Shortfall:
    """Why no plan fits: the stage and resource that are short and by how much (the split of
    the shape that needs the least memory), and what would help: recomputation, a smaller
    micro-batch, the fewest GPUs of the same family on which a plan fits."""
    deadline = time.perf_counter() + budget_s
    gpu = job.cluster.gpu
    L = job.model.num_layers
    if cands.num_legal - cands.num_dominated <= 0:
        return shape_shortfall(job)
    # the shapes with the least memory lower bounds (kept by prepare): their least-memory splits
    shapes = cands.least_memory_shapes
    rows = [shapes.row(i) for i in range(len(shapes))]
    pars = [parallel_from_row(job, r) for r in rows]
    co = job_coefficients(job, shapes)
    peak, lay = least_memory_splits(co, L)
    k = int(np.argmin(peak))
    par = pars[k]
    split = [int(x) for x in lay[k, :par.pp]]
    plan = make_plan(job, par, split)
    stage = max(plan.stages, key=lambda s: s.memory_bytes.total)
    need, cap = stage.memory_bytes.total, plan.capacity_bytes
    mb = stage.memory_bytes
    where = ("the only stage" if par.pp == 1 else "the first stage" if stage.stage == 0
             else "the last stage" if stage.stage == par.pp - 1 else f"stage {stage.stage}")
    parts = ", ".join(f"{name} {getattr(mb, name) / GIB:.1f}" for name in ("params", "grads", "optimizer", "activations", "other"))
    suggestions: list[str] = []
    # recomputation and micro-batch: the same shape with the knob changed, its best split
    tries = []
    if par.recompute != "full":
        tries.append(("recompute", "full", "full activation recomputation (--recompute full)"))
    if par.micro_batch_size > 1:
        tries.append(("micro_batch_size", 1, "micro-batch size 1 (--micro-batch-size 1)"))
    for knob, val, text in tries:
        alt = par.model_copy(update={knob: val, "num_microbatches": job.global_batch_size // (par.dp * (val if knob == "micro_batch_size" else par.micro_batch_size))})
        pk, _ = least_memory_splits(job_coefficients(job, alt.shapes()), L)
        allowed = job.constraints.allows(knob, val)
        verdict = "fits" if pk[0] <= cap else f"still needs {pk[0] / GIB:.1f} GiB"
        suggestions.append(f"{text}: {verdict} with {_describe(alt)}" + ("" if allowed else " (your constraints exclude it)"))
    done = [t for c, t in ((par.recompute == "full", "full recomputation"), (par.micro_batch_size == 1, "micro-batch size 1")) if c]
    if done:
        suggestions.append(f"the least-memory plan already uses {' and '.join(done)}")
    gpus, label = _fewest_gpus(job, deadline)
    if gpus is not None:
        suggestions.append(f"at least {gpus} GPUs ({label}): the fewest of this kind on which a plan fits")
    else:
        suggestions.append(f"more GPUs ({label}): none up to {FEWEST_GPUS_MAX} GPUs found within {budget_s:.0f} s")
    cons = job.constraints.model_dump(exclude_defaults=True)
    if cons:
        suggestions.append(f"relax the constraints ({', '.join(sorted(cons))}): they exclude shapes that might fit")
    message = (f"GPU memory is short on {where} by {(need - cap) / GIB:.1f} GiB: it needs {need / GIB:.1f} GiB "
               f"({parts}) with the least-memory plan ({_describe(par)}, layers {split}) but {gpu.name} has "
               f"{cap / GIB:.1f} GiB usable")
    return Shortfall(resource="memory", stage=stage.stage, needed_bytes=need, available_bytes=cap,
                     short_bytes=need - cap, best_shape=rows[k], suggestions=suggestions, message=message)
