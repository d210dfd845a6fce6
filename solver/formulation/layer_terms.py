"""Terms of one dense layer on one GPU, per micro-batch, vectorised over shapes: the parts
`coefficients.stage_coefficients` composes into a stage's linear coefficients (docs/DESIGN.md
section 3) -- the linear layers' GEMMs and quantisation, the attention core, Megatron's selective
recomputation by module, the overlap rule of a collective beside compute, ZeRO-2/3's per-layer
sharding traffic and the context-parallel ring, and what a layer kept in BF16 under a quantised recipe adds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import ModelSpec
from . import comm
from .data_parallel import zero_grad_copy_bytes
from .kernels import GEMM_LAUNCH_S, flash_attention_s, layers_mixed, linear_s, triton_block_headdim, unfused_attention_s
from .memory import BF16_BYTES, ZERO3_LIVE_LAYERS
from .precision import is_quantized, matmul_rate, quantize_bytes_per_element
from .recompute import mla_up_recompute, norm_recompute


@dataclass(frozen=True)
class LinearTimes:
    """The linear layers of one dense layer on one GPU, per micro-batch (arrays over shapes):
    GEMM time forward and backward, the precision recipe's quantisation traffic, and the parts a
    MoE layer replaces (the MLP's GEMMs and casts) or "mla_up_proj" recomputes (MLA's up
    projections, forward). A part no linear adds to stays the scalar 0.0 (up_fwd without MLA),
    which broadcasts against the arrays."""

    gemm_fwd: np.ndarray | float
    gemm_bwd: np.ndarray | float
    cast_fwd: np.ndarray | float
    cast_bwd: np.ndarray | float
    mlp_fwd: np.ndarray | float
    mlp_bwd: np.ndarray | float
    up_fwd: np.ndarray | float


def mlp_linears(model: ModelSpec, tp) -> list[tuple]:
    """(N, K) of the MLP's two linears on one TP rank: fc1 (the gate and up projections fused, as Megatron
    builds them) and fc2."""
    h, f = model.hidden_size, model.ffn_hidden_size
    return [(f * (model.mlp_matrices - 1) / tp, h), (h, f / tp)]


def layer_linears_s(model: ModelSpec, attn_linears, tokens, tp, mm: dict, cast_bytes: float, hbm: float,
                    attn: tuple | None = None, mlp: tuple | None = None) -> LinearTimes:
    """Attention's linears (`attn_linears`, (N, K) on this TP rank) and the MLP's (`mlp_linears`), each a GEMM
    forward and its two backward GEMMs (`kernels.linear_s`) at the recipe's rate `mm`, plus the
    recipe's quantisation of each GEMM's input (`cast_bytes` per element: 0 without FP8); `attn`, `mlp`:
    (rate, cast bytes) of a role per-module precision moves (`module_rates.role_rate`), else the recipe's."""
    gemm_fwd = gemm_bwd = cast_fwd = cast_bwd = mlp_fwd = mlp_bwd = up_fwd = 0.0
    up_index = (1,) if model.is_dsv4 else ((1, 3) if model.q_lora_rank else (2,))  # MLA's up projections
    for i, (N, K) in enumerate(list(attn_linears) + mlp_linears(model, tp)):
        rate, cast = (mlp if i >= len(attn_linears) else attn) or (mm, cast_bytes)
        fw, bw = linear_s(tokens, N, K, **rate)
        gemm_fwd, gemm_bwd = gemm_fwd + fw, gemm_bwd + bw
        cf, cb = cast * tokens * K / hbm, cast * tokens * N / hbm
        cast_fwd, cast_bwd = cast_fwd + cf, cast_bwd + cb
        if model.multi_latent_attention and i in up_index:
            up_fwd = up_fwd + fw + cf
        if i >= len(attn_linears):
            mlp_fwd, mlp_bwd = mlp_fwd + fw + cf, mlp_bwd + bw + cb
    return LinearTimes(gemm_fwd, gemm_bwd, cast_fwd, cast_bwd, mlp_fwd, mlp_bwd, up_fwd)


