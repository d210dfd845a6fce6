"""Mixture-of-experts and multi-latent attention terms of one layer on one GPU (pure numpy),
composed into the stage coefficients by `coefficients.stage_coefficients`.

Parallel folding (Megatron-Core, Liu et al. 2025 arXiv:2504.14960): attention runs on
tp x cp x dp, the experts on etp x ep x edp over the same GPUs of a stage, expert ranks in the
order tp-ep-dp (megatron/core/parallel_state.py): an EP group is `ep` ranks `etp` apart, an
expert-data-parallel group `edp` ranks `etp*ep` apart.

Tokens (Megatron's `MoEAlltoAllTokenDispatcher`, megatron/core/transformer/moe/token_dispatcher.py):
with sequence parallelism (required with tp > 1, `space.experts`) a rank routes its own
`T_r = b*s/(cp*tp)` tokens; each token goes to top-k experts, so `k*T_r` copies are sent by
an all-to-all over the EP group (dispatch) and come back by a second one (combine); with
etp > 1 the received copies are all-gathered over the ETP group before the experts and
reduce-scattered after. Balanced routing puts `k*T_r*etp*ep/E` tokens on each of the E/ep
local experts of a rank; the busiest rank holds `imbalance` times that (the job's
`moe_load_imbalance`, 1.0 = balanced, as published benchmarks force it with
`--moe-router-force-load-balancing`): it paces the step, so expert GEMMs and all-to-all volumes
are scaled by it.

Overlap (stated defaults): Megatron's `--overlap-moe-expert-parallel-comm` (batch-level A2A
overlap, which needs vp with pp > 1 and no full recompute) and `--moe-shared-expert-overlap`
are off: the all-to-alls and the shared experts run on the critical path, as in the published
Megatron-Bridge recipes that do not set them.
"""

from __future__ import annotations

import numpy as np

from ..specs import ClusterSpec, ModelSpec
from . import comm, dsa, dsv4
from .kernels import BF16_BYTES, grouped_linear_s, linear_s

ROUTER_BYTES_PER_EXPERT = 16.0  # fp32 logits written, read by softmax/sigmoid, scores written, read by top-k
PROB_BYTES = 4.0  # fp32 routing probability of a routed copy, saved by the weighted activation
PERMUTE_BYTES_PER_ELEMENT = 4.0 * BF16_BYTES  # (un)permute: read + write a copy, each way (dispatch, combine)
# The experts' fc2 bias, added outside the grouped GEMM (`expert_bias_bytes`): bytes per routed copy and
# hidden element, (forward, backward)
EXPERT_BIAS_BYTES = (6.0 * BF16_BYTES, 8.0 * BF16_BYTES)
# Quick GeGLU's clamp, outside the fused activation (`expert_clamp_bytes`): bf16 elements per routed copy and
# activation-output element, (forward, backward)
EXPERT_CLAMP_ELEMENTS = (8.0, 10.0)


def expert_bias_bytes(model: ModelSpec, copies, hidden: int, eager: bool = True):
    """(forward, backward) HBM bytes of the routed experts' fc2 bias on one GPU, for `copies` routed
    copies of width `hidden`: zero without biases (`add_bias_linear`) and under Transformer Engine's op fuser
    (not `eager`, as `expert_clamp_bytes`). Megatron-Core's TEGroupedMLP
    builds fc2 with skip_bias_add and adds the bias, weighted by the copy's routing probability, in
    Python, one local expert at a time (megatron/core/transformer/moe/experts.py `_apply_bias`, added by
    a329dd6da5 "Enable bias in expert mlp [gpt-oss 5/5]", 2025-09-22, unchanged in core_v0.15.0 to
    core_v0.17.1): `torch.cat([t + b * p for t, b, p in zip(split(out), biases, split(probs))])` --
    forward `b * p` writes a copy-sized tensor, the add reads two and writes one, the cat reads and
    writes one (`.to(dtype)` is a no-op: the probabilities are in the router's dtype, bf16 unless
    --moe-router-dtype, and Transformer Engine's fused top-k returns the logits' dtype,
    transformer_engine/pytorch/csrc/extensions/router.cpp): 6 bf16 passes; backward the split's
    gradient is a cat (read + write), the product's two gradients each a multiply and a reduction
    (grad * p summed over the copies, grad * b summed over the hidden width): 8 passes."""
    if not (eager and model.add_bias_linear):
        return 0.0, 0.0
    fwd, bwd = EXPERT_BIAS_BYTES
    return fwd * copies * hidden, bwd * copies * hidden


