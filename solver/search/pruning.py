"""Bounds that let the search drop shapes before building a model (docs/DESIGN.md section 4).

Both bounds hold for every layer split (layers >= 1 per stage, summing to L):
- memory: some stage holds at least ceil(L/p) layers, and every stage keeps at least one
  micro-batch in flight, so max_i mem_i >= ceil(L/p)*(static + act) + const; the first stage
  holds >= 1 layer plus the embedding with mu_0 micro-batches in flight; the last stage
  >= 1 layer plus the LM head and logits.
- time: with S = sum_i slot_i (fixed by the shape: sum of layers is L), max_i slot_i >= S/p,
  so T_pipe >= (m - 1/v)*max(S/p, ceil(L/p)*layer + v*boundary) + S/v; the step tail max_i e_i is at least its mean, and
  sum_i max(0, D_i - W_i) >= max(0, sum_i D_i - sum_i W_i), so
  max_i e_i >= (max(0, sum D - sum W) + sum O) / p.
"""

from __future__ import annotations

import numpy as np

from ..formulation.coefficients import StageCoefficients
from ..formulation.pipeline import inflight_microbatches, pipeline_s


def memory_lower_bound_bytes(co: StageCoefficients, num_layers: int) -> np.ndarray:
    p = co.pp.astype(np.float64)
    m = co.num_microbatches
    heavy = np.ceil(num_layers / p)
    mu_last = inflight_microbatches(co.pp, co.vp, m, co.pp - 1)
    mu_first = inflight_microbatches(co.pp, co.vp, m, 0)
    static = co.layer_static_bytes
    bound_avg = heavy * (static + co.layer_act_bytes * mu_last) + co.const_bytes
    bound_first = static + co.layer_act_bytes * mu_first + co.first_static_bytes + co.first_act_bytes * mu_first + co.const_bytes
    bound_last = static + co.layer_act_bytes * mu_last + co.last_static_bytes + co.last_act_bytes + co.const_bytes
    single = co.pp == 1
    bound_first = np.where(single, bound_first + co.last_static_bytes + co.last_act_bytes + (num_layers - 1) * (static + co.layer_act_bytes * mu_first), bound_first)
    allocated = np.maximum(bound_avg, np.maximum(bound_first, bound_last))
    return allocated * (1.0 + co.fragmentation) + co.runtime_bytes


def time_lower_bound_s(co: StageCoefficients, num_layers: int, max_slot_lb_s=None) -> np.ndarray:
    """Valid for every split; `max_slot_lb_s` (per shape) may tighten the largest-slot term,
    e.g. with the memory-aware water-filling bound of `formulation.splits.min_max_slot_s`."""
    p = co.pp.astype(np.float64)
    v = co.vp.astype(np.float64)
    m = co.num_microbatches.astype(np.float64)
    total = num_layers * co.layer_s + co.first_s + co.last_s + p * v * co.boundary_s
    # the slowest slot is at least the mean, and at least a stage holding ceil(L/p) layers
    heaviest = np.maximum(total / p, np.ceil(num_layers / p) * co.layer_s + v * co.boundary_s)
    if max_slot_lb_s is not None:
        heaviest = np.maximum(heaviest, max_slot_lb_s)
    return pipeline_s(heaviest, total, m, v) + tail_lower_bound_s(co, num_layers)


def tail_lower_bound_s(co: StageCoefficients, num_layers: int) -> np.ndarray:
    """The step tail max_i e_i (exposed data-parallel reduction + optimizer step) of every split:
    at least its mean, and sum_i max(0, D_i - W_i) >= max(0, sum D - sum W)."""
    dp_sum = num_layers * co.layer_dp_step_s + co.first_dp_step_s + co.last_dp_step_s
    window = num_layers * co.layer_window_s + co.first_window_s + co.last_window_s
    opt_sum = num_layers * co.layer_optimizer_step_s + co.first_optimizer_step_s + co.last_optimizer_step_s
    return (np.maximum(0.0, dp_sum - window) + opt_sum) / co.pp.astype(np.float64)
