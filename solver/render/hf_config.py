"""The Hugging Face config.json of a catalog model, so that a transformers launch of a plan made from the catalog
(`render/transformers.py`) builds the planned model as it is (run_clm.py's `--config_name` takes a config file).

Written for the families whose transformers config holds every dimension the plan was priced with, one field
each (transformers 5.x configuration classes, field names as `configuration_<family>.py` declares them):
- `LlamaConfig`, `MistralConfig`, `Qwen2Config` (RMSNorm / SwiGLU / RoPE decoders): the widths, layers, heads,
  vocabulary, RMSNorm epsilon, tied embeddings, RoPE theta, and Llama 3.x RoPE scaling as `rope_parameters` of
  rope_type llama3 with the factor the catalog states and the low / high frequency factors and original length
  Megatron-Core applies with it (1, 4, 8192: megatron/core/models/common/embeddings/rotary_pos_embedding.py
  `_apply_scaling`, Meta's values), so that both launches build the same model, and the window that scaling
  reaches (8192 x factor) as `max_position_embeddings`; Mistral's sliding window; Qwen2's q/k/v biases (its
  modelling code always has them);
- `GPT2Config` (GPT-2, and GPT-3 and Megatron-LM's GPT models, which are GPT-2's architecture at other sizes,
  Brown et al. 2020 Sec. 2.1, and name it as their `hf_model_type`; GPT-3's banded sparse layers are planned
  dense, as the plan prices them):
  learned positions, LayerNorm, biased linears, tied embeddings, `activation_function` the model's (Megatron-LM's
  GeLU, "gelu", where the catalog names none);
- `GPTNeoXConfig` (GPT-NeoX, Pythia): partial RoPE as `rope_parameters.partial_rotary_factor`, the parallel
  residual of the family (both published models; the plan prices the same weights and FLOPs);
- `OPTConfig`: learned positions (OPT's table keeps 2 rows more, its offset), ReLU, pre-LayerNorm;
- `BloomConfig`: ALiBi, LayerNorm (and the embedding's own), GeLU, a 4 x hidden MLP;
- `NemotronConfig` (Nemotron-4): LayerNorm1P (zero-centred gamma), squared ReLU, partial RoPE, GQA.
The window of learned positions is the planned sequence length (a table of that many rows). A model its
family's config cannot express (another norm, activation or position scheme, biases its family does not have,
QK norm, MoE) gets None: the launch then says to give the published config.
"""

from __future__ import annotations

from collections.abc import Callable

from ..specs import ModelSpec

ARCHITECTURE = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "gpt2": "GPT2LMHeadModel", "gpt_neox": "GPTNeoXForCausalLM", "opt": "OPTForCausalLM",
                "bloom": "BloomForCausalLM", "nemotron": "NemotronForCausalLM"}