def clamps_outside_fusion(model: ModelSpec) -> bool:
    """Whether the experts' activation clamps its input in PyTorch ops before the fused activation: Megatron-Core's
    quick GeGLU with --activation-func-clamp-value (GPT-OSS). `weighted_bias_quick_geglu_impl`
    (megatron/core/fusions/fused_bias_geglu.py at d98e8a6) chunks fc1's output, clamps each half and concatenates
    them, then calls the fused function on the result; SwiGLU's clamp is inside its fused function
    (fused_bias_swiglu.py `clamped_swiglu`, one jit-fused kernel), so it costs nothing apart."""
    return model.activation == "quick_geglu" and model.activation_clamp is not None


def expert_clamp_bytes(model: ModelSpec, copies, f_out, eager: bool = True):
    """(forward, backward) HBM bytes of the clamp `clamps_outside_fusion` prices on the eager path (`eager`: not
    inside Transformer Engine's op fuser, `moe_mlp_compute_s`), for `copies` routed copies whose
    activation output is `f_out` wide (fc1's output 2 f_out): forward, the two clamps read and write one half each
    and `torch.cat` reads and writes both (8 f_out elements); backward, each clamp's gradient reads the gradient
    and its saved input and writes the masked gradient (6 f_out), and the chunk's gradient concatenates the two
    halves (4 f_out). Zero for every other activation, and under the op fuser."""
    if not (eager and clamps_outside_fusion(model)):
        return 0.0, 0.0
    fwd, bwd = EXPERT_CLAMP_ELEMENTS
    return BF16_BYTES * fwd * copies * f_out, BF16_BYTES * bwd * copies * f_out


def expert_clamp_saved_bytes(model: ModelSpec, copies, f_out, eager: bool = True):
    """Bytes the clamp `expert_clamp_bytes` prices keeps for backward: the concatenated clamped input the fused
    activation saves (2 f_out bf16 per copy), beside fc1's output, which the clamps save (and the block already
    counts). Zero for every other activation, and under the op fuser."""
    return BF16_BYTES * 2.0 * copies * f_out if eager and clamps_outside_fusion(model) else 0.0


def attention_geometry(model: ModelSpec, tp):
    """The attention block of one layer on one GPU: (linears [(N, K)] per token, width of Q and
    of the attention output, width of K and of V, head dimension of the core, replicated latent
    width). Standard (GQA) attention: QKV ((h_q + 2 h_kv)/t, h), with an output gate ((2 h_q + 2 h_kv)/t, h)
    (attention.py: linear_qkv_out_dim += kv_channels * heads), and the projection (h, h_q/t).
    Multi-latent attention (DeepSeek-V2 Sec. 2.1; Megatron `MLASelfAttention`): the down
    projections are replicated over TP (h -> r_q, h -> r_kv + d_rope), the up projections and the
    output projection split their heads (r_q -> a d_qk / t, r_kv -> a (d_nope + d_v) / t,
    a d_v / t -> h); the core computes QK^T at d_qk = d_nope + d_rope and PV at d_v: the FLOPs
    of a head dimension (d_qk + d_v)/2; Q, K of width a*d_qk and V, the output of a*d_v are the
    same bytes as widths a*(d_qk + d_v)/2. The latents (and their norm inputs) are kept for
    backward on every TP rank. DeepSeek Sparse Attention adds its indexer's projections, replicated
    over TP (`dsa.indexer_linears`)."""
    t = np.asarray(tp, dtype=np.float64)
    h, a = model.hidden_size, model.num_attention_heads
    if model.is_dsv4:  # one KV head of d; Q and the output a d wide; the Q and KV latents kept (dsv4.py)
        d = model.v_head_dim or 0
        return dsv4.attention_linears(model, t), a * d, d, d, 2.0 * ((model.q_lora_rank or 0) + d)
    if not model.multi_latent_attention:
        hq, hkv = model.q_hidden_size, model.kv_hidden_size
        gate = hq * model.attention_output_gate  # the output gate's logits, a second Q-wide output of QKV
        return [((hq + gate + 2 * hkv) / t, h), (h, hq / t)], hq, hkv, model.head_dim, 0.0
    r_kv, d_nope, d_rope, d_v = model.mla_dims
    d_qk = d_nope + d_rope
    r_q = model.q_lora_rank
    q = [(r_q + 0 * t, h), (a * d_qk / t, r_q)] if r_q else [(a * d_qk / t, h)]
    kv = [(r_kv + d_rope + 0 * t, h), (a * (d_nope + d_v) / t, r_kv)]
    width = a * (d_qk + d_v) / 2
    latent = (r_q or 0) + r_kv + d_rope
    indexer = dsa.indexer_linears(model, t) if model.is_dsa else []  # DeepSeek Sparse Attention's, replicated
    return q + kv + [(h, a * d_v / t)] + indexer, width, width / 1.0, (d_qk + d_v) / 2, 2.0 * latent


