"""GPT-OSS's attention sinks (a learnable softmax offset) and clamped quick GeGLU: the spec's rules, the
all-to-all exchange context parallelism takes with them, its price and the shapes it allows."""

from __future__ import annotations

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation import comm
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.formulation.memory import BF16_BYTES
from solveplan.space.enumeration import enumerate_shapes
from solveplan.space.experts import cp_a2a_violations
from solveplan.space.shapes import Shapes
from solveplan.specs import JobSpec, ModelSpec

BASE = dict(name="m", num_layers=4, hidden_size=512, num_attention_heads=8, ffn_hidden_size=1024, vocab_size=1000)


def test_the_offset_and_the_clamp_follow_megatrons_rules():
    ModelSpec(**BASE, activation="quick_geglu", glu_linear_offset=1.0, activation_clamp=7.0)
    with pytest.raises(ValueError, match="glu_linear_offset applies to activation quick_geglu"):
        ModelSpec(**BASE, activation="swiglu", glu_linear_offset=1.0)
    with pytest.raises(ValueError, match="activation_clamp applies to quick_geglu, or to swiglu in a mixture"):
        ModelSpec(**BASE, activation="swiglu", activation_clamp=7.0)  # a dense SwiGLU: Megatron refuses it
    assert ModelSpec(**BASE, activation="quick_geglu").gated_mlp  # gated: three matrices


def _shape(tp, cp):
    one = np.ones(1, dtype=np.int64)
    return Shapes(tp=one * tp, pp=one, dp=one * (32 // (tp * cp)), cp=one * cp, vp=one, micro_batch_size=one,
                  recompute=one * 0, sequence_parallel=np.full(1, tp > 1), zero=one, ep=one * 8, etp=one)


def test_context_parallelism_with_sinks_is_priced_as_its_all_to_alls():
    """Two all-to-alls of the rank's Q, K, V and output chunk per pass (forward and backward), nothing beside
    them; the same model without sinks keeps the ring exchange, overlapped with the attention core."""
    oss = load_model("gpt-oss-20b")
    cluster = load_cluster("h100x32")
    kw = dict(global_batch_size=64, seq_length=8192)
    sinks = stage_coefficients(oss, cluster, _shape(1, 2), **kw)
    ring = stage_coefficients(oss.model_copy(update=dict(softmax_type="vanilla")), cluster, _shape(1, 2), **kw)
    chunk = 8192 / 2 * (2 * oss.q_hidden_size + 2 * oss.kv_heads * oss.head_dim) * BF16_BYTES
    want = 2 * comm.all_to_all_s(chunk, cluster, 2, 1)
    assert float(sinks.layer_cp_s[0]) == pytest.approx(float(want), rel=1e-9)
    assert float(sinks.layer_cp_s[0]) != pytest.approx(float(ring.layer_cp_s[0]))
    assert float(stage_coefficients(oss, cluster, _shape(1, 1), **kw).layer_cp_s[0]) == 0.0


def test_all_to_all_context_parallelism_needs_whole_heads_on_every_rank():
    """Transformer Engine's a2a asserts num_heads % cp == 0 for Q, K and V on a TP rank: GPT-OSS 120B's 8 KV
    heads over tp 4 leave 2, so cp 4 is refused with the reason and never enumerated; cp 2 is legal."""
    oss = load_model("gpt-oss-120b")
    (field, why), = cp_a2a_violations(oss, tp=4, cp=4)
    assert field == "cp" and "16 query and 2 KV heads" in why and "divides 2" in why
    assert cp_a2a_violations(oss, tp=4, cp=2) == [] and cp_a2a_violations(oss, tp=1, cp=1) == []
    assert cp_a2a_violations(oss.model_copy(update=dict(softmax_type="vanilla")), tp=4, cp=4) == []
    job = JobSpec(model=oss, cluster=load_cluster("h100x64"), global_batch_size=64, seq_length=8192)
    shapes = enumerate_shapes(job).shapes
    heads = 64 // shapes.tp, 8 // shapes.tp
    assert len(shapes.cp) and ((shapes.cp == 1) | ((heads[0] % shapes.cp == 0) & (heads[1] % shapes.cp == 0))).all()
    assert ((shapes.cp == 2) & (shapes.tp == 4)).any()


def test_evaluate_refuses_a_cp_the_sinks_cannot_take(cli):
    out = cli("evaluate", "--model", "gpt-oss-120b", "--cluster", "h100x64", "--tp", "4", "--cp", "4", "--ep", "4")
    assert out.code == 2 and "--cp" in out.err and "attention sinks" in out.err
