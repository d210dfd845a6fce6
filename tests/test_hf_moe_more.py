"""OLMoE, Phi-3.5-MoE, ERNIE 4.5 MoE and Ling 1.x config.json files (tests/data/hf/README.md says where each came from)
map to the models their own classes build: transformers' OlmoeConfig / modeling_olmoe.py, PhimoeConfig /
modeling_phimoe.py and Ernie4_5_MoeConfig / modeling_ernie4_5_moe.py, and Ling's remote BailingMoeConfig /
modeling_bailing_moe.py (their published total and active counts: tests/test_hf_config.py `MOE_PUBLISHED` and
`MOE_PUBLISHED_LOOSE`)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from solveplan.catalog import load_model
from solveplan.errors import InputError
from solveplan.specs.hf import model_from_hf_config

OLMOE = DATA / "hf" / "OLMoE-1B-7B-0125-Instruct" / "config.json"
PHIMOE = DATA / "hf" / "Phi-3.5-MoE-instruct" / "config.json"
ERNIE = DATA / "hf" / "ERNIE-4.5-21B-A3B" / "config.json"
LING = DATA / "hf" / "Ling-lite-1.5" / "config.json"


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


def _refused(data: dict, said: str) -> None:
    with pytest.raises(InputError, match=said) as exc:
        model_from_hf_config(data, "x")
    assert "\n" not in str(exc.value)


def test_ernie_as_modeling_ernie4_5_moe_builds_it():
    """Layer 0 an MLP of intermediate_size, layers 1-27 (moe_layer_start_index 1 to the last, interval 1) an
    Ernie4_5_MoeSparseMoeBlock: 64 experts of 1536, top-6, 2 x 1536 of shared expert; softmax scores renormalised over
    the top-k (Megatron's softmax top-k) with the selection bias said; RoPE on interleaved pairs, theta 5e5; tied, no
    biases, no dropout, no MTP module (said), the Paddle code's moe_capacity said as not read."""
    m = load_model(str(ERNIE))
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.ffn_hidden_size) == (64, 6, 1536, 12288)
    assert m.moe_layer_pattern == (0,) + (1,) * 27 and m.moe_shared_expert_intermediate_size == 3072
    assert not (m.moe_shared_expert_gate or m.moe_router_pre_softmax or m.moe_router_enable_expert_bias)
    assert m.moe_router_score_function == "softmax" and m.moe_router_topk_scaling_factor is None
    assert m.rotary_interleaved and m.rotary_base == 500000.0 and m.tied_embeddings and m.head_dim == 128
    assert not (m.add_bias_linear or m.add_qkv_bias or m.qk_norm) and (m.dropout, m.attention_dropout) == (0.0, 0.0)
    assert m.mtp_num_layers == 0 and m.norm_epsilon == 1e-5 and m.hf_model_type == "ernie4_5_moe"
    for said in ("e_score_correction_bias", "moe_capacity", "the 1 MTP layer(s) of num_nextn_predict_layers"):
        assert said in m.notes, said
    data = json.loads(ERNIE.read_text())
    alias = {k: v for k, v in data.items() if k not in ("moe_num_experts", "moe_k", "model_type")}
    assert model_from_hf_config({**alias, "num_experts": 64, "num_experts_per_tok": 6}, "e").num_params == m.num_params
    every = model_from_hf_config({**data, "use_bias": True, "moe_layer_interval": 2, "moe_layer_end_index": 20,
                                  "attention_dropout": 0.1}, "e")  # Ernie4_5_MoeAttention's dropout is 0.0
    assert every.add_bias_linear and every.add_qkv_bias and every.attention_dropout == 0.0
    assert every.moe_layer_pattern == tuple(int(i % 2 == 1 and i <= 20) for i in range(28))
    _refused({**data, "moe_num_experts": [64, 64]}, "'moe_num_experts' must be a positive integer")  # VL's two pools
    _refused({**data, "moe_k": 65}, "the top-k \\(65\\) exceeds the 64 experts")
    _refused({**data, "moe_layer_start_index": 28}, "no layer is mixture-of-experts")