def routed_tokens(model: ModelSpec, tokens_rank, ep, etp, imbalance: float):
    """(tokens per local expert on the busiest rank, routed copies that rank computes): with
    balanced routing k*T_r*etp*ep/E per expert and k*T_r*etp in all (module docstring)."""
    E, k, _ = model.moe_dims
    ep, etp = (np.asarray(x, dtype=np.float64) for x in (ep, etp))
    per_expert = imbalance * k * tokens_rank * etp * ep / E
    return per_expert, per_expert * E / ep


def latent_proj_compute_s(model: ModelSpec, tokens_rank, *, mm: dict, hbm_bytes_per_s: float, cast_bytes: float = 0.0):
    """(forward, backward, GEMM forward, GEMM backward) of LatentMoE's two projections on one GPU
    (zeros without `moe_latent_size`): fc1_latent_proj (T_r x h) @ (h x l) before the dispatch and
    fc2_latent_proj (T_r x l) @ (l x h) after the combine, TELinear with parallel_mode="duplicated"
    (Megatron-LM d98e8a6 megatron/core/transformer/moe/moe_layer.py ~266-302: whole weights on every TP
    rank, over the rank's T_r = tokens/tp), so in the recipe's precision (`mm`) like the other linears,
    with their inputs quantised under FP8 (`cast_bytes` per element; forward h and l, backward the
    output gradients l and h). Megatron's FLOPs count them as 4*T*h*l forward
    (training.py `moe_layer_flops`, latent branch)."""
    l, h = model.moe_latent_size, model.hidden_size
    if l is None:
        return 0.0, 0.0, 0.0, 0.0
    f1_f, f1_b = linear_s(tokens_rank, l, h, **mm)
    f2_f, f2_b = linear_s(tokens_rank, h, l, **mm)
    gemm_f, gemm_b = f1_f + f2_f, f1_b + f2_b
    cast = cast_bytes * tokens_rank * (h + l) / hbm_bytes_per_s
    return gemm_f + cast, gemm_b + cast, gemm_f, gemm_b


