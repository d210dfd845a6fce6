"""The software stack that runs a plan: one stated profile per framework (`--framework`).

The formulation elsewhere is Megatron-LM's (Megatron-Core + Transformer Engine): fused
elementwise kernels, activations as Korthikanti et al. 2022 Table 2 counts them, a
vocab-parallel cross-entropy, bf16 weights with fp32 main gradients and Adam state. A plan
launched with torchtitan or Hugging Face transformers runs other code, which keeps more memory
and launches more kernels. Each profile states, with its source, what differs:

- which parallelisms it runs is `specs/frameworks.py` (the planner's space is narrowed to
  them; a forced unsupported knob is one line naming it);
- **saved activations** of one eager decoder layer (`layer_activation_bytes`), counted
  from the modelling code op by op (what each autograd node saves): torchtitan's Llama block
  (`SavedTensors`), and for transformers each family's own code (eager_layers.py: norms, q/k
  norms, fused projections, activations, dropout, sliding-window masks), tested against
  PyTorch's own `saved_tensors_hooks` on real transformers models of each family on CPU
  (tests/test_frameworks.py) and on an H200 (equal to the byte, per layer);
- **logits and loss** (`logit_bytes`): fp32 upcast and `cross_entropy`'s saved log-softmax;
- **model state** (`model_state_bytes_per_param`): fp32 weights, fp32 gradients, AdamW's two
  fp32 moments, autocast's bf16 weight copies, DDP's gradient buckets, FSDP2's unsharded weights;
  for transformers, which of them coexist at the peak is decided by phase (eager_memory.py:
  logits and gradients never do with one micro-batch), plus the allocator's reserve;
- **time**: eager elementwise traffic (every op reads and writes its tensors in HBM:
  `EagerTraffic`), autocast's per-forward weight casts and bf16->fp32 gradient accumulation,
  and the CPU's per-op dispatch, which bounds a layer's time from below when the GPU work is
  short (`eager_layer_s`); FSDP2's gathers without resharding after forward; the fused AdamW
  step (28 bytes per parameter) and, for transformers' sliding-window layers, SDPA's kernel over
  the whole s x s with the mask (`masked_attention_s`).

The default profile `megatron` changes nothing: every hook returns the formulation's own
Megatron terms (tests/test_frameworks.py checks the coefficients are identical).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import memory
from .eager_layers import LayerCounts, counts
from .eager_memory import allocator_reserve_bytes, phase_terms
from .kernels import layers_mixed

FP32_BYTES, BF16_BYTES = 4.0, 2.0


@dataclass(frozen=True)
class SavedTensors:
    """Bytes one eager decoder layer saves for backward, per token, as coefficients of the
    widths: `per_h * h + per_q * q + per_kv * kv + per_f * f (gated) + per_head * heads +
    per_token`, and `input_per_h` the layer input that full recompute keeps."""

    per_h: float
    per_q: float
    per_kv: float
    per_f_gated: float
    per_f_plain: float
    per_head: float
    per_token: float
    input_per_h: float
    head_per_h: float  # final norm and the LM head's input, per token (last stage)
    head_per_token: float  # final norm's rstd, int64 token ids and labels
    source: str


@dataclass(frozen=True)
class EagerTraffic:
    """Forward bytes per token that an eager layer's elementwise ops read plus write in HBM
    (each op a kernel of its own), as coefficients of h, q, kv, f; the backward moves twice
    the forward's (reads saved inputs and the incoming gradient, writes the gradient: the same
    convention as `kernels.elementwise_bytes_per_token`)."""

    per_h: float
    per_q: float
    per_kv: float
    per_f_gated: float
    per_f_plain: float  # a plain MLP's activation: read f, write f
    source: str


@dataclass(frozen=True)
class Framework:
    name: str
    summary: str
    # memory
    saved: SavedTensors | None = None  # None: Korthikanti Table 2 (memory.layer_activation_bytes)
    logit_bytes: float = memory.LOGIT_BYTES
    weight_bytes: float = BF16_BYTES
    autocast_copy_bytes: float = 0.0  # bf16 copy of every weight kept from forward to backward
    grad_bytes: float = FP32_BYTES
    optimizer_bytes: float = 12.0
    ddp_bucket_bytes: float = 0.0  # DDP's gradient buckets (zero 0 with dp x cp > 1)
    zero2_gathers_every_microbatch: bool = False  # FSDP2 reshards after backward (torchtitan)
    weights_sharded_from_zero: int = 3  # FSDP2 shards its fp32 weights at zero 2 too (torchtitan)
    zero3_live_bytes: float | None = None  # per parameter of a live ZeRO-3 layer (None: bf16 + grad)
    # time
    traffic: EagerTraffic | None = None  # None: Megatron's fused kernels
    weight_cast_bytes: tuple[float, float] = (0.0, 0.0)  # per parameter per micro-batch (fwd, bwd)
    weight_cast_zero_max: int = 3  # autocast casts the weights at ZeRO stages up to this one
    cross_entropy_bytes: tuple[float, float] | None = None  # per logit (fwd, bwd); None: Megatron's fused
    ops_per_layer: tuple[int, int] = (0, 0)  # aten ops dispatched by one layer (fwd, bwd)
    dispatch_us_per_op: float = 0.0
    # per family (transformers): the layer, its traffic and ops counted from the family's
    # modelling code (eager_layers.py), its sliding-window layers' explicit-mask attention, and
    # the memory peak by phase (eager_memory.py); `saved`/`traffic`/`ops_per_layer` unused then
    family_layers: bool = False
    optimizer_step_bytes: float | None = None  # per parameter; None: memory.adam_step_bytes_per_param
    accumulate_grad_bytes: float = 0.0  # per parameter and micro-batch after the first: .grad += the cast gradient

    @property
    def fused(self) -> bool:
        return self.saved is None and not self.family_layers


# transformers: each family's decoder layer is counted from its own modelling code
# (eager_layers.py: saved tensors, elementwise traffic, aten ops, sliding-window layers' explicit
# masks), e.g. Llama's 26h + 4q + 4kv + 8f + 4 heads + 8 bytes saved per token, OPT's 18h + 4q + 4kv
# + 2f + 4 heads + 16 (LayerNorm, ReLU, dropout masks), Gemma 3's four norms and q/k norms.

# torchtitan's Llama 3 TransformerBlock (torchtitan/models/llama3/model.py, models/common/
# attention.py GQAttention, rope.py, nn_modules.py RMSNorm = torch.nn.RMSNorm) with FSDP2's
# MixedPrecisionPolicy(param_dtype=bf16): bf16 residual stream, no autocast casts:
# - nn.RMSNorm x2, eager composite (torch aten rms_norm: upcast to fp32, normalise, weight):
#   the fp32 upcast (4h) and the fp32 normalised output (4h) plus rstd (4 per token); a fused
#   CUDA kernel keeps less (input and rstd): this is the upper bound;
# - wq/wk/wv share one input (2h); w1/w3 share one (2h);
# - rope in fp32 complex (`view_as_complex(query.float())` times freqs_cis, no gradient):
#   nothing per token kept; SDPA with enable_gqa: q, k, v, output, log-sum-exp as above;
# - FeedForward `w2(F.silu(w1(x)) * w3(x))`: 4 x 2f.
# Total 20h + 4q + 4kv + 8f + 4 heads + 8 (the same code path measured in bf16 without
# autocast on transformers' layer gives 16h + ...: its norm upcasts once, tests compare).
# q/k norms, multi-latent attention and attention sinks add to this block what eager_attention.py counts.
TORCHTITAN_SAVED = SavedTensors(
    per_h=2 * 8 + 2 + 2, per_q=4, per_kv=4, per_f_gated=8, per_f_plain=4, per_head=FP32_BYTES,
    per_token=2 * FP32_BYTES, input_per_h=BF16_BYTES, head_per_h=8 + 2, head_per_token=FP32_BYTES + 2 * 8,
    source="torchtitan models/llama3/model.py Llama3TransformerBlock, common/attention.py GQAttention")

# Eager elementwise traffic, forward, per token (bytes read + written), op by op (transformers:
# eager_layers.py per family); torchtitan in bf16: 2 norms (upcast r2h w4h, pow r4h w4h, mean r4h, mul r4h w4h, downcast
# r4h w2h, weight mul r2h w2h: 36h each), 2 residual adds (r4h w2h), rope (float r2 w4,
# complex mul r4 w4, type_as r4 w2: 20 per width), SiLU and the gate mul (10f).
TORCHTITAN_TRAFFIC = EagerTraffic(per_h=2 * 36 + 2 * 6, per_q=20, per_kv=20, per_f_gated=10, per_f_plain=4,
                                  source="the ops of TORCHTITAN_SAVED's layer, counted by aten op")

# Peak bytes per logit of the loss, eager (transformers loss/loss_utils.py ForCausalLMLoss:
# `logits = logits.float()` then `nn.functional.cross_entropy`; torchtitan components/loss.py
# `cross_entropy(pred.float(), ...)`, vocab-sharded under TP by its loss-parallel path): forward,
# the bf16 logits (2), their fp32 copy (4) and the log-softmax that cross_entropy saves (4);
# backward, the saved log-softmax (4), nll_loss's fp32 gradient (4) and log_softmax's (4) = 12.
# Megatron: memory.LOGIT_BYTES (its fused vocab-parallel cross-entropy works in place).
EAGER_LOGIT_BYTES = 12.0

# Eager cross-entropy traffic per logit (the loss code cited at EAGER_LOGIT_BYTES): forward,
# `.float()` (r2 w4) and log_softmax (its max and sum passes r4 r4, then r4 w4) = 22; backward,
# nll_loss's gradient (w4), log_softmax's (r4 r4 w4) and the cast back to bf16 (r4 w2) = 22.
EAGER_CROSS_ENTROPY_BYTES = (22.0, 22.0)

# CPU cost of one eager aten op (Python, dispatcher, autograd, kernel launch): 10 us (H. He,
# "Making Deep Learning Go Brrrr From First Principles", 2022: eager PyTorch overhead is on the
# order of microseconds per operator, independent of its size; measured on an H200 machine's host
# for a CPU-bound tiny transformers Llama step: 9.9 us per op, benchmarks/measured/
# h200-2026-11-26/saved_per_layer.json; ~23 us on this project's shared 2-core CPU host). The
# ops per layer are counted per family (eager_layers.OPS, checked with TorchDispatchMode).
EAGER_DISPATCH_US = 10.0

MEGATRON = Framework(
    name="megatron", summary="Megatron-LM / Megatron-Core with Transformer Engine: fused kernels, TP/PP/CP/EP, "
                             "distributed optimizer, vocab-parallel cross-entropy")
# torchtitan's FSDP2 (torchtitan/distributed/fsdp.py: fully_shard per block, reshard_after_forward
# from `fsdp_reshard_after_forward` "default"/"always"/"never", i.e. zero 3 / zero 2 here):
# fully_shard prefetches the next block's all-gather in forward and backward (one layer ahead:
# memory.ZERO3_LIVE_LAYERS), and reshards every block after its backward, so without resharding
# after forward the weights are still gathered once per micro-batch; torchtitan keeps gradient
# sync on every micro-batch (it turns it off only for the loss's lm_head, components/loss.py).
# Without FSDP (zero 0: DDP or one GPU) torchtitan trains fp32 weights under torch.autocast
# (config/configs.py `mixed_precision_param`): autocast's weight copies and casts, as transformers.
TORCHTITAN = Framework(
    name="torchtitan", summary="torchtitan (eager, compile off): FSDP2 + TP + PP + CP, "
                               "fp32 sharded weights gathered in bf16, eager elementwise ops, fp32 cross-entropy",
    saved=TORCHTITAN_SAVED, logit_bytes=EAGER_LOGIT_BYTES, weight_bytes=FP32_BYTES, autocast_copy_bytes=BF16_BYTES,
    optimizer_bytes=8.0, ddp_bucket_bytes=FP32_BYTES, zero3_live_bytes=BF16_BYTES + BF16_BYTES + FP32_BYTES,
    zero2_gathers_every_microbatch=True, weights_sharded_from_zero=2,
    traffic=TORCHTITAN_TRAFFIC, weight_cast_bytes=(FP32_BYTES + BF16_BYTES, BF16_BYTES + 2 * FP32_BYTES),
    weight_cast_zero_max=0, cross_entropy_bytes=EAGER_CROSS_ENTROPY_BYTES, ops_per_layer=(81, 146),
    dispatch_us_per_op=EAGER_DISPATCH_US)
# torch.optim.AdamW(fused=True) (torch/optim/adam.py `_fused_adam` -> torch._fused_adamw_, one
# kernel over the tensor lists, aten/src/ATen/native/cuda/fused_adam_impl.cu): reads the fp32
# param, grad, exp_avg and exp_avg_sq and writes param, exp_avg and exp_avg_sq: 7 x 4 bytes per
# parameter; `zero_grad(set_to_none=True)` frees the gradients (no kernel). Not counted: the
# Trainer's `clip_grad_norm_` (max_grad_norm 1.0 by default: torch._foreach_norm reads the
# gradients, torch._foreach_mul_ reads and writes them, 12 more), which the measured loop
# (benchmarks/hf_train_steps.py) does not run.
FUSED_ADAMW_STEP_BYTES = 7 * FP32_BYTES
TRANSFORMERS = Framework(
    name="transformers", summary="Hugging Face transformers (Trainer / accelerate): fp32 weights under bf16 autocast, "
                                 "eager ops, fp32 logits; data parallelism only (DDP, DeepSpeed ZeRO, FSDP)",
    logit_bytes=EAGER_LOGIT_BYTES, weight_bytes=FP32_BYTES, autocast_copy_bytes=BF16_BYTES,
    optimizer_bytes=8.0, ddp_bucket_bytes=FP32_BYTES, zero3_live_bytes=FP32_BYTES + BF16_BYTES + FP32_BYTES,
    weight_cast_bytes=(FP32_BYTES + BF16_BYTES, BF16_BYTES + FP32_BYTES), accumulate_grad_bytes=3 * FP32_BYTES,
    cross_entropy_bytes=EAGER_CROSS_ENTROPY_BYTES, dispatch_us_per_op=EAGER_DISPATCH_US, family_layers=True,
    optimizer_step_bytes=FUSED_ADAMW_STEP_BYTES)
PROFILES = {f.name: f for f in (MEGATRON, TORCHTITAN, TRANSFORMERS)}


def profile(name: str) -> Framework:
    return PROFILES[name]


# ---------------------------------------------------------------- the hooks
def model_state_bytes_per_param(fw: Framework, zero, shard, precision: str, grad_reduce_dtype: str = "fp32",
                                fp8_param_gather: bool = False, adam_bytes: float = memory.ADAM_STATE_BYTES,
                                instances: int = 1):
    """(weights, gradients, optimizer) bytes per parameter of one GPU. Eager stacks: fp32
    weights (sharded by ZeRO-3; by FSDP2 at zero 2 as well) plus the bf16 copy kept from forward to backward
    (autocast's cast of each weight, saved by its linear; FSDP2 without resharding after
    forward keeps the unsharded bf16 weights), fp32 gradients (sharded from ZeRO-2) plus DDP's
    fp32 buckets (torch DistributedDataParallel, gradient_as_bucket_view=False) with plain data
    parallelism, AdamW's two fp32 moments (8, sharded from ZeRO-1). HSDP (`instances`) is Megatron's (fused) only."""
    if fw.fused:
        return memory.model_state_bytes_per_param(zero, shard, precision, grad_reduce_dtype, fp8_param_gather, adam_bytes,
                                                  instances)
    zero = np.asarray(zero)
    shard = np.asarray(shard, dtype=np.float64)
    params = (np.where(zero >= fw.weights_sharded_from_zero, fw.weight_bytes / shard, fw.weight_bytes)
              + np.where(zero >= 3, 0.0, fw.autocast_copy_bytes))
    grads = (np.where(zero >= 2, fw.grad_bytes / shard, fw.grad_bytes)
             + np.where((zero == 0) & (shard > 1), fw.ddp_bucket_bytes, 0.0))
    opt = np.where(zero >= 1, fw.optimizer_bytes / shard, fw.optimizer_bytes)
    return params, grads, opt


def eager_state_parts(fw: Framework, zero, shard):
    """Per parameter on one GPU, apart: (fp32 weight, autocast's bf16 copy, fp32 gradient, DDP
    bucket, AdamW state), as `model_state_bytes_per_param` sums them (eager_memory.py places each
    in its phase)."""
    zero, shard = np.asarray(zero), np.asarray(shard, dtype=np.float64)
    return (np.where(zero >= fw.weights_sharded_from_zero, fw.weight_bytes / shard, fw.weight_bytes),
            np.where(zero >= 3, 0.0, fw.autocast_copy_bytes),
            np.where(zero >= 2, fw.grad_bytes / shard, fw.grad_bytes),
            np.where((zero == 0) & (shard > 1), fw.ddp_bucket_bytes, 0.0),
            np.where(zero >= 1, fw.optimizer_bytes / shard, fw.optimizer_bytes))


def layer_grads_at_peak_bytes(fw: Framework, zero, shard, params_gpu, grads_bytes, act_bytes, num_microbatches):
    """A layer's gradient bytes that can coexist with its saved activations. Megatron's fp32
    main-gradient buffers persist (all of `grads_bytes`). Eager stacks free `.grad` before each
    step (`optimizer.zero_grad(set_to_none=True)`, torch's default since 2.0; transformers'
    Trainer and torchtitan call it): with one micro-batch per step a layer's gradient is created
    in backward only once its saved tensors are freed, so the peak holds at most the larger of
    the two per layer (the smaller is left out here; summed over layers this bounds every moment
    of the backward); with gradient accumulation the gradients persist and count whole. DDP's
    buckets persist either way."""
    if fw.fused:
        return grads_bytes
    grad_tensor = params_gpu * np.where(np.asarray(zero) >= 2, fw.grad_bytes / np.asarray(shard, dtype=np.float64),
                                        fw.grad_bytes)
    freed = np.minimum(grad_tensor, act_bytes)
    return np.where(np.asarray(num_microbatches) == 1, grads_bytes - freed, grads_bytes)


def zero3_live_bytes_per_param(fw: Framework, grad_bytes: float) -> float:
    """Bytes per parameter of a ZeRO-3 layer being computed or prefetched (gathered weight, its
    bf16 copy under autocast, its unsharded gradient)."""
    return memory.BF16_BYTES + grad_bytes if fw.zero3_live_bytes is None else fw.zero3_live_bytes


def family_counts(fw: Framework, model, seq_length) -> LayerCounts | None:
    """The model's eager layers as its family's code runs them (eager_layers.py), for a stack
    that counts per family (transformers); None otherwise."""
    return counts(model, seq_length) if fw.family_layers else None


def layer_activation_bytes(fw: Framework, *, gated: bool, fam: LayerCounts | None = None, attention_extra=0.0, **kw):
    """(stored per layer and micro-batch, transient working set) on one GPU: Korthikanti's
    count for Megatron, the eager layer's saved tensors (`SavedTensors`, or the family's
    `LayerCounts`) otherwise. Eager full recompute (transformers gradient checkpointing,
    torchtitan full AC) keeps the layer input and rebuilds one layer at a time (the largest);
    torchtitan's selective AC is bounded by no recompute (its per-op policy is not counted).
    transformers runs neither tensor nor sequence parallelism (specs/frameworks.py): a family's
    count is per GPU as it is. `attention_extra`: the bytes per token an eager stack's attention keeps beyond its
    GQA block (`eager_attention.saved_extra_bytes`: q/k norms, multi-latent attention, sinks)."""
    if fw.fused:
        return memory.layer_activation_bytes(**kw)
    T = np.asarray(kw["tokens"], dtype=np.float64)
    t = np.asarray(kw["tp"], dtype=np.float64)
    rep = np.asarray(kw["sp_degree"], dtype=np.float64)
    h, heads = kw["hidden"], kw["heads"]
    if fam is not None:
        full, largest, kept = (T * fam.saved + fam.per_layer, T * fam.working + fam.per_layer, T * fam.input)
    else:
        s = fw.saved
        assert s is not None  # not fused and no family counts: the framework's saved tensors
        per_f = s.per_f_gated if gated else s.per_f_plain
        sharded = (s.per_q * kw["q_width"] + s.per_kv * kw["kv_width"] + per_f * kw["ffn"] + s.per_head * heads) / t
        replicated = (s.per_h + (3.0 if kw["dropout"] else 0.0)) * h / rep + s.per_token
        full = largest = T * (replicated + sharded + attention_extra)
        kept = T * s.input_per_h * h / rep
    if not kw["flash"]:  # eager attention keeps the scores, probabilities and their dropout
        full = full + 5.0 * heads / t * T * kw["seq_k"]
        largest = largest + 5.0 * heads / t * T * kw["seq_k"]
    rc = np.asarray(kw["recompute"])
    return np.where(rc == 2, kept, full), np.where(rc == 2, largest, 0.0)


def head_act_bytes(fw: Framework, tokens, hidden, sp_degree, fam: LayerCounts | None = None):
    """The last stage's saved tensors before the logits, per micro-batch: final norm, the LM
    head's input, token ids and labels."""
    if fw.fused:
        return 4.0 * tokens * hidden / sp_degree
    if fam is not None:
        return tokens * fam.head
    s = fw.saved
    assert s is not None  # not fused and no family counts: the framework's saved tensors
    return tokens * (s.head_per_h * hidden / sp_degree + s.head_per_token)


