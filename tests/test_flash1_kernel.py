"""The FlashAttention-1 generation as a stated attention kernel (`attention_kernel: flash1`): its own
efficiency, its Triton port's padded head dimension, the published rows that ran it (llm-foundry's
attn_impl: triton), and the few-shot knob that moves it."""

import numpy as np
import pytest

from solveplan.calibration.fewshot import KNOB_BY_NAME, RowFacts, calibrated_fields
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import FIT_PARAMS
from solveplan.catalog import load_cluster, load_gpu
from solveplan.formulation.kernels import triton_block_headdim
from solveplan.formulation.layer_terms import attention_core_s

ROWS = [r for r in published_rows() if not r.skipped]


def _core(gpu, kernel, head_dim=128, seq=8192):
    fwd, bwd = attention_core_s(gpu, batch=1.0, heads=16.0, s_q=float(seq), s_k=float(seq), head_dim=head_dim,
                                flash=True, kernel=kernel, hbm_bytes_per_s=gpu.hbm_bytes_per_s)
    return float(fwd + bwd)


def test_triton_port_computes_the_next_power_of_two_head_dimension():
    assert triton_block_headdim([8, 16, 64, 80, 96, 128, 129]).tolist() == [16, 16, 64, 128, 128, 128, 256]


def test_flash1_is_priced_at_its_own_efficiency_and_a_padded_head():
    gpu = load_gpu("a100-80gb").model_copy(update={"flash2_attention_efficiency": 0.6,
                                                   "flash1_attention_efficiency": 0.3})
    # half the efficiency of FlashAttention-2: about twice its matmul time (the exponentials are the same)
    assert 1.8 < _core(gpu, "flash1") / _core(gpu, "flash2") < 2.0
    # a head of 80 costs as one of 128 in the Triton port, not in FlashAttention-2
    assert _core(gpu, "flash1", 80) == pytest.approx(_core(gpu, "flash1", 128))
    assert _core(gpu, "flash2", 80) < 0.7 * _core(gpu, "flash2", 128)
    # unset, it falls back to FlashAttention-2's efficiency (then the fused kernel's)
    unset = gpu.model_copy(update={"flash1_attention_efficiency": None})
    assert _core(unset, "flash1") == pytest.approx(_core(unset, "flash2"))


def test_llm_foundry_rows_ran_the_triton_kernel_and_no_other_source_did():
    kernels = {r.source: set() for r in ROWS}
    for r in ROWS:
        if r.job_spec.flash_attention:
            kernels[r.source].add(r.job_spec.attention_kernel)
    assert kernels["mosaic_llmfoundry"] == {"flash1"}
    assert all("flash1" not in k for s, k in kernels.items() if s != "mosaic_llmfoundry")
    row = next(r for r in ROWS if r.source == "mosaic_llmfoundry")
    assert any("attn_impl triton" in a for a in row.assumed)


def test_its_fit_parameters_have_priors_from_the_papers():
    keys = {p.key: p for p in FIT_PARAMS}
    a100, h100 = keys["a100.flash1_attention_efficiency"], keys["h100.flash1_attention_efficiency"]
    assert 0.25 <= a100.prior <= 0.40 and "Dao 2023" in a100.why  # FlashAttention-1: 25-40% of the A100's peak
    assert h100.prior < keys["h100.flash2_attention_efficiency"].prior  # FlashAttention-2 is ~2x faster
    assert keys["h100.flash2_attention_efficiency"].prior == pytest.approx(0.27)  # the H200's measured kernels


def test_a_flash1_stack_has_its_own_few_shot_knob():
    job = next(r for r in ROWS if r.source == "mosaic_llmfoundry").job_spec
    facts = [RowFacts.of(job, 3)]
    used = {n for n, k in KNOB_BY_NAME.items() if k.used(facts)}
    assert "flash1_attention_efficiency" in used and "flash2_attention_efficiency" not in used
    gpu, _ = calibrated_fields(load_cluster("a100x8"), {"flash1_attention_efficiency": 1.5})
    assert gpu["flash1_attention_efficiency"] == pytest.approx(1.5 * load_gpu("a100-80gb").flash1_attention_rate)
    assert np.isclose(gpu["flash2_attention_efficiency"], load_gpu("a100-80gb").flash2_attention_efficiency)
