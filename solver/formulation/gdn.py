"""One Gated DeltaNet layer (Megatron-LM's `GatedDeltaNet`, megatron/core/ssm/gated_delta_net/gdn.py and
common.py at d98e8a6; Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks", arXiv:2412.06464) on one GPU,
per micro-batch: its FLOPs, kernel times and saved activations. A hybrid model's G layer (`hybrid.py`;
Qwen3-Next, Qwen3.5).

The layer runs:
1. the pre-norm, fused into in_proj (Transformer Engine's LayerNormColumnParallelLinear);
2. in_proj, a column-parallel GEMM h -> [q, k, v, z, beta, alpha] of width 2 Hk dk + 2 Hv dv + 2 Hv (over tp:
   Hk/tp key and Hv/tp value heads);
3. the depthwise causal conv1d with SiLU over [q, k, v] (2 Hk dk + Hv dv channels, FLA's `causal_conv1d`);
4. `_prepare_input_for_gated_delta_rule` (one fused kernel): the L2 norm of q and k, their repetition to the
   Hv value heads (Hv / Hk copies), the decay g = -exp(A_log) softplus(alpha + dt_bias) in fp32 and
   beta = sigmoid(beta);
5. FLA's `chunk_gated_delta_rule` at chunk length C = 64 (flash-linear-attention fla/ops/gated_delta_rule/chunk.py
   at bc3b101): forward `chunk_local_cumsum(g)`, `chunk_gated_delta_rule_fwd_intra` (beta K K^T within a chunk,
   its triangular solve A, and w = A beta k, u = A beta v), `chunk_gated_delta_rule_fwd_h` (the dk x dv state
   of every chunk h and the corrected values v_new), `chunk_fwd_o` (o = q h + (q k^T masked) v_new);
6. the output RMSNorm over each value head gated by silu(z) (`_apply_gated_norm`, one fused kernel);
7. out_proj, a row-parallel GEMM Hv dv -> h: one TP all-reduce (or reduce-scatter with sequence parallelism)
   per pass, as an attention block's.

The chunked rule's FLOPs per token and value head, forward: K K^T within the chunk 2 C dk, the solve C^2/3,
w and u 2 C (dk + dv), the state pass (w h and k^T v_new) 4 dk dv, the output (q h, q k^T, its product with
v_new) 2 dk dv + 2 C (dk + dv); its backward recomputes w, u and h before the gradients: three times the
forward, as the Mamba scan's (`mamba.py`). Its kernels are memory-bound at the sizes trained (Qwen3.5: ~180
kFLOP against ~7 kB per value head and token), so each pass is priced as a roofline: the longer of its FLOPs
at the GPU's BF16 matmul rate and its HBM bytes (the Triton kernels run in BF16 whatever the precision recipe),
the rule's bytes at the fraction of the HBM rate FLA's own published timings show (`RULE_HBM_EFFICIENCY`), the
streaming kernels around it (conv, preparation, gated norm) at the HBM rate.
The bytes are counted tensor by tensor from the functions' arguments and results (`mixer_bytes_per_token`), per
token on one TP rank, with QK = Hv dk (q and k after the repetition), V = Hv dv, Cc = the conv channels, S = the
chunk states Hv dk dv / C and A = Hv C (the solve's matrices, fp32); the decay and beta (Hv per token) are left
out. Megatron's FLOPs count (training.py `gdn_layer_flops`) takes the rule as 4 Hv dv^2 per token: the MFU
convention follows it (`gdn_layer_fwd_flop_per_token`)."""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from .layer_terms import cp_a2a_s
from .memory import BF16_BYTES, FP32_BYTES

CHUNK = 64  # gdn.py `self.chunk_size`, the chunk FLA's kernels run at


def gdn_linears(model: ModelSpec, tp) -> list[tuple]:
    """(N, K) of the two GEMMs on one TP rank: in_proj (2 Hk dk + 2 Hv dv + 2 Hv)/tp x h, out_proj h x Hv dv/tp
    (common.py `in_proj`, `out_proj`)."""
    return [(model.gdn_in_proj_width / tp, model.hidden_size), (model.hidden_size, model.gdn_value_width / tp)]


def _dims(model: ModelSpec, tp):
    """(value heads on the rank, dk, dv, q/k width after the repetition, v width, conv channels) on one TP rank."""
    hv, dk, dv = model.gdn_num_value_heads, model.gdn_key_head_dim, model.gdn_value_head_dim
    assert hv is not None and dk is not None and dv is not None, f"{model.name} has no Gated DeltaNet layers"
    t = np.asarray(tp, dtype=np.float64)
    heads = hv / t
    return heads, dk, dv, heads * dk, heads * dv, model.gdn_conv_channels / t