# Megatron-Core's Llama 3 RoPE scaling constants beside its factor (module docstring)
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _plain(model: ModelSpec) -> bool:
    """No MoE, no QK norm, multi-head attention of width h (GPT-2, OPT, BLOOM, GPT-NeoX configs have no KV heads
    nor head dimension of their own)."""
    return (not model.is_moe and not model.qk_norm and (model.num_kv_heads or model.num_attention_heads) ==
            model.num_attention_heads and (model.kv_channels or 0) in (0, model.hidden_size // model.num_attention_heads))


def _gpt_like(model: ModelSpec, position: str) -> bool:
    """LayerNorm, a plain (ungated) MLP and biases on every linear: GPT-2, GPT-NeoX, OPT, BLOOM."""
    return (_plain(model) and model.normalization == "LayerNorm" and not model.norm_zero_centered_gamma
            and not model.gated_mlp and model.add_bias_linear and model.add_qkv_bias is not False
            and model.position_embedding == position)


def _llama_like_expressible(m: ModelSpec, fam: str) -> bool:
    """A dense RMSNorm / SwiGLU / full-RoPE decoder with the q/k/v biases its family has (Qwen2 only) and no other."""
    return (not m.is_moe and m.gated_mlp and m.hidden_act == "silu" and m.normalization == "RMSNorm"
            and not m.norm_zero_centered_gamma and m.position_embedding == "rope" and m.rotary_percent in (None, 1.0)
            and m.rope_yarn is None and not m.qk_norm and not m.add_bias_linear and m.add_qkv_bias == (fam == "qwen2"))


EXPRESSIBLE: dict[str, Callable[[ModelSpec], bool]] = {
    "llama": lambda m: _llama_like_expressible(m, "llama"), "mistral": lambda m: _llama_like_expressible(m, "mistral"),
    "qwen2": lambda m: _llama_like_expressible(m, "qwen2"),
    "gpt2": lambda m: _gpt_like(m, "learned_absolute") and m.tied_embeddings,
    "opt": lambda m: _gpt_like(m, "learned_absolute") and m.tied_embeddings and m.hidden_act == "relu",
    "gpt_neox": lambda m: _gpt_like(m, "rope") and m.rope_scaling_factor is None and m.rope_yarn is None,
    "bloom": lambda m: (_gpt_like(m, "alibi") and m.tied_embeddings and m.hidden_act in (None, "gelu")
                        and m.ffn_hidden_size == 4 * m.hidden_size),
    "nemotron": lambda m: (not m.is_moe and not m.qk_norm and not m.gated_mlp and m.hidden_act == "relu2"
                           and m.normalization == "LayerNorm" and m.norm_zero_centered_gamma
                           and m.position_embedding == "rope" and not m.add_bias_linear and not m.add_qkv_bias
                           and m.rope_scaling_factor is None and m.rope_yarn is None),
}


def expressible(model: ModelSpec) -> bool:
    """Whether `hf_config` can write this model: its transformers family (the catalog's `hf_model_type`, the code
    `--framework transformers` prices) has a config that holds it (`EXPRESSIBLE`)."""
    fam = model.hf_model_type
    return fam in EXPRESSIBLE and EXPRESSIBLE[fam](model)


def _rope(model: ModelSpec) -> dict:
    rope: dict = {"rope_type": "default", "rope_theta": float(model.rotary_base or 10000.0)}
    if model.rotary_percent not in (None, 1.0):
        rope["partial_rotary_factor"] = float(model.rotary_percent)
    return rope


def _llama_like(model: ModelSpec, fam: str, window: int) -> dict:
    rope = _rope(model)
    if model.rope_scaling_factor is not None:  # the scaled window: transformers warns unless it exceeds the original
        rope.update(rope_type="llama3", factor=float(model.rope_scaling_factor), **LLAMA3_ROPE)
        window = max(window, round(LLAMA3_ROPE["original_max_position_embeddings"] * model.rope_scaling_factor))
    config = {"intermediate_size": model.ffn_hidden_size, "num_hidden_layers": model.num_layers,
              "num_attention_heads": model.num_attention_heads,
              "num_key_value_heads": model.num_kv_heads or model.num_attention_heads,
              "head_dim": model.kv_channels or model.hidden_size // model.num_attention_heads, "hidden_act": "silu",
              "max_position_embeddings": window, "rms_norm_eps": model.norm_epsilon, "rope_parameters": rope,
              "attention_dropout": model.attention_dropout}
    if fam == "llama":
        config.update(attention_bias=False, mlp_bias=False)
    if fam == "mistral":
        config["sliding_window"] = model.sliding_window
    if fam == "qwen2":
        config.update(use_sliding_window=False, sliding_window=None)
    return config


def _gpt2(model: ModelSpec, window: int) -> dict:
    return {"n_positions": window, "n_embd": model.hidden_size, "n_layer": model.num_layers,
            "n_head": model.num_attention_heads, "n_inner": model.ffn_hidden_size,
            "activation_function": model.hidden_act or "gelu", "layer_norm_epsilon": model.norm_epsilon,
            "resid_pdrop": model.dropout, "embd_pdrop": model.dropout, "attn_pdrop": model.attention_dropout}


def _gpt_neox(model: ModelSpec, window: int) -> dict:
    return {"hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_attention_heads, "intermediate_size": model.ffn_hidden_size,
            "hidden_act": model.hidden_act or "gelu", "max_position_embeddings": window,
            "layer_norm_eps": model.norm_epsilon, "use_parallel_residual": True, "attention_bias": True,
            "rope_parameters": _rope(model), "attention_dropout": model.attention_dropout, "hidden_dropout": model.dropout}


def _opt(model: ModelSpec, window: int) -> dict:
    return {"hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers, "ffn_dim": model.ffn_hidden_size,
            "num_attention_heads": model.num_attention_heads, "max_position_embeddings": window,
            "activation_function": "relu", "do_layer_norm_before": True, "word_embed_proj_dim": model.hidden_size,
            "enable_bias": True, "dropout": model.dropout, "attention_dropout": model.attention_dropout}


def _bloom(model: ModelSpec, window: int) -> dict:
    return {"hidden_size": model.hidden_size, "n_layer": model.num_layers, "n_head": model.num_attention_heads,
            "layer_norm_epsilon": model.norm_epsilon, "hidden_dropout": model.dropout,
            "attention_dropout": model.attention_dropout}


def _nemotron(model: ModelSpec, window: int) -> dict:
    return {"hidden_size": model.hidden_size, "intermediate_size": model.ffn_hidden_size,
            "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_attention_heads,
            "num_key_value_heads": model.num_kv_heads or model.num_attention_heads,
            "head_dim": model.kv_channels or model.hidden_size // model.num_attention_heads, "hidden_act": "relu2",
            "max_position_embeddings": window, "norm_eps": model.norm_epsilon, "rope_parameters": _rope(model),
            "attention_bias": False, "mlp_bias": False, "attention_dropout": model.attention_dropout}


FIELDS: dict[str, Callable[[ModelSpec, int], dict]] = {
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "bloom": _bloom, "nemotron": _nemotron}


def hf_config(model: ModelSpec, seq_length: int | None = None) -> dict | None:
    """The config.json of `model` (module docstring) for sequences of `seq_length` tokens (default: the model's),
    or None when its family's config cannot hold it."""
    if not expressible(model):
        return None
    fam = str(model.hf_model_type)
    window = seq_length or model.seq_length
    fields = FIELDS[fam](model, window) if fam in FIELDS else _llama_like(model, fam, window)
    return {"architectures": [ARCHITECTURE[fam]], "model_type": fam, "vocab_size": model.vocab_size,
            **({} if fam == "gpt2" else {"hidden_size": model.hidden_size}), **fields,
            "tie_word_embeddings": model.tied_embeddings, "dtype": "bfloat16"}
