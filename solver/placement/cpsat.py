"""The CP-SAT model of placement (the package docstring gives its variables): `build_model`
makes it for a `pricing.Problem`, `solve_cpsat` builds and solves it, in the same API style
as the main encoding (`search.cpsat`: snake_case ortools calls, statuses as `PlanStatus`).

Interchangeable nodes are merged into classes and the better baseline's objective caps the
search. The proof comes first (`bounds`): floors of the max slot and the tail, probed as
feasibility problems of the row-count relaxation, then the optimum of the row model of the
lifted links (`relax`), box by box, whose row counts the cell model then tries to realise. Short of
a proof, the cell model searches with those bounds, the row-count relaxation of the real
links raises the bound at thresholds of the objective (`tighten`), and the cell model resumes.
An optimal answer is made canonical by deterministic searches (one worker, fixed seed,
deterministic time limit) for a labelling at the proven optimum, so it does not depend on the
seed or the number of workers of the search that found it."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..search.cpsat.ortools_cp import cp_model
from ..search.cpsat.solve import plan_status, solve_model
from ..search.phases import Phase, Phases
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, PlanStatus
from .bounds import floors, hierarchy_bound, incumbent_terms, staircase
from .objective import add_objective, level_literals
from .pricing import Problem
from .relax import coarse_of, relaxed
from .rows import below

# The phases of `solve_cpsat` and where each must end, as shares of the time limit
# (`search.phases`): the floors, the hierarchical bound, the cell model at that bound, the cell
# model's first search, the row-count probes, the cell model again with the proven bound; the
# last fifth is kept for the canonical search. A phase that ends early leaves its time to the
# next. The canonical search is limited in CP-SAT's deterministic time (machine-independent work
# units), with what is left of the limit as a safety net in seconds.
PHASES = (Phase("floors", ends_at=0.1), Phase("hierarchy", ends_at=0.5), Phase("at-bound", ends_at=0.62),
          Phase("first-solve", ends_at=0.68), Phase("rows", ends_at=0.75), Phase("resume", ends_at=0.8),
          Phase("canonical", ends_at=1.0))
CANONICAL_DETERMINISTIC_S = 20.0
# `tighten`'s rounds share out what is left of its time (`Phase.rest`): a probe of the row-count
# relaxation takes 0.6 of it when it probes just below the cheapest row counts met (the probe
# before settled) and 0.5 when it probes the midpoint (the probe before did not settle); the cell
# model at the row counts a probe found, half of what the probe left. With ROUND_LEAST_S or less
# left, no more rounds (nor a cell model after the last probe).
TIGHTEN = (Phase("probe below", rest=0.6), Phase("probe midpoint", rest=0.5), Phase("at counts", rest=0.5))
ROUND_LEAST_S = 0.05


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass
class Model:
    """A built placement model: `y[k][c]` is "a node of class k sits in cell c"."""

    model: cp_model.CpModel
    y: list
    classes: int
    cells: int
    objective: Any  # CP-SAT linear expression


def build_model(prob: Problem, hints: tuple = (), at_least: int | None = None,
                start: np.ndarray | None = None, floors_: tuple | None = None) -> Model:
    """The model of `prob`; `hints` (node placements) cap the objective at the best of them
    and hint it (or hint `start`, class labels per cell); `at_least` is a proven lower bound
    on the objective, `floors_` proven floors of the max slot and tail (`bounds.floors`)."""
    g, T = prob.grid, prob.tables
    K, C = len(prob.classes), g.cells
    Lv = len(prob.levels.values_bytes_per_s)
    CL = prob.class_level
    md = cp_model.CpModel()
    y = [[md.new_bool_var(f"y{k}_{c}") for c in range(C)] for k in range(K)]
    for c in range(C):
        md.add_exactly_one(y[k][c] for k in range(K))
    for k in range(K):
        md.add(sum(y[k][c] for c in range(C)) == int(prob.counts[k]))
    allowed = [[[k2 for k2 in range(K) if CL[k, k2] >= lv] for lv in range(Lv)] for k in range(K)]
    ring_ge, bnd_ge = level_literals(md, g, T)
    # a level holds only if every link it covers does: ge[l] & y[k][a] -> OR(y[k'][b] : level(k, k') >= l)
    for ge, edges in [(ring_ge[s], g.ring_edges(s)) for s in range(g.pp)] + \
            [(bnd_ge[b], g.boundary_edges(b)) for b in range(g.pp - 1)]:
        for lv in range(1, Lv):
            if ge is None or ge[lv] is None:
                continue
            for a, b in edges:
                for src, dst in ((a, b), (b, a)):
                    for k in range(K):
                        al = allowed[k][lv]
                        if len(al) < K:
                            md.add_bool_or([ge[lv].Not(), y[k][src].Not()] + [y[k2][dst] for k2 in al])
    parts = add_objective(md, g, T, ring_ge, bnd_ge)
    parts.add_floors(md, floors_)
    objective = parts.expr
    md.minimize(objective)
    if at_least is not None:
        md.add(objective >= int(at_least))
    if hints:
        best = min(hints, key=prob.objective_of_nodes)
        md.add(objective <= prob.objective_of_nodes(best))  # a baseline's value caps the search
    if hints or start is not None:
        labels = prob.class_of[best] if start is None else start
        for k in range(K):
            for c in range(C):
                md.add_hint(y[k][c], int(labels[c] == k))
    return Model(md, y, K, C, objective)


def _labels(m: Model, solver: cp_model.CpSolver) -> np.ndarray:
    return np.array([next(k for k in range(m.classes) if solver.value(m.y[k][c])) for c in range(m.cells)],
                    dtype=np.int64)


def tighten(prob: Problem, lo: int, obj: int, labels: np.ndarray, time_s: float, workers: int, seed: int,
            hints: tuple = (), floors_: tuple | None = None):
    """Close the gap between a proven bound `lo` and an achieved `obj` with the row-count
    relaxation, as feasibility problems at thresholds of the objective: "no row counts at or
    below v" raises `lo` to v + 1; row counts found at a value below `obj` are handed to the
    cell model, which looks for cells with exactly those counts at that value. Probes just
    below the cheapest row counts met so far (minimising within the threshold, or only
    feasibility once those counts are realised); after a probe it cannot settle, the midpoint.
    Returns (lo, obj, labels)."""
    run = Phases(time_s, TIGHTEN)
    cap, settled, realised = obj, True, False
    while lo < obj:
        value = cap - 1 if settled else (lo + cap - 1) // 2
        if value < lo or run.left_s() <= ROUND_LEAST_S:
            break
        proof = realised and cap == obj  # the cheapest row counts met are realised: only a proof is missing
        status, proven, counts, got = below(prob, value, run.budget_s("probe below" if settled else "probe midpoint"),
                                            workers, seed, minimise=not proof, floors=floors_)
        settled = status != UNKNOWN
        if proven is not None:
            lo = max(lo, proven)
        if counts is None and status != INFEASIBLE:
            cap = value
        elif counts is not None:
            cap = got
            found = search_at(prob, got, run.budget_s("at counts"), workers, seed, counts=counts, hints=hints,
                              floors_=floors_) if run.left_s() > ROUND_LEAST_S else None
            if found is not None and _value(prob, found) < obj:
                labels, obj, realised = found, _value(prob, found), True
    return lo, obj, labels


def search_at(prob: Problem, value: int, time_s: float, workers: int, seed: int, counts=None, groups=None,
              hints: tuple = (), deterministic_s: float | None = None, floors_: tuple | None = None,
              proven: bool = False) -> np.ndarray | None:
    """A labelling with objective <= `value` (and row counts `counts`, groups x rows, where
    `groups` gives each class's group: by default each class its own, or the class of the
    lifted links that holds it, `relax.coarse_of`), as a feasibility problem; None if none is
    found within the limit. `proven`: `value` is a proven lower bound, so the objective is
    fixed to it (minimising it then guides the search by its LP, several times faster than
    feasibility alone)."""
    m = build_model(prob, hints, floors_=floors_)
    m.model.add(m.objective <= int(value))
    if proven:
        m.model.add(m.objective >= int(value))
    else:
        m.model.clear_objective()
    g = prob.grid
    if counts is not None:
        groups = list(range(m.classes)) if groups is None else groups
        for r in range(len(counts)):
            members = [k for k in range(m.classes) if groups[k] == r]
            for s in range(g.pp):
                m.model.add(sum(m.y[k][g.cell(s, j)] for k in members for j in range(g.groups)) == int(counts[r, s]))
    solver, st = solve_model(m.model, time_s, workers, seed, deterministic_s=deterministic_s)
    return _labels(m, solver) if st in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def canonical(prob: Problem, coarse: Problem, optimum: int, hints: tuple, time_s: float,
              floors_: tuple | None = None) -> np.ndarray | None:
    """One labelling at the proven `optimum`, the same for every seed and worker count of the
    search that proved it: row counts (of `coarse`, the lifted links, then of the real links),
    then cells with those counts (or, failing both, any cells), each found by a search with
    one worker, seed 0 and a limit in deterministic time (CANONICAL_DETERMINISTIC_S; `time_s`
    seconds in all as a safety net). None if not found."""
    end = time.perf_counter() + time_s

    def left():
        return max(end - time.perf_counter(), 0.01)

    def lifted_counts():
        hb = hierarchy_bound(coarse, optimum, floors_, left(), 1, 0, deterministic_s=CANONICAL_DETERMINISTIC_S,
                             at_least=optimum)
        return hb.counts, coarse_of(prob, coarse)

    def real_counts():
        return below(prob, optimum, left(), 1, 0, deterministic_s=CANONICAL_DETERMINISTIC_S, floors=floors_)[2], None

    for step in (lifted_counts, real_counts, None):  # each only if the one before found no labelling
        counts, groups = step() if step is not None else (None, None)
        if step is not None and counts is None:
            continue
        labels = search_at(prob, optimum, left(), 1, 0, counts=counts, groups=groups, hints=hints, proven=True,
                           deterministic_s=CANONICAL_DETERMINISTIC_S, floors_=floors_)
        if labels is not None:
            return labels
    return None


def _value(prob: Problem, labels: np.ndarray) -> int:
    return prob.objective_of_nodes(prob.nodes_from_labels(labels))


def _kept(run: Phases) -> tuple[int, int | None, np.ndarray | None]:
    """(bound, objective, labels): what the runner keeps of `solve_cpsat`'s phases."""
    return int(run.bound or 0), (int(run.best_value) if run.best_value is not None else None), run.best