def last_stage_act_bytes(fw: Framework, tokens, hidden, vocab, tp, sp_degree, fam: LayerCounts | None = None):
    """The last stage's extra activations per micro-batch: final norm, head input, logits."""
    logit = memory.LOGIT_BYTES if fw.fused else fw.logit_bytes
    return head_act_bytes(fw, tokens, hidden, sp_degree, fam) + logit * tokens * vocab / tp


def first_stage_act_bytes(fw: Framework, tokens, hidden, sp_degree, dropout: bool,
                          fam: LayerCounts | None = None):
    """The first stage's activations per micro-batch: Megatron's bf16 embedding output and its
    dropout mask; a family's learned positions' ids, embedding dropout mask and the sliding
    layers' boolean (1, 1, s, s) mask (eager_layers.LayerCounts)."""
    if fam is not None:
        return tokens * fam.first + fam.mask
    return (memory.BF16_BYTES + dropout) * tokens * hidden / sp_degree


def elementwise_bytes_per_token(fw: Framework, fam: LayerCounts | None = None, attention_extra=0.0, **kw):
    """(forward, backward) elementwise bytes per token of one layer on one GPU (`attention_extra`: what an eager
    stack's attention moves beyond its GQA block, `eager_attention.traffic_extra_bytes`)."""
    from .kernels import elementwise_bytes_per_token as fused
    if fam is not None:
        return fam.traffic, 2.0 * fam.traffic
    if fw.traffic is None:
        return fused(**kw)
    e, t, rep = fw.traffic, np.asarray(kw["tp"], dtype=np.float64), np.asarray(kw["sp_degree"], dtype=np.float64)
    per_f = e.per_f_gated if kw["gated"] else e.per_f_plain
    fwd = (e.per_h * kw["hidden"] / rep + (e.per_q * kw["q_width"] + e.per_kv * kw["kv_width"] + per_f * kw["ffn"]) / t
           + attention_extra)
    return fwd, 2.0 * fwd


