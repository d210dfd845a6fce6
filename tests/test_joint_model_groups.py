"""The joint model's constraint groups one by one (issue 25: each named builder of
`search.joint.model` accepts a known-good assignment and rejects a known-bad one).

Small instances: gpt3-1.3b on the mixed H100/A100 example (two pools, one class of nodes each)
and on one pool of two racks behind a 4:1 spine (two classes, the nodes of a rack: the fast
level inside a rack, the slow one across; 100 Gbit/s NICs, so that the pipeline boundary's
price changes with the level too); gpt3-13b on the mixed example for the memory limit. The
incumbent of the joint search's preparation is the known-good plan. The groups that only read
variables (supply, ring and boundary levels) are built on fresh variables of their own; the
others on the variables the groups before them make, as `build_joint_model` does.
"""

from __future__ import annotations

import numpy as np
import pytest

from solveplan.catalog import load_job
from solveplan.search.joint.model import (ModelBuild, add_boundary_levels, add_class_supply, add_memory_limit,
                                              add_ring_levels, add_shape_choice, add_split_rule, add_stage_layers,
                                              add_stage_nodes, add_stage_pool, build_joint_model, int_tables,
                                              objective_q)
from solveplan.search.joint.nodes import node_set
from solveplan.search.joint.prepare import prepare_joint
from solveplan.search.joint.solve import shape_ranks
from solveplan.search.cpsat.ortools_cp import cp_model
from solveplan.search.cpsat.scaling import OBJECTIVE_UNITS

from test_joint import MIXED

RACKS = {"name": "two-racks", "pools": [{"name": "p0", "gpu": "h100-sxm", "gpus_per_node": 8, "num_nodes": 4,
                                         "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 100, "nodes_per_leaf": 2,
                                         "spine_oversubscription": 4.0}]}


def _candidates(cluster: dict, model: str = "gpt3-1.3b", **job):
    job = load_job({"model": model, "cluster": cluster, "global_batch_size": 64, **job})
    cands = prepare_joint(job, node_set(job.cluster))
    assert cands.incumbent is not None and cands.prices.shapes.pp[cands.incumbent.k] == 2
    return cands


@pytest.fixture(scope="module")
def mixed():
    return _candidates(MIXED)


@pytest.fixture(scope="module")
def racks():
    cands = _candidates(RACKS)
    # two classes, one a rack: fast inside, slow across
    assert cands.nodes.classes == [[0, 1], [2, 3]] and cands.nodes.class_level[0, 1] < cands.nodes.class_level[0, 0]
    return cands


@pytest.fixture(scope="module")
def mixed_13b():
    """gpt3-13b: at most 28 of its 40 layers fit a stage's memory, on either pool."""
    cands = _candidates(MIXED, "gpt3-13b")
    limits = [cands.prices.limits(pl)[cands.incumbent.k] for pl in range(2)]
    assert [lim[:2].tolist() for lim in limits] == [[28, 28], [28, 28]] and cands.incumbent.layers == (12, 28)
    return cands


def _build(cands) -> ModelBuild:
    """A bare build over every candidate shape, in the quanta the search would use."""
    q = cands.incumbent_step_s * (1 + 1e-9) / OBJECTIVE_UNITS
    return ModelBuild(cp_model.CpModel(), cands, int_tables(cands, np.arange(cands.num_survivors), q), 1 << 30)


def _feasible(b: ModelBuild, *pins) -> bool:
    for var, value in pins:
        b.md.add(var == int(value))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 20
    status = solver.solve(b.md)
    assert status != cp_model.UNKNOWN
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def _plan_pins(b: ModelBuild, pools, nodes, layers) -> list:
    """x, a, n and l of the incumbent's shape with the given pools, nodes and layers per stage
    (none on the stages past its own)."""
    j = b.cands.incumbent.k
    class_of = {i: c for c, members in enumerate(b.nodes.classes) for i in members}
    pins = [(x, jj == j) for jj, x in enumerate(b.x)]
    for s in range(b.num_stages):
        mine = s < len(pools)
        pins += [(av, mine and pl == pools[s]) for pl, av in enumerate(b.a[s]) if av is not None]
        taken = [sum(class_of[i] == c for i in nodes[s]) if mine else 0 for c in range(b.num_classes)]
        pins += list(zip(b.n[s], taken))
        pins.append((b.layers[s], layers[s] if mine else 0))
    return pins


def _stages(cands) -> ModelBuild:
    b = _build(cands)
    add_shape_choice(b)
    for s in range(b.num_stages):
        add_stage_pool(b, s)
        add_stage_nodes(b, s)
        add_stage_layers(b, s)
    return b


def test_stage_groups_take_the_shapes_nodes_of_the_stages_own_pool(mixed):
    inc = mixed.incumbent
    b = _stages(mixed)
    assert _feasible(b, *_plan_pins(b, inc.pools, inc.nodes, inc.layers))
    other = tuple(1 - p for p in inc.pools)  # the pools swapped, the nodes not: each stage's nodes in the other pool
    b = _stages(mixed)
    assert not _feasible(b, *_plan_pins(b, other, inc.nodes, inc.layers))
    b = _stages(mixed)  # one node fewer than the shape's nodes per stage
    assert not _feasible(b, *_plan_pins(b, inc.pools, (inc.nodes[0][:1],) + inc.nodes[1:], inc.layers))
    b = _stages(mixed)  # the first stage on both pools at once
    assert not _feasible(b, *_plan_pins(b, inc.pools, inc.nodes, inc.layers)[:len(b.x)], *((av, 1) for av in b.a[0]))
    b = _stages(mixed)  # a stage without layers
    assert not _feasible(b, *_plan_pins(b, inc.pools, inc.nodes, (0,) + inc.layers[1:]))


