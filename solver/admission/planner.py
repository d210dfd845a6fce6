"""`plan` within a time limit: `optimize` (CP-SAT) on the job's cached candidates, in the
cache's solve lane, and -- when the deadline comes first -- the best plan known without the
solver (the incumbent, with a bound valid for every split) or an earlier answer."""

from __future__ import annotations

import time
from typing import Optional

from ..diagnose import memory_shortfall
from ..formulation.splits import balanced_split
from ..optimize import OptimizeResult, optimize
from ..plan import SearchStats, SolveResult, make_plan, parallel_from_row
from ..search.candidates import Candidates, prepare
from ..specs import JobSpec
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Busy, Clock, ResultCache, wait
from .limits import JobLike, as_job
from .screen import screen, screen_shortfall

# Share of the time limit given to the solver; the rest covers candidates already in flight,
# the textbook comparison and assembling the answer.
SOLVER_SHARE = 0.85


def _counts(cands: Optional[Candidates]) -> dict:
    if cands is None:
        return dict(shapes_legal=0, shapes_dominated=0, shapes_pruned_memory=0, shapes_pruned_time=0, shapes_searched=0)
    return dict(shapes_legal=cands.num_legal, shapes_dominated=cands.num_dominated,
                shapes_pruned_memory=cands.num_pruned_memory, shapes_pruned_time=cands.num_pruned_time,
                shapes_searched=0)


def _solve(job: JobSpec, time_limit_s: float, cands: Candidates) -> SolveResult:
    """optimize() on the cached candidates. When the memory bounds already exclude every shape
    the answer is INFEASIBLE without a search, and the shortfall (with its fewest-GPUs
    suggestion) gets the budget instead of optimize's fixed 20 s."""
    if cands.num_survivors == 0:
        t0 = time.monotonic()
        sf = memory_shortfall(job, cands, budget_s=max(0.0, time_limit_s * 0.8))
        stats = SearchStats(method="cpsat", wall_time_s=time.monotonic() - t0, **_counts(cands))
        return OptimizeResult(status="INFEASIBLE", shortfall=sf, search=stats,
                              notes=["no legal shape survives the memory lower bound: nothing to search"])
    return optimize(job, method="cpsat", time_limit_s=max(0.01, time_limit_s), workers=1, top_k=1, seed=0,
                    cands=cands)


def _final(res: SolveResult) -> bool:
    return res.status in ("OPTIMAL", "INFEASIBLE")


def plan(job: JobLike, time_limit_s: Optional[float] = None, *, cache: Optional[ResultCache] = None) -> SolveResult:
    """The fastest plan that fits (`optimize`, CP-SAT, with its textbook comparison), within
    `time_limit_s`. When time runs out: status FEASIBLE with the best plan known (the
    incumbent) and its gap to a proven lower bound, or UNKNOWN with no plan."""
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["plan"])
    cache = DEFAULT_CACHE if cache is None else cache
    return bounded_plan(as_job(job), clock, cache)


def bounded_plan(job: JobSpec, clock: Clock, cache: ResultCache) -> SolveResult:
    """`plan` of a validated job on a running clock."""
    key = ("plan", job)
    cached = cache.get(key)
    solver_deadline = clock.start + clock.limit * SOLVER_SHARE - clock.reserve()
    budget = solver_deadline - time.monotonic()
    # A final answer is reused whatever the limit; a time-limited one for budgets up to its own.
    if cached is not None and (_final(cached[0]) or budget <= cached[1] * 1.05 + 0.01):
        return cached[0]
    if budget <= 0.02:
        return _fallback(job, clock, cache, f"time limit {clock.limit:g} s too short to start the solver")

    def compute():
        cands = cache.run(("cands", job), lambda: prepare(job)).result()  # the prepare lane never waits on this one
        left = solver_deadline - time.monotonic()
        if left <= 0.02:
            return None
        res = _solve(job, left, cands)
        _store_plan(cache, key, res, budget)
        return res

    try:  # single flight per (job, budget to 0.1 s)
        fut = cache.run(("solve", job, round(budget, 1)), compute, store=lambda v: False, lane="solve")
    except Busy as exc:
        return _fallback(job, clock, cache, f"busy ({exc})")
    res = wait(fut, clock)
    if res is not None:
        return res
    return _fallback(job, clock, cache, f"time limit {clock.limit:g} s reached before the solver returned")


def _store_plan(cache: ResultCache, key, res: SolveResult, budget: float) -> None:
    """Keep a final answer; a time-limited one only over an earlier time-limited one with less budget."""
    cache.put_if(key, (res, budget), keep=lambda prev: not _final(res) and (_final(prev[0]) or prev[1] > budget))


def _fallback(job: JobSpec, clock: Clock, cache: ResultCache, why: str) -> SolveResult:
    """Best plan known without the solver: an earlier answer, or the incumbent of the cached
    candidates with a bound valid for every split; INFEASIBLE when the screen proves it;
    UNKNOWN when nothing is known yet."""
    prev = cache.get(("plan", job))
    if prev is not None and prev[0].plan is not None:
        res = prev[0]
        return res.model_copy(update={"notes": [*res.notes, f"{why}; this is an earlier answer computed with a "
                                                              f"{prev[1]:.3g} s limit"]})
    cands = cache.get(("cands", job))
    stats = SearchStats(method="cpsat", wall_time_s=clock.elapsed(), finished=False, **_counts(cands))
    if cands is None:
        return OptimizeResult(status="UNKNOWN", search=stats,
                              notes=[f"{why}; no plan known yet (the work continues in the background: retry)"])
    sc = screen(cands)
    sf = screen_shortfall(job, cands, sc)
    if sf is not None:
        return OptimizeResult(status="INFEASIBLE", shortfall=sf, search=stats,
                              notes=[f"{why}; the memory lower bounds exclude every shape" if sc.num_shapes else why])
    if sc.witness is None:
        return OptimizeResult(status="UNKNOWN", search=stats,
                              notes=[f"{why}; no plan known yet (the work continues in the background: retry)"])
    layers = sc.witness_layers or balanced_split(job.model.num_layers, sc.witness["pp"])
    plan_ = make_plan(job, parallel_from_row(job, sc.witness), layers)
    bound = sc.bound_step_s
    gap = (plan_.step_time_s - bound) / plan_.step_time_s if plan_.step_time_s > 0 else None
    return OptimizeResult(status="FEASIBLE", plan=plan_, bound_step_time_s=bound, gap=gap, search=stats,
                          notes=[f"{why}; the plan is the incumbent, the bound the least time lower bound over "
                                 f"the shapes that may fit"])
