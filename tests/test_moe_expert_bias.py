"""The experts' epilogue that Megatron-Core runs outside the grouped GEMM and the fused activation
(formulation/moe.py `expert_bias_bytes`, `expert_clamp_bytes`, formulation/host.py `EXPERT_BIAS_OPS`):
GPT-OSS carries biases on its experts (add_bias_linear) and clamps its quick GeGLU's input, Qwen3-MoE
does neither; each term against a hand count from the source (megatron/core/transformer/moe/experts.py
`TEGroupedMLP._apply_bias`, megatron/core/fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl`)."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_model


def _rates(gpu):
    from solveplan.formulation.precision import matmul_rate

    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    return hbm, matmul_rate(gpu, "bf16", hbm)


def test_bias_bytes_are_six_bf16_passes_forward_and_eight_backward_per_copy():
    from solveplan.formulation.moe import expert_bias_bytes

    oss = load_model("gpt-oss-120b")
    f, b = expert_bias_bytes(oss, 1000.0, oss.hidden_size)
    assert (f, b) == pytest.approx((6 * 2 * 1000.0 * 2880, 8 * 2 * 1000.0 * 2880))
    assert expert_bias_bytes(load_model("qwen3-30b-a3b"), 1000.0, 2048) == (0.0, 0.0)


@pytest.mark.parametrize("key, biased", [("gpt-oss-120b", True), ("qwen3-30b-a3b", False)])
def test_moe_block_pays_the_eager_bias_over_every_routed_copy(key, biased):
    """On the eager path the MoE block's forward (backward) grows by the bias bytes of the k*T_r
    copies the rank computes over attained HBM bandwidth; not on a whole-iteration graph's path, and
    never for a model without biases."""
    from solveplan.formulation.moe import moe_mlp_compute_s

    m, gpu = load_model(key), load_cluster("b200x64").gpu
    hbm, mm = _rates(gpu)
    T, ep = 16384.0, 8
    kw = dict(mm=mm, bf16=mm, hbm_bytes_per_s=hbm)
    f1, b1, g1, _ = moe_mlp_compute_s(m, T, 1, ep, 1, 1.0, **kw)
    f0, b0, g0, _ = moe_mlp_compute_s(m, T, 1, ep, 1, 1.0, eager_epilogue=False, **kw)
    copies = m.moe_router_topk * T
    # bias: 6 / 8 bf16 passes over h per copy; GPT-OSS's clamp: 8 / 10 bf16 elements of f_e per copy
    want = (12.0 * m.hidden_size + 16.0 * m.moe_ffn_hidden_size, 16.0 * m.hidden_size + 20.0 * m.moe_ffn_hidden_size) \
        if biased else (0.0, 0.0)
    assert float(f1 - f0) == pytest.approx(want[0] * copies / hbm, rel=1e-9, abs=1e-15)
    assert float(b1 - b0) == pytest.approx(want[1] * copies / hbm, rel=1e-9, abs=1e-15)
    assert float(g1) == float(g0)  # the GEMMs are untouched


def test_host_calls_add_the_per_expert_bias_ops():
    """Forward: a multiply and an add per local expert + two splits and a cat, after the sync;
    backward: 4 ops per local expert + the splits' cat."""
    from solveplan.formulation.host import host_calls_s

    op = 20e-6
    pre0, post0, bwd0 = (float(x) for x in host_calls_s(op, 16, fp8=False))
    pre1, post1, bwd1 = (float(x) for x in host_calls_s(op, 16, fp8=False, expert_bias=True))
    assert pre1 == pre0
    assert post1 - post0 == pytest.approx((2 * 16 + 3) * op)
    assert bwd1 - bwd0 == pytest.approx((4 * 16 + 1) * op)
    assert host_calls_s(op, 16, fp8=False, expert_bias=True, full_iteration=True) == (0.0, 0.0, 0.0)