# The chunked rule's kernels reach this fraction of the HBM rate the roofline assumes (`GPUSpec.hbm_efficiency` of the
# datasheet's): fitted by benchmarks/gdn_kernel_fit.py (calibration/gdn_fit.py) on flash-linear-attention's own
# published timings of chunk_gdn on a GB200 (README "Benchmarks", benchmarks/measured/fla-gdn-gb200), with a
# per-call floor -- the host's, which a training step's other layers hide -- fitted beside it and not priced.
RULE_HBM_EFFICIENCY = 0.66


def rule_flop_per_token(heads, dk, dv):
    """Forward FLOPs per token of the chunked delta rule over `heads` value heads (module docstring):
    heads x (6 dk dv + 2 C dk + 4 C (dk + dv) + C^2 / 3)."""
    C = CHUNK
    return heads * (6.0 * dk * dv + 2.0 * C * dk + 4.0 * C * (dk + dv) + C * C / 3.0)


def rule_bytes_per_token(heads, dk, dv):
    """(forward, backward) HBM bytes per token of FLA's `chunk_gated_delta_rule` over `heads` value heads, from the
    functions' tensors (fla/ops/gated_delta_rule/chunk.py; BF16 unless named), with QK = heads dk, V = heads dv,
    S = heads dk dv / C, A = heads C (fp32): forward -- fwd_intra reads k, v, writes w, u, A; fwd_h reads k, w, u,
    writes h and v_new; fwd_o reads q, k, v_new, h, writes o: 6 QK + 6 V + 2 S and A. Backward -- recompute_w_u,
    fwd_h again, bwd_dv_local, bwd_dhu, bwd_dqkwg, wy_bwd and the dk sum (`mixer_bytes_per_token`): 21 QK + 15 V +
    4 S and A twice."""
    QK, V, S, A = heads * dk, heads * dv, heads * dk * dv / CHUNK, heads * CHUNK
    return (BF16_BYTES * (6 * QK + 6 * V + 2 * S) + FP32_BYTES * A,
            BF16_BYTES * (21 * QK + 15 * V + 4 * S) + 2 * FP32_BYTES * A)


def rule_s(tokens, heads, dk, dv, *, flop_per_s: float, efficiency: float, hbm_bytes_per_s: float,
           kernel_efficiency: float = RULE_HBM_EFFICIENCY):
    """(forward, backward) of the chunked rule for `tokens`: the roofline of its FLOPs at the BF16 matmul rate
    (backward three times the forward's) and its bytes at the HBM rate times `kernel_efficiency`."""
    T = np.asarray(tokens, dtype=np.float64)
    flop_s = T * rule_flop_per_token(heads, dk, dv) / (flop_per_s * efficiency)
    fwd_b, bwd_b = rule_bytes_per_token(heads, dk, dv)
    rate = hbm_bytes_per_s * kernel_efficiency
    return np.maximum(flop_s, T * fwd_b / rate), np.maximum(3.0 * flop_s, T * bwd_b / rate)


def conv_flop_per_token(model: ModelSpec, tp=1):
    """Forward FLOPs per token of the depthwise conv1d on one TP rank: 2 kernel Cc."""
    return 2.0 * model.gdn_conv_kernel * model.gdn_conv_channels / np.asarray(tp, dtype=np.float64)


def rule_fwd_flop_per_token(model: ModelSpec, tp=1):
    """Forward FLOPs per token of the conv1d and the chunked delta rule on one TP rank (module docstring):
    Hv/tp value heads x (6 dk dv + 2 C dk + 4 C (dk + dv) + C^2 / 3), and the depthwise conv's 2 kernel Cc."""
    heads, dk, dv, _, _, _ = _dims(model, tp)
    return rule_flop_per_token(heads, dk, dv) + conv_flop_per_token(model, tp)


def mixer_bytes_per_token(model: ModelSpec, tp=1):
    """(forward, backward) HBM bytes per token between the two GEMMs on one TP rank, BF16 elements unless named
    (module docstring; fla/ops/gated_delta_rule/chunk.py `chunk_gated_delta_rule_fwd` / `_bwd`):
    forward -- conv1d: read and write Cc; prepare: read Cc, write q, k (2 QK) and v; the rule
    (`rule_bytes_per_token`); the gated norm: read o and z, write y (3 V). In all 3 Cc + 8 QK + 10 V + 2 S, and A
    4 bytes.
    backward -- the rule's (recompute_w_u (read k, v, A; write w, u), fwd_h again (k, w, u; h, v_new), bwd_dv_local
    (q, k, do; dv), bwd_dhu (q, k, w, do, dv; dh, dv), bwd_dqkwg (q, k, w, v_new, dv, do, h, dh; dq, dk, dw), wy_bwd
    (k, dw, v, du; dk, dv), the dk sum (2 reads, 1 write)), the gated norm's (o, z, dy; do, dz: 5 V), prepare's (q,
    k, dq, dk; the conv output's gradient Cc) and the conv's (x, dy; dx: 3 Cc). In all 4 Cc + 25 QK + 20 V + 4 S,
    and A read twice."""
    heads, dk, dv, QK, V, Cc = _dims(model, tp)
    rule_f, rule_b = rule_bytes_per_token(heads, dk, dv)
    return (rule_f + BF16_BYTES * (3 * Cc + 2 * QK + 4 * V), rule_b + BF16_BYTES * (4 * Cc + 4 * QK + 5 * V))


