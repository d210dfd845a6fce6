"""`optimize(job)`: the fastest plan that fits, with the solver's proof.

Flow: `search.candidates.prepare` (legal shapes, dominance, memory/time pruning) -> a search
method (`search.cpsat` by default; the `search.baselines` exhaustive and alpa-dp for
comparison) -> the plans, re-evaluated with the float formulation (`plan.make_plan`) -> checks
of the verdict -> on INFEASIBLE a `Shortfall` (`diagnose`: which stage and resource is short,
by how much, and what would help) -> comparisons with the textbook Megatron-LM configuration
and with a configuration the user passes in (`plan.textbook_plan`, `plan.plan_config`).
On a cluster of pools or measured links the same steps are the joint model's: each pool's own
plan (`_search_placed`), then `joint.optimize_joint` (`search.joint`'s candidates and search
method, the plan a `placed.PlacedPlan` on the nodes, its verdict and comparisons).

Nothing here prints: progress goes to the `progress` callable (one dict per event).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..diagnose import memory_shortfall, pooled_shortfall
from ..errors import InputError
from ..formulation.links import refuse_moe_placement
from ..plan import (
    Comparison,
    Cost,
    OptimizeResult,
    ParallelConfig,
    Plan,
    SearchStats,
    TieBreak,
    jsonable,
    make_plan,
    parallel_from_row,
    plan_config,
    textbook_plan,
)
from ..search.candidates import Candidates, prepare
from ..search.phases import Phase, Phases
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, MethodResult, PlanStatus
from ..specs import JobSpec
from ..specs.deadline import Deadline, DeadlineExpired

METHODS = ("cpsat", "exhaustive", "alpa-dp")


def _search_fn(method: str):
    """The search function of `method` (imported on first use) and how to prepare its candidates."""
    if method == "cpsat":
        from ..search.cpsat.solve import search

        return search, {}
    from ..search.baselines import PREPARE_KWARGS, alpa_dp, exhaustive

    return {"exhaustive": exhaustive.search, "alpa-dp": alpa_dp.search}[method], dict(PREPARE_KWARGS)


def optimize(job: JobSpec, method: str = "cpsat", time_limit_s: float = 60, workers: int = 1, top_k: int = 1,
             seed: int = 0, compare: ParallelConfig | Mapping[str, Any] | None = None,
             progress: Callable[[dict], None] | None = None, textbook: bool = True,
             cands: Candidates | None = None, shortfall_budget_s: float | None = None, links=None,
             deadline: Deadline | None = None) -> OptimizeResult:
    """The fastest plan of `job` that fits, by `method` within `time_limit_s` (including
    enumeration and model building). `compare`: a configuration to compare the plan with
    (ParallelConfig, or a mapping of tp, pp, cp, vp, micro_batch_size, recompute,
    sequence_parallel, zero, layers). `textbook`: also evaluate the usual Megatron-LM
    configuration and report the speedup over it. `cands`: candidates prepared before (the
    admission cache's). `shortfall_budget_s`: time an INFEASIBLE verdict's fewest-GPUs search
    may take (default: what is left of the limit; 0: none, so the answer is the same at any
    limit). `links`: measured node x node links (`placement.links.LinkMatrix`). `deadline`: the
    caller's (`specs.deadline`): the call keeps to the earlier of it and `time_limit_s`, and
    stopping it stops the work at once (the answer is then UNKNOWN or the best plan known). The job's
    `prefer`: "fastest" (the optimum) or "simple" (`search.simple`: the plan with the fewest
    departures from the textbook plan among those within `job.tolerance_rel` of the optimum;
    default: the optimum's interval half-width, `calibration.intervals`). Every plan carries its
    intervals, and `margins` says whether its lead over the runner-up and the textbook plan is real.

    One path for every cluster: the search (`_search`: candidates, the method, the plans, the
    checked verdict; on a cluster with pools or given links the joint model -- shape, split and
    placement at once, `_search_placed`), then the shortfall of an INFEASIBLE verdict, the
    comparisons, the job's preference and the intervals, into one `OptimizeResult`."""
    t0 = time.perf_counter()
    method = "alpa-dp" if method == "alpa_dp" else method
    _check_arguments(method, time_limit_s, top_k, workers)
    dl = (deadline if deadline is not None else Deadline()).within(float(time_limit_s))
    placed = links is not None or job.cluster.is_mixed
    if placed:
        refuse_moe_placement(job, "links" if links is not None else "cluster.pools")
        if compare is not None:
            raise InputError("compare", "a configuration to compare with needs a cluster of one GPU type with equal "
                                        "links")
    cmp_plan = _compare_plan(job, compare) if compare is not None else None  # bad input fails fast
    found = _search(job, method, float(time_limit_s), int(top_k), workers, seed, progress, cands, links, dl, t0)
    if found.out is None:
        return out_of_time(method, t0, int(top_k), "the time limit was spent preparing the candidates: no plan")
    out = found.out
    if out.status == INFEASIBLE and out.shortfall is None:
        left_s = dl.left_s()
        budget_s = left_s if shortfall_budget_s is None else min(left_s, shortfall_budget_s)
        out.shortfall = memory_shortfall(job, found.cands, budget_s=budget_s) if found.cands is not None \
            else pooled_shortfall(job, budget_s)  # the joint model: no single-type candidates
    plan = out.plan
    if plan is not None and textbook and not placed:
        _compare_textbook(job, out, plan, dl)
    if cmp_plan is not None:
        out.compare = Comparison.of("compare", cmp_plan, plan)
    if job.prefer == "simple" and plan is not None:  # the job's preference (a spec field, not a status)
        if placed:
            out = _prefer_simple_pooled(job, out, links, method, dl.left_s(), workers, seed, progress, dl)
        else:
            _prefer_simple(job, out, plan, method, workers, seed, time.perf_counter() + dl.left_s(), progress,
                           found.prep_kwargs)
    out = _annotate(job, out, found.runner_up)
    out.search.wall_time_s = time.perf_counter() - t0
    return out


@dataclass
class _Found:
    """What the search step hands on: the result so far (None: the time limit passed before
    there was anything to search), the runner-up for the margin, the candidates and how
    they were prepared (the single-type path's, for the shortfall and prefer simple)."""

    out: OptimizeResult | None
    runner_up: Plan | None = None
    cands: Candidates | None = None
    prep_kwargs: dict = field(default_factory=dict)


def _search(job: JobSpec, method: str, time_limit_s: float, top_k: int, workers: int, seed: int, progress,
            cands: Candidates | None, links, dl: Deadline, t0: float) -> _Found:
    """The search step of `optimize`: the joint model on a cluster with pools or given links
    (`_search_placed`), else the candidates, `method`'s search, its plans and the checked verdict."""
    if links is not None or job.cluster.is_mixed:
        return _Found(_search_placed(job, links, method, time_limit_s, workers, seed, top_k, progress, dl))
    search, prep_kwargs = _search_fn(method)
    # one plan more than asked, for the winner's margin over the runner-up (not with candidates
    # prepared before for fewer: their time pruning may have dropped it)
    want = max(2, top_k) if cands is None else top_k
    if cands is None:
        if method == "cpsat":  # the time pruning keeps every shape that may be among the K best
            prep_kwargs = {**prep_kwargs, "top_k": want}
        try:
            cands = prepare(job, **prep_kwargs, deadline=dl)
        except DeadlineExpired:
            return _Found(None)
    prep_s = time.perf_counter() - t0
    left = max(0.01, dl.left_s())
    kwargs: dict[str, Any] = dict(top_k=want, progress=progress)
    if method == "cpsat":
        kwargs.update(workers=int(workers), seed=int(seed), deadline=dl)
    res = search(cands, left, **kwargs)

    notes: list[str] = [n for n in res.stats.get("notes", []) if want == top_k or "distinct configuration" not in n]
    plans = _plans(job, cands, res, method, notes)
    runner_up = plans[1] if len(plans) > 1 else None
    plans = plans[:top_k]
    status, plan, bound = _checked_verdict(job, cands, res, plans[0] if plans else None, method, notes)
    gap = max(0.0, (plan.step_time_s - bound) / plan.step_time_s) if plan is not None and bound is not None else None
    out = OptimizeResult(status=status, plan=plan, bound_step_time_s=bound, gap=gap,
                         tolerance_s=res.stats.get("tolerance_s"), alternatives=plans[1:],
                         search=SearchStats.of(method, time.perf_counter() - t0, cands, res, prepare_time_s=prep_s),
                         notes=notes, top_k_asked=top_k,
                         top_k_found=len(plans) if plan is not None else 0, shortfall=None)
    if plan is not None and out.top_k_cut_short:
        out.notes.append(f"{out.top_k_found} of {out.top_k_asked} plans within the time limit")
    return _Found(out, runner_up, cands, prep_kwargs)


def _compare_textbook(job: JobSpec, out: OptimizeResult, plan: Plan, dl: Deadline) -> None:
    """The textbook Megatron-LM plan beside `out.plan` (`plan`, when time is left); a textbook plan that
    beats a proven optimum by more than the tolerance says a pruning rule is not exact."""
    if dl.expired():
        out.notes.append("textbook comparison skipped: the time limit is spent")
        return
    tb = textbook_plan(job)
    if tb is None:
        return
    out.textbook = Comparison.of("textbook Megatron-LM", tb, plan)
    if tb.step_time_s < plan.step_time_s - max(out.tolerance_s or 0.0, 1e-9 * tb.step_time_s) and out.status == OPTIMAL:
        out.notes.append(f"the textbook plan ({tb.step_time_s:.6g} s) beats the optimum ({plan.step_time_s:.6g} s): "
                         f"a pruning rule is not exact for this job")


def _prefer_simple(job: JobSpec, out: OptimizeResult, fastest: Plan, method: str, workers: int, seed: int,
                   deadline: float, progress, prep_kwargs: dict) -> None:
    """Replace the fastest plan of `out` by the simplest within the tolerance (`search.simple`);
    status, bound and gap become those of the tie-break's proof."""
    from ..calibration.intervals import plan_band
    from ..search.simple import STATEMENT, departure_names, reference, simplest

    tb = out.textbook  # fastest: out.plan
    tol = plan_band(job, fastest.parallel.zero).half_width_rel if job.tolerance_rel is None else job.tolerance_rel
    search, _ = _search_fn(method)
    kw = dict(workers=int(workers), seed=int(seed)) if method == "cpsat" else {}
    ref = reference(tb.parallel.model_dump() if tb is not None else None)
    sr = simplest(job, ref, fastest.step_time_s, tol, deadline, lambda c, s: search(c, max(0.01, s), **kw),
                  {k: v for k, v in prep_kwargs.items() if k != "top_k"}, progress)
    level_cands, level = sr.cands, sr.result  # set together (`search.simple.SimpleResult`)
    found = _plans(job, level_cands, level, method, out.notes) if level_cands is not None and level is not None \
        else []
    chosen: Plan | None = None
    if found and level_cands is not None and level is not None:
        # the level's verdict checked as any other; proven only if T* and every earlier level are
        level_status, chosen, bound = _checked_verdict(job, level_cands, level, found[0], method, out.notes)
        status = OPTIMAL if OPTIMAL == level_status == sr.status == out.status else FEASIBLE
    if chosen is None:  # nothing proven within the limit: keep the fastest, say so
        out.notes.append("prefer simple: the tie-break did not finish within the time limit; the fastest plan")
        chosen, bound, status = fastest, out.bound_step_time_s, FEASIBLE if out.status == OPTIMAL else out.status
    row = chosen.parallel.model_dump()
    out.tie_break = TieBreak(tolerance_rel=tol, threshold_s=sr.threshold_s, fastest=fastest,
                             fastest_bound_s=out.bound_step_time_s,
                             departures=departure_names(row, chosen.layers_per_stage, ref),
                             levels=[vars(lv) for lv in sr.levels], best_without_exotic_s=sr.best_without_exotic_s,
                             statement=STATEMENT)
    out.prefer, out.proof, out.status, out.plan = "simple", STATEMENT, status, chosen
    out.bound_step_time_s = bound
    out.gap = max(0.0, (chosen.step_time_s - bound) / chosen.step_time_s) if bound is not None else None
    if out.textbook is not None:
        out.textbook.speedup = out.textbook.step_time_s / chosen.step_time_s


JOINT_STATEMENT = ("best plan without interleaving or context parallelism within the tolerance of the fastest plan, "
                   "else the fastest (the joint model ranks only those departures)")


def _prefer_simple_pooled(job: JobSpec, res: OptimizeResult, links, method: str, left_s: float, workers: int,
                          seed: int, progress, deadline: Deadline) -> OptimizeResult:
    """prefer simple on the joint model (pools, links): the best plan with vp = cp = 1, solved
    by the same joint model, when it is within the tolerance of the fastest plan; else the
    fastest, which then beats every such plan by more than the tolerance. Proven when both
    solves are, or when the plain subspace's bound is above the threshold."""
    from ..calibration.intervals import plan_band

    fast = res.plan
    assert fast is not None  # optimize asks only when there is a plan
    tol = plan_band(job, fast.parallel.zero).half_width_rel if job.tolerance_rel is None else job.tolerance_rel
    res.prefer, res.proof = "simple", JOINT_STATEMENT
    if fast.parallel.vp == 1 and fast.parallel.cp == 1:
        res.notes.append("prefer simple: the fastest plan has no interleaving or context parallelism")
        return res
    threshold = (1 + tol) * fast.step_time_s
    cons = job.constraints.model_copy(update={"vp": (1,), "cp": (1,)})
    plain_job = job.model_copy(update={"constraints": cons, "prefer": "fastest"})
    plain = _search_placed(plain_job, links, method, max(0.05, left_s), workers, seed, 1, progress,
                           deadline) if left_s > 0.05 else None
    if plain is not None and plain.plan is not None and plain.plan.step_time_s <= threshold:
        plain.prefer, plain.proof = "simple", JOINT_STATEMENT
        plain.status = OPTIMAL if OPTIMAL == plain.status == res.status else FEASIBLE
        plain.notes.append(f"prefer simple: the best plan without interleaving or context parallelism is "
                           f"{plain.plan.step_time_s / fast.step_time_s - 1:.1%} slower than the fastest "
                           f"({fast.parallel.describe()}, {fast.step_time_s:.4g} s), within the tolerance {tol:.1%}")
        return plain
    proven = plain is not None and plain.bound_step_time_s is not None and plain.bound_step_time_s > threshold
    if not proven:
        res.status = FEASIBLE
    best = f"{plain.plan.step_time_s:.4g} s" if plain is not None and plain.plan is not None else "none found"
    res.notes.append(f"prefer simple: no plan without interleaving or context parallelism is within {tol:.1%} of the "
                     f"fastest ({best}{'' if proven else '; not proven within the time limit'}): the fastest kept")
    return res


def _annotate(job: JobSpec, out: OptimizeResult, runner_up: Plan | None = None) -> OptimizeResult:
    """Every plan of `out` with its intervals, and the margins of the plan (`calibration.intervals`)."""
    from ..calibration.intervals import margin, plan_band, with_interval

    if out.plan is None:
        return out
    out.plan = with_interval(job, out.plan)
    out.alternatives = [with_interval(job, p) for p in out.alternatives]
    if out.placed:  # the joint model's plan (pools, links): its intervals only
        return out
    out.cost = Cost.of(job, out.plan)
    band = plan_band(job, out.plan.parallel.zero)
    t = out.plan.step_time_s
    if out.tie_break is not None:
        out.tie_break.fastest = with_interval(job, out.tie_break.fastest)
        out.margins.append(margin("fastest plan", out.tie_break.fastest.step_time_s, t, band))
    elif runner_up is not None:
        out.margins.append(margin("runner-up", runner_up.step_time_s, t, band))
    tb = out.textbook
    if tb is not None and (tb.parallel, tb.layers_per_stage) != (out.plan.parallel, out.plan.layers_per_stage):
        out.margins.append(margin("textbook plan", tb.step_time_s, t, band))
    if out.compare is not None:
        out.margins.append(margin("compared configuration", out.compare.step_time_s, t, band))
    return out


# each pool's own plan (`pools_alone`) may take a tenth of the time limit, at most 5 s; below
# 0.2 s a pool's enumeration alone would overrun it, and none is planned (`search.phases`)
POOL_ALONE = Phase("pool alone", share=0.1, most_s=5.0, least_s=0.2)


def _search_placed(job: JobSpec, links, method: str, time_limit_s: float, workers: int, seed: int, top_k: int,
                   progress, deadline: Deadline) -> OptimizeResult:
    """The joint model (`optimize.joint.optimize_joint`) with each pool's own plan (today's
    model, equal links, `POOL_ALONE`: a tenth of the limit, at most 5 s each) beside it and seeding its incumbent, all
    within `deadline` (`optimize`'s)."""
    from .joint import optimize_joint

    t0 = time.perf_counter()
    dl = deadline.within(float(time_limit_s))
    alone = []
    run = Phases(float(time_limit_s), (POOL_ALONE,), start=t0)  # the share of the limit as given
    share = run.budget_s(POOL_ALONE.name)
    for pl, view in enumerate(job.cluster.pool_views() if run.worth(POOL_ALONE.name) else ()):
        if progress is not None:
            progress({"method": "joint", "phase": f"pool {view.name} alone", "elapsed_s": time.perf_counter() - t0,
                      "limit_s": float(time_limit_s), "final": False})
        alone_job = job.model_copy(update={"cluster": view, "prefer": "fastest"})
        with run.run(POOL_ALONE.name):
            r = optimize(alone_job, time_limit_s=share, workers=workers, seed=seed, textbook=False, deadline=dl)
        if r.plan is not None:
            alone.append((pl, r.plan))
    if dl.expired():  # the joint model's node set alone takes ~0.3 s at 1,024 nodes
        return out_of_time(f"{method} (joint)", t0, top_k, "the time limit was spent before the joint model "
                                                           "started: no plan")
    res = optimize_joint(job, links, method=method, time_limit_s=max(0.05, dl.left_s()), workers=workers, seed=seed,
                         pools_alone=alone, progress=progress, deadline=dl)
    res.search.solver["phases"] = jsonable(run.times) + res.search.solver.get("phases", [])
    if top_k > 1:
        res.notes.append("top-k is not available for the joint model: the best plan only")
        res.top_k_asked = top_k
    return res


def out_of_time(method: str, t0: float, top_k: int, why: str) -> OptimizeResult:
    """The answer when the deadline passes before there is anything to search: UNKNOWN."""
    stats = SearchStats(method=method, wall_time_s=time.perf_counter() - t0, shapes_legal=0, shapes_dominated=0,
                        shapes_pruned_memory=0, shapes_pruned_time=0, shapes_searched=0, finished=False)
    return OptimizeResult(status=UNKNOWN, search=stats, notes=[why], top_k_asked=top_k)


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


def _checked_verdict(job: JobSpec, cands: Candidates, res: MethodResult, plan: Plan | None, method: str,
                     notes: list[str]) -> tuple[PlanStatus, Plan | None, float | None]:
    """Never trust a verdict unchecked: a plan must back OPTIMAL/FEASIBLE, any fitting plan
    refutes INFEASIBLE, and the bound may not exceed the plan. (status, plan, bound)."""
    status, bound = res.status, res.bound_s
    if status in (OPTIMAL, FEASIBLE) and plan is None:
        notes.append(f"{method} answered {status} but returned no plan that fits")
        status = UNKNOWN
    if status == INFEASIBLE and cands.incumbent_index is not None:
        par = parallel_from_row(job, cands.shapes.row(cands.incumbent_index))
        plan = make_plan(job, par, job.model.units_to_layers(cands.incumbent_layers))
        notes.append(f"{method} answered INFEASIBLE but {par.describe()} with layers {cands.incumbent_layers} fits: "
                     f"verdict refuted, returning that plan without a bound")
        status, bound = FEASIBLE, None
    if plan is not None and bound is not None and bound > plan.step_time_s * (1 + 1e-9):
        notes.append(f"bound {bound:.9g} s exceeds the plan's {plan.step_time_s:.9g} s: bound discarded")
        bound = None
        if status == OPTIMAL:
            status = FEASIBLE
    return status, plan, bound


def _compare_plan(job: JobSpec, compare: ParallelConfig | Mapping[str, Any]):
    """The plan of a configuration to compare with (defaults as `solveplan evaluate`); InputError
    naming `compare.<key>` when it is illegal."""
    if isinstance(compare, ParallelConfig):
        cfg: dict[str, Any] = compare.model_dump()
    elif isinstance(compare, Mapping):
        cfg = dict(compare)
    else:
        raise InputError("compare", "give a configuration such as tp=8,pp=2,mbs=1")
    return plan_config(job, cfg, field="compare")
