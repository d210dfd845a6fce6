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

Host time = framework calls x `GPUSpec.host_op_us` (Python, PyTorch dispatch and the launch of one
eager call: 20 us, the launch latency NVIDIA measured for one PyTorch element-wise op, "about 20 us of
launch latency ... between the beginning of the launch call and the beginning of the kernel execution",
NVIDIA Technical Blog, "Understanding the Visualization of Overhead and Latency in NVIDIA Nsight
Systems") + one launch per local expert and GEMM (Transformer Engine's GroupedLinear loops over the
experts in C++, one cuBLAS GEMM -- and under FP8 one quantisation -- each: `kernels.GEMM_LAUNCH_S`).
The calls, counted in Megatron-Core's MoE layer at d98e8a6 (`CALLS`, forward and backward); a
whole-iteration graph (`full_iteration`) replays everything: no host time and no sync.

`host_op_us` is not fitted: at 20 us the published runs on H100 and B300 are nowhere host-bound, so a
least-squares fit from that prior cannot move it there (the exposure is flat in it), while on B200/GB200
the fitted value depended on the shipped values the rows' unstated settings were chosen with (181 us,
then 31 us once written back): not a stable estimate. The measured constant stays.
"""

from __future__ import annotations

import numpy as np

from .kernels import GEMM_LAUNCH_S

# Framework calls (each launching at least one kernel) of one MoE layer, (forward, backward):
# - attn: TransformerLayer._forward_attention -- the norm + QKV linear (TE LayerNormColumnParallelLinear),
#   the two QK norms or MLA's down/up projections and norm, RoPE on Q and K, the core attention, the
#   output projection, bias-dropout-add: 8 calls, as many autograd nodes backward;
# - router: pre-MLP norm, the router's linear, score function + top-k (fused with --moe-router-fusion),
#   the auxiliary-loss and expert-bias bookkeeping (router.py), and MoELayer.preprocess: the tokens per
#   expert, their gather over the TP x EP group, the split sizes and the device-to-host copies
#   (token_dispatcher.py `preprocess`): 16 forward, 6 backward;
# - dispatch: permute, the tokens' and the probabilities' all-to-alls, the sort by local expert, the
#   experts' activation, the unsort, the combine all-to-all, unpermute (moe_utils.py, token_dispatcher.py,
#   experts.py TEGroupedMLP), the two GroupedLinear calls: 10 forward, 10 backward.
CALLS = {"attn": (8, 8), "router": (16, 6), "dispatch": (10, 10)}
# Per local expert: forward fc1 and fc2 GEMMs, backward their data- and weight-gradient GEMMs; under an
# FP8 recipe one quantisation of each GEMM input (forward) and output gradient (backward) per expert
# (TE GroupedLinear: `_split_quantize` per split).
EXPERT_LAUNCHES = ((2, 4), (2, 2))  # (GEMMs forward, backward), (FP8 quantisations forward, backward)


def host_calls_s(host_op_s: float, local_experts, *, fp8: bool, graphed: tuple = (), full_iteration: bool = False):
    """(forward before the sync, forward after it, backward) host time of one MoE layer on one GPU: the
    eager framework calls (`CALLS`; a module in `graphed` -- Megatron's --cuda-graph-modules attn,
    moe_router (+ moe_preprocess) -- is one graph launch instead) and the per-expert launches."""
    if full_iteration:
        return 0.0, 0.0, 0.0
    g = np.asarray(local_experts, dtype=np.float64)
    attn = CALLS["attn"] if "attn" not in graphed else (1, 1)
    router = CALLS["router"] if "moe_router" not in graphed else (1, 1)
    (gf, gb), (qf, qb) = EXPERT_LAUNCHES
    pre = (attn[0] + router[0]) * host_op_s
    post = CALLS["dispatch"][0] * host_op_s + g * (gf + fp8 * qf) * GEMM_LAUNCH_S
    bwd = (attn[1] + router[1] + CALLS["dispatch"][1]) * host_op_s + g * (gb + fp8 * qb) * GEMM_LAUNCH_S
    return pre, post, bwd


def host_exposed_s(host: tuple, *, pre_gpu_s, post_gpu_s, bwd_gpu_s, host_op_s: float, full_iteration: bool = False):
    """(forward, backward) time the GPU of one MoE layer waits for the host (module docstring): per
    forward segment the host time beyond the GPU's, plus the first call after the sync; backward the
    host time beyond the backward's GPU time."""
    if full_iteration:
        return 0.0, 0.0
    pre, post, bwd = host
    fwd = np.maximum(0.0, pre - pre_gpu_s) + np.maximum(0.0, post - post_gpu_s) + host_op_s
    return fwd, np.maximum(0.0, bwd - bwd_gpu_s)
