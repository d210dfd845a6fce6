"""DeepSeek Sparse Attention (DSA; DeepSeek-V3.2 tech report 2025, Sec. 2.1; GLM-5) on one GPU, per layer and
micro-batch, as Megatron-LM runs it (d98e8a6, megatron/core/transformer/experimental_attention_variant/:
dsa.py, dsa_cudnn_kernels.py, absorbed_mla.py) with the fused cuDNN / FlashMLA backend
(`--dsa-kernel-backend cudnn`, what Megatron-Bridge's GLM-5 recipes run; the default `none` backend is a dense
masked reference path, O(s^2), for tests).

Each layer runs multi-latent attention in its absorbed form (absorbed_mla.py ~460-684) and, beside it, the
lightning indexer (dsa.py `DSAIndexer`, ~1159-1322):
1. indexer projections, replicated on every TP rank over the sequence-gathered tokens (`parallel_mode=
   "duplicated"`): q_I = W_qb q_latent (q_lora_rank -> H_I D_I), k_I = LayerNorm(W_k x) (h -> D_I), head weights
   W_w x (h -> H_I) (`indexer_linears`);
2. scoring I[t, j] = sum_h w[t, h] ReLU(q_I[t, h] . k_I[j]) for every causal key j of query t, in BF16 with
   FP32 accumulation, 2 H_I D_I FLOPs per (query, key) pair, scores written in FP32 row chunks and read by a
   radix top-k (`indexer_s`); TP does not divide it;
3. the sparse core over the K selected keys (min(K, t + 1) for query t: `kernels.window_keys`'s count), in the
   KV latent space (FlashMLA's sparse kernel: Q K^T at d_c + d_r = kv_lora_rank + rope dims, P V at d_c, one
   latent shared by the heads), the local heads padded to a multiple of `PAD_HEADS` (dsa_cudnn_kernels.py
   ~348-399); the absorption GEMMs (q_nope W_uk, out W_uv) cost what MLA's KV up-projection does, so the
   layer's linears are MLA's (`moe.attention_geometry`);
4. the indexer's KL loss on the selected keys (`--dsa-indexer-use-sparse-loss`, Megatron-Bridge's GLM-5
   setting): the attention's probabilities over the K keys recomputed (Q K^T at d_c + d_r per head and
   selected pair) and the indexer's gradients over them (dq_I, dk_I, dw: 2 x 2 H_I D_I per selected pair),
   which the cuDNN path computes in the forward (dsa_cudnn_kernels.py ~2264-2274); the indexer's inputs are
   detached, so the main loss never reaches it.

Kernel rates: the fused attention efficiency of the GPU (`GPUSpec.fused_attention_efficiency`) for the sparse
core, the scoring and the loss: no published run measures FlashMLA's sparse kernels or cuDNN's indexer, so
they are priced as the dense fused kernel of the same GPU.

Memory beyond MLA's (per token, kept for backward): the absorbed query (a/t heads x (d_c + d_r)) and the
latent output (a/t x d_c) that the sparse kernel saves, the top-k indices (K int32), the indexer's
precomputed gradients (H_I D_I + D_I + H_I, BF16); the per-head K and V that MLA's core keeps are never built
(absorbed form). Context parallelism gathers the latent keys (d_c + d_r) and the indexer keys (D_I) of the
whole sequence per layer (`--cp-comm-type all_gather`, the only CP exchange DSA runs: transformer_config.py
~3162-3177)."""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from . import comm
from .kernels import flash_attention_s, window_keys
from .memory import BF16_BYTES, FP32_BYTES

PAD_HEADS = 64  # FlashMLA's sparse kernel pads a rank's heads to a multiple of 64 (dsa_cudnn_kernels.py ~348-399)
INDEX_BYTES = 4.0  # int32 top-k indices (cuDNN `global_idxs`)
SCORE_PASS_BYTES = 2 * FP32_BYTES  # each FP32 index score written, then read by the top-k


def indexer_linears(model: ModelSpec, tp) -> list[tuple]:
    """(N, K) of the indexer's three projections on one TP rank, replicated over TP (module docstring, 1); with index
    sharing the average layer's, N times the share of layers that run one (`ModelSpec.dsa_index_share`: GEMM time
    near linear in N at these widths, an approximation)."""
    n, d, _ = model.dsa_dims
    share = model.dsa_index_share + 0.0 * np.asarray(tp, dtype=np.float64)
    q_in = model.q_lora_rank or model.hidden_size
    return [(n * d * share, q_in), (d * share, model.hidden_size), (n * share, model.hidden_size)]


def core_head_dim(model: ModelSpec) -> float:
    """The head dimension whose FlashAttention FLOPs (4 d per score) equal the latent-space core's:
    Q K^T at d_c + d_r and P V at d_c, so d = (2 d_c + d_r) / 2."""
    r_kv, _, d_rope, _ = model.mla_dims
    return (2.0 * r_kv + d_rope) / 2.0


def sparse_core_s(gpu, model: ModelSpec, *, batch, heads, s_q, s_k):
    """(forward, backward) of the sparse core on one GPU: FlashMLA's kernel over min(K, t + 1) keys per query
    (a band of K in `kernels.flash_attention_s`), at `core_head_dim`, `heads` padded to `PAD_HEADS`; the forward
    again for the loss's target where index sharing splits the cuDNN path (`loss_target_passes`)."""
    _, _, topk = model.dsa_dims
    fwd, bwd = flash_attention_s(batch=batch, heads=padded_heads(heads), s_q=s_q, s_k=s_k, head_dim=core_head_dim(model),
                                 causal=True, flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.fused_attention_efficiency,
                                 exp_per_s=gpu.sfu_tops * 1e12, overlap_exp=gpu.exp_overlaps_matmul, window=topk)
    return fwd * (1.0 + loss_target_passes(model)), bwd


