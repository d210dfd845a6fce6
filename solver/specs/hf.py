"""Hugging Face `config.json` -> ModelSpec, for the dense decoder families the spec can describe.

Field names and per-architecture defaults follow the `transformers` configuration classes
(`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `GPTNeoXConfig`, `GPT2Config`, `OPTConfig`,
`BloomConfig`, `NemotronConfig`, `GemmaConfig`) and the published config.json files of the models
they describe:

- layers / width / heads: `num_hidden_layers`, `hidden_size`, `num_attention_heads`; GPT-2 uses
  `n_layer`, `n_embd`, `n_head`; BLOOM files use `n_layer`, `n_embed` (or `hidden_size`),
  `num_attention_heads` (or `n_head`); old OPT files use `d_model`.
- KV heads: `num_key_value_heads` (Llama, Mistral, Qwen2, Nemotron, Gemma); MHA elsewhere.
- MLP width: `intermediate_size`; GPT-2 `n_inner` (None -> 4 * n_embd); OPT `ffn_dim`;
  BLOOM always 4 * hidden. Llama/Mistral/Qwen2/Gemma MLPs are gated (SwiGLU/GeGLU, 3 matrices);
  GPT-NeoX, GPT-2, OPT, BLOOM (GeLU/ReLU) and Nemotron (squared ReLU) have 2.
- tied embeddings: `tie_word_embeddings`, else the class default: True for GPT-2, OPT, BLOOM
  and Gemma (PretrainedConfig's default); False for Llama, Mistral, Qwen2, GPT-NeoX, Nemotron.
- sequence length: `rope_scaling.original_max_position_embeddings` when a long-context RoPE
  extension is declared (the length the model was pre-trained at), else
  `max_position_embeddings`, GPT-2 `n_positions` / `n_ctx`, or `seq_length`; BLOOM (ALiBi) has
  none and keeps the spec default.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import InputError, validation_error
from .model import ModelSpec

FIELD = "model"  # errors name paths under the model (catalog.load_model puts them under its own field)

# model_type -> (gated MLP, tied embeddings when the file does not say, has num_key_value_heads)
_FAMILIES: dict[str, tuple[bool, bool, bool]] = {
    "llama": (True, False, True),
    "mistral": (True, False, True),
    "qwen2": (True, False, True),
    "gemma": (True, True, True),
    "nemotron": (False, False, True),
    "gpt_neox": (False, False, False),
    "gpt2": (False, True, False),
    "opt": (False, True, False),
    "bloom": (False, True, False),
}

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "GemmaForCausalLM": "gemma",
    "NemotronForCausalLM": "nemotron",
    "GPTNeoXForCausalLM": "gpt_neox",
    "GPT2LMHeadModel": "gpt2",
    "OPTForCausalLM": "opt",
    "BloomForCausalLM": "bloom",
}

SUPPORTED = tuple(_FAMILIES)


def is_hf_config(data: Any) -> bool:
    """A Hugging Face config.json names its `model_type` or `architectures`; a ModelSpec file never does."""
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def _model_type(data: dict) -> str:
    mt = data.get("model_type")
    archs = data.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    if mt is None and archs:
        mt = _ARCHITECTURES.get(str(archs[0]), str(archs[0]))
    if not isinstance(mt, str) or mt not in _FAMILIES:
        shown = mt if mt is not None else (archs[0] if archs else "?")
        raise InputError(FIELD, f"Hugging Face config.json: unsupported architecture '{shown}'; "
                                f"supported: {', '.join(SUPPORTED)} (dense decoders with standard attention)")
    return mt


def _int(data: dict, mt: str, *keys: str, default: Any = ...) -> int | None:
    """The first of `keys` present in `data`, checked to be a positive integer."""
    for key in keys:
        if key in data and data[key] is not None:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(FIELD, f"Hugging Face config.json ({mt}): '{key}' must be a positive integer "
                                        f"(got {value!r})")
            return value
    if default is ...:
        names = " or ".join(f"'{k}'" for k in keys)
        raise InputError(FIELD, f"Hugging Face config.json ({mt}) is missing {names}; it is required")
    return default


def _seq_length(data: dict, mt: str) -> int | None:
    rope = data.get("rope_scaling")
    if isinstance(rope, dict) and isinstance(rope.get("original_max_position_embeddings"), int):
        return _int(rope, mt, "original_max_position_embeddings")
    return _int(data, mt, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=None)


def model_from_hf_config(data: dict, name: str) -> ModelSpec:
    """Map a Hugging Face config.json (already parsed) to a ModelSpec named `name`."""
    if not isinstance(data, dict):
        raise InputError(FIELD, "Hugging Face config.json must hold a JSON object")
    mt = _model_type(data)
    gated, tied_default, has_kv = _FAMILIES[mt]

    if mt == "gpt2":
        layers = _int(data, mt, "n_layer", "num_hidden_layers")
        hidden = _int(data, mt, "n_embd", "hidden_size")
        heads = _int(data, mt, "n_head", "num_attention_heads")
        ffn = _int(data, mt, "n_inner", default=None) or 4 * hidden
    elif mt == "bloom":
        layers = _int(data, mt, "n_layer", "num_hidden_layers")
        hidden = _int(data, mt, "hidden_size", "n_embed")
        heads = _int(data, mt, "num_attention_heads", "n_head")
        ffn = 4 * hidden  # BloomMLP: dense_h_to_4h / dense_4h_to_h
    elif mt == "opt":
        layers = _int(data, mt, "num_hidden_layers")
        hidden = _int(data, mt, "hidden_size", "d_model")
        heads = _int(data, mt, "num_attention_heads")
        ffn = _int(data, mt, "ffn_dim")
    else:
        layers = _int(data, mt, "num_hidden_layers")
        hidden = _int(data, mt, "hidden_size")
        heads = _int(data, mt, "num_attention_heads")
        ffn = _int(data, mt, "intermediate_size")
    kv_heads = _int(data, mt, "num_key_value_heads", default=None) if has_kv else None
    vocab = _int(data, mt, "vocab_size")

    head_dim = _int(data, mt, "head_dim", default=None)
    if head_dim is not None and head_dim * heads != hidden:
        raise InputError(FIELD, f"Hugging Face config.json ({mt}): head_dim {head_dim} x num_attention_heads "
                                f"{heads} = {head_dim * heads} differs from hidden_size {hidden}; the spec "
                                f"needs head_dim = hidden_size / num_attention_heads")
    if hidden % heads:
        raise InputError(FIELD, f"Hugging Face config.json ({mt}): num_attention_heads ({heads}) must divide "
                                f"hidden_size ({hidden})")
    if kv_heads is not None and heads % kv_heads:
        raise InputError(FIELD, f"Hugging Face config.json ({mt}): num_key_value_heads ({kv_heads}) must divide "
                                f"num_attention_heads ({heads})")

    tied = data.get("tie_word_embeddings", tied_default)
    if not isinstance(tied, bool):
        raise InputError(FIELD, f"Hugging Face config.json ({mt}): 'tie_word_embeddings' must be true or false "
                                f"(got {tied!r})")

    notes = [f"converted from a Hugging Face config.json (model_type {mt})"]
    if mt == "opt" and data.get("word_embed_proj_dim") not in (None, hidden):
        notes.append(f"word_embed_proj_dim {data['word_embed_proj_dim']} differs from hidden_size; embeddings "
                     f"are costed at hidden_size")
    if data.get("sliding_window") and data.get("use_sliding_window", mt == "mistral"):
        notes.append(f"sliding-window attention ({data['sliding_window']}) is costed as full causal attention")

    archs = data.get("architectures")
    arch = archs if isinstance(archs, str) else (archs[0] if isinstance(archs, list) and archs else mt)
    spec: dict[str, Any] = dict(
        name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads,
        ffn_hidden_size=ffn, vocab_size=vocab, gated_mlp=gated, tied_embeddings=tied,
        source=f"Hugging Face config.json ({arch})", notes="; ".join(notes),
    )
    seq = _seq_length(data, mt)
    if seq is not None:
        spec["seq_length"] = seq
    try:
        return ModelSpec(**spec)
    except ValidationError as exc:
        raise validation_error(exc, FIELD) from None
