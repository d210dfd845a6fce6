"""Memory per GPU of a pipeline stage, as per-shape coefficients (bytes), vectorised.

- Model state per parameter (`model_state_bytes_per_param`): bf16/fp8 training keeps a bf16
  weight (2), an fp32 main gradient (4) and fp32 Adam state (master weight, m, v: 12) = 18
  bytes (Megatron-LM distributed-optimizer docs, "bf16 params, fp32 grads"); fp16 training
  (Megatron's fp16 optimizer) has fp16 gradients: 16 (ZeRO paper Sec. 3.1); an FP8 recipe adds
  the cached FP8 weight in both layouts and its scales (precision.py: 2, mxfp8 2.06) to the decoder's
  linear layers, not to the embedding and LM head (`precision.edge_weight_precision`); Adam's 12
  bytes are the job's (`adam_state_bytes_per_param`: less with the precision-aware optimizer). Sharding over the
  d data-parallel ranks (x cp): ZeRO-1 / distributed optimizer divides the Adam state, ZeRO-2
  the gradients too, ZeRO-3 / FSDP everything (Rajbhandari et al. 2020).
- Activations per layer per micro-batch (`layer_activation_bytes`): Korthikanti et al. 2022
  Table 2 generalised to GQA (K, V of width h_kv), a query width h_q = heads x head_dim and
  gated MLPs; flash attention keeps only the softmax statistics (fp32 per head and query)
  instead of the `5 a s^2 b` score terms; the two dropout masks (1 byte per element) only for
  models trained with dropout (`ModelSpec.dropout`); under an FP8 recipe the four linear-layer
  inputs are saved quantised (1 byte; precision.py).
- The logits of the last stage: Megatron's `VocabParallelCrossEntropy` turns the LM head's
  bf16 output into an fp32 softmax kept for backward (4 bytes per logit), whose gradient is
  computed in place and cast back to bf16 for the head's backward (2): `LOGIT_BYTES` per
  logit of one micro-batch.
- The reported peak is what the caching allocator holds, not what tensors use: every stage's
  sum is multiplied by 1 + `runtime_reserve_fraction` (fragmentation; PyTorch's reserved over
  allocated), and the runtime is added (`runtime_bytes`): `runtime_reserve_gib` (CUDA
  context, cuBLAS/cuDNN workspaces) plus NCCL's buffers, NCCL_COMM_BYTES for every
  communicator the rank is in (TP, CP, DP x CP, two pipeline neighbours): each opens up to
  32 channels with send/receive buffers per protocol (NCCL_BUFFSIZE 4 MiB for Simple). So the
  estimate is an upper bound of the peak memory a run shows, and it fits when it is at most
  the GPU's HBM.
"""

from __future__ import annotations

import numpy as np

from .precision import weight_bytes_per_param

BF16_BYTES = 2
FP32_BYTES = 4
LOGIT_BYTES = 4 + 2  # fp32 softmax (gradient in place), bf16 gradient for the head
# Working set of ZeRO-3 / FSDP: the gathered bf16 weights of the layer being computed and of
# the one being prefetched, and their unsharded gradients before the reduce-scatter.
ZERO3_LIVE_LAYERS = 2
NCCL_COMM_BYTES = 0.5 * 1024**3


def runtime_bytes(reserve_gib: float, tp, cp, dp, pp, ep=1, etp=1) -> np.ndarray:
    """CUDA context and workspaces, plus NCCL buffers per communicator (module docstring); a MoE
    shape adds its EP, ETP and expert-data-parallel communicators."""
    ep, etp = np.asarray(ep), np.asarray(etp)
    comms = ((np.asarray(tp) > 1).astype(np.float64) + (np.asarray(cp) > 1) + (np.asarray(dp) * np.asarray(cp) > 1)
             + 2.0 * (np.asarray(pp) > 1)) + (ep > 1) + (etp > 1) + (ep * etp > 1)
    return reserve_gib * 1024**3 + NCCL_COMM_BYTES * comms


ADAM_STATE_BYTES = 12.0  # fp32 master weight, first and second moments
MOMENT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# The Adam step's traffic beside its state (read and written once each): fp32 gradient read (4), bf16
# weight write (2), gradient zeroing (4), norm for clipping (4).
ADAM_STEP_OTHER_BYTES = 14.0


def adam_state_bytes_per_param(precision: str, precision_aware: bool = False, moment_dtype: str = "fp32") -> float:
    """Adam's state per parameter before sharding. Megatron's default optimizer: 12 (fp32 master, m, v).
    With `--use-precision-aware-optimizer` (Megatron-LM d98e8a6 megatron/core/optimizer/__init__.py:564-588,
    optimizer_config.py:190-194 and 407-414): the moments in `--exp-avg-dtype` / `--exp-avg-sq-dtype`, and under
    BF16 or delayed-scaling FP8 the master weight kept by Transformer Engine's FusedAdam as the 16 bits the BF16
    weight lacks (store_param_remainders, default True; int16 in distrib_optimizer.py:1008); under FP16 or the
    other quantised recipes Megatron keeps the fp32 master (4)."""
    if not precision_aware:
        return ADAM_STATE_BYTES
    master = 2.0 if precision in ("bf16", "fp8") else 4.0
    return master + 2 * MOMENT_BYTES[moment_dtype]