def _known(run: Phases) -> tuple[int, int, np.ndarray]:
    """`_kept` once a labelling is known (the hints' or the first solve's)."""
    bound, obj, labels = _kept(run)
    assert labels is not None and obj is not None, "a plan is known here (the hints' or the first solve's)"
    return bound, obj, labels


def _bounds_first(prob: Problem, coarse: Problem, hints: tuple, run: Phases, workers: int, seed: int,
                  info: dict) -> tuple[int, int]:
    """The hints' best labelling, the floors and the hierarchical bound (`bounds`), and the cell
    model at that bound with its row counts, all offered to `run`; the floors."""
    best = min(hints, key=prob.objective_of_nodes)
    cap = prob.objective_of_nodes(best)
    run.offer(value=cap, incumbent=prob.class_of[best])
    terms = incumbent_terms(prob, prob.class_of[best])
    fl = run.call("floors", lambda s: floors(coarse, terms, s, workers, seed), 0.01)
    hb = run.call("hierarchy", lambda s: staircase(coarse, fl, cap, s, workers, seed), 0.01)
    info.update(floors=list(fl), hierarchy=hb.status, hierarchy_bound=hb.bound, classes_lifted=len(coarse.classes))
    run.offer(bound=hb.bound or 0)
    bound = int(run.bound or 0)
    if hb.counts is not None and hb.value is not None and bound < cap and hb.value < cap:  # realise its row counts
        value = hb.value
        found = run.call("at-bound", lambda s: search_at(
            prob, value, s, workers, seed, counts=hb.counts, groups=coarse_of(prob, coarse), hints=hints,
            floors_=fl, proven=value == bound), 0.01)
        info["at_bound"] = found is not None
        if found is not None:
            run.offer(value=_value(prob, found), incumbent=found)
    return fl


