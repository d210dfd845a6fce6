"""The CP-SAT encoding against an independent brute force, and its invariants.

Brute force (here, not the baselines): every surviving shape x every composition of the
layers into its stages, evaluated with `formulation.pipeline.step_time_batch`.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from solveplan.search.candidates import prepare
from solveplan.formulation.linear import expand, linear_form
from solveplan.search import cpsat
from solveplan.formulation.pipeline import stage_arrays, stage_memory_bytes, step_time_batch
from solveplan.formulation.splits import balanced_split
from solveplan.specs import ClusterSpec, Constraints, GPUSpec, JobSpec, ModelSpec


def _compositions(L: int, p: int):
    for cuts in itertools.combinations(range(1, L), p - 1):
        e = (0,) + cuts + (L,)
        yield [e[i + 1] - e[i] for i in range(p)]


def _megatron_accounted(L: int, p: int, e: bool, loss: bool) -> list[int]:
    """Megatron-LM's split with the embedding / loss counted as layers (get_num_layers_to_build):
    (L + e + l) / p per rank, one fewer on the first rank for the embedding, on the last for the loss."""
    per = (L + e + loss) // p
    return [per - (e if i == 0 else 0) - (loss if i == p - 1 else 0) for i in range(p)]


def brute_force(cands, even_only: bool = False):
    """(best step, shape index, split) over every survivor and split; (inf, None, None) if none fits.
    A shape that counts the embedding or the loss as a layer has Megatron's split only."""
    L = cands.job.model.num_layers
    best = (np.inf, None, None)
    if cands.num_survivors == 0:
        return best
    P = int(cands.shapes.pp.max())
    for k in range(cands.num_survivors):
        p = int(cands.shapes.pp[k])
        e, loss = bool(cands.shapes.account_for_embedding[k]), bool(cands.shapes.account_for_loss[k])
        comps = ([_megatron_accounted(L, p, e, loss)] if e or loss else
                 [balanced_split(L, p)] if even_only else list(_compositions(L, p)))
        lay = np.zeros((len(comps), P), dtype=np.int64)
        lay[:, :p] = np.array(comps)
        step, _, fits = step_time_batch(cands.coeffs.take(np.full(len(comps), k)), lay)
        step = np.where(fits, step, np.inf)
        j = int(np.argmin(step))
        if step[j] < best[0]:
            best = (float(step[j]), k, [int(x) for x in comps[j]])
    return best


