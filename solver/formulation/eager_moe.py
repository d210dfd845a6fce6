"""torchtitan's mixture-of-experts layer on one GPU (eager, compile off; `--framework torchtitan`): what its MoE block
saves for backward, the HBM traffic of its elementwise ops and the aten ops the host dispatches, counted from
torchtitan's own code (pytorch/torchtitan b5bcd76, the same MoE as 0.3.0: torchtitan/models/common/moe.py `MoE`,
`TokenChoiceTopKRouter`, `GroupedExperts`; models/common/token_dispatcher.py `LocalTokenDispatcher`,
`AllToAllTokenDispatcher`; the decoders priced: models/qwen3/__init__.py -- softmax router with route_norm and the
auxiliary-loss-free expert bias, SiLU-gated experts, no shared expert -- and models/deepseek_v3/__init__.py -- sigmoid
or softmax scores, route_norm as the model renormalises (`route_norm`), expert groups, shared experts; its
multi-latent attention is eager_attention.py's -- and models/gpt_oss -- experts with biases and a clamped SwiGLU,
its attention sinks eager_attention.py's). Per micro-batch, for the rank's T_r tokens,
its N = k T_r own routed copies and the R copies its local experts compute (`moe.routed_tokens`; R = N balanced):

- router: the gate runs under `torch.autocast(dtype=float32)` (CUDA casts the bf16 input: a 4h fp32 copy is saved),
  softmax saves its fp32 scores (4E), the top-k indices (int64, 8k) are saved by the gather, route_norm's division its
  two operands (4k + 4);
- reorder (`_local_reorder`): the argsort's indices (8 per copy) saved by the scores' gather, their `// top_k`
  (8 per copy) by the tokens' gather and the combine's scatter_add; under EP the permutation to local-expert order
  (`_permute`: 8 per received copy);
- experts (`GroupedExperts.forward`): the copies' input (2h, saved by the w1 and w3 grouped GEMMs), w1's output
  (silu's input), silu's output and w3's output (the product's operands) and the product (w2's input): 2h + 8f;
- combine: the expert output cast to fp32 and multiplied by the copy's fp32 score saves both (4h + 4 per own copy);
- shared experts (deepseek_v3): a FeedForward on the block's input, which it keeps (2h), and its 8 f_s
  (`shared_bytes`); the expert-group choice saves nothing backward reads (its branch of the graph does not reach the
  output: what it saved is freed in the forward).

Measured on CPU with the real module (benchmarks/torchtitan_moe_saved.py, saved_tensors_hooks, unique storages:
benchmarks/measured/torchtitan-moe-cpu/moe_block.json, and moe_block_0.3.0.json for the PyPI release): equal to this count up to CPU's autocast, which refuses
float32 (torch/amp/autocast_mode.py: CPU autocast runs bf16 and fp16 only), so the gate keeps its bf16 input and the
scores stay bf16 there (`cpu_minus_cuda_bytes`). Per-layer constants (the gate's fp32 weight copy, the offsets) are
left out.

Time: the grouped GEMMs, the router's GEMM and the all-to-alls are the formulation's (`moe.moe_mlp_compute_s`,
`moe.moe_comm_pass_s`: `torch._grouped_mm` runs a grouped GEMM as Transformer Engine's does); the eager elementwise
traffic below replaces Megatron's fused kernels, backward twice the forward (the convention of the dense eager
layers, frameworks.py); the host dispatches every aten op (frameworks.EAGER_DISPATCH_US each). With EP the
dispatcher copies the all-to-all's split sizes to the host (`_sync_token_count_exchange`: `.to("cpu",
non_blocking=False)` then `.tolist()`), so the host cannot run ahead across it: the forward is two segments, each the
longer of its GPU and host time (host.py's rule for Megatron's dispatcher), plus one op's latency after the sync.
Without EP and with TP the experts are TP-sharded: the block's tokens are all-gathered over TP and routed after, its
output reduce-scattered -- the dense MLP's sequence-parallel pair (`moe_layer.moe_layer_terms`), not Megatron's ETP
gather of the k routed copies.
"""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from .memory import BF16_BYTES, FP32_BYTES
from .moe import routed_tokens

