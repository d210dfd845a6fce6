"""FLOP counts (Narayanan et al. 2021 Eq. (2)-(3), generalised to GQA and gated MLPs).

Per layer, forward, per micro-batch of b sequences of length s (T = b*s tokens):
QKV `2*T*h*(h_q + 2*h_kv)`, projection `2*T*h_q*h`, attention scores and values `4*b*s^2*h_q`,
MLP `2*T*h*f*(3 if gated else 2)`; LM head `2*T*h*V`. Backward = 2x forward.

*Model FLOPs* (for MFU) count forward + backward once; *hardware FLOPs* add the recomputed
forward: full recompute repeats every layer's forward, selective the attention core.

Two conventions for the attention core, one keyword (`causal`):
- `causal=True`, the one solveplan REPORTS (MFU, model and hardware TFLOP/s; named by
  FLOP_CONVENTION in the output's JSON): Megatron-LM's current
  `megatron/training/training.py:num_floating_point_operations`, which halves the attention
  term (`seq_length / hidden_size / 2`: "Only half of the attention matrix is non-zero and needs
  to be multiplied with V"), i.e. the causal attention counted as the kernels execute it
  (`kernels.flash_attention_s` times half the score blocks). Counting the full square while
  timing half of it let a 131k-token plan claim 877 hardware TFLOP/s of H100's 989, above the
  GEMM efficiency the formulation itself assumes (issue 24).
- `causal=False`, the full `4bs^2h` of Narayanan et al. 2021 Eq. (3) and of the published MFU
  figures (Megatron-LM 2020-2023, MosaicML's llm-foundry benchmarks): used only to read those
  figures back into step times (`calibration/rows.py`) and to check Eq. (3). For GPT (MHA,
  f=4h) the hardware FLOPs with full recompute then equal Eq. (3):
  96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)).
"""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec


def layer_gemm_fwd_flop(model: ModelSpec, tokens):
    h, f, hq = model.hidden_size, model.ffn_hidden_size, model.q_hidden_size
    per_token = 2 * h * (hq + 2 * model.kv_hidden_size) + 2 * hq * h + 2 * h * f * model.mlp_matrices
    return np.asarray(tokens, dtype=np.float64) * per_token


FLOP_CONVENTION = ("Megatron-LM num_floating_point_operations: forward + backward = 3x forward, "
                   "causal attention counted as executed (half of 4*b*s^2*h_q); hardware FLOPs add "
                   "the recomputed forward")


def attention_core_fwd_flop(model: ModelSpec, batch, seq_len, causal: bool = False):
    """QK^T and attention-times-V: 4*b*s^2*h_q, half of it with `causal` (module docstring)."""
    full = 4.0 * np.asarray(batch, dtype=np.float64) * seq_len * seq_len * model.q_hidden_size
    return full * 0.5 if causal else full


def lm_head_fwd_flop(model: ModelSpec, tokens):
    return 2.0 * np.asarray(tokens, dtype=np.float64) * model.hidden_size * model.vocab_size


def model_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, causal: bool = False) -> float:
    """Forward + backward model FLOPs of one optimizer step (no recomputation); `causal`: the
    reported convention, else the published figures' (module docstring)."""
    tokens = global_batch_size * seq_len
    layer = layer_gemm_fwd_flop(model, tokens) + attention_core_fwd_flop(model, global_batch_size, seq_len, causal)
    return float(3 * (model.num_layers * layer + lm_head_fwd_flop(model, tokens)))


def hardware_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, recompute,
                           causal: bool = False) -> np.ndarray:
    """Model FLOPs plus the recomputed forward (recompute: RECOMPUTE_CODES array or int)."""
    tokens = global_batch_size * seq_len
    core = attention_core_fwd_flop(model, global_batch_size, seq_len, causal)
    full = layer_gemm_fwd_flop(model, tokens) + core
    rc = np.asarray(recompute)
    extra = np.where(rc == 2, full, np.where(rc == 1, core, 0.0)) * model.num_layers
    return model_flop_per_step(model, global_batch_size, seq_len, causal) + extra


def reported_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, recompute) -> tuple[float, float]:
    """(model, hardware) FLOPs of one step in the reported convention (FLOP_CONVENTION): the one
    place MFU and TFLOP/s take their FLOPs from (`job.throughput`, the joint placement's plan)."""
    return (model_flop_per_step(model, global_batch_size, seq_len, causal=True),
            float(hardware_flop_per_step(model, global_batch_size, seq_len, recompute, causal=True)))


def megatron_eq3_flop(model: ModelSpec, global_batch_size: int, seq_len: int) -> float:
    """Narayanan et al. 2021 Eq. (3), as printed (GPT with f=4h, MHA, full recompute)."""
    B, s, l, h, V = global_batch_size, seq_len, model.num_layers, model.hidden_size, model.vocab_size
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