def test_memory_limit(mixed_13b):
    """On the stage groups: the incumbent's 12 + 28 layers fit, 11 + 29 do not."""
    inc = mixed_13b.incumbent

    def fits(layers):
        b = _stages(mixed_13b)
        for s in range(2):
            for pl in range(2):
                assert add_memory_limit(b, s, inc.k, pl)
        return _feasible(b, *_plan_pins(b, inc.pools, inc.nodes, layers))

    assert fits((12, 28))
    assert not fits((11, 29))


def test_split_rule(mixed):
    """On the stage groups: a given split admits itself only; an even-split job the balanced split only."""
    inc = mixed.incumbent

    def split(cands, rule, layers):
        b = _stages(cands)
        for s in range(b.num_stages):
            add_split_rule(b, s, rule)
        return _feasible(b, *_plan_pins(b, cands.incumbent.pools, cands.incumbent.nodes, layers))

    assert inc.layers == (8, 16)
    assert split(mixed, (8, 16), (8, 16))
    assert not split(mixed, (8, 16), (9, 15))
    even = _candidates(MIXED, constraints={"uneven_split": False, "pp": [2]})
    assert split(even, None, (12, 12))
    assert not split(even, None, (8, 16))


def test_class_supply_alone(racks):
    def supply(first, second):
        b = _build(racks)
        b.n = [[b.md.new_int_var(0, 4, f"n{s}_{c}") for c in range(2)] for s in range(b.num_stages)]
        add_class_supply(b)
        taken = [first, second] + [(0, 0)] * (b.num_stages - 2)
        return _feasible(b, *((n, v) for row, counts in zip(b.n, taken) for n, v in zip(row, counts)))

    assert supply(first=(2, 0), second=(0, 2))
    assert not supply(first=(2, 0), second=(1, 1))  # three nodes of a two-node rack


def _level_vars(b: ModelBuild) -> None:
    b.u = [[b.md.new_bool_var(f"u{s}_{c}") for c in range(b.num_classes)] for s in range(b.num_stages)]
    b.t = [[b.md.new_bool_var(f"t{s}_{c}") for c in range(b.num_classes)] for s in range(b.num_stages)]


def test_ring_levels_alone(racks):
    """ring[s] >= the fast level: two nodes of one rack pass, one node of each rack does not."""
    def ring(used, pairs):
        b = _build(racks)
        _level_vars(b)
        add_ring_levels(b)
        levels, ge = b.ring[0]
        assert levels == [1]
        return _feasible(b, (ge[1], 1), *zip(b.u[0], used), *zip(b.t[0], pairs))

    assert ring(used=(1, 0), pairs=(1, 0))
    assert not ring(used=(1, 1), pairs=(0, 0))


def test_boundary_levels_alone(racks):
    """bnd[0] >= the fast level: both stages in one rack pass, one stage in each rack does not."""
    def boundary(first, second):
        b = _build(racks)
        _level_vars(b)
        add_boundary_levels(b)
        assert b.boundary_levels == [1]
        return _feasible(b, (b.boundary[0][1], 1), *zip(b.u[0], first), *zip(b.u[1], second))

    assert boundary(first=(1, 0), second=(1, 0))
    assert not boundary(first=(1, 0), second=(0, 1))


@pytest.mark.parametrize("instance", ["mixed", "racks"])
def test_cost_rows_price_a_plan_at_its_objective(instance, request):
    """With the incumbent pinned, the cost rows and the objective allow its objective in quanta
    (`objective_q`) and nothing below it."""
    cands = request.getfixturevalue(instance)
    inc = cands.incumbent
    b = _build(cands)
    value = objective_q(b.tab, cands, inc.k, inc)

    def model():
        jm = build_joint_model(cands, b.tab, None, shape_ranks(cands))
        pinned = ModelBuild(jm.model, cands, b.tab, b.ub)
        pinned.x, pinned.a, pinned.n, pinned.layers = jm.x, jm.a, jm.n, jm.layers
        return pinned, jm.obj, _plan_pins(pinned, inc.pools, inc.nodes, inc.layers)

    b, obj, pins = model()
    assert _feasible(b, (obj, value), *pins)
    b, obj, pins = model()
    b.md.add(obj <= value - 1)
    assert not _feasible(b, *pins)


def test_a_model_plan_the_float_check_refuses_without_an_incumbent_is_no_plan(mixed, monkeypatch):
    """solve_joint's fallback when the model's plan fails the float re-check: the incumbent, or
    (none known) UNKNOWN with no plan -- before, the missing incumbent was dereferenced."""
    import dataclasses

    from solveplan.search.joint import solve as joint_solve
    from solveplan.search.joint.prices import Prices
    from solveplan.search.result import FEASIBLE, UNKNOWN

    real = Prices.evaluate

    def refuses(self, *args):  # every stage over its memory (Evaluation.fits reads the stages)
        ev = real(self, *args)
        return dataclasses.replace(ev, stages=[{**st, "fits": False} for st in ev.stages])

    monkeypatch.setattr(Prices, "evaluate", refuses)
    out = joint_solve.solve_joint(dataclasses.replace(mixed, incumbent=None), time_limit_s=20)
    assert out.status == UNKNOWN and out.best is None, (out.status, out.stats["notes"])
    assert any("no heuristic plan is known" in n for n in out.stats["notes"]), out.stats["notes"]
    with_incumbent = joint_solve.solve_joint(mixed, time_limit_s=20)
    assert with_incumbent.best is not None and with_incumbent.status == FEASIBLE
    assert any("returning the incumbent unproven" in n for n in with_incumbent.stats["notes"])
