"""Baselines of the joint model on the same formulation (issue #13):

- `sequential`: today's method -- the shape and split chosen for the cluster described as one
  GPU type with equal links (`uniform_description`: its most numerous pool's nodes, all of
  them; the caller plans it with `optimize`), then the placement of that plan's stages on the
  real pools and nodes, optimal for that shape and split (the joint model with both fixed);
- `anneal`: Pipette-style simulated annealing over placements (Yim et al., DATE 2024): for each
  of the shapes with the best relaxation bounds, start from the contiguous-block heuristic and
  swap nodes between stages, with idle nodes, or whole stages between pools, re-splitting the
  layers (water-filling) at every move; the best plan found.
The exhaustive search is `exhaustive.solve_exhaustive`.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np

from ...specs import ClusterSpec, JobSpec
from ..result import MethodResult
from .heuristic import Assignment, best_splits
from .prepare import JointCandidates, prepare_fixed
from .solve import solve_joint


def uniform_description(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster as today's single-type description would give it: every node of the kind
    of its most numerous pool (the first on a tie), links equal."""
    pools = cluster.pool_specs()
    big = max(range(len(pools)), key=lambda i: (pools[i].num_nodes, -i))
    view = cluster.pool_views()[big]
    return view.model_copy(update={"num_nodes": cluster.num_nodes, "name": f"{cluster.name} as {pools[big].name}",
                                   "node_names": (), "link_overrides": ()})


def sequential(job: JobSpec, nodes, plan, time_limit_s: float, workers: int = 1, seed: int = 0
               ) -> MethodResult | None:
    """Place `plan` (chosen for equal links) on the real nodes (the joint model's result, its
    `best` the placed plan): None when its stages cannot sit on whole nodes of the pools."""
    row = plan.parallel.model_dump()
    cands = prepare_fixed(job, nodes, row, plan.layers_per_stage)
    if cands is None or cands.incumbent is None:
        return None
    return solve_joint(cands, time_limit_s, workers, seed, fixed_layers=tuple(plan.layers_per_stage))


def _score(cands: JointCandidates, k: int, pools, node_lists) -> tuple[float, tuple]:
    pr = cands.prices
    ring, bnd = pr.levels_of(node_lists)
    costs = pr.costs([k], pools, ring, bnd)
    lay = best_splits(costs, pr.L, pr.job.constraints.uneven_split)
    return float(costs.objective(lay)[0]), tuple(int(x) for x in lay[0])


def anneal(cands: JointCandidates, shapes: int = 8, iterations: int = 2000, seed: int = 0,
           time_limit_s: float = 60.0) -> tuple[Assignment | None, dict]:
    """The best plan simulated annealing finds over the `shapes` shapes with the least bounds."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    nodes = cands.nodes
    order = [int(k) for k in np.argsort(cands.lower_bound_s, kind="stable")[:shapes]]
    from .heuristic import heuristic_plans

    starts = heuristic_plans(cands.prices, cands.stage_nodes, order, cands.job.constraints.uneven_split)
    best, moves = None, 0
    for k, start in zip(order, starts):
        if start is None or time.perf_counter() - t0 > time_limit_s:
            continue
        pools, stages = list(start.pools), [list(st) for st in start.nodes]
        used = {i for st in stages for i in st}
        idle = [i for i in range(nodes.n) if i not in used]
        cur, lay = _score(cands, k, pools, stages)
        cur_best = (cur, tuple(pools), tuple(tuple(sorted(st)) for st in stages), lay)
        temp0 = 0.02 * cur
        for it in range(iterations):
            temp = temp0 * (1e-3 ** (it / max(iterations - 1, 1)))
            new_pools, new_stages, new_idle = list(pools), [list(st) for st in stages], list(idle)
            kind = rng.random()
            s1 = rng.randrange(len(stages))
            if kind < 0.5 and len(stages) > 1:  # swap a node between two stages of one pool
                s2 = rng.randrange(len(stages))
                if s2 == s1 or pools[s1] != pools[s2]:
                    continue
                a, b = rng.randrange(len(stages[s1])), rng.randrange(len(stages[s2]))
                new_stages[s1][a], new_stages[s2][b] = stages[s2][b], stages[s1][a]
            elif kind < 0.8:  # swap a node with an idle node of the same pool
                same = [j for j, i in enumerate(idle) if nodes.pool_of[i] == pools[s1]]
                if not same:
                    continue
                j, a = rng.choice(same), rng.randrange(len(stages[s1]))
                new_stages[s1][a], new_idle[j] = idle[j], stages[s1][a]
            else:  # move a whole stage to another pool's idle nodes, or swap two stages' nodes
                s2 = rng.randrange(len(stages))
                if s2 != s1 and pools[s2] != pools[s1]:
                    new_stages[s1], new_stages[s2] = stages[s2], stages[s1]
                    new_pools[s1], new_pools[s2] = pools[s2], pools[s1]
                else:
                    other = [pl for pl in set(nodes.pool_of.tolist()) if pl != pools[s1]]
                    pl = rng.choice(other) if other else None
                    free = [i for i in idle if nodes.pool_of[i] == pl]
                    if pl is None or len(free) < len(stages[s1]):
                        continue
                    take = rng.sample(free, len(stages[s1]))
                    new_idle = [i for i in idle if i not in take] + stages[s1]
                    new_stages[s1], new_pools[s1] = take, pl
            moves += 1
            val, new_lay = _score(cands, k, new_pools, new_stages)
            if val <= cur or (math.isfinite(val) and rng.random() < math.exp(-(val - cur) / max(temp, 1e-300))):
                pools, stages, idle, cur = new_pools, new_stages, new_idle, val
                if val < cur_best[0]:
                    cur_best = (val, tuple(pools), tuple(tuple(sorted(st)) for st in stages), new_lay)
            if time.perf_counter() - t0 > time_limit_s:
                break
        if best is None or cur_best[0] < best.objective_s:
            best = Assignment(k, cur_best[1], cur_best[2], cur_best[3], cur_best[0])
    if best is not None:
        ev = cands.prices.evaluate(best.k, best.pools, best.nodes, best.layers)
        best = Assignment(best.k, best.pools, best.nodes, best.layers, ev.step_time_s)
    return best, {"shapes": len(order), "moves": moves, "wall_time_s": time.perf_counter() - t0}
