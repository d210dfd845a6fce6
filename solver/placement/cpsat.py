"""The CP-SAT model of placement (the package docstring gives its variables): `build_model`
makes it for a `pricing.Problem`, `solve_cpsat` builds and solves it, in the same API style
as the main encoding (`search.cpsat`: snake_case ortools calls, statuses as `PlanStatus`).

No symmetry breaking: interchangeable nodes are already merged into classes, and the cap at
the better baseline's objective prunes the rest."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np
from ortools.sat.python import cp_model

from ..search.cpsat.solve import plan_status, solve_model
from ..search.result import PlanStatus
from .pricing import Problem


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass
class Model:
    """A built placement model: `y[k][c]` is "a node of class k sits in cell c"."""

    model: cp_model.CpModel
    y: list
    classes: int
    cells: int


def build_model(prob: Problem, hints: tuple = ()) -> Model:
    """The model of `prob`; `hints` (node placements) cap the objective at the best of them
    and hint it."""
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

    def level_vars(name, edges, useful):
        # order encoding; a level whose costs equal the one below it needs no literal
        ge = [None] * Lv
        prev = None
        for lv in range(1, Lv):
            if not useful[lv]:
                continue
            ge[lv] = md.new_bool_var(f"{name}_ge{lv}")
            if prev is not None:
                md.add_implication(ge[lv], prev)
            prev = ge[lv]
        for lv in range(1, Lv):
            if ge[lv] is None:
                continue
            for a, b in edges:
                for src, dst in ((a, b), (b, a)):
                    for k in range(K):
                        al = allowed[k][lv]
                        if len(al) == K:
                            continue
                        md.add_bool_or([ge[lv].Not(), y[k][src].Not()] + [y[k2][dst] for k2 in al])
        return ge

    def cost(ge, table):  # table[l] nonincreasing: value at the chosen level
        expr = int(table[0])
        for lv in range(1, Lv):
            d = int(table[lv - 1] - table[lv])
            if d:
                expr = expr - d * ge[lv]  # ge[l] exists wherever the table changes
        return expr

    tau_e, tail_e = [], []
    for s in range(g.pp):
        edges = g.ring_edges(s)
        if edges:
            ge = level_vars(f"r{s}", edges, [lv > 0 and (T.tau[lv - 1, s] != T.tau[lv, s] or T.tail[lv - 1, s] != T.tail[lv, s])
                                              for lv in range(Lv)])
            tau_e.append(cost(ge, T.tau[:, s]))
            tail_e.append(cost(ge, T.tail[:, s]))
        else:
            tau_e.append(int(T.tau[-1, s]))
            tail_e.append(int(T.tail[-1, s]))
    pi_e = []
    for b in range(g.pp - 1):
        ge = level_vars(f"b{b}", g.boundary_edges(b), [lv > 0 and T.pi[lv - 1] != T.pi[lv] for lv in range(Lv)])
        pi_e.append(cost(ge, T.pi))
    slot_ub = int(T.tau[0].max() + T.v * T.pi[0]) + 1
    slots = []
    max_slot = md.new_int_var(0, slot_ub, "maxslot")
    for s in range(g.pp):
        sl = md.new_int_var(0, slot_ub, f"slot{s}")
        adj = [pi_e[b] for b in (s - 1, s) if 0 <= b < g.pp - 1]
        if adj:
            for pe in adj:
                md.add(sl >= tau_e[s] + T.v * pe)
        else:
            md.add(sl >= tau_e[s])
        md.add(max_slot >= sl)
        slots.append(sl)
    tail = md.new_int_var(0, int(T.tail[0].max()) + 1, "tail")
    for s in range(g.pp):
        md.add(tail >= tail_e[s])
    objective = (T.mv - 1) * max_slot + sum(slots) + T.v * tail
    md.minimize(objective)
    if hints:
        best = min(hints, key=prob.objective_of_nodes)
        md.add(objective <= prob.objective_of_nodes(best))  # a baseline's value caps the search
        labels = prob.class_of[best]
        for k in range(K):
            for c in range(C):
                md.add_hint(y[k][c], int(labels[c] == k))
    return Model(md, y, K, C)


def solve_cpsat(prob: Problem, time_limit_s: float = 60.0, workers: Optional[int] = None, seed: int = 0,
                hints: tuple = ()) -> tuple[PlanStatus, Optional[int], Optional[int], Optional[np.ndarray], dict]:
    """Build and solve; returns (status, objective, bound, class label per cell, info)."""
    m = build_model(prob, hints)
    workers = default_workers() if workers is None else int(workers)
    solver, st = solve_model(m.model, time_limit_s, workers, seed)
    status = plan_status(st)
    info = {"status": status, "wall_time_s": solver.wall_time, "booleans": m.classes * m.cells, "workers": workers,
            "branches": solver.num_branches, "conflicts": solver.num_conflicts}
    if status not in ("OPTIMAL", "FEASIBLE"):
        return status, None, None, None, info
    labels = np.array([next(k for k in range(m.classes) if solver.value(m.y[k][c])) for c in range(m.cells)],
                      dtype=np.int64)
    bound = int(math.ceil(solver.best_objective_bound - 1e-6))
    return status, int(round(solver.objective_value)), bound, labels, info
