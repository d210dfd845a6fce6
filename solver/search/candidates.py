"""Shared first phase of every search method: enumerate legal shapes (`space`), price them
with the formulation, prune by the memory and time lower bounds (`search.pruning`) against
an incumbent, and keep what was derived on the way -- the coefficients, the linear form and
its memory limits, each shape's heuristic split, the counts -- so that no method derives them
again.

The incumbent is the best fitting plan found before any search: the balanced (textbook)
split of every shape, then (with time pruning) the water-filled split within each shape's
per-stage memory limits (`formulation.splits.heuristic_splits`). Any method must return a
plan at least that good, and it refutes an INFEASIBLE verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from ..formulation.coefficients import StageCoefficients
from ..formulation.job import job_coefficients, zero0_dominated
from ..formulation.linear import LinearForm, linear_form, memory_feasible
from ..formulation.pipeline import step_time_batch
from ..formulation.splits import (
    accounted_splits,
    balanced_split,
    default_splits,
    heuristic_splits,
    slot_waterfill,
    with_accounted,
)
from ..space.enumeration import enumerate_shapes
from ..space.shapes import Shapes
from ..specs import JobSpec
from ..specs.deadline import Deadline
from .pruning import memory_lower_bound_bytes, time_lower_bound_s

LEAST_MEMORY_SHAPES = 64  # shapes kept for an INFEASIBLE verdict's explanation (`diagnose`)


class ShapeCounts(Protocol):
    """What the candidates of either path count at each step of their preparation -- `Candidates`
    here, `search.joint.prepare.JointCandidates` on pools and links -- and `plan.SearchStats.of`
    reports: the legal shapes, those set aside as dominated, by memory and by time, and the
    survivors the method searches."""

    @property
    def num_legal(self) -> int: ...
    @property
    def num_dominated(self) -> int: ...
    @property
    def num_pruned_memory(self) -> int: ...
    @property
    def num_pruned_time(self) -> int: ...
    @property
    def num_survivors(self) -> int: ...


@dataclass
class Candidates:
    """Shapes that survive pruning, with their coefficients and bounds, and the state derived
    from them: `form` (linear form with per-stage memory limits), `feasible` (some split fits)
    and `splits` (a fitting split per shape: water-filled, or balanced for an even-split job).
    Those three are computed once -- by `prepare`, or on first use -- and belong to `coeffs`:
    a copy with other coefficients (`dataclasses.replace`) derives its own."""

    job: JobSpec
    shapes: Shapes  # survivors
    coeffs: StageCoefficients  # of the survivors
    time_lb_s: np.ndarray  # per survivor
    incumbent_index: int | None  # into survivors: the shape of the best fitting plan found
    incumbent_step_s: float  # inf when none fits
    incumbent_layers: list[int] | None  # its layer split
    num_legal: int
    num_dominated: int
    num_pruned_memory: int
    num_pruned_time: int
    # over all legal shapes (for INFEASIBLE explanations): the tightest memory lower bound, and
    # the LEAST_MEMORY_SHAPES shapes with the least bounds, least first
    min_memory_lb_bytes: float
    least_memory_shapes: Shapes
    _form: LinearForm | None = field(default=None, init=False, repr=False)
    _splits: np.ndarray | None = field(default=None, init=False, repr=False)
    _fixed: np.ndarray | None = field(default=None, init=False, repr=False)

    @property
    def num_survivors(self) -> int:
        return len(self.shapes)

    @property
    def num_layers(self) -> int:
        return self.job.model.num_pipeline_units

    @property
    def form(self) -> LinearForm:
        if self._form is None:
            self._form = linear_form(self.coeffs, self.num_layers)
        return self._form

    @property
    def feasible(self) -> np.ndarray:
        """Per survivor: some layer split fits in memory."""
        return memory_feasible(self.form, self.num_layers)

    @property
    def splits(self) -> np.ndarray:
        """(S, P) a fitting split per memory-feasible survivor (zeros elsewhere); the balanced
        split of every survivor for an even-split job; Megatron's for an accounted shape."""
        if self._splits is None:
            if self.job.constraints.uneven_split:
                self._splits = with_accounted(self.job.model, self.shapes, heuristic_splits(self.form, self.num_layers))
            else:
                self._splits = default_splits(self.job.model, self.shapes)
        return self._splits

    @property
    def fixed_splits(self) -> np.ndarray:
        """(S, P) the one split of each survivor that counts the embedding or the loss as a layer
        (`formulation.splits.accounted_splits`: Megatron's); zero rows where the method chooses
        the split (every split, or the balanced one for an even-split job). Every method holds
        a nonzero row as that shape's only split."""
        if self._fixed is None:
            self._fixed = accounted_splits(self.job.model, self.shapes)
        return self._fixed

    def accounted_split(self, j: int) -> list[int] | None:
        """Survivor j's Megatron split when it counts the embedding or the loss, else None."""
        return [int(x) for x in self.fixed_splits[j, :int(self.shapes.pp[j])]] if self.shapes.accounted[j] else None

    def split_of(self, j: int) -> list[int] | None:
        """Survivor j's only split when it has one (accounted: Megatron's; even-split job:
        balanced), else None (every split)."""
        only = self.accounted_split(j)
        if only is not None or self.job.constraints.uneven_split:
            return only
        return balanced_split(self.num_layers, int(self.shapes.pp[j]))

    def _keep_derived(self, form: LinearForm, splits: np.ndarray | None, idx: np.ndarray) -> None:
        """Carry the form (and splits) `prepare` derived for a superset of the survivors."""
        self._form = form.take(idx)
        if splits is not None:
            self._splits = splits[idx, :self._form.max_layers.shape[1]]


