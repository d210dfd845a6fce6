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
