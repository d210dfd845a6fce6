"""The first phase of a joint search: the joint shapes, pruned by the compute bound and the
equal-link relaxation against the best heuristic plan, with the prices of the survivors.

Order (branch and bound): the compute bound ranks every shape; the `PROBE` best go through the
relaxation and the contiguous-block heuristic, which gives the incumbent; every shape whose
compute bound exceeds it goes; the rest are priced, bounded by the relaxation, and tried by
the heuristic in order of their bound until the bound passes the incumbent. Plans found by
other means (`extra`: a sequential plan, a pool alone) may improve the incumbent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ...space.shapes import RECOMPUTE_CODES, Shapes
from ...specs import JobSpec
from .heuristic import Assignment, heuristic_plans, node_order, stage_nodes
from .nodes import NodeSet
from .prices import Prices
from .space import JointShapes, compute_bound_s, joint_shapes, relaxed_bound_s, uniform_gpus_per_node

Seed = tuple  # (shape row as `Shapes.row` gives it, pool index of each stage, layers per stage)

PROBE = 256


@dataclass
class JointCandidates:
    job: JobSpec
    nodes: NodeSet
    prices: Prices  # of the surviving shapes
    stage_nodes: np.ndarray  # (S,) nodes per stage of each survivor
    lower_bound_s: np.ndarray  # (S,) the relaxation's bound of each survivor
    incumbent: Optional[Assignment]  # k indexes the survivors
    incumbent_step_s: float  # float formulation
    num_legal: int
    num_shapes: int  # whole-node stages that pack into the pools
    num_pruned_memory: int
    num_pruned_time: int

    @property
    def num_survivors(self) -> int:
        return len(self.lower_bound_s)


def _improve(best: Optional[Assignment], plans) -> Optional[Assignment]:
    for a in plans:
        if a is not None and (best is None or a.objective_s < best.objective_s):
            best = a
    return best


def shape_index(shapes, row: dict) -> Optional[int]:
    """Index of the shape `row` (`Shapes.row` keys) in `shapes`, None when absent."""
    hit = np.ones(len(shapes), dtype=bool)
    for key in ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "zero"):
        hit &= getattr(shapes, key) == row[key]
    hit &= (shapes.recompute == RECOMPUTE_CODES[row["recompute"]]) & (shapes.sequence_parallel == row["sequence_parallel"])
    idx = np.flatnonzero(hit)
    return int(idx[0]) if len(idx) else None


def seed_plans(job: JobSpec, nodes: NodeSet, js: JointShapes, seeds: Sequence[Seed]) -> list[Assignment]:
    """Plans given as (shape row, pool of each stage, layers), on the pools' nodes in
    `node_order`, priced; those the joint space cannot hold are left out."""
    orders = [node_order(nodes, pl) for pl in range(len(job.cluster.pool_specs()))]
    out = []
    for row, pools, layers in seeds:
        k = shape_index(js.shapes, row)
        if k is None:
            continue
        n = int(js.stage_nodes[k])
        if any(pools.count(pl) * n > len(orders[pl]) for pl in set(pools)):
            continue
        node_lists = stage_nodes(orders, pools, n)
        ev = Prices(job, nodes, js.shapes.take([k])).evaluate(0, pools, node_lists, layers)
        if ev.fits:
            out.append(Assignment(k, tuple(pools), node_lists, tuple(layers), ev.step_time_s))
    return out


def prepare_joint(job: JobSpec, nodes: NodeSet, seeds: Sequence[Seed] = (), prune_time: bool = True
                  ) -> JointCandidates:
    """`seeds`: plans known before the search (a sequential plan, a pool alone) that may
    improve the incumbent."""
    js = joint_shapes(job, nodes)
    S = len(js.shapes)
    uneven = job.constraints.uneven_split
    lb0 = compute_bound_s(job, js.shapes)
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    order = np.argsort(lb0, kind="stable")
    best = _improve(None, seed_plans(job, nodes, js, seeds))
    if S and prune_time:
        probe = np.sort(order[:PROBE])
        pr = Prices(job, nodes, js.shapes.take(probe))
        lb, ok = relaxed_bound_s(pr, js.stage_nodes[probe], pool_nodes)
        try_order = [int(i) for i in np.argsort(lb, kind="stable") if ok[i]]
        for start in range(0, len(try_order), 16):
            chunk = try_order[start:start + 16]
            if best is not None and lb[chunk[0]] > best.objective_s:
                break
            found = heuristic_plans(pr, js.stage_nodes[probe], chunk, uneven)
            best = _improve(best, [Assignment(int(probe[a.k]), a.pools, a.nodes, a.layers, a.objective_s)
                                   for a in found if a is not None])
    keep = np.flatnonzero(lb0 <= best.objective_s * (1 + 1e-9)) if (best is not None and prune_time) \
        else np.arange(S)
    pr = Prices(job, nodes, js.shapes.take(keep))
    lb, ok = relaxed_bound_s(pr, js.stage_nodes[keep], pool_nodes)
    n_mem = int((~ok).sum())
    if prune_time:
        try_order = [int(i) for i in np.argsort(lb, kind="stable") if ok[i]]
        pos = {int(k): i for i, k in enumerate(keep)}
        if best is not None and best.k in pos:  # the incumbent in survivor indices
            best = Assignment(pos[best.k], best.pools, best.nodes, best.layers, best.objective_s)
        elif best is not None:
            best = None  # cannot happen: the incumbent's own bound is below its value
        for start in range(0, len(try_order), 16):
            chunk = try_order[start:start + 16]
            if best is not None and lb[chunk[0]] > best.objective_s:
                break
            best = _improve(best, heuristic_plans(pr, js.stage_nodes[keep], chunk, uneven))
    cut = ok & (lb <= best.objective_s * (1 + 1e-9)) if (best is not None and prune_time) else ok
    if best is not None:
        cut[best.k] = True
    idx = np.flatnonzero(cut)
    n_time = (S - len(keep)) + int((ok & ~cut).sum())
    pos = {int(k): i for i, k in enumerate(idx)}
    prices = pr.take(idx)
    inc_step = float("inf")
    if best is not None:
        best = Assignment(pos[best.k], best.pools, best.nodes, best.layers, best.objective_s)
        inc_step = prices.evaluate(best.k, best.pools, best.nodes, best.layers).step_time_s
    return JointCandidates(job, nodes, prices, js.stage_nodes[keep][idx], lb[idx], best, inc_step, js.num_legal, S,
                           n_mem, n_time)


def prepare_fixed(job: JobSpec, nodes: NodeSet, row: dict, layers) -> Optional[JointCandidates]:
    """Candidates of one shape whose split is given: the placement of a fixed plan (the
    sequential method). None when its stages cannot sit on whole nodes of the pools."""
    g = uniform_gpus_per_node(job)
    shapes = Shapes.single(**{k: row[k] for k in ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute",
                                                  "sequence_parallel", "zero")})
    stage_gpus = row["tp"] * row["cp"] * row["dp"]
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    if stage_gpus % g or sum(x // (stage_gpus // g) for x in pool_nodes) < row["pp"]:
        return None
    per = np.array([stage_gpus // g])
    pr = Prices(job, nodes, shapes)
    lb, ok = relaxed_bound_s(pr, per, pool_nodes)
    inc = heuristic_plans(pr, per, [0], job.constraints.uneven_split, layers=tuple(layers))[0]
    step = pr.evaluate(0, inc.pools, inc.nodes, inc.layers).step_time_s if inc is not None else float("inf")
    return JointCandidates(job, nodes, pr, per, np.where(ok, lb, 0.0), inc, step, 1, 1, 0, 0)