def _kth(values: np.ndarray, k: int) -> float:
    """The k-th smallest finite value (inf when fewer are finite)."""
    fin = values[np.isfinite(values)]
    return float(np.partition(fin, k - 1)[k - 1]) if len(fin) >= k else float("inf")


def prepare(job: JobSpec, prune_time: bool = True, apply_dominance: bool = True, top_k: int = 1,
            keep: Callable[[Shapes], np.ndarray] | None = None, deadline: Deadline | None = None) -> Candidates:
    """Legal shapes, priced and pruned. `prune_time`: drop the shapes whose time lower bound
    exceeds the `top_k`-th best plan found (distinct shapes): none of them can be among the
    `top_k` best. `apply_dominance`: drop dominated shapes (`formulation.job.zero0_dominated`).
    `keep`: a subspace (a mask over the legal shapes; `search.simple`'s levels): the pruning
    and the incumbent are then those of the subspace. Raises DeadlineExpired when `deadline`
    passes (checked between the steps and chunks)."""
    dl = deadline if deadline is not None else Deadline()
    K = max(1, int(top_k))
    space = enumerate_shapes(job)
    dl.check()
    shapes = space.shapes
    if keep is not None:
        shapes = shapes.take(np.flatnonzero(keep(shapes)))
    num_dominated = 0
    if apply_dominance:
        dom = zero0_dominated(job, shapes)
        num_dominated = int(dom.sum())
        shapes = shapes.take(np.flatnonzero(~dom)) if num_dominated else shapes
    L = job.model.num_pipeline_units
    if len(shapes) == 0:
        return Candidates(job, shapes, job_coefficients(job, shapes), np.zeros(0), None, float("inf"), None,
                          space.num_legal, num_dominated, 0, 0, float("inf"), shapes)
    co = job_coefficients(job, shapes)
    dl.check()
    mem_lb = memory_lower_bound_bytes(co, L)
    fit = mem_lb <= co.capacity_bytes
    least = np.argsort(mem_lb, kind="stable")[:LEAST_MEMORY_SHAPES]
    min_lb, least_shapes = float(mem_lb[least[0]]), shapes.take(least)
    n_mem = int((~fit).sum())
    idx = np.flatnonzero(fit)
    shapes, co = shapes.take(idx), co.take(idx)
    t_lb = time_lower_bound_s(co, L)

    known = _balanced_plans(job, co, shapes, t_lb, K, dl)
    k = int(np.argmin(known)) if np.isfinite(known).any() else None
    inc_layers = default_splits(job.model, shapes.take(k))[0, :int(shapes.pp[k])].tolist() if k is not None else None
    n_time = 0
    derived = None
    dl.check()
    surv = _Survivors(shapes, co, t_lb, known)
    if prune_time and len(shapes):
        pruned = _prune_by_time(job, surv, inc_layers, K)
        surv, inc_layers, n_time, derived = pruned.survivors, pruned.inc_layers, pruned.num_pruned_time, pruned.derived
        n_mem += pruned.num_no_split_fits
    known = surv.known
    inc = int(np.argmin(known)) if np.isfinite(known).any() else None
    cands = Candidates(job, surv.shapes, surv.co, surv.t_lb, inc, float(known[inc]) if inc is not None else float("inf"),
                       inc_layers if inc is not None else None, space.num_legal, num_dominated, n_mem, n_time,
                       min_lb, least_shapes)
    if derived is not None:
        cands._keep_derived(*derived)
    return cands


