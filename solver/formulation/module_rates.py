"""What a job's per-module precision (specs/module_precision.py: Megatron's --te-precision-config-file) changes
in a layer's terms: the GEMM rate, the input quantisation and the saved inputs of the linears of one role, each
at the role's precision (`precision.matmul_rate`, `quantize_bytes_per_element`, `saved_linear_input_bytes`: the
same table as the job's recipe). A role no rule moves -- every role of a job without rules -- gets the job's own
rate object (`T.mm`), so such a job is priced exactly as before."""

from __future__ import annotations

import numpy as np

from ..specs.module_precision import role_precisions
from .precision import matmul_rate, quantize_bytes_per_element, saved_linear_input_bytes


def roles_of(model, options: dict) -> dict[str, str]:
    """The job's role -> precision map (`specs.module_precision.role_precisions`); {} without rules."""
    return role_precisions(options.get("module_precision") or (), model, options["precision"])


def role_precision(T, role: str | None) -> str:
    """The precision the role's linears run at in `T` (`coefficients._StageTerms`); the recipe's for no role."""
    return T.roles.get(role, T.precision) if role else T.precision


def role_rate(T, role: str | None) -> tuple[dict, float]:
    """(GEMM keyword arguments for `kernels.linear_s`, quantisation bytes per GEMM-input element) of the role."""
    precision = role_precision(T, role)
    if precision == T.precision:
        return T.mm, quantize_bytes_per_element(T.precision)
    mm = matmul_rate(T.gpu, precision, T.hbm)
    return ({**mm, "weight_grad": False} if T.lora else mm), quantize_bytes_per_element(precision)


def saved_bytes_delta(T, role: str | None) -> float:
    """Bytes per element the role's saved linear inputs take beyond the job recipe's."""
    return saved_linear_input_bytes(role_precision(T, role)) - saved_linear_input_bytes(T.precision)


def saved_input_bytes(T, role: str | None) -> float:
    """Bytes per element of the role's saved linear inputs: the recipe's (`T.act_kw`) plus `saved_bytes_delta`."""
    return T.act_kw["linear_input_bytes"] + saved_bytes_delta(T, role)


def dense_layer_act_delta(T):
    """(stored, working) bytes a dense layer's saved linear inputs add under the roles' precisions (the four inputs
    `memory.layer_activation_bytes` counts: QKV's and fc1's h, replicated unless SP, the projection's h_q/tp and
    fc2's f/tp): kept unless full recomputation, then in the working set of the layer rebuilt."""
    mlp = saved_bytes_delta(T, "mlp")
    extra = attention_act_delta(T) + (T.M * mlp * (T.h / T.rep + T.f / T.t) if mlp else 0.0)
    return np.where(T.rc == 2, 0.0, extra), np.where(T.rc == 2, extra, 0.0)


def attention_act_delta(T):
    """Bytes a MoE layer's attention's saved QKV and projection inputs (h, replicated unless SP, and h_q/tp per
    token) add under the attention role's precision (the MoE block's own count is the recipe's)."""
    delta = saved_bytes_delta(T, "attention")
    return T.M * delta * (T.h / T.rep + T.hq / T.t) if delta else 0.0


def latent_act_delta(T):
    """Bytes LatentMoE's saved fc2_latent_proj input (l per token of the rank: `moe.moe_mlp_activation_bytes`)
    adds under the latent_proj role's precision."""
    delta = saved_bytes_delta(T, "latent_proj")
    return T.M / T.t * (T.model.moe_latent_size or 0) * delta if delta else 0.0