def masked_attention_s(fam: LayerCounts | None, layers: int, core, masked):
    """A layer's attention core (forward, backward), averaged over the layers: the causal
    kernel's `core`, and `masked` (the kernel over the whole s x s with the additive bias, no
    causal skipping) on the family's layers whose sliding window gets an explicit mask."""
    if fam is None or not fam.masked_layers:
        return core
    return layers_mixed(core, masked, fam.masked_layers / layers)


def eager_layer_s(fw: Framework, fwd_s, bwd_s, zero, params_per_gpu, hbm_bytes_per_s,
                  fam: LayerCounts | None = None, num_microbatches=1, extra_ops: tuple[int, int] = (0, 0)):
    """A layer's (forward, backward) time with the stack's own costs: autocast's weight casts
    (read fp32, write bf16 each forward; each backward the bf16 weight gradient cast into fp32:
    read 2, write 4, and added into the existing .grad with gradient accumulation, from the
    second micro-batch: read 4 + 4, write 4) and the CPU's dispatch of its eager ops, which the
    GPU cannot outrun (the layer takes at least ops x dispatch time)."""
    if fw.fused:
        return fwd_s, bwd_s
    casts = np.asarray(zero) <= fw.weight_cast_zero_max
    m = np.asarray(num_microbatches, dtype=np.float64)
    per_param = (fw.weight_cast_bytes[0], fw.weight_cast_bytes[1] + fw.accumulate_grad_bytes * (m - 1) / m)
    cast_f, cast_b = (np.where(casts, c * params_per_gpu / hbm_bytes_per_s, 0.0) for c in per_param)
    op_s = fw.dispatch_us_per_op * 1e-6
    ops = fam.ops if fam is not None else tuple(n + e for n, e in zip(fw.ops_per_layer, extra_ops))
    return (np.maximum(fwd_s + cast_f, ops[0] * op_s), np.maximum(bwd_s + cast_b, ops[1] * op_s))


