"""Megatron-LM's fine-grained activation offloading (`--fine-grained-activation-offloading --offload-modules ...`,
the job's `offload_modules`; rules in specs/offloading.py): what each module takes off the GPU, what its copies
cost, per layer and micro-batch on one GPU (vectorised over shapes).

Mechanism (megatron/core/pipeline_parallel/fine_grained_activation_offload.py at d98e8a6): the tensors a module
saves for its backward inside the offload context (of at least `min_offloaded_tensor_size` elements, 1M by default:
each tensor below that passes, `_large`; a module's small tensors such as softmax statistics stay) form one group; when the module's
forward ends, a device-to-host stream waits for the compute stream and copies the group to pinned host memory
(`on_group_commit_forward`), the GPU copy freed once the copy ends; when the backward of the following group
starts, a host-to-device stream reloads it (`on_group_start_backward` -> `bulk_reload`), and the module's backward
waits for that reload (`on_group_commit_backward`). The last group of each module name is kept on the GPU so that
its reload cannot stall the backward (`post_warmup_callback`, the offload margin).

What a module saves, per token of the rank (Korthikanti et al. 2022 Table 2 as `memory.layer_activation_bytes`
and `moe.moe_mlp_activation_bytes` count it; `lib` the saved linear-input bytes, 1 under FP8, 2 in BF16):
- attn_norm: the separate attention norm's input (multi-latent attention), 2h (over the SP degree);
- qkv_linear: the QKV linear's input, `lib` h, and with the norm fused into it (Transformer Engine's
  LayerNormLinear, every attention but MLA) the norm's input, 2h; MLA's down projections read the separate
  norm's output, freed already by the "layernorm" recomputation when it runs;
- core_attn: Q, K and V, 2 (h_q + 2 h_kv) / tp, unless MLA's "mla_up_proj" recomputation frees them (they are
  copied either way); the output the fused kernel saves (2 h_q / tp) is copied too, but it is the storage of
  attn_proj's input and is freed only when attn_proj is offloaded;
- attn_proj: the output projection's input, `lib` h_q / tp;
- mlp_norm: the separate pre-MLP norm's input (MoE layers), 2h;
- expert_fc1: the experts' fc1 input per routed copy, `lib` w; under an FP8 recipe without block scales in
  hardware (delayed, tensorwise, blockwise) Megatron saves fc1's original BF16 input instead, so that 2 w are
  copied (experts.py:278-284, `set_save_original_input`);
- moe_act: the activation's input, fc1's output, 2 (2|1) f_e / etp per copy;
- fused_group_mlp: the whole fused grouped MLP's: fc1's input, the activation's input and fc2's input (the
  activation's output, unless "moe_act" recomputation rebuilds it: then it is never saved, so neither kept nor
  copied; Megatron-Bridge's Nemotron 3 Ultra recipe: "FC1 output (activation input) is saved and offloaded").
Nothing is saved under full recomputation (a layer is rebuilt whole in the backward): nothing is offloaded.

Time. A layer's copies run on their own streams beside the compute, in each direction at the GPU's
`host_link_gbyte_per_s` (the two directions at once: the forward of one micro-batch beside the backward of
another); the copies of one layer that take longer than that layer's own forward (device to host) or backward
(host to device) are the stall: the queued copies hold memory the estimate counts as freed, and the backward
waits for a reload that has not ended. No parameter is fitted.

Memory. The freed bytes leave every layer's stored activations; the stage's working set gains two layers'
worth: the offload margin's group, and the group whose copy is in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .memory import BF16_BYTES
from .moe import routed_tokens
from .recompute import separate_norms

# the recipes whose expert fc1 offload copies the saved (quantised) input; every other copies the original BF16
# input (Megatron experts.py:278-284: `if self.offload_expert_fc1 and not (use_mxfp8 or use_nvfp4)`)
SAVED_INPUT_FC1_RECIPES = ("mxfp8", "nvfp4")
MARGIN_LAYERS = 2  # the offload margin's group and the one in flight (module docstring)


@dataclass(frozen=True)
class Offloaded:
    """Bytes of one layer per micro-batch on one GPU: freed from the GPU, and copied each way."""

    freed: np.ndarray | float = 0.0
    copied: np.ndarray | float = 0.0

    def __add__(self, other: Offloaded) -> Offloaded:
        return Offloaded(self.freed + other.freed, self.copied + other.copied)


def _selective(T, module: str) -> np.ndarray:
    """Where recomputation module `module` runs (recompute selective with it among the job's modules)."""
    return (T.rc == 1) & (module in T.mods)


def _large(T, elements, element_bytes: float):
    """The bytes of a saved tensor of `elements` elements, `element_bytes` each, where it has at least the job's
    min_offloaded_tensor_size elements (Megatron offloads no smaller tensor: `tensor.numel() <
    self.min_offloaded_tensor_size`, fine_grained_activation_offload.py:1084), else 0."""
    elements = np.asarray(elements, dtype=np.float64)
    return np.where(elements >= T.min_offloaded_elements, element_bytes * elements, 0.0)


def attention_offloaded(T) -> Offloaded:
    """The attention modules' bytes of one layer (module docstring); `T` the `coefficients._StageTerms`."""
    mods, model = T.offload_modules, T.model
    if not mods:  # every plan without offloading passes here: nothing to compute
        return Offloaded()
    per_h = T.M * T.h / T.rep
    lib = T.act_kw["linear_input_bytes"]
    mla = bool(model.multi_latent_attention)
    out = Offloaded()
    if "attn_norm" in mods and separate_norms(model, moe_layer=False):
        norm = _large(T, per_h, BF16_BYTES)
        out += Offloaded(norm, norm)
    if "qkv_linear" in mods:
        norm_in = 0.0 if mla else _large(T, per_h, BF16_BYTES)  # the fused norm's input
        linear_in = _large(T, per_h, lib)
        kept = np.where(mla & _selective(T, "layernorm"), 0.0, linear_in)
        out += Offloaded(norm_in + kept, norm_in + linear_in)
    if "core_attn" in mods:
        q, k_v, o = (_large(T, T.M * width / T.t, BF16_BYTES) for width in (T.hq, T.hkv, T.hq))
        freed = np.where(mla & _selective(T, "mla_up_proj"), 0.0, q + 2 * k_v)
        out += Offloaded(freed, q + 2 * k_v + o)
    if "attn_proj" in mods:
        proj = _large(T, T.M * T.hq / T.t, lib)
        out += Offloaded(proj, proj)
    return out


def expert_offloaded(T, ep, etp) -> Offloaded:
    """The MoE block's modules' bytes of one MoE layer at (ep, etp) (module docstring)."""
    mods, model = T.offload_modules, T.model
    if not mods & {"mlp_norm", "expert_fc1", "moe_act", "fused_group_mlp"}:
        return Offloaded()
    _, copies = routed_tokens(model, T.M / T.t, ep, etp, T.moe_load_imbalance)
    lib = T.act_kw["linear_input_bytes"]
    w, f_l = model.moe_expert_width, model.moe_ffn_hidden_size / np.asarray(etp, dtype=np.float64)
    fc1_in = _large(T, copies * w, lib)
    act_in = _large(T, (model.mlp_matrices - 1) * f_l * copies, BF16_BYTES)
    fc2_in = _large(T, copies * f_l, lib)
    out = Offloaded()
    if "mlp_norm" in mods:
        norm = _large(T, T.M * T.h / T.rep, BF16_BYTES)
        out += Offloaded(norm, norm)
    if "expert_fc1" in mods:
        sent = fc1_in if T.precision in SAVED_INPUT_FC1_RECIPES else _large(T, copies * w, BF16_BYTES)
        out += Offloaded(fc1_in, sent)
    if "moe_act" in mods:
        out += Offloaded(act_in, act_in)
    if "fused_group_mlp" in mods:
        saved = fc1_in + act_in + np.where(_selective(T, "moe_act"), 0.0, fc2_in)  # a recomputed output is not saved
        out += Offloaded(saved, saved)
    return out


def stall_s(copied, fwd_s, bwd_s, host_bytes_per_s: float):
    """Seconds per layer and micro-batch the copies add (module docstring): what the copy each way takes
    beyond the layer's own forward (device to host) and backward (host to device)."""
    copy_s = np.asarray(copied, dtype=np.float64) / host_bytes_per_s
    return np.maximum(0.0, copy_s - fwd_s) + np.maximum(0.0, copy_s - bwd_s)


def with_fine_offload(T, layer: dict, off: Offloaded) -> dict:
    """`layer` (the per-layer terms of `coefficients._StageTerms.per_layer_and_ends`) with `off` offloaded: its
    stored activations less the freed bytes, its working set two layers' freed bytes more, the stall (`offload`,
    seconds per micro-batch) and the bytes held in pinned host memory (`host`, the copies). Nothing under full
    recomputation; zeros without offloading."""
    zeros = np.zeros(len(T.z))
    if not T.offload_modules:
        return {**layer, "offload": zeros, "host": zeros}
    full = T.rc == 2
    freed = np.where(full, 0.0, off.freed)
    copied = np.where(full, 0.0, off.copied)
    return {**layer, "act": layer["act"] - freed, "working": layer["working"] + MARGIN_LAYERS * freed,
            "offload": zeros + stall_s(copied, layer["fwd"], layer["bwd"], T.host_bytes_per_s), "host": zeros + copied}
