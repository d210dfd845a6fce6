"""The terms added for the step time and memory of the published MoE runs (issue #22), each against a
hand computation from its source, and what the published rows state reaching the job."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.specs import JobSpec


def _co(model, cluster, precision="bf16", fp8_param_gather=False, **shape):
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.space.shapes import Shapes

    return stage_coefficients(model, load_cluster(cluster), Shapes.single(**shape), global_batch_size=256,
                              seq_length=4096, precision=precision, fp8_param_gather=fp8_param_gather,
                              grad_reduce_dtype="bf16")


# ---------------------------------------------------------------- FP8 primary weights

def test_fp8_param_gather_keeps_only_the_fp8_weights():
    """Megatron --fp8-param-gather: no BF16 weight, the recipe's FP8 copies only (MXFP8: rowwise and
    columnwise bytes + an E8M0 scale per 32 in each, 2 + 2/32); the gradients and Adam as before."""
    from solveplan.formulation.memory import model_state_bytes_per_param

    p, g, o = model_state_bytes_per_param(1, 8, "mxfp8", "bf16", fp8_param_gather=True)
    assert (float(p), float(g), float(o)) == pytest.approx((2 + 2 / 32, 2.0, 12 / 8))
    p0, _, _ = model_state_bytes_per_param(1, 8, "mxfp8", "bf16")
    assert float(p0) == pytest.approx(2 + 2 + 2 / 32)  # BF16 weight + the FP8 copies
    m = load_model("qwen3-30b-a3b")
    kw = dict(tp=1, dp=64, ep=8, etp=1, zero=1)
    keep = _co(m, "b200x64", precision="mxfp8", **kw)
    only = _co(m, "b200x64", precision="mxfp8", fp8_param_gather=True, **kw)
    assert float(only.layer_params_bytes[0]) == pytest.approx(float(keep.layer_params_bytes[0]) * 2.0625 / 4.0625)
    assert float(only.layer_grads_bytes[0]) == pytest.approx(float(keep.layer_grads_bytes[0]))


def test_fp8_param_gather_halves_the_gathered_bytes_except_mxfp8():
    """The distributed optimizer gathers FP8 weights in 1 byte; MXFP8 gathers BF16 (Megatron-Core MoE
    README: "50% parameter all-gather, with FP8 primary weights (except MXFP8)")."""
    from solveplan.formulation import comm
    from solveplan.formulation.precision import gathered_param_bytes

    assert gathered_param_bytes("fp8-tensorwise", True) == 1.0 and gathered_param_bytes("fp8", True) == 1.0
    assert gathered_param_bytes("mxfp8", True) == 2.0 and gathered_param_bytes("fp8-tensorwise") == 2.0
    m = load_model("qwen3-30b-a3b")
    kw = dict(tp=1, dp=64, ep=8, etp=1, zero=1)
    c = load_cluster("h100x64")
    base = _co(m, "h100x64", precision="fp8-tensorwise", **kw)
    fp8 = _co(m, "h100x64", precision="fp8-tensorwise", fp8_param_gather=True, **kw)
    from solveplan.formulation.moe import moe_layer_params_per_gpu

    ne, ex = (float(x) for x in moe_layer_params_per_gpu(m, 1, 8, 1))
    saved = (comm.collective_s("all_gather", ne * 2, c, 64, 1) - comm.collective_s("all_gather", ne * 1, c, 64, 1)
             + comm.collective_s("all_gather", ex * 2, c, 8, 8) - comm.collective_s("all_gather", ex * 1, c, 8, 8))
    assert float(base.layer_dp_step_s[0]) - float(fp8.layer_dp_step_s[0]) == pytest.approx(float(saved), rel=1e-9)


def test_fp8_param_gather_needs_an_fp8_recipe():
    m = load_model("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="fp8_param_gather"):
        JobSpec(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096,
                fp8_param_gather=True)


# ---------------------------------------------------------------- host time outside CUDA graphs

def test_host_calls_count_the_eager_calls_and_the_per_expert_launches():
    """formulation/host.py: forward before the sync (attention: 4 Transformer Engine calls + 5 PyTorch ops;
    router and preprocessing: 15 ops), after it (dispatch: 6 TE calls + 5 ops, + per local expert 2 GEMMs
    and under FP8 2 quantisations at GEMM_LAUNCH_S), backward the same calls' nodes + per expert 4 GEMMs
    (+ 2 quantisations); a TE call costs 99.66 / 37.08 PyTorch ops (TE issue #2053, GB200); a graphed
    module is one launch; a whole-iteration graph has no host time."""
    from solveplan.formulation.host import TE_CALL_OPS, host_calls_s
    from solveplan.formulation.kernels import GEMM_LAUNCH_S as L

    assert TE_CALL_OPS == pytest.approx(2.6877, abs=1e-4)
    op, r = 37.08e-6, 99.66 / 37.08
    pre_calls, post_calls = (4 * r + 5 + 15) * op, (6 * r + 5) * op
    pre, post, bwd = (float(x) for x in host_calls_s(op, 16, fp8=True))
    assert (pre, post, bwd) == pytest.approx(
        (pre_calls, post_calls + 16 * 4 * L, pre_calls + post_calls + 16 * 6 * L), rel=1e-12)
    assert 4 * r * op == pytest.approx(4 * 99.66e-6)  # a TE call is te.Linear's measured 99.66 us on Grace
    pre, post, bwd = (float(x) for x in host_calls_s(op, 4, fp8=False, graphed=("attn", "moe_router", "moe_preprocess")))
    assert (pre, post, bwd) == pytest.approx((2 * op, post_calls + 4 * 2 * L, 2 * op + post_calls + 4 * 4 * L), rel=1e-12)
    assert host_calls_s(op, 16, fp8=True, full_iteration=True) == (0.0, 0.0, 0.0)


def test_host_exposure_is_the_host_time_beyond_each_segments_gpu_time():
    from solveplan.formulation.host import host_exposed_s

    op = 20e-6
    f, b = host_exposed_s((1e-3, 3e-3, 2e-3), pre_gpu_s=2e-3, post_gpu_s=1e-3, bwd_gpu_s=5e-3, host_op_s=op)
    assert (float(f), float(b)) == pytest.approx((0 + 2e-3 + op, 0.0))  # the host-bound segment, and the sync
    assert host_exposed_s((1e-3, 3e-3, 2e-3), pre_gpu_s=0, post_gpu_s=0, bwd_gpu_s=0, host_op_s=op,
                          full_iteration=True) == (0.0, 0.0)


def test_a_host_bound_moe_layer_pays_its_host_time_and_graphs_remove_it():
    """Qwen3-30B-A3B on 8 H100 (16 local experts), one 256-token micro-batch, a 1 ms PyTorch op: every
    segment is host-bound, so the layer's forward + backward takes the host's time -- before the sync,
    after it (less the dispatch and combine all-to-alls, priced on the layer's EP key), the sync's first
    call, the backward (less its all-to-alls) -- exactly; a whole-iteration graph pays none of it."""
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.formulation.host import host_calls_s
    from solveplan.space.shapes import Shapes

    m = load_model("qwen3-30b-a3b")
    base = load_cluster("h100x8")
    slow = base.model_copy(update={"gpu": base.gpu.model_copy(update={"host_op_us": 1000.0})})
    shape = Shapes.single(tp=1, dp=8, ep=8, etp=1, zero=1)
    kw = dict(global_batch_size=8, seq_length=256, moe_token_dispatcher="flex")
    eager = stage_coefficients(m, slow, shape, **kw)
    graphed = stage_coefficients(m, slow, shape, cuda_graph_impl="full_iteration", **kw)
    pre, post, bwd = host_calls_s(1e-3, 16, fp8=False)
    a2a_both_passes = float(eager.layer_ep_s[0])
    assert float(eager.layer_compute_s[0]) == pytest.approx(pre + post + 1e-3 + bwd - a2a_both_passes, rel=1e-9)
    assert float(graphed.layer_compute_s[0]) < float(eager.layer_compute_s[0]) / 10
    assert float(graphed.layer_ep_s[0]) == pytest.approx(a2a_both_passes, rel=1e-12)


def test_cuda_graph_settings_follow_megatrons_rules():
    m = load_model("qwen3-30b-a3b")
    job = dict(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096)
    ok = JobSpec(**job, cuda_graph_impl="transformer_engine", cuda_graph_modules=("attn", "moe_router", "moe_preprocess"))
    assert ok.cuda_graph_modules == ("attn", "moe_router", "moe_preprocess")
    assert JobSpec(**job, cuda_graph_impl="full_iteration", moe_token_dispatcher="flex").cuda_graph_impl == "full_iteration"
    for bad, why in ((dict(cuda_graph_impl="full_iteration"), "flex dispatcher"),
                     (dict(cuda_graph_impl="transformer_engine"), "dynamic shapes"),
                     (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules=("moe_preprocess",)), "moe_router"),
                     (dict(cuda_graph_modules=("attn",)), "per-layer")):
        with pytest.raises(ValueError, match=why):
            JobSpec(**job, **bad)


def test_the_systems_host_op_times_are_the_measured_ones():
    """x86 DGX hosts 13.48 us per PyTorch op, Grace 37.08 us (Transformer Engine issue #2053)."""
    from solveplan.catalog import load_gpu

    assert load_gpu("h100-sxm").host_op_us == 13.48 and load_gpu("b200").host_op_us == 13.48
    assert load_gpu("gb200").host_op_us == 37.08 and load_gpu("gb300").host_op_us == 37.08
