"""The hybrid keys of a Hugging Face config.json: the Mamba-Transformer ones of `nemotron_h` (Nemotron-H,
Nemotron 3), as transformers' NemotronHConfig and Megatron-Bridge's `NemotronHBridge`
(src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py at 067f987) read them, and the Gated DeltaNet ones of
Qwen3-Next and Qwen3.5 (`gdn_fields`).

Nemotron-H:

- `hybrid_override_pattern` -> `hybrid_layer_pattern` (one symbol per layer: M Mamba-2,
  * attention, - MLP, E MoE; Megatron --hybrid-layer-pattern);
- `ssm_state_size`, `mamba_head_dim`, `mamba_num_heads`, `n_groups`, `conv_kernel`,
  `chunk_size` -> the Mamba-2 mixer (Megatron --mamba-state-dim, --mamba-head-dim,
  --mamba-num-heads, --mamba-num-groups);
- `n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
  `moe_shared_expert_intermediate_size` -> the MoE layers (E): sigmoid router scores with the
  expert bias (Megatron-Bridge's Nemotron 3 recipes: moe_router_score_function "sigmoid",
  moe_router_enable_expert_bias True); `intermediate_size` stays the MLP layers' (-) width;
- `moe_latent_size` -> LatentMoE (Nemotron 3 Super and Ultra: the routed experts in a latent width,
  NemotronHBridge `provider.moe_latent_size = hf_config.moe_latent_size`).

- transformers' newer NemotronHConfig form (Nemotron 3 Ultra's config.json): `layers_block_type`, one of
  "mamba" / "attention" / "mlp" / "moe" per layer, in place of the pattern string (its length the
  layer count when `num_hidden_layers` is absent), and `mtp_layers_block_type` in place of
  `mtp_hybrid_override_pattern` (`pattern_from_block_types`);
- `num_nextn_predict_layers`, `mtp_hybrid_override_pattern`, `mtp_use_repeated_layer` -> the MTP
  block (`mtp_num_layers`, `mtp_hybrid_layer_pattern`, `mtp_use_repeated_layer`), as NemotronHBridge's
  `_hf_mtp_config` and provider_bridge read them (a depth count needs the pattern; repeated unless
  the config says false). Nemotron 3 Super's config holds one shared "*E" block; its Megatron-Bridge
  recipes run it for 2 depths (recipes/nemotronh/h100/nemotron_3_super.py: mtp_num_layers 2), which
  the catalog entry models/nemotron3-super.yaml states."""

from __future__ import annotations

from typing import Any

from .hf_read import fail, read_int
from .hf_router import router_probs_fields
from .hybrid import HYBRID_SYMBOLS

# a Qwen3-Next / Qwen3.5 decoder layer's token mixer (transformers `layer_types`) as a hybrid layer symbol
GDN_MIXERS = {"linear_attention": "G", "full_attention": "*"}

# transformers NemotronHConfig's block types (no Gated DeltaNet there): "mamba" -> "M", ...
BLOCK_SYMBOLS = {kind: symbol for symbol, kind in HYBRID_SYMBOLS.items() if kind != "gdn"}


def pattern_from_block_types(data: dict) -> dict:
    """`data` with the pattern strings (`hybrid_override_pattern`, `mtp_hybrid_override_pattern`) and the layer
    count built from the list form (`layers_block_type`, `mtp_layers_block_type`) where only that is given."""
    out = dict(data)
    for key, pattern_key in (("layers_block_type", "hybrid_override_pattern"),
                             ("mtp_layers_block_type", "mtp_hybrid_override_pattern")):
        blocks = data.get(key)
        if blocks is None or data.get(pattern_key) is not None:
            continue
        if not isinstance(blocks, list) or not blocks or any(b not in BLOCK_SYMBOLS for b in blocks):
            raise fail(f"(nemotron_h) '{key}' must be a list of {', '.join(BLOCK_SYMBOLS)} (got {blocks!r:.80})")
        out[pattern_key] = "".join(BLOCK_SYMBOLS[b] for b in blocks)
    if out.get("num_hidden_layers") is None and isinstance(out.get("hybrid_override_pattern"), str):
        out["num_hidden_layers"] = len(out["hybrid_override_pattern"])
    return out


