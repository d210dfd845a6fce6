"""A hybrid model's multi-token prediction (MTP) block on the last pipeline stage (Nemotron 3 Super;
NVIDIA/Megatron-LM at d98e8a6, megatron/core/transformer/multi_token_prediction.py and
megatron/core/models/hybrid/hybrid_model.py).

Where: `HybridModel` builds the block only where `mtp_on_this_rank` holds, "forces MTP to be on the
final pipeline stage" (hybrid_model.py ~219-231), after the decoder and beside the output layer,
so every term here is added to the last stage's ends (`coefficients._StageTerms.per_layer_and_ends`'
`last_*`), linear in nothing a split changes: each split searched stays exactly priced.

What one depth runs, forward (`MultiTokenPredictionLayer`, multi_token_prediction.py):
- `enorm` of the (shifted) token embedding and `hnorm` of the previous depth's hidden states, two
  norms (~1157-1168, `_concat_embeddings` ~1331-1337): two norm passes (`hybrid._norm_s`);
- `eh_proj`, a TEColumnParallelLinear 2h -> h without bias (~1174-1187): a GEMM of M x h/tp x 2h;
  its output all-gathered over TP (`gather_from_tensor_model_parallel_region`, ~1353; backward
  splits), with sequence parallelism its 2h input all-gathered first (backward reduce-scatter)
  and the output scattered after (~1358; backward all-gather of h) (`eh_proj_tp_s`);
- the HybridStack of `mtp_hybrid_layer_pattern`'s layers (~1199-1213), each priced by kind as the
  decoder's (`hybrid.pattern_layers`: attention, MLP, MoE with its all-to-all, Mamba);
- `final_layernorm` and the shared output layer with its cross-entropy (`_postprocess` ~1433-1441,
  hybrid_model.py `process_mtp_loss`): a second LM-head pass (`_StageTerms.head_fwd/head_bwd`) and its
  logits.
Backward likewise. The depths run one after another (`MultiTokenPredictionBlock.forward`), so time
and activations scale with mtp_num_layers (`MultiTokenPredictionBlock.forward` ~2048 loops over them); the weights, their gradients, optimizer state, data-
parallel reduction and optimizer step scale with the depths that own weights (`mtp_weight_copies`:
one with mtp_use_repeated_layer, multi_token_prediction.py ~1960-1968). Activations kept per depth:
the layers' (as the decoder's), the three norms' inputs and the head's input (BF16, h each), eh_proj's
saved input (2h at the recipe's linear-input bytes), and the logits (`memory.LOGIT_BYTES`), counted
once as the last stage's own logits are. Under full recomputation the layers keep their inputs only
(as in the decoder); the rest is left as stored.

Not modelled: Megatron-Bridge's `keep_mtp_spec_in_bf16` (declared by HybridModelProvider at 067f987
but read by neither Bridge's src nor Megatron-LM d98e8a6) and Megatron's own "ignoring FP4 in MTP
layers" (~1394: the block runs FP8 or BF16 under an NVFP4 recipe): the block is priced at the job's
precision."""

from __future__ import annotations

import numpy as np

from . import comm
from .hybrid import _norm_s, pattern_layers, summed
from .kernels import linear_s
from .memory import BF16_BYTES, LOGIT_BYTES
from .moe_layer import LAYER_TIME_KEYS


def eh_proj_tp_s(T):
    """(forward, backward) TP collectives of one depth's eh_proj (module docstring): an all-gather of
    the h-wide output forward; with sequence parallelism also the 2h input's all-gather forward and
    its reduce-scatter backward, and the scatter's backward all-gather of h."""
    msg = T.act_msg  # b x s/cp x h in BF16, the full buffer
    ag_h = comm.collective_s("all_gather", msg, T.cluster, T.t, 1)
    sp = np.asarray(T.rep) > 1
    fwd = ag_h + np.where(sp, comm.collective_s("all_gather", 2 * msg, T.cluster, T.t, 1), 0.0)
    bwd = np.where(sp, comm.collective_s("reduce_scatter", 2 * msg, T.cluster, T.t, 1) + ag_h, 0.0)
    return fwd, bwd


def mtp_depth(T) -> tuple[dict, dict]:
    """(the terms of one depth's layers, `hybrid.summed`; the rest of the depth: forward and backward
    seconds, weights per GPU, stored activation bytes) on one GPU per micro-batch (module docstring)."""
    model, M, h, t = T.model, T.M, T.h, T.t
    assert model.mtp_hybrid_layer_pattern is not None
    layers = summed(T, pattern_layers(T, model.mtp_hybrid_layer_pattern))
    proj_f, proj_b = linear_s(M, h / t, 2 * h, **T.mm)
    nf, nb = _norm_s(T)
    tp_f, tp_b = eh_proj_tp_s(T)
    rest = dict(fwd=proj_f + 2 * nf + tp_f + T.head_fwd, bwd=proj_b + 2 * nb + tp_b + T.head_bwd,
                params=2 * h * h / t + 3 * model.norm_params,
                act=M * h / T.rep * (4 * BF16_BYTES + 2 * T.act_kw["linear_input_bytes"]) + LOGIT_BYTES * M * T.V / t)
    return layers, rest


def with_mtp(T, unit: dict, ends: dict) -> tuple[dict, dict]:
    """The pipeline unit and the stage ends with a hybrid model's MTP block added to the last stage
    (module docstring): n = mtp_num_layers depths of time, activations and compute windows; c =
    `mtp_weight_copies` of weights, gradients, optimizer state, DP reduction and optimizer step. A
    layer kind the decoder lacks widens every stage's working set to the MTP layers' (an
    over-count off the last stage, none when the decoder has every MTP kind, as Nemotron 3 Super)."""
    model = T.model
    n, c = model.mtp_num_layers, model.mtp_weight_copies
    if not n:
        return unit, ends
    layers, rest = mtp_depth(T)
    unit = {**unit, "working": np.maximum(unit["working"], layers["working"])}
    ends = dict(ends)

    def add(key, value):
        ends[key] = ends[key] + value

    add("last_s", n * (sum(layers[k] for k in LAYER_TIME_KEYS) + rest["fwd"] + rest["bwd"]))
    add("last_bwd_s", n * (layers["bwd"] + rest["bwd"]))
    add("last_window_s", n * (layers["window"] + T.window(rest["fwd"], rest["bwd"])))
    red, ag = T.dp_step(rest["params"])
    add("last_dp_step_s", c * (layers["dp_step"] + red + ag))
    add("last_optimizer_step_s", c * (layers["opt"] + rest["params"] * T.opt_per_param))
    add("last_static_bytes", c * (layers["params"] + layers["grads"] + layers["optim"] + rest["params"] * T.state))
    add("last_act_bytes", n * (layers["act"] + rest["act"]))
    return unit, ends