def test_a_biased_moe_layer_is_slower_eager_and_not_under_a_whole_iteration_graph():
    """Through the stage coefficients: GPT-OSS's layer with biases against the same model without
    them -- eager, the layer's compute grows; under a whole-iteration graph (Transformer Engine's op
    fuser, no Python bias loop) it does not."""
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.space.shapes import Shapes

    m = load_model("gpt-oss-120b")
    plain = m.model_copy(update={"add_bias_linear": False})
    c = load_cluster("b200x64")
    shape = Shapes.single(tp=1, dp=64, ep=8, etp=1, zero=1)
    kw = dict(global_batch_size=256, seq_length=4096, moe_token_dispatcher="flex")

    def layer(model, **extra):
        return float(stage_coefficients(model, c, shape, **kw, **extra).layer_compute_s[0])

    assert layer(m) > layer(plain) * 1.02
    graph = dict(cuda_graph_impl="full_iteration")
    # only the bias term differs between the two models' MoE blocks under the graph
    assert layer(m, **graph) - layer(plain, **graph) < 0.2 * (layer(m) - layer(plain))


def test_only_quick_geglu_clamps_outside_its_fused_function():
    """GPT-OSS's quick GeGLU clamps in PyTorch ops before the fused activation; SwiGLU's clamp is inside its
    jit-fused function (DeepSeek-V4's swiglu_limit), and an unclamped activation has no clamp at all."""
    from solveplan.formulation.moe import expert_clamp_bytes, expert_clamp_saved_bytes

    oss = load_model("gpt-oss-120b")
    assert expert_clamp_bytes(oss, 100.0, 2880) == pytest.approx((2 * 8 * 100.0 * 2880, 2 * 10 * 100.0 * 2880))
    assert expert_clamp_saved_bytes(oss, 100.0, 2880) == pytest.approx(2 * 2 * 100.0 * 2880)
    swiglu = load_model("qwen3-30b-a3b").model_copy(update={"activation_clamp": 7.0})
    unclamped = oss.model_copy(update={"activation_clamp": None})
    for m in (swiglu, unclamped):
        assert expert_clamp_bytes(m, 100.0, 768) == (0.0, 0.0)
        assert expert_clamp_saved_bytes(m, 100.0, 768) == 0.0


def test_the_clamped_input_is_kept_eager_and_freed_by_moe_act():
    """GPT-OSS's MoE block keeps the clamped input (2 f_e bf16 per copy) on the eager path, not under the op
    fuser; selective recomputation of moe_act frees it and runs the clamps again."""
    from solveplan.formulation.moe import moe_mlp_activation_bytes, routed_tokens
    from solveplan.formulation.moe_layer import moe_selective
    from solveplan.formulation.recompute import modules_of

    m, T, ep = load_model("gpt-oss-120b"), 16384.0, 8
    eager = moe_mlp_activation_bytes(m, T, 1, ep, 1, 1.0, eager_epilogue=True)
    fused = moe_mlp_activation_bytes(m, T, 1, ep, 1, 1.0, eager_epilogue=False)
    copies = float(routed_tokens(m, T, ep, 1, 1.0)[1])
    assert float(eager - fused) == pytest.approx(4.0 * copies * m.moe_ffn_hidden_size)
    hbm, mm = _rates(load_cluster("b200x64").gpu)
    sel = dict(mods=modules_of(["moe_act"]), attn_s=0.0)
    kw = dict(M=T, t=1.0, ep=ep, etp=1.0, imbalance=1.0, mf=0.0, mm=mm, hbm=hbm, precision="bf16",
              act_kw=dict(linear_input_bytes=2.0, sp_degree=1.0))
    (s1, freed1), (s0, freed0) = (moe_selective(m, sel, **kw, eager_epilogue=e) for e in (True, False))
    assert float(freed1["act"] - freed0["act"]) == pytest.approx(4.0 * copies * m.moe_ffn_hidden_size)
    assert float(s1 - s0) == pytest.approx(16.0 * copies * m.moe_ffn_hidden_size / hbm)
