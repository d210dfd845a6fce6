"""`optimize(job)`: the fastest plan that fits, with the solver's proof.

Flow: `search.candidates.prepare` (legal shapes, dominance, memory/time pruning) -> a search
method (`search.cpsat` by default; the `search.baselines` exhaustive and alpa-dp for
comparison) -> the plans, re-evaluated with the float formulation (`plan.make_plan`) -> checks
of the verdict -> on INFEASIBLE a `Shortfall` (`diagnose`: which stage and resource is short,
by how much, and what would help) -> comparisons with the textbook Megatron-LM configuration
and with a configuration the user passes in (`plan.textbook_plan`, `plan.plan_config`).

Nothing here prints: progress goes to the `progress` callable (one dict per event).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Optional, Union

from pydantic import Field

from .diagnose import memory_shortfall, pooled_shortfall
from .errors import InputError
from .plan import (Comparison, ParallelConfig, Plan, SearchStats, SolveResult, jsonable, make_plan,
                   parallel_from_row, plan_config, textbook_plan)
from .search.candidates import Candidates, prepare
from .search.result import MethodResult, PlanStatus
from .specs import JobSpec

METHODS = ("cpsat", "exhaustive", "alpa-dp")


class OptimizeResult(SolveResult):
    """SolveResult plus the comparisons `optimize` makes."""

    textbook: Optional[Comparison] = None
    compare: Optional[Comparison] = None
    top_k_asked: int = Field(1, description="distinct configurations asked for (--top-k)")
    top_k_found: int = Field(0, description="distinct fitting configurations returned (the plan and its alternatives)")

    @property
    def top_k_cut_short(self) -> bool:
        """The one rule: fewer plans than asked and the search stopped by the time limit."""
        return self.top_k_found < self.top_k_asked and not self.search.finished


def refuse_moe_placement(job: JobSpec, field: str) -> None:
    """Placement on measured links and clusters of pools price dense layers only: a mixture-of-
    experts model is bad input there, named by the field that asked for it."""
    if job.model.is_moe:
        raise InputError(field, f"{job.model.name} is a mixture-of-experts model; placement on measured links and "
                                f"clusters of pools do not price expert parallelism yet: plan it on a cluster of one "
                                f"GPU type without --links")


def _search_fn(method: str):
    """The search function of `method` (imported on first use) and how to prepare its candidates."""
    if method == "cpsat":
        from .search.cpsat.solve import search

        return search, {}
    from .search.baselines import PREPARE_KWARGS, alpa_dp, exhaustive

    return {"exhaustive": exhaustive.search, "alpa-dp": alpa_dp.search}[method], dict(PREPARE_KWARGS)


def optimize(job: JobSpec, method: str = "cpsat", time_limit_s: float = 60, workers: int = 1, top_k: int = 1,
             seed: int = 0, compare: Union[ParallelConfig, Mapping[str, Any], None] = None,
             progress: Optional[Callable[[dict], None]] = None, textbook: bool = True,
             cands: Optional[Candidates] = None, shortfall_budget_s: Optional[float] = None, links=None):
    """The fastest plan of `job` that fits, by `method` within `time_limit_s` (including
    enumeration and model building). `compare`: a configuration to compare the plan with
    (ParallelConfig, or a mapping of tp, pp, cp, vp, micro_batch_size, recompute,
    sequence_parallel, zero, layers). `textbook`: also evaluate the usual Megatron-LM
    configuration and report the speedup over it. `cands`: candidates prepared before (the
    admission cache's). `shortfall_budget_s`: time an INFEASIBLE verdict's fewest-GPUs search
    may take (default: what is left of the limit; 0: none, so the answer is the same at any
    limit). `links`: measured node x node links (`placement.links.LinkMatrix`).

    A cluster with pools, or given links, is planned by the joint model (shape, split and
    placement at once: `placement.joint.run.optimize_joint`)."""
    t0 = time.perf_counter()
    method = "alpa-dp" if method == "alpa_dp" else method
    _check_arguments(method, time_limit_s, top_k, workers)
    if links is not None or job.cluster.is_mixed:
        refuse_moe_placement(job, "links" if links is not None else "cluster.pools")
        return optimize_pooled(job, links, method, time_limit_s, workers, seed, top_k, compare, shortfall_budget_s)
    search, prep_kwargs = _search_fn(method)
    cmp_plan = _compare_plan(job, compare) if compare is not None else None  # bad input fails fast

    if cands is None:
        if method == "cpsat":  # the time pruning keeps every shape that may be among the K best
            prep_kwargs = {**prep_kwargs, "top_k": int(top_k)}
        cands = prepare(job, **prep_kwargs)
    prep_s = time.perf_counter() - t0
    left = max(0.01, float(time_limit_s) - prep_s)
    kwargs = dict(top_k=int(top_k), progress=progress)
    if method == "cpsat":
        kwargs.update(workers=int(workers), seed=int(seed))
    res = search(cands, left, **kwargs)

    notes: list[str] = list(res.stats.get("notes", []))
    plans = _plans(job, cands, res, method, notes)
    status, plan, bound = _checked_verdict(job, cands, res, plans[0] if plans else None, method, notes)
    gap = max(0.0, (plan.step_time_s - bound) / plan.step_time_s) if plan is not None and bound is not None else None
    tolerance = res.stats.get("tolerance_s")
    stats = SearchStats(
        method=method, wall_time_s=time.perf_counter() - t0,
        shapes_legal=cands.num_legal, shapes_dominated=cands.num_dominated,
        shapes_pruned_memory=cands.num_pruned_memory, shapes_pruned_time=cands.num_pruned_time,
        shapes_searched=cands.num_survivors, evaluations=res.evaluations, finished=bool(res.finished),
        solver=jsonable({**{k: v for k, v in res.stats.items() if k != "notes"}, "prepare_time_s": prep_s}),
    )
    out = OptimizeResult(status=status, plan=plan, bound_step_time_s=bound, gap=gap, tolerance_s=tolerance,
                         alternatives=plans[1:], search=stats, notes=notes, top_k_asked=int(top_k),
                         top_k_found=len(plans) if plan is not None else 0, shortfall=None)
    if plan is not None and out.top_k_cut_short:
        notes.append(f"{out.top_k_found} of {out.top_k_asked} plans within the time limit")
    if status == "INFEASIBLE":
        left_s = max(0.0, float(time_limit_s) - (time.perf_counter() - t0))
        out.shortfall = memory_shortfall(job, cands, budget_s=left_s if shortfall_budget_s is None
                                         else min(left_s, shortfall_budget_s))
    if plan is not None and textbook:
        if time.perf_counter() - t0 > float(time_limit_s):
            notes.append("textbook comparison skipped: the time limit is spent")
        else:
            tb = textbook_plan(job)
            if tb is not None:
                out.textbook = Comparison.of("textbook Megatron-LM", tb, plan)
                if tb.step_time_s < plan.step_time_s - max(tolerance or 0.0, 1e-9 * tb.step_time_s) and status == "OPTIMAL":
                    notes.append(f"the textbook plan ({tb.step_time_s:.6g} s) beats the optimum ({plan.step_time_s:.6g} s): "
                                 f"a pruning rule is not exact for this job")
    if cmp_plan is not None:
        out.compare = Comparison.of("compare", cmp_plan, plan)
    out.search.wall_time_s = time.perf_counter() - t0
    return out


# the share of the time limit each pool's own plan may take (`pools_alone`), at most POOL_ALONE_S
POOL_ALONE_SHARE, POOL_ALONE_S = 0.1, 5.0


def optimize_pooled(job: JobSpec, links, method: str, time_limit_s: float, workers: int, seed: int, top_k: int,
                    compare, shortfall_budget_s: Optional[float] = None):
    """The joint model (`placement.joint.run.optimize_joint`) with each pool's own plan (today's
    model, equal links, at most POOL_ALONE_S each) beside it and seeding its incumbent; on
    INFEASIBLE the shortfall of `diagnose.pooled_shortfall` (its fewest-GPUs search within
    `shortfall_budget_s`, as `optimize`)."""
    from .placement.joint.run import optimize_joint

    if compare is not None:
        raise InputError("compare", "a configuration to compare with needs a cluster of one GPU type with equal links")
    t0 = time.perf_counter()
    alone = []
    share = min(POOL_ALONE_S, POOL_ALONE_SHARE * float(time_limit_s))
    for pl, view in enumerate(job.cluster.pool_views()):
        r = optimize(job.model_copy(update={"cluster": view}), time_limit_s=share, workers=workers, seed=seed,
                     textbook=False)
        if r.plan is not None:
            alone.append((pl, r.plan))
    left = max(0.05, float(time_limit_s) - (time.perf_counter() - t0))
    res = optimize_joint(job, links, method=method, time_limit_s=left, workers=workers, seed=seed, pools_alone=alone)
    if res.status == "INFEASIBLE" and res.shortfall is None:
        left_s = max(0.0, float(time_limit_s) - (time.perf_counter() - t0))
        res.shortfall = pooled_shortfall(job, left_s if shortfall_budget_s is None else min(left_s, shortfall_budget_s))
    if int(top_k) > 1:
        res.notes.append("top-k is not available for the joint model: the best plan only")
        res.top_k_asked = int(top_k)
    res.search.wall_time_s = time.perf_counter() - t0
    return res


def _check_arguments(method: str, time_limit_s, top_k, workers) -> None:
    if method not in METHODS:
        raise InputError("method", f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if time_limit_s is None or not (time_limit_s > 0):
        raise InputError("time_limit_s", f"must be a positive number of seconds (got {time_limit_s})")
    if int(top_k) < 1:
        raise InputError("top_k", f"must be at least 1 (got {top_k})")
    if int(workers) < 1:
        raise InputError("workers", f"must be at least 1 (got {workers})")


def _plans(job: JobSpec, cands: Candidates, res: MethodResult, method: str, notes: list[str]) -> list[Plan]:
    """The method's choices (best first) as plans re-evaluated by the float formulation; a
    choice that loses or invents a layer, or does not fit there, is dropped."""
    choices = [c for c in (res.top or ([res.best] if res.best else [])) if c is not None]
    if res.best is not None and (not choices or choices[0] is not res.best):
        choices = [res.best] + [c for c in choices if c is not res.best]
    plans = []
    L = job.model.num_pipeline_units
    for i, ch in enumerate(choices):
        if sum(ch.layers) != L or min(ch.layers, default=0) < 1:
            notes.append(f"plan {i + 1}'s split {list(ch.layers)} does not place each of the {L} layers on a stage: dropped")
            continue
        par = parallel_from_row(job, cands.shapes.row(ch.index))
        p = make_plan(job, par, job.model.units_to_layers(ch.layers))
        if not p.fits:
            notes.append(f"plan {i + 1} ({par.describe()}) does not fit under the float formulation: dropped")
            continue
        if not math.isclose(p.step_time_s, ch.objective_s, rel_tol=1e-9, abs_tol=1e-12):
            notes.append(f"{method} reported {ch.objective_s:.9g} s for plan {i + 1}; the float formulation gives "
                         f"{p.step_time_s:.9g} s (reported time is the formulation's)")
        plans.append(p)
    return plans


def _checked_verdict(job: JobSpec, cands: Candidates, res: MethodResult, plan: Optional[Plan], method: str,
                     notes: list[str]) -> tuple[PlanStatus, Optional[Plan], Optional[float]]:
    """Never trust a verdict unchecked: a plan must back OPTIMAL/FEASIBLE, any fitting plan
    refutes INFEASIBLE, and the bound may not exceed the plan. (status, plan, bound)."""
    status, bound = res.status, res.bound_s
    if status in ("OPTIMAL", "FEASIBLE") and plan is None:
        notes.append(f"{method} answered {status} but returned no plan that fits")
        status = "UNKNOWN"
    if status == "INFEASIBLE" and cands.incumbent_index is not None:
        par = parallel_from_row(job, cands.shapes.row(cands.incumbent_index))
        plan = make_plan(job, par, job.model.units_to_layers(cands.incumbent_layers))
        notes.append(f"{method} answered INFEASIBLE but {par.describe()} with layers {cands.incumbent_layers} fits: "
                     f"verdict refuted, returning that plan without a bound")
        status, bound = "FEASIBLE", None
    if plan is not None and bound is not None and bound > plan.step_time_s * (1 + 1e-9):
        notes.append(f"bound {bound:.9g} s exceeds the plan's {plan.step_time_s:.9g} s: bound discarded")
        bound = None
        if status == "OPTIMAL":
            status = "FEASIBLE"
    return status, plan, bound


def _compare_plan(job: JobSpec, compare: Union[ParallelConfig, Mapping[str, Any]]):
    """The plan of a configuration to compare with (defaults as `solveplan evaluate`); InputError
    naming `compare.<key>` when it is illegal."""
    if isinstance(compare, ParallelConfig):
        cfg: dict[str, Any] = compare.model_dump()
    elif isinstance(compare, Mapping):
        cfg = dict(compare)
    else:
        raise InputError("compare", "give a configuration such as tp=8,pp=2,mbs=1")
    return plan_config(job, cfg, field="compare")