def solve_cpsat(prob: Problem, time_limit_s: float = 60.0, workers: int | None = None, seed: int = 0,
                hints: tuple = ()) -> tuple[PlanStatus, int | None, int | None, np.ndarray | None, dict]:
    """Build and solve; returns (status, objective, bound, class label per cell, info).

    Bounds first (`bounds`: floors, the lifted links' optimum), and the cell model
    at that bound with its row counts; short of a proof, the cell model searches, the
    row-count relaxation raises the bound and proposes row counts (`tighten`), and the cell
    model resumes with the proven bound for what is left of `time_limit_s`. OPTIMAL: the
    objective equals a proven lower bound."""
    t0 = time.perf_counter()
    workers = default_workers() if workers is None else int(workers)
    run = Phases(time_limit_s, PHASES, start=t0)  # each phase's budget at least 10 ms (CP-SAT's minimum)
    run.offer(bound=0)  # the runner keeps the highest bound and the cheapest labelling found
    info: dict = {"workers": workers, "phases": run.times}
    coarse = relaxed(prob)
    fl = _bounds_first(prob, coarse, hints, run, workers, seed, info) if hints else None
    bound, obj, labels = _kept(run)
    if labels is None or obj is None or bound < obj:
        m = build_model(prob, hints, at_least=bound or None, start=labels, floors_=fl)
        solver, st = run.call("first-solve", lambda s: solve_model(m.model, s, workers, seed), 0.01)
        status = plan_status(st)
        info.update(booleans=m.classes * m.cells, branches=solver.num_branches, conflicts=solver.num_conflicts)
        if status in (OPTIMAL, FEASIBLE):
            if obj is None or int(round(solver.objective_value)) < obj:
                run.offer(value=int(round(solver.objective_value)), incumbent=_labels(m, solver))
            bound, obj, labels = _kept(run)
            run.offer(bound=obj if status == OPTIMAL else int(math.ceil(solver.best_objective_bound - 1e-6)))
        elif status == INFEASIBLE and obj is not None:  # nothing below the cap at or above the bound
            run.offer(bound=obj)
        elif labels is None:
            info["status"], info["wall_time_s"] = status, time.perf_counter() - t0
            return status, None, None, None, info
    bound, obj, labels = _known(run)
    if bound < obj and run.budget_s("resume") > 0.1:
        lo, hi, known = bound, obj, labels
        run.offer(*run.call("rows", lambda s: tighten(prob, lo, hi, known, s, workers, seed, hints, fl), 0.01))
        bound, obj, labels = _known(run)
        info["row_bound"] = bound
    if bound < obj and run.budget_s("resume") > 0.1:
        m2 = build_model(prob, hints, at_least=bound, start=labels, floors_=fl)
        solver, st = run.call("resume", lambda s: solve_model(m2.model, s, workers, seed))
        if plan_status(st) in (OPTIMAL, FEASIBLE):
            if int(round(solver.objective_value)) < obj:
                run.offer(value=int(round(solver.objective_value)), incumbent=_labels(m2, solver))
            run.offer(bound=int(math.ceil(solver.best_objective_bound - 1e-6)))
        elif st == cp_model.INFEASIBLE:
            run.offer(bound=obj)
        bound, obj, labels = _known(run)
    status = OPTIMAL if bound >= obj else FEASIBLE
    bound = min(bound, obj)
    if status == OPTIMAL:
        t1 = time.perf_counter()
        canon = run.call("canonical", lambda s: canonical(prob, coarse, obj, hints, s, fl), 0.01)
        info["canonical"], info["canonical_s"] = canon is not None, time.perf_counter() - t1
        if canon is not None:
            labels = canon
    info["status"] = status
    info["wall_time_s"] = time.perf_counter() - t0
    return status, obj, bound, labels, info
