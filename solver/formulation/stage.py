"""The stage coefficients' type: per shape, every cost of a pipeline stage linear in the layers it holds
(docs/DESIGN.md section 3), as `coefficients.stage_coefficients` computes them and the evaluation, the CP-SAT
encoding and the baselines read them."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


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
    layer_ep_s: np.ndarray  # exposed expert-parallel all-to-alls (MoE layers; 0 for a dense model)
    layer_offload_s: np.ndarray  # exposed activation offloading copies (fine_offload.py, offload.py)
    # activations offloaded to pinned host memory, per in-flight micro-batch (not GPU memory): per layer, and the
    # first / last stage's extras (a MoE model's leading dense layers, the MTP block)
    layer_host_bytes: np.ndarray
    first_host_bytes: np.ndarray
    last_host_bytes: np.ndarray

    @property
    def layer_s(self) -> np.ndarray:
        return (self.layer_compute_s + self.layer_tp_s + self.layer_cp_s + self.layer_zero3_s + self.layer_ep_s
                + self.layer_offload_s)

    @property
    def layer_static_bytes(self) -> np.ndarray:
        return self.layer_params_bytes + self.layer_grads_bytes + self.layer_optimizer_bytes

    def take(self, idx) -> StageCoefficients:
        idx = np.atleast_1d(idx)
        vals = {f.name: getattr(self, f.name) for f in fields(self)}
        return StageCoefficients(**{k: v[idx] if isinstance(v, np.ndarray) else v for k, v in vals.items()})