def eager_peak(fw: Framework, model, dense: dict, ends: dict, *, fam: LayerCounts | None, zero, shard, params, tp,
               tokens, sp_degree, layer_act, working, first_act, z3_live, recompute, num_microbatches):
    """For a stack counted per family (transformers) on a dense model: replace the additive
    memory terms of `dense` (per layer) and `ends` (first/last stage) by those of the phase where
    the step peaks (eager_memory.phase_terms), and return the allocator's reserve for the loss's
    fp32 transients (eager_memory.allocator_reserve_bytes); otherwise change nothing and return 0."""
    if fam is None or model.is_moe or model.mtp_num_layers:
        return 0.0
    layer_params, emb_params, head_params = params
    w_b, c_b, g_b, bucket_b, o_b = eager_state_parts(fw, zero, shard)
    logits = tokens * model.vocab_size / tp
    ph = phase_terms(layers=model.num_layers, layer_params=layer_params, emb_params=emb_params,
                     head_params=head_params, lm_head_params=model.vocab_size * model.hidden_size / tp,
                     state_bytes=(w_b, o_b), copy_bytes=c_b, grad_bytes=g_b, bucket_bytes=bucket_b,
                     layer_act=layer_act, working=working, first_act=first_act,
                     head_act=head_act_bytes(fw, tokens, model.hidden_size, sp_degree, fam), logits=logits,
                     recompute=recompute, num_microbatches=num_microbatches)
    dense.update(params=ph.params, grads=ph.grads, optim=ph.optim, act=ph.act, working=ph.working + z3_live)
    ends.update(first_static_bytes=ph.first_static, last_static_bytes=ph.last_static, last_act_bytes=ph.last_act)
    return allocator_reserve_bytes(logits, model.num_layers * layer_params + emb_params + head_params, g_b, o_b)
