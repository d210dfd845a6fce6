"""Megatron-LM's selective recomputation by module (`--recompute-granularity selective
--recompute-modules ...`): what each module frees from the activations a layer keeps and what
its recomputation costs in the backward, for the dense and the MoE layer.

Source: Megatron-LM megatron/core/transformer/transformer_config.py (`recompute_modules`, at
d98e8a6): "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts";
default ["core_attn"]. "moe_act", "layernorm" and "mla_up_proj" use output-discarding
checkpointing (the module's output is freed after its consumer saved what it needs, and rebuilt
from the kept input before the backward), "core_attn", "mlp", "moe" and "shared_experts" normal
checkpointing (only the module's input is kept; its forward runs again in the backward, one
layer at a time). transformer_layer.py: "layernorm" applies to norms that are modules of their
own (`input_layernorm` unless it is an IdentityOp, i.e. fused into the QKV linear, and
`pre_mlp_layernorm`), "mlp" to dense MLPs only (`if not self.is_moe_layer`); moe_layer.py:
"moe" recomputes the whole MoE layer (router, dispatch, experts, combine), "shared_experts"
the shared experts. gpt_layer_specs.py (Transformer Engine spec): the attention norm is a
separate module with multi-latent attention and fused into `linear_qkv` otherwise; the pre-MLP
norm is separate in MoE layers, fused into `linear_fc1` in dense ones.

What each module frees and costs, per token of the rank (bytes; seconds at the attained HBM
bandwidth or GEMM rate, as the forward prices them):
- core_attn: the attention core's score terms without flash attention (flash keeps only its
  softmax statistics either way), its forward again (`core_fwd`) -- the formulation's
  "selective" as before;
- layernorm: the outputs of the separate norms (h each, saved as the next linear's input in
  the linear-input bytes), rebuilt by reading the input and writing the output (2h + 2h);
- mla_up_proj: Q, K and V of the core (a d_qk, a d_qk, a d_v over tp, bf16) rebuilt by the two
  up-projection GEMMs (and RoPE, which reads and writes Q and K again);
- mlp (dense layers): the MLP's fc1 output and activation, its forward again;
- moe_act (MoE layers): the experts' activation output (f_e/etp per routed copy, fc2's saved
  input) rebuilt by the activation (reads (2|1) f_e, writes f_e, quantised again under FP8);
- shared_experts: the shared experts' activations, their forward again;
- moe: the MoE block's activations, its forward again including the dispatch and combine
  all-to-alls (`moe_layer.moe_layer_terms`).
"""

from __future__ import annotations

MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
MEGATRON_DEFAULT = ("core_attn",)


def modules_of(recompute_modules) -> frozenset:
    """The module set of a job (None: Megatron's default, core_attn only)."""
    mods = frozenset(MEGATRON_DEFAULT if recompute_modules is None else recompute_modules)
    unknown = mods - set(MODULES)
    if unknown:
        raise ValueError(f"unknown recompute module(s) {sorted(unknown)}; Megatron's are {', '.join(MODULES)}")
    return mods


def separate_norms(model, moe_layer: bool) -> int:
    """Norms of a layer that are modules of their own in Megatron's Transformer Engine spec (the
    ones "layernorm" recomputes): the attention norm with multi-latent attention, the pre-MLP
    norm in MoE layers (module docstring)."""
    return int(bool(model.multi_latent_attention)) + int(moe_layer)


def norm_recompute(model, mods, moe_layer: bool, *, tokens, hidden, rep, linear_input_bytes, hbm):
    """(freed bytes, recompute seconds) of "layernorm" for one layer and micro-batch."""
    if "layernorm" not in mods:
        return 0.0, 0.0
    n = separate_norms(model, moe_layer)
    per_token = hidden / rep
    return n * linear_input_bytes * tokens * per_token, n * 4.0 * 2 * tokens * per_token / hbm


def mla_up_recompute(model, mods, *, tokens, tp, up_fwd_s, hbm):
    """(freed bytes, recompute seconds) of "mla_up_proj" for one layer and micro-batch: Q, K, V
    of the core (bf16) and the up-projection GEMMs' forward `up_fwd_s` plus RoPE on Q and K."""
    if "mla_up_proj" not in mods or not model.multi_latent_attention:
        return 0.0, 0.0
    a = model.num_attention_heads
    d_qk = model.qk_head_dim + model.qk_pos_emb_head_dim
    qkv = a * (2 * d_qk + (0 if model.is_dsv4 else model.v_head_dim)) / tp  # DeepSeek-V4: Q up and rotated Q
    rope = 2.0 * 2 * a * model.qk_pos_emb_head_dim / tp  # read + write the rotary part of Q and K
    return 2.0 * tokens * qkv, up_fwd_s + 2.0 * tokens * rope / hbm
