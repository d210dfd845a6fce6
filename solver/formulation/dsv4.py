"""DeepSeek-V4's attention layer and residual stream on one GPU, per layer and micro-batch, as Megatron-LM's `dev`
branch runs them (d48bd6be0a: experimental_attention_variant/deepseek_v4_hybrid_attention.py, csa.py,
csa_utils/fused_sparse_attention.py, transformer/hyper_connection.py; the layer kinds in `specs/dsv4_shape.py`).
Every layer is priced as the average of its kinds (ratios 0, 4, 128 by their shares of the layers), exact for the
model's sum, as sliding windows are.

- Linears (`attention_linears`; TP is 1 for DeepSeek-V4, transformer_config.py ~1760): Q down h -> rq, Q up
  rq -> a d, the KV head h -> d, the grouped output a d -> G ro (one einsum of G groups, a GEMM of the same FLOPs)
  and G ro -> h; each compressor's two projections h -> coff d (coff 2 at ratio 4, 1 at 128); at ratio 4 the
  indexer's Q rq -> ni di, head weights h -> ni and its own compressor h -> 2 x 2 di. All at the recipe's GEMM rate
  (Megatron runs the grouped output, the compressors and the head weights in BF16: an approximation under FP8).
- Core (`core_s`): FlashMLA's sparse kernel (fused_sparse_attention.py ~87-179) over each query's gathered keys --
  the window's min(t + 1, w), at ratio 128 every compressed entry so far ((t + 1) / 128), at ratio 4 the top-k of
  the (t + 1) / 4 entries -- Q K^T and P V at d each (one KV head: 4 a d FLOPs per key), the heads padded to 64.
- Indexer at ratio 4 (`indexer_fwd_flop`): scoring every visible 4-token entry (2 ni di per pair, s^2 / 8 pairs a
  sequence), its sparse KL loss recomputing the attention's logits on the top-k (2 a d k per query) and the
  indexer's own gradients there (4 ni di k), in the forward as the cuDNN path runs them; its FP32 scores written
  and read once.
- mHC (`mhc_s`): two hyper-connection modules per layer, each reading the n-wide residual stream (n h) three
  times and writing it once forward (`MHC_PASSES`), twice that backward; their mapping GEMMs (2 n h (n^2 + 2n)
  FLOPs) and Sinkhorn iterations are negligible beside the traffic.
- Memory (`saved_bytes_per_token`, beyond `memory.layer_activation_bytes` at Q, O widths a d and K, V width d):
  FlashMLA's rotated query and the inverse-RoPE output copy (a d each), the grouped output (G ro), the kernel's
  log-sum-exp (a, FP32), the gathered indices (window + selected entries, int32), the indexer's precomputed
  gradients at ratio 4, and each mHC module's saved n-wide stream."""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from .dsa import INDEX_BYTES, SCORE_PASS_BYTES, padded_heads  # FlashMLA's and the indexer's, as DSA's
from .kernels import flash_attention_s, window_keys
from .memory import BF16_BYTES, FP32_BYTES

MHC_PASSES = (4, 8)  # (forward, backward) passes over the n-wide stream per hyper-connection module
MHC_MODULES = 2  # per layer: before attention and before the MLP (transformer_layer.py ~1930-1938)


def _shares(model: ModelSpec) -> dict[int, float]:
    return dict(zip((0, 4, 128), model.csa_shares))


def attention_linears(model: ModelSpec, tp) -> list[tuple]:
    """(N, K) per token of the average layer's linears on one GPU (module docstring; TP 1)."""
    h, a, d = model.hidden_size, model.num_attention_heads, model.v_head_dim or 0
    rq, ro, groups = model.q_lora_rank or 0, model.o_lora_rank or 0, model.o_groups or 1
    sh, one = _shares(model), 1.0 + 0.0 * np.asarray(tp, dtype=np.float64)
    n_i, d_i, _ = model.dsa_dims if sh[4] else (0, 0, 0)
    compressors = sh[4] * (2 * 2 * d + 2 * 2 * d_i + n_i) + sh[128] * 2 * d  # N of the h-wide inputs
    return [(rq * one, h), (a * d * one, rq), (d * one, h), (groups * ro * one, a * d / groups), (h * one, groups * ro),
            (compressors * one, h), (sh[4] * n_i * d_i * one, rq)]


def mean_keys(model: ModelSpec, s_k):
    """Keys a query gathers on average over the sequence: the window's, and the compressed entries its ratio adds
    (module docstring), weighted by the ratios' shares."""
    sh, w = _shares(model), model.csa_window_size
    window = window_keys(w, s_k)
    top = (window_keys(4.0 * model.dsa_dims[2], s_k) / 4.0) if sh[4] else 0.0
    return window + sh[128] * np.asarray(s_k, dtype=np.float64) / 256.0 + sh[4] * top


