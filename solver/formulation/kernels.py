"""Time of the kernels of one transformer layer on one GPU, vectorised over shapes.

**GEMMs** (`gemm_s`): an (M x K) @ (K x N) product is a roofline of its tensor-core time and
its operand traffic. The tensor-core time is `2MNK / (peak * e * u_wave * u_k)`:
- `e` (GPUSpec.matmul_efficiency, fitted): what cuBLAS attains on large, well-shaped GEMMs;
- `u_wave`: wave quantisation. The output is cut into TILE_M x TILE_N tiles, one per SM at a
  time; the last wave runs partly empty: `tiles / (ceil(tiles / SMs) * SMs)` (NVIDIA, "Matrix
  Multiplication Background User's Guide", sections "Tile quantization" and "Wave
  quantization");
- `u_k = K / (K + K_HALF)`: each tile's main loop over K is preceded and followed by a fixed
  prologue/epilogue (load, store), so short K runs below the main loop's rate (same guide,
  "dimension-dependent performance": throughput grows with K and saturates).
Forward, data-gradient and weight-gradient GEMMs of a linear layer have the shapes (M,N,K),
(M,K,N) and (K,N,M): each gets its own efficiency.

**Attention** (`flash_attention_s`): FlashAttention (Dao et al. 2022/2023) computes QK^T and
PV on tensor cores (4*s_q*s_k*d FLOPs per head forward, 10 backward: 5 matmuls, Dao 2023
Sec. 3.1) and one exponential per score element (forward; the backward recomputes it) on the
special-function units, whose throughput is far below the tensor cores' (16 per SM per clock:
H100 3.9 TFLOP/s of exp against 989 of BF16 matmul, Shah et al. 2024, FlashAttention-3,
Sec. 1). FlashAttention-2 runs the two one after the other; cuDNN's fused attention and
FlashAttention-3 overlap them on Hopper's asynchronous tensor cores (warp specialisation),
so the slower of the two counts. A causal mask skips the blocks above the diagonal, and the
diagonal blocks are computed whole: with query length s the useful fraction is
`s / (s + S_HALF)` (the block geometry; S_HALF a kernel constant).

**Elementwise work** (`elementwise_bytes_per_token`): norms, residual adds, activation
functions and rotary embeddings are memory-bound: bytes moved at attained HBM bandwidth.
"""

from __future__ import annotations

import numpy as np

TILE_M, TILE_N = 128, 128  # CTA tile of cuBLAS/CUTLASS BF16 kernels on Ampere/Hopper
K_HALF = 64.0  # K at which prologue/epilogue cost the tile half its main-loop rate
S_HALF = 128.0  # causal attention: the diagonal blocks (128-query tiles) are computed whole
BF16_BYTES = 2


def gemm_shape_factor(M, N, K, num_sms):
    """u_wave * u_k of an (M x K) @ (K x N) GEMM: the fraction of the main-loop rate its shape
    reaches (wave quantisation over the SMs, and short K; module docstring)."""
    M, N, K = (np.asarray(x, dtype=np.float64) for x in (M, N, K))
    tiles = np.ceil(M / TILE_M) * np.ceil(N / TILE_N)
    waves = np.ceil(tiles / num_sms)
    return tiles / np.maximum(waves * num_sms, 1.0) * (K / (K + K_HALF))


def gemm_s(M, N, K, *, flop_per_s, efficiency, num_sms, hbm_bytes_per_s, in_bytes=BF16_BYTES, out_bytes=BF16_BYTES):
    """Time of an (M x K) @ (K x N) GEMM on one GPU (arrays broadcast)."""
    M, N, K = (np.asarray(x, dtype=np.float64) for x in (M, N, K))
    compute = 2.0 * M * N * K / (flop_per_s * efficiency * gemm_shape_factor(M, N, K, num_sms))
    traffic = (in_bytes * (M * K + K * N) + out_bytes * M * N) / hbm_bytes_per_s
    return np.maximum(compute, traffic)


def linear_s(M, N, K, weight_grad: bool = True, **kw):
    """(forward, backward) time of a linear layer y = x W with x (M x K), W (K x N): the
    backward is the data gradient (M x N)(N x K) and the weight gradient (K x M)(M x N), which a
    frozen weight (`weight_grad` False: LoRA's base model, formulation/lora.py) does not compute."""
    fwd = gemm_s(M, N, K, **kw)
    bwd = gemm_s(M, K, N, **kw) + (gemm_s(K, N, M, **kw) if weight_grad else 0.0)
    return fwd, bwd