INDEX_BYTES = 8.0  # int64 indices

# aten ops one MoE block dispatches, counted with TorchDispatchMode on the real module (CPU, EP 1; the list is
# benchmarks/measured/torchtitan-moe-cpu/moe_block.json): forward 38 -- router, routing map and the
# tokens-per-expert count 15 (+2 on CUDA: autocast's fp32 casts of the gate's input and weight), reorder 6,
# experts 9, combine 8 --, backward 60 (+2 on CUDA: the casts' gradients).
ROUTER_OPS_FWD, REORDER_OPS_FWD, EXPERT_OPS_FWD, COMBINE_OPS_FWD = 15 + 2, 6, 9, 8
BLOCK_OPS_BWD = 60 + 2
# deepseek_v3's block, measured the same way (moe_block.json): route_norm off saves 3 / 8 ops, sigmoid scores cost
# what softmax does, the expert-group choice adds 9 forward ops (its branch has no backward), the shared experts
# (a FeedForward on the block's input) 9 / 26
ROUTE_NORM_OPS, GROUP_LIMITED_OPS_FWD, SHARED_EXPERT_OPS = (3, 8), 9, (9, 26)
# gpt_oss's experts (models/gpt_oss/moe.py `GptOssGroupedExperts`): biases added per copy (`repeat_interleave` of each
# bias keeps its int64 index: 2 x 8 per copy) and the clamped SwiGLU (`swiglu`: the two clamps keep fc1's whole
# output, 2 x 2f; sigmoid, the clamped gate, the product and the clamped linear half, and fc2's input: 5 x 2f),
# 2h + 14 f + 16 per copy measured; 21 / 24 more ops
GPT_OSS_EXPERT_F_BYTES, BIAS_INDEX_BYTES, GPT_OSS_EXPERT_OPS = 14.0, 2 * INDEX_BYTES, (21, 24)
# torchtitan 0.3.0 (the PyPI release) saves the same bytes but takes (batch, sequence, hidden) and flattens it:
# 44 / 65 ops (moe_block_0.3.0.json), a few views more than the count above
RELEASE_030_OPS = (44, 65)
# With EP (AllToAllTokenDispatcher, counted from the source): before the sync the count exchange (view,
# all_to_all_single, wait, reshape, and per split list view, sum, copy to host) 10 ops; after it the dispatch
# all-to-all and its wait 2, `_permute` 19, `_unpermute` 2, the combine all-to-all and its wait 2; backward the two
# all-to-alls' gradients with their waits 4, the permutation's and the unpermutation's 3.
EP_EXCHANGE_OPS_FWD, EP_AFTER_SYNC_OPS_FWD, EP_OPS_BWD = 10, 25, 7
# torchtitan's decoder layer without its FeedForward (frameworks.TORCHTITAN ops_per_layer 81 / 146, less the
# FeedForward's 14 / 33 counted the same way on a (b, s, h) input)
ATTENTION_OPS = (81 - 14, 146 - 33)


def _copies(model: ModelSpec, tokens, tp, ep, etp, imbalance: float):
    """(the tokens the rank routes T_r, its own routed copies N = k T_r, the copies its local experts compute R). With
    EP torchtitan splits the sequence over TP (T_r = tokens / tp); without, the experts are TP-sharded (etp = tp) and
    every TP rank routes and combines all the tokens (T_r = tokens), MOE_SHARDING.md."""
    T_rank = np.asarray(tokens, dtype=np.float64) / np.asarray(tp, dtype=np.float64)
    _, received = routed_tokens(model, T_rank, ep, etp, imbalance)
    T_r = T_rank * np.asarray(etp, dtype=np.float64)
    return T_r, model.moe_dims[1] * T_r, received


def route_norm(model: ModelSpec) -> bool:
    """Whether torchtitan's router renormalises the top-k scores (`route_norm`): sigmoid scores always, softmax ones
    unless taken over every expert before the pick (HF norm_topk_prob false, `moe_router_pre_softmax`): qwen3 and
    DeepSeek-V3 do, DeepSeek-V2-Lite does not (models/deepseek_v3/__init__.py)."""
    return model.moe_router_score_function != "softmax" or not model.moe_router_pre_softmax