def adam_step_bytes_per_param(state_bytes: float = ADAM_STATE_BYTES) -> float:
    """HBM traffic of the Adam step per (sharded) parameter, memory bound: its state read and written, and
    ADAM_STEP_OTHER_BYTES (38 with the default 12-byte state)."""
    return 2 * state_bytes + ADAM_STEP_OTHER_BYTES


def model_state_bytes_per_param(zero, shard, precision: str, grad_reduce_dtype: str = "fp32",
                                fp8_param_gather: bool = False, adam_bytes: float = ADAM_STATE_BYTES, instances: int = 1):
    """(weights, gradients, optimizer) bytes per parameter of one GPU (see the module docstring).
    The gradient buffer has the reduction's dtype: Megatron's DDP allocates main_grad in fp32 only
    with grad_reduce_in_fp32 (megatron/core/distributed/distributed_data_parallel.py: grad_dtype =
    torch.float if ddp_config.grad_reduce_in_fp32 else param.dtype), so `--grad-reduce-in-bf16`
    keeps 2-byte gradients. `fp8_param_gather`: the FP8 weights only (precision.weight_bytes_per_param).
    `adam_bytes`: the optimizer state before sharding (`adam_state_bytes_per_param`). HSDP's `instances`
    (Megatron-FSDP with --num-distributed-optimizer-instances): ZeRO-3's weights and gradients sharded over one
    instance's shard / instances ranks, the optimizer state over all `shard`."""
    zero = np.asarray(zero)
    shard = np.asarray(shard, dtype=np.float64)
    weight = weight_bytes_per_param(precision, fp8_param_gather)  # BF16 and/or the recipe's FP8 copies (precision.py)
    grad = 2.0 if precision == "fp16" or grad_reduce_dtype == "bf16" else FP32_BYTES
    inner = shard / np.where(zero >= 3, instances, 1)
    params = np.where(zero >= 3, weight / inner, weight)
    grads = np.where(zero >= 2, grad / inner, grad)
    opt = np.where(zero >= 1, adam_bytes / shard, adam_bytes)
    return params, grads, opt


def layer_activation_bytes(*, tokens, hidden, q_width, kv_width, ffn, mlp_matrices, heads, seq_k, tp, sp_degree,
                           recompute, flash: bool, dropout: bool, linear_input_bytes: float = BF16_BYTES,
                           gate_width: float = 0.0):
    """(stored activations per layer and micro-batch, transient working set) on one GPU.

    `tokens` = b s / cp on this GPU; Korthikanti Table 2 per token: 10h replicated over TP
    unless SP (norm inputs 2h+2h, QKV and fc1 inputs 2h+2h, two dropout masks h+h when the
    model uses dropout), and sharded
    over TP: Q, K, V, attention output (2(h_q + 2 h_kv + h_q)), the MLP's input and output of
    the activation (2 * 2f for 2 matrices, 3 * 2f gated: the activation keeps both halves).
    Selective recompute drops the score terms (unfused attention); full recompute keeps the
    layer input only (2h, sharded with SP) and rebuilds one layer at a time in backward.
    `linear_input_bytes`: bytes per element of the four saved linear-layer inputs (QKV and fc1:
    the norm outputs, h each; the attention projection's input, h_q; fc2's input, f): 2 in BF16,
    1 under an FP8 recipe (precision.saved_linear_input_bytes: Transformer Engine saves the
    quantised input that the weight-gradient GEMM reads). `gate_width`: an attention output gate's logits
    (h_q with --attention-output-gate, 0 without), kept in BF16 for the gate's backward
    (attention.py `_apply_output_gate`)."""
    t = np.asarray(tp, dtype=np.float64)
    rep = np.asarray(sp_degree, dtype=np.float64)
    T = np.asarray(tokens, dtype=np.float64)
    saved_less = BF16_BYTES - linear_input_bytes
    replicated = ((10.0 if dropout else 8.0) - 2 * saved_less) * hidden / rep
    sharded = (4.0 * q_width + 4.0 * kv_width + 2.0 * mlp_matrices * ffn - saved_less * (q_width + ffn)
               + BF16_BYTES * gate_width) / t
    a_t = heads / t
    if flash:
        core = FP32_BYTES * a_t * T  # softmax statistics (log-sum-exp) per head and query
        core_sel = core
    else:
        core = 5.0 * a_t * T * seq_k  # scores, softmax, dropout mask, output (Korthikanti's 5as^2b)
        core_sel = 0.0
    full = T * (replicated + sharded) + core
    rc = np.asarray(recompute)
    stored = np.where(rc == 2, BF16_BYTES * T * hidden / rep, np.where(rc == 1, T * (replicated + sharded) + core_sel, full))
    working = np.where(rc == 2, full, np.where(rc == 1, core - core_sel, 0.0))
    return stored, working
