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
  GEMM efficiency the formulation itself assumes (issue 24). Layers with a sliding window count
  the band their kernel computes, for the same reason (Megatron-LM counts them whole).
- `causal=False`, the full `4bs^2h` of Narayanan et al. 2021 Eq. (3) and of the published MFU
  figures (Megatron-LM 2020-2023, MosaicML's llm-foundry benchmarks): used only to read those
  figures back into step times (`calibration/rows.py`) and to check Eq. (3). For GPT (MHA,
  f=4h) the hardware FLOPs with full recompute then equal Eq. (3):
  96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)).

Mixture of experts (Megatron-LM megatron/training/training.py `num_floating_point_operations`,
`moe_layer_flops`): an MoE layer's MLP costs the top-k routed experts and the shared experts,
`2*T*h*(2|3)*(k*f_e + f_s)`, plus the router `2*T*h*E`; only active parameters count. Multi-latent
attention (DeepSeek-V2 Sec. 2.1): the GEMMs of its projections, 2 FLOPs per weight and token
(`ModelSpec.attention_params` without the two latent norms), and a core of QK^T at
d_qk = d_nope + d_rope and PV at d_v: `2*b*s^2*a*(d_qk + d_v)` (= 4*b*s^2*h_q for standard
attention), halved with `causal`. DeepSeek Sparse Attention (dsa.py): the indexer's projections among the
GEMMs, and a core over min(K, t + 1) keys per query in the latent space, `2*b*s*keys*a*(2 d_c + d_r)`, plus the
indexer's scoring over the causal keys and its sparse loss (`dsa.indexer_fwd_flop`), counted as they execute
under both conventions. Each MTP module (Megatron's `mtp_num_layers`) adds one layer of
the last layer's kind, its 2h -> h projection and a second LM head. A hybrid Mamba model counts its
layers by kind: attention cores only on its attention layers, Mamba layers' GEMMs and SSD scan.

LoRA (`frozen_weights`, formulation/lora.py): the frozen weights' backward is the data gradient alone, so each
weight's GEMMs count forward + one backward (2x forward, Megatron-Bridge's LoRA TFLOP/s print about 2/3 of the
full step's); the attention core, which has no weight, counts 3x as before. The adapters' own FLOPs (r (K + N)
per adapted linear and token, about 1% of the layer's at rank 32) are left out of the count.
"""

from __future__ import annotations

import numpy as np

from ..specs import ModelSpec
from . import dsa, dsv4
from .gdn import gdn_layer_fwd_flop_per_token
from .kernels import window_keys
from .mamba import mamba_layer_fwd_flop_per_token


def _attention_gemm_per_token(model: ModelSpec) -> float:
    """2 FLOPs per attention weight (standard: QKV 2h(h_q + 2h_kv) and projection 2h_q h)."""
    norms = ((model.q_lora_rank or 0) + model.mla_dims[0]) if model.multi_latent_attention else 0
    norms += 2 * model.dsa_dims[1] if model.is_dsa else 0  # the DSA indexer's key LayerNorm
    return 2.0 * (model.attention_params - norms)


def layer_gemm_fwd_flop(model: ModelSpec, tokens):
    """Forward GEMM FLOPs of one dense layer (attention projections and the MLP)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    per_token = _attention_gemm_per_token(model) + 2 * h * f * model.mlp_matrices
    return np.asarray(tokens, dtype=np.float64) * per_token


def moe_block_fwd_flop_per_token(model: ModelSpec) -> float:
    """Forward GEMM FLOPs per token of one MoE block: router 2*h*E, top-k routed experts at
    `moe_expert_width` w (h, or LatentMoE's l), shared experts at h, and LatentMoE's two projections
    2*2*h*l (Megatron-LM d98e8a6 training.py `moe_layer_flops`, latent branch: routed 4*T*l*f*k*scale
    plus 4*T*h*l)."""
    h, (E, k, f_e), w = model.hidden_size, model.moe_dims, model.moe_expert_width
    f_s = model.moe_shared_expert_intermediate_size or 0
    return 2 * h * E + 2 * (w * k * f_e + h * f_s) * model.mlp_matrices + 4 * h * (model.moe_latent_size or 0)


def moe_layer_gemm_fwd_flop(model: ModelSpec, tokens):
    """Forward GEMM FLOPs of one MoE layer: attention and the MoE block (`moe_block_fwd_flop_per_token`)."""
    per_token = _attention_gemm_per_token(model) + moe_block_fwd_flop_per_token(model)
    return np.asarray(tokens, dtype=np.float64) * per_token


FLOP_CONVENTION = ("Megatron-LM num_floating_point_operations: forward + backward = 3x forward, "
                   "causal attention counted as executed (half of 4*b*s^2*h_q); hardware FLOPs add "
                   "the recomputed forward")


def attention_core_fwd_flop(model: ModelSpec, batch, seq_len, causal: bool = False, banded: bool = True):
    """QK^T and attention-times-V of the average layer: 2*b*s^2*a*(d_qk + d_v) (4*b*s^2*h_q when both
    are the head dimension), half of it with `causal` (module docstring); with `causal` and `banded` (the
    stack's kernel skips what a window masks: Megatron's), a layer that attends through a sliding window
    of w < s tokens counts its band, 2*b*s*a*d * w (1 - w / 2s), as its kernel executes it
    (`kernels.flash_attention_s`; Megatron-LM's own count ignores windows)."""
    if model.is_dsa or model.is_dsv4:  # DeepSeek's sparse core and indexer, as they execute, whatever `causal`
        kind, a = (dsv4 if model.is_dsv4 else dsa), model.num_attention_heads
        shape = dict(batch=batch, s_q=seq_len, s_k=seq_len, heads=a)
        return kind.core_fwd_flop(model, **shape) + kind.indexer_fwd_flop(model, **shape)
    if model.multi_latent_attention:
        _, d_nope, d_rope, d_v = model.mla_dims
        d = d_nope + d_rope + d_v
    else:
        d = 2 * model.head_dim
    full = 2.0 * np.asarray(batch, dtype=np.float64) * seq_len * seq_len * model.num_attention_heads * d
    if not causal:
        return full
    w, share = model.sliding_window, model.windowed_layers / model.num_layers * banded
    if w is None or not share:
        return full * 0.5
    return full * ((1.0 - share) * 0.5 + share * window_keys(w, seq_len) / seq_len)


def lm_head_fwd_flop(model: ModelSpec, tokens):
    return 2.0 * np.asarray(tokens, dtype=np.float64) * model.hidden_size * model.vocab_size


def _hybrid_layer_counts(model: ModelSpec) -> dict[str, int]:
    """Layers of each kind a step runs: the decoder's and each MTP depth's (Megatron-LM d98e8a6
    hybrid_layer_allocation.py `get_hybrid_layer_counts`: "MTP layers are counted once per MTP depth")."""
    n = model.hybrid_layer_counts()
    if model.mtp_hybrid_layer_pattern and model.mtp_num_layers:
        mtp = model.hybrid_layer_counts(model.mtp_hybrid_layer_pattern)
        n = {k: v + model.mtp_num_layers * mtp[k] for k, v in n.items()}
    return n


def _hybrid_layers_fwd_flop(model: ModelSpec, tokens):
    """Forward FLOPs of a hybrid model's layers by kind (Megatron-LM training.py `hybrid_flops`):
    attention's projections, the MLP's and the MoE block's GEMMs (router, top-k routed and shared
    experts), each Mamba layer's GEMMs, conv1d and SSD scan (`mamba.mamba_layer_fwd_flop_per_token`) and each
    Gated DeltaNet layer's (`gdn.gdn_layer_fwd_flop_per_token`);
    each MTP depth's layers and its 2h -> h eh_proj (which Megatron's count leaves out)."""
    h, n = model.hidden_size, _hybrid_layer_counts(model)
    per_token = n["attention"] * _attention_gemm_per_token(model) + n["mlp"] * 2 * h * model.ffn_hidden_size * model.mlp_matrices
    if model.mtp_hybrid_layer_pattern:
        per_token += model.mtp_num_layers * 2.0 * 2 * h * h
    if n["moe"]:
        per_token += n["moe"] * moe_block_fwd_flop_per_token(model)
    if n["mamba"]:
        per_token += n["mamba"] * mamba_layer_fwd_flop_per_token(model)
    if n["gdn"]:
        per_token += n["gdn"] * gdn_layer_fwd_flop_per_token(model)
    return np.asarray(tokens, dtype=np.float64) * per_token


def layers_gemm_fwd_flop(model: ModelSpec, tokens):
    """Forward GEMM FLOPs of every decoder layer and MTP layer (not the LM heads); a hybrid model's
    by layer kind (`_hybrid_layers_fwd_flop`)."""
    if model.is_hybrid:
        return _hybrid_layers_fwd_flop(model, tokens)
    dense = model.num_dense_layers * layer_gemm_fwd_flop(model, tokens)
    moe = model.num_moe_layers * moe_layer_gemm_fwd_flop(model, tokens) if model.is_moe else 0.0
    last_moe = model.is_moe and model.moe_layer_mask[-1]
    mtp_layer = moe_layer_gemm_fwd_flop(model, tokens) if last_moe else layer_gemm_fwd_flop(model, tokens)
    proj = 2.0 * np.asarray(tokens, dtype=np.float64) * 2 * model.hidden_size * model.hidden_size
    return dense + moe + model.mtp_num_layers * (mtp_layer + proj)


def _attention_layers(model: ModelSpec) -> int:
    if model.is_hybrid:
        return _hybrid_layer_counts(model)["attention"]
    return model.num_layers + model.mtp_num_layers


def model_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, causal: bool = False,
                        banded: bool = True, frozen_weights: bool = False) -> float:
    """Forward + backward model FLOPs of one optimizer step (no recomputation); `causal`: the
    reported convention, else the published figures' (module docstring); `banded`: as
    `attention_core_fwd_flop`; `frozen_weights`: LoRA's (module docstring)."""
    tokens = global_batch_size * seq_len
    core = attention_core_fwd_flop(model, global_batch_size, seq_len, causal, banded) * _attention_layers(model)
    heads = (1 + model.mtp_num_layers) * lm_head_fwd_flop(model, tokens)
    return float((2 if frozen_weights else 3) * (layers_gemm_fwd_flop(model, tokens) + heads) + 3 * core)


def hardware_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, recompute,
                           causal: bool = False, banded: bool = True, frozen_weights: bool = False) -> np.ndarray:
    """Model FLOPs plus the recomputed forward (recompute: RECOMPUTE_CODES array or int)."""
    tokens = global_batch_size * seq_len
    core = attention_core_fwd_flop(model, global_batch_size, seq_len, causal, banded) * _attention_layers(model)
    full = layers_gemm_fwd_flop(model, tokens) + core
    rc = np.asarray(recompute)
    extra = np.where(rc == 2, full, np.where(rc == 1, core, 0.0))
    return model_flop_per_step(model, global_batch_size, seq_len, causal, banded, frozen_weights) + extra


def reported_flop_per_step(model: ModelSpec, global_batch_size: int, seq_len: int, recompute,
                           framework: str = "megatron", frozen_weights: bool = False) -> tuple[float, float]:
    """(model, hardware) FLOPs of one step in the reported convention (FLOP_CONVENTION): the one
    place MFU and TFLOP/s take their FLOPs from (`job.throughput`, the joint placement's plan); a
    sliding window counts as its band where the stack's kernel skips the rest (megatron)."""
    banded = framework == "megatron"
    return (model_flop_per_step(model, global_batch_size, seq_len, causal=True, banded=banded,
                                frozen_weights=frozen_weights),
            float(hardware_flop_per_step(model, global_batch_size, seq_len, recompute, causal=True, banded=banded,
                                         frozen_weights=frozen_weights)))


def megatron_eq3_flop(model: ModelSpec, global_batch_size: int, seq_len: int) -> float:
    """Narayanan et al. 2021 Eq. (3), as printed (GPT with f=4h, MHA, full recompute)."""
    B, s, l, h, V = global_batch_size, seq_len, model.num_layers, model.hidden_size, model.vocab_size
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
