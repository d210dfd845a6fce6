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
    assert not expressible(load_model("gpt3-13b")) and hf_config(load_model("gpt3-13b")) is None
    assert hf_config(load_model("mixtral-8x7b")) is None  # MoE: the published config is given instead


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
