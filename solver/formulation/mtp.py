"""Multi-token prediction (MTP): one pricing of an MTP depth on the last pipeline stage for both model
kinds that have one, a Transformer model (DeepSeek-V3, Kimi K2: `mtp_num_layers` depths of one
TransformerLayer) and a hybrid model (Nemotron 3 Super: depths of `mtp_hybrid_layer_pattern`'s layers).
Both are Megatron-LM's `MultiTokenPredictionBlock` of `MultiTokenPredictionLayer`s (NVIDIA/Megatron-LM at
d98e8a6, megatron/core/transformer/multi_token_prediction.py; cited below by line).

Where: `GPTModel` / `HybridModel` build the block only where `mtp_on_this_rank` holds, on the last
pipeline stage (gpt_model.py ~166-252, hybrid_model.py ~219-231; `MultiTokenPredictionBlock` asserts the
last virtual stage, ~1877-1882), after the decoder and beside the output layer, so every term here is
added to the last stage's ends (`coefficients._StageTerms.per_layer_and_ends`' `last_*`), linear in
nothing a split changes: each split searched stays exactly priced.

What one depth runs, forward (`MultiTokenPredictionLayer`):
- `_get_embeddings` (~1254-1329): the shifted token ids through the model's embedding (the
  decoder's own `LanguageModelEmbedding`, gather and dropout; backward its dense table gradient),
  priced as the first stage's (`_StageTerms.emb_fwd` / `emb_bwd`);
- `enorm` of the (shifted) token embedding and `hnorm` of the previous depth's hidden states
  (~1157-1168, `_concat_embeddings` ~1331-1337) and, after the layers, `final_layernorm`
  (`_postprocess` ~1433-1441): three norms without residual adds, priced as two `hybrid._norm_s`
  passes (each one norm and one residual add);
- `eh_proj`, the backend's column-parallel linear (TEColumnParallelLinear, `get_mtp_layer_spec_for_backend`
  ~765-785) 2h -> h without bias, gather_output False (~1174-1187): a GEMM of M x h/tp x 2h, its input's
  quantisation under a quantised recipe; then `gather_from_tensor_model_parallel_region` of its h/tp
  output (~1353; backward a split) and with sequence parallelism `scatter_to_sequence_parallel_region`
  (~1358; backward an all-gather of h). The linear's own collectives (megatron/core/tensor_parallel/
  layers.py ~1144-1146 and `LinearWithGradAccumulationAndAsyncCommunication.backward` ~637-720, as
  Transformer Engine's column-parallel Linear): with sequence parallelism its 2h input all-gathered
  forward and the input gradient reduce-scattered backward, without it the input gradient all-reduced
  backward (`eh_proj_tp_s`);
- the depth's layers: a Transformer model's one TransformerLayer built from the decoder's last layer's
  spec (gpt_layer_specs.py `get_gpt_mtp_block_spec_for_backend` ~765-771: the last layer's kind, dense or
  MoE), a hybrid model's HybridStack of `mtp_hybrid_layer_pattern` (~1199-1213), each layer priced as
  the decoder's (`coefficients._StageTerms.dense_layer` / `moe_layer`, `hybrid.pattern_layers`);
- the shared output layer with its cross-entropy (gpt_model.py / hybrid_model.py `process_mtp_loss`):
  a second LM-head pass (`_StageTerms.head_fwd/head_bwd`, BF16 under every recipe) and its logits.
Backward likewise. The depths run one after another (`MultiTokenPredictionBlock.forward` ~2048 loops over
mtp_num_layers), so time and activations scale with the depths; the weights, their gradients, optimizer
state, data-parallel reduction and optimizer step with the depths that own weights (`mtp_weight_copies`:
one with a hybrid model's mtp_use_repeated_layer, ~1960-1968; a Transformer model builds one layer per
depth, gpt_layer_specs.py ~778-782). Activations kept per depth: the layers' (as the decoder's), the three
norms' inputs and the head's input (BF16, h each), eh_proj's saved input (2h at its linear-input bytes),
and the logits (`memory.LOGIT_BYTES`), counted once as the last stage's own logits are (one micro-batch
in flight under 1F1B; interleaved, the last stage holds more: an under-count there). Under full
recomputation Megatron checkpoints the whole `_proj_and_transformer_layer` of each depth (forward ~1700-1716,
`_checkpointed_forward` ~1492-1653: norms, eh_proj, the layers, final_layernorm): the depth keeps the
region's two inputs and the head's input, its norms, eh_proj and TP gathers run forward again in the
backward, and while it is rebuilt its norms' and eh_proj's inputs are live beside the layers' (the working
set); its layers are priced as the decoder's under full recomputation (each keeps its input, its forward
again in the backward: an over-count of h in BF16 per layer, whose input the region rebuilds).

The embedding's copy (`embedding_copy`): with pp > 1 the last stage keeps its own copy of the word
embedding for the block ("If use Multi-Token Prediction (MTP), we also need to maintain duplicated
embedding weights in mtp process stage", megatron/core/models/common/language_module/language_module.py
~253-290; gpt_model.py / hybrid_model.py build `self.embedding` where `pre_process or mtp_process`), once
however many depths: its weights, gradient and optimizer state, its data-parallel reduction and optimizer
step, and the all-reduce of its gradient with the first stage's (finalize_model_grads.py ~146-250:
`_get_shared_word_embedding_weight` for `mtp_num_layers`), on both stages. A model with tied embeddings
already keeps that copy as its output weight (`data_parallel.reduced_params_per_gpu`): nothing more.

Precision (`precision.mtp_linear_precision`, `_layer_precisions`): `_proj_and_transformer_layer`
(~1384-1402) enters the FP8 recipe's autocast for eh_proj and for the layers only `if self.config.fp8`,
else a nullcontext ("TODO: currently ignoring FP4 in MTP layers", ~1394); an NVFP4 job has `fp8` unset
(transformer_config.py ~1581-1582 refuse fp4 with fp8), and its weights are built under
`get_fp8_context(is_init=True)` (~1927, ~1944), a nullcontext without fp8_param. So under nvfp4:
- eh_proj runs and keeps its weight in BF16 (both model kinds);
- a Transformer model's MTP layer runs in BF16 (GEMMs at the BF16 rate, no casts, BF16 saved inputs,
  BF16 weights without NVFP4 copies, gathered in BF16);
- a hybrid model's layers are not: HybridStack.forward enters `get_fp4_context(config, layer_number - 1)`
  around each of its layers (hybrid_block.py ~339-402) and builds them under the init context
  (~126-131), so they run NVFP4 as the decoder's do, except those `get_fp4_context` keeps in BF16
  (fp4_utils.py ~247-263): with --first-last-layers-bf16, a layer index (0, 1, ... within the depth:
  pp_layer_offset 0, ~1206) below num_layers_at_start_in_bf16 or at least num_layers less
  num_layers_at_end_in_bf16. The same index rule holds for an FP8 recipe's hybrid layers
  (`get_fp8_context(config, layer_number - 1)`, fp8_utils.py `is_first_last_bf16_layer` ~711-727); a
  Transformer model's MTP layer is entered with layer_no -1, never kept in BF16.
Under every other precision nothing changes: the depth is priced at the job's recipe."""

