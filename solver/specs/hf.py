"""Hugging Face `config.json` -> ModelSpec, for the dense decoder families the spec can describe.

Field names and per-family defaults follow the `transformers` configuration classes (4.51:
`models/<family>/configuration_<family>.py`: LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
GemmaConfig, Gemma2Config, Gemma3TextConfig, Phi3Config, OlmoConfig, Olmo2Config, NemotronConfig,
GPTNeoXConfig, GPT2Config, OPTConfig, BloomConfig) and their modeling files (which linear layers
carry biases, which norm, which activation):

- shape: `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`,
  `intermediate_size`, `vocab_size`; GPT-2 `n_layer`, `n_embd`, `n_head`, `n_inner` (None ->
  4 * n_embd); BLOOM `n_layer`, `n_embed`, `n_head`, MLP 4 * hidden; OPT `ffn_dim`, old `d_model`.
- head dimension: `head_dim` (Gemma, Mistral-NeMo, Qwen3, Llama 3.2), else `kv_channels`
  (Minitron/Nemotron files written from NeMo), else the class default (Gemma 256, Qwen3 128),
  else hidden / heads.
- rotary: `rope_theta` (GPT-NeoX `rotary_emb_base`), `partial_rotary_factor` (GPT-NeoX
  `rotary_pct`), `rope_scaling` {rope_type llama3, factor}; transformers 5 files group them in
  `rope_parameters`.
- a model is named after the config: `name_or_path` / `_name_or_path`, else the file.
- sequence length: the length the model was pre-trained at (`rope_scaling.original_max_position_embeddings`,
  Phi-3's `original_max_position_embeddings`), else the context window, capped at
  `TRAINING_SEQ_CAP` with a note: a config's 128k window is an inference limit, not a pre-training
  recipe (pass --seq-len to plan long-context training).

Mixture-of-experts and multimodal configs, and every other `model_type`, are refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import ValidationError

from ..errors import InputError, escape_text, validation_error
from .model import ModelSpec

FIELD = "model"  # errors name paths under the model (catalog.load_model puts them under its own field)
TRAINING_SEQ_CAP = 8192  # Llama 3 pre-training length; longer windows come from a late extension phase


@dataclass(frozen=True)
class _Family:
    gated: bool
    tied: bool  # tie_word_embeddings when the file does not say
    position: str = "rope"
    rope_theta: float = 10000.0
    rotary_percent: float = 1.0
    normalization: str = "RMSNorm"
    zero_centered: bool = False  # Gemma's RMSNorm (1 + w), Nemotron's LayerNorm1P
    eps: float = 1e-6
    bias: bool = False  # add_bias_linear
    qkv_bias: bool = False
    qk_norm: bool = False
    act: str = "silu"  # hidden_act default
    head_dim: Optional[int] = None  # the class default when the file has none
    caveats: tuple[str, ...] = field(default_factory=tuple)  # what the spec (and Megatron-LM) does not model


_LLAMA = _Family(gated=True, tied=False)
_FAMILIES: dict[str, _Family] = {
    "llama": _LLAMA,  # Llama 1-3.x, DeepSeek LLM (dense), CodeLlama, Yi
    "mistral": _LLAMA,
    "qwen2": _Family(gated=True, tied=False, qkv_bias=True),
    "qwen3": _Family(gated=True, tied=False, qk_norm=True, head_dim=128),
    "gemma": _Family(gated=True, tied=True, zero_centered=True, act="gelu_pytorch_tanh", head_dim=256,
                     caveats=("embeddings scaled by sqrt(hidden_size)",)),
    "gemma2": _Family(gated=True, tied=True, zero_centered=True, act="gelu_pytorch_tanh", head_dim=256,
                      caveats=("embeddings scaled by sqrt(hidden_size)", "extra post-attention and post-MLP norms",
                               "logit soft-capping", "sliding-window attention on alternate layers (costed as full)")),
    "gemma3_text": _Family(gated=True, tied=True, zero_centered=True, qk_norm=True, act="gelu_pytorch_tanh",
                           head_dim=256, rope_theta=1e6,
                           caveats=("embeddings scaled by sqrt(hidden_size)", "extra post-attention and post-MLP norms",
                                    "local layers use RoPE theta rope_local_base_freq and a sliding window "
                                    "(costed as full attention)")),
    "phi3": _Family(gated=True, tied=False, eps=1e-5),
    "olmo": _Family(gated=True, tied=False, normalization="LayerNorm", eps=1e-5,
                    caveats=("non-parametric LayerNorm (no weights)",)),
    "olmo2": _Family(gated=True, tied=False, eps=1e-5, qk_norm=True,
                     caveats=("norms after attention and MLP (reordered), QK norm over the whole projection",)),
    "nemotron": _Family(gated=False, tied=False, normalization="LayerNorm", zero_centered=True, eps=1e-5,
                        rotary_percent=0.5, act="relu2"),
    "gpt_neox": _Family(gated=False, tied=False, normalization="LayerNorm", eps=1e-5, bias=True, qkv_bias=True,
                        rotary_percent=0.25, act="gelu", caveats=("parallel attention and MLP residual",)),
    "gpt2": _Family(gated=False, tied=True, position="learned_absolute", normalization="LayerNorm", eps=1e-5,
                    bias=True, qkv_bias=True, act="gelu_new"),
    "opt": _Family(gated=False, tied=True, position="learned_absolute", normalization="LayerNorm", eps=1e-5,
                   bias=True, qkv_bias=True, act="relu"),
    "bloom": _Family(gated=False, tied=True, position="alibi", normalization="LayerNorm", eps=1e-5, bias=True,
                     qkv_bias=True, act="gelu", caveats=("LayerNorm after the embedding",)),
}

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3", "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2", "NemotronForCausalLM": "nemotron", "GPTNeoXForCausalLM": "gpt_neox",
    "GPT2LMHeadModel": "gpt2", "OPTForCausalLM": "opt", "BloomForCausalLM": "bloom",
}
_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon")
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
# hidden_act -> (activation of a gated MLP, of a plain one)
_ACTS = {"silu": ("swiglu", None), "swish": ("swiglu", None), "gelu": ("geglu", "gelu"),
         "gelu_new": ("geglu", "gelu"), "gelu_fast": ("geglu", "gelu"), "gelu_pytorch_tanh": ("geglu", "gelu"),
         "relu": (None, "relu"), "relu2": (None, "squared_relu")}

SUPPORTED = tuple(_FAMILIES)


def is_hf_config(data: Any) -> bool:
    """A Hugging Face config.json names its `model_type` or `architectures`; a ModelSpec file never does."""
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def _fail(msg: str) -> InputError:
    return InputError(FIELD, f"Hugging Face config.json: {msg}")


def _model_type(data: dict) -> str:
    mt = data.get("model_type")
    archs = data.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    if mt is None and archs:
        mt = _ARCHITECTURES.get(str(archs[0]), str(archs[0]))
    shown = mt if mt is not None else "?"
    moe = [k for k in _MOE_KEYS if data.get(k)] or (["moe"] if isinstance(mt, str) and "moe" in mt else [])
    if moe:
        raise _fail(f"'{shown}' is a mixture-of-experts model ({moe[0]}); solveplan plans dense decoders only")
    if isinstance(data.get("text_config"), dict) or isinstance(data.get("vision_config"), dict):
        raise _fail(f"'{shown}' is a multimodal model; solveplan plans the text decoder alone: save its "
                    f"text_config as config.json")
    if not isinstance(mt, str) or mt not in _FAMILIES:
        raise _fail(f"unsupported architecture '{shown}'; supported: {', '.join(SUPPORTED)} "
                    f"(dense decoders with standard attention)")
    return mt


def _int(data: dict, mt: str, *keys: str, default: Any = ...) -> Optional[int]:
    """The first of `keys` present in `data`, checked to be a positive integer."""
    for key in keys:
        if data.get(key) is not None:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _fail(f"({mt}) '{key}' must be a positive integer (got {value!r})")
            return value
    if default is ...:
        raise _fail(f"({mt}) is missing {' or '.join(repr(k) for k in keys)}; it is required")
    return default


def _num(data: dict, mt: str, key: str, default: Optional[float]) -> Optional[float]:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _fail(f"({mt}) '{key}' must be a positive number (got {value!r})")
    return float(value)


def _bool(data: dict, mt: str, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(f"({mt}) '{key}' must be true or false (got {value!r})")
    return value


def _shape(data: dict, mt: str) -> tuple[int, int, int, int]:
    """(layers, hidden, heads, ffn) under each family's key names."""
    if mt == "gpt2":
        hidden = _int(data, mt, "n_embd", "hidden_size")
        return (_int(data, mt, "n_layer", "num_hidden_layers"), hidden, _int(data, mt, "n_head", "num_attention_heads"),
                _int(data, mt, "n_inner", default=None) or 4 * hidden)
    if mt == "bloom":
        hidden = _int(data, mt, "hidden_size", "n_embed")
        return (_int(data, mt, "n_layer", "num_hidden_layers"), hidden, _int(data, mt, "num_attention_heads", "n_head"),
                4 * hidden)  # BloomMLP: dense_h_to_4h / dense_4h_to_h
    if mt == "opt":
        return (_int(data, mt, "num_hidden_layers"), _int(data, mt, "hidden_size", "d_model"),
                _int(data, mt, "num_attention_heads"), _int(data, mt, "ffn_dim"))
    return (_int(data, mt, "num_hidden_layers"), _int(data, mt, "hidden_size"), _int(data, mt, "num_attention_heads"),
            _int(data, mt, "intermediate_size"))


