"""Per-shape coefficients of the stage-time and stage-memory model.

Once a shape (tp, pp, dp, cp, vp, micro-batch, recompute, SP, ZeRO) is fixed, every cost of
pipeline stage i is linear in its layer count l_i (docs/DESIGN.md section 3):

    tau_i = l_i*layer_s + [i=0]*first_s + [i=p-1]*last_s          (per micro-batch, fwd+bwd)
    mem_i = l_i*(layer_static + mu_i*layer_act) + [i=0]*(...) + [i=p-1]*(...) + const

`stage_coefficients` computes these arrays for a batch of shapes at once; the float
evaluation (`pipeline.py`), the CP-SAT encoding and the baselines all consume them, so there
is exactly one formula for every cost. Its parts:
- kernels (`kernels.py`): GEMMs by their per-GPU shapes (wave and K quantisation), flash
  attention (tensor-core matmuls plus special-function exponentials, overlapped on Hopper by
  fused kernels), memory-bound elementwise work, a per-layer launch overhead; the precision
  recipe's GEMM rate and quantisation traffic (`precision.py`);
- communication (`comm.py`): NCCL ring/tree on each group's links, node NICs shared by the
  rings that cross them;
- overlap, each term explicit: TP collectives exposed (or hidden behind the GEMMs with
  Transformer Engine's userbuffers), the CP ring behind the attention, FSDP / ZeRO-3 per-layer
  gathers prefetched behind the previous layer and reduce-scatters behind the backward, the
  data-parallel reduction behind the last micro-batch's backward, pipeline sends behind the
  other chunk's work when interleaved (Megatron's --overlap-p2p-communication);
- memory (`memory.py`);
- the software stack (`frameworks.py`, `framework=`): eager stacks' saved tensors, logits, model
  state, elementwise traffic, weight casts and per-op dispatch; megatron leaves every term as is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..specs import ClusterSpec, ModelSpec
from . import comm, frameworks
from .layer_terms import (attention_core_s, cp_ring_exposed_s, layer_linears_s, overlapped_s, selective_recompute,
                          sharded_layer_s)
from .recompute import modules_of
from .precision import gathered_param_bytes, matmul_rate, quantize_bytes_per_element, saved_linear_input_bytes
from .kernels import elementwise_bytes_per_token, linear_s
from .moe import attention_geometry, moe_layer_params_per_gpu
from .moe_layer import fold_layers, moe_layer_terms
from .memory import (
    BF16_BYTES, FP32_BYTES, LOGIT_BYTES, ZERO3_LIVE_LAYERS, runtime_bytes,
)
from ..space.shapes import Shapes

GIB = 1024**3
# Adam step per (sharded) parameter, memory bound: fp32 master r/w (8), m r/w (8), v r/w (8),
# fp32 gradient read (4), bf16 weight write (2), gradient zeroing (4), norm for clipping (4).
ADAM_STEP_BYTES_PER_PARAM = 38
# Cross entropy over the vocabulary, bytes per logit (fp32 upcast, exp, normalise; backward).
CROSS_ENTROPY_BYTES_FWD = 16
CROSS_ENTROPY_BYTES_BWD = 8
# ZeRO-2/3 (FSDP) per micro-batch: the layer's unsharded bf16 gradient is cast into the
# reduce-dtype buffer (read 2, write g) and pre-divided by the group size (read g, write g)
# before the reduce-scatter (PyTorch FSDP `_reduce_grad` / `_div_if_needed`): 2 + 3g bytes per
# parameter of the whole layer. Megatron's data-parallel paths accumulate into fp32 main
# gradients inside the weight-gradient GEMM and pay nothing extra.
def zero_grad_copy_bytes(grad_bytes: float) -> float:
    return 2.0 + 3.0 * grad_bytes


def grad_reduce_bytes(precision: str, grad_reduce_dtype: str) -> float:
    """Bytes per gradient element in the data-parallel reduction."""
    return 2.0 if precision == "fp16" or grad_reduce_dtype == "bf16" else FP32_BYTES


def reduced_params_per_gpu(model: ModelSpec, tp, pp):
    """(per layer, embedding, head) parameters one GPU reduces over data parallelism: the
    three parts of a stage's step-level gradient reduction."""
    h, t = model.hidden_size, np.asarray(tp, dtype=np.float64)
    emb = model.embedding_params / t
    head = np.where((not model.tied_embeddings) | (np.asarray(pp) > 1), emb + 2 * h / t, 2 * h / t)
    return model.params_per_layer / t, emb, head


