"""Hugging Face `config.json` -> ModelSpec, for the decoder families the spec can describe: dense
decoders and the mixture-of-experts families below.

Field names and per-family defaults follow the `transformers` configuration classes (4.51:
`models/<family>/configuration_<family>.py`: LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
GemmaConfig, Gemma2Config, Gemma3TextConfig, Phi3Config, OlmoConfig, Olmo2Config, NemotronConfig,
GPTNeoXConfig, GPT2Config, OPTConfig, BloomConfig; PhiConfig of transformers 5) and their modeling files (which
linear layers carry biases, which norm, which activation):

- shape: `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`,
  `intermediate_size`, `vocab_size`; GPT-2 `n_layer`, `n_embd`, `n_head`, `n_inner` (None ->
  4 * n_embd); BLOOM `n_layer`, `n_embed`, `n_head`, MLP 4 * hidden; OPT `ffn_dim`, old `d_model`.
- head dimension: `head_dim` (Gemma, Mistral-NeMo, Qwen3, Llama 3.2), else `kv_channels`
  (Minitron/Nemotron files written from NeMo), else the class default (Gemma 256, Qwen3 128),
  else hidden / heads.
- rotary: `rope_theta` (GPT-NeoX `rotary_emb_base`), `partial_rotary_factor` (GPT-NeoX `rotary_pct`),
  `rope_scaling` {rope_type llama3, factor} or yarn (`specs/rope.py`); transformers 5 groups them in `rope_parameters`.
- a model is named after the config: `name_or_path` / `_name_or_path`, else the file.
- sequence length: the length the model was pre-trained at (`rope_scaling.original_max_position_embeddings`,
  Phi-3's `original_max_position_embeddings`, where it is below the window: the length a RoPE
  extension started from; phi-4 repeats its window there, which says nothing), else the context window, capped at
  `TRAINING_SEQ_CAP` with a note: a config's 128k window is an inference limit, not a pre-training
  recipe (pass --seq-len to plan long-context training).

Mixture-of-experts families (transformers configuration and modelling classes of the same names: MixtralConfig,
Qwen2MoeConfig, Qwen3MoeConfig, DeepseekV2Config, DeepseekV3Config, GptOssConfig, Llama4TextConfig, Glm4MoeConfig,
MiniMaxM2Config (transformers 5.24), OlmoeConfig, PhimoeConfig; DeepSeek-MoE's own remote-code `modeling_deepseek.py`
for `deepseek`), `_moe` (ERNIE 4.5's Ernie4_5_MoeConfig and Ling 1.x's remote BailingMoeConfig: specs/hf_ernie_ling.py):

- experts `num_local_experts` (Mixtral, GPT-OSS, Llama 4, MiniMax-M2, Phi-3.5-MoE) / `num_experts` (Qwen, OLMoE) /
  `n_routed_experts` (DeepSeek, GLM-4.5); top-k `num_experts_per_tok`; one expert's FFN `moe_intermediate_size`
  (Qwen, DeepSeek) or `intermediate_size` (Mixtral, GPT-OSS, OLMoE, Phi-3.5-MoE, Llama 4, whose dense layers use
  `intermediate_size_mlp`).
- shared experts: Qwen2-MoE `shared_expert_intermediate_size` behind a sigmoid gate; DeepSeek
  `n_shared_experts` x `moe_intermediate_size`; Llama 4 one shared expert of `intermediate_size`.
- which layers are MoE, as the modelling code builds them: Qwen `(i + 1) % decoder_sparse_step == 0`
  and i not in `mlp_only_layers`; DeepSeek `i >= first_k_dense_replace` and `i % moe_layer_freq == 0`;
  Llama 4 `moe_layers`, else `range(interleave_moe_layer_step - 1, L, interleave_moe_layer_step)`
  (Llama4TextConfig.__post_init__); Mixtral, GPT-OSS, OLMoE and Phi-3.5-MoE every layer. A pattern other than "every
  layer" is stated per layer (`moe_layer_pattern`): Megatron's integer --moe-layer-freq counts from
  layer 0 and would put Maverick's MoE layers on the wrong half.
- router: GLM-4.5 and MiniMax-M2 sigmoid with the correction bias (MiniMax's `use_routing_bias`); DeepSeek
  `scoring_func` (sigmoid in V3), `topk_method` noaux_tc -> expert bias, group-limited routing (`n_group`,
  `topk_group`) for noaux_tc / group_limited_greedy; Llama 4 sigmoid; the others softmax (Phi-3.5-MoE's sparsemixer,
  two experts only, priced as top-2 softmax: `_phimoe`); `norm_topk_prob`,
  `routed_scaling_factor` (`specs/hf_router.py`). Multi-latent attention (DeepSeek V2/V3): `q_lora_rank` (null:
  full-rank Q), `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`; MTP `num_nextn_predict_layers`.
- Llama 4 comes as a Llama4ForConditionalGeneration config: its `text_config` is planned (not the vision encoder
  and projector; a bare `llama4_text` config too), its RoPE's pairs and skipped layers (`rope.llama4_rope_fields`).

A `model_type` transformers has no class for, whose `architectures` names one of the classes above (Kimi K2:
`kimi_k2` with `DeepseekV3ForCausalLM`, the class its remote code loads), is read as that class's family, and the
notes say so. Other multimodal configs, other mixture-of-experts families and every other `model_type` are refused."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import escape_text, validation_error
from .hf_dsa import DSV4_FAMILIES, sparse_attention_fields
from .hf_ernie_ling import FIELDS as OWN_MOE
from .hf_families import _ARCHITECTURES, _FAMILIES, _MOE, _TEXT_MODEL_TYPES, GDN_FAMILIES, NOT_MODELLED, _Family
from .hf_hybrid import gdn_fields, hybrid_fields, pattern_from_block_types
from .hf_read import FIELD, read_whole
from .hf_read import fail as _fail
from .hf_read import read_bool as _bool
from .hf_read import read_int as _int
from .hf_read import read_num as _num
from .hf_router import router_probs_fields
from .model import ModelSpec
from .rope import llama4_rope_fields, yarn_from_hf

TRAINING_SEQ_CAP = 8192  # Llama 3 pre-training length; longer windows come from a late extension phase

_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon")
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
# hidden_act -> (activation of a gated MLP, of a plain one)
_ACTS = {"silu": ("swiglu", None), "swish": ("swiglu", None), "gelu": ("geglu", "gelu"),
         "gelu_new": ("geglu", "gelu"), "gelu_fast": ("geglu", "gelu"), "gelu_pytorch_tanh": ("geglu", "gelu"),
         "relu": (None, "relu"), "relu2": (None, "squared_relu")}

SUPPORTED = tuple(_FAMILIES)
SUPPORTED_MOE = (*_MOE, *OWN_MOE)  # OWN_MOE: families with keys and layer rules of their own (hf_ernie_ling.py)


def is_hf_config(data: Any) -> bool:
    """A Hugging Face config.json names its `model_type` or `architectures`; a ModelSpec file never does."""
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def _model_type(data: dict) -> str:
    mt = data.get("model_type")
    archs = data.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    by_class = _ARCHITECTURES.get(str(archs[0])) if archs else None
    moe_keys = [k for k in _MOE_KEYS if data.get(k)]
    builds_as_configured = by_class in _FAMILIES and bool(moe_keys) == (by_class in SUPPORTED_MOE)
    if archs and (mt is None or (mt not in _FAMILIES and builds_as_configured)):
        # no model_type, or one transformers has no class for whose `architectures` names a
        # modelling class it has (Kimi K2: model_type kimi_k2, DeepseekV3ForCausalLM): that class
        # is what loads the weights (the remote code's auto_map points at it), so it is the family,
        # provided it builds experts exactly when the file configures them
        mt = by_class or str(archs[0])
    shown = mt if mt is not None else "?"
    text = data.get("text_config")
    text_type = text.get("model_type") if isinstance(text, dict) else None
    lacks = NOT_MODELLED.get(str(mt)) or NOT_MODELLED.get(str(text_type))
    if lacks:
        raise _fail(f"'{shown}' is not modelled: {lacks}")
    if isinstance(text, dict):  # a text decoder of a family `_vision_language_text` reads would have been taken
        raise _fail(f"'{shown}' is a multimodal model whose text decoder ('{text.get('model_type')}') is not a "
                    f"family solveplan maps; supported: {', '.join(SUPPORTED)}")
    if isinstance(data.get("vision_config"), dict):
        raise _fail(f"'{shown}' is a multimodal model; solveplan plans the text decoder alone: save its "
                    f"text_config as config.json")
    if not isinstance(mt, str) or mt not in _FAMILIES:
        moe = moe_keys or (["moe"] if isinstance(mt, str) and "moe" in mt else [])
        if moe:
            raise _fail(f"'{shown}' is a mixture-of-experts model ({moe[0]}) of a family solveplan does not map; "
                        f"supported mixture-of-experts families: {', '.join(SUPPORTED_MOE)}")
        raise _fail(f"unsupported architecture '{shown}'; supported: {', '.join(SUPPORTED)} "
                    f"(decoders with standard or multi-latent attention)")
    return mt


def _text_config(data: dict, notes: list[str]) -> dict:
    """The text decoder (`text_config`) of a vision-language config whose decoder is a family this module
    maps -- Llama 4 (Llama4ForConditionalGeneration, which must have one), Kimi K2.5's kimi_k2 /
    DeepseekV3ForCausalLM, Qwen3-VL's Qwen3 decoders, Gemma 3 -- named after the whole config, its
    `architectures` the text config's, else the whole config's; the vision encoder and projector are left
    out (and said so). `data` unchanged otherwise (then refused as multimodal, in one line)."""
    archs = data.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    is_llama4 = data.get("model_type") == "llama4" or (data.get("model_type") is None and archs
                                                        and archs[0] == "Llama4ForConditionalGeneration")
    text = data.get("text_config")
    if not isinstance(text, dict):
        if is_llama4:
            raise _fail("(llama4) has no text_config object: give the Llama4ForConditionalGeneration config.json "
                        "with its text_config, or the text config alone (model_type llama4_text)")
        return data
    stated = text.get("model_type", "llama4_text" if is_llama4 else None)
    mt = _TEXT_MODEL_TYPES.get(str(stated), stated)
    text_archs = text.get("architectures") or []
    text_archs = [text_archs] if isinstance(text_archs, str) else text_archs
    if mt not in _FAMILIES and not (text_archs and _ARCHITECTURES.get(str(text_archs[0])) in _FAMILIES):
        return data
    notes.append(f"the text decoder (text_config, model_type {stated}) of a vision-language config "
                 f"({data.get('model_type') or (archs[0] if archs else '?')}); the vision encoder and projector are not "
                 f"planned")
    out = {**text, "model_type": mt}
    for key in ("name_or_path", "_name_or_path") + (() if text_archs else ("architectures",)):
        if key in data:
            out[key] = data[key]
    return out


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


def _moe_shape(data: dict, mt: str) -> tuple[int, int, int, int]:
    """(layers, hidden, heads, 0): the MLP sizes of a mixture-of-experts family come from `_moe`."""
    return (_int(data, mt, "num_hidden_layers"), _int(data, mt, "hidden_size"), _int(data, mt, "num_attention_heads"),
            0)


def _dict_or(data: dict, key: str, default: dict) -> dict:
    """`data[key]` when it is a dict (a nested config section), else `default`."""
    value = data.get(key)
    return value if isinstance(value, dict) else default


def _rope(data: dict, mt: str, fam: _Family, notes: list[str], head_dim: int) -> dict:
    if fam.position != "rope":
        return {"position_embedding": fam.position}
    params = _dict_or(data, "rope_parameters", {})
    src = {**data, **params}
    theta = _num(src, mt, "rope_theta", None)
    theta = theta if theta is not None else _num(src, mt, "rotary_emb_base", fam.rope_theta)
    pct = _num(src, mt, "partial_rotary_factor", None)
    rotary_dim = _int(src, mt, "rotary_dim", default=None)  # MiniMax-M2's legacy form (MiniMaxM2Config)
    if pct is None and rotary_dim is not None:
        pct = rotary_dim / head_dim
    pct = pct if pct is not None else _num(src, mt, "rotary_pct", fam.rotary_percent)
    out: dict[str, Any] = {"position_embedding": "rope", "rotary_base": theta, "rotary_percent": pct,
                           **llama4_rope_fields(data, mt)}
    scaling = _dict_or(data, "rope_scaling", params)
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind == "llama3":
        out["rope_scaling_factor"] = _num(scaling, mt, "factor", None)
    elif kind == "yarn":
        out["rope_yarn"] = yarn_from_hf(scaling, mt, _int(data, mt, "max_position_embeddings", default=None), notes)
    elif kind not in (None, "default"):
        notes.append(f"RoPE scaling '{kind}' is not modelled (it does not change the cost)")
    return out


def _seq_length(data: dict, mt: str, notes: list[str]) -> int | None:
    rope = _dict_or(data, "rope_scaling", {})
    pre = _int(rope, mt, "original_max_position_embeddings", default=None) \
        or _int(data, mt, "original_max_position_embeddings", default=None)
    window = _int(data, mt, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=None)
    if pre is not None and window is not None and pre >= window:
        pre = None  # no extension stated (phi-4 repeats its 16384 window there): the window rule below
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


def _int_list(data: dict, mt: str, key: str) -> list[int] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
        raise _fail(f"({mt}) '{key}' must be a list of layer indices (got {value!r})")
    return value


def _moe_layers(data: dict, mt: str, kind: str, layers: int) -> list[int]:
    """1 (MoE) or 0 (dense) for each layer, as the family's modelling code builds them (module docstring)."""
    if kind == "all":
        return [1] * layers
    if kind == "qwen":
        step = _int(data, mt, "decoder_sparse_step", default=1)
        only = set(_int_list(data, mt, "mlp_only_layers") or [])
        return [int(i not in only and (i + 1) % step == 0) for i in range(layers)]
    if kind == "deepseek":
        first = read_whole(data, mt, "first_k_dense_replace", 0)
        freq = _int(data, mt, "moe_layer_freq", default=1)
        return [int(i >= first and i % freq == 0) for i in range(layers)]
    listed = _int_list(data, mt, "moe_layers")  # llama4: moe_layers overrides interleave_moe_layer_step
    if listed is None:
        step = _int(data, mt, "interleave_moe_layer_step", default=1)
        listed = list(range(step - 1, layers, step))
    return [int(i in set(listed)) for i in range(layers)]


