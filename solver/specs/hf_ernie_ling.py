"""ERNIE 4.5 MoE and Ling 1.x (Bailing MoE) configs, read as their own modelling code builds them: their keys and
layer rules are not those `specs.hf._moe` reads from a `hf_families._MOE` row, so `_moe` hands them here.

- `ernie4_5_moe` (transformers Ernie4_5_MoeConfig / modeling_ernie4_5_moe.py; Megatron-Bridge ernie/ernie_45_bridge.py
  at 067f987): `moe_num_experts` experts (attribute_map alias `num_experts`), top `moe_k` (`num_experts_per_tok`),
  each of `moe_intermediate_size`, and `moe_num_shared_experts` x `moe_intermediate_size` of shared expert without a
  gate (Ernie4_5_MoeSparseMoeBlock); layer i is MoE when (i + 1) % moe_layer_interval == 0 and moe_layer_start_index
  <= i <= moe_layer_end_index (-1: the last layer; Ernie4_5_MoeDecoderLayer), the others an MLP of
  `intermediate_size`. The router takes a softmax over every expert, picks the top-k on those scores plus
  `e_score_correction_bias` and renormalises the picked ones: Megatron-LM's softmax top-k (the same probabilities),
  whose expert bias Megatron-LM refuses with softmax scores (the family's caveat). `use_bias` puts a bias on q/k/v/o,
  every MLP and expert, and the lm_head; RoPE rotates adjacent pairs (apply_rotary_pos_emb; the bridge's
  rotary_interleaved); no dropout anywhere (Ernie4_5_MoeAttention's attention_dropout is 0.0); no MTP module
  (`_keys_to_ignore_on_load_unexpected = ["mtp"]`; the bridge sets mtp_num_layers None). Class defaults where a
  structure key is absent: 2 shared experts, MoE from layer 1 to the last, interval 1.
- `bailing_moe` (inclusionAI/Ling models/configuration_bailing_moe.py and modeling_bailing_moe.py at ceb3476, the
  remote code of BailingMoeForCausalLM): `num_experts` experts (BailingMoeConfig default 16), top `num_experts_per_tok`
  (2), each of `moe_intermediate_size`, `num_shared_experts` x `moe_intermediate_size` of shared expert without a gate;
  layers from `first_k_dense_replace` (0) on are MoE, the earlier ones an MLP of `intermediate_size`
  (BailingMoeDecoderLayer). The router (BailingMoeGate, no bias) takes a softmax over every expert and renormalises
  the top-k when `norm_topk_prob` (default true; false: Megatron's pre-softmax, `hf_router`). Attention is one fused
  QKV with a bias when `use_qkv_bias` and an output projection with one when `use_bias` (default true); the MLPs carry
  none. The attention dropout is `attention_dropout` (class default 0.1); the config's embedding_dropout,
  output_dropout and sliding window are read by no module. Ling 2.0 (BailingMoeV2ForCausalLM, whose configs keep
  model_type bailing_moe: QK norm, sigmoid router with expert bias and groups, partial RoPE, MTP) is refused.

Values are read with `hf_read`'s checked readers; a value the modelling code would reject is refused in one line
naming its key."""

from __future__ import annotations

from typing import Any

from .hf_read import fail, read_bool, read_int, read_whole
from .hf_router import router_probs_fields

# keys of specs.hf's `_dropout` (DROPOUT_KEYS): what a file may state that neither family's code reads
_HIDDEN_DROPOUTS = ("hidden_dropout", "resid_pdrop", "embd_pdrop", "dropout", "hidden_dropout_prob")
_NO_WINDOW = {"sliding_window": None, "sliding_window_layers": None, "sliding_window_pattern": None}
# Ling 2.0's keys (Megatron-Bridge bailing/configuration_bailing_moe_v2.py) that Ling 1.x's code does not read: a
# file that sets them describes a model modeling_bailing_moe.py does not build
_LING2_KEYS = {"use_qk_norm": False, "moe_router_enable_expert_bias": False, "score_function": "softmax",
               "num_nextn_predict_layers": 0, "partial_rotary_factor": 1.0}


def _experts(mt: str, experts: int, topk: int, pattern: list[int], notes: list[str]) -> dict:
    """The fields every family shares once its own keys are read, and the notes' summary line."""
    if topk > experts:
        raise fail(f"({mt}) the top-k ({topk}) exceeds the {experts} experts")
    if not any(pattern):
        raise fail(f"({mt}) no layer is mixture-of-experts under this config's layer settings; plan it as a dense "
                   f"model instead")
    shown = "every layer" if all(pattern) else f"{sum(pattern)} of {len(pattern)} layers"
    notes.append(f"mixture of experts: {experts} experts, top-{topk}, on {shown}; token dropping is not configured "
                 f"(dropless)")
    out: dict[str, Any] = dict(num_experts=experts, moe_router_topk=topk, moe_router_score_function="softmax")
    if not all(pattern):
        out["moe_layer_pattern"] = tuple(pattern)
    return out


def _dropout_unread(data: dict, keys: tuple[str, ...], why: str, notes: list[str]) -> None:
    stated = [k for k in keys if data.get(k)]
    if stated:
        notes.append(f"not read: {', '.join(stated)} ({why}); planned without that dropout")