from __future__ import annotations

import numpy as np

from . import comm
from .hybrid import _norm_s, pattern_layers, summed
from .kernels import linear_s
from .memory import BF16_BYTES, LOGIT_BYTES
from .moe_layer import LAYER_TIME_KEYS, moe_layer_of
from .precision import gathered_param_bytes, is_quantized, mtp_linear_precision, quantize_bytes_per_element


def eh_proj_tp_s(T):
    """(forward, backward) TP collectives of one depth's eh_proj (module docstring): forward the all-gather
    of the h-wide output, with sequence parallelism also the 2h input's all-gather; backward with sequence
    parallelism the input gradient's reduce-scatter (2h) and the scatter's all-gather of h, without it the
    input gradient's all-reduce (2h). None at tp 1 (`comm.collective_s` of one rank)."""
    msg = T.act_msg  # b x s/cp x h in BF16, the full buffer
    ag_h = comm.collective_s("all_gather", msg, T.cluster, T.t, 1)
    sp = np.asarray(T.rep) > 1
    fwd = ag_h + np.where(sp, comm.collective_s("all_gather", 2 * msg, T.cluster, T.t, 1), 0.0)
    bwd = np.where(sp, comm.collective_s("reduce_scatter", 2 * msg, T.cluster, T.t, 1) + ag_h,
                   comm.collective_s("all_reduce", 2 * msg, T.cluster, T.t, 1))
    return fwd, bwd