def _rope(data: dict, mt: str, fam: _Family, notes: list[str]) -> dict:
    if fam.position != "rope":
        return {"position_embedding": fam.position}
    params = data.get("rope_parameters") if isinstance(data.get("rope_parameters"), dict) else {}
    src = {**data, **params}
    theta = _num(src, mt, "rope_theta", None)
    theta = theta if theta is not None else _num(src, mt, "rotary_emb_base", fam.rope_theta)
    pct = _num(src, mt, "partial_rotary_factor", None)
    pct = pct if pct is not None else _num(src, mt, "rotary_pct", fam.rotary_percent)
    out = {"position_embedding": "rope", "rotary_base": theta, "rotary_percent": pct}
    scaling = data.get("rope_scaling") if isinstance(data.get("rope_scaling"), dict) else params
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind == "llama3":
        out["rope_scaling_factor"] = _num(scaling, mt, "factor", None)
    elif kind not in (None, "default"):
        notes.append(f"RoPE scaling '{kind}' is not modelled (it does not change the cost)")
    return out


def _seq_length(data: dict, mt: str, notes: list[str]) -> Optional[int]:
    rope = data.get("rope_scaling") if isinstance(data.get("rope_scaling"), dict) else {}
    pre = _int(rope, mt, "original_max_position_embeddings", default=None) \
        or _int(data, mt, "original_max_position_embeddings", default=None)
    window = _int(data, mt, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=None)
    if pre is not None:
        seq, why = pre, f"the pre-training length (original_max_position_embeddings; the window is {window})"
    elif window is not None:
        seq, why = window, "the config's context window"
    else:
        return None  # ALiBi (BLOOM): no length in the file, the spec default
    if seq > TRAINING_SEQ_CAP:
        notes.append(f"sequence length {TRAINING_SEQ_CAP}: {why} is {seq}, a long-context limit rather than a "
                     f"pre-training length; pass --seq-len {seq} to plan long-context training")
        return TRAINING_SEQ_CAP
    notes.append(f"sequence length {seq}: {why}")
    return seq


