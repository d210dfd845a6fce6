"""Plans found without a search: the incumbent that caps the joint model, prunes shapes and
seeds the annealing baseline.

For a shape, the stages go to the pools in contiguous blocks (every order of the pools; with
two pools every block size), each stage on the next whole nodes of its pool in a rack-aware
order (`node_order`: classes chained by their fastest links, so consecutive stages share
racks and the slowest nodes come last or stay idle), and the layers are water-filled over the
stages' slots within their memory limits (`formulation.splits.waterfill`), or balanced when
the job wants even splits.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...formulation.splits import balanced_split, fill, waterfill
from ...specs.deadline import Deadline
from .nodes import NodeSet
from .prices import Prices, StageCosts

MAX_POOL_ORDERS = 24
REPAIR_ROUNDS = 8  # node trades made at most per plan (`repair`)
REPAIR_TRIES = 6  # trades scored per round
REPAIR_PATTERNS = 2  # patterns of pools per group of shapes whose nodes are repaired


@dataclass
class Assignment:
    """Shape k (index into the prices' shapes), per stage its pool, nodes and layers."""

    k: int
    pools: tuple[int, ...]
    nodes: tuple[tuple[int, ...], ...]
    layers: tuple[int, ...]
    objective_s: float  # the linear pieces' step time (the float formulation's within rounding)


def node_order(nodes: NodeSet, pool: int) -> list[int]:
    """The pool's nodes, classes chained greedily: start from the class with the fastest link
    inside it (then the largest), then always the class best linked to the last one."""
    CL = nodes.class_level
    left = [c for c in range(len(nodes.classes)) if nodes.class_pool[c] == pool]
    if not left:
        return []
    size = nodes.counts
    start = max(left, key=lambda c: (CL[c, c], size[c], -c))
    chain = [start]
    left.remove(start)
    while left:
        nxt = max(left, key=lambda c: (CL[chain[-1], c], CL[c, c], size[c], -c))
        chain.append(nxt)
        left.remove(nxt)
    return [i for c in chain for i in nodes.classes[c]]


def pool_patterns(sizes: list[int], per_stage: int, pp: int) -> Iterator[tuple[int, ...]]:
    """Pools of the stages in contiguous blocks: each order of the pools (at most
    MAX_POOL_ORDERS), with two pools every feasible block size, else each pool filled in turn."""
    P = len(sizes)
    cap = [s // per_stage for s in sizes]
    seen = set()
    for order in itertools.islice(itertools.permutations(range(P)), MAX_POOL_ORDERS):
        if P <= 2:
            a = order[0]
            b = order[1] if P == 2 else None
            for q in range(pp, -1, -1):
                if q <= cap[a] and (pp - q == 0 or (b is not None and pp - q <= cap[b])):
                    pat = (a,) * q + ((b,) * (pp - q) if b is not None else ())
                    if pat not in seen:
                        seen.add(pat)
                        yield pat
        else:
            filled: list[int] = []
            need = pp
            for pl in order:
                take = min(cap[pl], need)
                filled += [pl] * take
                need -= take
            if need == 0 and tuple(filled) not in seen:
                seen.add(tuple(filled))
                yield tuple(filled)


def stage_nodes(orders: list[list[int]], pattern, per_stage: int) -> tuple[tuple[int, ...], ...]:
    """Consecutive whole nodes of each stage's pool, in the pool's order."""
    used = [0] * len(orders)
    out = []
    for pl in pattern:
        out.append(tuple(orders[pl][used[pl]:used[pl] + per_stage]))
        used[pl] += per_stage
    return tuple(out)


def repair(nodes: NodeSet, pattern, node_lists, orders: list[list[int]], score, rounds: int = REPAIR_ROUNDS,
           deadline: Deadline | None = None) -> tuple[tuple[int, ...], ...]:
    """The stages' nodes after trades that lower `score(node_lists)` (a plan's step time): each
    round, a node of the slowest pair of the slowest ring or boundary may trade places with an
    idle node of its pool or a node of another stage of its pool, or a stage of that ring or
    boundary with another stage of its pool (its position in the pipeline); the REPAIR_TRIES trades that
    leave the rings and boundaries they touch fastest (least level, then sum) are scored, the
    best is made if it lowers the score. A degraded pair inside a stage costs its data-parallel
    traffic the degraded rate, and across a boundary its p2p: contiguous blocks see neither.
    Past `deadline` the trades made so far are returned (each round costs O(nodes^2) at
    hundreds of nodes)."""
    dl = deadline if deadline is not None else Deadline()
    stages = [list(st) for st in node_lists]
    if len(stages[0]) < 2:
        return tuple(tuple(st) for st in stages)
    used = {i for st in stages for i in st}
    idle = {pl: [i for i in orders[pl] if i not in used] for pl in set(pattern)}
    idx = nodes.levels.index
    current = score(tuple(tuple(st) for st in stages))
    p = len(stages)
    for _ in range(rounds):
        if dl.expired():
            break
        # the slowest ring or boundary, and the nodes of its slowest pairs
        elems = [(nodes.group_level(st), (s,)) for s, st in enumerate(stages)] + \
            [(nodes.cross_level(stages[b], stages[b + 1]), (b, b + 1)) for b in range(p - 1)]
        worst, where = min(elems, key=lambda e: e[0])
        bad = []
        for s in where:
            others = [x for u in where for x in stages[u]]
            bad += [(s, i) for i in stages[s] if any(idx[i, j] == worst for j in others if j != i)]

        def affected(trial, ss):
            bs = {b for u in ss for b in (u - 1, u) if 0 <= b < p - 1}
            lv = [nodes.group_level(trial[u]) for u in ss] + [nodes.cross_level(trial[b], trial[b + 1]) for b in bs]
            return (min(lv), sum(lv))

        cands: list[tuple] = []  # (affected levels, stage, node out or None, node in or None, other stage or None)
        for s, i in bad:
            if dl.expired():
                return tuple(tuple(sorted(st)) for st in stages)
            for y in idle[pattern[s]]:
                if dl.expired():
                    return tuple(tuple(sorted(st)) for st in stages)
                trial = list(stages)
                trial[s] = [x for x in stages[s] if x != i] + [y]
                cands.append((affected(trial, (s,)), s, i, y, None))
            for t in range(p):
                if t == s or pattern[t] != pattern[s]:
                    continue
                for y in stages[t]:
                    trial = list(stages)
                    trial[s] = [x for x in stages[s] if x != i] + [y]
                    trial[t] = [x for x in stages[t] if x != y] + [i]
                    cands.append((affected(trial, (s, t)), s, i, y, t))
        for s in where:  # or a whole stage trades places with another of its pool
            for t in range(p):
                if t != s and pattern[t] == pattern[s]:
                    trial = list(stages)
                    trial[s], trial[t] = stages[t], stages[s]
                    cands.append((affected(trial, (s, t)), s, None, None, t))
        cands.sort(key=lambda c: c[0], reverse=True)
        best = None
        for _key, s, i, y, t in cands[:REPAIR_TRIES]:
            trial = [list(st) for st in stages]
            if i is None:
                trial[s], trial[t] = list(stages[t]), list(stages[s])
            else:
                trial[s] = [x for x in stages[s] if x != i] + [y]
                if t is not None:
                    trial[t] = [x for x in stages[t] if x != y] + [i]
            val = score(tuple(tuple(st) for st in trial))
            if val < current and (best is None or val < best[0]):
                best = (val, trial, s, i, y, t)
        if best is None:
            break
        current, stages, s, i, y, t = best
        if t is None and i is not None:
            idle[pattern[s]] = [x for x in idle[pattern[s]] if x != y] + [i]
    return tuple(tuple(sorted(st)) for st in stages)


def best_splits(costs: StageCosts, num_layers: int, uneven: bool) -> np.ndarray:
    """Per row, the split that minimises the largest slot within the stages' memory limits (or
    the balanced split); its step time is `costs.objective` (inf when nothing fits)."""
    R, p = costs.slot_slope.shape
    if not uneven:
        return np.tile(np.array(balanced_split(num_layers, p), dtype=np.int64), (R, 1))
    upper = np.clip(costs.limit, 0, num_layers)
    ok = (upper >= 1).all(axis=1) & (upper.sum(axis=1) >= num_layers)
    out = np.tile(np.array(balanced_split(num_layers, p), dtype=np.int64), (R, 1))
    if ok.any():
        slope = np.maximum(costs.slot_slope[ok], 1e-300)
        const, up = costs.slot_const[ok], upper[ok]
        active = np.ones(up.shape, dtype=bool)
        _, hi = waterfill(slope, const, up, active, num_layers, iterations=64, rel_tol=1e-12)
        out[ok] = fill(slope, const, up, active, hi, num_layers)
    return out


def heuristic_plans(prices: Prices, stage_nodes_of: np.ndarray, shapes_idx, uneven: bool,
                    layers: tuple[int, ...] | None = None, extra: dict | None = None,
                    deadline: Deadline | None = None) -> list[Assignment | None]:
    """The best contiguous-block plan of each shape in `shapes_idx` (None where none fits);
    shapes with the same pipeline depth and stage size share their patterns and nodes.
    `layers`: a split every plan keeps (the shapes then share one pipeline depth). `extra`:
    shape -> pools of its stages, one more pattern tried for its group (e.g. where its bound
    reaches its largest slot: `bounds.bound_and_patterns`). Past `deadline` the plans found so
    far are returned."""
    dl = deadline if deadline is not None else Deadline()
    nodes = prices.nodes
    P = len(prices.views)
    orders = [node_order(nodes, pl) for pl in range(P)]
    sizes = [len(o) for o in orders]
    shapes_idx = np.asarray(list(shapes_idx), dtype=np.int64)
    best: dict[int, Assignment] = {}
    keys = np.column_stack([prices.shapes.pp[shapes_idx], stage_nodes_of[shapes_idx]]) if len(shapes_idx) else \
        np.zeros((0, 2), dtype=np.int64)
    for pp, n in sorted(set(map(tuple, keys.tolist()))):
        ks = shapes_idx[(keys[:, 0] == pp) & (keys[:, 1] == n)]
        pats = list(pool_patterns(sizes, n, pp))
        for k in ks.tolist() if extra else ():
            pat = extra.get(k) if extra else None
            if pat is not None and pat not in pats and all(pat.count(pl) * n <= sizes[pl] for pl in set(pat)):
                pats.append(pat)
        tried = []
        for pat in pats:
            if dl.expired():
                break
            node_lists = stage_nodes(orders, pat, n)
            obj, lay = _place(prices, ks, pat, node_lists, uneven, layers)
            tried.append((float(np.min(obj)), pat, node_lists, lay))
            _keep(best, ks, pat, node_lists, obj, lay)
        # the most promising patterns (and every extra one), with their nodes repaired
        repairs = sorted(tried, key=lambda x: x[0])[:REPAIR_PATTERNS] + \
            [x for x in tried if extra and any(extra.get(int(k)) == x[1] for k in ks)]
        for _v, pat, node_lists, lay in repairs:
            if dl.expired():
                break
            i0 = int(np.argmin(_place(prices, ks, pat, node_lists, uneven, layers)[0]))
            score = lambda nl, ks=ks, i0=i0, pat=pat, lay=lay: float(  # noqa: E731  (this iteration's values, bound)
                _place(prices, ks[i0:i0 + 1], pat, nl, uneven, lay[i0:i0 + 1])[0][0])
            fixed = repair(nodes, pat, node_lists, orders, score, deadline=dl)
            if fixed != node_lists:
                obj, lay2 = _place(prices, ks, pat, fixed, uneven, layers)
                _keep(best, ks, pat, fixed, obj, lay2)
    return [best.get(int(k)) for k in shapes_idx]


def _place(prices: Prices, ks, pat, node_lists, uneven: bool, layers) -> tuple[np.ndarray, np.ndarray]:
    """(step time, split) of each shape of `ks` on these stages: the best split, or `layers`
    (one split for every shape, or one per shape)."""
    ring, bnd = prices.levels_of(node_lists)
    costs = prices.costs(ks, pat, ring, bnd)
    if layers is None:
        lay = best_splits(costs, prices.L, uneven)
    else:
        lay = np.asarray(layers, dtype=np.int64)
        lay = np.tile(lay, (len(ks), 1)) if lay.ndim == 1 else lay
    return costs.objective(lay), lay


def _keep(best: dict, ks, pat, node_lists, obj: np.ndarray, lay: np.ndarray) -> None:
    for i in np.flatnonzero(np.isfinite(obj)):
        k = int(ks[i])
        if k not in best or obj[i] < best[k].objective_s:
            best[k] = Assignment(k, tuple(pat), node_lists, tuple(int(x) for x in lay[i]), float(obj[i]))
