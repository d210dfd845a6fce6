"""Shared first phase of every search method: enumerate legal shapes, compute their
coefficients with the formulation, prune by the memory and time lower bounds
(solveplan.pruning) against an incumbent, and keep the counts to report.

The incumbent is the best fitting plan found before any search: the balanced (textbook)
split of every shape, then (with time pruning) the water-filled split within each shape's
per-stage memory limits. Any method must return a plan at least that good, and it refutes
an INFEASIBLE verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..formulation.coefficients import StageCoefficients
from ..formulation.pipeline import step_time_batch
from ..formulation.job import job_coefficients
from ..formulation.linear import linear_form, memory_feasible
from ..formulation.splits import balanced_layers_matrix, balanced_split, heuristic_splits, min_max_slot_s
from ..space.shapes import Shapes
from .pruning import memory_lower_bound_bytes, time_lower_bound_s
from ..space.enumeration import enumerate_shapes
from ..specs import JobSpec


def _prune_by_time(shapes, co, t_lb, inc, inc_step):
    """Keep the shapes whose time lower bound does not exceed the incumbent."""
    keep = t_lb <= inc_step * (1 + 1e-9)
    kidx = np.flatnonzero(keep)
    return shapes.take(kidx), co.take(kidx), t_lb[kidx], int(np.searchsorted(kidx, inc)), int((~keep).sum())


@dataclass
class Candidates:
    """Shapes that survive pruning, with their coefficients and bounds."""

    job: JobSpec
    shapes: Shapes  # survivors
    coeffs: StageCoefficients  # of the survivors
    time_lb_s: np.ndarray  # per survivor
    incumbent_index: Optional[int]  # into survivors: the shape of the best fitting plan found
    incumbent_step_s: float  # inf when none fits
    incumbent_layers: Optional[list[int]]  # its layer split
    num_legal: int
    num_dominated: int
    num_pruned_memory: int
    num_pruned_time: int
    # the tightest memory lower bound over all legal shapes (for INFEASIBLE explanations)
    min_memory_lb_bytes: float
    min_memory_lb_shape: Optional[dict]

    @property
    def num_survivors(self) -> int:
        return len(self.shapes)


def prepare(job: JobSpec, prune_time: bool = True, apply_dominance: bool = True) -> Candidates:
    space = enumerate_shapes(job, apply_dominance=apply_dominance)
    shapes = space.shapes
    L = job.model.num_layers
    if len(shapes) == 0:
        return Candidates(job, shapes, job_coefficients(job, shapes), np.zeros(0), None, float("inf"), None,
                          space.num_legal, space.num_dominated, 0, 0, float("inf"), None)
    co = job_coefficients(job, shapes)
    mem_lb = memory_lower_bound_bytes(co, L)
    fit = mem_lb <= co.capacity_bytes
    k = int(np.argmin(mem_lb))
    min_lb, min_shape = float(mem_lb[k]), shapes.row(k)
    n_mem = int((~fit).sum())
    idx = np.flatnonzero(fit)
    shapes, co = shapes.take(idx), co.take(idx)
    t_lb = time_lower_bound_s(co, L)

    # incumbent: the best fitting balanced split, searched in order of the time lower bound
    # and stopped once the bound of the next shape exceeds it (branch-and-bound order)
    order = np.argsort(t_lb, kind="stable")
    inc, inc_step, inc_layers = None, float("inf"), None
    chunk = 256
    for start in range(0, len(order), chunk):
        if t_lb[order[start]] > inc_step:
            break
        sel = order[start:start + chunk]
        step, _, fits = step_time_batch(co.take(sel), balanced_layers_matrix(L, shapes.pp[sel]))
        step = np.where(fits, step, np.inf)
        k = int(np.argmin(step))
        if step[k] < inc_step:
            inc, inc_step = int(sel[k]), float(step[k])
            inc_layers = balanced_split(L, int(shapes.pp[inc]))
    n_time = 0
    if prune_time and len(shapes):
        if inc is not None:
            shapes, co, t_lb, inc, n_time = _prune_by_time(shapes, co, t_lb, inc, inc_step)
        # second round on the survivors, with the per-stage memory limits: shapes with no
        # fitting split go (exact), the largest-slot bound becomes memory-aware, and the
        # water-filling split of each shape may improve (or, when no balanced split fits,
        # provide) the incumbent
        form = linear_form(co, L)
        feasible = memory_feasible(form, L)
        n_mem += int((~feasible).sum())
        if job.constraints.uneven_split:  # an even-split job keeps its balanced incumbent
            splits = heuristic_splits(form, L)
            step, _, fits = step_time_batch(co, splits)
            step = np.where(feasible & fits, step, np.inf)
            k = int(np.argmin(step))
            if step[k] < inc_step:
                inc, inc_step = k, float(step[k])
                inc_layers = [int(x) for x in splits[k, :int(shapes.pp[k])]]
        t_lb = np.where(feasible, time_lower_bound_s(co, L, min_max_slot_s(form, L)), np.inf)
        if inc is None:  # no shape has a fitting split: keep none
            kidx = np.flatnonzero(feasible)
            shapes, co, t_lb = shapes.take(kidx), co.take(kidx), t_lb[kidx]
        else:
            t_lb[inc] = min(t_lb[inc], inc_step)
            shapes, co, t_lb, inc, more = _prune_by_time(shapes, co, t_lb, inc, inc_step)
            n_time += more - int((~feasible).sum())
    return Candidates(job, shapes, co, t_lb, inc, inc_step, inc_layers, space.num_legal, space.num_dominated,
                      n_mem, n_time, min_lb, min_shape)


@dataclass
class Choice:
    """One answer of a search method: a surviving shape (index into Candidates.shapes) and
    its layer split, with the method's own value of the objective."""

    index: int
    layers: list[int]
    objective_s: float


@dataclass
class MethodResult:
    """What every search method (cpsat, exhaustive, alpa-dp) returns to solveplan.optimize.

    status: "OPTIMAL" | "FEASIBLE" (stopped early with a plan) | "INFEASIBLE" | "UNKNOWN".
    best: the chosen plan (None when there is none); top: the K best distinct plans found
    (best first) when asked for; bound_s: a proven lower bound on the optimal step time (None
    when the method proves nothing); evaluations: configurations evaluated (baselines);
    finished: False when a budget stopped the method; stats: solver statistics to report.
    """

    status: str
    best: Optional[Choice]
    bound_s: Optional[float] = None
    top: list[Choice] = None
    evaluations: Optional[int] = None
    finished: bool = True
    stats: dict = None