def _name(data: dict, path_name: str) -> str:
    for key in ("name_or_path", "_name_or_path"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return path_name


DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout",
                "attention_probs_dropout_prob", "hidden_dropout_prob")


def _dropout(data: dict) -> float:
    """The largest dropout probability the config names (0 when it names none: the families
    trained today use none). A value that is not a probability in [0, 1) is refused, not read
    as 0: a config that says 5 or -0.5 is wrong, and the memory of dropout masks depends on it."""
    vals = []
    for key in DROPOUT_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise _fail(f"{key} must be a dropout probability in [0, 1) (got {escape_text(repr(value), 40)})")
        vals.append(float(value))
    return max(vals, default=0.0)


def model_from_hf_config(data: dict, name: str) -> ModelSpec:
    """Map a Hugging Face config.json (already parsed) to a ModelSpec; `name` (the file) names
    the model unless the config carries `name_or_path`."""
    if not isinstance(data, dict):
        raise _fail("must hold a JSON object")
    mt = _model_type(data)
    fam = _FAMILIES[mt]
    layers, hidden, heads, ffn = _shape(data, mt)
    kv_heads = _int(data, mt, "num_key_value_heads", default=None)
    if mt == "opt" and data.get("word_embed_proj_dim") not in (None, hidden):
        raise _fail(f"(opt) word_embed_proj_dim {data['word_embed_proj_dim']} differs from hidden_size {hidden}: "
                    f"embedding projections are not modelled")
    head_dim = _int(data, mt, "head_dim", "kv_channels", default=None) or fam.head_dim
    if head_dim is None:
        if hidden % heads:
            raise _fail(f"({mt}) num_attention_heads ({heads}) must divide hidden_size ({hidden}), or give head_dim")
        head_dim = hidden // heads
    if kv_heads is not None and heads % kv_heads:
        raise _fail(f"({mt}) num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})")
    hidden_act = data.get("hidden_activation") or data.get("hidden_act") or data.get("activation_function") or fam.act
    gated_act, plain_act = _ACTS.get(str(hidden_act), (None, None))
    activation = gated_act if fam.gated else plain_act
    if activation is None:
        raise _fail(f"({mt}) activation '{hidden_act}' is not one solveplan models "
                    f"({'silu or gelu' if fam.gated else 'gelu, relu or relu2'} for this family)")
    notes: list[str] = []
    eps = next((_num(data, mt, k, None) for k in _EPS_KEYS if data.get(k) is not None), None)
    bias = fam.bias
    if "attention_bias" in data or "mlp_bias" in data or "enable_bias" in data:
        attn_bias = _bool(data, mt, "attention_bias", fam.qkv_bias)
        mlp_bias = _bool(data, mt, "mlp_bias", fam.bias) if "mlp_bias" in data else _bool(data, mt, "enable_bias", bias)
        bias = attn_bias and mlp_bias
        qkv_bias = attn_bias
        if attn_bias and not mlp_bias and mt not in ("qwen2",):
            notes.append("attention biases on the output projection too (Megatron-LM: QKV bias only)")
    else:
        qkv_bias = fam.qkv_bias or bias
    if mt == "opt" and not _bool(data, mt, "do_layer_norm_before", True):
        notes.append("post-LayerNorm (do_layer_norm_before false)")
    notes += [f"not modelled: {c}" for c in fam.caveats]
    tied = _bool(data, mt, "tie_word_embeddings", fam.tied)
    spec: dict[str, Any] = dict(
        name=_name(data, name), num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, ffn_hidden_size=ffn, vocab_size=_int(data, mt, "vocab_size"), gated_mlp=fam.gated,
        tied_embeddings=tied, **_rope(data, mt, fam, notes), normalization=fam.normalization,
        norm_zero_centered_gamma=fam.zero_centered, norm_epsilon=eps if eps is not None else fam.eps,
        add_bias_linear=bias, add_qkv_bias=qkv_bias, activation=activation, qk_norm=fam.qk_norm,
        dropout=_dropout(data),
    )
    if heads * head_dim != hidden:
        spec["kv_channels"] = head_dim
    seq = _seq_length(data, mt, notes)
    if seq is not None:
        spec["seq_length"] = seq
    window = data.get("sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and 0 < window < (seq or 0) \
            and mt not in ("gemma2", "gemma3_text") and _bool(data, mt, "use_sliding_window", mt != "qwen2"):
        notes.append(f"sliding-window attention ({window}) is costed as full causal attention")
    archs = data.get("architectures")
    arch = archs if isinstance(archs, str) else (archs[0] if isinstance(archs, list) and archs else mt)
    spec["source"] = f"Hugging Face config.json ({arch})"
    spec["notes"] = "; ".join([f"converted from a Hugging Face config.json (model_type {mt})"] + notes)
    try:
        return ModelSpec(**spec)
    except ValidationError as exc:
        raise validation_error(exc, FIELD) from None
