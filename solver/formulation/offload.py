"""Megatron-LM's layer-level CPU activation offloading (`--cpu-offloading-num-layers N`): what it takes off
the GPU and what its copies cost, vectorised over shapes.

Source. Megatron-LM d98e8a6: megatron/training/arguments.py:1950 (N > 0 sets `cpu_offloading`),
megatron/core/model_parallel_config.py:458-480 (defaults: `cpu_offloading_activations` True,
`cpu_offloading_weights` False: activations only), megatron/core/transformer/transformer_block.py:304-318 and
:714 and :737-742 (the block enters Transformer Engine's offload context around every layer's forward and passes the layer
output through its synchronisation function). Transformer Engine d0067d0 (the refactored offloading, TE >= 2.10),
transformer_engine/pytorch/cpu_offload.py:
- `DefaultOffloadSynchronizer._init_offload_synchronization_dicts` (:602-626): layers 0 .. N-1 of the L are
  offloaded; layer i's copy to the host is issued when layer i+1's forward starts (`fwd_step`, :628-638) on one
  side stream, and the compute stream waits for it to end before layer L-N+i's forward (`finish_offload_map`:
  `release_activation_forward_gpu_memory` waits on the copy's event, :314-329); its copy back is issued before the
  backward of layer L-1-N+i (`start_reload_map`, `bwd_step` :640-647, called from a pre-hook on the layer output's
  gradient, :921-928) on the same stream, and layer i's backward waits for it (`pop_tensor`).
- memory: "peak memory usage of saving activations is (num_layers - num_offloaded_layers) * T" (:612-614).
  Transformer Engine before 2.10 (cpu_offload_v1.py, `AsyncDoubleBufferGroupOffloadHandler`) spreads the N
  copies over windows of L/N layers and frees a layer at its window's end, so one offloaded layer more can still
  be on the GPU: the stage keeps `resident_layers` = L - N + IN_FLIGHT_LAYERS layers' saved activations, an
  upper bound under both.
- what is copied: every saved tensor of at least 256k elements that is not a parameter (`_check_if_offload`,
  :454-475): the layer's saved activations (memory.layer_activation_bytes; the small ones are a rounding error).

Time. `exposed_offload_s` runs that schedule, layer by layer, for one micro-batch: the copies of N layers
(`bytes / host bandwidth` each, the GPU's `host_link_gbyte_per_s`: NVLink-C2C on Grace superchips, PCIe on x86
hosts) queue on the side stream behind the forward (device to host) and the backward (host to device); the
compute stream stalls only where a copy has not ended when a layer must wait for it. What the stall adds to the
micro-batch is the exposed part; a link fast enough to hide each copy behind the layers in between adds nothing.
No parameter is fitted. Megatron needs pp 1 and no recomputation with offloading (specs.job.SETTING_RULES),
so the one stage holds all L layers and the per-layer terms below are exact for it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

# Transformer Engine < 2.10 can hold one offloaded layer more than the refactored synchroniser (docstring)
IN_FLIGHT_LAYERS = 1


def resident_layers(num_layers: int, offloaded: int) -> int:
    """Layers' worth of saved activations the GPU holds with `offloaded` of `num_layers` layers offloaded
    (module docstring: TE's (L - N) T, plus IN_FLIGHT_LAYERS for its pre-2.10 windowed handler)."""
    if offloaded <= 0:
        return num_layers
    return min(num_layers, num_layers - offloaded + IN_FLIGHT_LAYERS)


def _forward_stall_s(fwd_s, copy_s, L: int, N: int):
    """Forward of one micro-batch under TE's schedule minus L x fwd_s: layer k-1's copy is queued when
    layer k starts (k = 1 .. N), and layer k = L-N+i waits for copy i to end (cpu_offload.py:602-638)."""
    t = np.zeros_like(fwd_s)  # start of layer k on the compute stream
    free = np.zeros_like(fwd_s)  # the side stream's queue: when its last copy ends
    stall = np.zeros_like(fwd_s)
    ends = []
    for k in range(L):
        if 1 <= k <= N:  # fwd_step(k): start_offload(k - 1)
            free = np.maximum(t, free) + copy_s
            ends.append(free)
        i = k - (L - N)
        if 0 <= i < N:  # finish_offload_map[k]: release_activation_forward_gpu_memory(i) waits for the copy
            wait = np.maximum(ends[i] - t, 0.0)
            stall, t = stall + wait, t + wait
        t = t + fwd_s
    return stall


def _backward_stall_s(bwd_s, copy_s, L: int, N: int):
    """Backward of one micro-batch under TE's schedule minus L x bwd_s: layer i's copy back is queued
    before the backward of layer L-1-N+i, and layer i's backward waits for it (cpu_offload.py:640-647)."""
    t = np.zeros_like(bwd_s)
    free = np.zeros_like(bwd_s)
    stall = np.zeros_like(bwd_s)
    ends: dict[int, np.ndarray] = {}
    for k in range(L - 1, -1, -1):
        i = k - (L - 1 - N)
        if 0 <= i < N:  # start_reload_map[k]: start_reload(i)
            free = np.maximum(t, free) + copy_s
            ends[i] = free
        if k < N:  # pop_tensor: the layer's saved tensors must be back
            wait = np.maximum(ends[k] - t, 0.0)
            stall, t = stall + wait, t + wait
        t = t + bwd_s
    return stall


def exposed_offload_s(fwd_s, bwd_s, offloaded_bytes, host_bytes_per_s: float, num_layers: int, offloaded: int):
    """Seconds per micro-batch the offloading copies add to the compute stream (forward + backward), for
    layers of `fwd_s` / `bwd_s` seconds whose saved activations are `offloaded_bytes` each, copied at
    `host_bytes_per_s` per direction (module docstring)."""
    fwd_s, bwd_s = np.asarray(fwd_s, dtype=np.float64), np.asarray(bwd_s, dtype=np.float64)
    if offloaded <= 0:
        return np.zeros_like(fwd_s)
    copy_s = np.asarray(offloaded_bytes, dtype=np.float64) / host_bytes_per_s
    return (_forward_stall_s(fwd_s, copy_s, num_layers, offloaded)
            + _backward_stall_s(bwd_s, copy_s, num_layers, offloaded))


def with_offload(co, num_layers: int, offloaded: int, host_gbyte_per_s: float | None):
    """Stage coefficients `co` (coefficients.StageCoefficients of a dense model) with `offloaded` of its
    `num_layers` layers offloaded: the per-layer saved activations scaled to `resident_layers` of the stage
    (all the layers: pp 1), the exposed copies spread over the layers (`layer_offload_s`, seconds per layer
    per micro-batch) and what the host holds (`layer_host_bytes`: the N layers' activations, spread the same way).
    Unchanged without offloading."""
    if offloaded <= 0 or host_gbyte_per_s is None:
        return co
    act = np.asarray(co.layer_act_bytes, dtype=np.float64)
    exposed = exposed_offload_s(co.layer_fwd_s, co.layer_bwd_s, act, host_gbyte_per_s * 1e9, num_layers, offloaded)
    kept = act * resident_layers(num_layers, offloaded) / num_layers
    return replace(co, layer_act_bytes=kept, layer_offload_s=co.layer_offload_s + exposed / num_layers,
                   layer_host_bytes=co.layer_host_bytes + act * offloaded / num_layers)
