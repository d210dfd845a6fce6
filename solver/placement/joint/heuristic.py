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
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ...formulation.splits import balanced_split, fill, waterfill
from .nodes import NodeSet
from .prices import Prices, StageCosts

MAX_POOL_ORDERS = 24


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
            pat, need = [], pp
            for pl in order:
                take = min(cap[pl], need)
                pat += [pl] * take
                need -= take
            if need == 0 and tuple(pat) not in seen:
                seen.add(tuple(pat))
                yield tuple(pat)


def stage_nodes(orders: list[list[int]], pattern, per_stage: int) -> tuple[tuple[int, ...], ...]:
    """Consecutive whole nodes of each stage's pool, in the pool's order."""
    used = [0] * len(orders)
    out = []
    for pl in pattern:
        out.append(tuple(orders[pl][used[pl]:used[pl] + per_stage]))
        used[pl] += per_stage
    return tuple(out)


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
                    layers: Optional[tuple[int, ...]] = None) -> list[Optional[Assignment]]:
    """The best contiguous-block plan of each shape in `shapes_idx` (None where none fits);
    shapes with the same pipeline depth and stage size share their patterns and nodes.
    `layers`: a split every plan keeps (the shapes then share one pipeline depth)."""
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
        for pat in pool_patterns(sizes, n, pp):
            node_lists = stage_nodes(orders, pat, n)
            ring, bnd = prices.levels_of(node_lists)
            costs = prices.costs(ks, pat, ring, bnd)
            lay = best_splits(costs, prices.L, uneven) if layers is None else \
                np.tile(np.array(layers, dtype=np.int64), (len(ks), 1))
            obj = costs.objective(lay)
            for i in np.flatnonzero(np.isfinite(obj)):
                k = int(ks[i])
                if k not in best or obj[i] < best[k].objective_s:
                    best[k] = Assignment(k, tuple(pat), node_lists, tuple(int(x) for x in lay[i]), float(obj[i]))
    return [best.get(int(k)) for k in shapes_idx]