def _phimoe(data: dict, topk: int, notes: list[str]) -> None:
    """modeling_phimoe.py: `sparsemixer` raises unless top_k == 2; PhimoeSparseMoeBlock scales its input by uniform
    noise in training when input_jitter_noise > 0 (PhimoeConfig default 0.0); PhimoeForCausalLM's lm_head carries a
    bias when lm_head_bias (default false), which the spec does not count."""
    if topk != 2:
        raise _fail(f"(phimoe) sparsemixer routes exactly 2 experts per token (num_experts_per_tok is {topk})")
    if data.get("input_jitter_noise"):
        notes.append("not modelled: input_jitter_noise (multiplicative noise on the MoE input in training; no cost)")
    if _bool(data, "phimoe", "lm_head_bias", False):
        notes.append("not modelled: the output layer's bias (lm_head_bias; vocab_size parameters)")


def _moe(data: dict, mt: str, layers: int, notes: list[str]) -> dict:
    """The mixture-of-experts and multi-latent-attention fields of a family in `_MOE` (module docstring)."""
    if mt in OWN_MOE:  # ERNIE 4.5, Ling 1.x: keys and layer rules of their own (specs/hf_ernie_ling.py)
        return OWN_MOE[mt](data, layers, notes)
    fam = _MOE[mt]
    experts = _int(data, mt, *fam.experts)
    topk = _int(data, mt, "num_experts_per_tok", "experts_per_token")
    expert_ffn = _int(data, mt, fam.expert_ffn)
    if topk > experts:
        raise _fail(f"({mt}) num_experts_per_tok ({topk}) exceeds the {experts} experts ({fam.experts[0]})")
    if mt == "phimoe":
        _phimoe(data, topk, notes)
    out: dict[str, Any] = dict(num_experts=experts, moe_router_topk=topk, moe_ffn_hidden_size=expert_ffn)
    out["ffn_hidden_size"] = _int(data, mt, fam.dense_ffn) if fam.dense_ffn else expert_ffn
    if fam.shared == "qwen2":
        shared = _int(data, mt, "shared_expert_intermediate_size", default=None)
        if shared:
            out.update(moe_shared_expert_intermediate_size=shared, moe_shared_expert_gate=True)
    elif fam.shared == "deepseek":
        n_shared = data.get("n_shared_experts")
        if n_shared is not None and (isinstance(n_shared, bool) or not isinstance(n_shared, int) or n_shared < 0):
            raise _fail(f"({mt}) 'n_shared_experts' must be a non-negative integer (got {n_shared!r})")
        if n_shared:
            out["moe_shared_expert_intermediate_size"] = n_shared * expert_ffn
    elif fam.shared == "llama4":
        out["moe_shared_expert_intermediate_size"] = expert_ffn
    pattern = _moe_layers(data, mt, fam.layers, layers)
    if not any(pattern):
        raise _fail(f"({mt}) no layer is mixture-of-experts under this config's layer settings; "
                    f"plan it as a dense model instead")
    if not all(pattern):
        out["moe_layer_pattern"] = tuple(pattern)
    score = data.get("scoring_func", fam.score) if mt.startswith("deepseek") else fam.score
    if score not in ("softmax", "sigmoid", "sqrtsoftplus"):
        raise _fail(f"({mt}) 'scoring_func' must be softmax, sigmoid or sqrtsoftplus (got {score!r})")
    out["moe_router_score_function"] = score
    out.update(router_probs_fields(data, mt, score, topk, fam.norm_topk, fam.routed_scale, notes))
    method = data.get("topk_method")
    if mt.startswith("deepseek"):
        out["moe_router_enable_expert_bias"] = method == "noaux_tc"
        groups = _int(data, mt, "n_group", default=1)
        if method in ("noaux_tc", "group_limited_greedy") and groups > 1:
            out.update(moe_router_num_groups=groups, moe_router_group_topk=_int(data, mt, "topk_group"))
    elif fam.expert_bias:  # MiniMax-M2's remote code of 2025 read use_routing_bias; transformers always adds it
        out["moe_router_enable_expert_bias"] = _bool(data, mt, "use_routing_bias", True)
    if fam.mtp:
        mtp = data.get("num_nextn_predict_layers", data.get("num_mtp_layers", 0))  # transformers 5: num_mtp_layers
        if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
            raise _fail(f"({mt}) 'num_nextn_predict_layers' must be a non-negative integer (got {mtp!r})")
        out["mtp_num_layers"] = mtp
    if fam.mla:
        out.update(multi_latent_attention=True, q_lora_rank=_int(data, mt, "q_lora_rank", default=None),
                   kv_lora_rank=_int(data, mt, "kv_lora_rank"), qk_head_dim=_int(data, mt, "qk_nope_head_dim"),
                   qk_pos_emb_head_dim=_int(data, mt, "qk_rope_head_dim"), v_head_dim=_int(data, mt, "v_head_dim"))
    shown = "every layer" if all(pattern) else f"{sum(pattern)} of {layers} layers"
    notes.append(f"mixture of experts: {experts} experts, top-{topk}, on {shown}; token dropping is not "
                 f"configured (dropless)")
    return out


ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")
DROPOUT_KEYS = (*ATTENTION_DROPOUT_KEYS, "hidden_dropout", "resid_pdrop", "embd_pdrop", "dropout", "hidden_dropout_prob")