def attention_core_s(gpu, *, batch, heads, s_q, s_k, head_dim, flash: bool, kernel: str, hbm_bytes_per_s: float,
                     window=None, fp8: bool = False):
    """(forward, backward) of the attention core on one GPU: FlashAttention at the kernel's fitted
    efficiency (cuDNN's fused kernel overlaps the exponentials on Hopper+, FlashAttention-2 does
    not: `kernels.flash_attention_s`), or unfused attention with materialised scores; kernel "masked" is
    SDPA's kernel given an explicit mask (GPUSpec.masked_attention_rate at the head dimension, no causal skipping); kernel "flash1"
    the FlashAttention-1 generation (GPUSpec.flash1_attention_rate, no overlap, the head dimension padded
    as its Triton port computes it: `kernels.triton_block_headdim`). A sliding `window` (tokens) limits
    the fused and FlashAttention-2 kernels' causal blocks to its band (`kernels.flash_attention_s`). `fp8`:
    the fused kernel's matmuls at the FP8 peak, at `GPUSpec.fp8_attention_efficiency` (default: the BF16 kernel's
    fraction), the exponentials unchanged (specs/fp8_attention.py; its casts: `fp8_attention_cast_s`)."""
    if not flash:
        return unfused_attention_s(batch=batch, heads=heads, s_q=s_q, s_k=s_k, head_dim=head_dim,
                                   flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency,
                                   hbm_bytes_per_s=hbm_bytes_per_s)
    if kernel == "masked":  # SDPA with an explicit mask: every block of s x s, at the masked kernel's rate
        return flash_attention_s(batch=batch, heads=heads, s_q=s_q, s_k=s_k, head_dim=head_dim, causal=False,
                                 flop_per_s=gpu.peak_flop_per_s, exp_per_s=gpu.sfu_tops * 1e12,
                                 efficiency=gpu.masked_attention_rate(float(np.max(head_dim))), overlap_exp=gpu.exp_overlaps_matmul)
    if kernel == "flash1":  # the FlashAttention-1 generation: its Triton port pads the head dimension (kernels.py)
        return flash_attention_s(batch=batch, heads=heads, s_q=s_q, s_k=s_k, head_dim=triton_block_headdim(head_dim),
                                 causal=True, flop_per_s=gpu.peak_flop_per_s, exp_per_s=gpu.sfu_tops * 1e12,
                                 efficiency=gpu.flash1_attention_rate, overlap_exp=False)
    fused = kernel == "cudnn"
    efficiency = (gpu.fused_attention_efficiency if fused
                  else (gpu.flash2_attention_efficiency or gpu.fused_attention_efficiency))
    rate = gpu.peak_flop_per_s
    if fp8 and fused:  # FP8 attention: the FP8 peak, at its own attained fraction (GPUSpec.fp8_attention_efficiency)
        rate, efficiency = gpu.peak_fp8_tflops * 1e12, gpu.fp8_attention_efficiency or efficiency
    return flash_attention_s(batch=batch, heads=heads, s_q=s_q, s_k=s_k, head_dim=head_dim, causal=True,
                             flop_per_s=rate, exp_per_s=gpu.sfu_tops * 1e12, efficiency=efficiency,
                             overlap_exp=gpu.exp_overlaps_matmul and fused, window=window)


# Dequantising one element of an FP8 attention output or gradient: read FP8, write BF16
FP8_DEQUANTIZE_BYTES = 1.0 + BF16_BYTES


def fp8_attention_cast_s(precision: str, tokens, q_width, kv_width, hbm_bytes_per_s: float):
    """(forward, backward) casts of FP8 attention on one GPU (`q_width`, `kv_width` on this rank, per token):
    Transformer Engine's fused attention under `fp8_dpa` without `fp8_mha` quantises Q, K, V and dequantises
    the output forward, quantises dO and dequantises dQ, dK, dV backward (the QKV, O, dO and dQKV quantizers
    of `get_attention_quantizers` at d0067d0, each `set_usage(rowwise=True, columnwise=False)`: one layout,
    `precision.quantize_bytes_per_element`), dequantising at `FP8_DEQUANTIZE_BYTES` per element."""
    quantize = quantize_bytes_per_element(precision, layouts=1)
    qkv, out = q_width + 2 * kv_width, q_width
    fwd = tokens * (quantize * qkv + FP8_DEQUANTIZE_BYTES * out) / hbm_bytes_per_s
    bwd = tokens * (quantize * out + FP8_DEQUANTIZE_BYTES * qkv) / hbm_bytes_per_s
    return fwd, bwd