def hybrid_fields(data: dict, mt: str, layers: int, notes: list[str]) -> dict:
    """The ModelSpec fields of a `nemotron_h` config beyond the Transformer's (module docstring)."""
    pattern = data.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers:
        raise fail(f"({mt}) 'hybrid_override_pattern' must be a string of one symbol per layer ({layers})")
    mtp = data.get("num_nextn_predict_layers") or 0
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise fail(f"({mt}) 'num_nextn_predict_layers' must be a non-negative integer (got {mtp!r})")
    mtp_pattern = data.get("mtp_hybrid_override_pattern")
    if mtp and not (isinstance(mtp_pattern, str) and mtp_pattern):
        raise fail(f"({mt}) num_nextn_predict_layers {mtp} needs 'mtp_hybrid_override_pattern', the layers of one MTP "
                   f"depth (NemotronHBridge `_hf_mtp_config` refuses it too)")
    out: dict[str, Any] = dict(
        hybrid_layer_pattern=pattern, mamba_state_dim=read_int(data, mt, "ssm_state_size"),
        mamba_head_dim=read_int(data, mt, "mamba_head_dim"), mamba_num_heads=read_int(data, mt, "mamba_num_heads"),
        mamba_num_groups=read_int(data, mt, "n_groups"), mamba_conv_kernel=read_int(data, mt, "conv_kernel", default=4),
        mamba_chunk_size=read_int(data, mt, "chunk_size", default=128))
    if mtp:
        out.update(mtp_num_layers=mtp, mtp_hybrid_layer_pattern=mtp_pattern,
                   mtp_use_repeated_layer=bool(data.get("mtp_use_repeated_layer", True)))
        notes.append(f"MTP: {mtp} depth(s) of {mtp_pattern!r}" + (", one shared set of weights"
                                                                     if out["mtp_use_repeated_layer"] else ""))
    experts = data.get("n_routed_experts") or 0
    if "E" in pattern:
        experts = read_int(data, mt, "n_routed_experts")
        out.update(num_experts=experts, moe_router_topk=read_int(data, mt, "num_experts_per_tok"),
                   moe_ffn_hidden_size=read_int(data, mt, "moe_intermediate_size"),
                   moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True)
        latent = read_int(data, mt, "moe_latent_size", default=None)
        if latent:
            out["moe_latent_size"] = latent
        shared = read_int(data, mt, "moe_shared_expert_intermediate_size", default=None)
        if shared and data.get("n_shared_experts", 1):
            out["moe_shared_expert_intermediate_size"] = shared
        # NemotronHConfig: norm_topk_prob and routed_scaling_factor (Megatron-Bridge's nemotron_h_bridge.py maps them)
        out.update(router_probs_fields(data, mt, "sigmoid", out["moe_router_topk"], True, 1.0, notes))
    counts = {kind: pattern.count(sym) for sym, kind in (("M", "Mamba-2"), ("*", "attention"), ("-", "MLP"),
                                                          ("E", "MoE"))}
    notes.append("hybrid layers: " + ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
                 + (f"; {experts} experts, top-{out['moe_router_topk']}" if "E" in pattern else ""))
    return out


def gdn_fields(data: dict, mt: str, layers: int, moe_layers: list[int], notes: list[str]) -> dict:
    """The ModelSpec fields of a Qwen3-Next / Qwen3.5 config (transformers Qwen3NextConfig, Qwen3_5TextConfig,
    Qwen3_5MoeTextConfig; Megatron-Bridge's qwen3_next_bridge.py and qwen35_bridge.py at 067f987): each decoder
    layer is two hybrid layers -- its token mixer, G (Gated DeltaNet) or * (gated attention) by `layer_types`
    (else every `full_attention_interval`-th layer attention, the configuration class's rule), then E (MoE, by
    `moe_layers`) or - (MLP) -- so Megatron's layer count is twice the config's; `linear_*` -> the Gated DeltaNet's
    heads and conv; the attention's output gate (`attn_output_gate`; Qwen3-Next's modelling always builds it);
    `mtp_num_hidden_layers` MTP depths of one gated-attention layer with the decoder's MLP kind (Qwen3.5)."""
    types = data.get("layer_types")
    if types is None:
        every = read_int(data, mt, "full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(t not in GDN_MIXERS for t in types):
        raise fail(f"({mt}) 'layer_types' must list {', '.join(GDN_MIXERS)} for each of the {layers} layers")
    mlp = ["E" if m else "-" for m in moe_layers]
    pattern = "".join(GDN_MIXERS[t] + m for t, m in zip(types, mlp))
    gate = data.get("attn_output_gate", True)
    if not isinstance(gate, bool):
        raise fail(f"({mt}) 'attn_output_gate' must be true or false (got {gate!r})")
    out: dict[str, Any] = dict(
        num_layers=2 * layers, hybrid_layer_pattern=pattern, attention_output_gate=gate,
        gdn_num_key_heads=read_int(data, mt, "linear_num_key_heads"),
        gdn_num_value_heads=read_int(data, mt, "linear_num_value_heads"),
        gdn_key_head_dim=read_int(data, mt, "linear_key_head_dim"),
        gdn_value_head_dim=read_int(data, mt, "linear_value_head_dim"),
        gdn_conv_kernel=read_int(data, mt, "linear_conv_kernel_dim", default=4))
    gdn = pattern.count("G")
    after = "MoE block" if all(moe_layers) else "MLP" if not any(moe_layers) else "MoE block or MLP"
    notes.append(f"hybrid: {gdn} Gated DeltaNet and {layers - gdn} {'gated ' if gate else ''}attention layers, each "
                 f"followed by its {after}: {2 * layers} Megatron layers")
    mtp = read_int(data, mt, "mtp_num_hidden_layers", default=0)
    if mtp:
        out.update(mtp_num_layers=mtp, mtp_hybrid_layer_pattern="*" + mlp[-1])
        notes.append(f"MTP: {mtp} depth(s) of one gated-attention layer and its {'MoE block' if mlp[-1] == 'E' else 'MLP'}")
    return out