def _dropout(data: dict) -> dict:
    """`dropout`: the largest hidden (residual, embedding) dropout probability the config names, and
    `attention_dropout` the attention probabilities' (OPT and Phi-2: 0.0 beside 0.1); 0 where it names none (the
    families trained today use none). A value that is not a probability in [0, 1) is refused, not
    read as 0: a config that says 5 or -0.5 is wrong, and the memory of dropout masks depends on it."""
    vals: dict[str, list[float]] = {"attention": [], "hidden": []}
    for key in DROPOUT_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise _fail(f"{key} must be a dropout probability in [0, 1) (got {escape_text(repr(value), 40)})")
        vals["attention" if key in ATTENTION_DROPOUT_KEYS else "hidden"].append(float(value))
    return {"dropout": max(vals["hidden"], default=0.0), "attention_dropout": max(vals["attention"], default=0.0)}


# Sliding-window layers as each configuration class builds `layer_types` (transformers 5.x
# models/<family>/configuration_<family>.py): family -> (class default of `sliding_window`, rule).
# "all": every layer's mask comes from create_sliding_window_causal_mask (Mistral, Phi-3, Mixtral; Phi-3.5-MoE's
# PhimoeModel masks every layer by sliding_window);
# "pattern": layer i is full attention when (i + 1) % sliding_window_pattern == 0 (Gemma 3: 6,
# Gemma 2 and GPT-OSS: 2); "qwen": only with use_sliding_window, layers i >= max_window_layers.
_WINDOWS = {"mistral": (4096, "all"), "phi3": (None, "all"), "mixtral": (None, "all"), "phimoe": (None, "all"),
            "gemma2": (4096, "pattern2"), "gemma3_text": (4096, "pattern6"), "gpt_oss": (128, "pattern2"),
            "qwen2": (4096, "qwen"), "qwen3": (4096, "qwen"), "qwen2_moe": (4096, "qwen"), "qwen3_moe": (4096, "qwen")}