def shared_bytes(model: ModelSpec, tokens, tp):
    """The shared experts' saved bytes (a FeedForward on every token of the micro-batch, TP-sharded like the dense
    MLP): its input (2h, which nothing else keeps on CUDA) and silu's input, its output, w3's output and the product
    (8 f_s / tp)."""
    f_s = model.moe_shared_expert_intermediate_size or 0
    if not f_s:
        return 0.0
    return np.asarray(tokens, dtype=np.float64) * (BF16_BYTES * model.hidden_size
                                                   + 4 * BF16_BYTES * f_s / np.asarray(tp, dtype=np.float64))


def saved_bytes(model: ModelSpec, tokens, tp, ep, etp, imbalance: float):
    """Bytes the MoE block of one layer saves for backward on one GPU per micro-batch, on CUDA (module docstring)."""
    (E, k, f_e), h = model.moe_dims, model.hidden_size
    T_r, own, received = _copies(model, tokens, tp, ep, etp, imbalance)
    f_l = f_e / np.asarray(etp, dtype=np.float64)
    router = FP32_BYTES * (h + E) + INDEX_BYTES * k + route_norm(model) * FP32_BYTES * (k + 1)
    per_own = 2 * INDEX_BYTES + FP32_BYTES * (h + 1)
    ep_index = np.where(np.asarray(ep) > 1, INDEX_BYTES, 0.0)
    experts = (BF16_BYTES * h + GPT_OSS_EXPERT_F_BYTES * f_l + BIAS_INDEX_BYTES if gpt_oss_experts(model)
               else BF16_BYTES * (h + 4 * f_l))
    return T_r * router + own * per_own + received * (experts + ep_index) + shared_bytes(model, tokens, tp)


def gpt_oss_experts(model: ModelSpec) -> bool:
    """Whether the block is gpt_oss's: experts with biases and the clamped SwiGLU."""
    return bool(model.add_bias_linear)


def cpu_minus_cuda_bytes(model: ModelSpec, tokens: float) -> float:
    """What the block saves on CPU beyond CUDA for `tokens` routed by one rank (EP 1), the block's input left out (the
    layer's norm output, counted with the layer): CPU's autocast refuses float32, so the gate saves that input itself
    instead of a fp32 copy (-4h; the shared experts' input is that one too: -2h more), and the scores, their
    top-k, route_norm's denominator and the sorted scores stay bf16 (-2 each of E, and of k + 1 with route_norm, per
    token, -2 per copy)."""
    E, k, _ = model.moe_dims
    shared = 2.0 * model.hidden_size if model.moe_shared_expert_intermediate_size else 0.0
    return -tokens * (4.0 * model.hidden_size + shared + 2.0 * E + route_norm(model) * 2.0 * (k + 1) + 2.0 * k)


def traffic_bytes(model: ModelSpec, tokens, tp, ep, etp, imbalance: float):
    """(forward, backward) HBM bytes of the block's elementwise ops on one GPU per micro-batch, op by op (read +
    write): router -- the input's fp32 cast (2h + 4h), softmax and the expert-bias add over E fp32 scores (8E each),
    top-k's read (4E); reorder per own copy -- the gathers of the scores and tokens (4 + 4, 2h + 2h, each reading
    its int64 index) and the floor division (8 + 8), the argsort (a radix sort of N int64 keys: 4 passes of 8 + 8);
    per received copy under EP the permutation's gather and the unpermutation's scatter (2h + 2h each, 8 index);
    experts -- silu (2f + 2f) and the product (4f + 2f) per received copy; combine per own copy -- the cast to fp32
    (2h + 4h), the multiply by the score (4h + 4 + 4h), the cast back (4h + 2h), the scatter_add (2h + 2h + 8),
    and the zeroed output (2h per token). Backward twice the forward."""
    (E, _, f_e), h = model.moe_dims, model.hidden_size
    T_r, own, received = _copies(model, tokens, tp, ep, etp, imbalance)
    f_l = f_e / np.asarray(etp, dtype=np.float64)
    router = 6.0 * h + 20.0 * E + 2.0 * h
    gathers = (4 + 4 + INDEX_BYTES) + (2 * h + 2 * h + INDEX_BYTES)
    reorder = gathers + 2 * INDEX_BYTES + 4 * 2 * INDEX_BYTES  # + the floor division and the radix sort
    ep_moves = np.where(np.asarray(ep) > 1, 2 * (4.0 * h + INDEX_BYTES), 0.0)
    combine = 6.0 * h + (8.0 * h + 8.0) + 6.0 * h + (4.0 * h + INDEX_BYTES)
    f_s = (model.moe_shared_expert_intermediate_size or 0) / np.asarray(tp, dtype=np.float64)
    # gpt_oss: the two bias adds (fc1's 2f: 12 f; fc2's h: 6h, and the two repeat_interleaves' writes, 4f + 2h) and
    # the clamped SwiGLU (two clamps, the scaled gate, sigmoid, the product, addcmul: 30 f) in place of silu * mul
    act = 46.0 * f_l + 8.0 * h if gpt_oss_experts(model) else 10.0 * f_l
    fwd = (T_r * router + own * (reorder + combine) + received * (act + ep_moves)
           + np.asarray(tokens, dtype=np.float64) * 10.0 * f_s)  # the shared experts' silu and product
    return fwd, 2.0 * fwd


