"""OLMoE and Phi-3.5-MoE config.json files (tests/data/hf/README.md says where each came from) map to the models
transformers' own classes build: OlmoeConfig / modeling_olmoe.py and PhimoeConfig / modeling_phimoe.py (their
published total and active counts: tests/test_hf_config.py `MOE_PUBLISHED`)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from solveplan.catalog import load_model
from solveplan.errors import InputError
from solveplan.specs.hf import model_from_hf_config

OLMOE = DATA / "hf" / "OLMoE-1B-7B-0125-Instruct" / "config.json"
PHIMOE = DATA / "hf" / "Phi-3.5-MoE-instruct" / "config.json"


def test_olmoe_as_modeling_olmoe_builds_it():
    """Every layer an OlmoeSparseMoeBlock (64 experts of intermediate_size, top-8, no shared expert), softmax over
    all experts and, with norm_topk_prob false, no renormalisation (Megatron's pre-softmax, as Megatron-Bridge's
    olmoe bridge sets it); RMSNorm over the whole Q and K projections, said as a caveat; no biases, untied."""
    m = load_model(str(OLMOE))
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.moe_layer_pattern) == (64, 8, 1024, None)
    assert m.moe_shared_expert_intermediate_size is None and m.moe_router_score_function == "softmax"
    assert m.moe_router_pre_softmax and m.qk_norm and m.normalization == "RMSNorm" and m.norm_epsilon == 1e-5
    assert not (m.add_bias_linear or m.add_qkv_bias or m.tied_embeddings) and m.head_dim == 128
    assert m.rotary_base == 10000.0 and m.seq_length == 4096 and m.hf_model_type == "olmoe"
    assert "QK norm over the whole Q and K projections" in m.notes
    data = json.loads(OLMOE.read_text())
    assert not model_from_hf_config({**data, "norm_topk_prob": True}, "o").moe_router_pre_softmax
    alias = {k: v for k, v in data.items() if k not in ("num_experts", "model_type")} | {"num_local_experts": 64}
    assert model_from_hf_config(alias, "o").num_params == m.num_params  # architectures + OlmoeConfig's alias


def test_phimoe_as_modeling_phimoe_builds_it():
    """Every layer a PhimoeSparseMoeBlock (16 Mixtral experts, top-2); LayerNorm with bias; attention_bias on
    q/k/v/o (the o_proj bias said); LongRoPE, sparsemixer and lm_head_bias said as not modelled; the pre-training
    length from original_max_position_embeddings; the file's sliding_window on every layer (PhimoeModel's mask)."""
    m = load_model(str(PHIMOE))
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.moe_layer_pattern) == (16, 2, 6400, None)
    assert m.normalization == "LayerNorm" and m.add_qkv_bias and not m.add_bias_linear and not m.qk_norm
    assert (m.num_kv_heads, m.head_dim, m.rotary_base, m.seq_length) == (8, 128, 10000.0, 4096)
    assert (m.sliding_window, m.windowed_layers) == (131072, 32) and not m.moe_router_pre_softmax
    for said in ("output projection too", "SparseMixer routing", "RoPE scaling 'longrope' is not modelled",
                 "input_jitter_noise", "lm_head_bias"):
        assert said in m.notes, said
    data = json.loads(PHIMOE.read_text())
    plain = {k: v for k, v in data.items() if k not in ("rope_theta", "lm_head_bias", "input_jitter_noise")}
    bare = model_from_hf_config(plain, "p")
    assert bare.rotary_base == 1e6 and "lm_head_bias" not in bare.notes and "input_jitter" not in bare.notes
    by_class = {k: v for k, v in data.items() if k != "model_type"} | {"architectures": ["PhimoeForCausalLM"]}
    assert model_from_hf_config(by_class, "p").num_params == m.num_params
    with pytest.raises(InputError, match="sparsemixer routes exactly 2 experts per token") as exc:
        model_from_hf_config({**data, "num_experts_per_tok": 4}, "p")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("path", [OLMOE, PHIMOE], ids=["olmoe", "phimoe"])
def test_show_states_total_and_active_parameters(cli, path):
    code, out, err = cli("show", str(path))
    assert code == 0 and "parameters" in out and "active per token" in out
