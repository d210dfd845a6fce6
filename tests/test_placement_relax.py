"""The proof placement starts from (issue #14): the lifted links are a relaxation (no pair
slower, no placement dearer), the floors of the max slot and the tail hold for every
placement, classes interchangeable as a whole are, and the staircase of boxes never bounds
above the exhaustive optimum."""

from __future__ import annotations

import numpy as np
import pytest

from solveplan.catalog import load_job
from solveplan.placement.bounds import floors, incumbent_terms, staircase
from solveplan.placement.cpsat import solve_cpsat
from solveplan.placement.exhaustive import solve_exhaustive
from solveplan.placement.pricing import Problem, default_order, whole_server_order
from solveplan.placement.relax import lift_pairs, relaxed, twin_groups
from solveplan.placement.topology import generate_links
from test_placement_bounds import CASES, KINDS, par, random_links


@pytest.fixture(scope="module")
def job8():
    return load_job({"model": "gpt3-1.3b", "cluster": "a100x64"})


def test_lift_raises_a_slow_link_and_keeps_a_slow_nic():
    lm = generate_links(8, nodes_per_leaf=4, oversubscription=4, degraded_nodes=[(6, 0.25)],
                        degraded_links=[(0, 1, 0.5), (2, 5, 0.25)])
    prob_index = _levels(lm)
    lifted = lift_pairs(prob_index)
    off = ~np.eye(8, dtype=bool)
    assert (lifted[off] >= prob_index[off]).all() and np.array_equal(lifted, lifted.T)
    assert lifted[0, 1] == prob_index[0, 2]  # inside a rack: to the rack's level
    assert lifted[2, 5] == prob_index[2, 4]  # across the spine: to the spine's level
    assert np.array_equal(lifted[6], prob_index[6])  # the slow NIC keeps every level


def _levels(lm):
    from solveplan.placement.pricing import bandwidth_levels
    eff = lm.effective_bytes_per_s(0.8)
    return bandwidth_levels(eff, np.zeros_like(eff)).index


@pytest.mark.parametrize("seed", range(6))
def test_relaxation_floors_and_twins_hold_for_every_placement(job8, seed):
    rng = np.random.default_rng(300 + seed)
    prob = Problem(job8, par(job8, **CASES[seed % len(CASES)]), random_links(rng, 8, KINDS[seed % 3]))
    coarse = relaxed(prob)
    start = prob.class_of[default_order(prob.grid)]
    fl = floors(coarse, incumbent_terms(prob, start), 20, 1, 0)
    groups = twin_groups(prob)
    for _ in range(30):
        nodes = rng.permutation(8)
        real = prob.objective_of_nodes(nodes)
        assert coarse.objective_of_nodes(nodes) <= real
        slot, tail = incumbent_terms(prob, prob.class_of[nodes])
        assert slot >= fl[0] and tail >= fl[1]
        for group in groups:  # swap two classes interchangeable as a whole: the same objective
            a, b = group[0], group[-1]
            labels = prob.class_of[nodes].copy()
            swapped = np.where(labels == a, b, np.where(labels == b, a, labels))
            assert prob.objective_of_nodes(prob.nodes_from_labels(swapped)) == real


@pytest.mark.parametrize("seed", range(6))
def test_staircase_never_bounds_above_the_exhaustive_optimum(job8, seed):
    rng = np.random.default_rng(400 + seed)
    prob = Problem(job8, par(job8, **CASES[seed % len(CASES)]), random_links(rng, 8, KINDS[seed % 3]))
    best, _, _ = solve_exhaustive(prob)
    coarse = relaxed(prob)
    cap = min(prob.objective_of_nodes(n) for n in (default_order(prob.grid), whole_server_order(prob.grid)))
    fl = floors(coarse, incumbent_terms(prob, prob.class_of[default_order(prob.grid)]), 20, 1, 0)
    hb = staircase(coarse, fl, cap, 20, 1, 0)
    assert hb.status in ("OPTIMAL", "INFEASIBLE")
    assert hb.bound <= best
    status, obj, bound, _, _ = solve_cpsat(prob, 30, 1, 0, hints=(default_order(prob.grid), whole_server_order(prob.grid)))
    assert status == "OPTIMAL" and obj == bound == best
