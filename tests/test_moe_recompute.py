"""MoE physics against hand computations: the experts' saved activations as Megatron-Core's
TEGroupedMLP keeps them, the FP8 quantisation of the expert GEMM inputs, and selective
recomputation by Megatron module (`--recompute-modules`, formulation/recompute.py)."""

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.specs import Constraints, JobSpec

H, E, F, K = 2048, 128, 768, 8  # Qwen3-30B-A3B: hidden, experts, expert FFN, top-k


def _co(model, cluster="h100x64", precision="bf16", modules=None, **shape):
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.space.shapes import Shapes

    return stage_coefficients(model, load_cluster(cluster), Shapes.single(**shape), global_batch_size=256,
                              seq_length=4096, precision=precision, recompute_modules=modules)


def _hbm(cluster="h100x64"):
    gpu = load_cluster(cluster).gpu
    return gpu.hbm_bytes_per_s * gpu.hbm_efficiency


@pytest.mark.parametrize("precision,lib", [("bf16", 2.0), ("fp8", 1.0)])
def test_expert_activations_per_routed_copy(precision, lib):
    """Per routed copy: the experts' input (h) and the activation output (f) in the saved
    linear-input bytes, fc1's gated output (2f, bf16) and the fp32 probability; fc2's output is
    not kept (Megatron applies the probabilities in the weighted SwiGLU; unpermute takes none)."""
    from solveplan.formulation.moe import moe_mlp_activation_bytes

    m = load_model("qwen3-30b-a3b")
    T = 4096.0
    got = float(moe_mlp_activation_bytes(m, T, 1, 8, 1, 1.0, lib))
    copies = K * T  # balanced: k T_r etp over the E/ep local experts
    assert got == pytest.approx(8.0 * E * T + copies * (lib * (H + F) + 2 * 2 * F + 4), rel=1e-12)


def test_fp8_casts_of_the_dispatched_copies():
    """Under FP8 the expert GEMMs quantise their inputs (cast_bytes each): forward the copies'
    fc1 and fc2 inputs (h + f), backward their output gradients (2f + h)."""
    from solveplan.formulation.moe import moe_mlp_compute_s
    from solveplan.formulation.precision import matmul_rate

    m = load_model("qwen3-30b-a3b")
    c = load_cluster("h100x64")
    hbm = _hbm()
    mm = matmul_rate(c.gpu, "fp8", hbm)
    bf = matmul_rate(c.gpu, "bf16", hbm)
    T = 4096.0
    f0, b0, *_ = moe_mlp_compute_s(m, T, 1, 8, 1, 1.0, mm=mm, bf16=bf, hbm_bytes_per_s=hbm)
    f1, b1, *_ = moe_mlp_compute_s(m, T, 1, 8, 1, 1.0, mm=mm, bf16=bf, hbm_bytes_per_s=hbm, cast_bytes=4.0)
    copies = K * T
    assert float(f1 - f0) == pytest.approx(4.0 * copies * (H + F) / hbm, rel=1e-9)
    assert float(b1 - b0) == pytest.approx(4.0 * copies * (2 * F + H) / hbm, rel=1e-9)


def test_default_modules_are_megatrons_core_attn():
    """None (Megatron's default) and ("core_attn",) price the same, MoE and dense."""
    for name in ("qwen3-30b-a3b", "llama3.1-8b"):
        m = load_model(name)
        kw = dict(dp=8, recompute="selective") | ({"ep": 8} if m.is_moe else {})
        a, b = _co(m, "h100x8", **kw), _co(m, "h100x8", modules=("core_attn",), **kw)
        for f in ("layer_compute_s", "layer_act_bytes", "layer_ep_s"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), (name, f)


def test_moe_act_frees_the_activation_output_and_recomputes_it():
    """moe_act: per copy f elements of fc2's saved input freed; the backward reruns the weighted
    SwiGLU (read 2f, write f, bf16) over the copies; core_attn not listed: its forward is not
    rerun (flash attention keeps the same memory either way)."""
    m = load_model("qwen3-30b-a3b")
    kw = dict(dp=64, ep=8, recompute="selective")
    base = _co(m, **kw)
    act = _co(m, modules=("core_attn", "moe_act"), **kw)
    T = 4096.0
    copies = K * T
    assert float(base.layer_act_bytes[0] - act.layer_act_bytes[0]) == pytest.approx(copies * F * 2.0, rel=1e-9)
    assert float(act.layer_compute_s[0] - base.layer_compute_s[0]) == pytest.approx(
        copies * F * 2.0 * 3 / _hbm(), rel=1e-9)