def block_ops(model: ModelSpec) -> tuple[int, int, int]:
    """(router and reorder forward, experts, combine and shared experts forward, backward) aten ops of the block
    (the measured counts, adjusted for route_norm, the expert-group choice and shared experts)."""
    no_norm = not route_norm(model)
    groups, shared = bool(model.moe_router_num_groups), bool(model.moe_shared_expert_intermediate_size)
    oss = gpt_oss_experts(model)
    before = ROUTER_OPS_FWD + REORDER_OPS_FWD - no_norm * ROUTE_NORM_OPS[0] + groups * GROUP_LIMITED_OPS_FWD
    after = EXPERT_OPS_FWD + COMBINE_OPS_FWD + shared * SHARED_EXPERT_OPS[0] + oss * GPT_OSS_EXPERT_OPS[0]
    bwd = BLOCK_OPS_BWD - no_norm * ROUTE_NORM_OPS[1] + shared * SHARED_EXPERT_OPS[1] + oss * GPT_OSS_EXPERT_OPS[1]
    return before, after, bwd


def host_s(op_s: float, ep, attention_ops: tuple[int, int], block: tuple[int, int, int]):
    """(forward before the sync, forward after it, backward) host time of one MoE layer, attention included
    (`attention_ops`: `ATTENTION_OPS` with what its attention dispatches beyond GQA, `eager_attention.ops_extra`), the
    block's ops `block` (`block_ops`); without EP there is no sync and the forward is one segment (`before` holds it
    all)."""
    ep_on = np.asarray(ep) > 1
    router, after, block_bwd = block
    before = attention_ops[0] + router
    pre = np.where(ep_on, before + EP_EXCHANGE_OPS_FWD, before + after) * op_s
    post = np.where(ep_on, after + EP_AFTER_SYNC_OPS_FWD, 0.0) * op_s
    bwd = (attention_ops[1] + block_bwd + np.where(ep_on, EP_OPS_BWD, 0)) * op_s
    return pre, post, bwd


def layer_s(*, pre_gpu_s, post_gpu_s, bwd_gpu_s, op_s: float, ep, attention_ops: tuple[int, int],
            block: tuple[int, int, int]):
    """(forward, backward) of one MoE layer: each segment the longer of its GPU and host time (`host_s`); with EP the
    sync splits the forward (`pre_gpu_s`: attention, router and reorder; `post_gpu_s`: the all-to-alls, experts and
    combine) and adds one op's latency, without it the forward is one segment."""
    pre, post, bwd = host_s(op_s, ep, attention_ops, block)
    ep_on = np.asarray(ep) > 1
    split = np.maximum(pre_gpu_s, pre) + np.maximum(post_gpu_s, post) + op_s
    whole = np.maximum(pre_gpu_s + post_gpu_s, pre)
    return np.where(ep_on, split, whole), np.maximum(bwd_gpu_s, bwd)