def _sliding_window(data: dict, mt: str, layers: int) -> dict:
    """`sliding_window` and how many layers use it (`sliding_window_layers`), from `layer_types`
    when the file lists them, else by the family's rule (`_WINDOWS`)."""
    default, rule = _WINDOWS.get(mt, (None, "all"))
    if mt in DSV4_FAMILIES:  # DeepSeek-V4's window is part of its own attention (csa_window_size: hf_dsa.py)
        return {}
    window = _int(data, mt, "sliding_window", default=None) if "sliding_window" in data else default
    if window is None or (rule == "qwen" and not _bool(data, mt, "use_sliding_window", False)):
        return {}
    types, period = data.get("layer_types"), None
    if isinstance(types, list) and len(types) == layers:
        mask = [t == "sliding_attention" for t in types]
        count = sum(mask)
        period = next((n for n in range(2, layers + 1) if mask == [bool((i + 1) % n) for i in range(layers)]),
                      tuple(int(v) for v in mask))  # another order: the layers themselves
    elif rule.startswith("pattern"):
        period = _int(data, mt, "sliding_window_pattern", default=int(rule[len("pattern"):]))
        count = sum(bool((i + 1) % period) for i in range(layers))
    elif rule == "qwen":
        count = max(0, layers - _int(data, mt, "max_window_layers", default=28))
    else:
        count = layers
    if not count:
        return {}
    return {"sliding_window": window, "sliding_window_layers": count,
            **({"sliding_window_pattern": period} if period and count < layers else {})}


