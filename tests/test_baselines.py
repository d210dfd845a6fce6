"""The exhaustive search, its branch and bound and the Alpa-style DP agree with each other and
with a brute force written independently here (itertools compositions, one shape at a time), on
small instances where pipelining and uneven splits matter; budgets stop them honestly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from solveplan.search.baselines import PREPARE_KWARGS, alpa_dp, branch_bound, exhaustive
from solveplan.search.candidates import prepare
from solveplan.formulation.pipeline import evaluate_split, step_time_batch
from solveplan.specs import ClusterSpec, Constraints, GPUSpec, JobSpec, ModelSpec

REL = 1e-9


def gpu(hbm_gib: float) -> GPUSpec:
    return GPUSpec(name=f"test-{hbm_gib}g", peak_bf16_tflops=312, hbm_gib=hbm_gib, hbm_gbyte_per_s=2039)


def make_job(layers, hidden, heads, gpus, batch, hbm_gib=80.0, seq=2048, **constraints) -> JobSpec:
    model = ModelSpec(name=f"t{layers}x{hidden}", num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      ffn_hidden_size=4 * hidden, vocab_size=32000)
    cluster = ClusterSpec(name=f"c{gpus}", gpu=gpu(hbm_gib), num_nodes=max(1, gpus // 8), gpus_per_node=min(8, gpus),
                          nvlink_gbyte_per_s=300, nic_gbit_per_s=200)
    return JobSpec(model=model, cluster=cluster, global_batch_size=batch, seq_length=seq,
                   constraints=Constraints(**constraints))


# (id, job): small instances; the constraints keep the brute force quick and force pipelines
INSTANCES = {
    "pp2-4_8gpu_16GiB": lambda: make_job(12, 4096, 32, 8, 64, hbm_gib=16, pp=(2, 3, 4)),
    "pp4-8_16gpu_zero0": lambda: make_job(10, 4096, 32, 16, 128, hbm_gib=12, pp=(2, 4, 8), zero=(0,)),
    "tp2_pp4-8_16gpu": lambda: make_job(12, 6144, 48, 16, 32, hbm_gib=24, tp=(2,), pp=(4, 8), recompute=("none", "full")),
    "free_32gpu_small": lambda: make_job(6, 2048, 16, 32, 64, micro_batch_size=(1, 2), vp=(1, 2)),
    "uneven_7layers_pp3": lambda: make_job(7, 4096, 32, 24, 48, hbm_gib=20, pp=(3,), tp=(1, 2, 4), recompute=("selective",)),
}


def megatron_accounted_split(L: int, p: int, e: bool, loss: bool) -> tuple[int, ...]:
    """Megatron-LM's split with the embedding / loss counted as layers, written out here from
    get_num_layers_to_build (transformer_block.py): (L + e + l) / p per rank, one fewer on the
    first rank for the embedding and on the last for the loss."""
    per = (L + e + loss) // p
    return tuple(per - (e if i == 0 else 0) - (loss if i == p - 1 else 0) for i in range(p))


def brute_force(cands):
    """Every (shape, split) by itertools; returns sorted list of (objective, index, split) that fit.
    A shape that counts the embedding or the loss as a layer has one split, Megatron's."""
    L = cands.job.model.num_layers
    out, n = [], 0
    for j in range(len(cands.shapes)):
        p = int(cands.shapes.pp[j])
        e, loss = bool(cands.shapes.account_for_embedding[j]), bool(cands.shapes.account_for_loss[j])
        splits = ([megatron_accounted_split(L, p, e, loss)] if e or loss else
                  [tuple(b - a for a, b in zip((0,) + cuts, cuts + (L,)))
                   for cuts in itertools.combinations(range(1, L), p - 1)])
        n += len(splits)
        arr = np.array(splits, dtype=np.int64).reshape(len(splits), p)
        step, _, fits = step_time_batch(cands.coeffs.take(np.full(len(arr), j)), arr)
        out += [(float(s), j, tuple(int(x) for x in row)) for s, f, row in zip(step, fits, arr) if f]
    out.sort(key=lambda r: r[0])
    return out, n