def moe_mlp_compute_s(model: ModelSpec, tokens, tp, ep, etp, imbalance: float, *, mm: dict, bf16: dict,
                      hbm_bytes_per_s: float, cast_bytes: float = 0.0, eager_epilogue: bool = True, latent=None):
    """(forward, backward, FP8-cast-free GEMM forward, backward) time of the MoE block of one
    layer for `tokens` (b s / cp) on this GPU:
    - router: a (T_r x h) @ (h x E) GEMM in bf16 (Megatron keeps the router out of FP8) and
      its scores/top-k, memory bound (ROUTER_BYTES_PER_EXPERT per token and expert);
    - routed experts: grouped GEMMs (`kernels.grouped_linear_s`, Megatron --moe-grouped-gemm)
      of E/ep groups at the busiest rank's per-expert token count: fc1 (M_e x w) @
      (w x (2|1) f_e/etp), fc2 (M_e x f_e/etp) @ (f_e/etp x w), w = `moe_expert_width` (h, or
      LatentMoE's l: Megatron-LM d98e8a6 experts.py ~219-242 builds fc1/fc2 on moe_latent_size);
      their activation over the routed copies, memory bound; LatentMoE's two projections
      (`latent_proj_compute_s`; at `latent`, (rate, cast bytes), when per-module precision moves them);
    - (un)permutation of the copies before and after each all-to-all, memory bound;
    - shared experts: a dense MLP of width f_s split over tp on all `tokens` (after the SP
      all-gather), gated like the experts.
    - under an FP8 recipe, the quantisation of every expert GEMM's input, as the dense layer's
      linears (`precision.quantize_bytes_per_element`, `cast_bytes` per element: Transformer
      Engine's cast-transpose of the activation in forward, of the output gradient in backward):
      forward the routed copies' fc1 input (h) and fc2 input (f_e/etp), backward their output
      gradients ((2|1) f_e/etp and h); the shared experts' likewise over the rank's tokens.
      TE's `GroupedLinear` quantises the dispatched copies of every local expert
      (transformer_engine/pytorch/module/grouped_linear.py: one quantiser per GEMM input), so
      the traffic is over all the copies the rank computes, not over its own tokens.
    - with biases, the experts' fc2 bias added outside the GEMM, memory bound (`expert_bias_bytes`), and quick
      GeGLU's clamp before the fused activation (`expert_clamp_bytes`), on the eager path (`eager_epilogue`; a
      whole-iteration CUDA graph cannot capture the bias's host-sized splits: Megatron-Bridge runs GPT-OSS's
      graphed iterations through Transformer Engine's op fuser, one fused grouped MLP,
      perf_recipes/gpt_oss/common.py `_apply_gpt_oss_120b_full_iter_fp8mx_configs`,
      `use_transformer_engine_op_fuser = True`).
    Backward: data- and weight-gradient GEMMs (`linear_s`), twice the forward's memory traffic."""
    t = np.asarray(tp, dtype=np.float64)
    (E, k, f_e), h, mats, w = model.moe_dims, model.hidden_size, model.mlp_matrices, model.moe_expert_width
    T_r = tokens / t
    per_expert, copies = routed_tokens(model, T_r, ep, etp, imbalance)
    groups = E / np.asarray(ep, dtype=np.float64)
    e_t = np.asarray(etp, dtype=np.float64)
    r_f, r_b = linear_s(T_r, E, h, **bf16)
    f1_f, f1_b = grouped_linear_s(groups, per_expert, (mats - 1) * f_e / e_t, w, **mm)
    f2_f, f2_b = grouped_linear_s(groups, per_expert, w, f_e / e_t, **mm)
    lat_mm, lat_cast = latent or (mm, cast_bytes)
    lat_f, lat_b, lat_gf, lat_gb = latent_proj_compute_s(model, T_r, mm=lat_mm, hbm_bytes_per_s=hbm_bytes_per_s,
                                                         cast_bytes=lat_cast)
    gemm_f, gemm_b = r_f + f1_f + f2_f + lat_gf, r_b + f1_b + f2_b + lat_gb
    f_s = model.moe_shared_expert_intermediate_size or 0
    if f_s:
        for N, K in (((mats - 1) * f_s / t, h), (h, f_s / t)):
            fw, bw = linear_s(tokens, N, K, **mm)
            gemm_f, gemm_b = gemm_f + fw, gemm_b + bw
    sent = k * T_r
    el = (ROUTER_BYTES_PER_EXPERT * E * T_r + PERMUTE_BYTES_PER_ELEMENT * w * (sent + copies)
          + BF16_BYTES * mats * f_e * copies / e_t + BF16_BYTES * mats * f_s * tokens / t)
    f_l = f_e / e_t
    shared = tokens if f_s else 0.0  # the shared experts' GEMM inputs are the rank's tokens
    cast_f = cast_bytes * (copies * (w + f_l) + shared * (h + f_s / t))
    cast_b = cast_bytes * (copies * ((mats - 1) * f_l + w) + shared * ((mats - 1) * f_s / t + h))
    bias_f, bias_b = expert_bias_bytes(model, copies, w, eager_epilogue)
    clamp_f, clamp_b = expert_clamp_bytes(model, copies, f_l, eager_epilogue)
    lat_mem_f, lat_mem_b = lat_f - lat_gf, lat_b - lat_gb
    return (gemm_f + lat_mem_f + (el + cast_f + bias_f + clamp_f) / hbm_bytes_per_s,
            gemm_b + lat_mem_b + (2 * el + cast_b + bias_b + clamp_b) / hbm_bytes_per_s, gemm_f, gemm_b)


def _miss(pool: float, taken, k: int):
    """Probability that none of `taken` given items of a pool of `pool` is among k drawn
    without replacement: C(pool - taken, k) / C(pool, k)."""
    out = np.ones_like(np.asarray(taken, dtype=np.float64))
    for j in range(k):
        out = out * np.clip((pool - taken - j) / (pool - j), 0.0, 1.0)
    return out


