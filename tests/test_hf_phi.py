"""microsoft/phi-2's config.json (tests/data/hf/README.md says where it came from) maps to the model transformers'
PhiConfig / modeling_phi.py build: attention and MLP in parallel on one input LayerNorm (said, as what Megatron-LM does
not model), partial rotary, biases on every linear, LayerNorm with bias, untied embeddings with a biased lm_head
(said), gelu_new in a plain MLP; the transformers framework prices one norm per layer (formulation/eager_layers.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from conftest import DATA
from solveplan.catalog import load_model
from solveplan.formulation.eager_layers import CODE, OPS, layer_tally
from solveplan.specs.hf import model_from_hf_config

PHI2 = DATA / "hf" / "phi-2" / "config.json"


def test_phi2_as_modeling_phi_builds_it():
    m = load_model(str(PHI2))
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_dim) == (32, 2560, 32, 32, 80)
    assert (m.ffn_hidden_size, m.vocab_size, m.seq_length, m.hf_model_type) == (10240, 51200, 2048, "phi")
    assert m.position_embedding == "rope" and m.rotary_percent == 0.4 and m.rotary_base == 10000.0
    assert m.normalization == "LayerNorm" and m.norm_epsilon == 1e-5 and not m.norm_zero_centered_gamma
    assert m.add_bias_linear and m.add_qkv_bias and not m.tied_embeddings and not m.gated_mlp and not m.qk_norm
    assert (m.activation, m.hidden_act, m.dropout) == ("gelu", "gelu_new", 0.1)  # resid_pdrop 0.1
    for said in ("ONE shared input LayerNorm", "gpt_neox's parallel residual", "lm_head, bias=True"):
        assert said in m.notes, said


def test_phi_defaults_and_switches():
    """PhiConfig's defaults where the file is silent: partial_rotary_factor 0.5 (phi-1 / phi-1.5's value), untied,
    gelu_new; qk_layernorm turns on the per-head q/k norm; no model_type: read through PhiForCausalLM."""
    data = json.loads(PHI2.read_text())
    bare = model_from_hf_config({k: v for k, v in data.items() if k not in ("partial_rotary_factor", "hidden_act",
                                                                           "tie_word_embeddings")}, "p")
    assert bare.rotary_percent == 0.5 and bare.hidden_act == "gelu_new" and not bare.tied_embeddings
    qk = model_from_hf_config({**data, "qk_layernorm": True}, "p")
    assert qk.qk_norm and "qk_layernorm" in qk.notes
    by_class = model_from_hf_config({k: v for k, v in data.items() if k != "model_type"}, "p")
    assert by_class.hf_model_type == "phi" and by_class.num_params == load_model(str(PHI2)).num_params


def test_transformers_prices_one_shared_norm(monkeypatch):
    """The eager layer keeps one nn.LayerNorm's input and statistics (4h + 8 bytes per token), not two, and sums the
    two bf16 branch outputs before the fp32 residual (r4 w2, not r6 w4): against the same code with a norm per
    branch, one norm (saved 4h + 8, traffic 8h, its ops) and 4h of traffic less."""
    m = load_model(str(PHI2))
    phi = CODE["phi"]
    assert phi.shared_norm and phi.norm == "layernorm" and not phi.fused_qkv and phi.rope_concat and phi.resid_dropout
    shared = layer_tally(m, False, 2048.0)
    monkeypatch.setitem(CODE, "phi", replace(phi, shared_norm=False))
    two = layer_tally(m, False, 2048.0)
    h = m.hidden_size
    assert two.saved - shared.saved == 4 * h + 8 and two.traffic - shared.traffic == 8 * h + 4 * h
    assert (two.ops_fwd - shared.ops_fwd, two.ops_bwd - shared.ops_bwd) == OPS["layernorm"]


def test_show_reads_phi2(cli):
    code, out, err = cli("show", str(PHI2))
    assert code == 0 and "2.78B" in out and "0.4 of each head" in out and "PhiForCausalLM" in out


def test_attention_dropout_is_its_own_where_the_config_says_so():
    """phi-2 and OPT train with residual dropout 0.1 and none on the attention probabilities: the Megatron launch
    says so (--attention-dropout 0), where one dropout for both once printed 0.1; GPT-2 states 0.1 for both."""
    from solveplan.catalog import load_cluster
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    from solveplan.specs import JobSpec

    for fixture, hidden, attention in (("phi-2", 0.1, 0.0), ("opt-1.3b", 0.1, 0.0), ("gpt2", 0.1, 0.1)):
        m = load_model(str(DATA / "hf" / fixture / "config.json"))
        assert (m.dropout, m.attention_dropout) == (hidden, attention), fixture
        job = JobSpec(model=m, cluster=load_cluster("h100x8"), global_batch_size=8, seq_length=1024)
        flags = megatron_args(job, plan_config(job, dict(tp=1, pp=1))).flags()
        assert (float(flags["--hidden-dropout"]), float(flags["--attention-dropout"])) == (hidden, attention)
    both = model_from_hf_config({**json.loads(PHI2.read_text()), "attention_dropout": 0.1}, "p")
    assert both.attention_dropout == both.dropout == 0.1  # one value where both say it
