"""`optimize_joint`: the plan of a job on a mixed cluster (pools) or on measured links, from
the joint model -- shape, split and placement in one CP-SAT model -- with its proof, the
hostfile that realises it, the explanation, and the best plan of each pool alone beside it.

`solveplan.optimize.optimize` routes here (`links=` or a cluster with pools) and hands in the
pools-alone plans (each pool planned alone by today's model, equal links): they seed the
incumbent where the joint space holds them, and are reported as comparisons. The steps are
`optimize`'s: the candidates (`search.joint.prepare`), the search method (`search.joint.solve`
or `search.joint.exhaustive`), the plan (`placed.placed_plan`, the float formulation on the
assigned nodes) and the result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from ..errors import InputError
from ..placement.links import LinkMatrix
from ..plan import Comparison, OptimizeResult, Plan, SearchStats
from ..search.joint.exhaustive import search_exhaustive
from ..search.joint.heuristic import Assignment
from ..search.joint.nodes import node_set
from ..search.joint.prepare import JointCandidates, prepare_joint
from ..search.joint.solve import PlacedChoice, solve_joint
from ..search.phases import Phase, Phases
from ..search.result import MethodResult
from ..specs import JobSpec
from ..specs.deadline import Deadline
from .placed import explain, placed_plan

METHODS = ("cpsat", "exhaustive")
# the share of the time left preparation may take before the shapes it has not bounded yet are
# left out (with their cheaper bounds): the rest is the models' (`search.joint.solve`). Without a
# seed plan, a preparation cut short has nothing to hand the models: it gets almost all the time
# (the heuristic inside it finds the incumbent).
PREPARE = {True: Phase("prepare", ends_at=0.5), False: Phase("prepare", ends_at=0.9)}  # by: seeded?


def optimize_joint(job: JobSpec, links: LinkMatrix | None = None, *, method: str = "cpsat",
                   time_limit_s: float = 60.0, workers: int = 1, seed: int = 0,
                   pools_alone: Sequence[tuple[int, Plan]] = (), progress=None,
                   deadline: Deadline | None = None) -> OptimizeResult:
    """The fastest plan over shapes, splits and placements (see the module docstring), as
    `optimize`'s result: the plan a `PlacedPlan`, with `pools_alone`, `default_order` and `explanation`.
    `pools_alone`: (pool index, plan of that pool alone) pairs; `progress(info)`: phases.
    `deadline`: the caller's; the search keeps to the earlier of it and `time_limit_s`."""
    if method not in METHODS:
        raise InputError("method", f"{method!r} does not plan a mixed cluster or measured links; use "
                                   f"{' or '.join(METHODS)}")
    t0 = time.perf_counter()
    dl = (deadline if deadline is not None else Deadline()).within(float(time_limit_s))
    nodes = node_set(job.cluster, links)
    seeds = [(p.parallel.model_dump(), (pl,) * p.parallel.pp, tuple(p.layers_per_stage)) for pl, p in pools_alone]
    cands, found = _search(job, nodes, seeds, method, workers, seed, progress, dl, float(time_limit_s))
    status, bound, tol = found.status, found.bound_s, found.stats.get("tolerance_s")
    notes: list[str] = list(found.stats.get("notes", []))
    plan_a = found.best.assignment() if isinstance(found.best, PlacedChoice) else None
    plan = placed_plan(job, cands.prices, plan_a) if plan_a is not None else None
    gap = max(0.0, (plan.step_time_s - bound) / plan.step_time_s) if plan is not None and bound is not None else None
    search = SearchStats.of(f"{method} (joint)", time.perf_counter() - t0, cands, found,
                            node_classes=len(nodes.classes), bandwidth_levels=nodes.num_levels, links=nodes.source)
    res = OptimizeResult(status=status, plan=plan, bound_step_time_s=bound, gap=gap, tolerance_s=tol, search=search,
                         notes=notes, top_k_found=int(plan is not None), pools_alone=[])
    if plan is not None and plan_a is not None:
        pools = job.cluster.pool_specs()
        alone = [Comparison.of(f"{pools[pl].name} alone ({p.num_gpus} GPUs, equal links)", p, plan)
                 for pl, p in pools_alone]
        res.pools_alone = alone
        res.explanation = explain(job, cands.prices, plan_a, plan)
        dflt = default_order(cands.prices, plan_a)
        if dflt is not None:
            res.default_order = Comparison.of("the same plan in Megatron's default rank order (nodes in index order)",
                                              placed_plan(job, cands.prices, dflt), plan)
            res.explanation.append(f"the same shape and split on the nodes in index order: "
                                   f"{res.default_order.step_time_s:.4f} s ({res.default_order.speedup:.3f}x)")
        for c in alone:
            res.explanation.append(f"predicted step {plan.step_time_s:.4f} s vs {c.step_time_s:.4f} s with "
                                   f"{c.label} ({c.speedup:.3f}x)")
    return res


def _search(job: JobSpec, nodes, seeds: list, method: str, workers: int, seed: int, progress, dl: Deadline,
            time_limit_s: float) -> tuple[JointCandidates, MethodResult]:
    """The joint candidates and the search method's answer: the exhaustive joint search, or the
    joint CP-SAT search after a preparation that takes at most its phase's share (`PREPARE`)."""
    if method == "exhaustive":
        cands = prepare_joint(job, nodes, prune_time=False, deadline=dl)
        return cands, search_exhaustive(job, nodes, dl.left_s(), cands)
    if progress is not None:
        progress({"method": "joint", "phase": f"bounding shapes on {len(nodes.classes)} node classes",
                  "elapsed_s": 0.0, "limit_s": time_limit_s, "final": False})
    run = Phases(dl.left_s(), (PREPARE[bool(seeds)],), deadline=dl)
    cands = run.call("prepare", lambda _: prepare_joint(job, nodes, seeds, deadline=run.deadline_of("prepare")))
    res = solve_joint(cands, max(0.05, dl.left_s()), workers, seed, progress=progress, deadline=dl)
    res.stats["phases"] = run.times + res.stats.get("phases", [])
    return cands, res


def default_order(prices, a: Assignment) -> Assignment | None:
    """Plan `a`'s shape and split with stage s on the s-th block of nodes in index order (as a
    hostfile listing the nodes in order gives them); None when a block straddles two pools."""
    n = len(a.nodes[0])
    blocks = [tuple(range(s * n, (s + 1) * n)) for s in range(len(a.nodes))]
    pools = [set(prices.nodes.pool_of[list(b)].tolist()) for b in blocks]
    if any(len(p) != 1 for p in pools):
        return None
    return Assignment(a.k, tuple(p.pop() for p in pools), tuple(blocks), a.layers, math.nan)