# An attention output gate's fused kernel (attention.py `_apply_output_gate`, jit-fused: x * sigmoid(gate)) per
# element of h_q/t: forward reads the core output and the gate logits, writes the product; backward reads the
# product's gradient, the output and the logits, writes the two gradients (BF16 each)
OUTPUT_GATE_PASSES = (3, 5)


def output_gate_s(model: ModelSpec, tokens, tp, hbm_bytes_per_s: float):
    """(forward, backward) of the attention output gate on one GPU (0 without --attention-output-gate): memory
    bound, `OUTPUT_GATE_PASSES` BF16 passes over the rank's h_q/t per token."""
    if not model.attention_output_gate:
        return 0.0, 0.0
    elements = np.asarray(tokens, dtype=np.float64) * model.q_hidden_size / np.asarray(tp, dtype=np.float64)
    fwd, bwd = OUTPUT_GATE_PASSES
    return (fwd * BF16_BYTES * elements / hbm_bytes_per_s, bwd * BF16_BYTES * elements / hbm_bytes_per_s)


def windowed_attention_s(gpu, model, core, *, kernel: str, **shape):
    """(forward, backward) attention core of the average layer of a model whose `window_mask` layers
    attend through its `sliding_window` (`core`: the full causal core, (forward, backward)): the kernels
    that take a window skip the blocks outside it -- Transformer Engine's fused attention and FlashAttention-2
    (Megatron-LM passes window_size (w - 1, 0) on the `window_attn_skip_freq` layers) -- so a windowed
    layer costs its band (`kernels.flash_attention_s`). Every layer is priced as this average, exact for
    the model's sum (a stage's windowed share is the model's). Megatron's stack only: torchtitan runs these
    decoders as its Llama, without a window (its GPT-OSS, which has one, is a MoE model it is not asked for)."""
    windowed = model.windowed_layers
    if not windowed or kernel not in ("cudnn", "flash2"):
        return core
    band = attention_core_s(gpu, flash=True, kernel=kernel, window=model.sliding_window, **shape)
    return layers_mixed(core, band, windowed / model.num_layers)


@dataclass(frozen=True)
class SelectiveRecompute:
    """Megatron's selective recomputation of a dense layer by module (`recompute.py`): the time of
    the recomputed forward, the activation bytes the modules free, and the MLP's (rebuilt one
    layer at a time, so it moves to the working set); and the attention's part alone (core and MLA
    up projections), which a MoE layer keeps beside its own MLP modules."""

    time_s: np.ndarray
    freed_bytes: np.ndarray
    mlp_freed_bytes: np.ndarray
    attention_s: np.ndarray
    attention_freed_bytes: np.ndarray


def selective_recompute(model: ModelSpec, mods, linears: LinearTimes, *, tokens, tp, rep, core_fwd,
                        linear_input_bytes: float, hbm: float) -> SelectiveRecompute:
    """The modules `mods` of a dense layer recomputed (the default, core_attn, is the attention
    core alone): layernorm and MLA's up projections (`recompute.py`), the MLP (its inputs and
    activation freed, its forward with the activation's traffic repeated), the attention core."""
    f = model.ffn_hidden_size
    norm_freed, norm_s = norm_recompute(model, mods, False, tokens=tokens, hidden=model.hidden_size, rep=rep,
                                        linear_input_bytes=linear_input_bytes, hbm=hbm)
    up_freed, up_s = mla_up_recompute(model, mods, tokens=tokens, tp=tp, up_fwd_s=linears.up_fwd, hbm=hbm)
    mlp_on = "mlp" in mods
    mlp_freed = mlp_on * tokens * (2.0 * model.mlp_matrices * f - (BF16_BYTES - linear_input_bytes) * f) / tp
    mlp_s = mlp_on * (linears.mlp_fwd + tokens * BF16_BYTES * (3.0 if model.gated_mlp else 2.0) * f / tp / hbm)
    attention_s = ("core_attn" in mods) * core_fwd + up_s
    return SelectiveRecompute(attention_s + norm_s + mlp_s, up_freed + norm_freed, mlp_freed, attention_s, up_freed)


