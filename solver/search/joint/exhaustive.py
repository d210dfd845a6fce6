"""Exhaustive joint search for small clusters: every legal shape on whole nodes, every pool and
every choice of nodes per stage (up to interchangeable nodes: class counts), every layer split,
priced by the linear pieces of the float formulation (`prices.StageCosts`) and the winner
re-evaluated by the float formulation itself. The ground truth the joint CP-SAT model is tested
against (issue #13).

Nothing is pruned but shapes with no split that fits within the largest memory limits (the
relaxation in `space` proves those cannot fit anywhere). Ties go to the first in shape rank
order (the CP-SAT model's), so both name the same plan where it is unique.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from ...errors import InputError
from ...formulation.splits import balanced_split
from ...specs import JobSpec
from ..result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, MethodResult
from .heuristic import Assignment
from .nodes import NodeSet
from .prepare import JointCandidates, prepare_joint
from .solve import method_result, shape_ranks

EXHAUSTIVE_MAX_NODES = 8
BLOCK = 512  # splits per block (x shapes x stages elements per array)


def _compositions(L: int, p: int) -> np.ndarray:
    if p == 1:
        return np.array([[L]], dtype=np.int64)
    cuts = np.array(list(itertools.combinations(range(1, L), p - 1)), dtype=np.int64).reshape(-1, p - 1)
    edges = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), L)])
    return np.diff(edges, axis=1)


def _multisets(classes: list[int], counts: np.ndarray, n: int):
    """Count vectors over `classes` summing to n within `counts`."""
    if not classes:
        if n == 0:
            yield {}
        return
    c, rest = classes[0], classes[1:]
    for take in range(min(n, int(counts[c])), -1, -1):
        for tail in _multisets(rest, counts, n - take):
            yield {c: take, **tail} if take else tail


def _stage_options(nodes: NodeSet, n: int) -> list[tuple[int, dict]]:
    out = []
    for pl in sorted(set(nodes.class_pool.tolist())):
        cls = [c for c in range(len(nodes.classes)) if nodes.class_pool[c] == pl]
        out += [(pl, m) for m in _multisets(cls, nodes.counts, n)]
    return out


def _ring(nodes: NodeSet, m: dict) -> int:
    CL, used = nodes.class_level, [c for c, k in m.items() if k]
    vals = [CL[c, c] for c in used if m[c] >= 2] + [CL[a, b] for a, b in itertools.combinations(used, 2)]
    return min(vals) if vals else nodes.num_levels


def _cross(nodes: NodeSet, m1: dict, m2: dict) -> int:
    return min(nodes.class_level[a, b] for a in m1 for b in m2)


def assignments(nodes: NodeSet, pp: int, n: int):
    """Every (pools, class counts per stage) of pp stages of n nodes within the classes' sizes."""
    opts = _stage_options(nodes, n)
    left = nodes.counts.copy()
    chosen: list = []

    def rec(s):
        if s == pp:
            yield list(chosen)
            return
        for pl, m in opts:
            if all(left[c] >= k for c, k in m.items()):
                for c, k in m.items():
                    left[c] -= k
                chosen.append((pl, m))
                yield from rec(s + 1)
                chosen.pop()
                for c, k in m.items():
                    left[c] += k

    yield from rec(0)


def _nodes_of(nodes: NodeSet, stages) -> tuple[tuple[int, ...], ...]:
    pools = [list(m) for m in nodes.classes]
    out = []
    for _, m in stages:
        mine = []
        for c, k in sorted(m.items()):
            mine += pools[c][:k]
            pools[c] = pools[c][k:]
        out.append(tuple(sorted(mine)))
    return tuple(out)