@pytest.fixture(scope="module", params=sorted(INSTANCES))
def solved(request):
    cands = prepare(INSTANCES[request.param](), **PREPARE_KWARGS)
    assert len(cands.shapes) > 0
    bf, n = brute_force(cands)
    return request.param, cands, bf, n


def test_space_count_matches_brute_force(solved):
    _, cands, _, n = solved
    assert exhaustive.count_space(cands) == n


def test_exhaustive_matches_brute_force(solved):
    name, cands, bf, n = solved
    res = exhaustive.search(cands, time_limit_s=120, top_k=5, distinct="plan")
    assert res.finished and res.evaluations == n
    assert res.status == "OPTIMAL"
    assert res.best.objective_s == pytest.approx(bf[0][0], rel=REL)
    assert res.bound_s == res.best.objective_s
    # top-5 plans: the five best objective values, distinct (shape, split) pairs, sorted
    assert [c.objective_s for c in res.top] == pytest.approx([r[0] for r in bf[:5]], rel=REL)
    keys = {(c.index, tuple(c.layers)) for c in res.top}
    assert len(keys) == len(res.top)
    for c in res.top:  # each reported objective is the float formulation's value of that plan
        ev = evaluate_split(cands.coeffs, c.index, c.layers)
        assert ev.fits and ev.step_time_s == pytest.approx(c.objective_s, rel=REL)
        assert sum(c.layers) == cands.job.model.num_layers and min(c.layers) >= 1


def test_alpa_matches_exhaustive(solved):
    name, cands, bf, _ = solved
    alpa = alpa_dp.search(cands, time_limit_s=120, top_k=3)
    assert alpa.finished and alpa.status == "OPTIMAL"
    assert alpa.best.objective_s == pytest.approx(bf[0][0], rel=REL)
    assert alpa.evaluations > 0
    ev = evaluate_split(cands.coeffs, alpa.best.index, alpa.best.layers)
    assert ev.fits and ev.step_time_s == pytest.approx(alpa.best.objective_s, rel=REL)
    # top-k of Alpa = best split of each of the k best shapes: same as exhaustive(distinct="shape")
    ex = exhaustive.search(cands, time_limit_s=120, top_k=3, distinct="shape")
    assert [c.objective_s for c in alpa.top] == pytest.approx([c.objective_s for c in ex.top], rel=REL)
    best_per_shape = {}
    for obj, j, _ in bf:
        best_per_shape.setdefault(j, obj)
    assert [c.objective_s for c in ex.top] == pytest.approx(sorted(best_per_shape.values())[:3], rel=REL)


def test_unpruned_and_branch_and_bound_match(solved):
    """Alpa without its stopping rules, and the branch and bound (top-3 distinct shapes, on the
    legal candidates and on the product's pruned ones), give the brute force's answers."""
    _, cands, bf, n = solved
    best_per_shape = {}
    for obj, j, _ in bf:
        best_per_shape.setdefault(j, obj)
    top3 = sorted(best_per_shape.values())[:3]
    free = alpa_dp.search(cands, time_limit_s=120, top_k=3, prune=False)
    bb = branch_bound.search(cands, time_limit_s=120, top_k=3)
    for res in (free, bb):
        assert res.finished and res.status == "OPTIMAL"
        assert [c.objective_s for c in res.top] == pytest.approx(top3, rel=REL)
    assert bb.evaluations <= n
    pruned = branch_bound.search(prepare(cands.job), time_limit_s=120)
    assert pruned.best.objective_s <= bf[0][0] * (1 + REL)  # dominance may leave a different, equal shape


def test_bounded_compositions_are_every_split_within_the_caps():
    for L, hi in ((7, [3, 3, 3]), (6, [1, 4, 6, 2]), (5, [5]), (4, [1, 1])):
        want = [c for c in itertools.product(*(range(1, h + 1) for h in hi)) if sum(c) == L]
        assert list(branch_bound.bounded_compositions(L, hi)) == want


def test_alpa_sum_mode_matches_minmax(solved):
    _, cands, bf, _ = solved
    a = alpa_dp.search(cands, time_limit_s=120, mode="sum")
    b = alpa_dp.search(cands, time_limit_s=120, mode="minmax")
    assert a.best.objective_s == pytest.approx(b.best.objective_s, rel=REL) == pytest.approx(bf[0][0], rel=REL)
    assert a.evaluations >= b.evaluations


