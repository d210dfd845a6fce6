"""A lower bound on the placement objective from row counts: how many nodes of each class sit
in each stage's row, with no columns (the relaxation `cpsat.solve_cpsat` proves against).

Necessary conditions only, so its optimum never exceeds the cell model's (a valid bound).
Take any placement and let `x[k][s]` count the nodes of class k in row s, `G_l` the graph of
class pairs linked at level >= l (a class is linked to itself when two of its nodes are):

- a boundary b at level >= l matches rows b and b+1 column by column over links >= l, so
  every connected component Q of `G_l` has as many nodes in row b as in row b+1, and (Hall)
  `x[k][b] <= sum of x[k'][b+1]` over the neighbours k' of k in `G_l`, and the same upwards;
- a ring at level >= l stays inside one component of `G_l` (its row lies in one component,
  a component smaller than the row holds none of it), and a class not linked to itself has
  at least as many neighbours in the row as members (two for a single node, rings of >= 3).

Each stage's ring and each boundary get order-encoded levels priced by `objective`. On a
fabric whose levels form a hierarchy (racks under a spine: an ultrametric) these conditions
are also sufficient, so the bound is the optimum; degraded links and NICs are what the cell
model then has to place."""

from __future__ import annotations

import numpy as np

from ..search.cpsat.ortools_cp import cp_model
from ..search.cpsat.solve import solve_model
from ..search.result import FEASIBLE, INFEASIBLE, UNKNOWN
from .objective import add_objective, level_literals
from .pricing import Problem
from .relax import twin_groups


def components(CL: np.ndarray, lv: int) -> list[list[int]]:
    """Connected components of the class graph with an edge where the classes' level is >= lv."""
    K = len(CL)
    root = list(range(K))

    def find(a):
        while root[a] != a:
            root[a] = root[root[a]]
            a = root[a]
        return a

    for a in range(K):
        for b in range(a + 1, K):
            if CL[a, b] >= lv:
                root[find(a)] = find(b)
    out: dict[int, list[int]] = {}
    for a in range(K):
        out.setdefault(find(a), []).append(a)
    return list(out.values())


def add_lex_ge(md: cp_model.CpModel, a: list, b: list, name: str) -> None:
    """a >= b lexicographically (integer vectors): eq[i] = "equal on the first i + 1"."""
    prev = None
    for i, (ai, bi) in enumerate(zip(a, b)):
        eq = md.new_bool_var(f"{name}_eq{i}")
        md.add(ai == bi).only_enforce_if(eq)
        if prev is None:
            md.add(ai >= bi)
            md.add(ai >= bi + 1).only_enforce_if(eq.Not())
        else:
            md.add_implication(eq, prev)
            md.add(ai >= bi).only_enforce_if(prev)
            md.add(ai >= bi + 1).only_enforce_if([prev, eq.Not()])
        prev = eq


class RowModel:
    """The relaxation of `prob` as a CP-SAT model (`x[k][s]`, `objective` not yet bounded).
    Classes interchangeable as a whole (`relax.twin_groups`) take their row counts in
    non-increasing lexicographic order (any placement has an image of the same objective that
    does); `floors` are proven lower bounds of the max slot and the tail."""

    def __init__(self, prob: Problem, floors=None):
        g, T, CL = prob.grid, prob.tables, prob.class_level
        K, D, P = len(prob.classes), g.groups, g.pp
        counts = [int(c) for c in prob.counts]
        Lv = len(prob.levels.values_bytes_per_s)
        md = cp_model.CpModel()
        x = [[md.new_int_var(0, min(D, counts[k]), f"x{k}_{s}") for s in range(P)] for k in range(K)]
        for k in range(K):
            md.add(sum(x[k]) == counts[k])
        for s in range(P):
            md.add(sum(x[k][s] for k in range(K)) == D)
        ring_ge, bnd_ge = level_literals(md, g, T)
        comps = {lv: components(CL, lv) for lv in range(1, Lv)}
        nbrs = {lv: [[k2 for k2 in range(K) if CL[k, k2] >= lv] for k in range(K)] for lv in range(1, Lv)}
        for b in range(P - 1):
            for lv in range(1, Lv):
                ge = bnd_ge[b][lv]
                if ge is None:
                    continue
                for Q in comps[lv]:
                    md.add(sum(x[k][b] for k in Q) == sum(x[k][b + 1] for k in Q)).only_enforce_if(ge)
                for k in range(K):
                    for r0, r1 in ((b, b + 1), (b + 1, b)):
                        md.add(x[k][r0] <= sum(x[k2][r1] for k2 in nbrs[lv][k])).only_enforce_if(ge)
        for s in range(P):
            if ring_ge[s] is None:
                continue
            for lv in range(1, Lv):
                ge = ring_ge[s][lv]
                if ge is None:
                    continue
                for Q in comps[lv]:
                    inside = sum(x[k][s] for k in Q)
                    if sum(counts[k] for k in Q) < D:
                        md.add(inside == 0).only_enforce_if(ge)
                    else:
                        z = md.new_bool_var(f"in{s}_{lv}_{Q[0]}")
                        md.add(inside == D * z).only_enforce_if(ge)
                for k in range(K):
                    if k in nbrs[lv][k]:
                        continue
                    need = 2 if counts[k] == 1 and D >= 3 else 1
                    md.add(sum(x[k2][s] for k2 in nbrs[lv][k]) >= need * x[k][s]).only_enforce_if(ge)
        for group in twin_groups(prob):
            for a, b in zip(group, group[1:]):
                add_lex_ge(md, x[a], x[b], f"lex{a}_{b}")
        obj = add_objective(md, g, T, ring_ge, bnd_ge)
        obj.add_floors(md, floors)
        self.objective, self.parts = obj.expr, obj
        self.model, self.x, self.prob = md, x, prob


def below(prob: Problem, value: int, time_s: float, workers: int, seed: int, deterministic_s: float | None = None,
          minimise: bool = True, floors=None):
    """Row counts with objective <= `value`, the cheapest if `minimise`: the threshold makes
    it a feasibility problem first (it propagates far better than the objective alone).
    Returns (status, proven lower bound or None, row counts (classes x rows) or None, their
    objective): INFEASIBLE proves every placement of `prob` costs more than `value`; OPTIMAL
    (when minimising) that none costs less than the counts'. `deterministic_s`: a limit in
    CP-SAT's deterministic time too."""
    rm = RowModel(prob, floors)
    rm.model.add(rm.objective <= int(value))
    if minimise:
        rm.model.minimize(rm.objective)
    solver, st = solve_model(rm.model, time_s, workers, seed, deterministic_s=deterministic_s)
    if st == cp_model.INFEASIBLE:
        return INFEASIBLE, int(value) + 1, None, None
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return UNKNOWN, None, None, None
    counts = np.array([[solver.value(v) for v in row] for row in rm.x], dtype=np.int64)
    got = int(solver.value(rm.objective))
    if not minimise:
        return FEASIBLE, None, counts, got
    bound = got if st == cp_model.OPTIMAL else int(np.ceil(solver.best_objective_bound - 1e-6))
    return solver.status_name(st), bound, counts, got