def overlapped_s(comm_s, window_s, phi: float):
    """Exposed time of `comm_s` overlapped with `window_s` of compute: the part the window cannot
    cover, plus the compute slowed by the collective's SMs while they overlap (`phi`:
    `comm.interference`)."""
    return np.maximum(0.0, comm_s - window_s) + phi * np.minimum(comm_s, window_s)


def sharded_layer_s(*, ag, rs, fwd, bwd_window, grad_copy, zero, zero2_gathers_every_microbatch: bool, phi: float):
    """(exposed per layer and micro-batch, the stage's first/last edges) of ZeRO-2/3 sharding.

    ZeRO-3 / FSDP: the layer's bf16 weights are all-gathered (`ag`) before its forward
    (prefetched behind the previous layer's forward) and again before its backward, whose
    recomputed forward reuses them; the gradients are reduce-scattered (`rs`) behind the backward
    of the next layers. Exposed: what the layer's compute cannot cover, plus the gradient cast
    (`grad_copy`). ZeRO-2 keeps only a gradient shard, so gradients are reduce-scattered every
    micro-batch (behind that layer's backward); its weights are gathered once per step after the
    optimizer, behind the next forward (Megatron-FSDP optim_grads; PyTorch FSDP SHARD_GRAD_OP
    gathers them every micro-batch, the same with one micro-batch per step). FSDP2 without
    resharding after forward (torchtitan's "never") reshards after backward: its weights are
    gathered before every micro-batch's forward (`zero2_gathers_every_microbatch`). The first
    gather of a micro-batch and the last reduce-scatter have nothing to hide behind: the edges."""
    z3 = overlapped_s(ag, fwd, phi) + overlapped_s(ag + rs, bwd_window, phi) + grad_copy
    z2 = overlapped_s(rs, bwd_window, phi) + grad_copy + (overlapped_s(ag, fwd, phi) if zero2_gathers_every_microbatch
                                                           else 0.0)
    exposed = np.where(zero == 3, z3, np.where(zero == 2, z2, 0.0))
    edges = np.where(zero == 3, ag + rs, np.where(zero == 2, rs + (ag if zero2_gathers_every_microbatch else 0.0), 0.0))
    return exposed, edges


def sharding_of(terms) -> dict:
    """What a layer priced apart from the dense layer (a MoE layer, a hybrid model's sublayer) takes for its
    ZeRO-2/3 terms (`sharded_terms`) from the stage's dense-layer terms `terms` (`coefficients._StageTerms`): the
    DP x CP collective (over one HSDP instance), whether ZeRO-2 gathers every micro-batch, the overlap rule's
    interference, the live bytes per gathered parameter, the cluster, the gradients' reduction bytes, the HBM rate and
    the HSDP instances."""
    def collective(kind, size):  # over one HSDP instance's ranks (the whole DP x CP group without HSDP)
        return terms.dp_collective(kind, size, terms.fsdp_group)

    return dict(collective=collective, z2_mb=terms.z2_mb, phi=terms.phi, live_per_param=terms.z3_per_param,
                cluster=terms.cluster, grad_bytes=terms.grad_bytes, hbm=terms.hbm, instances=terms.instances)


def sharded_terms(sharding: dict, zero, *, params_gpu, fwd, bwd_window, experts_gpu=0.0, edp=1, expert_stride=1):
    """(exposed time per micro-batch, the stage's first / last edges, live working bytes) of ZeRO-2/3 sharding one
    layer (`sharded_layer_s`), the dense layer's and every other kind's: its `params_gpu` weights gathered and their gradients
    reduce-scattered over the DP x CP group (`sharding["collective"]`), and a MoE layer's `experts_gpu` local
    expert weights over the expert-data-parallel group (edp ranks `expert_stride` = etp x ep apart: Megatron-FSDP
    shards expert parameters over expt_dp, megatron/core/distributed/fsdp/mcore_fsdp_adapter.py at d98e8a6; its
    FSDP unit is the whole layer, experts included). Under ZeRO-3, ZERO3_LIVE_LAYERS such layers stay gathered
    (the one computed and the one prefetched), `sharding["live_per_param"]` bytes per parameter."""
    def experts(kind, size):
        return comm.collective_s(kind, size, sharding["cluster"], edp, expert_stride)

    grad_bytes, both = sharding["grad_bytes"], params_gpu + experts_gpu
    ag = sharding["collective"]("all_gather", params_gpu * BF16_BYTES) + experts("all_gather", experts_gpu * BF16_BYTES)
    rs = sharding["collective"]("reduce_scatter", params_gpu * grad_bytes) + experts("reduce_scatter",
                                                                                    experts_gpu * grad_bytes)
    exposed, edges = sharded_layer_s(ag=ag, rs=rs, fwd=fwd, bwd_window=bwd_window, zero=zero, phi=sharding["phi"],
                                     grad_copy=zero_grad_copy_bytes(grad_bytes) * both / sharding["hbm"],
                                     zero2_gathers_every_microbatch=sharding["z2_mb"])
    return exposed, edges, np.where(zero == 3, ZERO3_LIVE_LAYERS * both * sharding["live_per_param"], 0.0)


