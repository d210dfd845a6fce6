"""The formulation as a specification: FLOPs, parameters, memory and step time."""

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.formulation.pipeline import evaluate_split, inflight_microbatches
from solveplan.formulation.splits import balanced_split
from solveplan.space.shapes import Shapes
from solveplan.formulation.pipeline import step_time_batch
from solveplan.formulation.flops import hardware_flop_per_step, megatron_eq3_flop, model_flop_per_step
from solveplan.specs import ModelSpec


def gpt(L, h, a, V=51200, s=2048):
    return ModelSpec(name="gpt", num_layers=L, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h,
                     vocab_size=V, seq_length=s, tied_embeddings=True)


@pytest.mark.parametrize("L,h,a", [(24, 2304, 24), (96, 12288, 96), (128, 25600, 160)])
def test_hardware_flops_with_full_recompute_equal_megatron_eq3(L, h, a):
    m = gpt(L, h, a)
    ours = float(hardware_flop_per_step(m, 512, 2048, 2))
    assert ours == pytest.approx(megatron_eq3_flop(m, 512, 2048), rel=0.01)


def test_model_flops_are_three_quarters_of_eq3_gemm_term():
    # Megatron model FLOPs 72*B*s*l*h^2*(1 + s/(6h) + V/(12 l h)): the check of Korthikanti's MFU 51.4%.
    m = gpt(96, 12288, 96)
    B, s, l, h, V = 64, 2048, 96, 12288, 51200
    ref = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    assert model_flop_per_step(m, B, s) == pytest.approx(ref, rel=0.01)


def test_narayanan_parameter_formula():
    m = gpt(96, 12288, 96)
    l, h, V, s = 96, 12288, 51200, 2048
    ref = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert m.num_params == pytest.approx(ref, rel=0.01)


def test_gqa_and_gated_mlp_flops_follow_the_weights():
    # forward GEMM FLOPs per token = 2 x weights of a layer (bias-free), whatever GQA and SwiGLU do
    m = load_model("llama3.1-70b")
    from solveplan.formulation.flops import layer_gemm_fwd_flop

    assert float(layer_gemm_fwd_flop(m, 1)) == pytest.approx(2 * (m.params_per_layer - 2 * m.norm_params))


def test_inflight_microbatches_match_1f1b_and_interleaving():
    p, m = 8, 64
    assert inflight_microbatches(p, 1, m, 0) == 8
    assert inflight_microbatches(p, 1, m, 7) == 1
    assert inflight_microbatches(p, 1, 4, 0) == 4  # fewer micro-batches than stages
    v = 3  # Korthikanti: L(1 + (p-1)/(p v)) layers on stage 0 -> p * (1 + (p-1)/(p v)) micro-batches of L/p
    assert inflight_microbatches(p, v, m, 0) == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_even_split_pipeline_time_is_narayanan_eq1():
    """Even split, no DP: T = (m + (p-1)/v) * tau (plus the optimizer), Narayanan Eq. (1)."""
    cl = load_cluster("a100x64")
    m = gpt(96, 12288, 96)
    for v in (1, 3):
        co = stage_coefficients(m, cl, Shapes.single(tp=8, pp=8, dp=1, vp=v, micro_batch_size=1), global_batch_size=64,
                                seq_length=2048, flash_attention=False)
        ev = evaluate_split(co, 0, [12] * 8)
        # stages differ only by the embedding / head extras: bound the pipeline time between
        # the interior stage's slot and the heaviest slot
        slot_mid = 12 * co.layer_s[0] + v * co.boundary_s[0]
        mm = 64
        lo = (mm + 7 / v) * slot_mid
        hi = (mm + 7 / v) * (slot_mid + co.first_s[0] + co.last_s[0])
        pipe = ev.step_time_s - ev.breakdown["optimizer_s"] - ev.breakdown["exposed_dp_s"]
        assert lo <= pipe <= hi


def test_uneven_split_is_priced_per_stage():
    """Moving a layer off the last stage (which holds the LM head) changes the step time."""
    cl = load_cluster("a100x64")
    m = gpt(24, 4096, 32, V=256000)
    co = stage_coefficients(m, cl, Shapes.single(tp=8, pp=4, dp=2, micro_batch_size=1, zero=1), global_batch_size=64,
                            seq_length=2048)
    even = evaluate_split(co, 0, [6, 6, 6, 6]).step_time_s
    lighter_last = evaluate_split(co, 0, [6, 7, 6, 5]).step_time_s
    assert lighter_last < even


def test_memory_sharding_bytes_per_parameter():
    from solveplan.formulation.memory import model_state_bytes_per_param

    for z, d, total in [(0, 8, 18), (1, 8, 6 + 12 / 8), (2, 8, 2 + 16 / 8), (3, 8, 18 / 8)]:
        assert sum(x for x in model_state_bytes_per_param(z, d, "bf16")) == pytest.approx(total)
    # fp16 training keeps fp16 gradients (ZeRO paper's 16 bytes); FP8 adds the cached FP8 weight and transpose
    assert sum(model_state_bytes_per_param(0, 8, "fp16")) == pytest.approx(16)
    assert sum(model_state_bytes_per_param(0, 8, "fp8")) == pytest.approx(20)