def remote_nodes_per_token(model: ModelSpec, nodes):
    """Other nodes a token is routed to, on average, with balanced routing over E experts spread
    evenly over `nodes` nodes: (nodes - 1) * P(a given other node is hit). Top-k among all
    experts: 1 - C(E - E/nodes, k) / C(E, k). Group-limited routing (DeepSeek-V3: top-4 of 8
    groups, Megatron --moe-router-num-groups / --moe-router-group-topk), when each node holds
    whole groups: the node's G/nodes groups are among the g chosen s times (hypergeometric),
    then none of the k experts drawn from the chosen groups' g*E/G is on it."""
    E, k, _ = model.moe_dims
    scalar = np.ndim(nodes) == 0
    nodes = np.atleast_1d(np.asarray(nodes, dtype=np.float64))
    G, g = model.moe_router_num_groups, model.moe_router_group_topk
    hit = 1 - _miss(E, E / np.maximum(nodes, 1.0), k)
    if G is not None:
        assert g is not None  # `ModelSpec._check_moe`: set together with G
        for i, n in enumerate(nodes.tolist()):
            if n > 1 and G % n == 0:
                on_node = G // int(n)
                pool = g * E / G
                miss = sum(_pmf(G, on_node, g, s_) * float(_miss(pool, s_ * E / G, k)) for s_ in range(min(on_node, g) + 1))
                hit[i] = 1 - miss
    out = (nodes - 1) * hit
    return out[0] if scalar else out


def _pmf(total: int, marked: int, drawn: int, s: int) -> float:
    """Hypergeometric: s marked among `drawn` of `total` with `marked` marked."""
    from math import comb

    return comb(marked, s) * comb(total - marked, drawn - s) / comb(total, drawn)


def moe_comm_pass_s(model: ModelSpec, cluster: ClusterSpec, tokens, tp, ep, etp, imbalance: float,
                    dispatcher: str = "alltoall"):
    """(all-to-all, ETP collectives) of one pass (forward or backward) of one MoE layer: the
    dispatch and the combine of the busiest rank's k*T_r*imbalance copies of w bf16 values (w =
    `moe_expert_width`: h, or LatentMoE's l -- the dispatcher sees only latent-width tensors, Megatron-LM
    d98e8a6 moe_layer.py: fc1_latent_proj before `dispatch`, token_dispatcher.py ~1535) over
    the EP group -- Megatron's `alltoall` dispatcher sends every copy (`comm.all_to_all_s`:
    NVLink inside the group's nodes, NICs across), the `flex` one (DeepEP / HybridEP) each token
    once per other node it is routed to (`comm.node_dedup_all_to_all_s`,
    `remote_nodes_per_token`) -- and with etp > 1 the all-gather of the received copies and the
    reduce-scatter of the experts' output over the ETP group (ranks 1 apart)."""
    t = np.asarray(tp, dtype=np.float64)
    h, k = model.moe_expert_width, model.moe_dims[1]
    T_r = tokens / t
    send = imbalance * k * T_r * h * BF16_BYTES
    if dispatcher == "flex":
        _, nodes = comm.placement(cluster, ep, etp)
        token_bytes = imbalance * T_r * h * BF16_BYTES
        a2a = 2 * comm.node_dedup_all_to_all_s(token_bytes, k, remote_nodes_per_token(model, nodes), cluster, ep, etp)
    else:
        a2a = 2 * comm.all_to_all_s(send, cluster, ep, etp)
    _, copies = routed_tokens(model, T_r, ep, etp, imbalance)
    gathered = copies * h * BF16_BYTES  # the full buffer of an ETP all-gather
    etp_s = (comm.collective_s("all_gather", gathered, cluster, etp, 1)
             + comm.collective_s("reduce_scatter", gathered, cluster, etp, 1))
    return a2a, etp_s


