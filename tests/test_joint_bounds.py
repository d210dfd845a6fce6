"""Bounds and time limit of the joint search (issue #13): every bound it reports is a valid lower
bound of the step time, shape by shape (against the exhaustive search of that shape alone) and
over the whole joint space; a short time limit gives back a plan with a valid bound instead of
running past it."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.search.joint.bounds import best_levels, pool_count_bound_s
from solveplan.search.joint.exhaustive import solve_exhaustive
from solveplan.search.joint.heuristic import Assignment, heuristic_plans
from solveplan.search.joint.nodes import node_set
from solveplan.search.joint.prepare import prepare_joint
from solveplan.optimize.joint import optimize_joint
from solveplan.specs import JobSpec

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from test_joint import joint_jobs  # noqa: E402

SHAPES_PER_JOB = 10  # shapes of each job checked against their own exhaustive optimum


def _one_shape(cands, k: int):
    """The candidates reduced to shape k (for the exhaustive search of that shape alone)."""
    return replace(cands, prices=cands.prices.take([k]), stage_nodes=cands.stage_nodes[[k]],
                   lower_bound_s=cands.lower_bound_s[[k]], incumbent=None)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(joint_jobs())
def test_pool_count_bound_never_exceeds_the_shapes_exhaustive_optimum(job):
    nodes = node_set(job.cluster)
    cands = prepare_joint(job, nodes, prune_time=False)
    if cands.num_survivors == 0:
        return
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    bound = pool_count_bound_s(cands.prices, cands.stage_nodes, pool_nodes)
    for k in np.argsort(bound, kind="stable")[:SHAPES_PER_JOB].tolist():
        best, _, finished = solve_exhaustive(job, nodes, cands=_one_shape(cands, k))
        assert finished
        if best is None:
            continue  # no plan of this shape fits: any bound holds
        assert bound[k] <= best.objective_s * (1 + 1e-9), (cands.prices.shapes.row(k), bound[k], best)
    # and the heuristic plans, repaired or not, are plans: at least their shape's bound
    plans = heuristic_plans(cands.prices, cands.stage_nodes, range(cands.num_survivors), job.constraints.uneven_split)
    for k, a in enumerate(plans):
        if a is not None:
            ev = cands.prices.evaluate(k, a.pools, a.nodes, a.layers)
            assert ev.fits and bound[k] <= ev.step_time_s * (1 + 1e-9)
            used = [i for st in a.nodes for i in st]
            assert len(used) == len(set(used))  # no node twice
            assert all(nodes.pool_of[i] == a.pools[s] for s, st in enumerate(a.nodes) for i in st)


def test_best_levels_of_a_pool_with_racks():
    """Stages of more nodes than a rack holds cannot all sit on the rack's links."""
    job = JobSpec(model=load_model("gpt3-350m"), global_batch_size=64, seq_length=2048, cluster=load_cluster({
        "name": "racks", "gpu": "a100-80gb", "gpus_per_node": 8, "num_nodes": 8, "nvlink_gbyte_per_s": 300,
        "nic_gbit_per_s": 200, "nodes_per_leaf": 4, "spine_oversubscription": 4.0}))
    cands = prepare_joint(job, node_set(job.cluster), prune_time=False)
    top = best_levels(cands.prices, 0, 8)
    assert top[1] == cands.prices.sentinel
    assert top[2] == top[4] > top[5] == top[8] >= 0


def _mixed(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    pairs = {tuple(sorted(map(int, rng.choice(n, 2, replace=False)))) for _ in range(n // 8)}
    return {"name": f"mixed-{n}", "inter_pool_gbit_per_s": 100.0, "pools": [
        {"name": "h100", "gpu": "h100-sxm", "gpus_per_node": 8, "num_nodes": n // 4, "nvlink_gbyte_per_s": 450,
         "nic_gbit_per_s": 400},
        {"name": "a100", "gpu": "a100-80gb", "gpus_per_node": 8, "num_nodes": n - n // 4, "nvlink_gbyte_per_s": 300,
         "nic_gbit_per_s": 200, "nodes_per_leaf": 8, "spine_oversubscription": 2.0}],
        "link_overrides": [{"src": a, "dst": b, "gbit_per_s": 10.0} for a, b in sorted(pairs)]}


@pytest.mark.slow
def test_a_short_time_limit_gives_a_plan_with_a_valid_bound():
    """32 nodes in two pools, 4 s: the search stops short of a proof, keeps (generously) to the
    limit, and reports a bound below its plan with the gap it implies; with more time the
    plan is never worse and the bound never above the best plan found."""
    job = JobSpec(model=load_model("gpt3-13b"), cluster=load_cluster(_mixed(32, 3)), global_batch_size=1024,
                  seq_length=2048)
    t0 = time.perf_counter()
    short = optimize_joint(job, time_limit_s=4.0, workers=2)
    wall = time.perf_counter() - t0
    assert short.plan is not None and short.status in ("FEASIBLE", "OPTIMAL")
    assert short.bound_step_time_s is not None and short.bound_step_time_s <= short.plan.step_time_s * (1 + 1e-9)
    assert short.gap == pytest.approx((short.plan.step_time_s - short.bound_step_time_s) / short.plan.step_time_s)
    assert wall < 4.0 + 30.0  # generous: the guard is that preparation and models stop at the limit
    longer = optimize_joint(job, time_limit_s=30.0, workers=2)
    assert longer.plan.step_time_s <= short.plan.step_time_s * (1 + 1e-9)
    assert longer.bound_step_time_s <= longer.plan.step_time_s * (1 + 1e-9)
    assert max(short.bound_step_time_s, longer.bound_step_time_s) <= min(short.plan.step_time_s,
                                                                         longer.plan.step_time_s) * (1 + 1e-9)
    assert math.isfinite(longer.gap)


def test_incumbent_lies_among_the_candidates():
    """The plan the search starts from is one of its candidates' plans and fits."""
    job = JobSpec(model=load_model("gpt3-6.7b"), cluster=load_cluster(_mixed(16, 1)), global_batch_size=512,
                  seq_length=2048)
    cands = prepare_joint(job, node_set(job.cluster))
    inc = cands.incumbent
    assert isinstance(inc, Assignment) and 0 <= inc.k < cands.num_survivors
    assert cands.prices.evaluate(inc.k, inc.pools, inc.nodes, inc.layers).fits
    assert cands.lower_bound_s[inc.k] <= cands.incumbent_step_s * (1 + 1e-9)
