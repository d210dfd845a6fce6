"""NVFP4 pre-training (Transformer Engine's NVFP4BlockScaling) as a priced precision: the byte counts
of formulation/precision.py, the FP4 GEMM rate, the layers kept in BF16, the refusal on GPUs without
FP4 tensor cores, the published NVFP4 rows predicted, and the Megatron-LM / torchtitan launch."""

from __future__ import annotations

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_gpu, load_model
from solveplan.formulation import precision as P
from solveplan.formulation.layer_terms import bf16_layer_extra_s
from solveplan.formulation.job import job_assumptions, job_coefficients
from solveplan.formulation.kernels import gemm_s
from solveplan.formulation.pipeline import step_time_batch
from solveplan.formulation.splits import default_splits
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.megatron import MegatronArgs, megatron_args
from solveplan.render.torchtitan import torchtitan_config
from solveplan.space.enumeration import enumerate_shapes
from solveplan.specs import JobSpec


def _job(cluster="gb200x72", model="llama3.1-8b", **kw):
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=kw.pop("global_batch_size", 576),
                   seq_length=m.seq_length, **kw)


def test_nvfp4_byte_counts():
    """0.5 byte per E2M1 value, an E4M3 scale per 16 (1D) or per 16x16 (weights): the counts the
    module docstring derives from TE's recipe."""
    assert P.quantize_bytes_per_element("nvfp4") == pytest.approx(2 + 2 * 2 + 2 * (0.5 + 1 / 16))  # 7.125
    assert P.quantize_bytes_per_element("nvfp4") > P.quantize_bytes_per_element("mxfp8")  # RHT + amax pass
    assert P.saved_linear_input_bytes("nvfp4") == pytest.approx(0.5625)
    assert P.weight_copy_bytes_per_param("nvfp4") == pytest.approx(2 * (0.5 + 1 / 256))
    # NVFP4 primary weights (--fp4-param-gather): no BF16 copy, gathered as NVFP4
    assert P.weight_bytes_per_param("nvfp4", True) == pytest.approx(2 * (0.5 + 1 / 256))
    assert P.weight_bytes_per_param("nvfp4", False) == pytest.approx(2 + 2 * (0.5 + 1 / 256))
    assert P.gathered_param_bytes("nvfp4", True) == pytest.approx(0.5 + 1 / 256)
    assert P.gathered_param_bytes("nvfp4", False) == 2.0
    assert P.is_quantized("nvfp4") and not P.is_fp8("nvfp4") and P.is_fp4("nvfp4")


def test_fp4_gemm_rate_is_the_fp4_peak_at_its_efficiency():
    gpu = load_gpu("gb200")
    mm = P.matmul_rate(gpu, "nvfp4", gpu.hbm_bytes_per_s)
    assert mm["flop_per_s"] == gpu.peak_fp4_tflops * 1e12 and mm["in_bytes"] == 0.5
    # the prior rule: without a fitted value, the fraction of the FP4 peak MXFP8 reaches of the FP8 peak
    expect = gpu.nvfp4_matmul_efficiency or gpu.fp8_efficiency("mxfp8")
    assert mm["efficiency"] == pytest.approx(expect)
    unfitted = gpu.model_copy(update={"nvfp4_matmul_efficiency": None})
    assert unfitted.fp4_efficiency() == pytest.approx(unfitted.fp8_efficiency("mxfp8"))
    fitted = gpu.model_copy(update={"nvfp4_matmul_efficiency": 0.33})
    assert P.matmul_rate(fitted, "nvfp4", gpu.hbm_bytes_per_s)["efficiency"] == 0.33
    # a large GEMM: FP4 over MXFP8 by the ratio of peaks x efficiencies (compute-bound)
    big = dict(M=16384, N=16384, K=16384)
    t4 = gemm_s(**big, **P.matmul_rate(unfitted, "nvfp4", gpu.hbm_bytes_per_s))
    t8 = gemm_s(**big, **P.matmul_rate(unfitted, "mxfp8", gpu.hbm_bytes_per_s))
    assert t8 / t4 == pytest.approx(gpu.peak_fp4_tflops / gpu.peak_fp8_tflops, rel=0.02)
    assert P.peak_flop_per_s(gpu, "nvfp4") == gpu.peak_fp4_tflops * 1e12


@pytest.mark.parametrize("gpu,fix", [("h100x8", "use fp8"), ("a100x8", "use bf16")])
def test_nvfp4_refused_without_fp4_tensor_cores(gpu, fix):
    with pytest.raises(ValueError) as exc:
        _job(gpu, global_batch_size=64, precision="nvfp4")
    msg = str(exc.value)
    assert "peak_fp4_tflops" in msg and "nvfp4" in msg and fix in msg