def test_recompute_and_sp_shrink_activations_and_full_recompute_costs_time():
    cl = load_cluster("a100x64")
    m = gpt(48, 6144, 64)
    rows = [dict(recompute="none", sequence_parallel=False), dict(recompute="selective", sequence_parallel=True),
            dict(recompute="full", sequence_parallel=True)]
    sh = Shapes.concat([Shapes.single(tp=8, pp=1, dp=8, micro_batch_size=4, zero=1, **r) for r in rows])
    co = stage_coefficients(m, cl, sh, global_batch_size=64, seq_length=2048, flash_attention=False)
    assert co.layer_act_bytes[0] > co.layer_act_bytes[1] > co.layer_act_bytes[2]
    assert co.layer_s[2] > co.layer_s[1] >= co.layer_s[0] * 0.9


def test_vectorised_batch_equals_single_evaluation():
    cl = load_cluster("a100x64")
    m = gpt(24, 2304, 24)
    shapes = Shapes.concat([Shapes.single(tp=t, pp=p, dp=64 // (t * p), micro_batch_size=1, zero=1)
                            for t in (1, 2, 4, 8) for p in (1, 2, 4)])
    co = stage_coefficients(m, cl, shapes, global_batch_size=512, seq_length=2048)
    P = int(shapes.pp.max())
    layers = np.zeros((len(shapes), P), dtype=int)
    for i, p in enumerate(shapes.pp):
        layers[i, :p] = balanced_split(24, int(p))
    step, peak, fits = step_time_batch(co, layers)
    for i, p in enumerate(shapes.pp):
        ev = evaluate_split(co, i, layers[i, :p])
        assert ev.step_time_s == pytest.approx(step[i])
        assert ev.peak_memory_bytes == pytest.approx(peak[i])


def test_config_rules_agree_with_the_enumeration():
    from solveplan.specs import JobSpec
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.space.rules import config_violations

    import itertools

    from solveplan.specs import Constraints

    job = JobSpec(model=gpt(8, 1024, 16), cluster=load_cluster("a100x16"), global_batch_size=32, seq_length=1024)
    shapes = enumerate_shapes(job).shapes
    legal = {tuple(shapes.row(i).values()) for i in range(len(shapes))}
    for tp, cp, pp, mbs, vp, rc, sp, z in itertools.product((1, 2, 4, 8, 16), (1, 2), (1, 2, 4, 8), (1, 2, 4, 3), (1, 2),
                                                            ("none", "full"), (False, True), (0, 1, 3)):
        dp, errs = config_violations(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=rc,
                                     sequence_parallel=sp, zero=z)
        key = (tp, pp, dp, cp, vp, mbs, rc, sp, z, 1, 1, False, False)  # ep, etp: a dense model; nothing counted
        assert (not errs) == (key in legal), (key, errs)

    # vp and the embedding / loss accounting named (every legal value in the space), 6 layers: 8
    # slots make pp 4 x vp 2 legal only with both counted
    job = JobSpec(model=gpt(6, 1024, 16), cluster=load_cluster("a100x16"), global_batch_size=32, seq_length=1024,
                  constraints=Constraints(vp=(1, 2), account_for_embedding=(False, True), account_for_loss=(False, True)))
    shapes = enumerate_shapes(job).shapes
    legal = {tuple(shapes.row(i).values()) for i in range(len(shapes))}
    assert shapes.accounted.any()
    for tp, cp, pp, mbs, vp, rc, sp, z, e, loss in itertools.product(
            (1, 2, 4, 8, 16), (1, 2), (1, 2, 4, 8), (1, 2, 4, 3), (1, 2), ("none", "full"), (False, True), (0, 1, 3),
            (False, True), (False, True)):
        dp, errs = config_violations(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=rc,
                                     sequence_parallel=sp, zero=z, account_for_embedding=e, account_for_loss=loss)
        key = (tp, pp, dp, cp, vp, mbs, rc, sp, z, 1, 1, e, loss)  # ep, etp: a dense model
        assert (not errs) == (key in legal), (key, errs)
    assert any(r[1] == 4 and r[4] == 2 and r[-2:] == (True, True) for r in legal)


@pytest.mark.parametrize("model,cluster", [("gpt3-175b", "a100x1024"), ("llama3.1-405b", "h100x16384")])
def test_zero0_dominated_shapes_are_no_faster_than_their_zero1_twin(model, cluster):
    """Every shape `zero0_dominated` drops has a zero=1 twin at least as fast (balanced split);
    on these jobs the rule keeps some zero=0 shapes (the tree all-reduce across many nodes)."""
    from solveplan.formulation.job import job_coefficients, zero0_dominated
    from solveplan.formulation.splits import balanced_layers_matrix
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.specs import JobSpec

    m = load_model(model)
    job = JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=m.global_batch_size, seq_length=m.seq_length)
    shapes = enumerate_shapes(job).shapes
    dom = zero0_dominated(job, shapes)
    zero0 = (shapes.zero == 0) & (shapes.dp * shapes.cp > 1)
    assert dom.any() and (dom & ~zero0).sum() == 0 and (zero0 & ~dom).any()
    rows = np.flatnonzero(dom)[::97]
    twins = Shapes(*(getattr(shapes, f)[rows] for f in ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute",
                                                        "sequence_parallel")), np.ones(len(rows), dtype=np.int64))
    L = job.model.num_layers
    t0, _, _ = step_time_batch(job_coefficients(job, shapes.take(rows)), balanced_layers_matrix(L, shapes.pp[rows]))
    t1, _, _ = step_time_batch(job_coefficients(job, twins), balanced_layers_matrix(L, twins.pp))
    assert np.all(t1 <= t0 * (1 + 1e-12))