def solve_exhaustive(job: JobSpec, nodes: NodeSet, max_nodes: int = EXHAUSTIVE_MAX_NODES,
                     time_limit_s: float | None = None, cands: JointCandidates | None = None):
    """(best Assignment with its float step, evaluations, finished). `cands`: candidates prepared
    without time pruning (`prepare_joint(job, nodes, prune_time=False)`)."""
    if nodes.n > max_nodes:
        raise InputError("method", f"exhaustive joint search is limited to {max_nodes} nodes (got {nodes.n})")
    t0 = time.perf_counter()
    cands = cands or prepare_joint(job, nodes, prune_time=False)
    pr = cands.prices
    L, uneven = pr.L, job.constraints.uneven_split
    rank = shape_ranks(cands)
    best, best_key, evals = None, None, 0
    groups = sorted(set(zip(pr.shapes.pp.tolist(), cands.stage_nodes.tolist())))
    for pp, n in groups:
        ks = np.flatnonzero((pr.shapes.pp == pp) & (cands.stage_nodes == n))
        splits = _compositions(L, pp) if uneven else np.array([balanced_split(L, pp)], dtype=np.int64)
        seen = set()
        for stages in assignments(nodes, pp, n):
            pools = tuple(pl for pl, _ in stages)
            ring = tuple(_ring(nodes, m) for _, m in stages)
            bnd = tuple(_cross(nodes, stages[b][1], stages[b + 1][1]) for b in range(pp - 1))
            if (pools, ring, bnd) in seen:
                continue
            seen.add((pools, ring, bnd))
            costs = pr.costs(ks, pools, ring, bnd)
            for start in range(0, len(splits), BLOCK):
                lay = splits[start:start + BLOCK].astype(np.float64)
                slot = costs.slot_slope[:, None, :] * lay[None] + costs.slot_const[:, None, :]
                tail = np.maximum(costs.opt_slope[:, None, :] * lay[None] + costs.opt_const[:, None, :],
                                  costs.red_slope[:, None, :] * lay[None] + costs.red_const[:, None, :])
                t = (costs.w[:, None] * slot.max(axis=2) + slot.sum(axis=2) / costs.v[:, None]
                     + np.maximum(tail.max(axis=2), 0.0))
                t = np.where((lay[None] <= costs.limit[:, None, :]).all(axis=2), t, np.inf)
                evals += t.size
                val = float(t[np.unravel_index(int(np.argmin(t)), t.shape)])
                if not math.isfinite(val):
                    continue
                # the smallest value, then the first shape in rank order among equal values
                tied = np.argwhere(t <= val * (1 + 1e-12))
                i, r = min(tied.tolist(), key=lambda ir: (rank[ks[ir[0]]], ir[1]))
                key = (val, int(rank[ks[i]]))
                if best_key is None or key < best_key:
                    best_key = key
                    best = Assignment(int(ks[i]), pools, _nodes_of(nodes, stages),
                                      tuple(int(x) for x in splits[start + r]), val)
            if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
                return _final(pr, best), evals, False
    return _final(pr, best), evals, True


def search_exhaustive(job: JobSpec, nodes: NodeSet, time_limit_s: float, cands: JointCandidates) -> MethodResult:
    """`solve_exhaustive` as a search method's result: OPTIMAL (its plan's step the bound) or
    INFEASIBLE when it finished and every shape was searched (`cands.outside_bound_s` infinite),
    else the best plan found unproven (FEASIBLE) or UNKNOWN."""
    best, evals, finished = solve_exhaustive(job, nodes, time_limit_s=time_limit_s, cands=cands)
    finished = finished and math.isinf(cands.outside_bound_s)
    status = (OPTIMAL if finished else FEASIBLE) if best is not None else (INFEASIBLE if finished else UNKNOWN)
    bound = best.objective_s if finished and best is not None else None
    return method_result(status, best, bound, None, {"evaluations": evals}, [], evaluations=evals)


def _final(pr, best: Assignment | None) -> Assignment | None:
    if best is None:
        return None
    ev = pr.evaluate(best.k, best.pools, best.nodes, best.layers)
    return Assignment(best.k, best.pools, best.nodes, best.layers, ev.step_time_s)