def test_bf16_layers_are_first_and_last_stage_extras():
    base = _job(precision="nvfp4")
    shapes = enumerate_shapes(base).shapes
    shapes = shapes.take(np.flatnonzero(shapes.pp > 1)[:20])
    c0 = job_coefficients(base, shapes)
    c1 = job_coefficients(base.model_copy(update={"bf16_layers_at_start": 2, "bf16_layers_at_end": 1}), shapes)
    extra = c1.first_s - c0.first_s
    assert np.all(extra > 0)  # a BF16 layer's GEMMs run at a quarter of the FP4 rate
    np.testing.assert_allclose(c1.last_s - c0.last_s, extra / 2, rtol=1e-9)
    layers = default_splits(base.model, shapes)
    s0, _, _ = step_time_batch(c0, layers)
    s1, _, _ = step_time_batch(c1, layers)
    assert np.all(s1 > s0)
    # the same layers under bf16 cost nothing extra; delayed-scaling FP8 cannot keep them (Megatron)
    assert not np.any(bf16_layer_extra_s(base.model, [], 1.0, shapes.tp, None, None, "bf16", 1.0, shapes.recompute))
    with pytest.raises(ValueError, match="Delayed scaling"):
        _job(precision="fp8", bf16_layers_at_start=1)
    with pytest.raises(ValueError, match="bf16_layers"):
        _job(precision="bf16", bf16_layers_at_end=1)


def test_nvfp4_is_faster_than_mxfp8_and_says_its_prior():
    fp4, mx = _job(precision="nvfp4"), _job(precision="mxfp8")
    shapes = enumerate_shapes(fp4).shapes
    shapes = shapes.take(np.flatnonzero(shapes.pp == 1)[:10])
    layers = default_splits(fp4.model, shapes)
    s4, _, _ = step_time_batch(job_coefficients(fp4, shapes), layers)
    s8, _, _ = step_time_batch(job_coefficients(mx, shapes), layers)
    assert np.all(s4 < s8)
    unfitted = load_gpu("gb200").nvfp4_matmul_efficiency is None
    assert any("nvfp4 GEMM efficiency" in a for a in job_assumptions(fp4)) == unfitted


def _plan(job, tp=2, pp=4):
    dp = job.cluster.num_gpus // (tp * pp)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=1, vp=1, micro_batch_size=1,
                         num_microbatches=job.global_batch_size // dp, recompute="selective",
                         sequence_parallel=True, zero=1)
    return make_plan(job, par, [job.model.num_layers // pp] * pp)


def test_megatron_flags_of_an_nvfp4_plan():
    job = _job(precision="nvfp4", fp8_param_gather=True, bf16_layers_at_start=1, bf16_layers_at_end=2)
    ma = megatron_args(job, _plan(job))
    f = MegatronArgs(list(ma.args)).flags()
    assert f["--fp4-format"] == "e2m1" and f["--fp4-recipe"] == "nvfp4" and "--fp4-param-gather" in f
    assert "--fp8-format" not in f and "--bf16" in f  # Megatron refuses --fp4-format with --fp8-format
    assert "--first-last-layers-bf16" in f
    assert (f["--num-layers-at-start-in-bf16"], f["--num-layers-at-end-in-bf16"]) == ("1", "2")
    plain = _job(precision="nvfp4")
    f = MegatronArgs(list(megatron_args(plain, _plan(plain)).args)).flags()
    assert "--fp4-param-gather" not in f and "--first-last-layers-bf16" not in f


def test_torchtitan_says_nvfp4_is_not_configured():
    job = _job(precision="nvfp4")
    sections, notes = torchtitan_config(job, _plan(job))
    assert any("nvfp4" in n and "Megatron-LM" in n for n in notes)
    assert "quantize.linear.float8" not in sections


def test_admission_peak_bound_counts_the_fp4_peak_under_nvfp4():
    """Admission's bound (no plan computes faster than the peak) must hold for FP4 GEMMs too."""
    from solveplan.admission.sizing import peak_flop_per_s

    gpu = load_gpu("gb200")
    assert peak_flop_per_s(gpu, "nvfp4") == gpu.peak_fp4_tflops * 1e12
    assert peak_flop_per_s(gpu, "mxfp8") == peak_flop_per_s(gpu) == gpu.peak_fp8_tflops * 1e12


@pytest.mark.parametrize("precision", ["fp8", "mxfp8", "nvfp4"])
def test_embedding_and_head_keep_no_quantised_weight_copies(precision):
    """The word embedding and the LM head are not Transformer Engine linears (gpt_model.py:272-276): under
    a quantised recipe their state is BF16's, while a decoder layer's weights carry the recipe's copies."""
    quant, bf16 = _job(precision=precision), _job(precision="bf16")
    shapes = enumerate_shapes(bf16).shapes
    shapes = shapes.take(np.flatnonzero(shapes.pp > 1)[:20])
    cq, cb = job_coefficients(quant, shapes), job_coefficients(bf16, shapes)
    np.testing.assert_allclose(cq.first_static_bytes, cb.first_static_bytes, rtol=1e-12)
    np.testing.assert_allclose(cq.last_static_bytes, cb.last_static_bytes, rtol=1e-12)
    assert np.all(cq.first_static_bytes > 0)
    copies = P.weight_copy_bytes_per_param(precision)
    assert copies > 0 and np.all(cq.layer_static_bytes != cb.layer_static_bytes)
