"""LoRA on one GPU, per micro-batch (specs/peft.py: Megatron-Bridge's LoRA, every base weight frozen).

**The frozen base** (Hu et al. 2021, "LoRA", Sec. 4.1: W0 is frozen and receives no gradient updates): each
base linear's backward computes the data gradient only (`kernels.linear_s` with weight_grad False), the output
layer's too, and the embedding's backward nothing; no base weight has a main-gradient buffer, optimizer state, an
optimizer step or a data-parallel reduction (coefficients.py applies these with `trained_params`).

**The adapters**: on each targeted linear, of shape (N, K) on a TP rank, A (K x r) and B (r x N). Megatron-Bridge's
`ParallelLinearAdapter` (src/megatron/bridge/peft/utils.py) splits them as the base linear is split: for a
column-parallel base (linear_qkv, linear_fc1) A whole and B by output columns, for a row-parallel base
(linear_proj, linear_fc2) A by input rows and B whole -- on a rank about r (K + N) weights of the rank's (N, K).
Each runs two more GEMMs forward and their data and weight gradients backward (`kernels.linear_s`) at the BF16
rate: the adapters are Megatron-Core's plain tensor-parallel linears, not Transformer Engine's FP8 modules.
Their output is added to the base linear's (read both, write one: 3 N elements per token forward), and backward
the two branches' input gradients are summed (3 K). Their TP collectives (a T x r gather or reduce per adapter)
and the T x r activations they save are negligible next to the layer's and are not priced.

**Saved activations** (`saved_inputs_delta_bytes`): Transformer Engine keeps a linear's input for its weight
gradient only (transformer_engine/pytorch/module/linear.py at d0067d0: `backward_needs_input = is_grad_enabled and
weight.requires_grad`), so a frozen linear keeps none, while an adapter's linear_in (Megatron-Core's own linear,
trained) keeps the input it reads, in BF16, gathered whole under sequence parallelism (the adapter of a
column-parallel base gathers its input itself).
"""

from __future__ import annotations

import numpy as np

from .kernels import BF16_BYTES, linear_s

# which of a dense layer's linears each Megatron-Bridge target adapts: (attention's list, index) or (MLP's, index)
TARGET_LINEAR = {"linear_qkv": ("attn", 0), "linear_proj": ("attn", -1), "linear_fc1": ("mlp", 0),
                 "linear_fc2": ("mlp", 1)}


def adapted_linears(attn_linears: list, mlp_linears: list, targets) -> list[tuple]:
    """(N, K) on a TP rank of the base linears the `targets` adapt (`TARGET_LINEAR`)."""
    lists = {"attn": list(attn_linears), "mlp": list(mlp_linears)}
    return [lists[part][index] for part, index in (TARGET_LINEAR[t] for t in targets)]


def adapter_params_per_gpu(linears: list[tuple], rank: int):
    """Weights of the adapters of one layer on one GPU: r (K + N) per adapted linear (module docstring)."""
    return sum(rank * (np.asarray(N, dtype=np.float64) + K) for N, K in linears)


def adapter_s(linears: list[tuple], tokens, rank: int, *, bf16mm: dict, hbm_bytes_per_s: float):
    """(forward, backward) of one layer's adapters on one GPU: A (M x K)(K x r) and B (M x r)(r x N) with their
    gradients (`linear_s`, trained: weight gradients included) at the BF16 rate `bf16mm`, and the sums of the two
    branches, memory bound (module docstring)."""
    fwd = bwd = 0.0
    M = np.asarray(tokens, dtype=np.float64)
    trained = {**bf16mm, "weight_grad": True}  # the job's rate drops weight gradients (the frozen base's)
    for N, K in linears:
        a_f, a_b = linear_s(M, rank, K, **trained)
        b_f, b_b = linear_s(M, N, rank, **trained)
        fwd = fwd + a_f + b_f + 3 * BF16_BYTES * M * N / hbm_bytes_per_s
        bwd = bwd + a_b + b_b + 3 * BF16_BYTES * M * K / hbm_bytes_per_s
    return fwd, bwd


def saved_inputs_delta_bytes(model, tokens, tp, sp_degree, linear_input_bytes: float, targets):
    """What LoRA changes, per layer and micro-batch on one GPU, in the saved activations
    `memory.layer_activation_bytes` counts (module docstring): the inputs of linear_qkv and linear_fc1 (the norm
    outputs, h, replicated over TP unless SP) and of linear_fc2 (f / tp), at `linear_input_bytes`, leave; an
    adapted one's adapter keeps its input in BF16 (h whole for linear_qkv / linear_fc1). linear_proj's input, the
    attention output, stays: the attention kernel keeps it for its own backward."""
    T = np.asarray(tokens, dtype=np.float64)
    h, f = model.hidden_size, model.ffn_hidden_size
    t, rep = np.asarray(tp, dtype=np.float64), np.asarray(sp_degree, dtype=np.float64)
    dropped = linear_input_bytes * (2 * h / rep + f / t)
    adapter_inputs = {"linear_qkv": h, "linear_fc1": h, "linear_fc2": f / t}
    kept = sum(BF16_BYTES * adapter_inputs[x] for x in targets if x in adapter_inputs)
    return T * (kept - dropped)
