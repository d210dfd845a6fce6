"""Reported MFU and TFLOP/s: one convention (Megatron-LM's, causal attention counted as
executed), and no plan claims more hardware TFLOP/s than the formulation's own efficiencies
allow (issue 24: a 131k-token plan claimed 877 of H100's 989 with a GEMM efficiency of 0.64)."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.flops import FLOP_CONVENTION, model_flop_per_step, reported_flop_per_step
from solveplan.optimize import optimize
from solveplan.plan import textbook_plan
from solveplan.specs import JobSpec


def megatron_num_floating_point_operations(m, batch, seq):
    """Megatron-LM megatron/training/training.py num_floating_point_operations (dense branch,
    causal self-attention: `seq_length / hidden_size / 2`), written out as it is there."""
    h, l = m.hidden_size, m.num_layers
    q_ratio = m.q_hidden_size / h
    groups_ratio = m.kv_hidden_size / m.q_hidden_size  # num_query_groups / num_attention_heads
    gated = 3 / 2 if m.mlp_matrices == 3 else 1
    return (12 * batch * seq * l * h * h * ((1 + groups_ratio + seq / h / 2) * q_ratio + m.ffn_hidden_size / h * gated)
            + 6 * batch * seq * h * m.vocab_size)


@pytest.mark.parametrize("name", ["llama3.1-8b", "llama3.1-70b", "gpt3-13b", "qwen2-7b", "mistral-7b"])
@pytest.mark.parametrize("seq", [2048, 131072])
def test_reported_model_flops_are_megatron_lm_causal(name, seq):
    m = load_model(name)
    mf, hf = reported_flop_per_step(m, 16, seq, 0)
    assert mf == hf
    megatron = megatron_num_floating_point_operations(m, 16, seq)
    if m.sliding_window is not None and m.sliding_window < seq:  # Mistral's 4096-token window at 131k tokens
        banded = m.model_copy(update=dict(sliding_window=None, sliding_window_layers=None))
        assert mf < megatron == pytest.approx(reported_flop_per_step(banded, 16, seq, 0)[0], rel=1e-12)
    else:
        assert mf == pytest.approx(megatron, rel=1e-12)
    assert mf < model_flop_per_step(m, 16, seq)  # the published figures' full square counts more
    _, hf_full = reported_flop_per_step(m, 16, seq, 2)
    assert hf_full > mf  # full recompute adds a forward


def _bound_tflops(job: JobSpec, precision: str) -> float:
    gpu = job.cluster.gpu
    if precision == "fp8":
        return gpu.peak_fp8_tflops * gpu.fp8_matmul_efficiency
    return gpu.peak_bf16_tflops * max(gpu.matmul_efficiency, gpu.fused_attention_efficiency)


LONG = [  # (model, cluster, global batch, sequence length, precision): 8k-131k tokens
    ("llama3.1-8b", "h100x64", 16, 131072, "bf16"),
    ("llama3.1-8b", "h100x64", 64, 32768, "bf16"),
    ("llama3.1-8b", "a100x64", 32, 65536, "bf16"),
    ("llama3.1-70b", "h100x512", 32, 131072, "bf16"),
    ("llama3.1-70b", "h200x256", 128, 8192, "bf16"),
    ("mistral-7b", "a100x32", 64, 16384, "bf16"),
    ("qwen2-7b", "h100x32", 32, 65536, "bf16"),
    ("gpt3-13b", "a100x128", 64, 8192, "bf16"),
    ("llama2-13b", "h100x64", 16, 131072, "fp8"),
]


@pytest.mark.parametrize("model,cluster,batch,seq,precision", LONG)
def test_long_context_hardware_tflops_within_gemm_efficiency(model, cluster, batch, seq, precision):
    job = JobSpec(model=load_model(model), cluster=load_cluster(cluster), global_batch_size=batch,
                  seq_length=seq, precision=precision)
    res = optimize(job, time_limit_s=60, top_k=3)
    assert res.plan is not None, res.status
    plans = [res.plan, *res.alternatives]
    tb = textbook_plan(job)
    if tb is not None:
        plans.append(tb)
    bound = _bound_tflops(job, precision)
    for p in plans:
        assert p.flop_convention == FLOP_CONVENTION
        assert p.model_tflops_per_gpu <= p.hardware_tflops_per_gpu + 1e-9
        assert p.hardware_tflops_per_gpu <= bound, (p.parallel, p.hardware_tflops_per_gpu, bound)
        assert p.mfu <= p.model_tflops_per_gpu / (job.cluster.gpu.peak_fp8_tflops if precision == "fp8"
                                                    else job.cluster.gpu.peak_bf16_tflops) + 1e-12