def test_moe_module_recomputes_the_block_and_its_all_to_alls():
    """moe: the whole block freed (rebuilt one layer at a time: the working set), its forward and
    one more dispatch + combine run in the backward."""
    from solveplan.formulation.moe import moe_mlp_activation_bytes

    m = load_model("qwen3-30b-a3b")
    kw = dict(dp=64, ep=8, recompute="selective")
    base = _co(m, modules=(), **kw)
    moe = _co(m, modules=("moe",), **kw)
    block = float(moe_mlp_activation_bytes(m, 4096.0, 1, 8, 1, 1.0, 2.0))
    assert float(base.layer_act_bytes[0] - moe.layer_act_bytes[0]) == pytest.approx(block, rel=1e-9)
    assert float(moe.layer_ep_s[0]) == pytest.approx(1.5 * float(base.layer_ep_s[0]), rel=1e-9)
    assert float(moe.layer_compute_s[0]) > float(base.layer_compute_s[0])


def test_mla_up_proj_and_layernorm_free_their_outputs():
    """DeepSeek-V3 (MLA, 128 heads, d_qk 192, d_v 128), tp 2: mla_up_proj frees Q, K, V of the
    core (2 bytes x 128 (2 x 192 + 128) / 2 per token); layernorm on a MoE layer frees the
    attention norm (separate with MLA) and the pre-MLP norm outputs (2 x h x 2 bytes, sequence
    parallel over tp)."""
    m = load_model("deepseek-v3")
    kw = dict(tp=2, dp=32, ep=8, recompute="selective", sequence_parallel=True)
    T = 4096.0
    none = _co(m, modules=(), **kw)
    up = _co(m, modules=("mla_up_proj",), **kw)
    ln = _co(m, modules=("layernorm",), **kw)
    assert float(none.layer_act_bytes[0] - up.layer_act_bytes[0]) == pytest.approx(
        2.0 * T * 128 * (2 * 192 + 128) / 2, rel=1e-9)
    assert float(none.layer_act_bytes[0] - ln.layer_act_bytes[0]) == pytest.approx(2 * 2.0 * T * 7168 / 2, rel=1e-9)
    assert float(up.layer_compute_s[0]) > float(none.layer_compute_s[0])


def test_dense_mlp_module_and_unknown_module():
    from solveplan.formulation.recompute import modules_of

    m = load_model("llama3.1-8b")
    kw = dict(dp=8, recompute="selective")
    base, mlp = _co(m, "h100x8", **kw), _co(m, "h100x8", modules=("core_attn", "mlp"), **kw)
    f = m.ffn_hidden_size
    assert float(base.layer_act_bytes[0] - mlp.layer_act_bytes[0]) == pytest.approx(4096 * 2.0 * 3 * f, rel=1e-9)
    assert float(mlp.layer_compute_s[0]) > float(base.layer_compute_s[0])
    with pytest.raises(ValueError, match="unknown recompute module"):
        modules_of(("attention",))


def test_recompute_modules_render_and_job_rules():
    from solveplan.plan import ParallelConfig, make_plan
    from solveplan.render.megatron import megatron_args

    m = load_model("qwen3-30b-a3b")
    job = JobSpec(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096,
                  recompute_modules=("moe_act", "layernorm"), constraints=Constraints())
    par = ParallelConfig(tp=1, pp=1, dp=64, cp=1, vp=1, micro_batch_size=1, num_microbatches=4,
                         recompute="selective", sequence_parallel=False, zero=1, ep=8, etp=1)
    args = megatron_args(job, make_plan(job, par, [m.num_layers])).command()
    assert "--recompute-granularity selective" in args and "--recompute-modules moe_act layernorm" in args
    with pytest.raises(ValueError, match="moe_act"):
        JobSpec(model=load_model("llama3.1-8b"), cluster=load_cluster("h100x8"), global_batch_size=8,
                seq_length=4096, recompute_modules=("moe_act",))
    # Megatron's TransformerConfig: "mla_up_proj in recompute_modules is only supported with multi_latent_attention"
    with pytest.raises(ValueError, match="mla_up_proj needs multi-latent attention"):
        JobSpec(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096,
                recompute_modules=("mla_up_proj", "moe_act"))
    assert JobSpec(model=load_model("deepseek-v3"), cluster=load_cluster("h100x1024"), global_batch_size=1024,
                   seq_length=4096, recompute_modules=("mla_up_proj",)).recompute_modules == ("mla_up_proj",)


def test_recompute_modules_flag(cli):
    """`--recompute-modules` reaches the job (a bad name is refused naming the field and the choices, exit 2)."""
    r = cli("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--tp", "1", "--pp", "2", "--ep", "8",
            "--recompute", "selective", "--recompute-modules", "moe_att")
    assert r.code == 2 and "recompute_modules" in r.err and "moe_act" in r.err
