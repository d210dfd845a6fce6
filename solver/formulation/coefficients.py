"""Per-shape coefficients of the stage-time and stage-memory model.

Once a shape (tp, pp, dp, cp, vp, micro-batch, recompute, SP, ZeRO) is fixed, every cost of
pipeline stage i is linear in its layer count l_i (DESIGN.md section 3):

    tau_i = l_i*layer_s + [i=0]*first_s + [i=p-1]*last_s          (per micro-batch, fwd+bwd)
    mem_i = l_i*(layer_static + mu_i*layer_act) + [i=0]*(...) + [i=p-1]*(...) + const

`stage_coefficients` computes these coefficient arrays for a batch of shapes at once; the
float evaluation (`evaluate.py`), the CP-SAT encoding and the baselines all consume them, so
there is exactly one formula for every cost.

Compute time of a GEMM (M x K x N, per GPU) is a roofline sum: `2MKN/(peak*e_mm)` plus its
operand traffic `2(MK+KN+MN)` bytes at attained HBM bandwidth; it falls in efficiency as
the per-GPU matrices shrink (small b*s/cp, large tp). Memory-bound elementwise work
(norms, activations, dropout, residuals) moves bytes at attained HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..specs import ClusterSpec, ModelSpec
from . import comm
from ..space.shapes import Shapes

BF16_BYTES = 2
FP32_BYTES = 4
# Adam step, per (sharded) parameter: fp32 master r/w (8), m r/w (8), v r/w (8), fp32 grad read (4),
# bf16 weight write (2): memory bound.
ADAM_STEP_BYTES_PER_PARAM = 30
# Elementwise traffic per token per layer, forward (bytes per hidden element): two norms
# (read 2 + write 2 each = 8) and two bias-dropout-residual-adds (read 2+2, write 2, mask 1 = 7 each).
ELEMENTWISE_BYTES_PER_HIDDEN = 22
# Softmax, mask and dropout of the unfused attention core, bytes per score element, forward.
UNFUSED_SOFTMAX_BYTES = 12
# Cross entropy over the vocabulary, bytes per logit element (fp32 upcast, exp, normalise; backward).
CROSS_ENTROPY_BYTES_FWD = 16
CROSS_ENTROPY_BYTES_BWD = 8
# Logit buffers alive on the last stage per in-flight micro-batch: fp32 softmax kept for
# backward (4) + the bf16 logits during the loss (2) (Megatron vocab-parallel cross entropy).
LOGIT_BYTES = 6
# Flash-attention backward recomputes the scores: 5 matmuls against 2 forward.
FLASH_BWD_FACTOR = 2.5
# ZeRO-3 keeps the gathered bf16 parameters and bf16 gradients of about one layer alive
# (prefetch works in sub-layer buckets).
ZERO3_LIVE_LAYERS = 1


@dataclass(frozen=True)
class StageCoefficients:
    """Arrays over shapes. Times in seconds, memory in bytes; `layer_*` per layer,
    `first_*`/`last_*` the extras of the first/last stage. Per micro-batch unless `_step`."""

    num_microbatches: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    # time per micro-batch, forward + backward (+ recompute), by kind
    layer_compute_s: np.ndarray
    layer_tp_s: np.ndarray
    layer_cp_s: np.ndarray  # exposed part of the CP ring exchange
    layer_zero3_s: np.ndarray  # exposed per-micro-batch sharding traffic (ZeRO-2 reduce-scatter, ZeRO-3 gathers)
    layer_fwd_s: np.ndarray  # forward only (overlap window of the parameter all-gather)
    layer_bwd_s: np.ndarray  # backward only (overlap window of the gradient reduction)
    first_s: np.ndarray
    last_s: np.ndarray
    first_fwd_s: np.ndarray
    last_bwd_s: np.ndarray
    boundary_s: np.ndarray  # p2p per micro-batch per stage boundary, forward + backward
    # once per step: data-parallel gradient reduction (all-reduce, or reduce-scatter + parameter
    # all-gather with a sharded optimizer) and the optimizer step
    layer_dp_step_s: np.ndarray
    first_dp_step_s: np.ndarray  # embedding gradient reduction (+ tied-embedding all-reduce)
    last_dp_step_s: np.ndarray
    layer_optimizer_step_s: np.ndarray
    first_optimizer_step_s: np.ndarray
    last_optimizer_step_s: np.ndarray
    # the part of a stage's step-level DP traffic that hides behind computation (per layer,
    # first/last extras): the last micro-batch's backward (all-reduce or reduce-scatter) and
    # the next step's first forward (the sharded optimizer's parameter all-gather); zero
    # without --overlap-grad-reduce
    layer_window_s: np.ndarray
    first_window_s: np.ndarray
    last_window_s: np.ndarray
    # memory per GPU, bytes
    layer_params_bytes: np.ndarray
    layer_grads_bytes: np.ndarray
    layer_optimizer_bytes: np.ndarray
    layer_act_bytes: np.ndarray  # per in-flight micro-batch
    first_static_bytes: np.ndarray  # embedding params + grads + optimizer state
    last_static_bytes: np.ndarray
    first_act_bytes: np.ndarray  # per in-flight micro-batch
    last_act_bytes: np.ndarray  # logits and loss buffers (one micro-batch in flight)
    const_bytes: np.ndarray  # working sets: full-recompute layer, ZeRO-3 gathered layers
    capacity_bytes: float

    @property
    def layer_s(self) -> np.ndarray:
        return self.layer_compute_s + self.layer_tp_s + self.layer_cp_s + self.layer_zero3_s

    @property
    def layer_static_bytes(self) -> np.ndarray:
        return self.layer_params_bytes + self.layer_grads_bytes + self.layer_optimizer_bytes

    def take(self, idx) -> "StageCoefficients":
        idx = np.atleast_1d(idx)
        vals = {}
        for f in fields(self):
            v = getattr(self, f.name)
            vals[f.name] = v[idx] if isinstance(v, np.ndarray) else v
        return StageCoefficients(**vals)


def model_state_bytes_per_param(zero, shard):
    """(params, grads, optimizer) bytes per parameter with bf16 weights, fp32 gradients and
    fp32 Adam (master, m, v): 2 + 4 + 12 = 18 unsharded (Megatron dist-optimizer docs table);
    z=1 (distributed optimizer): 2 + 4 + 12/d; z=2: 2 + 4/d + 12/d; z=3: (2 + 4 + 12)/d
    (ZeRO paper Sec. 3.1 with fp32 gradients)."""
    zero = np.asarray(zero)
    shard = np.asarray(shard, dtype=np.float64)
    params = np.where(zero >= 3, BF16_BYTES / shard, BF16_BYTES)
    grads = np.where(zero >= 2, FP32_BYTES / shard, FP32_BYTES)
    opt = np.where(zero >= 1, 12.0 / shard, 12.0)
    return params, grads, opt


def _gemm_s(M, K, N, flop_per_s, mem_bytes_per_s, elem_bytes=BF16_BYTES):
    return 2.0 * M * K * N / flop_per_s + elem_bytes * (M * K + K * N + M * N) / mem_bytes_per_s


def stage_coefficients(
    model: ModelSpec,
    cluster: ClusterSpec,
    shapes: Shapes,
    *,
    global_batch_size: int,
    seq_length: int,
    precision: str = "bf16",
    flash_attention: bool = True,
    overlap_grad_reduce: bool = True,
    tp_comm_overlap: bool = False,
) -> StageCoefficients:
    gpu = cluster.gpu
    t = shapes.tp.astype(np.float64)
    c = shapes.cp.astype(np.float64)
    d = shapes.dp.astype(np.float64)
    p = shapes.pp
    v = shapes.vp
    b = shapes.micro_batch_size.astype(np.float64)
    sp = shapes.sequence_parallel
    rc = shapes.recompute
    z = shapes.zero
    h, f, V, a = model.hidden_size, model.ffn_hidden_size, model.vocab_size, model.num_attention_heads
    hkv = model.kv_hidden_size
    hq = model.q_hidden_size
    s = float(seq_length)
    m = shapes.num_microbatches(global_batch_size)

    mm_peak = (gpu.peak_fp8_tflops * 1e12 if precision == "fp8" else gpu.peak_flop_per_s) * gpu.matmul_efficiency
    mm_bytes = 1 if precision == "fp8" else BF16_BYTES
    attn_peak = gpu.peak_flop_per_s * gpu.attention_efficiency
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency

    # ---------------- compute per layer per micro-batch (one GPU) ----------------
    M = b * s / c  # tokens per GPU
    gemm_fwd = (
        _gemm_s(M, h, (hq + 2 * hkv) / t, mm_peak, hbm, mm_bytes)  # QKV
        + _gemm_s(M, hq / t, h, mm_peak, hbm, mm_bytes)  # output projection
        + _gemm_s(M, h, f * (model.mlp_matrices - 1) / t, mm_peak, hbm, mm_bytes)  # fc1 (gate+up)
        + _gemm_s(M, f / t, h, mm_peak, hbm, mm_bytes)  # fc2
    )
    core_flop = 4.0 * b * (s / c) * s * hq / t  # full (non-causal) count, per GPU
    if flash_attention:
        core_fwd = 0.5 * core_flop / attn_peak  # causal mask skips half the blocks
        core_bwd = FLASH_BWD_FACTOR * core_fwd
    else:
        softmax = UNFUSED_SOFTMAX_BYTES * a * (s / c) * s * b / t / hbm
        core_fwd = core_flop / mm_peak + softmax
        core_bwd = 2 * core_flop / mm_peak + 2 * softmax
    rep = np.where(sp, t, 1.0)  # norms/dropout/residual are replicated over TP unless SP
    elem_fwd = M * (ELEMENTWISE_BYTES_PER_HIDDEN * h / rep + (2 * model.mlp_matrices) * f / t) / hbm
    overhead = gpu.layer_overhead_us * 1e-6
    fwd = gemm_fwd + core_fwd + elem_fwd + overhead
    bwd = 2 * gemm_fwd + core_bwd + 2 * elem_fwd + 2 * overhead
    recompute_fwd = np.where(rc == 2, fwd, np.where(rc == 1, core_fwd, 0.0))
    layer_compute = fwd + bwd + recompute_fwd

    # ---------------- tensor-parallel communication ----------------
    tp_bw, tp_lat, _ = comm.group_links(cluster, t, 1)
    act_msg = b * (s / c) * h * BF16_BYTES
    # 2 all-reduces (or all-gather + reduce-scatter pairs of equal volume with SP) per pass
    tp_pass = 2 * comm.allreduce_s(act_msg, t, tp_bw, tp_lat)
    if tp_comm_overlap:  # Transformer Engine userbuffers: TP collectives pipelined with the GEMMs
        tp_exposed_fwd = np.maximum(0.0, tp_pass - gemm_fwd)
        tp_exposed_bwd = np.maximum(0.0, tp_pass - 2 * gemm_fwd)
    else:
        tp_exposed_fwd = tp_exposed_bwd = tp_pass
    # forward, backward, and the recomputed forward
    layer_tp = tp_exposed_fwd * (1 + (rc == 2)) + tp_exposed_bwd

    # ---------------- context-parallel ring exchange (overlapped with the core) ----------------
    cp_bw, cp_lat, _ = comm.group_links(cluster, c, t)
    kv_chunk = 2 * b * (s / c) * hkv / t * BF16_BYTES  # K and V of one chunk
    cp_fwd = (c - 1) * comm.p2p_s(kv_chunk, cp_bw, cp_lat)
    cp_bwd = 2 * cp_fwd  # K/V again plus their gradients
    cp_exposed = np.maximum(0.0, cp_fwd - core_fwd) * (1 + (rc == 2)) + np.maximum(0.0, cp_bwd - core_bwd)
    layer_cp = np.where(c > 1, cp_exposed, 0.0)

    # ---------------- parameters and data-parallel groups ----------------
    shard = d * c  # the distributed optimizer shards over the DP x CP group
    dp_bw, dp_lat, _ = comm.group_links(cluster, shard, t)
    layer_params_gpu = model.params_per_layer / t
    emb_params_gpu = model.embedding_params / t
    head_params_gpu = np.where((not model.tied_embeddings) | (p > 1), emb_params_gpu + 2 * h / t, 2 * h / t)

    # ZeRO-3: gather each layer's parameters for every pass, reduce-scatter its gradients, per
    # micro-batch, overlapped with that layer's compute (prefetch); ZeRO paper's 3x volume.
    # Its per-parameter collectives are not striped over a node's NICs: each rank's traffic
    # crosses its own NIC (the six ZeRO-3 rows of Narayanan et al. Table 2 run at ~16 GB/s
    # per GPU whatever the GPU count, which striping over 8 NICs cannot explain).
    z3_bw = np.where(shard * t <= cluster.gpus_per_node, dp_bw, np.minimum(dp_bw, cluster.nic_bytes_per_s))
    ag = comm.allgather_s(layer_params_gpu * BF16_BYTES, shard, z3_bw, dp_lat)
    rs3 = comm.reducescatter_s(layer_params_gpu * BF16_BYTES, shard, z3_bw, dp_lat)
    z3_exposed = (np.maximum(0.0, ag - fwd) * (1 + (rc == 2)) + np.maximum(0.0, ag + rs3 - bwd))
    # ZeRO-2 keeps only a gradient shard, so gradients are reduce-scattered every micro-batch
    # (overlapped with that layer's backward), not once per step.
    rs2 = comm.reducescatter_s(layer_params_gpu * FP32_BYTES, shard, dp_bw, dp_lat)
    z2_exposed = np.maximum(0.0, rs2 - bwd)
    layer_zero3 = np.where(z == 3, z3_exposed, np.where(z == 2, z2_exposed, 0.0))

    def dp_step(params_gpu):
        """(gradient reduction, parameter all-gather) per step for `params_gpu` parameters."""
        grads = params_gpu * FP32_BYTES
        ar = comm.allreduce_s(grads, shard, dp_bw, dp_lat)
        rs = comm.reducescatter_s(grads, shard, dp_bw, dp_lat)
        ag_step = comm.allgather_s(params_gpu * BF16_BYTES, shard, dp_bw, dp_lat)
        red = np.where(z == 0, ar, np.where(z >= 2, 0.0, rs))
        gat = np.where((z == 1) | (z == 2), ag_step, 0.0)
        return red, gat

    layer_rs, layer_ag = dp_step(layer_params_gpu)
    emb_rs, emb_ag = dp_step(emb_params_gpu)
    head_rs, head_ag = dp_step(head_params_gpu)
    tied_bw, tied_lat = comm.p2p_link(cluster, t * c * d * np.maximum(p - 1, 1))
    tied = np.where(model.tied_embeddings & (p > 1), comm.allreduce_s(emb_params_gpu * FP32_BYTES, 2, tied_bw, tied_lat), 0.0)

    opt_per_param = ADAM_STEP_BYTES_PER_PARAM / hbm / np.where(z >= 1, shard, 1.0)

    # ---------------- first / last stage extras ----------------
    tokens = M
    emb_fwd = tokens * h * BF16_BYTES * 3 / hbm  # gather + dropout
    emb_bwd = (emb_params_gpu * FP32_BYTES + tokens * h * BF16_BYTES * 2) / hbm  # dense grad of the table
    head_fwd = _gemm_s(M, h, V / t, mm_peak, hbm, mm_bytes) + tokens * V / t * CROSS_ENTROPY_BYTES_FWD / hbm
    head_bwd = 2 * _gemm_s(M, h, V / t, mm_peak, hbm, mm_bytes) + tokens * V / t * CROSS_ENTROPY_BYTES_BWD / hbm

    # ---------------- pipeline boundaries ----------------
    pp_bw, pp_lat = comm.p2p_link(cluster, t * c * d)
    boundary = np.where(p > 1, 2 * comm.p2p_s(act_msg / t, pp_bw, pp_lat), 0.0)

    # ---------------- overlap windows of the step-level DP traffic ----------------
    # ZeRO-2 spends the backward on its per-micro-batch reduce-scatter, so only its parameter
    # all-gather (behind the next forward) hides; ZeRO-3 has no step-level traffic.
    # With interleaving the window is still the stage's whole last backward (first forward):
    # Megatron reduces each model chunk's gradients once that chunk's last backward ends, while
    # the other chunks' last backwards run (fitting the H100 rows: hold-out MAPE 5.5% -> 1.5%).
    if overlap_grad_reduce:
        bwd_hides = z <= 1
        fwd_hides = (z == 1) | (z == 2)
        layer_window = (np.where(bwd_hides, bwd + tp_exposed_bwd, 0.0) + np.where(fwd_hides, fwd + tp_exposed_fwd, 0.0))
        first_window = np.where(fwd_hides, emb_fwd, 0.0)
        last_window = np.where(bwd_hides, head_bwd, 0.0)
    else:
        layer_window = first_window = last_window = np.zeros(len(z))

    # ---------------- memory ----------------
    pb, gb, ob = model_state_bytes_per_param(z, shard)
    sbh = b * (s / c) * h
    replicated = 10.0 / rep  # Korthikanti Table 2: norms' inputs, QKV/fc1 inputs, dropout masks
    r_kv, r_q = hkv / h, hq / h
    sharded = (4 * r_q + 4 * r_kv + (2 * model.mlp_matrices) * f / h) / t  # Q, K, V, core out; fc1 out, fc2 in
    if flash_attention:
        core_mem = FP32_BYTES * a * (s / c) * b / t  # softmax statistics only
        core_mem_sel = core_mem
    else:
        core_mem = 5.0 * a * (s / c) * s * b / t  # scores, softmax, dropout mask and output
        core_mem_sel = 0.0
    full_layer_act = sbh * (replicated + sharded) + core_mem
    layer_act = np.where(rc == 2, 2.0 * sbh / rep, np.where(rc == 1, sbh * (replicated + sharded) + core_mem_sel, full_layer_act))
    # transient working sets: one layer's recomputed activations in backward
    work = np.where(rc == 2, full_layer_act, np.where(rc == 1, core_mem - core_mem_sel, 0.0))
    # ZeRO-3: the gathered bf16 weights and bf16 gradients of the live layers (of this TP rank's shard)
    work = work + np.where(z == 3, ZERO3_LIVE_LAYERS * layer_params_gpu * 2 * BF16_BYTES, 0.0)
    first_act = (BF16_BYTES + 1.0) * sbh / rep  # embedding output (bf16) and its dropout mask (1 byte)
    last_act = 4.0 * sbh / rep + LOGIT_BYTES * b * (s / c) * V / t  # final norm, head input, logits

    state = pb + gb + ob
    return StageCoefficients(
        num_microbatches=m,
        pp=p,
        vp=v,
        layer_compute_s=layer_compute,
        layer_tp_s=layer_tp,
        layer_cp_s=layer_cp,
        layer_zero3_s=layer_zero3,
        layer_fwd_s=fwd + tp_exposed_fwd,
        layer_bwd_s=bwd + tp_exposed_bwd,
        first_s=emb_fwd + emb_bwd,
        last_s=head_fwd + head_bwd,
        first_fwd_s=emb_fwd,
        last_bwd_s=head_bwd,
        boundary_s=boundary,
        layer_dp_step_s=layer_rs + layer_ag,
        first_dp_step_s=emb_rs + emb_ag + tied,
        last_dp_step_s=head_rs + head_ag + tied,
        layer_optimizer_step_s=layer_params_gpu * opt_per_param,
        first_optimizer_step_s=emb_params_gpu * opt_per_param,
        last_optimizer_step_s=head_params_gpu * opt_per_param,
        layer_window_s=layer_window,
        first_window_s=first_window,
        last_window_s=last_window,
        layer_params_bytes=layer_params_gpu * pb,
        layer_grads_bytes=layer_params_gpu * gb,
        layer_optimizer_bytes=layer_params_gpu * ob,
        layer_act_bytes=layer_act,
        first_static_bytes=emb_params_gpu * state,
        last_static_bytes=head_params_gpu * state,
        first_act_bytes=first_act,
        last_act_bytes=last_act,
        const_bytes=work,
        capacity_bytes=gpu.usable_memory_bytes,
    )
