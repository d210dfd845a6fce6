"""Per-shape coefficients of the stage-time and stage-memory model.

Once a shape (tp, pp, dp, cp, vp, micro-batch, recompute, SP, ZeRO) is fixed, every cost of
pipeline stage i is linear in its layer count l_i (docs/DESIGN.md section 3):

    tau_i = l_i*layer_s + [i=0]*first_s + [i=p-1]*last_s          (per micro-batch, fwd+bwd)
    mem_i = l_i*(layer_static + mu_i*layer_act) + [i=0]*(...) + [i=p-1]*(...) + const

`stage_coefficients` computes these arrays for a batch of shapes at once; the float evaluation (`pipeline.py`),
the CP-SAT encoding and the baselines all consume them, so there is exactly one formula for every cost. Its parts:
- kernels (`kernels.py`): GEMMs by their shapes (wave and K quantisation), flash attention (matmuls
  plus exponentials, overlapped on Hopper by fused kernels), memory-bound elementwise work, a per-layer
  launch overhead; the precision recipe's GEMM rate and quantisation traffic (`precision.py`);
- communication (`comm.py`): NCCL ring/tree on each group's links, node NICs shared by the rings that cross them;
- overlap, each term explicit: TP collectives exposed (or hidden behind the GEMMs with Transformer Engine's
  userbuffers), the CP ring behind the attention, FSDP / ZeRO-3 per-layer gathers prefetched behind the previous
  layer and reduce-scatters behind the backward, the data-parallel reduction behind the last micro-batch's
  backward, pipeline sends behind the other chunk's work when interleaved (Megatron's --overlap-p2p-communication);
- memory (`memory.py`), less what fine-grained activation offloading moves to the host (`fine_offload.py`);
- the software stack (`frameworks.py`, `framework=`): eager stacks' saved tensors, logits, model
  state, elementwise traffic, weight casts and per-op dispatch; megatron leaves every term as is;
- LoRA (`lora.py`, `lora=`): the frozen base without weight gradients, training state, DP reduction or
  saved linear inputs (`trained_params`), and the adapters' own terms (`adapters`).
"""

from __future__ import annotations

import numpy as np

from ..space.shapes import Shapes
from ..specs import ClusterSpec, ModelSpec
from ..specs.frameworks import windows_skipped
from ..specs.offloading import MIN_OFFLOADED_ELEMENTS
from . import comm, dsa, dsv4, eager_attention, ep_buffers, frameworks, lora, memory, module_rates
from .data_parallel import (
    embedding_group_allreduce_s,
    grad_reduce_bytes,
    hsdp_step_s,
    reduced_params_per_gpu,
    zero_grad_copy_bytes,
)
from .fine_offload import attention_offloaded, with_fine_offload
from .hybrid import hybrid_unit
from .kernels import linear_s
from .layer_terms import (
    attention_core_s,
    bf16_layer_extra_s,
    cp_a2a_s,
    cp_ring_exposed_s,
    fp8_attention_cast_s,
    layer_linears_s,
    mlp_linears,
    output_gate_s,
    overlapped_s,
    per_parameter_zero3_live_bytes,
    per_parameter_zero3_s,
    selective_recompute,
    sharded_terms,
    sharding_of,
    windowed_attention_s,
)
from .memory import BF16_BYTES, FP32_BYTES, runtime_bytes
from .moe import attention_geometry
from .moe_layer import fold_layers, moe_layer_of
from .mtp import with_mtp
from .precision import (
    edge_weight_precision,
    gathered_param_bytes,
    matmul_rate,
    quantize_bytes_per_element,
    saved_linear_input_bytes,
)
from .recompute import modules_of
from .stage import StageCoefficients