def mixer_s(model: ModelSpec, tokens, tp, *, flop_per_s: float, efficiency: float, hbm_bytes_per_s: float):
    """(forward, backward) of the kernels between the two GEMMs on one GPU: the chunked rule (`rule_s`, its bytes
    at `RULE_HBM_EFFICIENCY` of the HBM rate) and the conv1d, the preparation and the gated norm, streaming kernels
    at the HBM rate (module docstring)."""
    heads, dk, dv, _, _, _ = _dims(model, tp)
    T = np.asarray(tokens, dtype=np.float64)
    rule_f, rule_b = rule_s(T, heads, dk, dv, flop_per_s=flop_per_s, efficiency=efficiency,
                            hbm_bytes_per_s=hbm_bytes_per_s)
    all_f, all_b = mixer_bytes_per_token(model, tp)
    own_f, own_b = rule_bytes_per_token(heads, dk, dv)
    return rule_f + T * (all_f - own_f) / hbm_bytes_per_s, rule_b + T * (all_b - own_b) / hbm_bytes_per_s


def gdn_cp_a2a_s(model: ModelSpec, cluster, tokens, tp, cp, recompute):
    """Context parallelism of one Gated DeltaNet layer per micro-batch (0 without): each CP rank holds `tokens`
    of the sequence and hands the others their heads by an all-to-all over the CP group (ranks tp apart) -- before
    the conv, in_proj's output [q, k, v, z, beta, alpha] (gated_delta_net/common.py `a2a_cp_to_hp`), after the
    gated norm, its output back (`a2a_hp_to_cp`) -- so the conv and the chunked rule run on the whole sequence
    for 1/cp of the rank's heads (the same work per rank: `mixer_s` on `tokens` and tp). Backward the same two
    exchanges of the gradients, the forward's again under full recomputation; nothing overlaps them (the kernels
    wait for their inputs): attention's all-to-all CP rule (`layer_terms.cp_a2a_s`) on these bytes."""
    rank = BF16_BYTES * np.asarray(tokens, dtype=np.float64) * (model.gdn_in_proj_width + model.gdn_value_width)
    return cp_a2a_s(cluster, qkvo_chunk_bytes=rank / np.asarray(tp, dtype=np.float64), cp=np.asarray(cp), tp=tp,
                    recompute=np.asarray(recompute))


def gdn_activation_bytes(model: ModelSpec, tokens, tp, sp_degree, linear_input_bytes: float):
    """Activations one Gated DeltaNet layer keeps for backward on one GPU, per micro-batch: the layer input (2h,
    the residual and the norm's input) and in_proj's saved input (the norm output, h at `linear_input_bytes`),
    replicated over TP unless sequence parallel; on the rank's heads, the conv's input and output (2 Cc), the output
    gate z and beta / alpha (V + 2 Hv), what `ChunkGatedDeltaRuleFunction` saves (q, k, v: 2 QK + V; g and A in
    fp32), the rule's output o that the gated norm keeps beside z (V), and out_proj's saved input (V at
    `linear_input_bytes`)."""
    heads, _, _, QK, V, Cc = _dims(model, tp)
    rep = np.asarray(sp_degree, dtype=np.float64)
    h = model.hidden_size
    replicated = (BF16_BYTES + linear_input_bytes) * h / rep
    sharded = (BF16_BYTES * (2 * Cc + V + 2 * heads + 2 * QK + V + V) + FP32_BYTES * (heads + heads * CHUNK)
               + linear_input_bytes * V)
    return np.asarray(tokens, dtype=np.float64) * (replicated + sharded)


def gdn_layer_fwd_flop_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of one Gated DeltaNet layer in Megatron-LM's count (training.py `gdn_layer_flops` at
    d98e8a6): 2 (h in_proj + kernel Cc + 4 Hv dv^2 + h Hv dv)."""
    hv, dv = model.gdn_num_value_heads, model.gdn_value_head_dim
    assert hv is not None and dv is not None
    h = model.hidden_size
    return 2.0 * (h * model.gdn_in_proj_width + model.gdn_conv_kernel * model.gdn_conv_channels + 4 * hv * dv * dv
                  + h * model.gdn_value_width)