def test_ling_lite_as_modeling_bailing_moe_builds_it():
    """Every layer (first_k_dense_replace 0) a BailingMoeSparseMoeBlock: 64 experts of 1408, top-6, 2 x 1408 of shared
    expert; softmax renormalised over the top-k (norm_topk_prob); fused QKV without bias (use_qkv_bias false), no
    output-projection bias (use_bias false), untied, RMSNorm 1e-6, theta 6e5, the file's attention_dropout 0.0. The
    config class's defaults where the file is silent (attention_dropout 0.1, use_bias true); Ling 2.0 refused."""
    m = load_model(str(LING))
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.moe_layer_pattern) == (64, 6, 1408, None)
    assert m.moe_shared_expert_intermediate_size == 2816 and not m.moe_shared_expert_gate
    assert m.moe_router_score_function == "softmax" and not (m.moe_router_pre_softmax or m.moe_router_enable_expert_bias)
    assert not (m.add_bias_linear or m.add_qkv_bias or m.qk_norm or m.tied_embeddings or m.rotary_interleaved)
    assert (m.rotary_base, m.norm_epsilon, m.head_dim, m.attention_dropout, m.dropout) == (600000.0, 1e-6, 128, 0.0, 0.0)
    assert m.hf_model_type == "bailing_moe" and m.sliding_window is None and "not modelled" not in m.notes
    data = json.loads(LING.read_text())
    silent = model_from_hf_config({k: v for k, v in data.items() if k not in ("attention_dropout", "use_bias")}, "l")
    assert silent.attention_dropout == 0.1 and "the attention output projection's bias (use_bias" in silent.notes
    other = model_from_hf_config({**data, "norm_topk_prob": False, "first_k_dense_replace": 1, "use_qkv_bias": True,
                                  "use_sliding_window": True, "sliding_window": 4096}, "l")
    assert other.moe_router_pre_softmax and other.moe_layer_pattern == (0,) + (1,) * 27 and other.ffn_hidden_size == 1408
    assert other.add_qkv_bias and not other.add_bias_linear and other.sliding_window is None
    assert "not read: use_sliding_window" in other.notes
    by_class = {k: v for k, v in data.items() if k != "model_type"}
    assert model_from_hf_config(by_class, "l").num_params == m.num_params
    _refused({**data, "architectures": ["BailingMoeV2ForCausalLM"]}, "BailingMoeV2ForCausalLM: a Ling 2.0 model")
    _refused({**data, "use_qk_norm": True}, "use_qk_norm: a Ling 2.0 model")
    _refused({**data, "num_experts": None}, "'num_experts' is null")


@pytest.mark.parametrize("path", [OLMOE, PHIMOE, ERNIE, LING], ids=["olmoe", "phimoe", "ernie", "ling"])
def test_show_states_total_and_active_parameters(cli, path):
    code, out, err = cli("show", str(path))
    assert code == 0 and "parameters" in out and "active per token" in out


@pytest.mark.parametrize("path, flags", [
    (ERNIE, ("--num-experts 64", "--moe-router-topk 6", "--moe-shared-expert-intermediate-size 3072",
             "--moe-layer-freq '[0]*1+[1]*27'", "--rotary-interleaved", "--rotary-base 500000")),
    (LING, ("--num-experts 64", "--moe-router-topk 6", "--moe-shared-expert-intermediate-size 2816",
            "--untie-embeddings-and-output-weights", "--rotary-base 600000")),
], ids=["ernie", "ling"])
def test_optimize_plans_and_launches_them(cli, path, flags):
    """`optimize` plans each file on 64 H100s and its Megatron-LM launch builds the model the file describes."""
    code, out, err = cli("optimize", "--model", str(path), "--cluster", "h100x64")
    assert code == 0, err
    for flag in flags:
        assert flag in out, flag
    assert "--moe-router-pre-softmax" not in out and "--moe-router-enable-expert-bias" not in out