def test_some_instance_has_an_uneven_optimum():
    """The instances exercise the split, not only pp=1: at least one optimum is pipelined and
    at least one pipelined instance's best split is uneven."""
    cands = prepare(INSTANCES["uneven_7layers_pp3"](), **PREPARE_KWARGS)
    res = alpa_dp.search(cands, time_limit_s=60)
    assert len(res.best.layers) == 3 and len(set(res.best.layers)) > 1


def test_exhaustive_budget_by_evaluations_is_honest():
    cands = prepare(INSTANCES["pp2-4_8gpu_16GiB"](), **PREPARE_KWARGS)
    space = exhaustive.count_space(cands)
    res = exhaustive.search(cands, time_limit_s=60, max_evaluations=1000, block_rows=300)
    assert not res.finished
    assert res.evaluations == 1000 < space
    assert res.bound_s is None
    assert res.status in ("FEASIBLE", "UNKNOWN")
    assert (res.best is not None) == (res.status == "FEASIBLE")
    assert res.stats["stopped_by"] == "max_evaluations"


def test_exhaustive_budget_by_time_is_honest():
    cands = prepare(INSTANCES["pp2-4_8gpu_16GiB"](), **PREPARE_KWARGS)
    seen = []
    res = exhaustive.search(cands, time_limit_s=0.0, block_rows=500, progress=seen.append)
    assert not res.finished and res.bound_s is None
    assert 0 < res.evaluations < exhaustive.count_space(cands)
    assert res.status in ("FEASIBLE", "UNKNOWN")
    assert seen and seen[-1]["final"] and seen[-1]["evaluations"] == res.evaluations


def test_alpa_budget_by_time_is_honest():
    cands = prepare(INSTANCES["pp4-8_16gpu_zero0"](), **PREPARE_KWARGS)
    res = alpa_dp.search(cands, time_limit_s=0.0)
    assert not res.finished and res.bound_s is None and res.status in ("FEASIBLE", "UNKNOWN")


def test_infeasible_both_say_so():
    job = make_job(8, 8192, 64, 8, 64, hbm_gib=4, pp=(1, 2))  # nothing fits in 4 GiB
    cands = prepare(job, **PREPARE_KWARGS)
    ex = exhaustive.search(cands, time_limit_s=30)
    al = alpa_dp.search(cands, time_limit_s=30)
    assert ex.status == al.status == "INFEASIBLE"
    assert ex.best is None and al.best is None and ex.finished and al.finished


def test_infeasible_without_memory_pruning():
    """Shapes the memory bound did not remove but no split fits: still INFEASIBLE."""
    job = make_job(8, 8192, 64, 8, 64, hbm_gib=4, pp=(1, 2))
    cands = prepare(job, **PREPARE_KWARGS)
    from solveplan.formulation.job import job_coefficients
    from solveplan.space.enumeration import enumerate_shapes

    shapes = enumerate_shapes(job).shapes
    raw = type(cands)(job, shapes, job_coefficients(job, shapes), np.zeros(len(shapes)), None, math.inf, None,
                      len(shapes), 0, 0, 0, math.inf, None)
    assert exhaustive.search(raw, time_limit_s=30).status == "INFEASIBLE"
    assert alpa_dp.search(raw, time_limit_s=30).status == "INFEASIBLE"


def test_count_space_big_ints():
    assert exhaustive.count_splits(128, 64) == math.comb(127, 63)
    assert exhaustive.count_space_pp(126, [1, 2, 126, 127]) == 1 + 125 + 1
    assert exhaustive.count_splits(4, 5) == 0


def test_split_stream_is_every_composition():
    for L, p in [(7, 1), (7, 3), (9, 9), (10, 4)]:
        s = exhaustive._SplitStream(L, p)
        got = np.concatenate([s.take(5) for _ in range(1000) if s.left] or [np.zeros((0, p), int)])
        ref = {tuple(b - a for a, b in zip((0,) + c, c + (L,))) for c in itertools.combinations(range(1, L), p - 1)}
        assert len(got) == len(ref) == math.comb(L - 1, p - 1)
        assert {tuple(r) for r in got.tolist()} == ref
