"""One Mamba-2 layer (Megatron-LM `MambaLayer` + `MambaMixer`, megatron/core/ssm/mamba_mixer.py at
d98e8a6) on one GPU, per micro-batch: its FLOPs, kernel times and saved activations. The layer
composition with the attention and MoE layers of a hybrid model is `hybrid.py`.

The layer (Dao & Gu 2024, "Transformers are SSMs", Sec. 7 / Fig. 6, the Mamba-2 block) runs:
1. the pre-norm, fused into in_proj (Transformer Engine's LayerNormColumnParallelLinear);
2. in_proj, a column-parallel GEMM h -> [z, x, B, C, dt] of width 2 d_inner + 2 G N + H
   (d_inner = H P; over tp: H/tp heads, G/tp groups);
3. `mamba_split_conv1d_scan_combined` (mamba_ssm ops/triton/ssd_combined.py), one autograd
   function: the depthwise causal conv1d over [x, B, C] (d_inner + 2 G N channels, kernel k) with
   SiLU, the SSD chunked scan (Sec. 6), the D skip and the gate y * silu(z);
4. the group-wise RMSNorm of y (`ExtendedRMSNorm`, local to each TP rank: no collective);
5. out_proj, a row-parallel GEMM d_inner -> h: one TP all-reduce (or reduce-scatter with sequence
   parallelism) per pass, as an attention block's.

The SSD scan with chunk length Q (Sec. 6, "the SSD algorithm": block decomposition of the
semiseparable matrix) per token, forward: the intra-chunk scores C B^T, 2 Q N per group; their
masked product with x, 2 Q P per head; the chunk states B^T x, 2 N P per head; the states' output
C h, 2 N P per head (the inter-chunk state passing, N P per chunk and head, is negligible). Its
kernels are memory-bound at the sizes trained (Nemotron 3 Nano: 3.4 MFLOP against ~150 kB per
token), so each pass is priced as a roofline: the longer of its FLOPs at the GPU's BF16 matmul rate
and its HBM bytes (the Triton kernels run in BF16 whatever the precision recipe). The bytes are
counted kernel by kernel from state-spaces/mamba at e9594ce (mamba_ssm/ops/triton/ssd_combined.py,
`MambaSplitConv1dScanCombinedFn` and `_mamba_chunk_scan_combined_fwd/_bwd`), per token on one TP rank,
with X = d_inner, GN = one of B / C (G N), conv = X + 2 GN, S = the chunk states H P N / Q, CB = the
chunk scores G Q (`mixer_bytes_per_token`); dt and its cumulative sums (H per token) are left out.
Megatron's separate RMSNorm of y (`ExtendedRMSNorm`, called without z after the fused function,
which gates y itself) adds its read and write of y, and its backward's three passes. The backward recomputes the conv, CB, the
chunk states and the state passing before its eleven kernels: about three times the forward's bytes,
and three times its FLOPs (the recomputed forward and twice the forward's products)."""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from .memory import BF16_BYTES, FP32_BYTES


def mamba_linears(model: ModelSpec, tp) -> list[tuple]:
    """(N, K) of the two GEMMs on one TP rank: in_proj (2 d_inner + 2GN + H)/tp x h, out_proj
    h x d_inner/tp (mamba_mixer.py `in_proj`, `out_proj`)."""
    return [(model.mamba_in_proj_width / tp, model.hidden_size), (model.hidden_size, model.mamba_d_inner / tp)]


def ssd_fwd_flop_per_token(model: ModelSpec, tp=1):
    """Forward FLOPs per token of the SSD scan and the conv1d on one TP rank (module docstring;
    Dao & Gu 2024 Sec. 6): G/tp groups x 2QN + H/tp heads x (2QP + 4NP), and the depthwise conv's
    2 k (d_inner + 2GN)/tp."""
    H, P, G, N = model.mamba_dims
    Q, t = model.mamba_chunk_size, np.asarray(tp, dtype=np.float64)
    scan = (G * 2.0 * Q * N + H * (2.0 * Q * P + 4.0 * N * P)) / t
    return scan + 2.0 * model.mamba_conv_kernel * model.mamba_conv_channels / t