def _switch_notes(data: dict, mt: str, notes: list[str]) -> None:
    """What a family's switch changes that the spec does not carry: OPT's post-LayerNorm; Phi's per-head q/k LayerNorm
    (modeling_phi.py PhiAttention q_layernorm / k_layernorm of head_dim), which the eager count takes for an RMSNorm."""
    if mt == "opt" and not _bool(data, mt, "do_layer_norm_before", True):
        notes.append("post-LayerNorm (do_layer_norm_before false)")
    if mt == "phi" and _bool(data, mt, "qk_layernorm", False):
        notes.append("per-head q/k LayerNorm (qk_layernorm): --framework transformers prices it as an RMSNorm")


def model_from_hf_config(data: dict, name: str) -> ModelSpec:
    """Map a Hugging Face config.json (already parsed) to a ModelSpec; `name` (the file) names
    the model unless the config carries `name_or_path`."""
    if not isinstance(data, dict):
        raise _fail("must hold a JSON object")
    notes: list[str] = []
    data = _text_config(data, notes)
    mt = _model_type(data)
    if mt == "nemotron_h":
        data = pattern_from_block_types(data)
    fam = _FAMILIES[mt]
    layers, hidden, heads, ffn = _shape(data, mt) if mt not in SUPPORTED_MOE else _moe_shape(data, mt)
    kv_heads = _int(data, mt, "num_key_value_heads", default=None)
    if mt == "opt" and data.get("word_embed_proj_dim") not in (None, hidden):
        raise _fail(f"(opt) word_embed_proj_dim {data['word_embed_proj_dim']} differs from hidden_size {hidden}: "
                    f"embedding projections are not modelled")
    mla = mt in _MOE and _MOE[mt].mla  # MLA's head dimensions are its own keys (GLM-5's head_dim is the rope part)
    head_dim = None if mla else (_int(data, mt, "head_dim", "kv_channels", default=None) or fam.head_dim)
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
    eps = next((_num(data, mt, k, None) for k in _EPS_KEYS if data.get(k) is not None), None)
    bias = fam.bias
    if "attention_bias" in data or "mlp_bias" in data or "enable_bias" in data:
        attn_bias = _bool(data, mt, "attention_bias", fam.qkv_bias)
        mlp_bias = _bool(data, mt, "mlp_bias", fam.bias) if "mlp_bias" in data else _bool(data, mt, "enable_bias", bias)
        bias = attn_bias and mlp_bias
        qkv_bias = attn_bias
        if attn_bias and not mlp_bias and mt not in ("qwen2", "glm4_moe"):
            notes.append("attention biases on the output projection too (Megatron-LM: QKV bias only)")
    else:
        qkv_bias = fam.qkv_bias or bias
    _switch_notes(data, mt, notes)
    notes += [f"not modelled: {c}" for c in fam.caveats]
    tied = _bool(data, mt, "tie_word_embeddings", fam.tied)
    spec: dict[str, Any] = dict(
        name=_name(data, name), num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, ffn_hidden_size=ffn, vocab_size=_int(data, mt, "vocab_size"), gated_mlp=fam.gated,
        tied_embeddings=tied, **_rope(data, mt, fam, notes, head_dim), normalization=fam.normalization,
        norm_zero_centered_gamma=fam.zero_centered, norm_epsilon=eps if eps is not None else fam.eps,
        add_bias_linear=bias, add_qkv_bias=qkv_bias, activation=activation,
        qk_norm=_bool(data, mt, fam.qk_norm_key, fam.qk_norm) if fam.qk_norm_key else fam.qk_norm,
        **_dropout(data), hf_model_type=mt, hidden_act=str(hidden_act), **_sliding_window(data, mt, layers),
    )
    if heads * head_dim != hidden:
        spec["kv_channels"] = head_dim
    if mt in SUPPORTED_MOE:
        spec.update(_moe(data, mt, layers, notes))
    spec.update(sparse_attention_fields(data, mt, layers, notes, spec.get("rope_yarn")))
    if mt == "gpt_oss":  # modeling_gpt_oss.py: `sinks` per head; experts (up + 1) * gate * sigmoid(1.702 gate), clamped
        spec.update(softmax_type="learnable", activation="quick_geglu", glu_linear_offset=1.0,
                    activation_clamp=_num(data, mt, "swiglu_limit", 7.0))
    if mt == "nemotron_h":
        spec.update(hybrid_fields(data, mt, layers, notes))
    if mt in GDN_FAMILIES:  # the MoE layers become the pattern's E layers
        moe = spec.pop("moe_layer_pattern", None) or [int(mt in SUPPORTED_MOE)] * layers
        spec.update(gdn_fields(data, mt, layers, list(moe), notes))
    seq = _seq_length(data, mt, notes)
    if seq is not None:
        spec["seq_length"] = seq
    archs = data.get("architectures")
    arch = archs if isinstance(archs, str) else (archs[0] if isinstance(archs, list) and archs else mt)
    spec["source"] = f"Hugging Face config.json ({arch})"
    stated = data.get("model_type")
    read_as = f"model_type {mt}" if stated in (None, mt) else f"model_type {stated}, read as {arch}'s {mt}"
    spec["notes"] = "; ".join([f"converted from a Hugging Face config.json ({read_as})"] + notes)
    try:
        return ModelSpec(**spec)
    except ValidationError as exc:
        raise validation_error(exc, FIELD) from None