def at_precision(T, precision: str):
    """The same job's `coefficients._StageTerms` with its linear layers at `precision` (no FP8 / FP4 weights
    gathered, no BF16-kept layers): what an MTP part Megatron runs at another precision than the job's
    costs. `T` itself at its own precision (the same job without its per-module rules when it has some); each
    other one computed once per `T`."""
    if precision == T.precision and not T.roles:
        return T
    cache = T.__dict__.setdefault("_mtp_at_precision", {})
    if precision not in cache:  # the MTP block at one precision: no per-module rules (module_precision_problem)
        options = {**T.options, "module_precision": ()} if precision == T.precision else {
            **T.options, "precision": precision, "fp8_param_gather": False, "bf16_layers": (0, 0), "module_precision": ()}
        cache[precision] = type(T)(T.model, T.cluster, T.shapes, options).run_sections()
    return cache[precision]


def _layer_precisions(T) -> list[str]:
    """The precision each layer of one depth runs at (module docstring): a Transformer model's one layer
    at `precision.mtp_linear_precision`; a hybrid model's layer i at the job's recipe unless
    --first-last-layers-bf16 keeps index i in BF16 (i < bf16 layers at start, or i >= num_layers less
    those at end)."""
    model, precision = T.model, T.precision
    if not model.is_hybrid:
        return [_moved(T, mtp_linear_precision(precision))]
    assert model.mtp_hybrid_layer_pattern is not None
    start, end = T.bf16_layers
    kept = [is_quantized(precision) and (i < start or i >= model.num_layers - end)
            for i in range(len(model.mtp_hybrid_layer_pattern))]
    return ["bf16" if k else _moved(T, precision) for k in kept]


def _moved(T, precision: str) -> str:
    """An MTP part's precision under per-module precision (specs/module_precision.py): the mtp role's when the part
    runs quantised (Megatron overrides quantised modules only), else `precision`."""
    return T.roles.get("mtp", precision) if is_quantized(precision) else precision


def depth_layers(T) -> dict:
    """The terms of one depth's layers (`coefficients._StageTerms.per_layer_and_ends`' keys), each at its
    precision (`_layer_precisions`, priced by `at_precision`): a Transformer model's one layer
    of the decoder's last layer's kind, a hybrid model's pattern layers summed (`hybrid.summed`)."""
    model, precisions = T.model, _layer_precisions(T)
    if not model.is_hybrid:
        U = at_precision(T, precisions[0])
        return moe_layer_of(U) if model.is_moe and model.moe_layer_mask[-1] else U.dense_layer()
    pattern = model.mtp_hybrid_layer_pattern
    priced = {p: pattern_layers(at_precision(T, p), pattern) for p in set(precisions)}
    return summed(T, [priced[p][i] for i, p in enumerate(precisions)])


