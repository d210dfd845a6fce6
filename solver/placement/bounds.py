"""Proven lower bounds for placement, before the cell model searches (`cpsat.solve_cpsat`).

- `floors`: the objective's two bottleneck terms, the max slot and the tail, each probed as
  a feasibility problem of the row-count relaxation ("no placement has max slot <= c" for the
  candidate values c, by bisection). INFEASIBLE proves the floor; one term at a time, so the
  floors hold for every placement together.
- `staircase` (of `hierarchy_bound`s): the optimum of the row model of the lifted links
  (`relax`), with the floors, box by box of (max slot, tail): a lower bound on every
  placement (each costs at least as much on the real links, and keeps the floors there),
  and, on racks with a few degraded links and NICs, usually the optimum itself. Its row
  counts (per class of the lifted links) are where the cell model looks first.

The integer tables are `pricing.Tables`; slot and tail are the terms of `objective`."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..search.cpsat.ortools_cp import cp_model
from ..search.cpsat.solve import solve_model
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN
from .pricing import Problem
from .rows import RowModel

PROBE_S = 2.0  # the most one floor probe may take


def slot_candidates(prob: Problem) -> np.ndarray:
    """Every value a stage's slot can take (tau at a ring level + v * a boundary's p2p), sorted."""
    T = prob.tables
    tau = np.unique(T.tau)
    if prob.grid.pp == 1:
        return tau
    return np.unique(tau[:, None] + T.v * np.unique(T.pi)[None, :])


def _floor(prob: Problem, term: str, candidates: np.ndarray, trivial: int, high: int, end: float, workers: int,
           seed: int) -> int:
    """The least candidate in [trivial, high] the row model does not refute for `term`
    ("max_slot" or "tail"): probes at growing steps above the last refuted value, then
    bisection; a refutation (INFEASIBLE) is cheap where a solution is not, so each probe gets
    a short limit and the first it cannot settle ends the search."""
    c = candidates[(candidates >= trivial) & (candidates <= high)]
    if len(c) == 0:
        return int(trivial)
    lo, hi, step = 0, len(c) - 1, 1  # c[hi] is achieved; below c[lo] refuted

    def refuted(i: int) -> bool | None:
        left = end - time.perf_counter()
        if left <= 0.05:
            return None
        rm = RowModel(prob)
        rm.model.add(getattr(rm.parts, term) <= int(c[i]))
        _, st = solve_model(rm.model, min(left, PROBE_S), workers, seed)
        return True if st == cp_model.INFEASIBLE else (False if st in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None)

    while lo < hi:
        i = min(lo + step - 1, hi - 1) if step else (lo + hi) // 2
        r = refuted(i)
        if r is None:
            break
        if r:
            lo, step = i + 1, (step * 2 if step else 0)
        else:
            hi, step = i, 0
    return int(c[lo])


def incumbent_terms(prob: Problem, labels: np.ndarray) -> tuple[int, int]:
    """(max slot, tail) of a labelling (class labels per cell)."""
    slot, tail = prob.tables.terms(*prob.level_rows(labels[None, :]))
    return int(slot.max()), int(tail.max())


def floors(prob: Problem, high: tuple[int, int], time_s: float, workers: int, seed: int) -> tuple[int, int]:
    """Proven lower bounds (max slot, tail) of every placement of `prob` (a relaxation's
    floors hold for the real links too), no higher than `high` (an incumbent's terms)."""
    T = prob.tables
    end = time.perf_counter() + time_s
    slot_f = _floor(prob, "max_slot", slot_candidates(prob), int(T.least_slots().max()), high[0], end,
                    workers, seed)
    tail_f = _floor(prob, "tail", np.unique(T.tail), int(T.tail[-1].max()), high[1], end, workers, seed)
    return slot_f, tail_f


@dataclass
class HierarchyBound:
    coarse: Problem  # the relaxation
    status: str  # OPTIMAL: `bound` is the relaxation's optimum
    bound: int | None
    counts: np.ndarray | None  # row counts of its best solution, coarse classes x rows
    value: int | None = None  # that solution's objective


def hierarchy_bound(coarse: Problem, cap: int, floors_: tuple | None, time_s: float, workers: int, seed: int,
                    deterministic_s: float | None = None, minimise: bool = True,
                    box: tuple | None = None, at_least: int | None = None) -> HierarchyBound:
    """Minimise the row model of `coarse` (`relax.relaxed` of a problem) below `cap` (an
    incumbent's value); with `minimise` False, any row counts at or below `cap` (no bound);
    `box`: only placements whose max slot and tail are at most these (`staircase`); `at_least`: a proven lower bound (minimising down to it finds row counts
    there several times faster than a feasibility search)."""
    rm = RowModel(coarse, floors_)
    rm.model.add(rm.objective <= int(cap))
    if at_least is not None:
        rm.model.add(rm.objective >= int(at_least))
    if box is not None:
        rm.model.add(rm.parts.max_slot <= int(box[0]))
        rm.model.add(rm.parts.tail <= int(box[1]))
    if minimise:
        rm.model.minimize(rm.objective)
    solver, st = solve_model(rm.model, time_s, workers, seed, deterministic_s=deterministic_s)
    if st == cp_model.INFEASIBLE:  # nothing at or below cap: cap + 1 is a bound
        return HierarchyBound(coarse, INFEASIBLE, int(cap) + 1, None)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return HierarchyBound(coarse, UNKNOWN, None, None)
    counts = np.array([[solver.value(v) for v in row] for row in rm.x], dtype=np.int64)
    value = int(solver.value(rm.objective))
    if not minimise:
        return HierarchyBound(coarse, FEASIBLE, None, counts, value)
    bound = int(round(solver.objective_value)) if st == cp_model.OPTIMAL else \
        int(np.ceil(solver.best_objective_bound - 1e-6))
    return HierarchyBound(coarse, solver.status_name(st), bound, counts, value)


def box_bound(prob: Problem, box: tuple[int, int]) -> int:
    """The least objective of a placement with max slot `box[0]` and tail `box[1]`: every
    other slot at its least (top levels)."""
    T = prob.tables
    return (T.mv - 1) * int(box[0]) + int(T.least_slots().sum()) + T.v * int(box[1])


def staircase(coarse: Problem, floors_: tuple[int, int], cap: int, time_s: float, workers: int,
              seed: int) -> HierarchyBound:
    """The optimum of `coarse` below `cap`, box by box: the pairs (max slot, tail) of values
    the two terms can take at or above their floors, in order of `box_bound`; each box
    "max slot <= M and tail <= T" minimised below the best so far (INFEASIBLE: nothing better
    in it). A placement outside every box solved has the pair of some box not solved, so it
    costs at least that box's `box_bound`: once that reaches the best, the best is optimal.
    The bound is proven (status OPTIMAL) when that happens, or every box below `cap` is done;
    a box left unsettled gives min(best, its own bound) (FEASIBLE, or UNKNOWN with none)."""
    end = time.perf_counter() + time_s
    T = coarse.tables
    slots = slot_candidates(coarse)
    tails = np.unique(T.tail)
    pairs = sorted((box_bound(coarse, (m, t)), int(m), int(t)) for m in slots[slots >= floors_[0]]
                   for t in tails[tails >= floors_[1]] if box_bound(coarse, (m, t)) < cap)
    best = HierarchyBound(coarse, INFEASIBLE, int(cap), None, None)  # nothing below cap yet
    best_bound = int(cap)  # best.bound: row counts found set it to their value (never None with counts)
    for lb, m, t in pairs:
        if lb >= best_bound:
            break
        left = end - time.perf_counter()
        hb = hierarchy_bound(coarse, best_bound - 1, floors_, left, workers, seed, box=(m, t)) if left > 0.05 else None
        if hb is None or hb.status in (UNKNOWN, FEASIBLE):
            low = lb if hb is None or hb.bound is None else max(lb, hb.bound)
            if hb is not None and hb.value is not None:
                best, best_bound = HierarchyBound(coarse, FEASIBLE, hb.value, hb.counts, hb.value), hb.value
            return HierarchyBound(coarse, FEASIBLE, min(low, best_bound), best.counts, best.value)
        if hb.status == OPTIMAL and hb.value is not None:
            best, best_bound = HierarchyBound(coarse, OPTIMAL, hb.value, hb.counts, hb.value), hb.value
    status = OPTIMAL if best.counts is not None else INFEASIBLE
    return HierarchyBound(coarse, status, best_bound, best.counts, best.value)