def core_s(gpu, model: ModelSpec, *, batch, heads, s_q, s_k):
    """(forward, backward) of the sparse core on one GPU (module docstring)."""
    return flash_attention_s(batch=batch, heads=padded_heads(heads), s_q=s_q, s_k=s_k, head_dim=model.v_head_dim,
                             causal=True,
                             flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.fused_attention_efficiency,
                             exp_per_s=gpu.sfu_tops * 1e12, overlap_exp=gpu.exp_overlaps_matmul,
                             keys=mean_keys(model, s_k))


def core_fwd_flop(model: ModelSpec, *, batch, s_q, s_k, heads):
    """Forward FLOPs of the sparse core as `core_s` prices it (unpadded heads): 4 d per head and gathered key."""
    keys = np.asarray(batch, dtype=np.float64) * s_q * mean_keys(model, s_k)
    return keys * np.asarray(heads, dtype=np.float64) * 4.0 * (model.v_head_dim or 0)


def indexer_fwd_flop(model: ModelSpec, *, batch, s_q, s_k, heads):
    """Forward FLOPs of the average layer's indexer (ratio-4 layers' share): scoring the visible 4-token entries
    (half of s_q x s_k / 4 pairs) and the sparse loss over the top-k (module docstring)."""
    share = _shares(model)[4]
    if not share:
        return 0.0 * np.asarray(batch, dtype=np.float64)
    n_i, d_i, topk = model.dsa_dims
    queries = np.asarray(batch, dtype=np.float64) * s_q
    selected = queries * window_keys(4.0 * topk, s_k) / 4.0
    scoring = 2.0 * n_i * d_i * queries * np.asarray(s_k, dtype=np.float64) / 8.0
    loss = selected * (4.0 * n_i * d_i + 2.0 * np.asarray(heads, dtype=np.float64) * (model.v_head_dim or 0))
    return share * (scoring + loss)


def mhc_s(model: ModelSpec, tokens, hbm_bytes_per_s: float):
    """(forward, backward) of the layer's two hyper-connection modules: memory-bound passes over n h (0 without
    mHC)."""
    n = model.num_residual_streams
    if n == 1:
        return 0.0, 0.0
    stream = np.asarray(tokens, dtype=np.float64) * n * model.hidden_size * BF16_BYTES * MHC_MODULES
    return MHC_PASSES[0] * stream / hbm_bytes_per_s, MHC_PASSES[1] * stream / hbm_bytes_per_s


def attention_s(gpu, model: ModelSpec, *, batch, heads, s_q, s_k, hbm: float):
    """(forward, backward) of a DeepSeek-V4 layer beyond its linears: the sparse core, the indexer and mHC."""
    core = core_s(gpu, model, batch=batch, heads=heads, s_q=s_q, s_k=s_k)
    pairs = _shares(model)[4] * np.asarray(batch, dtype=np.float64) * s_q * np.asarray(s_k, dtype=np.float64) / 8.0
    index = (indexer_fwd_flop(model, batch=batch, s_q=s_q, s_k=s_k, heads=heads)
             / (gpu.peak_flop_per_s * gpu.fused_attention_efficiency) + SCORE_PASS_BYTES * pairs / hbm)
    mhc = mhc_s(model, np.asarray(batch, dtype=np.float64) * s_q, hbm)
    return core[0] + index + mhc[0], core[1] + mhc[1]


def saved_bytes_per_token(model: ModelSpec, tp, s_k):
    """What a DeepSeek-V4 layer keeps for backward per token beyond the account at its widths (module docstring);
    0 for another model."""
    if not model.is_dsv4:
        return 0.0 * np.asarray(tp, dtype=np.float64)
    a, d, sh = model.num_attention_heads, model.v_head_dim or 0, _shares(model)
    core = BF16_BYTES * (2 * a * d + (model.o_groups or 0) * (model.o_lora_rank or 0)) + FP32_BYTES * a
    indices = INDEX_BYTES * mean_keys(model, s_k)
    n_i, d_i, _ = model.dsa_dims if sh[4] else (0, 0, 0)
    indexer = sh[4] * BF16_BYTES * (n_i * d_i + d_i / 4.0 + n_i)  # dq, dk of its 4-token entries, dw
    n = model.num_residual_streams
    mhc = MHC_MODULES * BF16_BYTES * n * model.hidden_size if n > 1 else 0.0
    return core + indices + indexer + mhc + 0.0 * np.asarray(tp, dtype=np.float64)