def distributed_optimizer_dominates(model: ModelSpec, cluster: ClusterSpec, tp, cp, dp, pp, *,
                                    precision: str = "bf16", grad_reduce_dtype: str = "fp32", ep=1,
                                    etp=1, fp8_param_gather: bool = False) -> np.ndarray:
    """Where zero=1 is no slower than zero=0 with every other knob the same, exactly under this
    formulation: its reduce-scatter + all-gather (each a ring) take no longer than zero=0's
    all-reduce for each of the three parts a stage reduces (`reduced_params_per_gpu`), its
    overlap window is a superset (the all-gather also hides behind the next forward), its
    optimizer step is sharded and its memory smaller. The all-reduce may be NCCL's tree, whose
    latency is logarithmic in the nodes: across nodes with small parts it beats the two rings.
    A MoE model's parts add the MoE layers' non-expert parameters (over dp x cp) and their local
    experts (over the expert-data-parallel group, `moe_layer.moe_layer_terms`), each reduced on its own.
    The layers' weights are gathered in `precision.gathered_param_bytes` (FP8 with fp8_param_gather),
    the embedding's and the head's in BF16."""
    shard = np.asarray(dp, dtype=np.float64) * np.asarray(cp, dtype=np.float64)
    g = grad_reduce_bytes(precision, grad_reduce_dtype)
    ok = np.ones(np.broadcast(shard, np.asarray(tp), np.asarray(ep)).shape, dtype=bool)
    layer_bytes = gathered_param_bytes(precision, fp8_param_gather)
    layer, emb, head = reduced_params_per_gpu(model, tp, pp)
    parts = [(layer, shard, tp, layer_bytes), (emb, shard, tp, BF16_BYTES), (head, shard, tp, BF16_BYTES)]
    if model.is_moe:
        ep, etp = np.asarray(ep, dtype=np.float64), np.asarray(etp, dtype=np.float64)
        ne, ex = moe_layer_params_per_gpu(model, tp, ep, etp)
        parts += [(ne, shard, tp, layer_bytes), (ex, np.asarray(tp) * shard / (ep * etp), ep * etp, layer_bytes)]
    for params, n, stride, param_bytes in parts:
        ar = comm.collective_s("all_reduce", params * g, cluster, n, stride)
        two = (comm.collective_s("reduce_scatter", params * g, cluster, n, stride)
               + comm.collective_s("all_gather", params * param_bytes, cluster, n, stride))
        ok &= two <= ar * (1 + 1e-12)
    return ok


@dataclass(frozen=True)
class StageCoefficients:
    """Arrays over shapes. Times in seconds, memory in bytes; `layer_*` per layer,
    `first_*`/`last_*` the extras of the first/last stage. Per micro-batch unless `_step`."""

    num_microbatches: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    # time per micro-batch, forward + backward (+ recompute), by kind
    layer_compute_s: np.ndarray
    layer_tp_s: np.ndarray  # exposed TP collectives
    layer_cp_s: np.ndarray  # exposed part of the CP ring exchange
    layer_zero3_s: np.ndarray  # exposed per-micro-batch sharding traffic (ZeRO-2 reduce-scatter, ZeRO-3 gathers)
    layer_fwd_s: np.ndarray  # forward only (overlap window of the parameter all-gather)
    layer_bwd_s: np.ndarray  # backward only (overlap window of the gradient reduction)
    first_s: np.ndarray
    last_s: np.ndarray
    first_fwd_s: np.ndarray
    last_bwd_s: np.ndarray
    boundary_s: np.ndarray  # exposed p2p per micro-batch per stage boundary, forward + backward
    # once per step: data-parallel gradient reduction (all-reduce, or reduce-scatter + parameter
    # all-gather with a sharded optimizer) and the optimizer step
    layer_dp_step_s: np.ndarray
    first_dp_step_s: np.ndarray  # embedding gradient reduction (+ tied-embedding all-reduce)
    last_dp_step_s: np.ndarray
    layer_optimizer_step_s: np.ndarray
    first_optimizer_step_s: np.ndarray
    last_optimizer_step_s: np.ndarray
    # the part of a stage's step-level DP traffic that hides behind computation: the last
    # micro-batch's backward (reduction) and the next step's first forward (the sharded
    # optimizer's parameter all-gather); zero without --overlap-grad-reduce
    layer_window_s: np.ndarray
    first_window_s: np.ndarray
    last_window_s: np.ndarray
    # memory per GPU, bytes (allocated: before fragmentation and the runtime reserve)
    layer_params_bytes: np.ndarray
    layer_grads_bytes: np.ndarray
    layer_optimizer_bytes: np.ndarray
    layer_act_bytes: np.ndarray  # per in-flight micro-batch
    first_static_bytes: np.ndarray  # embedding params + grads + optimizer state
    last_static_bytes: np.ndarray
    first_act_bytes: np.ndarray  # per in-flight micro-batch
    last_act_bytes: np.ndarray  # logits and loss buffers (one micro-batch in flight)
    const_bytes: np.ndarray  # working sets: full-recompute layer, ZeRO-3 gathered layers
    fragmentation: float  # the allocator's reserve over allocated memory (fraction)
    runtime_bytes: np.ndarray  # CUDA context, workspaces, NCCL buffers
    capacity_bytes: float
    layer_ep_s: np.ndarray = None  # exposed expert-parallel all-to-alls (MoE layers; 0 for a dense model)

    def __post_init__(self):
        if self.layer_ep_s is None:
            object.__setattr__(self, "layer_ep_s", np.zeros(len(self.pp)))

    @property
    def layer_s(self) -> np.ndarray:
        return self.layer_compute_s + self.layer_tp_s + self.layer_cp_s + self.layer_zero3_s + self.layer_ep_s

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


