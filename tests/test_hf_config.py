"""Hugging Face config.json -> ModelSpec: real config files (tests/data/hf/README.md says where
each came from) map to their published parameter counts and architectures, the older fixtures
to the catalog entries of the same models, and MoE / multimodal / unknown kinds are refused."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from solveplan.catalog import catalog_models, load_model, read_mapping
from solveplan.errors import InputError
from solveplan.specs.hf import SUPPORTED, TRAINING_SEQ_CAP, is_hf_config, model_from_hf_config

SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
         "gated_mlp", "tied_embeddings")
ARCH = ("position_embedding", "rotary_base", "rotary_percent", "rope_scaling_factor", "normalization",
        "norm_zero_centered_gamma", "add_bias_linear", "add_qkv_bias", "activation", "qk_norm")
FIXTURES = sorted(p.parent.name for p in (DATA / "hf").glob("*/config.json"))
CATALOG_TWINS = ("llama2-7b", "llama3.1-8b", "mistral-7b", "qwen2-7b", "gpt2", "opt-1.3b", "bloom-176b",
                 "gpt-neox-20b", "pythia-12b")
MOE = ("Qwen3-30B-A3B", "Qwen1.5-MoE-A2.7B", "deepseek-moe-16b")

# "Model size" on each model's Hugging Face page (billions, 3 significant digits), and the head
# dimension each file gives apart from hidden / heads
PUBLISHED = {
    "Qwen2.5-32B": (32.8, 128), "Qwen2.5-14B": (14.8, 128), "Qwen3-4B": (4.02, 128), "Qwen3-32B": (32.8, 128),
    "Llama-3.2-3B": (3.21, 128), "Mistral-Nemo-Base-2407": (12.2, 128), "gemma-2-9b-it": (9.24, 256),
    "gemma-2-27b": (27.2, 128), "gemma-3-1b-it": (1.00, 256), "Meta-Llama-3-8B-Instruct": (8.03, 128),
    "Phi-3.5-mini-instruct": (3.82, 96), "Phi-4-mini-instruct": (3.84, 128), "OLMo-2-1124-7B": (7.30, 128),
    "Minitron-4B-Base": (4.19, 128),
}


def _load(name):
    return load_model(str(DATA / "hf" / name / "config.json"))


def test_fixture_coverage():
    assert set(CATALOG_TWINS) | set(PUBLISHED) | set(MOE) == set(FIXTURES)
    families = {json.loads((DATA / "hf" / n / "config.json").read_text()).get("model_type") for n in FIXTURES}
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "nemotron", "gpt_neox",
            "gpt2", "opt", "bloom"} <= families


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_real_configs_match_published_sizes(name):
    size_b, head_dim = PUBLISHED[name]
    m = _load(name)
    assert abs(m.num_params / 1e9 - size_b) <= 0.01 * size_b, m.num_params
    assert m.head_dim == head_dim and m.q_hidden_size == m.num_attention_heads * head_dim


def test_head_dimension_set_apart():
    """Configs whose head_dim (or kv_channels) is not hidden / heads: Q is wider or narrower than hidden."""
    apart = {n: _load(n) for n in ("Mistral-Nemo-Base-2407", "gemma-2-9b-it", "gemma-2-27b", "gemma-3-1b-it",
                                   "Qwen3-4B", "Qwen3-32B")}
    for name, m in apart.items():
        assert m.kv_channels is not None and m.q_hidden_size != m.hidden_size, name
    assert (apart["Mistral-Nemo-Base-2407"].q_hidden_size, apart["Mistral-Nemo-Base-2407"].hidden_size) == (4096, 5120)
    minitron = _load("Minitron-4B-Base")  # kv_channels, the NeMo spelling
    assert minitron.head_dim == 128 and minitron.kv_channels is None  # 3072 / 24 = 128 already
    nemo = model_from_hf_config({**json.loads((DATA / "hf" / "Minitron-4B-Base" / "config.json").read_text()),
                                 "num_attention_heads": 48, "num_key_value_heads": 8}, "x")
    assert nemo.kv_channels == 128 and nemo.q_hidden_size == 6144


def test_architectures():
    got = {n: {f: getattr(_load(n), f) for f in ARCH} for n in
           ("Meta-Llama-3-8B-Instruct", "Qwen2.5-32B", "Qwen3-32B", "gemma-2-9b-it", "Phi-4-mini-instruct",
            "Minitron-4B-Base", "gpt-neox-20b", "gpt2", "opt-1.3b", "bloom-176b", "llama3.1-8b")}
    rope = dict(position_embedding="rope", rope_scaling_factor=None, normalization="RMSNorm",
                norm_zero_centered_gamma=False, add_bias_linear=False, add_qkv_bias=False, activation="swiglu",
                qk_norm=False, rotary_percent=1.0)
    assert got["Meta-Llama-3-8B-Instruct"] == {**rope, "rotary_base": 500000.0}
    assert got["llama3.1-8b"] == {**rope, "rotary_base": 500000.0, "rope_scaling_factor": 8.0}
    assert got["Qwen2.5-32B"] == {**rope, "rotary_base": 1e6, "add_qkv_bias": True}
    assert got["Qwen3-32B"] == {**rope, "rotary_base": 1e6, "qk_norm": True}
    assert got["gemma-2-9b-it"] == {**rope, "rotary_base": 1e4, "activation": "geglu", "norm_zero_centered_gamma": True}
    assert got["Phi-4-mini-instruct"] == {**rope, "rotary_base": 1e4, "rotary_percent": 0.75}
    assert got["Minitron-4B-Base"] == {**rope, "rotary_base": 1e4, "rotary_percent": 0.5, "normalization": "LayerNorm",
                                       "norm_zero_centered_gamma": True, "activation": "squared_relu"}
    gpt = dict(position_embedding="learned_absolute", rotary_base=None, rotary_percent=None, rope_scaling_factor=None,
               normalization="LayerNorm", norm_zero_centered_gamma=False, add_bias_linear=True, add_qkv_bias=True,
               activation="gelu", qk_norm=False)
    assert got["gpt2"] == gpt and got["opt-1.3b"] == {**gpt, "activation": "relu"}
    assert got["bloom-176b"] == {**gpt, "position_embedding": "alibi"}
    assert got["gpt-neox-20b"] == {**gpt, "position_embedding": "rope", "rotary_base": 1e4, "rotary_percent": 0.25}


@pytest.mark.parametrize("name", CATALOG_TWINS)
def test_fixture_matches_catalog(name):
    path = DATA / "hf" / name / "config.json"
    assert is_hf_config(json.loads(path.read_text()))
    m = load_model(str(path))
    c = catalog_models()[name]
    assert {f: getattr(m, f) for f in SHAPE + ARCH} == {f: getattr(c, f) for f in SHAPE + ARCH}
    assert m.num_params == c.num_params


def test_names_come_from_the_config():
    assert _load("Mistral-Nemo-Base-2407").name == "mistralai/Mistral-Nemo-Base-2407"  # _name_or_path
    assert _load("llama2-7b").name == "meta-llama/Llama-2-7b-hf"
    path = str(DATA / "hf" / "Qwen3-4B" / "config.json")  # no name_or_path: the file
    assert load_model(path).name == path
    assert model_from_hf_config({**_llama(), "name_or_path": "org/m"}, "f.json").name == "org/m"


def test_sequence_lengths():
    seq = {n: _load(n).seq_length for n in FIXTURES if n not in MOE}
    assert seq["llama3.1-8b"] == 8192  # rope_scaling.original_max_position_embeddings, not 131072
    assert seq["Phi-3.5-mini-instruct"] == 4096  # Phi-3's original_max_position_embeddings
    assert seq["llama2-7b"] == 4096 and seq["gpt2"] == 1024 and seq["opt-1.3b"] == 2048
    assert seq["bloom-176b"] == 2048  # ALiBi: no position field, spec default
    assert seq["Qwen2.5-32B"] == TRAINING_SEQ_CAP == 8192  # a 131072 window is not a training length
    assert all(s <= TRAINING_SEQ_CAP for s in seq.values())
    notes = _load("Qwen2.5-32B").notes
    assert "sequence length 8192" in notes and "131072" in notes and "--seq-len 131072" in notes


def test_catalog_files_are_not_hf_configs():
    for p in (DATA.parent.parent / "models").glob("*.yaml"):
        assert not is_hf_config(read_mapping(p, "model"))
    assert not is_hf_config([1, 2]) and not is_hf_config(None)


@pytest.mark.parametrize("name", MOE)
def test_moe_is_refused_in_one_line(name):
    with pytest.raises(InputError, match="mixture-of-experts model .*dense decoders only") as exc:
        _load(name)
    assert "\n" not in str(exc.value)


def _llama(**kw):
    d = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
         "intermediate_size": 1024, "vocab_size": 1000}
    d.update(kw)
    return {k: v for k, v in d.items() if v is not None}


def test_defaults_per_architecture():
    assert model_from_hf_config(_llama(), "x").tied_embeddings is False
    assert model_from_hf_config(_llama(), "x").num_kv_heads == 8
    assert model_from_hf_config(_llama(num_key_value_heads=2), "x").num_kv_heads == 2
    gpt2 = {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_inner": None}
    m = model_from_hf_config(gpt2, "g")
    assert m.tied_embeddings is True and m.ffn_hidden_size == 1024 and not m.gated_mlp
    assert model_from_hf_config({**gpt2, "n_inner": 700}, "g").ffn_hidden_size == 700
    opt = {"model_type": "opt", "d_model": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 1024,
           "vocab_size": 100}
    assert model_from_hf_config(opt, "o").hidden_size == 256 and model_from_hf_config(opt, "o").tied_embeddings
    bloom = {"model_type": "bloom", "hidden_size": 256, "n_layer": 2, "n_head": 4, "vocab_size": 100}
    assert model_from_hf_config(bloom, "b").ffn_hidden_size == 1024
    neox = {"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 100}
    m = model_from_hf_config(neox, "n")  # no model_type: resolved from architectures
    assert m.tied_embeddings is False and not m.gated_mlp
    assert model_from_hf_config(_llama(tie_word_embeddings=True), "x").tied_embeddings is True


def test_gemma_and_nemotron():
    gemma2b = {"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 8,
               "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 16384, "vocab_size": 256000,
               "max_position_embeddings": 8192}
    m = model_from_hf_config(gemma2b, "gemma-2b")
    assert m.gated_mlp and m.tied_embeddings and m.num_kv_heads == 1 and abs(m.num_params / 1e9 - 2.51) < 0.03
    nemo = {"model_type": "nemotron", "hidden_size": 6144, "num_hidden_layers": 32, "num_attention_heads": 48,
            "num_key_value_heads": 8, "intermediate_size": 24576, "vocab_size": 256000,
            "max_position_embeddings": 4096}
    m = model_from_hf_config(nemo, "n")
    assert not m.gated_mlp and not m.tied_embeddings
    c = catalog_models()["nemotron4-15b"]
    assert {f: getattr(m, f) for f in SHAPE + ARCH} == {f: getattr(c, f) for f in SHAPE + ARCH}
    # Gemma-7B is GemmaConfig's defaults: head_dim 256 x 16 heads = 4096 > hidden 3072;
    # keras-hub's gemma_7b_en preset states 8,537,680,896 parameters
    gemma7b = model_from_hf_config({"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072,
                                    "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
                                    "num_key_value_heads": 16}, "gemma-7b")
    assert gemma7b.q_hidden_size == 4096 and gemma7b.hidden_size == 3072
    assert abs(gemma7b.num_params - 8_537_680_896) <= 0.001 * 8_537_680_896


def test_olmo_v1():
    """OlmoConfig (transformers 4.51) for allenai/OLMo-7B-hf: the catalog's olmo-7b architecture."""
    olmo = {"architectures": ["OlmoForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
            "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 50304, "max_position_embeddings": 2048,
            "attention_bias": False, "clip_qkv": None, "rope_theta": 10000.0, "tie_word_embeddings": False}
    m = model_from_hf_config(olmo, "olmo")
    c = catalog_models()["olmo-7b"]
    assert {f: getattr(m, f) for f in SHAPE + ARCH} == {f: getattr(c, f) for f in SHAPE + ARCH}
    assert "non-parametric LayerNorm" in m.notes


def test_errors_name_the_field():
    with pytest.raises(InputError, match="unsupported architecture 'falcon'; supported: " + ", ".join(SUPPORTED)):
        model_from_hf_config({"model_type": "falcon"}, "x")
    with pytest.raises(InputError, match="'mixtral' is a mixture-of-experts model"):
        model_from_hf_config({"model_type": "mixtral", "num_local_experts": 8}, "x")
    with pytest.raises(InputError, match="multimodal model; .*text_config"):
        model_from_hf_config({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}, "x")
    with pytest.raises(InputError, match="activation 'tanh' is not one solveplan models"):
        model_from_hf_config(_llama(hidden_act="tanh"), "x")
    with pytest.raises(InputError, match="missing 'hidden_size'"):
        model_from_hf_config(_llama(hidden_size=None), "x")
    with pytest.raises(InputError, match="'n_embd' or 'hidden_size'"):
        model_from_hf_config({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "vocab_size": 10}, "x")
    with pytest.raises(InputError, match="'vocab_size' must be a positive integer"):
        model_from_hf_config(_llama(vocab_size=0), "x")
    with pytest.raises(InputError, match="num_attention_heads \\(7\\) must divide hidden_size \\(512\\), or give head_dim"):
        model_from_hf_config(_llama(num_attention_heads=7), "x")


def test_an_original_length_equal_to_the_window_is_the_window_rule():
    """phi-4 (14B) states original_max_position_embeddings = max_position_embeddings = 16384
    (microsoft/phi-4 config.json): no extension, so the window rule and its 8192 cap apply, as
    README says; below the window it is the pre-training length (Phi-4-mini: 4096)."""
    phi4 = {"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
            "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352,
            "max_position_embeddings": 16384, "original_max_position_embeddings": 16384, "rope_scaling": None,
            "rope_theta": 250000, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "name_or_path": "microsoft/phi-4"}
    m = model_from_hf_config(phi4, "config.json")
    assert m.seq_length == TRAINING_SEQ_CAP == 8192
    assert "context window is 16384" in m.notes and "original_max_position_embeddings" not in m.notes
    assert _load("Phi-4-mini-instruct").seq_length == 4096
