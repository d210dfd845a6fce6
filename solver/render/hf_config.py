"""The Hugging Face config.json of a catalog model, so that a transformers launch of a plan made from the catalog
(`render/transformers.py`) builds the planned model as it is (run_clm.py's `--config_name` takes a config file).

Written for the families whose transformers config holds every dimension the plan was priced with, one field
each (transformers 5.x `LlamaConfig`, `MistralConfig`, `Qwen2Config`): the widths, layers, heads, vocabulary,
RMSNorm epsilon, tied embeddings, RoPE theta, and
- Llama 3.x RoPE scaling as `rope_parameters` of rope_type llama3 with the factor the catalog states and the
  low / high frequency factors and original length Megatron-Core applies with it (1, 4, 8192:
  megatron/core/models/common/embeddings/rotary_pos_embedding.py `_apply_scaling`, Meta's values), so that
  both launches build the same model, and the window that scaling reaches (8192 x factor) as
  `max_position_embeddings`; otherwise the planned sequence length;
- Mistral's sliding window; Qwen2's q/k/v biases (its modelling code always has them).
A model any of these cannot express (biased linears other than Qwen2's, QK norm, partial or no RoPE, MoE,
another activation or norm) gets None: the launch then says to give the published config.
"""

from __future__ import annotations

from ..specs import ModelSpec

ARCHITECTURE = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# Megatron-Core's Llama 3 RoPE scaling constants beside its factor (module docstring)
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def expressible(model: ModelSpec) -> bool:
    """Whether `hf_config` can write this model: a dense RMSNorm / SwiGLU / full-RoPE decoder of a family of
    `ARCHITECTURE`, with the q/k/v biases its family has (Qwen2 only) and no other."""
    family = model.hf_model_type
    return (family in ARCHITECTURE and not model.is_moe and model.gated_mlp and model.hidden_act == "silu"
            and model.normalization == "RMSNorm" and not model.norm_zero_centered_gamma
            and model.position_embedding == "rope" and model.rotary_percent in (None, 1.0)
            and model.rope_yarn is None and not model.qk_norm and not model.add_bias_linear
            and model.add_qkv_bias == (family == "qwen2"))


def hf_config(model: ModelSpec, seq_length: int | None = None) -> dict | None:
    """The config.json of `model` (module docstring) for sequences of `seq_length` tokens (default: the model's),
    or None when its family's config cannot hold it."""
    if not expressible(model):
        return None
    family = model.hf_model_type
    rope: dict = {"rope_type": "default", "rope_theta": float(model.rotary_base or 10000.0)}
    window = seq_length or model.seq_length
    if model.rope_scaling_factor is not None:  # the scaled window: transformers warns unless it exceeds the original
        rope.update(rope_type="llama3", factor=float(model.rope_scaling_factor), **LLAMA3_ROPE)
        window = max(window, round(LLAMA3_ROPE["original_max_position_embeddings"] * model.rope_scaling_factor))
    config: dict = {
        "architectures": [ARCHITECTURE[str(family)]], "model_type": family,
        "vocab_size": model.vocab_size, "hidden_size": model.hidden_size,
        "intermediate_size": model.ffn_hidden_size, "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads, "num_key_value_heads": model.num_kv_heads or model.num_attention_heads,
        "head_dim": model.kv_channels or model.hidden_size // model.num_attention_heads,
        "hidden_act": "silu", "max_position_embeddings": window, "rms_norm_eps": model.norm_epsilon,
        "tie_word_embeddings": model.tied_embeddings, "rope_parameters": rope, "attention_dropout": model.dropout,
        "dtype": "bfloat16"}
    if family == "llama":
        config.update(attention_bias=False, mlp_bias=False)
    if family == "mistral":
        config["sliding_window"] = model.sliding_window
    if family == "qwen2":
        config.update(use_sliding_window=False, sliding_window=None)
    return config