# Transformer Engine's GroupedLinear (Megatron --moe-grouped-gemm, TEGroupedMLP) runs one cuBLAS
# GEMM per group, round-robin on its compute streams (transformer_engine/common/gemm/cublaslt_gemm.cu
# `multi_stream_cublas_gemm`, at d0067d0: `nvte_cublas_gemm_v2(..., get_compute_stream(i % num_streams))`;
# common/util/multi_stream.cpp: `num_compute_streams = 4`); the CUTLASS grouped GEMM is used only on
# Hopper with NVTE_USE_CUTLASS_GROUPED_GEMM set (off by default, `nvte_multi_tensor_gemm`).
GROUPED_GEMM_STREAMS = 4
# Host time to submit one GEMM (driver + runtime submission of a kernel: 4-6 us measured, X. Su,
# "pegainfer (3): From Launch Overhead to CUDA Graph", 2025, https://susun-blog.com/blog/pegainfer-3-cuda-graph;
# NVIDIA's "Getting Started with CUDA Graphs", A. Gray 2019, shows the same order). The low end is
# taken: cuBLASLt's cached heuristics add to it, so this is a lower bound.
GEMM_LAUNCH_S = 4e-6


def _streamed_gemms_s(n, M, N, K, *, flop_per_s, efficiency, num_sms, u_tile):
    """Tensor-core time of `n` equal GEMMs running concurrently on as many streams: their tiles
    share the SMs, one wave quantisation for the n."""
    tiles = n * np.ceil(M / TILE_M) * np.ceil(N / TILE_N)
    waves = np.ceil(tiles / num_sms)
    u_wave = np.maximum(tiles, 1.0) / np.maximum(waves * num_sms, 1.0)
    u_k = K / (K + K_HALF)
    return 2.0 * n * M * N * K / (flop_per_s * efficiency * u_wave * u_k * u_tile)


def grouped_gemm_s(groups, M, N, K, *, flop_per_s, efficiency, num_sms, hbm_bytes_per_s, in_bytes=BF16_BYTES,
                   out_bytes=BF16_BYTES):
    """Time of a grouped GEMM: `groups` independent (M x K) @ (K x N) products (Megatron's
    --moe-grouped-gemm, TE GroupedLinear), one cuBLAS GEMM per group on GROUPED_GEMM_STREAMS
    streams: the groups run GROUPED_GEMM_STREAMS at a time, each such round's tiles scheduled
    together over the SMs (one wave quantisation per round; NVIDIA's "Matrix Multiplication
    Background User's Guide", "Wave quantization"), each group's short M computed in whole
    tiles ("Tile quantization") -- the small per-expert token counts of fine-grained MoE. Bound
    below by the operand traffic and by the host submitting one GEMM per group
    (GEMM_LAUNCH_S each, one thread: launch-bound when many small experts share a GPU)."""
    G, M, N, K = (np.asarray(x, dtype=np.float64) for x in (groups, M, N, K))
    u_tile = np.where(M > 0, M / np.maximum(np.ceil(M / TILE_M) * TILE_M, 1.0), 1.0)
    S = np.minimum(G, GROUPED_GEMM_STREAMS)
    full = np.floor(G / np.maximum(S, 1.0))
    kw = dict(flop_per_s=flop_per_s, efficiency=efficiency, num_sms=num_sms, u_tile=u_tile)
    compute = full * _streamed_gemms_s(S, M, N, K, **kw) + _streamed_gemms_s(G - full * S, M, N, K, **kw)
    traffic = G * (in_bytes * (M * K + K * N) + out_bytes * M * N) / hbm_bytes_per_s
    return np.maximum(np.maximum(compute, traffic), G * GEMM_LAUNCH_S)


def grouped_linear_s(groups, M, N, K, weight_grad: bool = True, **kw):
    """(forward, backward) of `groups` linear layers (one per local expert) of M tokens each,
    as `linear_s`: data gradient (M x N)(N x K), weight gradient (K x M)(M x N), grouped."""
    fwd = grouped_gemm_s(groups, M, N, K, **kw)
    bwd = grouped_gemm_s(groups, M, K, N, **kw) + (grouped_gemm_s(groups, K, N, M, **kw) if weight_grad else 0.0)
    return fwd, bwd


def window_keys(window, s_k):
    """Keys a query sees on average under a causal sliding window of `window` tokens over a sequence of
    `s_k`: min(position + 1, w) averaged, w (1 - w / 2 s_k) for w < s_k (the causal s_k / 2 at w = s_k)."""
    w = np.minimum(np.asarray(window, dtype=np.float64), s_k)
    return w * (1.0 - w / (2.0 * np.asarray(s_k, dtype=np.float64)))


def layers_mixed(core, other, share):
    """(forward, backward) of the average layer when a `share` of the layers runs `other` instead of `core`
    (every layer priced alike keeps a split's cost linear in its layers; the model's sum is exact)."""
    return tuple((1.0 - share) * c + share * o for c, o in zip(core, other))