def mixer_bytes_per_token(model: ModelSpec, tp=1):
    """(forward, backward) HBM bytes per token of the conv1d, the SSD scan and the norm on one TP rank,
    kernel by kernel (module docstring; BF16 elements unless named):
    forward -- conv1d: read [x, B, C], write its output (2 conv); _chunk_state_fwd: read B, x, write S
    fp32; _state_passing_fwd: read S fp32, write S bf16; _bmm_chunk_fwd: read C, B, write CB fp32;
    _chunk_scan_fwd: read CB, x, C, S bf16, z, write out and out_x; the norm: read y, write it;
    backward -- the conv, CB, chunk states and state passing recomputed (2 conv + 3 GN + X, S 4 + 4 + 2,
    CB 4); _chunk_scan_bwd_dz (read x, z, out, dout, write dz, dout: 6 X); _chunk_scan_bwd_dstates (C,
    dout; write S fp32); _state_passing_bwd (S 4 + 2 read, 4 written); _chunk_scan_chunk_state_bwd_dx
    (x, B, dout, CB, S; write dx: 3 X + GN); _chunk_state_bwd_db (x, B, S; write dB: X + 2 GN);
    _chunk_scan_bwd_dC (dout, C, S bf16; write dC: X + 2 GN); _chunk_scan_bwd_dcb (x, dout; write dCB
    fp32); _bmm_chunk_bwd twice (B or C, the residual, dCB; write: 6 GN); _chunk_scan_bwd_ddAcs_stable
    (x, dout, CB: 2 X); the conv's backward (3 conv); the norm's (3 X). In all, forward 2 conv + 7 X +
    4 GN elements, S 12 bytes, CB 8 bytes; backward 5 conv + 20 X + 15 GN, S 34 bytes, CB 24 bytes."""
    H, P, G, N = model.mamba_dims
    t, Q = np.asarray(tp, dtype=np.float64), model.mamba_chunk_size
    X, GN = model.mamba_d_inner / t, G * N / t
    conv, S, CB = X + 2 * GN, (H / t) * P * N / Q, (G / t) * Q
    fwd = BF16_BYTES * (2 * conv + 7 * X + 4 * GN) + 12.0 * S + 8.0 * CB
    bwd = BF16_BYTES * (5 * conv + 20 * X + 15 * GN) + 34.0 * S + 24.0 * CB
    return fwd, bwd


def mixer_s(model: ModelSpec, tokens, tp, *, flop_per_s: float, efficiency: float, hbm_bytes_per_s: float):
    """(forward, backward) of the mixer's kernels between the two GEMMs on one GPU: the roofline of
    `ssd_fwd_flop_per_token` (backward three times it) at the BF16 matmul rate and
    `mixer_bytes_per_token` at the HBM rate (module docstring)."""
    T = np.asarray(tokens, dtype=np.float64)
    flop_s = T * ssd_fwd_flop_per_token(model, tp) / (flop_per_s * efficiency)
    fwd_bytes, bwd_bytes = mixer_bytes_per_token(model, tp)
    return np.maximum(flop_s, T * fwd_bytes / hbm_bytes_per_s), np.maximum(3.0 * flop_s, T * bwd_bytes / hbm_bytes_per_s)


def mamba_activation_bytes(model: ModelSpec, tokens, tp, sp_degree, linear_input_bytes: float):
    """Activations one Mamba layer keeps for backward on one GPU, per micro-batch: the layer input
    (2h, the residual and the norm's input) and in_proj's saved input (the norm output, h at
    `linear_input_bytes`), replicated over TP unless sequence parallel; on the rank's heads, what
    `MambaSplitConv1dScanCombinedFn` saves (mamba_ssm ssd_combined.py: zxbcdt, 2 d_inner + 2GN + H,
    and the scan output out_x, d_inner), the RMSNorm's input (d_inner) and fp32 rstd (G), and
    out_proj's saved input (d_inner at `linear_input_bytes`)."""
    _, _, G, _ = model.mamba_dims
    t, rep = np.asarray(tp, dtype=np.float64), np.asarray(sp_degree, dtype=np.float64)
    h, d_in = model.hidden_size, model.mamba_d_inner
    replicated = (BF16_BYTES + linear_input_bytes) * h / rep
    sharded = (BF16_BYTES * (model.mamba_in_proj_width + 2 * d_in) + FP32_BYTES * G + linear_input_bytes * d_in) / t
    return np.asarray(tokens, dtype=np.float64) * (replicated + sharded)


def mamba_layer_fwd_flop_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of one Mamba layer: in_proj and out_proj, 2 FLOPs per weight, plus
    the scan and conv (`ssd_fwd_flop_per_token`). Megatron-LM's `num_floating_point_operations`
    (training.py `mamba_layer_flops`) counts the same GEMMs with d_in = 2h and the scan as 7 d_in N."""
    gemm = 2.0 * model.hidden_size * (model.mamba_in_proj_width + model.mamba_d_inner)
    return gemm + float(ssd_fwd_flop_per_token(model))