# DeepSpeed ZeRO-3 before v0.5.5 (microsoft/DeepSpeed v0.3.16 deepspeed/runtime/zero/partition_parameters.py and
# stage3.py, the release of Narayanan et al. 2021's comparison; v0.5.5 brought coalesced gathers): a parameter of at
# least `stage3_param_persistence_threshold` elements (default 1e5) is gathered on its own (`_allgather_param`)
# after `torch.cuda.synchronize()`, by `torch.distributed.all_gather` into a list of one view per rank, which
# PyTorch's ProcessGroupNCCL of that time fills with one copy per rank after the collective; the gradients are
# reduce-scattered per parameter from such lists (`_reduce_scatter_gradient`, one copy per rank to flatten them),
# on the reduction stream (`overlap_comm`, ZeRO-3's default True: zero/constants.py:60) -- which the next module's
# gathers wait for: `torch.cuda.synchronize()` (partition_parameters.py:798, and stage3.py:529 in
# `_synchronize_communication`) waits for every stream of the device, so in the backward a gradient's reduce-scatter
# finishes before the next module's weights are gathered and its backward runs: nothing hides it.
DS_COPY_LAUNCH_S = GEMM_LAUNCH_S  # one copy kernel's host submission (kernels.GEMM_LAUNCH_S: 4-6 us measured)


def per_parameter_zero3_s(tensors_bytes, grad_scale: float, cluster, n, stride, recompute):
    """Exposed ZeRO-3 traffic per layer and micro-batch under DeepSpeed's per-parameter gathers (comment above):
    each weight tensor (`tensors_bytes`: the layer's linear weights on one GPU, BF16; biases and norms stay below
    the persistence threshold and are never gathered) is all-gathered over the n ranks before the forward, again
    before the recomputed forward under full recomputation (the forward released it) and before the backward, with
    nothing to overlap (the host synchronised the GPU first), plus the host's n copy launches; its gradient is
    reduce-scattered (`grad_scale` x its bytes), exposed too (the next module's gathers synchronise the device
    first, reduction stream included), the n flattening copies on the host."""
    bw, lat, _ = comm.group_links(cluster, n, stride)
    launches = np.asarray(n, dtype=np.float64) * DS_COPY_LAUNCH_S
    gather = sum(comm.allgather_s(b, n, bw, lat) + launches for b in tensors_bytes)
    scatter = sum(comm.allgather_s(grad_scale * b, n, bw, lat) for b in tensors_bytes)
    passes = 2 + (np.asarray(recompute) == 2)
    return passes * gather + len(tensors_bytes) * launches + scatter


# DeepSpeed ZeRO-3's defaults at v0.3.16 (deepspeed/runtime/zero/constants.py; stage3.py's
# PartitionedParameterCoordinator): a gathered parameter is released after its module's forward or backward unless
# reused within `max_reuse_distance` elements; prefetching stops while `max_live_parameters` elements are gathered;
# gradients are reduce-scattered in buckets of `reduce_bucket_size` elements
DS_MAX_LIVE_PARAMETERS = 1e9
DS_REDUCE_BUCKET_SIZE = 5e8


