"""FLOP counts (Narayanan et al. 2021 Eq. (2)-(3), generalised to GQA and gated MLPs).

Per layer, forward, per micro-batch of b sequences of length s (T = b*s tokens):
QKV `2*T*h*(h_q + 2*h_kv)`, projection `2*T*h_q*h`, attention scores and values `4*b*s^2*h_q`,
MLP `2*T*h*f*(3 if gated else 2)`; LM head `2*T*h*V`. Backward = 2x forward.

*Model FLOPs* (for MFU) count forward + backward once, attention as the full `4bs^2h`
(the convention of Megatron-LM and the published MFU figures, which do not halve for the
causal mask). *Hardware FLOPs* add the recomputed forward: full recompute repeats every
layer's forward, selective the attention core. For GPT (MHA, f=4h) the hardware FLOPs with
full recompute equal Eq. (3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)).
"""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec


def layer_gemm_fwd_flop(model: ModelSpec, tokens):
    h, f, hq = model.hidden_size, model.ffn_hidden_size, model.q_hidden_size
    per_token = 2 * h * (hq + 2 * model.kv_hidden_size) + 2 * hq * h + 2 * h * f * model.mlp_matrices
    return np.asarray(tokens, dtype=np.float64) * per_token


def attention_core_fwd_flop(model: ModelSpec, batch, seq_len):
    """QK^T and attention-times-V, full (non-causal) count: 4*b*s^2*h_q."""
    return 4.0 * np.asarray(batch, dtype=np.float64) * seq_len * seq_len * model.q_hidden_size


def lm_head_fwd_flop(model: ModelSpec, tokens):
    return 2.0 * np.asarray(tokens, dtype=np.float64) * model.hidden_size * model.vocab_size


def model_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int) -> float:
    """Forward + backward model FLOPs of one optimizer step (no recomputation)."""
    tokens = global_batch_size * seq_len
    layer = layer_gemm_fwd_flop(model, tokens) + attention_core_fwd_flop(model, global_batch_size, seq_len)
    return float(3 * (model.num_layers * layer + lm_head_fwd_flop(model, tokens)))


def hardware_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, recompute) -> np.ndarray:
    """Model FLOPs plus the recomputed forward (recompute: RECOMPUTE_CODES array or int)."""
    tokens = global_batch_size * seq_len
    core = attention_core_fwd_flop(model, global_batch_size, seq_len)
    full = layer_gemm_fwd_flop(model, tokens) + core
    rc = np.asarray(recompute)
    extra = np.where(rc == 2, full, np.where(rc == 1, core, 0.0)) * model.num_layers
    return model_flop_per_step(model, global_batch_size, seq_len) + extra


def megatron_eq3_flop(model: ModelSpec, global_batch_size: int, seq_len: int) -> float:
    """Narayanan et al. 2021 Eq. (3), as printed (GPT with f=4h, MHA, full recompute)."""
    B, s, l, h, V = global_batch_size, seq_len, model.num_layers, model.hidden_size, model.vocab_size
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