def padded_heads(heads):
    """A rank's heads as FlashMLA's sparse kernel runs them: padded to a multiple of `PAD_HEADS`."""
    return np.ceil(np.asarray(heads, dtype=np.float64) / PAD_HEADS) * PAD_HEADS


def core_fwd_flop(model: ModelSpec, *, batch, s_q, s_k, heads):
    """Forward FLOPs of the sparse core as `sparse_core_s` prices it (unpadded heads): 4 `core_head_dim` per head
    and selected key, the loss target's extra forwards included."""
    keys = np.asarray(batch, dtype=np.float64) * s_q * window_keys(model.dsa_dims[2], s_k)
    return keys * np.asarray(heads, dtype=np.float64) * 4.0 * core_head_dim(model) * (1.0 + loss_target_passes(model))


def loss_target_passes(model: ModelSpec) -> float:
    """Extra sparse-core forwards of the average layer for the indexer loss's target: with index sharing the cuDNN
    path runs split, one more FlashMLA forward on each layer that runs an indexer (dsa_cudnn_kernels.py
    ~2440-2445); the fused path (no sharing) takes the target from its own forward."""
    return model.dsa_index_share if model.dsa_index_sharing else 0.0


def indexer_fwd_flop(model: ModelSpec, *, batch, s_q, s_k, heads):
    """Forward FLOPs of the indexer's scoring over the causal keys (half of s_q x s_k) and of its sparse loss
    over the selected keys (module docstring, 2 and 4), on one GPU (`heads`: the rank's attention heads), for
    the average layer: the share of layers that run an indexer (`ModelSpec.dsa_index_share`)."""
    n, d, topk = model.dsa_dims
    r_kv, _, d_rope, _ = model.mla_dims
    queries = np.asarray(batch, dtype=np.float64) * s_q
    scoring = 2.0 * n * d * queries * np.asarray(s_k, dtype=np.float64) / 2.0
    selected = queries * window_keys(topk, s_k)
    loss = selected * (4.0 * n * d + 2.0 * np.asarray(heads, dtype=np.float64) * (r_kv + d_rope))
    return model.dsa_index_share * (scoring + loss)


def indexer_s(gpu, model: ModelSpec, *, batch, heads, s_q, s_k, hbm_bytes_per_s: float):
    """(forward, backward) of the indexer's scoring, top-k and sparse loss on one GPU: `indexer_fwd_flop` at the
    fused attention rate plus its FP32 scores written and read once (on the layers that run it); the backward has
    nothing left (the cuDNN path computed the indexer's gradients in the forward; its projections' weight gradients
    are the layer's linears')."""
    rate = gpu.peak_flop_per_s * gpu.fused_attention_efficiency
    pairs = model.dsa_index_share * np.asarray(batch, dtype=np.float64) * s_q * np.asarray(s_k, dtype=np.float64) / 2.0
    fwd = indexer_fwd_flop(model, batch=batch, s_q=s_q, s_k=s_k, heads=heads) / rate
    return fwd + SCORE_PASS_BYTES * pairs / hbm_bytes_per_s, 0.0 * fwd


def attention_s(gpu, model: ModelSpec, *, batch, heads, s_q, s_k, hbm: float):
    """(forward, backward) of a DSA layer's attention beyond its linears: the sparse core and the indexer (`hbm`:
    the GPU's HBM bytes/s)."""
    core = sparse_core_s(gpu, model, batch=batch, heads=heads, s_q=s_q, s_k=s_k)
    index = indexer_s(gpu, model, batch=batch, heads=heads, s_q=s_q, s_k=s_k, hbm_bytes_per_s=hbm)
    return core[0] + index[0], core[1] + index[1]


def saved_bytes_per_token(model: ModelSpec, tp):
    """What a DSA layer keeps for backward per token beyond the MLA layer's account (module docstring): the
    absorbed query and latent output, the top-k indices and the indexer's gradients, less the per-head K and V
    that MLA's core would keep (2 a (d_qk + d_v) / t bytes, half of `memory.layer_activation_bytes`'s Q, K, V and
    output at MLA's widths). 0 for a model without sparse attention."""
    if not model.is_dsa:
        return 0.0 * np.asarray(tp, dtype=np.float64)
    n, d, topk = model.dsa_dims
    r_kv, d_nope, d_rope, d_v = model.mla_dims
    a_t = model.num_attention_heads / np.asarray(tp, dtype=np.float64)
    absorbed = BF16_BYTES * a_t * (2 * r_kv + d_rope)
    indexer = model.dsa_index_share * (INDEX_BYTES * topk + BF16_BYTES * (n * d + d + n))  # reused, not copied
    return absorbed + indexer - BF16_BYTES * a_t * (d_nope + d_rope + d_v)


def cp_gather_s(cluster, model: ModelSpec, *, batch, seq: float, cp, tp, recompute):
    """Context parallelism's exchange per layer and micro-batch: the all-gather over the cp ranks (tp apart) of every
    chunk's latent keys (d_c + d_r) and indexer keys (D_I), BF16, forward, its reduce-scatter backward, the forward's
    again under full recomputation (`recompute` 2); nothing overlaps it (the core waits for its keys). 0 without CP."""
    _, d, _ = model.dsa_dims
    r_kv, _, d_rope, _ = model.mla_dims
    whole = BF16_BYTES * np.asarray(batch, dtype=np.float64) * seq * (r_kv + d_rope + model.dsa_index_share * d)
    gather = comm.collective_s("all_gather", whole, cluster, cp, tp)
    return np.where(np.asarray(cp) > 1, gather * (2 + (np.asarray(recompute) == 2)), 0.0)