GIB = 1024**3
# Cross entropy over the vocabulary, bytes per logit (fp32 upcast, exp, normalise; backward).
CROSS_ENTROPY_BYTES_FWD = 16
CROSS_ENTROPY_BYTES_BWD = 8


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
    fp8_attention: bool = False,
    bf16_layers: tuple[int, int] = (0, 0),
    adam_state_bytes: float = memory.ADAM_STATE_BYTES,
    offload_modules: tuple = (),
    min_offloaded_tensor_size: int = MIN_OFFLOADED_ELEMENTS,
    zero3_gathers: str = "prefetched",
    distributed_optimizer_instances: int = 1,
    lora: tuple[int, tuple[str, ...]] | None = None,
    module_precision: tuple = (),
) -> StageCoefficients:
    terms = _StageTerms(model, cluster, shapes, dict(
        global_batch_size=global_batch_size, seq_length=seq_length, precision=precision,
        flash_attention=flash_attention, attention_kernel=attention_kernel, grad_reduce_dtype=grad_reduce_dtype,
        overlap_grad_reduce=overlap_grad_reduce, tp_comm_overlap=tp_comm_overlap,
        moe_load_imbalance=moe_load_imbalance, moe_a2a_overlap=moe_a2a_overlap,
        moe_token_dispatcher=moe_token_dispatcher, framework=framework, recompute_modules=recompute_modules,
        fp8_param_gather=fp8_param_gather, cuda_graph=(cuda_graph_impl, tuple(cuda_graph_modules)),
        fp8_attention=fp8_attention,
        bf16_layers=bf16_layers, adam_state_bytes=adam_state_bytes, offload_modules=offload_modules,
        min_offloaded_tensor_size=min_offloaded_tensor_size,
        zero3_gathers=zero3_gathers, instances=distributed_optimizer_instances, lora=lora,
        module_precision=module_precision))
    terms.run_sections()
    unit, units, ends = terms.per_layer_and_ends()
    return terms.coefficients(unit, units, ends)