def flash_attention_s(*, batch, heads, s_q, s_k, head_dim, causal, flop_per_s, efficiency, exp_per_s, overlap_exp,
                      window=None, keys=None):
    """(forward, backward) time of FlashAttention for `batch` sequences, `heads` heads on this
    GPU, `s_q` queries against `s_k` keys each. A causal `window` of w tokens (each query sees the
    last w keys: TE/flash-attn window_size (w - 1, 0)) skips the blocks outside the band: a query
    sees w (1 - w / 2 s_k) keys on average over the sequence, and the band's edge blocks are
    computed whole (useful fraction keys / (keys + S_HALF), as the causal diagonal's); `keys` (an average per
    query) prices a sparse kernel over gathered keys alike."""
    b, a, sq, sk, d = (np.asarray(x, dtype=np.float64) for x in (batch, heads, s_q, s_k, head_dim))
    scores = b * a * sq * sk * np.where(causal, 0.5, 1.0)
    u_len = np.where(causal, sq / (sq + S_HALF), 1.0)
    if window is not None and causal:  # a window as long as the sequence is the causal mask
        band = window_keys(window, sk)
        banded = window < sk
        scores, u_len = np.where(banded, b * a * sq * band, scores), np.where(banded, band / (band + S_HALF), u_len)
    if keys is not None:  # a sparse kernel over `keys` gathered keys per query (DeepSeek-V4: formulation/dsv4.py)
        scores, u_len = b * a * sq * keys, keys / (keys + S_HALF)
    rate = flop_per_s * efficiency * u_len
    mm_fwd = 4.0 * d * scores / rate
    mm_bwd = 10.0 * d * scores / rate
    exp = scores / (exp_per_s * u_len)
    combine = np.maximum if overlap_exp else np.add
    return combine(mm_fwd, exp), combine(mm_bwd, exp)


def triton_block_headdim(head_dim):
    """The head dimension FlashAttention's Triton port computes with: the next power of two, at least 16
    (`BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16)` in flash_attn_triton.py, HazyResearch/flash-attention
    @eff9fe6, the copy llm-foundry ran as attn_impl: triton); its loads mask the padding, its tensor-core tiles
    do not: a head of 80 costs as one of 128."""
    d = np.maximum(np.asarray(head_dim, dtype=np.float64), 1.0)
    return np.maximum(2.0 ** np.ceil(np.log2(d) - 1e-9), 16.0)


def unfused_attention_s(*, batch, heads, s_q, s_k, head_dim, flop_per_s, efficiency, hbm_bytes_per_s):
    """(forward, backward) of attention with materialised scores (no flash): the two batched
    GEMMs at the GEMM rate plus softmax, mask and dropout over the score matrix (read and
    write in bf16, the dropout mask in 1 byte: UNFUSED_SOFTMAX_BYTES per score element)."""
    b, a, sq, sk, d = (np.asarray(x, dtype=np.float64) for x in (batch, heads, s_q, s_k, head_dim))
    scores = b * a * sq * sk
    mm = 4.0 * d * scores / (flop_per_s * efficiency)
    softmax = UNFUSED_SOFTMAX_BYTES * scores / hbm_bytes_per_s
    return mm + softmax, 2.0 * (mm + softmax)


# Softmax, scale-mask and dropout of unfused attention: per score element read + write bf16
# for each of softmax and mask (8), dropout write 2 + mask 1, rounded to 12.
UNFUSED_SOFTMAX_BYTES = 12.0


def elementwise_bytes_per_token(*, hidden, q_width, kv_width, ffn, gated, rotary, sp_degree, tp):
    """(forward, backward) bytes one GPU moves per token of one layer in memory-bound
    kernels, with Megatron-Core / Transformer Engine fusion (norm fused into the next GEMM's
    input, bias-dropout-add fused, bias-activation / SwiGLU fused):
    - two norms: read + write the hidden state (2h each); two residual adds: read 2h,
      write h (3h each); with sequence parallelism each is over this rank's 1/t of tokens;
    - activation: read f (2f gated), write f, over the rank's f/t columns;
    - rotary embedding: read + write q and k (2(q + kv)), over the rank's heads;
    - attention input/output: read q, k, v and write the output once.
    The backward reads the saved input and the incoming gradient and writes the gradient:
    twice the forward's traffic. bf16 elements."""
    h = np.asarray(hidden, dtype=np.float64)
    rep = np.asarray(sp_degree, dtype=np.float64)  # norms/residuals are replicated over TP unless SP
    t = np.asarray(tp, dtype=np.float64)
    per_h = (2 * 2 + 2 * 3) * h / rep
    act = (3.0 if gated else 2.0) * ffn / t
    rope = (2.0 * (q_width + kv_width) / t) if rotary else 0.0
    attn_io = (2.0 * q_width + 2.0 * kv_width) / t
    fwd = BF16_BYTES * (per_h + act + rope + attn_io)
    return fwd, 2.0 * fwd