def a2a_alone_share(pp, vp, num_microbatches):
    """Share of a stage's (chunk) forward and backward passes that Megatron's combined-1F1B schedule
    (--overlap-moe-expert-parallel-comm) runs alone, so their all-to-alls have no other micro-batch's
    compute to hide behind (Megatron-LM d98e8a6 megatron/core/pipeline_parallel/combined_1f1b.py):
    - pp 1 (`combined_1f1b_schedule_for_no_pipelining`): "The forward step for the first microbatch is
      executed alone" and "The backward step for the last microbatch is executed alone": 1 of m;
    - pp > 1 (`combined_1f1b_schedule_for_interleaved_pipelining`, vp > 1): the warmup forwards and the
      cooldown backwards, per rank r `2 (pp - r - 1) + (vp - 1) g + 1` of the m*vp chunk passes
      (schedules.py `get_pp_rank_microbatches`: one extra warmup forward "when enabling
      overlap_moe_expert_parallel_comm"; g = microbatch_group_size_per_vp_stage, default pp), pp*vp
      averaged over the ranks; all of them when m*vp is no more."""
    p, v, m = (np.asarray(x, dtype=np.float64) for x in (pp, vp, num_microbatches))
    alone = np.where(p > 1, p * v, 1.0)
    passes = np.maximum(m * v, 1.0)
    return np.minimum(alone, passes) / passes


def moe_layer_params_per_gpu(model: ModelSpec, tp, ep, etp):
    """(non-expert, expert) parameters of one MoE layer on one GPU: attention, shared experts and
    norms split over tp (the router h*E (+E biases) is replicated: Megatron's `TopKRouter`
    weight is not TP-split, nor are LatentMoE's projections, `parallel_mode="duplicated"`); the E/ep
    local experts, (2|3)*w*f_e each (w = `moe_expert_width`), split over etp."""
    t = np.asarray(tp, dtype=np.float64)
    h, (E, _, f_e) = model.hidden_size, model.moe_dims
    router = h * E + (E if model.moe_router_enable_expert_bias else 0) + model.moe_latent_proj_params
    routed = E * model.mlp_matrices * model.moe_expert_width * f_e
    rest = model.moe_layer_params - routed - router
    experts = routed / (np.asarray(ep, dtype=np.float64) * np.asarray(etp, dtype=np.float64))
    return rest / t + router, experts


def moe_mlp_activation_bytes(model: ModelSpec, tokens, tp, ep, etp, imbalance: float,
                             linear_input_bytes: float = BF16_BYTES, eager_epilogue: bool = False):
    """Activations the MoE block of one layer keeps for backward on one GPU, per micro-batch:
    router logits and scores (fp32, E per routed token of the rank); per routed copy on the
    busiest rank (the top-k dispatched copies), what Megatron-Core's `TEGroupedMLP` saves
    (megatron/core/transformer/moe/experts.py at d98e8a6):
    - the experts' input, saved by fc1 for its weight gradient (w = `moe_expert_width` elements: h,
      or LatentMoE's l);
    - fc1's output, saved by the weighted activation for its backward ((2|1) f_e/etp bf16: the
      gated activation keeps both halves, Korthikanti Table 2's MLP terms);
    - the activation's output, saved by fc2 (f_e/etp elements);
    - the routing probability of the copy (fp32): Megatron applies the router's probabilities
      inside the activation (`bias_act_func` -> `weighted_bias_swiglu_impl` with
      `permuted_probs`), and the combine's `unpermute` takes no probabilities (token_dispatcher.py:
      a scatter-add, whose backward is a gather), so fc2's output is not kept.
    The two linear-layer inputs are saved in `linear_input_bytes` per element (1 under an FP8
    recipe: Transformer Engine saves the quantised input the weight-gradient GEMM reads,
    precision.saved_linear_input_bytes, as the dense layer's). The shared experts as a dense MLP
    of width f_s over tp. LatentMoE: fc2_latent_proj's input, the combined l-wide output of the rank's
    T_r tokens (fc1_latent_proj reads the block's input, which the router also reads). (The block's
    input and norm are the layer's replicated terms.) On the eager path (`eager_epilogue`, `moe_mlp_compute_s`),
    quick GeGLU's clamped input too (`expert_clamp_saved_bytes`)."""
    t = np.asarray(tp, dtype=np.float64)
    (E, _, f_e), mats = model.moe_dims, model.mlp_matrices
    T_r = tokens / t
    _, copies = routed_tokens(model, T_r, ep, etp, imbalance)
    f_l = f_e / np.asarray(etp, dtype=np.float64)
    per_copy = linear_input_bytes * (model.moe_expert_width + f_l) + BF16_BYTES * (mats - 1) * f_l + PROB_BYTES
    f_s = model.moe_shared_expert_intermediate_size or 0
    latent = linear_input_bytes * T_r * (model.moe_latent_size or 0)
    return (8.0 * E * T_r + copies * per_copy + tokens * BF16_BYTES * mats * f_s / t + latent
            + expert_clamp_saved_bytes(model, copies, f_l, eager_epilogue))