def stage_coefficients(
    model: ModelSpec,
    cluster: ClusterSpec,
    shapes: Shapes,
    *,
    global_batch_size: int,
    seq_length: int,
    precision: str = "bf16",
    flash_attention: bool = True,
    attention_kernel: str = "cudnn",
    grad_reduce_dtype: str = "fp32",
    overlap_grad_reduce: bool = True,
    tp_comm_overlap: bool = False,
    moe_load_imbalance: float = 1.0,
    moe_a2a_overlap: bool = False,
    moe_token_dispatcher: str = "alltoall",
    framework: str = "megatron",
    recompute_modules=None,
    fp8_param_gather: bool = False,
    cuda_graph_impl: str = "none",
    cuda_graph_modules: tuple = (),
) -> StageCoefficients:
    gpu = cluster.gpu
    stack = frameworks.profile(framework)  # the software stack's terms (frameworks.py); megatron: none
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
    # q and kv widths: attention_geometry below
    s = float(seq_length)
    m = shapes.num_microbatches(global_batch_size)
    rep = np.where(sp, t, 1.0)  # norms, residuals and dropout are replicated over TP unless SP

    # ---------------- compute per layer per micro-batch (one GPU) ----------------
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    mm = matmul_rate(gpu, precision, hbm)  # the precision recipe's GEMM rate (precision.py)
    cast_bytes = quantize_bytes_per_element(precision)  # and its quantisation traffic
    M = b * s / c  # tokens of a micro-batch on this GPU
    # attention's linears (multi-latent attention's too: moe.attention_geometry), then the MLP's
    attn_linears, hq, hkv, head_dim, latent_width = attention_geometry(model, t)
    g = layer_linears_s(model, attn_linears, M, t, mm, cast_bytes, hbm)
    gemm_fwd, gemm_bwd, cast_fwd, cast_bwd = g.gemm_fwd, g.gemm_bwd, g.cast_fwd, g.cast_bwd
    mlp_fwd, mlp_bwd = g.mlp_fwd, g.mlp_bwd
    core_fwd, core_bwd = attention_core_s(gpu, batch=b, heads=a / t, s_q=s / c, s_k=s, head_dim=head_dim,
                                          flash=flash_attention, kernel=attention_kernel, hbm_bytes_per_s=hbm)
    el_fwd, el_bwd = frameworks.elementwise_bytes_per_token(
        stack, hidden=h, q_width=hq, kv_width=hkv, ffn=f, gated=model.gated_mlp,
        rotary=model.position_embedding == "rope", sp_degree=rep, tp=t)
    # launch overhead per layer and pass; sharded data parallelism adds its per-layer hooks
    overhead = (gpu.layer_overhead_us + np.where(z >= 2, gpu.sharded_layer_overhead_us, 0.0)) * 1e-6
    fwd = gemm_fwd + cast_fwd + core_fwd + M * el_fwd / hbm + overhead
    bwd = gemm_bwd + cast_bwd + core_bwd + M * el_bwd / hbm + 2 * overhead
    fwd, bwd = frameworks.eager_layer_s(stack, fwd, bwd, z, model.params_per_layer / t, hbm)
    # selective recomputation by Megatron module (recompute.py; the default, core_attn, is the
    # attention core alone): the dense layer's modules
    mods = modules_of(recompute_modules)
    sel = selective_recompute(model, mods, g, tokens=M, tp=t, rep=rep, core_fwd=core_fwd,
                              linear_input_bytes=saved_linear_input_bytes(precision), hbm=hbm)
    core_on = "core_attn" in mods
    recompute_fwd = np.where(rc == 2, fwd, np.where(rc == 1, sel.time_s, 0.0))
    layer_compute = fwd + bwd + recompute_fwd

    # ---------------- tensor-parallel collectives ----------------
    act_msg = b * (s / c) * h * BF16_BYTES
    # per pass: 2 all-reduces, or with SP 2 all-gathers + 2 reduce-scatters of equal volume
    tp_pass = 2 * comm.collective_s("all_reduce", act_msg, cluster, t, 1)
    phi = comm.interference(gpu.num_sms)  # compute lost while a collective runs beside it

    def hidden(comm_s, window_s):
        return overlapped_s(comm_s, window_s, phi)

    if tp_comm_overlap:  # Transformer Engine userbuffers: TP collectives pipelined with the GEMMs
        tp_exposed_fwd = hidden(tp_pass, gemm_fwd)
        tp_exposed_bwd = hidden(tp_pass, gemm_bwd)
    else:
        tp_exposed_fwd = tp_exposed_bwd = tp_pass
    layer_tp = tp_exposed_fwd * (1 + (rc == 2)) + tp_exposed_bwd

    layer_cp = cp_ring_exposed_s(cluster, kv_chunk_bytes=2 * b * (s / c) * hkv / t * BF16_BYTES, cp=c, tp=t,
                                 core_fwd=core_fwd, core_bwd=core_bwd, recompute=rc, phi=phi)

    # ---------------- parameters and data-parallel groups ----------------
    shard = d * c  # the distributed optimizer shards over the DP x CP group (stride tp)
    grad_bytes = grad_reduce_bytes(precision, grad_reduce_dtype)
    layer_params_gpu, emb_params_gpu, head_params_gpu = reduced_params_per_gpu(model, t, p)

    def dp_collective(kind, size):
        return comm.collective_s(kind, size, cluster, shard, t)

    z2_mb = stack.zero2_gathers_every_microbatch
    layer_zero3, z_edges = sharded_layer_s(
        ag=dp_collective("all_gather", layer_params_gpu * BF16_BYTES),
        rs=dp_collective("reduce_scatter", layer_params_gpu * grad_bytes), fwd=fwd, bwd_window=bwd + recompute_fwd,
        grad_copy=zero_grad_copy_bytes(grad_bytes) * model.params_per_layer / t / hbm, zero=z,
        zero2_gathers_every_microbatch=z2_mb, phi=phi)

    layer_param_bytes = gathered_param_bytes(precision, fp8_param_gather)  # FP8 weights gathered in FP8

    def dp_step(params_gpu, param_bytes=BF16_BYTES):
        """(gradient reduction, parameter all-gather) per step for `params_gpu` parameters, gathered
        in `param_bytes` each (the embedding and head stay BF16)."""
        grads = params_gpu * grad_bytes
        ar = dp_collective("all_reduce", grads)
        rs = dp_collective("reduce_scatter", grads)
        ag_step = dp_collective("all_gather", params_gpu * param_bytes)
        red = np.where(z == 0, ar, np.where(z >= 2, 0.0, rs))
        gat = np.where((z == 1) | ((z == 2) & (not z2_mb)), ag_step, 0.0)
        return red, gat

    layer_red, layer_ag = dp_step(layer_params_gpu, layer_param_bytes)
    emb_red, emb_ag = dp_step(emb_params_gpu)
    head_red, head_ag = dp_step(head_params_gpu)
    tied_bw, tied_lat = comm.p2p_link(cluster, t * c * d * np.maximum(p - 1, 1))
    tied = np.where(model.tied_embeddings & (p > 1),
                    comm.allreduce_s(emb_params_gpu * grad_bytes, 2, tied_bw, tied_lat), 0.0)
    opt_per_param = ADAM_STEP_BYTES_PER_PARAM / hbm / np.where(z >= 1, shard, 1.0)

    # ---------------- first / last stage extras ----------------
    emb_fwd = M * h * BF16_BYTES * 3 / hbm  # gather + dropout
    emb_bwd = (emb_params_gpu * FP32_BYTES + M * h * BF16_BYTES * 2) / hbm  # dense gradient of the table
    bf16mm = {**mm, "flop_per_s": gpu.peak_flop_per_s, "efficiency": gpu.matmul_efficiency, "in_bytes": BF16_BYTES}
    head_f, head_b = linear_s(M, V / t, h, **bf16mm)
    ce_fwd, ce_bwd = stack.cross_entropy_bytes or (CROSS_ENTROPY_BYTES_FWD, CROSS_ENTROPY_BYTES_BWD)
    head_fwd = head_f + M * V / t * ce_fwd / hbm
    head_bwd = head_b + M * V / t * ce_bwd / hbm

    # ---------------- overlap windows of the step-level DP traffic ----------------
    # The reduction hides behind the stage's last backward (all chunks: Megatron reduces each
    # model chunk's gradients once its last backward ends, while the others' run); the
    # distributed optimizer's all-gather behind the next step's first forward.
    bwd_hides = (z <= 1) & overlap_grad_reduce
    fwd_hides = ((z == 1) | ((z == 2) & (not z2_mb))) & overlap_grad_reduce

    def window(fwd_s, bwd_s):
        return np.where(bwd_hides, bwd_s, 0.0) + np.where(fwd_hides, fwd_s, 0.0)

    if overlap_grad_reduce:
        layer_window = window(fwd + tp_exposed_fwd, bwd + tp_exposed_bwd)
        first_window = np.where(fwd_hides, emb_fwd, 0.0)
        last_window = np.where(bwd_hides, head_bwd, 0.0)
    else:
        layer_window = first_window = last_window = np.zeros(len(z))

    # ---------------- memory ----------------
    pb, gb, ob = frameworks.model_state_bytes_per_param(stack, z, shard, precision, grad_reduce_dtype, fp8_param_gather)
    act_kw = dict(tokens=M, hidden=h, q_width=hq, kv_width=hkv, mlp_matrices=model.mlp_matrices, heads=a,
                  seq_k=s, tp=t, sp_degree=rep, recompute=rc, flash=flash_attention, dropout=model.dropout > 0,
                  linear_input_bytes=saved_linear_input_bytes(precision))
    layer_act, working = frameworks.layer_activation_bytes(stack, gated=model.gated_mlp, ffn=f, **act_kw)
    # selective by module: the score terms stay unless core_attn is recomputed (unfused
    # attention only); the modules' outputs are freed, the normally checkpointed MLP rebuilt
    # one layer at a time
    scores = 0.0 if flash_attention or core_on else 5.0 * (a / t) * M * s
    layer_act = layer_act - np.where(rc == 1, sel.freed_bytes - scores + sel.mlp_freed_bytes, 0.0)
    working = working + np.where(rc == 1, sel.mlp_freed_bytes - scores, 0.0)
    if latent_width:  # multi-latent attention: the latents, kept on every TP rank
        layer_act = layer_act + np.where(rc == 2, 0.0, latent_width * M)
        working = working + np.where(rc == 2, latent_width * M, 0.0)
    working = working + np.where(z == 3, ZERO3_LIVE_LAYERS * layer_params_gpu
                                  * frameworks.zero3_live_bytes_per_param(stack, grad_bytes), 0.0)
    first_act = (BF16_BYTES + (model.dropout > 0)) * M * h / rep  # embedding output (bf16) and its dropout mask
    last_act = frameworks.last_stage_act_bytes(stack, M, h, V, t, rep)  # final norm, head input, logits

    state = pb + gb + ob
    dense = dict(compute=layer_compute, tp=layer_tp, cp=layer_cp, zero3=layer_zero3, ep=np.zeros(len(z)),
                 fwd=fwd + tp_exposed_fwd, bwd=bwd + tp_exposed_bwd, work=fwd + bwd, dp_step=layer_red + layer_ag,
                 opt=layer_params_gpu * opt_per_param, window=layer_window, params=layer_params_gpu * pb,
                 grads=frameworks.layer_grads_at_peak_bytes(stack, z, shard, layer_params_gpu, layer_params_gpu * gb,
                                                         layer_act, m),
                 optim=layer_params_gpu * ob, act=layer_act, working=working)
    ends = dict(first_s=emb_fwd + emb_bwd + z_edges, last_s=head_fwd + head_bwd, first_fwd_s=emb_fwd,
                last_bwd_s=head_bwd, first_dp_step_s=emb_red + emb_ag + tied, last_dp_step_s=head_red + head_ag + tied,
                first_optimizer_step_s=emb_params_gpu * opt_per_param,
                last_optimizer_step_s=head_params_gpu * opt_per_param, first_window_s=first_window,
                last_window_s=last_window, first_static_bytes=emb_params_gpu * state,
                last_static_bytes=head_params_gpu * state, first_act_bytes=first_act, last_act_bytes=last_act)
    unit, units = dense, model.num_layers
    if model.is_moe or model.mtp_num_layers:
        moe_layer = None
        if model.is_moe:
            el0_fwd, el0_bwd = elementwise_bytes_per_token(hidden=h, q_width=hq, kv_width=hkv, ffn=0, gated=model.gated_mlp,
                                                           rotary=model.position_embedding == "rope", sp_degree=rep, tp=t)
            attn_fwd = fwd - mlp_fwd - M * (el_fwd - el0_fwd) / hbm  # the layer without its MLP
            attn_bwd = bwd - mlp_bwd - M * (el_bwd - el0_bwd) / hbm
            moe_layer = moe_layer_terms(
                model, cluster, shapes, M=M, attn_fwd=attn_fwd, attn_bwd=attn_bwd, attn_gemm_fwd=gemm_fwd - mlp_fwd,
                attn_gemm_bwd=gemm_bwd - mlp_bwd, core_fwd=core_fwd, tp_pass=tp_pass, hidden=hidden,
                tp_comm_overlap=tp_comm_overlap, layer_cp=layer_cp, dp_step=dp_step, opt_per_param=opt_per_param,
                window=window, state_bytes=(pb, gb, ob), grad_bytes=grad_bytes, act_kw=act_kw,
                adam_s_per_param=ADAM_STEP_BYTES_PER_PARAM / hbm, a2a_overlap=moe_a2a_overlap,
                dispatcher=moe_token_dispatcher,
                latent_bytes=latent_width * M, hbm=hbm, mm=mm, bf16mm=bf16mm, precision=precision,
                grad_reduce_dtype=grad_reduce_dtype, fp8_param_gather=fp8_param_gather,
                cuda_graph=(cuda_graph_impl, tuple(cuda_graph_modules)),
                imbalance=moe_load_imbalance,
                selective=dict(mods=mods, attn_s=sel.attention_s, attn_freed=sel.attention_freed_bytes - scores,
                               attn_working=-scores))
        proj_f, proj_b = linear_s(M, h / t, 2 * h, **mm)  # MTP's projection of [norm(h); norm(emb)] (2h -> h)
        unit, units, ends = fold_layers(model, dense, moe_layer, ends, mtp_extra=dict(
            fwd=proj_f + head_fwd, bwd=proj_b + head_bwd, params=2 * h * h / t, state=state, opt=opt_per_param,
            dp_step=dp_step, logits=LOGIT_BYTES * M * V / t))

    # ---------------- pipeline boundaries ----------------
    # each TP rank sends its 1/t of the activations (sequence parallelism, or Megatron's
    # scatter-gather optimisation: Narayanan et al. 2021 Sec. 4.1), over its own NIC
    pp_bw, pp_lat = comm.p2p_link(cluster, t * c * d)
    p2p = 2 * comm.p2p_s(act_msg / t, pp_bw, pp_lat)
    # interleaved: Megatron overlaps the sends with the other chunk's compute (default on)
    chunk_work = unit["work"] * units / np.maximum(p * v, 1)
    boundary = np.where(p > 1, np.where(v > 1, np.maximum(0.0, p2p - chunk_work), p2p), 0.0)

    return StageCoefficients(
        num_microbatches=m,
        pp=p,
        vp=v,
        layer_compute_s=unit["compute"],
        layer_tp_s=unit["tp"],
        layer_cp_s=unit["cp"],
        layer_zero3_s=unit["zero3"],
        layer_fwd_s=unit["fwd"],
        layer_bwd_s=unit["bwd"],
        boundary_s=boundary,
        layer_dp_step_s=unit["dp_step"],
        layer_optimizer_step_s=unit["opt"],
        layer_window_s=unit["window"],
        layer_params_bytes=unit["params"],
        layer_grads_bytes=unit["grads"],
        layer_optimizer_bytes=unit["optim"],
        layer_act_bytes=unit["act"],
        const_bytes=unit["working"],
        fragmentation=float(gpu.runtime_reserve_fraction),
        runtime_bytes=runtime_bytes(gpu.runtime_reserve_gib, t, c, d, p, ep=shapes.ep, etp=shapes.etp),
        capacity_bytes=float(gpu.hbm_bytes),
        layer_ep_s=unit["ep"],
        **ends,
    )