def per_parameter_zero3_live_bytes(tensors_bytes, grad_scale: float):
    """Working bytes of DeepSpeed's per-parameter ZeRO-3 on one GPU (`tensors_bytes`: the layer's linear weights,
    BF16, as `per_parameter_zero3_s`): the largest weight gathered with its unsharded gradient (`grad_scale` x its
    bytes), the parameters kept gathered for reuse or prefetched up to `DS_MAX_LIVE_PARAMETERS`, and one reduction
    bucket of gradients (the caller caps it at the two whole layers an FSDP-style coordinator keeps,
    `sharded_terms`' live bytes)."""
    largest = np.max(np.stack(np.broadcast_arrays(*[np.asarray(b, dtype=np.float64) for b in tensors_bytes])), axis=0)
    return (largest * (1.0 + grad_scale) + BF16_BYTES * DS_MAX_LIVE_PARAMETERS
            + grad_scale * BF16_BYTES * DS_REDUCE_BUCKET_SIZE)


def cp_ring_exposed_s(cluster, *, kv_chunk_bytes, cp, tp, core_fwd, core_bwd, recompute, phi: float):
    """Context parallelism's ring exchange per layer and micro-batch, overlapped with the attention
    core: cp - 1 sends of one chunk's K and V forward on the links the CP group spans (ranks tp
    apart), twice that backward (K/V again plus their gradients), the forward again under full
    recomputation; exposed what the core cannot cover (`overlapped_s`). 0 without CP."""
    bw, lat, _ = comm.group_links(cluster, cp, tp)
    fwd = (cp - 1) * comm.p2p_s(kv_chunk_bytes, bw, lat)
    exposed = overlapped_s(fwd, core_fwd, phi) * (1 + (recompute == 2)) + overlapped_s(2 * fwd, core_bwd, phi)
    return np.where(cp > 1, exposed, 0.0)


def cp_a2a_s(cluster, *, qkvo_chunk_bytes, cp, tp, recompute):
    """Context parallelism by all-to-all (Megatron --cp-comm-type a2a, DeepSpeed-Ulysses; Transformer Engine's
    AttnFuncWithCPAndQKVOA2A, context_parallel.py): before the core, Q, K and V are exchanged so that each of
    the cp ranks (tp apart) holds the whole sequence for 1/cp of the heads, after it the output goes back;
    the backward exchanges their gradients the same way. Nothing runs beside them (the core waits for its
    inputs): per layer and micro-batch, two all-to-alls of the rank's `qkvo_chunk_bytes` (its sequence
    chunk's Q, K, V and output) per pass, the forward's again under full recomputation. 0 without CP."""
    one = comm.all_to_all_s(qkvo_chunk_bytes, cluster, cp, tp)
    return np.where(cp > 1, one * (1 + (recompute == 2)) + one, 0.0)


def bf16_layer_extra_s(model: ModelSpec, attn_linears, tokens, tp, g, gpu, precision: str, hbm: float, rc):
    """What one transformer layer kept in BF16 under a quantised recipe adds to its stage per micro-batch
    (Megatron --first-last-layers-bf16: megatron/core/fp4_utils.py:250-262 and fp8_utils.py:714-724 build
    the first / last N layers without the recipe): its linear GEMMs at the BF16 rate without casts, less
    the recipe's GEMMs and casts `g` (layer_terms.layer_linears_s), the forward once more under full
    recomputation. The layer's other terms (attention core, elementwise work) do not depend on the recipe.
    A MoE model's BF16 layers are priced with the dense layer's linears (attention and the MLP of
    ffn_hidden_size): the experts' own BF16 rate is not priced (an approximation, said by the job). Memory
    is the recipe's for every layer: a BF16 layer's saved linear inputs (2 bytes, not NVFP4's 0.56) are
    not added (a BF16 layer under fp4_param_gather keeps its weights as Megatron builds them)."""
    if not is_quantized(precision):
        return np.zeros_like(np.asarray(tp, dtype=np.float64))
    b = layer_linears_s(model, attn_linears, tokens, tp, matmul_rate(gpu, "bf16", hbm), 0.0, hbm)
    fwd = b.gemm_fwd - g.gemm_fwd - g.cast_fwd
    return fwd + (b.gemm_bwd - g.gemm_bwd - g.cast_bwd) + np.where(rc == 2, fwd, 0.0)
