"""The host (CPU) side of a MoE layer outside CUDA graphs: when launching its kernels takes the host
longer than the GPU takes to run them, the GPU waits (vectorised over shapes).

Megatron-LM's dropless token dispatchers need the tokens each expert receives on the host before the
expert-parallel all-to-all (its split sizes) and for the grouped GEMM's per-expert sizes: the
`alltoall` dispatcher copies the counts device-to-host and synchronises on them once per forward
(megatron/core/transformer/moe/token_dispatcher.py at d98e8a6, `MoEAlltoAllTokenDispatcher.preprocess`:
"A synchronization is needed before expert parallel AlltoAll communication", `_maybe_dtoh_and_synchronize`);
the flex dispatcher without a static per-rank budget syncs in its dispatch ("HybridEP sizes buffers
dynamically (CPU sync in dispatch)"). At the sync the GPU's queue runs empty, so the host cannot run
ahead across it: each MoE layer's forward is two segments -- the attention block, router and
preprocessing before the sync, the dispatch, experts and combine after -- each lasting the longer of
its GPU time and the host time to issue it; the GPU also waits for the first call after the sync. The
backward has no sync (the splits are known): the host is exposed where issuing the layer's backward
takes longer than running it. Megatron-LM's MoE README names the symptom ("CPU Overhead Bottleneck:
gaps between GPU kernels where CPU cannot launch kernels fast enough") and the cures this prices: CUDA
graphs (`--cuda-graph-impl transformer_engine --cuda-graph-modules attn moe_router moe_preprocess`:
graphed modules replay with one launch) and larger micro-batches (longer kernels).

Host time of a segment = PyTorch ops x `GPUSpec.host_op_us` + Transformer Engine module calls x
TE_CALL_OPS x `host_op_us` + one launch per local expert and GEMM. The measurements (Transformer Engine
issue #2053, "High CPU overhead on Grace systems", 2025: host time of one Linear forward, BF16, hidden 2048,
8192 tokens): torch.nn.Linear 13.48 us on a DGX H100's Xeon Platinum 8480C, 37.08 us on GB200's Grace,
33.17 us on GH200; te.Linear 99.66 us on GB200 (TE_CALL_OPS = 99.66 / 37.08: a TE module call costs that
many PyTorch ops on the same host); the GPUs' `host_op_us` are their systems' torch figure (x86 DGX
13.48, Grace 37.08; 20 us, NVIDIA's measured launch latency of one PyTorch op, for a GPU that states
none). Transformer Engine's GroupedLinear loops over the experts in C++, one cuBLAS GEMM -- and under FP8
one quantisation -- each (`kernels.GEMM_LAUNCH_S`). The calls, counted in Megatron-Core's MoE layer at
d98e8a6 (`CALLS`); a whole-iteration graph (`full_iteration`) replays everything: no host time and no sync.

`host_op_us` is a measured system constant, not fitted: a least-squares fit cannot move it where no
published run is host-bound at it (the exposure is flat there), and where some are, the value it found
depended on the shipped values the rows' unstated settings had been chosen with (tried, not kept).
"""

from __future__ import annotations

import numpy as np

from .kernels import GEMM_LAUNCH_S