def ernie_fields(data: dict, layers: int, notes: list[str]) -> dict:
    """An `ernie4_5_moe` config's expert layout and the attention fields its code fixes (module docstring)."""
    mt = "ernie4_5_moe"
    experts, topk = read_int(data, mt, "moe_num_experts", "num_experts"), read_int(data, mt, "moe_k", "num_experts_per_tok")
    expert_ffn, shared = read_int(data, mt, "moe_intermediate_size"), read_whole(data, mt, "moe_num_shared_experts", 2)
    start, end = read_whole(data, mt, "moe_layer_start_index", 1, None), read_whole(data, mt, "moe_layer_end_index", -1, None)
    interval = read_int(data, mt, "moe_layer_interval", default=1)
    end = layers - 1 if end == -1 else end
    pattern = [int((i + 1) % interval == 0 and start <= i <= end) for i in range(layers)]
    out = _experts(mt, experts, topk, pattern, notes)
    out.update(moe_ffn_hidden_size=expert_ffn,
               ffn_hidden_size=read_int(data, mt, "intermediate_size") if not all(pattern) else expert_ffn)
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared * expert_ffn
    bias = read_bool(data, mt, "use_bias", False)
    out.update(add_bias_linear=bias, add_qkv_bias=bias, rotary_interleaved=True, dropout=0.0, attention_dropout=0.0)
    if bias and not read_bool(data, mt, "tie_word_embeddings", True):
        notes.append("not modelled: the output layer's bias (use_bias; vocab_size parameters)")
    _dropout_unread(data, ("attention_dropout",) + _HIDDEN_DROPOUTS, "modeling_ernie4_5_moe.py applies no dropout",
                    notes)
    if data.get("moe_capacity") is not None:
        notes.append("not read: moe_capacity (Baidu's own code's token capacity; transformers' "
                     "Ernie4_5_MoeSparseMoeBlock computes every routed token, as planned)")
    if data.get("num_nextn_predict_layers"):
        notes.append(f"not planned: the {data['num_nextn_predict_layers']} MTP layer(s) of num_nextn_predict_layers "
                     f"(transformers' Ernie4_5_MoeForCausalLM builds none and Megatron-Bridge's ernie bridge none)")
    return out


def _refuse_ling2(data: dict, mt: str) -> None:
    archs = data.get("architectures") or []
    arch = str((archs if isinstance(archs, list) else [archs])[0]) if archs else ""
    set_keys = [k for k, off in _LING2_KEYS.items() if data.get(k) not in (None, off)]
    if "V2" in arch or data.get("model_type") == "bailing_moe_v2" or set_keys:
        what = ", ".join(set_keys) if set_keys else (arch or "model_type bailing_moe_v2")
        raise fail(f"({mt}) {what}: a Ling 2.0 model (QK norm, sigmoid router with expert bias and groups, partial "
                   f"RoPE, MTP layers), which solveplan does not read; Ling 1.x configs (BailingMoeForCausalLM) are read")


def bailing_fields(data: dict, layers: int, notes: list[str]) -> dict:
    """A Ling 1.x `bailing_moe` config's expert layout and the attention fields of its code (module docstring)."""
    mt = "bailing_moe"
    _refuse_ling2(data, mt)
    if "num_experts" in data and data["num_experts"] is None:
        raise fail(f"({mt}) 'num_experts' is null: BailingMoeDecoderLayer then builds no experts; plan the model "
                   f"as a dense one")
    if "num_experts" not in data and "n_routed_experts" in data:
        raise fail(f"({mt}) names its experts 'n_routed_experts', which BailingMoeConfig does not read (it would "
                   f"build its default 16): state num_experts")
    experts = read_int(data, mt, "num_experts", default=16)
    topk, expert_ffn = read_int(data, mt, "num_experts_per_tok", default=2), read_int(data, mt, "moe_intermediate_size")
    first, shared = read_whole(data, mt, "first_k_dense_replace", 0), read_whole(data, mt, "num_shared_experts", 0)
    pattern = [int(i >= first) for i in range(layers)]
    out = _experts(mt, experts, topk, pattern, notes)
    dense = read_int(data, mt, "intermediate_size", default=None)
    if dense is None and not all(pattern):
        raise fail(f"({mt}) is missing 'intermediate_size', the MLP of its first {first} layer(s); it is required")
    out.update(moe_ffn_hidden_size=expert_ffn, ffn_hidden_size=dense or expert_ffn,
               **router_probs_fields(data, mt, "softmax", topk, True, None, notes))
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared * expert_ffn
    out.update(add_bias_linear=False, add_qkv_bias=read_bool(data, mt, "use_qkv_bias", False), dropout=0.0,
               attention_dropout=0.1 if data.get("attention_dropout") is None else float(data["attention_dropout"]),
               **_NO_WINDOW)
    if read_bool(data, mt, "use_bias", True):
        notes.append("not modelled: the attention output projection's bias (use_bias; the MLPs carry none, so "
                     "Megatron-LM's add_bias_linear, which would add theirs, stays off; hidden_size parameters a layer)")
    if read_bool(data, mt, "norm_head", False):
        notes.append("not modelled: norm_head (the output layer's weight divided by its column norms in training; "
                     "elementwise, no parameters)")
    _dropout_unread(data, _HIDDEN_DROPOUTS, "modeling_bailing_moe.py reads attention_dropout only", notes)
    if read_bool(data, mt, "use_sliding_window", False):
        notes.append("not read: use_sliding_window (modeling_bailing_moe.py builds no window: full causal attention)")
    return out


FIELDS = {"ernie4_5_moe": ernie_fields, "bailing_moe": bailing_fields}
