"""`check`: does some plan of a job fit? A job is feasible iff some legal shape fits under
some layer split. The cached candidates (`screen`) decide most jobs without a solver:

- no legal shape at all (divisibility, constraints) -> INFEASIBLE, resource "legal shapes";
- every shape excluded by memory (its lower bound, valid for every split, or its exact
  per-stage limits) -> INFEASIBLE, resource "memory", with the least-memory plan's shortfall;
- the incumbent (the best plan prepare found: balanced, or water-filled within the memory
  limits) is a witness -> FEASIBLE, with its step time as the best known;
- otherwise a short CP-SAT solve decides: it finds a split that fits, or proves none does.

A cluster of pools has no shared candidates to screen (each stage may sit on any pool): the
joint model (`bounded_plan`) decides it within the time limit, and any plan it finds that fits
is the witness.
"""

from __future__ import annotations

from pydantic import Field

from ..plan import Out, ParallelConfig, Shortfall, SolveResult, parallel_from_row
from ..search.result import FEASIBLE, INFEASIBLE, UNKNOWN, CheckStatus
from ..specs import JobSpec
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Busy, Clock, ResultCache
from .limits import JobLike, as_job
from .planner import bounded_plan
from .screen import Screen, candidates, screen, screen_shortfall

# Short CP-SAT solve that decides `check` when the screen cannot (at most this long).
CHECK_SOLVE_S = 2.0


class CheckResult(Out):
    """Does the job fit, and why (not)."""

    feasible: bool | None = Field(description="true: some plan fits; false: none does; null: not decided in time")
    status: CheckStatus
    reason: str
    shortfall: Shortfall | None = None
    best_known_step_time_s: float | None = Field(None, description="step time of the best plan known to fit")
    witness: ParallelConfig | None = Field(None, description="a configuration that fits")
    witness_layers_per_stage: list[int] | None = Field(None, description="its layer split (balanced unless a solve was needed)")


def _fits(par: ParallelConfig, layers: list[int] | None, step_s: float, how: str = "") -> CheckResult:
    return CheckResult(
        feasible=True, status=FEASIBLE, best_known_step_time_s=step_s, witness=par, witness_layers_per_stage=layers,
        reason=(f"fits: tp={par.tp} pp={par.pp} dp={par.dp} cp={par.cp} mbs={par.micro_batch_size} "
                f"recompute={par.recompute} zero={par.zero}, layers {layers} ({step_s:.3f} s per step{how})"))


def _infeasible(sf: Shortfall | None) -> CheckResult:
    return CheckResult(feasible=False, status=INFEASIBLE, shortfall=sf,
                       reason=sf.message if sf else "the solver proved that no plan fits")


def _unknown(reason: str) -> CheckResult:
    return CheckResult(feasible=None, status=UNKNOWN, reason=reason)


def verdict_of_screen(job: JobSpec, cands, sc: Screen) -> CheckResult | None:
    """A verdict from the screen, or None when it cannot decide (needs a solve)."""
    sf = screen_shortfall(job, cands, sc)
    if sf is not None:
        return _infeasible(sf)
    if sc.witness is not None:
        return _fits(parallel_from_row(job, sc.witness), sc.witness_layers, sc.witness_step_s)
    return None


def verdict_of_result(res: SolveResult) -> CheckResult | None:
    if res.plan is not None and res.plan.fits:
        return _fits(res.plan.parallel, res.plan.layers_per_stage, res.plan.step_time_s,
                     f", solver status {res.status}")
    if res.status == INFEASIBLE:
        return _infeasible(res.shortfall)
    return None


def check(job: JobLike, time_limit_s: float | None = None, *, cache: ResultCache | None = None,
          cancel=None) -> CheckResult:
    """Does some plan of `job` fit? Fast path: the (cached) candidates (see the module
    docstring); a short CP-SAT solve when they cannot decide. Returns status UNKNOWN
    (feasible=None) when the time limit comes first. The answer depends on the job alone, not
    on what was asked before: `best_known_step_time_s` is the incumbent's, even when `plan`
    has found the optimum since. `cancel` (a threading.Event): stop waiting when it is set."""
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["check"], cancel)
    cache = DEFAULT_CACHE if cache is None else cache
    return timed_check(as_job(job), clock, cache)


def timed_check(job: JobSpec, clock: Clock, cache: ResultCache) -> CheckResult:
    """`check` of a validated job on a running clock."""
    if job.cluster.is_mixed:
        return _check_by_plan(job, clock, cache)
    try:
        cands = candidates(job, clock, cache)
    except Busy as exc:
        return _unknown(f"busy ({exc}); retry")
    if cands is None:
        return _unknown(f"time limit {clock.limit:g} s reached while enumerating shapes; retry with a longer "
                        f"time limit")
    sc = screen(cands)
    verdict = verdict_of_screen(job, cands, sc)
    if verdict is not None:
        return verdict
    # Memory lower bounds admit some shape but no plan prepare tried fits: a short solve decides.
    budget = min(CHECK_SOLVE_S, clock.left() - clock.reserve())
    if budget <= 0:
        return _unknown(f"time limit {clock.limit:g} s reached: {sc.num_memory_ok} shapes may fit with an "
                        f"uneven layer split but none fits with a balanced one; a solve is needed")
    res = bounded_plan(job, clock.sub(budget), cache)
    verdict = verdict_of_result(res)
    if verdict is not None:
        return verdict
    return _unknown(f"no balanced layer split fits and the solver did not decide within {budget:.2g} s "
                    f"(status {res.status}); retry with a longer time limit")


def _check_by_plan(job: JobSpec, clock: Clock, cache: ResultCache) -> CheckResult:
    """A cluster of pools: the joint model's plan within the clock decides (see the docstring)."""
    res = bounded_plan(job, clock, cache)
    verdict = verdict_of_result(res)
    if verdict is not None:
        return verdict
    return _unknown(f"the joint model found no plan within {clock.limit:g} s (status {res.status}); "
                    f"retry with a longer time limit")
