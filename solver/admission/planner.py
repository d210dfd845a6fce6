"""`plan` within a time limit: `optimize` (CP-SAT) on the job's cached candidates, in the
cache's solve lane, and -- when the deadline comes first -- the best plan known without the
solver (the incumbent, with a bound valid for every split).

Only final answers are cached (`final`): proven INFEASIBLE, or OPTIMAL with every part done
(the canonical tie-break, the textbook comparison). An answer the time limit shaped is never
handed to a later call, and every caller gets its own copy."""

from __future__ import annotations

import time

from ..diagnose import memory_shortfall
from ..optimize import optimize
from ..plan import OptimizeResult, SearchStats, SolveResult, default_plan_layers, make_plan, parallel_from_row
from ..search.candidates import Candidates, prepare
from ..search.phases import Phase, Phases
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN
from ..specs import JobSpec
from ..specs.deadline import Deadline, DeadlineExpired
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Busy, Clock, Dropped, ResultCache
from .limits import JobLike, as_job
from .screen import screen, screen_shortfall

# The solver ends by 85% of the time limit, less the clock's reserve (`search.phases`); the rest
# covers candidates already in flight, the textbook comparison and assembling the answer.
SOLVE = Phase("solve", ends_at=0.85)
# Notes by which `optimize` says that a part of an OPTIMAL answer was cut by the time limit.
TIME_SHAPED = ("may differ between runs", "time limit is spent")


def _counts(cands: Candidates | None) -> dict:
    if cands is None:
        return dict(shapes_legal=0, shapes_dominated=0, shapes_pruned_memory=0, shapes_pruned_time=0, shapes_searched=0)
    return dict(shapes_legal=cands.num_legal, shapes_dominated=cands.num_dominated,
                shapes_pruned_memory=cands.num_pruned_memory, shapes_pruned_time=cands.num_pruned_time,
                shapes_searched=0)


def _solve(job: JobSpec, cands: Candidates, work: Deadline) -> OptimizeResult:
    """optimize() on the cached candidates. When the memory bounds already exclude every shape
    the answer is INFEASIBLE without a search, and the shortfall (with its fewest-GPUs
    suggestion) gets the budget instead of optimize's fixed 20 s."""
    if cands.num_survivors == 0:  # no fewest-GPUs search: the answer may not depend on the limit
        t0 = time.monotonic()
        sf = memory_shortfall(job, cands, budget_s=0.0)
        stats = SearchStats(method="cpsat", wall_time_s=time.monotonic() - t0, **_counts(cands))
        return OptimizeResult(status=INFEASIBLE, shortfall=sf, search=stats,
                              notes=["no legal shape survives the memory lower bound: nothing to search"])
    return optimize(job, method="cpsat", time_limit_s=max(0.01, work.left_s()), workers=1, top_k=1, seed=0,
                    cands=cands, shortfall_budget_s=0.0, deadline=work)


def final(res: SolveResult) -> bool:
    """Is `res` the answer any time limit long enough would give (so it may be cached)?"""
    if res.status == INFEASIBLE:
        return True
    return (res.status == OPTIMAL and res.search.finished
            and not any(marker in note for note in res.notes for marker in TIME_SHAPED))


def plan(job: JobLike, time_limit_s: float | None = None, *, cache: ResultCache | None = None,
         cancel=None) -> SolveResult:
    """The fastest plan that fits (`optimize`, CP-SAT, with its textbook comparison), within
    `time_limit_s`. When time runs out: status FEASIBLE with the best plan known (the
    incumbent) and its gap to a proven lower bound, or UNKNOWN with no plan. `cancel` (a
    threading.Event): stop waiting when it is set."""
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["plan"], cancel)
    cache = DEFAULT_CACHE if cache is None else cache
    return bounded_plan(as_job(job), clock, cache)


def bounded_plan(job: JobSpec, clock: Clock, cache: ResultCache) -> SolveResult:
    """`plan` of a validated job on a running clock (a copy: callers may change it)."""
    key = ("plan", job)
    cached = cache.get(key)
    if cached is not None:
        return cached.model_copy(deep=True)
    run = Phases(clock.limit, (SOLVE,), clock=time.monotonic, start=clock.start)
    now = time.monotonic()
    budget = run.budget_s(SOLVE.name) - clock.reserve()
    solver_deadline = now + budget
    if budget <= 0.02 or clock.cancelled:
        return _fallback(job, clock, cache, f"time limit {clock.limit:g} s too short to start the solver")

    work = clock.work(solver_deadline)  # stopped by the cache when nobody waits for the answer

    def compute():
        if job.cluster.is_mixed:  # the joint model (shape, split and placement): no shared candidates
            left = work.left_s()
            res = optimize(job, time_limit_s=left, workers=1, seed=0, shortfall_budget_s=0.0,
                           deadline=work) if left > 0.02 else None
            if res is not None and final(res):
                cache.put(key, res)
            return res
        cands = cache.fetch(("cands", job), lambda: prepare(job, deadline=work), None, deadline=work)
        if work.left_s() <= 0.02:
            return None
        res = _solve(job, cands, work)
        if final(res):
            cache.put(key, res)
        return res

    try:  # single flight per (job, budget to 0.1 s)
        res = cache.fetch(("solve", job, round(budget, 1)), compute, clock, store=lambda v: False, lane="solve",
                          deadline=work)
    except (Busy, Dropped) as exc:
        return _fallback(job, clock, cache, f"busy ({exc})")
    except DeadlineExpired:
        return _fallback(job, clock, cache, f"time limit {clock.limit:g} s reached while preparing the candidates")
    if res is not None:
        return res.model_copy(deep=True)
    return _fallback(job, clock, cache, f"time limit {clock.limit:g} s reached before the solver returned")


def _fallback(job: JobSpec, clock: Clock, cache: ResultCache, why: str) -> SolveResult:
    """Best plan known without the solver: the incumbent of the cached candidates with a bound
    valid for every split; INFEASIBLE when the screen proves it; UNKNOWN when nothing is known
    yet."""
    cands = None if job.cluster.is_mixed else cache.get(("cands", job))
    stats = SearchStats(method="cpsat", wall_time_s=clock.elapsed(), finished=False, **_counts(cands))
    if cands is None:
        return OptimizeResult(status=UNKNOWN, search=stats,
                              notes=[f"{why}; no plan known yet (retry with a longer time limit)"])
    sc = screen(cands)
    sf = screen_shortfall(job, cands, sc)
    if sf is not None:
        return OptimizeResult(status=INFEASIBLE, shortfall=sf, search=stats,
                              notes=[f"{why}; the memory lower bounds exclude every shape" if sc.num_shapes else why])
    if sc.witness is None:
        return OptimizeResult(status=UNKNOWN, search=stats,
                              notes=[f"{why}; no plan known yet (retry with a longer time limit)"])
    witness = parallel_from_row(job, sc.witness)
    plan_ = make_plan(job, witness, sc.witness_layers or default_plan_layers(job, witness))
    bound = sc.bound_step_s
    gap = (plan_.step_time_s - bound) / plan_.step_time_s if plan_.step_time_s > 0 else None
    return OptimizeResult(status=FEASIBLE, plan=plan_, bound_step_time_s=bound, gap=gap, search=stats,
                          notes=[f"{why}; the plan is the incumbent, the bound the least time lower bound over "
                                 f"the shapes that may fit"])