def depth_rest(T) -> dict:
    """The rest of one depth beyond its layers (module docstring): forward and backward seconds, weights
    per GPU and their state bytes per weight, their (reduction, all-gather) per step, stored activation
    bytes. eh_proj at `precision.mtp_linear_precision` (its GEMM, its input's and output gradient's
    quantisation, its saved input, its weight's copies), everything else in BF16."""
    model, M, h, t, hbm = T.model, T.M, T.h, T.t, T.hbm
    E = at_precision(T, _moved(T, mtp_linear_precision(T.precision)))
    cast = quantize_bytes_per_element(E.precision)
    proj_f, proj_b = linear_s(M, h / t, 2 * h, **E.mm)
    proj_f, proj_b = proj_f + cast * M * 2 * h / hbm, proj_b + cast * M * h / t / hbm
    nf, nb = _norm_s(T)
    tp_f, tp_b = eh_proj_tp_s(T)
    params = 2 * h * h / t + 3 * model.norm_params
    red, ag = E.dp_step(params, gathered_param_bytes(E.precision, E.fp8_param_gather))
    full = T.rc == 2  # the checkpointed region: its two inputs and the head's input kept, its forward run again
    region_f = proj_f + 2 * nf + tp_f
    region_act = M * h / T.rep * (3 * BF16_BYTES + 2 * E.act_kw["linear_input_bytes"])  # norms' inputs, eh_proj's
    act = np.where(full, 3 * BF16_BYTES * M * h / T.rep, region_act + BF16_BYTES * M * h / T.rep)
    return dict(fwd=T.emb_fwd + region_f + T.head_fwd, bwd=T.emb_bwd + proj_b + 2 * nb + tp_b + T.head_bwd,
                rfwd=np.where(full, region_f, 0.0), params=params, state=E.state, dp_step=red + ag,
                act=act + LOGIT_BYTES * M * T.V / t, working=np.where(full, region_act, 0.0))


def embedding_copy(T) -> dict:
    """The last stage's copy of the word embedding for the MTP block (module docstring): with pp > 1 and
    untied embeddings, its state bytes, (DP reduction + all-gather + the embedding group's all-reduce)
    per step and optimizer step on the last stage, the all-reduce on the first; else nothing."""
    copy = np.where((np.asarray(T.p) > 1) & (not T.model.tied_embeddings), 1.0, 0.0)
    emb = T.emb_params_gpu
    return dict(static=copy * emb * T.edge_state, dp_step=copy * (T.emb_red + T.emb_ag + T.embedding_ar),
                opt=copy * emb * T.opt_per_param, first_dp_step=copy * T.embedding_ar)


def with_mtp(T, unit: dict, ends: dict) -> tuple[dict, dict]:
    """The pipeline unit and the stage ends with the model's MTP block added to the last stage (module
    docstring): n = mtp_num_layers depths of time, activations and compute windows; c =
    `mtp_weight_copies` of weights, gradients, optimizer state, DP reduction and optimizer step; the
    embedding's copy once (`embedding_copy`). A depth whose working set exceeds the decoder's (a layer
    kind the decoder lacks, a BF16 layer under a quantised recipe, the rebuilt region under full
    recomputation) widens every stage's working set to it (an over-count off the last stage)."""
    model = T.model
    n, c = model.mtp_num_layers, model.mtp_weight_copies
    if not n:
        return unit, ends
    layers, rest = depth_layers(T), depth_rest(T)
    unit = {**unit, "working": np.maximum(unit["working"], layers["working"] + rest["working"])}
    ends = dict(ends)

    def add(key, value):
        ends[key] = ends[key] + value

    add("last_s", n * (sum(layers[k] for k in LAYER_TIME_KEYS) + rest["fwd"] + rest["bwd"] + rest["rfwd"]))
    add("last_bwd_s", n * (layers["bwd"] + rest["bwd"]))
    add("last_window_s", n * (layers["window"] + T.window(rest["fwd"], rest["bwd"])))
    add("last_dp_step_s", c * (layers["dp_step"] + rest["dp_step"]))
    add("last_optimizer_step_s", c * (layers["opt"] + rest["params"] * T.opt_per_param))
    add("last_static_bytes", c * (layers["params"] + layers["grads"] + layers["optim"] + rest["params"] * rest["state"]))
    add("last_act_bytes", n * (layers["act"] + rest["act"]))
    add("last_host_bytes", n * layers["host"])
    copy = embedding_copy(T)
    add("last_static_bytes", copy["static"])
    add("last_dp_step_s", copy["dp_step"])
    add("last_optimizer_step_s", copy["opt"])
    add("first_dp_step_s", copy["first_dp_step"])
    return unit, ends
