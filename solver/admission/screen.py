"""What `search.candidates.prepare` proves about a job before any solve, in the terms
admission control needs (`Screen`), and the verdicts it gives alone: no legal shape at all, or
every shape excluded by memory (`screen_shortfall`). The candidates are cached per job
(`candidates`): computed once, shared by check, plan and the fewest-GPUs probes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..diagnose import memory_shortfall, shape_shortfall
from ..plan import Shortfall
from ..search.candidates import Candidates, prepare
from ..specs import JobSpec
from ..specs.deadline import DeadlineExpired
from .cache import Clock, Dropped, ResultCache


@dataclass(frozen=True)
class Screen:
    """What the candidates proved about one job."""

    num_legal: int
    num_shapes: int  # after dominance
    num_memory_ok: int  # shapes not excluded by memory (an upper bound on the shapes that fit)
    witness: dict | None  # shape row of the incumbent (the best fitting plan prepare found)
    witness_layers: list[int] | None  # its layer split (layers, not pipeline units)
    witness_step_s: float  # inf without a witness
    bound_step_s: float  # least time lower bound over the shapes that may fit (valid for every split)


def screen(cands: Candidates) -> Screen:
    """The bound: pruned shapes have time lower bounds above the incumbent, so the least bound
    over the survivors (and the incumbent) bounds the optimum."""
    witness = cands.shapes.row(cands.incumbent_index) if cands.incumbent_index is not None else None
    bound = float(cands.time_lb_s.min()) if cands.num_survivors else math.inf
    units = cands.incumbent_layers
    layers = cands.job.model.units_to_layers(units) if units is not None else None
    return Screen(cands.num_legal, cands.num_legal - cands.num_dominated, cands.num_survivors + cands.num_pruned_time,
                  witness, layers, float(cands.incumbent_step_s),
                  min(bound, float(cands.incumbent_step_s)))


def candidates(job: JobSpec, clock: Clock, cache: ResultCache) -> Candidates | None:
    """The job's candidates (cached, computed once), or None at the deadline (the preparation
    stops there too)."""
    work = clock.work()
    try:
        return cache.fetch(("cands", job), lambda: prepare(job, deadline=work), clock, deadline=work)
    except (Dropped, DeadlineExpired):
        return None


def screen_shortfall(job: JobSpec, cands: Candidates, sc: Screen) -> Shortfall | None:
    """Why no plan fits when the screen alone proves it (no legal shape; every shape excluded
    by memory), else None. No time is spent searching for more GPUs here."""
    if sc.num_shapes == 0:
        return shape_shortfall(job)
    if sc.num_memory_ok == 0:
        return memory_shortfall(job, cands, budget_s=0.0)
    return None
