"""Hugging Face config.json -> ModelSpec: the fixture configs (values from the public model
cards' config.json) map to the same shapes as the catalog entries of those models."""

from __future__ import annotations

import json

import pytest

from conftest import DATA
from solveplan.catalog import catalog_models, load_model, read_mapping
from solveplan.errors import InputError
from solveplan.specs.hf import SUPPORTED, is_hf_config, model_from_hf_config

SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
         "gated_mlp", "tied_embeddings")
FIXTURES = sorted(p.parent.name for p in (DATA / "hf").glob("*/config.json"))


def test_fixture_coverage():
    assert {"llama2-7b", "llama3.1-8b", "mistral-7b", "qwen2-7b", "gpt2", "opt-1.3b", "bloom-176b",
            "gpt-neox-20b"} <= set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_catalog(name):
    path = DATA / "hf" / name / "config.json"
    assert is_hf_config(json.loads(path.read_text()))
    m = load_model(str(path))
    assert m.name == name  # the checkpoint directory names the model
    c = catalog_models()[name]
    assert {f: getattr(m, f) for f in SHAPE} == {f: getattr(c, f) for f in SHAPE}
    assert m.num_params == c.num_params


def test_sequence_lengths():
    seq = {n: load_model(str(DATA / "hf" / n / "config.json")).seq_length for n in FIXTURES}
    assert seq["llama3.1-8b"] == 8192  # rope_scaling.original_max_position_embeddings, not 131072
    assert seq["llama2-7b"] == 4096 and seq["gpt2"] == 1024 and seq["opt-1.3b"] == 2048
    assert seq["bloom-176b"] == 2048  # ALiBi: no position field, spec default


def test_catalog_files_are_not_hf_configs():
    for p in (DATA.parent.parent / "models").glob("*.yaml"):
        assert not is_hf_config(read_mapping(p, "model"))
    assert not is_hf_config([1, 2]) and not is_hf_config(None)


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
    assert {f: getattr(m, f) for f in SHAPE} == {f: getattr(c, f) for f in SHAPE}


def test_errors_name_the_field():
    with pytest.raises(InputError, match="unsupported architecture 'mixtral'; supported: " + ", ".join(SUPPORTED)):
        model_from_hf_config({"model_type": "mixtral"}, "x")
    with pytest.raises(InputError, match="missing 'hidden_size'"):
        model_from_hf_config(_llama(hidden_size=None), "x")
    with pytest.raises(InputError, match="'n_embd' or 'hidden_size'"):
        model_from_hf_config({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "vocab_size": 10}, "x")
    with pytest.raises(InputError, match="'vocab_size' must be a positive integer"):
        model_from_hf_config(_llama(vocab_size=0), "x")
    with pytest.raises(InputError, match="num_attention_heads \\(7\\) must divide hidden_size"):
        model_from_hf_config(_llama(num_attention_heads=7), "x")
