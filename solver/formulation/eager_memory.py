"""Where an eager transformers training step's memory peaks, by phase (`--framework transformers`).

Megatron keeps its fp32 main gradients, bf16 weights and the activations of in-flight
micro-batches for the whole step: its terms add. A transformers step on fp32 weights under
bf16 autocast (torch.optim.AdamW, `zero_grad(set_to_none=True)`: transformers' Trainer and
torch's default since 2.0) holds different tensors at different moments, so the peak is the
largest of three phases, each with the weights (4), AdamW's exp_avg and exp_avg_sq (8) and, with
plain data parallelism, DDP's gradient buckets (4 per parameter):

- **loss forward** (inside autocast): autocast's bf16 copy of every weight its linears used (2 per
  parameter: autocast_mode.cpp `cached_cast` caches casts of leaf tensors that require grad until
  the outermost autocast exits, with gradient checkpointing too), every layer's saved tensors
  (or, checkpointed, its input), and the loss's transient: the bf16 logits, their fp32 copy and
  the log-softmax `cross_entropy` keeps (2 + 4 + 4 = 10 per logit; loss/loss_utils.py
  ForCausalLMLoss upcasts with `logits.float()`);
- **loss backward** (autocast has exited: its cache is cleared, so a checkpointed model keeps
  only the LM head's copy, which the head's mm saved; without checkpointing every copy is saved by
  its mm): the saved log-softmax (4), nll_loss's fp32 gradient (4) and log_softmax's (4): 12 per
  logit (measured on an H200: benchmarks/measured/h200-2026-11-27, Llama-3.2-3B at 16k tokens
  checkpointed peaks in the loss forward, Gemma 3 1B at 2k x 8 in the loss backward);
- **gradients**: at the end of the backward every fp32 gradient exists (4 per parameter, created
  as each layer's backward ends, after its saved tensors were freed), beside the first layer's
  saved tensors, its weights' bf16 copies and bf16 gradients (2 + 2 per parameter of one layer)
  and, checkpointed, the layer rebuilt by recomputation; the fused AdamW step that follows
  (`torch._fused_adamw_`, in place) adds nothing.
Logits and gradients never coexist unless gradients accumulate over micro-batches (then they
persist through every phase).

What PyTorch *reserves* exceeds that peak by what its caching allocator cannot reuse
(c10/cuda/CUDACachingAllocator.cpp, without expandable segments): a tensor above the large-pool
threshold gets a segment of its own size when no cached block fits, freed blocks are split to
serve smaller requests (best fit), and segments are never returned. The loss's fp32 tensors are
by far the step's largest requests; once freed, their segments are the only blocks large
enough for the tensors created after them -- each backward's fp32 gradients and, in the first
step, AdamW's state -- which split them, so the next step's loss must reserve a fresh segment
while the split one stays cached (measured: Qwen3-4B at 32k tokens ran out of memory asking for
an 18.55 GiB fp32 logits tensor with 28 GiB reserved but unallocated;
benchmarks/measured/h200-2026-11-26/hf_train_steps.json). `allocator_reserve_bytes` adds, beside
the GPU's fragmentation fraction, one fp32 logits tensor, but no more than the gradients and
AdamW state that can occupy such segments: a stated margin, not a model of the allocator. Because transformers trains on one pipeline stage (pp = 1:
specs/frameworks.py), the phase is chosen for the model's whole layer count; the coefficients
of the chosen phase are returned, so the stage sum is that phase's total.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOSS_FORWARD_BYTES_PER_LOGIT = 10.0  # bf16 logits 2, fp32 copy 4, log-softmax 4
LOSS_BACKWARD_BYTES_PER_LOGIT = 12.0  # log-softmax 4, nll_loss's gradient 4, log_softmax's gradient 4
BF16_GRAD_BYTES = 2.0  # a weight's bf16 gradient before ToCopyBackward casts it into the fp32 .grad


@dataclass(frozen=True)
class PhaseTerms:
    """Stage coefficients (arrays over shapes) of the phase where memory peaks."""

    params: np.ndarray  # per layer: fp32 weights, plus autocast's copies in the loss phases
    grads: np.ndarray  # per layer: DDP buckets, plus fp32 gradients in the gradient phase
    optim: np.ndarray
    act: np.ndarray  # per layer: saved tensors (loss phases)
    working: np.ndarray  # the gradient phase's one-layer terms
    first_static: np.ndarray
    last_static: np.ndarray
    last_act: np.ndarray
    phase: np.ndarray  # 0 loss forward, 1 loss backward, 2 gradients


def phase_terms(*, layers: int, layer_params, emb_params, head_params, lm_head_params, state_bytes, copy_bytes,
                grad_bytes, bucket_bytes, layer_act, working, first_act, head_act, logits, recompute,
                num_microbatches) -> PhaseTerms:
    """The peak phase of each shape (module docstring). `state_bytes` are the (weight, optimizer)
    bytes per parameter of this GPU, `copy_bytes` autocast's copy, `grad_bytes` the fp32
    gradient and `bucket_bytes` DDP's buckets; `layer_act` a layer's saved tensors (a
    checkpointed layer's input), `working` the recomputed layer (0 without recomputation),
    `head_act` the last stage's saved tensors before the logits, `logits` the logits of a
    micro-batch on this GPU."""
    w, o = state_bytes
    ckpt = np.asarray(recompute) == 2
    accumulate = np.asarray(num_microbatches) > 1
    L = float(layers)
    other = emb_params + head_params
    kept = L * layer_act + first_act + head_act
    copies = L * layer_params * copy_bytes
    head_copy = lm_head_params * copy_bytes
    fwd = copies + head_copy + kept + LOSS_FORWARD_BYTES_PER_LOGIT * logits
    bwd = np.where(ckpt, 0.0, copies) + head_copy + kept + LOSS_BACKWARD_BYTES_PER_LOGIT * logits
    one_layer = layer_params * (copy_bytes + BF16_GRAD_BYTES) + layer_act + working
    grad_end = np.where(accumulate, 0.0, (L * layer_params + other) * grad_bytes) + one_layer + first_act
    phase = np.argmax(np.stack([fwd, bwd, grad_end]), axis=0)
    loss = phase < 2
    grads_on = (~loss) | accumulate
    return PhaseTerms(
        params=layer_params * (w + np.where((phase == 0) | ((phase == 1) & ~ckpt), copy_bytes, 0.0)),
        grads=layer_params * (bucket_bytes + np.where(grads_on, grad_bytes, 0.0)),
        optim=layer_params * o + 0.0 * phase,
        act=np.where(loss, layer_act, 0.0),
        working=np.where(loss, 0.0, one_layer),
        first_static=emb_params * (w + o + bucket_bytes + np.where(grads_on, grad_bytes, 0.0)),
        last_static=head_params * (w + o + bucket_bytes + np.where(grads_on, grad_bytes, 0.0))
        + np.where(loss, head_copy, 0.0),
        last_act=np.where(loss, head_act + np.where(phase == 0, LOSS_FORWARD_BYTES_PER_LOGIT,
                                                    LOSS_BACKWARD_BYTES_PER_LOGIT) * logits, 0.0),
        phase=phase)


def allocator_reserve_bytes(logits, params, grad_bytes, optim_bytes):
    """Reserved beyond the peak's tensors (module docstring): one fp32 copy of a micro-batch's
    `logits`, at most the `params`' fp32 gradients and AdamW state (`grad_bytes` and
    `optim_bytes` per parameter on this GPU)."""
    return np.minimum(4.0 * logits, params * (grad_bytes + optim_bytes))
