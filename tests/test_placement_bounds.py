"""The placement proof machinery (issue #14): the row-count relaxation is a valid lower bound
(every placement's row counts satisfy it at that placement's objective), tightening with it
never claims more than the exhaustive optimum, and a proven optimum is the same placement
for every CP-SAT seed and worker count."""

from __future__ import annotations

import numpy as np
import pytest

from solveplan.catalog import load_job
from solveplan.placement.cpsat import solve_cpsat, tighten
from solveplan.placement.exhaustive import solve_exhaustive
from solveplan.placement.links import LinkMatrix
from solveplan.placement.place import place
from solveplan.placement.pricing import Problem, default_order
from solveplan.placement.relax import twin_groups
from solveplan.placement.rows import RowModel, below
from solveplan.placement.topology import generate_links
from solveplan.plan import plan_config
from ortools.sat.python import cp_model


@pytest.fixture(scope="module")
def job8():
    return load_job({"model": "gpt3-1.3b", "cluster": "a100x64"})


def par(job, **kw):
    N, g = job.cluster.num_gpus, kw["tp"] * kw["pp"]
    kw.setdefault("zero", 1 if N // g > 1 else 0)
    return plan_config(job, kw).parallel


def random_links(rng, n, kind):
    if kind == "distinct":
        b = rng.uniform(10, 200, size=(n, n))
    elif kind == "levels":
        b = rng.choice([25.0, 50.0, 100.0, 200.0], size=(n, n), p=[0.1, 0.2, 0.2, 0.5])
    else:  # racks of 2 behind a 4:1 spine with a slow NIC and a slow link
        lm = generate_links(n, nodes_per_leaf=2, oversubscription=4, degraded_nodes=[(int(rng.integers(n)), 0.25)],
                            degraded_links=[(0, 3, 0.5)])
        return lm
    np.fill_diagonal(b, np.nan)
    return LinkMatrix(tuple(f"h{i}" for i in range(n)), b, None, False, "random")


CASES = [dict(tp=8, pp=4), dict(tp=8, pp=2), dict(tp=4, pp=4), dict(tp=8, pp=8), dict(tp=2, pp=2)]
KINDS = ["distinct", "levels", "racks"]


def row_counts(prob, labels):
    g = prob.grid
    out = np.zeros((len(prob.classes), g.pp), dtype=np.int64)
    for s in range(g.pp):
        for j in range(g.groups):
            out[labels[g.cell(s, j)], s] += 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_every_placement_satisfies_the_row_relaxation(job8, seed):
    """Necessary conditions only: the row counts of any labelling (up to swapping classes that
    are interchangeable as a whole), with the levels that labelling attains, satisfy the row
    model at that labelling's objective."""
    rng = np.random.default_rng(100 + seed)
    prob = Problem(job8, par(job8, **CASES[seed % len(CASES)]), random_links(rng, 8, KINDS[seed % 3]))
    for _ in range(12):
        labels = prob.class_of[rng.permutation(8)]
        value = int(prob.tables.objective(*prob.level_rows(labels[None, :]))[0])
        rm = RowModel(prob)
        counts = row_counts(prob, labels)
        for group in twin_groups(prob):  # the image with twin classes' counts in lexicographic order
            counts[group] = sorted(counts[group].tolist(), reverse=True)
        for k, row in enumerate(rm.x):
            for s, v in enumerate(row):
                rm.model.add(v == int(counts[k, s]))
        rm.model.add(rm.objective <= value)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(rm.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE), (seed, labels.tolist(), value)


@pytest.mark.parametrize("seed", range(6))
def test_row_bound_and_tightening_respect_the_exhaustive_optimum(job8, seed):
    rng = np.random.default_rng(200 + seed)
    prob = Problem(job8, par(job8, **CASES[seed % len(CASES)]), random_links(rng, 8, KINDS[seed % 3]))
    best, _, _ = solve_exhaustive(prob)
    status, proven, counts, got = below(prob, best, 20, 1, 0)
    assert status in ("OPTIMAL", "FEASIBLE") and proven <= best and got <= best
    start = prob.class_of[default_order(prob.grid)]
    lo, obj, labels = tighten(prob, 0, prob.objective_of_nodes(default_order(prob.grid)), start, 20, 1, 0)
    assert lo <= best <= obj
    assert prob.objective_of_nodes(prob.nodes_from_labels(labels)) == obj
    if KINDS[seed % 3] == "racks":  # a hierarchy with a few degraded parts: the bound is the optimum
        assert lo == obj == best


@pytest.fixture(scope="module")
def mid():
    """32 nodes in 4 racks of 8 behind a 4:1 spine, one NIC at a quarter, two slow links."""
    job = load_job({"model": "gpt3-13b", "cluster": "a100x256"})
    lm = generate_links(32, nodes_per_leaf=8, oversubscription=4, degraded_nodes=[(13, 0.25)],
                        degraded_links=[(2, 5, 0.5), (17, 30, 0.25)])
    return job, par(job, tp=8, pp=4), lm


def test_proven_optimum_is_the_same_for_every_seed_and_worker_count(mid):
    job, p, lm = mid
    prob = Problem(job, p, lm)
    runs = [solve_cpsat(prob, 60, workers, seed) for seed, workers in ((0, 1), (1, 2), (2, 8))]
    assert all(r[0] == "OPTIMAL" for r in runs)
    assert len({r[1] for r in runs}) == 1
    assert all(np.array_equal(runs[0][3], r[3]) for r in runs[1:])
    a = place(job, p, lm, workers=1, seed=3)
    b = place(job, p, lm, workers=2, seed=0)
    assert a.status == b.status == "OPTIMAL"
    assert a.optimized.hosts_by_cell == b.optimized.hosts_by_cell
