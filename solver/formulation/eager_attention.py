"""torchtitan's attention variants beyond its Llama GQA block (frameworks.TORCHTITAN_SAVED, _TRAFFIC, ops_per_layer):
q/k norms (its qwen3 decoder), multi-latent attention (its deepseek_v3 decoder) and attention sinks (its gpt_oss
decoder), what each keeps, moves and dispatches beyond the profile's count -- one place for all of them, which the
dense layer (coefficients.py) and the MoE layer (moe_layer.py) both add.

Q/K norms (torchtitan/models/common/attention.py GQAttention `q_norm`, `k_norm`, nn.RMSNorm over each head's row):
the same composite norm as the layer norms on q and k: the fp32 upcast and the fp32 normalised output (8 per
element) and the rstd (4 per head row), as torch 2.13's nn.RMSNorm saves them (saved_tensors_hooks, CPU); 36 bytes
per element moved; 9 + 22 aten ops per norm (TorchDispatchMode, CPU).

GPT-OSS (torchtitan/models/gpt_oss/model.py `Attention`, b5bcd76): the kernel returns its log-sum-exp, and the sinks
rescale the output by sigmoid(lse - sink) (`apply_attention_sink_rescale`): the sigmoid keeps its fp32 output (4 per
head), the product keeps the bf16 scale (2 per head) and the output, and the projection keeps the rescaled output:
2 q + 6 heads bytes per token more than GQA's, and 9 / 19 more aten ops (measured on the module on CPU against
torchtitan's fused-QKV GQA module, the same stand-in core: 45 / 60 against 36 / 41).

Multi-latent attention (torchtitan/models/deepseek_v3/model.py `Attention`,
b5bcd76): what it keeps, moves and dispatches beyond what the torchtitan profile counts for a GQA block of the same
widths (frameworks.TORCHTITAN_SAVED, with `moe.attention_geometry`'s MLA widths a (d_qk + d_v) / 2 for Q, K, V and
the output, and the latents `2 (r_q + r_kv + d_rope)` per token that coefficients.py keeps for every stack).

Saved per token, measured on CPU with the real module (the core replaced by a flash-style kernel that keeps q, k, v,
the output and its fp32 log-sum-exp, as torchtitan's varlen and flex kernels do; two shapes, with and without
q_lora; benchmarks/torchtitan_moe_saved.py, tests/test_torchtitan_moe_pricing.py): the composite RMSNorms of the latents keep their fp32 upcast and
normalised output (8 per element) and a rstd (4) beside the bf16 output the up-projection saves -- 10 r_q + 4 (with
q_lora) + 10 r_kv + 4 --; the KV up-projection's output is kept whole, a (d_nope + d_v), because V is a view of it,
so its K-nope half (2 a d_nope) stays beside the concatenated K; q and k (2 a d_qk each), the output (2 a d_v), the
log-sum-exp (4 a) and k_pe's rotary view (d_rope bytes). Against the GQA count this is 2 a d_nope / tp more per
head and 8 r_q + 4 + 8 r_kv + 4 more for the latent norms (the latents' own bf16 copies already counted); d_rope is
left in the GQA count's favour (an upper bound by d_rope bytes).

Traffic: each latent norm is the composite RMSNorm the layer norms are (36 bytes per element read + written); the
rest (rope on the rotary dims, the concatenations) stays the GQA count's. Aten ops: the MLA module dispatches 50 / 83
(forward / backward) without q_lora and 61 / 111 with it, against torchtitan's GQA module's 35 / 55 (TorchDispatchMode,
CPU, the same two-op stand-in core; benchmarks/measured/torchtitan-moe-cpu/moe_block.json `mla_cases`).
"""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec

NORM_SAVED_PER_ELEMENT, NORM_SAVED_PER_ROW = 8.0, 4.0  # fp32 upcast + normalised output; rstd
NORM_TRAFFIC_PER_ELEMENT = 36.0  # frameworks.TORCHTITAN_TRAFFIC's norm
QK_NORM_OPS = (2 * 9, 2 * 22)  # (forward, backward): the q and k norms
MLA_OPS = {False: (50, 83), True: (61, 111)}  # with q_lora: (forward, backward)
GQA_OPS = (35, 55)
SINK_OPS = (9, 19)  # (forward, backward) more than GQA's, GPT-OSS's sink rescale


def is_mla(model: ModelSpec) -> bool:
    return bool(model.multi_latent_attention) and not (model.is_dsa or model.is_dsv4)


def has_sinks(model: ModelSpec) -> bool:
    return model.softmax_type == "learnable" and not model.multi_latent_attention


def _qk_widths(model: ModelSpec, tp):
    """(q, kv, head rows of both) per token on one GPU of a model with q/k norms, else zeros."""
    if not model.qk_norm or model.multi_latent_attention:
        return 0.0, 0.0, 0.0
    t = np.asarray(tp, dtype=np.float64)
    q, kv, a = model.q_hidden_size, model.kv_hidden_size, model.num_attention_heads
    return q / t, kv / t, a * (1 + kv / q) / t


def saved_extra_bytes(model: ModelSpec, tp):
    """Bytes per token one layer's attention keeps beyond the GQA count on one GPU (module docstring): its q/k norms,
    MLA's, or the sinks' rescale; 0 for a plain GQA block."""
    q, kv, rows = _qk_widths(model, tp)
    norms = NORM_SAVED_PER_ELEMENT * (q + kv) + NORM_SAVED_PER_ROW * rows
    if has_sinks(model):
        return norms + (2.0 * model.q_hidden_size + 6.0 * model.num_attention_heads) / np.asarray(tp, dtype=np.float64)
    if not is_mla(model):
        return norms
    r_kv, d_nope, _, _ = model.mla_dims
    r_q = model.q_lora_rank or 0
    latent = NORM_SAVED_PER_ELEMENT * (r_q + r_kv) + NORM_SAVED_PER_ROW * ((r_q > 0) + 1)
    return latent + 2.0 * model.num_attention_heads * d_nope / np.asarray(tp, dtype=np.float64)


def traffic_extra_bytes(model: ModelSpec, tp):
    """Forward elementwise bytes per token beyond the GQA count on one GPU: the q/k norms, or MLA's latent norms
    (replicated over TP)."""
    q, kv, _ = _qk_widths(model, tp)
    latent = (model.q_lora_rank or 0) + model.mla_dims[0] if is_mla(model) else 0
    return NORM_TRAFFIC_PER_ELEMENT * (q + kv + latent)


def ops_extra(model: ModelSpec) -> tuple[int, int]:
    """(forward, backward) aten ops beyond torchtitan's GQA module: the q/k norms, the MLA module's, or the sinks'
    rescale."""
    qk = QK_NORM_OPS if model.qk_norm and not model.multi_latent_attention else (0, 0)
    if has_sinks(model):
        variant = SINK_OPS
    elif is_mla(model):
        mla = MLA_OPS[bool(model.q_lora_rank)]
        variant = (mla[0] - GQA_OPS[0], mla[1] - GQA_OPS[1])
    else:
        variant = (0, 0)
    return qk[0] + variant[0], qk[1] + variant[1]