TE_CALL_OPS = 99.66 / 37.08  # te.Linear over torch.nn.Linear host time on GB200 (module docstring)
# (Transformer Engine module calls, PyTorch ops) of one MoE layer's forward, by part; the backward runs
# as many autograd nodes:
# - attn, TransformerLayer._forward_attention: TE calls -- the norm + QKV linear (LayerNormColumnParallel-
#   Linear), the core attention (DotProductAttention), the output projection, the pre-MLP norm; PyTorch
#   ops -- the QKV split and reshape, RoPE on Q and K, bias-dropout-add;
# - router, TopKRouter and MoELayer.preprocess: the router's linear, score function + top-k (fused with
#   --moe-router-fusion), the auxiliary-loss bookkeeping (router.py); the tokens per expert, their gather
#   over the TP x EP group, the split sizes and the device-to-host copies (token_dispatcher.py
#   `preprocess`, `_maybe_dtoh_and_synchronize`);
# - dispatch: TE's fused permute, sort by local expert, unsort and unpermute (moe_utils.py with
#   --moe-permute-fusion) and the two GroupedLinear calls (experts.py TEGroupedMLP); the tokens', the
#   probabilities' and the combine all-to-alls, the weighted activation, bias-dropout-add.
CALLS = {"attn": (4, 5), "router": (0, 15), "dispatch": (6, 5)}
# Per local expert: forward fc1 and fc2 GEMMs, backward their data- and weight-gradient GEMMs; under an
# FP8 recipe one quantisation of each GEMM input (forward) and output gradient (backward) per expert
# (TE GroupedLinear: `_split_quantize` per split).
EXPERT_LAUNCHES = ((2, 4), (2, 2))  # (GEMMs forward, backward), (FP8 quantisations forward, backward)
# With expert biases, Megatron-Core adds fc2's bias in Python one local expert at a time
# (megatron/core/transformer/moe/experts.py `TEGroupedMLP._apply_bias`, core_v0.15.0 to core_v0.17.1,
# `moe.expert_bias_bytes`): forward a multiply and an add per expert beside the two splits and the cat;
# backward per expert the product's two gradients (a multiply and a reduction each), and the splits'
# gradient (one cat). (PyTorch ops per local expert, constant) forward and backward:
EXPERT_BIAS_OPS = ((2, 3), (4, 1))


def _calls_s(part, op_s: float) -> float:
    te, ops = part
    return (te * TE_CALL_OPS + ops) * op_s


def host_calls_s(host_op_s: float, local_experts, *, fp8: bool, graphed: tuple = (), full_iteration: bool = False,
                 expert_bias: bool = False):
    """(forward before the sync, forward after it, backward) host time of one MoE layer on one GPU: the
    eager calls (`CALLS`; a module in `graphed` -- Megatron's --cuda-graph-modules attn, moe_router
    (+ moe_preprocess) -- is one graph launch, one PyTorch op, instead), the per-expert launches and,
    with `expert_bias`, the per-expert bias ops (`EXPERT_BIAS_OPS`)."""
    if full_iteration:
        return 0.0, 0.0, 0.0
    g = np.asarray(local_experts, dtype=np.float64)
    attn = CALLS["attn"] if "attn" not in graphed else (0, 1)
    router = CALLS["router"] if "moe_router" not in graphed else (0, 1)
    (gf, gb), (qf, qb) = EXPERT_LAUNCHES
    pre = _calls_s(attn, host_op_s) + _calls_s(router, host_op_s)
    post = _calls_s(CALLS["dispatch"], host_op_s)
    (bf, cf), (bb, cb) = EXPERT_BIAS_OPS
    bias_f, bias_b = (expert_bias * (g * n + c) * host_op_s for n, c in ((bf, cf), (bb, cb)))
    return (pre, post + bias_f + g * (gf + fp8 * qf) * GEMM_LAUNCH_S,
            pre + post + bias_b + g * (gb + fp8 * qb) * GEMM_LAUNCH_S)


def host_exposed_s(host: tuple, *, pre_gpu_s, post_gpu_s, bwd_gpu_s, host_op_s: float, full_iteration: bool = False):
    """(forward, backward) time the GPU of one MoE layer waits for the host (module docstring): per
    forward segment the host time beyond the GPU's, plus the first call after the sync (one PyTorch op,
    the all-to-all); backward the host time beyond the backward's GPU time."""
    if full_iteration:
        return 0.0, 0.0
    pre, post, bwd = host
    fwd = np.maximum(0.0, pre - pre_gpu_s) + np.maximum(0.0, post - post_gpu_s) + host_op_s
    return fwd, np.maximum(0.0, bwd - bwd_gpu_s)