def make_job(L=8, gpus=16, hbm=24.0, batch=32, seq=1024, heads=16, head_dim=64, kv=None, gated=False, tied=False,
             vocab=50257, **cons) -> JobSpec:
    h = heads * head_dim
    model = ModelSpec(name="t", num_layers=L, hidden_size=h, num_attention_heads=heads, num_kv_heads=kv or heads,
                      ffn_hidden_size=(8 * h // 3 + 127) // 128 * 128 if gated else 4 * h, vocab_size=vocab,
                      gated_mlp=gated, tied_embeddings=tied)
    gpu = GPUSpec(name="g", peak_bf16_tflops=312.0, hbm_gib=hbm, hbm_gbyte_per_s=2039.0)
    cl = ClusterSpec(name="c", gpu=gpu, num_nodes=gpus // 8, nvlink_gbyte_per_s=300.0, nic_gbit_per_s=200.0)
    return JobSpec(model=model, cluster=cl, global_batch_size=batch, seq_length=seq, constraints=Constraints(**cons))


def random_jobs(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        heads = rng.choice([8, 16, 32])
        yield make_job(L=rng.randint(2, 12), gpus=rng.choice([8, 16, 24, 32]), hbm=rng.choice([6.0, 10.0, 16.0, 40.0, 80.0]),
                       batch=rng.choice([8, 16, 32, 64, 128]), seq=rng.choice([512, 1024, 2048, 4096]), heads=heads,
                       head_dim=rng.choice([64, 128]), kv=rng.choice([heads, max(1, heads // 4)]), gated=rng.random() < 0.5,
                       tied=rng.random() < 0.5, vocab=rng.choice([32000, 50257, 128256]),
                       **({"pp": tuple(sorted(rng.sample([1, 2, 3, 4, 6, 8], 2)))} if rng.random() < 0.3 else {}))


def check_against_brute(cands, res):
    bt, bk, _ = brute_force(cands, even_only=not cands.job.constraints.uneven_split)
    if bk is None:
        assert res.status == "INFEASIBLE" and res.best is None
        return
    assert res.status == "OPTIMAL", res.stats.get("notes")
    assert not res.stats["notes"], res.stats["notes"]  # no fallback (canonical split, tie-break) taken
    tol = res.stats["tolerance_s"]
    assert res.best.objective_s >= bt * (1 - 1e-12), "better than brute force: a plan outside the space"
    assert res.best.objective_s - bt <= tol, (res.best.objective_s, bt, tol)
    assert res.bound_s is not None and res.bound_s <= bt * (1 + 1e-12)
    assert res.bound_s <= res.best.objective_s
    # what it reports is the float formulation's value of its own plan, and the plan fits
    k, lay = res.best.index, res.best.layers
    P = int(cands.shapes.pp.max())
    row = np.zeros((1, P), dtype=np.int64)
    row[0, :len(lay)] = lay
    step, _, fits = step_time_batch(cands.coeffs.take([k]), row)
    assert bool(fits[0]) and step[0] == pytest.approx(res.best.objective_s, rel=1e-12)
    assert sum(lay) == cands.job.model.num_layers and min(lay) >= 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_equals_brute_force_random(seed):
    for job in random_jobs(12, seed):
        for prune in (True, False):
            cands = prepare(job, prune_time=prune)
            if cands.num_survivors > 300:
                continue
            check_against_brute(cands, cpsat.search(cands, time_limit_s=20))


@pytest.mark.parametrize("kw", [
    dict(L=12, gpus=32, hbm=16.0, batch=64, pp=(4, 6)),  # deep pipelines, tight memory: uneven splits
    dict(L=10, gpus=16, hbm=10.0, batch=32, seq=2048, pp=(2, 4), recompute=("none",)),
    dict(L=9, gpus=24, hbm=40.0, batch=48, pp=(3,), vp_max=3),
    dict(L=8, gpus=16, hbm=24.0, batch=32, pp=(4,), uneven_split=False),
])
def test_equals_brute_force_pipelines(kw):
    cands = prepare(make_job(**kw))
    res = cpsat.search(cands, time_limit_s=20)
    check_against_brute(cands, res)


def test_infeasible_verdict():
    cands = prepare(make_job(L=8, gpus=8, hbm=2.5, heads=32, head_dim=128, seq=4096))
    res = cpsat.search(cands, time_limit_s=10)
    assert res.status == "INFEASIBLE" and res.best is None and res.top == []
    assert brute_force(cands)[1] is None


def test_linear_form_reproduces_float_step_time():
    rng = np.random.default_rng(0)
    for job in random_jobs(6, 7):
        cands = prepare(job, prune_time=False)
        if cands.num_survivors == 0:
            continue
        co, L = cands.coeffs, job.model.num_layers
        form = linear_form(co, L)
        P = form.active.shape[1]
        lay = np.zeros((cands.num_survivors, P), dtype=np.int64)
        for k in range(cands.num_survivors):
            p = int(form.pp[k])
            cuts = np.sort(rng.choice(np.arange(1, L), size=p - 1, replace=False)) if p > 1 else np.array([], int)
            lay[k, :p] = np.diff(np.concatenate([[0], cuts, [L]]))
        step, _, _ = step_time_batch(co, lay)
        act = form.active
        y = np.where(act, form.y_slope_s[:, None] * lay + expand(form.y_const_s, form.pp), -np.inf).max(axis=1)
        t1 = form.opt_slope_s[:, None] * lay + expand(form.opt_const_s, form.pp)
        t2 = form.red_slope_s[:, None] * lay + expand(form.red_const_s, form.pp)
        tail = np.where(act, np.maximum(t1, t2), -np.inf).max(axis=1)
        assert np.allclose(form.base_s + y + tail, step, rtol=1e-12, atol=0)


def test_layer_limits_agree_with_formulation():
    for job in random_jobs(6, 11):
        cands = prepare(job, prune_time=False)
        if cands.num_survivors == 0:
            continue
        co, L = cands.coeffs, job.model.num_layers
        form = linear_form(co, L)
        U, act = form.max_layers, form.active

        def mem(lay):
            return stage_memory_bytes(stage_arrays(co, lay))

        cap = co.capacity_bytes
        at = mem(np.clip(U, 0, L))
        assert np.all(~act | (U < 0) | (at <= cap))
        above = mem(np.clip(U + 1, 0, L))
        assert np.all(~act | (U >= L) | (above > cap))


def test_integer_objective_never_exceeds_float():
    cands = prepare(make_job(L=12, gpus=32, hbm=16.0, batch=64, pp=(4, 6)))
    form = linear_form(cands.coeffs, 12)
    q = 1e-4
    iform = cpsat.IntegerForm.make(form, cands.time_lb_s, q)
    rng = np.random.default_rng(1)
    for k in range(cands.num_survivors):
        p = int(form.pp[k])
        for _ in range(5):
            cuts = np.sort(rng.choice(np.arange(1, 12), size=p - 1, replace=False))
            lay = np.diff(np.concatenate([[0], cuts, [12]]))
            row = np.zeros((1, form.active.shape[1]), dtype=np.int64)
            row[0, :p] = lay
            step = float(step_time_batch(cands.coeffs.take([k]), row)[0][0])
            val = iform.objective(k, lay)
            assert val * q <= step * (1 + 1e-12)
            assert step - val * q <= (2 * 12 + 3) * q


def _answer(res):
    return (res.status, [(c.index, c.layers, c.objective_s) for c in res.top], res.bound_s)


def test_deterministic_across_runs_seeds_and_workers():
    job = make_job(L=24, gpus=64, hbm=24.0, batch=128, seq=2048, heads=32, head_dim=128)
    cands = prepare(job, prune_time=False)
    assert cands.num_survivors > 50
    ref = _answer(cpsat.search(cands, time_limit_s=30, top_k=2))
    for workers, seed in ((1, 0), (1, 7), (2, 0), (2, 3)):
        assert _answer(cpsat.search(cands, time_limit_s=30, workers=workers, seed=seed, top_k=2)) == ref


@pytest.mark.slow
def test_top_k_distinct_and_ordered():
    cands = prepare(make_job(L=12, gpus=32, hbm=40.0, batch=64), prune_time=False)
    one = cpsat.search(cands, time_limit_s=20)
    res = cpsat.search(cands, time_limit_s=20, top_k=4)
    assert len(res.top) == 4
    assert len({c.index for c in res.top}) == 4
    objs = [c.objective_s for c in res.top]
    tol = res.stats["tolerance_s"]
    assert all(b >= a - tol for a, b in zip(objs, objs[1:]))
    assert res.top[0].index == one.best.index and res.top[0].layers == one.best.layers
    # the second is the best shape once the first is excluded: brute force over the rest
    L = cands.job.model.num_layers
    best_rest = np.inf
    for k in range(cands.num_survivors):
        if k == res.top[0].index:
            continue
        p = int(cands.shapes.pp[k])
        comps = list(_compositions(L, p))
        lay = np.zeros((len(comps), int(cands.shapes.pp.max())), dtype=np.int64)
        lay[:, :p] = comps
        step, _, fits = step_time_batch(cands.coeffs.take(np.full(len(comps), k)), lay)
        best_rest = min(best_rest, float(np.where(fits, step, np.inf).min()))
    assert res.top[1].objective_s == pytest.approx(best_rest, abs=tol)


def test_top_k_cut_short_is_feasible_with_the_top_k_found():
    cands = prepare(make_job(L=12, gpus=32, hbm=40.0, batch=64), prune_time=False)
    res = cpsat.search(cands, time_limit_s=1e-6, top_k=4)
    assert res.status == "FEASIBLE" and not res.finished
    assert 1 <= len(res.top) < 4 and res.stats["top_k_found"] == len(res.top) and res.stats["top_k_asked"] == 4
    assert any("time limit" in n for n in res.stats["notes"])


def test_top_k_pruned_against_the_kth_plan_keeps_the_k_best():
    """prepare(job, top_k=K) prunes against the K-th best plan found: the K best shapes stay."""
    for job in random_jobs(8, 5):
        full = prepare(job, prune_time=False)
        if full.num_survivors == 0 or full.num_survivors > 300:
            continue
        ref = cpsat.search(full, time_limit_s=20, top_k=3)
        res = cpsat.search(prepare(job, top_k=3), time_limit_s=20, top_k=3)
        assert res.status == ref.status
        tol = ref.stats["tolerance_s"]
        assert [c.objective_s for c in res.top] == pytest.approx([c.objective_s for c in ref.top], abs=tol)


def _exact_by_brute_force(form, k: int, L: int) -> int:
    p = int(form.pp[k])
    best = cpsat.NO_SPLIT
    for comp in _compositions(L, p):
        if all(comp[i] <= form.max_layers[k, i] for i in range(p)):
            best = min(best, form.objective(k, comp))
    return best


def test_exact_shape_optima_equal_brute_force():
    """Each shape's exact optimum (the model's per-shape bound) on real coefficients and on random
    integer forms (negative constants, zero and negative slopes, tight memory limits)."""
    for job in random_jobs(10, 3):
        cands = prepare(job, prune_time=False)
        if cands.num_survivors == 0 or cands.num_survivors > 200:
            continue
        L = job.model.num_layers
        iform = cpsat.IntegerForm.make(cands.form, cands.time_lb_s, 1e-5)
        got = cpsat.shape_optima(iform, np.arange(cands.num_survivors), L)
        assert got.tolist() == [_exact_by_brute_force(iform, k, L) for k in range(cands.num_survivors)]
    rng = np.random.default_rng(0)
    for _ in range(300):
        L, S = int(rng.integers(1, 11)), 5
        pp = rng.integers(1, min(L, 5) + 1, size=S)
        U = np.zeros((S, int(pp.max())), dtype=np.int64)
        for k in range(S):
            U[k, :pp[k]] = rng.integers(-1 if rng.random() < 0.2 else 1, L + 2, pp[k])
        ri = lambda lo, hi, size: rng.integers(lo, hi, size=size)  # noqa: E731
        form = cpsat.IntegerForm(q=1.0, pp=pp, y_slope=ri(0, 50, S) * (rng.random(S) < 0.9), y_const=ri(-100, 300, (S, 3)),
                                 base=ri(0, 1000, S), opt_slope=ri(0, 20, S), opt_const=ri(-50, 100, (S, 3)),
                                 red_slope=ri(-40, 40, S), red_const=ri(-300, 300, (S, 3)),
                                 lower_bound=ri(0, 1500, S), max_layers=U)
        got = cpsat.shape_optima(form, np.arange(S), L)
        assert got.tolist() == [_exact_by_brute_force(form, k, L) for k in range(S)]


def test_canonical_split_reaches_target_and_is_balanced():
    cands = prepare(make_job(L=12, gpus=32, hbm=40.0, batch=64, pp=(4,)))
    res = cpsat.search(cands, time_limit_s=20)
    k = res.best.index
    form = linear_form(cands.coeffs, 12)
    q = res.stats["time_quantum_s"]
    iform = cpsat.IntegerForm.make(form, cands.time_lb_s, q)
    target = iform.objective(k, res.best.layers)
    again = cpsat.canonical_split(iform, k, target, 12)
    assert again == res.best.layers
    assert max(again) - min(again[1:-1] or again) <= 2


def test_shape_ranks_follow_parallel_config_key():
    from solveplan.plan import parallel_from_row

    cands = prepare(make_job(L=12, gpus=32, hbm=40.0, batch=64), prune_time=False)
    rank = cpsat.shape_ranks(cands)
    keys = [parallel_from_row(cands.job, cands.shapes.row(k)).key() for k in range(cands.num_survivors)]
    assert sorted(range(len(keys)), key=lambda k: keys[k]) == list(np.argsort(rank))


def test_progress_reports_and_stats():
    events = []
    cands = prepare(make_job(L=12, gpus=32, hbm=16.0, batch=64, pp=(4, 6)))
    res = cpsat.search(cands, time_limit_s=20, progress=events.append)
    assert events and events[-1]["final"] and events[-1]["status"] == res.status
    st = res.stats
    for key in ("wall_time_s", "time_quantum_s", "tolerance_s", "max_coefficient", "shapes_in_model", "phases"):
        assert key in st
    ph = st["phases"][0]
    for key in ("status", "wall_time_s", "branches", "conflicts", "num_booleans", "num_constraints"):
        assert key in ph


def test_time_limit_returns_known_plan_with_valid_bound():
    job = make_job(L=24, gpus=64, hbm=24.0, batch=128, seq=2048, heads=32, head_dim=128)
    cands = prepare(job, prune_time=False)
    full = cpsat.search(cands, time_limit_s=30)
    res = cpsat.search(cands, time_limit_s=1e-6)
    assert res.status in ("FEASIBLE", "OPTIMAL") and res.best is not None
    if res.status == "FEASIBLE":
        assert not res.finished and res.stats["notes"]
    assert res.best.objective_s >= full.best.objective_s - full.stats["tolerance_s"]
    assert res.bound_s is None or res.bound_s <= full.best.objective_s + full.stats["tolerance_s"]
