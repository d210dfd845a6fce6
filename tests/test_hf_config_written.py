"""A catalog model's Hugging Face config (render/hf_config.py), which a transformers launch writes for
`--config_name`: it agrees with the model's published config.json (tests/data/hf, with provenance) on every
field it writes, solveplan reads it back to the same model, and -- where transformers is installed --
transformers builds from it a model of the catalog's parameter count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solveplan.catalog import load_model
from solveplan.render.hf_config import LLAMA3_ROPE, expressible, hf_config
from solveplan.specs.hf import model_from_hf_config

HF = Path(__file__).parent / "data" / "hf"
PUBLISHED = ("llama2-7b", "llama3.1-8b", "mistral-7b", "qwen2-7b")  # catalog keys with their published config
SAME = ("architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "hidden_act", "rms_norm_eps", "tie_word_embeddings",
        "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window")


@pytest.mark.parametrize("key", PUBLISHED)
def test_the_written_config_is_the_published_one_on_every_field_it_writes(key):
    written, published = hf_config(load_model(key)), json.loads((HF / key / "config.json").read_text())
    for field in SAME:
        if field in written and field in published and not (field == "sliding_window" and key == "qwen2-7b"):
            assert written[field] == published[field], field  # Qwen2's window is unused (use_sliding_window false)
    rope = written["rope_parameters"]
    assert rope["rope_theta"] == published.get("rope_theta", 10000.0)
    scaling = published.get("rope_scaling") or {"rope_type": "default"}
    assert rope["rope_type"] == scaling["rope_type"]
    assert all(rope[k] == scaling[k] for k in ("factor", *LLAMA3_ROPE) if k in scaling)


@pytest.mark.parametrize("key", PUBLISHED + ("llama3.1-70b", "deepseek-llm-7b", "qwen2-72b"))
def test_solveplan_reads_the_written_config_back_to_the_same_model(key):
    model = load_model(key)
    back = model_from_hf_config(hf_config(model), f"{key}-config.json")
    fields = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size", "tied_embeddings",
              "norm_epsilon", "rotary_base", "rope_scaling_factor", "add_qkv_bias", "seq_length")
    assert {f: getattr(back, f) for f in fields} == {f: getattr(model, f) for f in fields}
    assert back.num_params == model.num_params


def test_a_model_no_family_config_can_hold_gets_none():
    assert not expressible(load_model("olmo-7b")) and hf_config(load_model("olmo-7b")) is None  # no family named
    assert hf_config(load_model("mixtral-8x7b")) is None  # MoE: the published config is given instead
    gated = load_model("gpt2").model_copy(update={"gated_mlp": True})  # GPT-2's MLP has no gate
    assert hf_config(gated) is None


# GPT-style families: the published config.json (tests/data/hf) and the checkpoint's parameter count the
# catalog entry's notes cite (openai-community/gpt2, EleutherAI/gpt-neox-20b and pythia-12b,
# facebook/opt-1.3b, bigscience/bloom; the counts include the learned position table, every linear bias
# and BLOOM's embedding norm, which the catalog's own count leaves out)
CHECKPOINT_PARAMS = {"gpt2": 124_439_808, "gpt-neox-20b": 20_554_567_680, "pythia-12b": 11_846_072_320,
                     "opt-1.3b": 1_315_758_080, "bloom-176b": 176_247_271_424}
# each family's name for the fields above, where its published config states them
GPT_FIELDS = {"gpt2": ("n_embd", "n_layer", "n_head", "n_positions", "activation_function", "layer_norm_epsilon"),
              "gpt_neox": ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                           "max_position_embeddings", "layer_norm_eps", "use_parallel_residual"),
              "opt": ("hidden_size", "num_hidden_layers", "ffn_dim", "num_attention_heads", "max_position_embeddings",
                      "activation_function", "do_layer_norm_before", "word_embed_proj_dim"),
              "bloom": ("n_layer", "layer_norm_epsilon")}


@pytest.mark.parametrize("key", CHECKPOINT_PARAMS)
def test_a_gpt_style_config_is_the_published_one_on_every_field_both_state(key):
    written, published = hf_config(load_model(key)), json.loads((HF / key / "config.json").read_text())
    fam = written["model_type"]
    assert fam == published["model_type"] and written["architectures"] == published["architectures"]
    for field in GPT_FIELDS[fam] + ("vocab_size",):
        if field in published and not (key == "gpt-neox-20b" and field == "hidden_act"):
            assert written[field] == published[field], field
    assert written["tie_word_embeddings"] == published.get("tie_word_embeddings", True)
    if fam == "gpt_neox":  # the legacy names of the published files
        rope = written["rope_parameters"]
        assert (rope["partial_rotary_factor"], rope["rope_theta"]) == (published["rotary_pct"], published["rotary_emb_base"])
    if fam == "bloom":
        assert (written["hidden_size"], written["n_head"]) == (published["n_embed"], published["num_attention_heads"])


@pytest.mark.parametrize("key", ("gpt2", "gpt3-13b", "megatron-530b", "gpt-neox-20b", "opt-175b", "bloom-176b",
                                 "nemotron4-15b"))
def test_a_gpt_style_config_reads_back_to_the_catalog_model(key):
    model = load_model(key)
    back = model_from_hf_config(hf_config(model), f"{key}-config.json")
    fields = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size",
              "tied_embeddings", "norm_epsilon", "rotary_base", "rotary_percent", "add_qkv_bias", "add_bias_linear",
              "position_embedding", "normalization", "norm_zero_centered_gamma", "gated_mlp", "hf_model_type",
              "seq_length")
    assert {f: getattr(back, f) for f in fields} == {f: getattr(model, f) for f in fields}
    assert back.hidden_act == (model.hidden_act or "gelu")  # Megatron-LM's GeLU, written out
    assert back.num_params == model.num_params


@pytest.mark.parametrize("key", (*CHECKPOINT_PARAMS, "nemotron4-15b"))
def test_transformers_builds_the_published_checkpoints_parameter_count(key, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    path = tmp_path / f"{key}-config.json"
    path.write_text(json.dumps(hf_config(load_model(key))))
    config = transformers.AutoConfig.from_pretrained(str(path))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == hf_config(load_model(key))["architectures"][0]
    # Nemotron-4 has no bias, position table or extra norm: the catalog's own count
    assert sum(p.numel() for p in model.parameters()) == CHECKPOINT_PARAMS.get(key, load_model(key).num_params)


@pytest.mark.parametrize("key", ("llama3.1-8b", "mistral-7b", "qwen2-7b"))
def test_transformers_builds_the_catalog_models_parameter_count(key, tmp_path, caplog):
    """From the file, as run_clm.py's --config_name reads it (AutoConfig.from_pretrained of a path), without a warning."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    path = tmp_path / f"{key}-config.json"
    path.write_text(json.dumps(hf_config(load_model(key))))
    transformers.logging.enable_propagation()  # transformers' logger does not propagate to caplog otherwise
    try:
        config = transformers.AutoConfig.from_pretrained(str(path))
    finally:
        transformers.logging.disable_propagation()
    assert not [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == hf_config(load_model(key))["architectures"][0]
    assert sum(p.numel() for p in model.parameters()) == load_model(key).num_params


def test_the_window_covers_the_planned_sequence_length():
    assert hf_config(load_model("llama2-7b"), 16384)["max_position_embeddings"] == 16384
    assert hf_config(load_model("llama2-7b"))["max_position_embeddings"] == 4096
    assert hf_config(load_model("llama3.1-8b"), 4096)["max_position_embeddings"] == 65536  # 8192 x factor 8