def _balanced_plans(job: JobSpec, co: StageCoefficients, shapes: Shapes, t_lb: np.ndarray, K: int,
                    dl: Deadline) -> np.ndarray:
    """Plans known per shape (step time, inf where none): balanced splits (Megatron's for an
    accounted shape: `default_splits`), searched in order of the time lower bound and stopped once the bound of the next shape exceeds the K-th best
    (branch-and-bound order)."""
    known = np.full(len(shapes), np.inf)
    order = np.argsort(t_lb, kind="stable")
    chunk = 256
    for start in range(0, len(order), chunk):
        if t_lb[order[start]] > _kth(known, K):
            break
        dl.check()
        sel = order[start:start + chunk]
        step, _, fits = step_time_batch(co.take(sel), default_splits(job.model, shapes.take(sel)))
        known[sel] = np.where(fits, step, np.inf)
    return known


@dataclass
class _Survivors:
    """The shapes still in, with their coefficients, time lower bounds and best known steps."""

    shapes: Shapes
    co: StageCoefficients
    t_lb: np.ndarray
    known: np.ndarray

    def take(self, idx: np.ndarray) -> _Survivors:
        return _Survivors(self.shapes.take(idx), self.co.take(idx), self.t_lb[idx], self.known[idx])


class _TimePruned(NamedTuple):
    survivors: _Survivors
    inc_layers: list[int] | None
    num_pruned_time: int
    num_no_split_fits: int
    derived: tuple  # (form, splits, index) for `Candidates._keep_derived`


def _prune_by_time(job: JobSpec, surv: _Survivors, inc_layers: list[int] | None, K: int) -> _TimePruned:
    """Drop the shapes whose time lower bound exceeds the K-th best known plan, in two rounds:
    against the balanced plans, then with the per-stage memory limits: shapes with no fitting
    split go (exact), the largest-slot bound becomes memory-aware, and the water-filled split
    of each shape may improve (or, when no balanced split fits, provide) the known plans."""
    L = job.model.num_pipeline_units
    n_time = 0
    if np.isfinite(surv.known).any():
        keep = surv.t_lb <= _kth(surv.known, K) * (1 + 1e-9)
        n_time = int((~keep).sum())
        surv = surv.take(np.flatnonzero(keep))
    co, known = surv.co, surv.known
    form = linear_form(co, L)
    feasible = memory_feasible(form, L)
    n_infeasible = int((~feasible).sum())
    splits: np.ndarray | None
    slot_lb, splits = slot_waterfill(form, L)
    splits = with_accounted(job.model, surv.shapes, splits)  # an accounted shape has Megatron's split only
    if job.constraints.uneven_split:  # an even-split job keeps its balanced plans
        step, _, fits = step_time_batch(co, splits)
        better = feasible & fits & (step < known) & ~surv.shapes.accounted  # an accounted shape keeps Megatron's
        if better.any() and step[better].min() < known.min():
            k = int(np.flatnonzero(better)[np.argmin(step[better])])
            inc_layers = [int(x) for x in splits[k, :int(surv.shapes.pp[k])]]
        known = np.where(better, step, known)
    else:
        splits = None
    t_lb = np.where(feasible, np.minimum(time_lower_bound_s(co, L, slot_lb), known), np.inf)
    kidx = np.flatnonzero(feasible & (t_lb <= _kth(known, K) * (1 + 1e-9)))
    n_time += len(surv.shapes) - len(kidx) - int((~feasible).sum())
    surv = _Survivors(surv.shapes, co, t_lb, known).take(kidx)
    return _TimePruned(surv, inc_layers, n_time, n_infeasible, (form, splits, kidx))