class _StageTerms:
    """`stage_coefficients` section by section (the module docstring's parts), each a method
    run in order; what a section derives and a later one reads is an attribute. The shape's
    arrays keep their one-letter names (t tp, c cp, d dp, p pp, v vp, b micro-batch, rc
    recompute, z ZeRO; h hidden, f ffn, V vocabulary, a heads, s sequence, m micro-batches)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, shapes: Shapes, options: dict):
        self.model, self.cluster, self.shapes, self.options = model, cluster, shapes, options
        self.precision = options["precision"]
        self.flash_attention, self.attention_kernel = options["flash_attention"], options["attention_kernel"]
        self.grad_reduce_dtype, self.overlap_grad_reduce = options["grad_reduce_dtype"], options["overlap_grad_reduce"]
        self.tp_comm_overlap, self.recompute_modules = options["tp_comm_overlap"], options["recompute_modules"]
        self.moe_load_imbalance, self.moe_a2a_overlap = options["moe_load_imbalance"], options["moe_a2a_overlap"]
        self.moe_token_dispatcher = options["moe_token_dispatcher"]
        self.fp8_attention = options.get("fp8_attention", False)  # attention in FP8 (specs/fp8_attention.py)
        self.fp8_param_gather, self.cuda_graph = options["fp8_param_gather"], options["cuda_graph"]
        self.adam_state_bytes = options["adam_state_bytes"]  # per parameter before sharding (memory.py)
        self.lora = options.get("lora")  # (rank, target modules): LoRA's frozen base and its adapters (lora.py)
        self.bf16_layers = options.get("bf16_layers", (0, 0))
        self.roles = module_rates.roles_of(model, options)  # per-module precision (module_rates.py): {} without rules
        self.gpu = cluster.gpu
        self.offload_modules = frozenset(options.get("offload_modules", ()))  # fine-grained offloading (fine_offload.py)
        self.host_bytes_per_s = (self.gpu.host_link_gbyte_per_s or 0.0) * 1e9
        self.min_offloaded_elements = options.get("min_offloaded_tensor_size", MIN_OFFLOADED_ELEMENTS)
        self.stack = frameworks.profile(options["framework"])  # the software stack's terms (frameworks.py); megatron: none
        self.fam = frameworks.family_counts(self.stack, model, options["seq_length"])  # transformers: eager_layers.py
        self.t = shapes.tp.astype(np.float64)
        self.c = shapes.cp.astype(np.float64)
        self.d = shapes.dp.astype(np.float64)
        self.p = shapes.pp
        self.v = shapes.vp
        self.b = shapes.micro_batch_size.astype(np.float64)
        sp = shapes.sequence_parallel
        self.rc = shapes.recompute
        self.z = shapes.zero
        self.h, self.f, self.V, self.a = model.hidden_size, model.ffn_hidden_size, model.vocab_size, model.num_attention_heads
        # q and kv widths: attention_geometry (layer_compute)
        self.s = float(options["seq_length"])
        self.m = shapes.num_microbatches(options["global_batch_size"])
        self.rep = np.where(sp, self.t, 1.0)  # norms, residuals and dropout are replicated over TP unless SP

    def run_sections(self) -> _StageTerms:
        """Run the sections in order (the module docstring's parts); the per-layer terms after."""
        for section in (self.layer_compute, self.tensor_and_context_parallel, self.data_parallel, self.stage_ends,
                        self.overlap_windows, self.memory):
            section()
        return self

    def layer_compute(self) -> None:
        """Compute per layer per micro-batch (one GPU)."""
        model, gpu, stack, precision = self.model, self.gpu, self.stack, self.precision
        t, c, b, s, a, h, f, rep, rc, z = self.t, self.c, self.b, self.s, self.a, self.h, self.f, self.rep, self.rc, self.z
        self.hbm = hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
        self.mm = mm = matmul_rate(gpu, precision, hbm)  # the precision recipe's GEMM rate (precision.py)
        if self.lora:  # a frozen weight has no weight-gradient GEMM (lora.py); the adapters' own: `adapter_s`
            self.mm = mm = {**mm, "weight_grad": False}
        # BF16 GEMMs whatever the recipe (the LM head, LoRA's adapters)
        self.bf16mm = {**mm, "flop_per_s": gpu.peak_flop_per_s, "efficiency": gpu.matmul_efficiency, "in_bytes": BF16_BYTES}
        cast_bytes = quantize_bytes_per_element(precision)  # and its quantisation traffic
        self.M = M = b * s / c  # tokens of a micro-batch on this GPU
        # attention's linears (multi-latent attention's too: moe.attention_geometry), then the MLP's
        attn_linears, self.hq, self.hkv, head_dim, self.latent_width = attention_geometry(model, t)
        hq, hkv = self.hq, self.hkv
        self.g = g = layer_linears_s(model, attn_linears, M, t, mm, cast_bytes, hbm,
                                     attn=module_rates.role_rate(self, "attention"), mlp=module_rates.role_rate(self, "mlp"))
        gemm_fwd, gemm_bwd, cast_fwd, cast_bwd = g.gemm_fwd, g.gemm_bwd, g.cast_fwd, g.cast_bwd
        core_fwd, core_bwd = attention_core_s(
            gpu, batch=b, heads=a / t, s_q=s / c, s_k=s, head_dim=head_dim, flash=self.flash_attention,
            kernel=self.attention_kernel, hbm_bytes_per_s=hbm, fp8=self.fp8_attention)
        fam = self.fam
        if fam is not None and fam.masked_layers and self.flash_attention:  # sliding windows' explicit masks
            masked = attention_core_s(gpu, batch=b, heads=a / t, s_q=s / c, s_k=s, head_dim=head_dim, flash=True,
                                      kernel="masked", hbm_bytes_per_s=hbm)
            core_fwd, core_bwd = frameworks.masked_attention_s(fam, model.num_layers, (core_fwd, core_bwd), masked)
        elif windows_skipped(self.stack.name, model) and self.flash_attention:  # the kernel skips what a window masks
            core_fwd, core_bwd = windowed_attention_s(gpu, model, (core_fwd, core_bwd), kernel=self.attention_kernel,
                                                      batch=b, heads=a / t, s_q=s / c, s_k=s, head_dim=head_dim,
                                                      hbm_bytes_per_s=hbm, fp8=self.fp8_attention)
        if self.fp8_attention:  # FP8 attention's casts of its inputs and outputs (specs/fp8_attention.py)
            casts = fp8_attention_cast_s(self.precision, M, hq / t, hkv / t, hbm)
            core_fwd, core_bwd = core_fwd + casts[0], core_bwd + casts[1]
        if model.is_dsa or model.is_dsv4:  # DeepSeek's sparse attention: the core, the indexer (dsa.py, dsv4.py)
            core_fwd, core_bwd = (dsv4 if model.is_dsv4 else dsa).attention_s(gpu, model, batch=b, heads=a / t,
                                                                              s_q=s / c, s_k=s, hbm=hbm)
        self.core_fwd, self.core_bwd = core_fwd, core_bwd
        self.el_fwd, self.el_bwd = el_fwd, el_bwd = frameworks.elementwise_bytes_per_token(
            stack, fam=fam, hidden=h, q_width=hq, kv_width=hkv, ffn=f, gated=model.gated_mlp,
            rotary=model.position_embedding == "rope", sp_degree=rep, tp=t,
            attention_extra=eager_attention.traffic_extra_bytes(model, t))
        # launch overhead per layer and pass; sharded data parallelism adds its per-layer hooks
        self.overhead_s = overhead = (gpu.layer_overhead_us + np.where(z >= 2, gpu.sharded_layer_overhead_us, 0.0)) * 1e-6
        gate_fwd, gate_bwd = output_gate_s(model, M, t, hbm)  # the attention output gate, 0 without one
        self.adapters_gpu, (lora_fwd, lora_bwd) = self.adapters(attn_linears)
        fwd = gemm_fwd + cast_fwd + core_fwd + M * el_fwd / hbm + gate_fwd + lora_fwd + overhead
        bwd = gemm_bwd + cast_bwd + core_bwd + M * el_bwd / hbm + gate_bwd + lora_bwd + 2 * overhead
        self.fwd_gpu, self.bwd_gpu = fwd, bwd  # before an eager stack's casts and host bound (a MoE layer's own)
        self.fwd, self.bwd = fwd, bwd = frameworks.eager_layer_s(stack, fwd, bwd, z, model.params_per_layer / t, hbm, fam,
                                                                 self.m, extra_ops=eager_attention.ops_extra(model))
        # selective recomputation by Megatron module (recompute.py; the default, core_attn, is the
        # attention core alone): the dense layer's modules
        self.mods = mods = modules_of(self.recompute_modules)
        self.sel = sel = selective_recompute(model, mods, g, tokens=M, tp=t, rep=rep, core_fwd=core_fwd,
                                             linear_input_bytes=saved_linear_input_bytes(precision), hbm=hbm)
        self.core_on = "core_attn" in mods
        self.recompute_fwd = recompute_fwd = np.where(rc == 2, fwd, np.where(rc == 1, sel.time_s, 0.0))
        self.layer_compute_s = fwd + bwd + recompute_fwd
        # a job without BF16 layers (every job but a few FP4/FP8 recipes) skips pricing the layer twice
        self.bf16_extra_s = (bf16_layer_extra_s(model, attn_linears, M, t, g, gpu, precision, hbm, rc)
                             if sum(self.bf16_layers) else np.zeros_like(np.asarray(t, dtype=np.float64)))

    def adapters(self, attn_linears) -> tuple:
        """(LoRA's adapter weights per layer on this GPU, their (forward, backward) time): zeros without LoRA (lora.py)."""
        if not self.lora:
            return 0.0, (0.0, 0.0)
        rank, targets = self.lora
        linears = lora.adapted_linears(attn_linears, mlp_linears(self.model, self.t), targets)
        return (lora.adapter_params_per_gpu(linears, rank),
                lora.adapter_s(linears, self.M, rank, bf16mm=self.bf16mm, hbm_bytes_per_s=self.hbm))

    def trained_params(self, params_gpu):
        """Of `params_gpu` base weights, those that train (gradients, optimizer state and step, DP reduction):
        all, or none under LoRA, whose adapters train instead (lora.py)."""
        return 0.0 * params_gpu if self.lora else params_gpu

    def hidden(self, comm_s, window_s):
        """What of a collective stays exposed behind a compute window (compute lost beside it)."""
        return overlapped_s(comm_s, window_s, self.phi)

    def tensor_and_context_parallel(self) -> None:
        """The exposed TP collectives and CP exchange (ring, or all-to-all for a softmax with sinks) per layer."""
        t, c, b, s, h, rc, g = self.t, self.c, self.b, self.s, self.h, self.rc, self.g
        cluster = self.cluster
        self.act_msg = act_msg = b * (s / c) * h * BF16_BYTES
        # per pass: 2 all-reduces, or with SP 2 all-gathers + 2 reduce-scatters of equal volume
        self.tp_pass = tp_pass = 2 * comm.collective_s("all_reduce", act_msg, cluster, t, 1)
        self.phi = phi = comm.interference(self.gpu.num_sms)  # compute lost while a collective runs beside it
        if self.tp_comm_overlap:  # Transformer Engine userbuffers: TP collectives pipelined with the GEMMs
            tp_exposed_fwd = self.hidden(tp_pass, g.gemm_fwd)
            tp_exposed_bwd = self.hidden(tp_pass, g.gemm_bwd)
        else:
            tp_exposed_fwd = tp_exposed_bwd = tp_pass
        self.tp_exposed_fwd, self.tp_exposed_bwd = tp_exposed_fwd, tp_exposed_bwd
        self.layer_tp = tp_exposed_fwd * (1 + (rc == 2)) + tp_exposed_bwd
        if self.model.is_dsa:  # DSA: the whole sequence's latent and indexer keys gathered (dsa.py)
            self.layer_cp = dsa.cp_gather_s(cluster, self.model, batch=b, seq=s, cp=c, tp=t, recompute=rc)
        elif self.model.cp_all_to_all:  # attention sinks: CP by all-to-all only (ModelSpec.cp_all_to_all)
            qkvo_bytes = b * (s / c) * (2 * self.hq + 2 * self.hkv) / t * BF16_BYTES
            self.layer_cp = cp_a2a_s(cluster, qkvo_chunk_bytes=qkvo_bytes, cp=c, tp=t, recompute=rc)
        else:
            self.layer_cp = cp_ring_exposed_s(cluster, kv_chunk_bytes=2 * b * (s / c) * self.hkv / t * BF16_BYTES,
                                              cp=c, tp=t, core_fwd=self.core_fwd, core_bwd=self.core_bwd, recompute=rc,
                                              phi=phi)

    def dp_collective(self, kind, size, n=None):
        """A collective over the DP x CP group (stride tp), or its first `n` ranks (an HSDP instance)."""
        return comm.collective_s(kind, size, self.cluster, self.shard if n is None else n, self.t)

    def dp_step(self, params_gpu, param_bytes=BF16_BYTES):
        """(gradient reduction, parameter all-gather) per step for `params_gpu` parameters, gathered
        in `param_bytes` each (the embedding and head stay BF16)."""
        z, z2_mb, dp_collective = self.z, self.z2_mb, self.dp_collective
        grads = params_gpu * self.grad_bytes
        ar = dp_collective("all_reduce", grads)
        rs = dp_collective("reduce_scatter", grads)
        ag_step = dp_collective("all_gather", params_gpu * param_bytes)
        red = np.where(z == 0, ar, np.where(z >= 2, 0.0, rs))
        gat = np.where((z == 1) | ((z == 2) & (not z2_mb)), ag_step, 0.0)
        hsdp_red, hsdp_gat = hsdp_step_s(self.cluster, params_gpu, group=self.fsdp_group, stride=self.t * self.fsdp_group,
                                         instances=self.instances, zero=z, grad_bytes=self.grad_bytes)
        return red + hsdp_red, gat + hsdp_gat

    def edge_dp_step(self, params_gpu) -> tuple:
        """`dp_step` of the embedding or the head (BF16 weights): none for LoRA's frozen ones."""
        if self.lora:
            return np.zeros(len(self.z)), np.zeros(len(self.z))
        return self.dp_step(params_gpu)

    def data_parallel(self) -> None:
        """Parameters per GPU, the sharded layers' traffic and the step-level DP reductions."""
        model, t, c, d, p, z = self.model, self.t, self.c, self.d, self.p, self.z
        self.shard = shard = d * c  # the distributed optimizer shards over the DP x CP group (stride tp)
        self.instances = self.options.get("instances", 1)  # HSDP: ZeRO-3 inside each of r instances (hsdp_step_s)
        self.fsdp_group = shard / self.instances
        self.grad_bytes = grad_bytes = grad_reduce_bytes(self.precision, self.grad_reduce_dtype)
        self.layer_params_gpu, self.emb_params_gpu, self.head_params_gpu = reduced_params_per_gpu(model, t, p)
        layer_params_gpu = self.layer_params_gpu
        self.z2_mb = self.stack.zero2_gathers_every_microbatch
        self.z3_per_param = frameworks.zero3_live_bytes_per_param(self.stack, grad_bytes)
        # ZeRO-2/3 per layer and micro-batch, the stage's first / last edges, the gathered layers kept live
        self.layer_zero3, self.z_edges, self.z3_live = sharded_terms(
            sharding_of(self), z, params_gpu=layer_params_gpu, fwd=self.fwd, bwd_window=self.bwd + self.recompute_fwd)
        if self.options.get("zero3_gathers") == "per_parameter":  # DeepSpeed ZeRO-3 before v0.5.5 (layer_terms)
            weights = [BF16_BYTES * N * K for N, K in attention_geometry(model, t)[0] + mlp_linears(model, t)]
            ds = per_parameter_zero3_s(weights, grad_bytes / BF16_BYTES, self.cluster, shard, t, self.rc)
            grad_copy = zero_grad_copy_bytes(grad_bytes) * layer_params_gpu / self.hbm
            self.layer_zero3 = np.where(z == 3, ds + grad_copy, self.layer_zero3)
            live = per_parameter_zero3_live_bytes(weights, grad_bytes / BF16_BYTES)
            self.z3_live = np.where(z == 3, np.minimum(self.z3_live, live), self.z3_live)
        layer_param_bytes = gathered_param_bytes(self.precision, self.fp8_param_gather)  # FP8 weights gathered in FP8
        self.layer_trained = self.trained_params(layer_params_gpu) + self.adapters_gpu  # LoRA: the adapters only
        self.layer_red, self.layer_ag = self.dp_step(self.layer_trained, BF16_BYTES if self.lora else layer_param_bytes)
        self.emb_red, self.emb_ag = self.edge_dp_step(self.emb_params_gpu)
        self.head_red, self.head_ag = self.edge_dp_step(self.head_params_gpu)
        self.embedding_ar = (np.zeros(len(z)) if self.lora else
                             embedding_group_allreduce_s(self.cluster, self.emb_params_gpu, grad_bytes, t, c, d, p))
        self.tied = np.where(model.tied_embeddings & (p > 1), self.embedding_ar, 0.0)
        self.adam_bytes = self.stack.optimizer_step_bytes or memory.adam_step_bytes_per_param(self.adam_state_bytes)
        self.opt_per_param = self.adam_bytes / self.hbm / np.where(z >= 1, shard, 1.0)

    def stage_ends(self) -> None:
        """The first stage's embedding and the last stage's head and loss."""
        M, h, V, t, hbm = self.M, self.h, self.V, self.t, self.hbm
        self.emb_fwd = M * h * BF16_BYTES * 3 / hbm  # gather + dropout
        # the table's dense gradient; a frozen table (LoRA) has no backward
        self.emb_bwd = 0.0 if self.lora else (self.emb_params_gpu * FP32_BYTES + M * h * BF16_BYTES * 2) / hbm
        head_f, head_b = linear_s(M, V / t, h, **self.bf16mm)
        ce_fwd, ce_bwd = self.stack.cross_entropy_bytes or (CROSS_ENTROPY_BYTES_FWD, CROSS_ENTROPY_BYTES_BWD)
        self.head_fwd = head_f + M * V / t * ce_fwd / hbm
        self.head_bwd = head_b + M * V / t * ce_bwd / hbm

    def window(self, fwd_s, bwd_s):
        """The compute behind which a stage's step-level DP traffic hides."""
        return np.where(self.bwd_hides, bwd_s, 0.0) + np.where(self.fwd_hides, fwd_s, 0.0)

    def overlap_windows(self) -> None:
        """Overlap windows of the step-level DP traffic. The reduction hides behind the stage's
        last backward (all chunks: Megatron reduces each model chunk's gradients once its last
        backward ends, while the others' run); the distributed optimizer's all-gather behind the
        next step's first forward; HSDP's traffic across its instances (`hsdp_step_s`) alike, bucket by bucket."""
        z, z2_mb, overlap_grad_reduce = self.z, self.z2_mb, self.overlap_grad_reduce
        hsdp = (z == 3) & (self.instances > 1)
        self.bwd_hides = ((z <= 1) | hsdp) & overlap_grad_reduce
        self.fwd_hides = fwd_hides = ((z == 1) | ((z == 2) & (not z2_mb)) | hsdp) & overlap_grad_reduce
        if overlap_grad_reduce:
            self.layer_window = self.window(self.fwd + self.tp_exposed_fwd, self.bwd + self.tp_exposed_bwd)
            self.first_window = np.where(fwd_hides, self.emb_fwd, 0.0)
            self.last_window = np.where(self.bwd_hides, self.head_bwd, 0.0)
        else:
            self.layer_window = self.first_window = self.last_window = np.zeros(len(z))

    def memory(self) -> None:
        """Memory per GPU: model state per parameter, activations and working sets."""
        model, stack, precision, sel = self.model, self.stack, self.precision, self.sel
        M, h, a, s, t, rep, rc, z = self.M, self.h, self.a, self.s, self.t, self.rep, self.rc, self.z
        flash_attention = self.flash_attention
        self.pb, self.gb, self.ob = frameworks.model_state_bytes_per_param(
            stack, z, self.shard, precision, self.grad_reduce_dtype, self.fp8_param_gather, self.adam_state_bytes,
            self.instances)
        self.act_kw = dict(tokens=M, hidden=h, q_width=self.hq, kv_width=self.hkv, mlp_matrices=model.mlp_matrices,
                           heads=a, seq_k=s, tp=t, sp_degree=rep, recompute=rc, flash=flash_attention,
                           dropout=model.dropout > 0, linear_input_bytes=saved_linear_input_bytes(precision),
                           gate_width=self.hq * model.attention_output_gate)
        layer_act, working = frameworks.layer_activation_bytes(stack, gated=model.gated_mlp, ffn=self.f, fam=self.fam,
                                                               attention_extra=eager_attention.saved_extra_bytes(model, t),
                                                               **self.act_kw)
        if self.lora:  # frozen linears keep no input for a weight gradient; the adapters keep theirs (lora.py)
            layer_act = layer_act + np.where(rc == 2, 0.0, lora.saved_inputs_delta_bytes(
                model, M, t, rep, self.act_kw["linear_input_bytes"], self.lora[1]))
        # selective by module: the score terms stay unless core_attn is recomputed (unfused
        # attention only); the modules' outputs are freed, the normally checkpointed MLP rebuilt
        # one layer at a time
        roles_act, roles_working = module_rates.dense_layer_act_delta(self)  # 0 without per-module precision
        layer_act, working = layer_act + roles_act, working + roles_working
        self.scores = scores = 0.0 if flash_attention or self.core_on else 5.0 * (a / t) * M * s
        layer_act = layer_act - np.where(rc == 1, sel.freed_bytes - scores + sel.mlp_freed_bytes, 0.0)
        working = working + np.where(rc == 1, sel.mlp_freed_bytes - scores, 0.0)
        if self.latent_width:  # multi-latent attention: the latents, kept on every TP rank
            layer_act = layer_act + np.where(rc == 2, 0.0, self.latent_width * M)
            working = working + np.where(rc == 2, self.latent_width * M, 0.0)
        sparse = dsa.saved_bytes_per_token(model, t) + dsv4.saved_bytes_per_token(model, t, s)  # 0 without them
        layer_act = layer_act + np.where(rc == 2, 0.0, sparse * M)
        self.recompute_working = working  # the working set before ZeRO-3's live layers (eager_peak)
        self.layer_act, self.working = layer_act, working + self.z3_live  # ZeRO-3's live layers (data_parallel)
        self.first_act = frameworks.first_stage_act_bytes(stack, M, h, rep, model.dropout > 0, self.fam)  # embedding
        self.last_act = frameworks.last_stage_act_bytes(stack, M, h, self.V, t, rep, self.fam)  # norm, head, logits
        self.state = self.pb + self.gb + self.ob
        edge_pb, edge_gb, edge_ob = frameworks.model_state_bytes_per_param(  # embedding and head: no FP8 copies
            stack, z, self.shard, edge_weight_precision(precision), self.grad_reduce_dtype, False, self.adam_state_bytes,
            self.instances)
        self.edge_state = edge_pb + (0.0 if self.lora else edge_gb + edge_ob)  # LoRA: frozen, weights only
        self.adapter_state = frameworks.model_state_bytes_per_param(  # LoRA's adapters: BF16 linears, trained
            stack, z, self.shard, "bf16", self.grad_reduce_dtype, False, self.adam_state_bytes, self.instances)

    def dense_layer(self) -> dict:
        """The per-layer terms of one dense (Transformer) layer; with fine-grained offloading, its attention's
        modules (`fine_offload.py`)."""
        z, pb, gb, ob, layer_params_gpu = self.z, self.pb, self.gb, self.ob, self.layer_params_gpu
        trained, adapters, (apb, agb, aob) = self.trained_params(layer_params_gpu), self.adapters_gpu, self.adapter_state
        layer = dict(compute=self.layer_compute_s, tp=self.layer_tp, cp=self.layer_cp, zero3=self.layer_zero3,
                     ep=np.zeros(len(z)), fwd=self.fwd + self.tp_exposed_fwd, bwd=self.bwd + self.tp_exposed_bwd,
                     work=self.fwd + self.bwd, dp_step=self.layer_red + self.layer_ag,
                     opt=self.layer_trained * self.opt_per_param, window=self.layer_window,
                     params=layer_params_gpu * pb + adapters * apb,
                     grads=frameworks.layer_grads_at_peak_bytes(self.stack, z, self.shard, layer_params_gpu,
                                                                trained * gb + adapters * agb, self.layer_act, self.m),
                     optim=trained * ob + adapters * aob, act=self.layer_act, working=self.working)
        return with_fine_offload(self, layer, attention_offloaded(self))

    def per_layer_and_ends(self) -> tuple[dict, int, dict]:
        """The dense layer's terms and the stage extras; a MoE model's layers folded in units (`moe_layer.fold_layers`),
        a hybrid model's pattern (`hybrid.py`); the MTP block on the last stage (`mtp.with_mtp`, every model kind)."""
        z, layer_params_gpu, opt_per_param = self.z, self.layer_params_gpu, self.opt_per_param
        dense = self.dense_layer()
        start, end = self.bf16_layers  # layers kept in BF16 under a quantised recipe: first / last stage extras
        ends = dict(first_s=self.emb_fwd + self.emb_bwd + self.z_edges + start * self.bf16_extra_s,
                    last_s=self.head_fwd + self.head_bwd + end * self.bf16_extra_s,
                    first_fwd_s=self.emb_fwd, last_bwd_s=self.head_bwd,
                    first_dp_step_s=self.emb_red + self.emb_ag + self.tied,
                    last_dp_step_s=self.head_red + self.head_ag + self.tied,
                    first_optimizer_step_s=self.trained_params(self.emb_params_gpu) * opt_per_param,
                    last_optimizer_step_s=self.trained_params(self.head_params_gpu) * opt_per_param,
                    first_window_s=self.first_window,
                    last_window_s=self.last_window, first_static_bytes=self.emb_params_gpu * self.edge_state,
                    last_static_bytes=self.head_params_gpu * self.edge_state, first_act_bytes=self.first_act,
                    last_act_bytes=self.last_act, first_host_bytes=np.zeros(len(z)), last_host_bytes=np.zeros(len(z)))
        self.allocator = frameworks.eager_peak(  # transformers: the phase its step peaks in (eager_memory.py)
            self.stack, self.model, dense, ends, fam=self.fam, zero=z, shard=self.shard, params=(
                layer_params_gpu, self.emb_params_gpu, self.head_params_gpu), tp=self.t, tokens=self.M, sp_degree=self.rep,
            layer_act=self.layer_act, working=self.recompute_working, first_act=self.first_act, z3_live=self.z3_live,
            recompute=self.rc, num_microbatches=self.m)
        if self.model.is_hybrid:  # a period of the layer pattern per unit, each layer priced by kind (hybrid.py)
            unit, units = hybrid_unit(self)
        elif self.model.is_moe or self.model.dsa_index_sharing:  # units of several layers, a prefix (moe_layer.py)
            unit, units, ends = fold_layers(self.model, dense, moe_layer_of(self) if self.model.is_moe else dense, ends)
        else:
            unit, units = dense, self.model.num_layers
        unit, ends = with_mtp(self, unit, ends)  # the MTP block on the last stage (mtp.py)
        return unit, units, ends

    def boundary_s(self, unit: dict, units: int) -> np.ndarray:
        """Pipeline boundaries: each TP rank sends its 1/t of the activations (sequence
        parallelism, or Megatron's scatter-gather optimisation: Narayanan et al. 2021 Sec. 4.1),
        over its own NIC; interleaved, Megatron overlaps the sends with the other chunk's
        compute (default on)."""
        t, c, d, p, v = self.t, self.c, self.d, self.p, self.v
        pp_bw, pp_lat = comm.p2p_link(self.cluster, t * c * d)
        p2p = 2 * comm.p2p_s(self.act_msg / t * self.model.num_residual_streams, pp_bw, pp_lat)  # mHC: n streams
        chunk_work = unit["work"] * units / np.maximum(p * v, 1)
        return np.where(p > 1, np.where(v > 1, np.maximum(0.0, p2p - chunk_work), p2p), 0.0)

    def dispatcher_buffers(self) -> np.ndarray:
        """The flex dispatcher's DeepEP / HybridEP buffer per GPU (`ep_buffers.py`; Megatron's fused stack only)."""
        dispatcher = self.moe_token_dispatcher if self.stack.fused else "alltoall"
        return ep_buffers.dispatcher_buffer_bytes(self.model, self.cluster, self.M, self.t, self.shapes.ep,
                                                  self.shapes.etp, dispatcher)

    def coefficients(self, unit: dict, units: int, ends: dict) -> StageCoefficients:
        gpu, t, c, d, p = self.gpu, self.t, self.c, self.d, self.p
        return StageCoefficients(
            num_microbatches=self.m, pp=p, vp=self.v,
            layer_compute_s=unit["compute"], layer_tp_s=unit["tp"], layer_cp_s=unit["cp"], layer_zero3_s=unit["zero3"],
            layer_fwd_s=unit["fwd"], layer_bwd_s=unit["bwd"],
            boundary_s=self.boundary_s(unit, units),
            layer_dp_step_s=unit["dp_step"],
            layer_optimizer_step_s=unit["opt"],
            layer_window_s=unit["window"],
            layer_params_bytes=unit["params"], layer_grads_bytes=unit["grads"], layer_optimizer_bytes=unit["optim"],
            layer_act_bytes=unit["act"],
            const_bytes=unit["working"],
            fragmentation=float(gpu.runtime_reserve_fraction),
            runtime_bytes=runtime_bytes(gpu.runtime_reserve_gib, t, c, d, p, ep=self.shapes.ep, etp=self.shapes.etp)
            + self.allocator + self.dispatcher_buffers(),
            capacity_bytes=float(gpu.hbm_bytes),
            layer_ep_s=unit["ep"],
            layer_offload_s=unit["offload"],
            layer_host_bytes=unit["host"],
            **ends,
        )
