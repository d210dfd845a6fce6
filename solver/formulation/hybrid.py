"""The layers of a hybrid model (Megatron-LM --hybrid-layer-pattern; Mamba-Transformer: Nemotron-H,
Nemotron 3; Gated DeltaNet: Qwen3-Next, Qwen3.5) in the stage coefficients: each pattern symbol is one
Megatron layer with its own pre-norm and residual (megatron/core/models/hybrid/hybrid_block.py at d98e8a6), priced by kind from
the same terms as a Transformer layer (`coefficients._StageTerms`, whose attributes are read here):

- attention (*): the dense layer without its MLP, as a MoE layer's attention is
  (`coefficients._StageTerms.moe_layer`), less one norm and residual (the MLP's);
- MLP (-): the dense layer's MLP GEMMs and elementwise work, one norm and residual;
- MoE (E): `moe_layer.moe_layer_terms` with no attention (its norm and residual, its MoE block);
- Mamba (M): `mamba.py` (in_proj / out_proj GEMMs, the conv1d + SSD scan + norm as a roofline,
  the activations the fused kernel saves);
- Gated DeltaNet (G): `gdn.py`, the same parts (in_proj / out_proj GEMMs, the conv1d + chunked delta
  rule + gated norm as a roofline, what FLA's kernels save);

each with one TP collective pair per pass (attention's, the MLP's, the Mamba mixer's out_proj; a
MoE layer's shared experts and ETP as `moe_layer_terms` prices them), its weights' data-parallel
reduction and optimizer step, and its stored activations (Korthikanti et al. 2022 Table 2 per
sublayer: one norm input and one linear input of the replicated 10h). A pipeline unit is one period
of the pattern (`ModelSpec.pipeline_units`), its costs the sums of its layers', its working set the
largest layer's: every split searched stays exactly priced. Under selective recomputation the
attention keeps the dense layer's modules (core_attn, MLA up projections) and the MoE layers
theirs (`moe_layer.moe_selective`); an MLP layer's "mlp" module and the Mamba and Gated DeltaNet mixers
are not recomputed (no Megatron selective module names them here). Fine-grained activation offloading
(`fine_offload.py`) takes the attention's modules from attention layers and the MoE block's from MoE
layers; MLP, Mamba and Gated DeltaNet layers have none."""

from __future__ import annotations

import numpy as np

from ..specs.hybrid import HYBRID_SYMBOLS
from . import gdn, mamba
from .fine_offload import Offloaded, attention_offloaded, expert_offloaded, with_fine_offload
from .kernels import elementwise_bytes_per_token, linear_s
from .layer_terms import sharded_terms, sharding_of
from .memory import BF16_BYTES, layer_activation_bytes
from .module_rates import latent_act_delta, role_rate, saved_input_bytes
from .moe_layer import moe_layer_terms
from .precision import gathered_param_bytes


def _norm_s(T):
    """(forward, backward) of one sublayer's norm and residual add on one GPU: half of the dense
    layer's two (`kernels.elementwise_bytes_per_token` with no attention or MLP widths)."""
    f, b = elementwise_bytes_per_token(hidden=T.h, q_width=0, kv_width=0, ffn=0, gated=False, rotary=False,
                                       sp_degree=T.rep, tp=T.t)
    return T.M * f / 2 / T.hbm, T.M * b / 2 / T.hbm


def sublayer_activation_bytes(T, **widths):
    """(stored, working) activations of one sublayer (`memory.layer_activation_bytes` with half the
    replicated 10h: one norm input, one linear input, one dropout mask); under full recomputation the
    sublayer's input, 2h."""
    stored, working = layer_activation_bytes(**{**T.act_kw, "hidden": T.h / 2, **widths})
    return np.where(T.rc == 2, BF16_BYTES * T.M * T.h / T.rep, stored), working


def _layer(T, *, fwd, bwd, rfwd, gemm_fwd, gemm_bwd, params_gpu, act, working, cp=0.0) -> dict:
    """The per-layer terms (`coefficients._StageTerms.per_layer_and_ends`' keys) of a sublayer with
    one TP collective pair per pass and `params_gpu` weights on this GPU."""
    pair = T.tp_pass / 2
    if T.tp_comm_overlap:
        tf, tb = T.hidden(pair, gemm_fwd), T.hidden(pair, gemm_bwd)
    else:
        tf = tb = pair
    red, ag = T.dp_step(params_gpu, gathered_param_bytes(T.precision, T.fp8_param_gather))
    zero3, _, live = sharded_terms(sharding_of(T), T.z, params_gpu=params_gpu, fwd=fwd + tf, bwd_window=bwd + tb + rfwd)
    n = len(T.z)
    return dict(compute=fwd + bwd + rfwd, tp=tf * (1 + (T.rc == 2)) + tb, cp=cp + np.zeros(n), zero3=zero3,
                ep=np.zeros(n), fwd=fwd + tf, bwd=bwd + tb, work=fwd + bwd, dp_step=red + ag,
                opt=params_gpu * T.opt_per_param, window=T.window(fwd + tf, bwd + tb), params=params_gpu * T.pb,
                grads=params_gpu * T.gb, optim=params_gpu * T.ob, act=act, working=working + live)


def _attention_and_mlp_s(T):
    """((forward, backward) of the attention sublayer, the same of the MLP sublayer): the dense
    layer's times split at its MLP, each with one norm, residual and launch overhead."""
    model, g, hbm, M = T.model, T.g, T.hbm, T.M
    el0_f, el0_b = elementwise_bytes_per_token(hidden=T.h, q_width=T.hq, kv_width=T.hkv, ffn=0, gated=model.gated_mlp,
                                               rotary=model.position_embedding == "rope", sp_degree=T.rep, tp=T.t)
    nf, nb = _norm_s(T)
    oh = T.overhead_s
    mlp_f = g.mlp_fwd + M * (T.el_fwd - el0_f) / hbm
    mlp_b = g.mlp_bwd + M * (T.el_bwd - el0_b) / hbm
    return (T.fwd - mlp_f - nf, T.bwd - mlp_b - nb), (mlp_f + nf + oh, mlp_b + nb + 2 * oh)


def attention_layer(T) -> dict:
    """An attention sublayer (*): module docstring."""
    model, rc, sel = T.model, T.rc, T.sel
    (f, b), _ = _attention_and_mlp_s(T)
    act, working = sublayer_activation_bytes(T, ffn=0, linear_input_bytes=saved_input_bytes(T, "attention"))
    act = act - np.where(rc == 1, sel.attention_freed_bytes - T.scores, 0.0)
    working = working - np.where(rc == 1, T.scores, 0.0)
    if T.latent_width:
        act, working = act + np.where(rc == 2, 0.0, T.latent_width * T.M), working + np.where(rc == 2, T.latent_width * T.M, 0.0)
    return _layer(T, fwd=f, bwd=b, rfwd=np.where(rc == 2, f, np.where(rc == 1, sel.attention_s, 0.0)),
                  gemm_fwd=T.g.gemm_fwd - T.g.mlp_fwd, gemm_bwd=T.g.gemm_bwd - T.g.mlp_bwd,
                  params_gpu=model.hybrid_kind_params()["attention"] / T.t, act=act, working=working, cp=T.layer_cp)


def mlp_layer(T) -> dict:
    """An MLP sublayer (-): module docstring."""
    _, (f, b) = _attention_and_mlp_s(T)
    act, working = sublayer_activation_bytes(T, q_width=0, kv_width=0, heads=0, gate_width=0, ffn=T.f,
                                             linear_input_bytes=saved_input_bytes(T, "mlp"))
    return _layer(T, fwd=f, bwd=b, rfwd=np.where(T.rc == 2, f, 0.0), gemm_fwd=T.g.mlp_fwd, gemm_bwd=T.g.mlp_bwd,
                  params_gpu=T.model.hybrid_kind_params()["mlp"] / T.t, act=act, working=working)


def _mixer_layer(T, linears, mixer_s, saved, params: int, cp=0.0, roles=(None, None)) -> dict:
    """A sublayer of two GEMMs around a mixer's kernels, Mamba-2's or Gated DeltaNet's: the GEMMs (`linears`:
    their shapes on a TP rank) at the recipe's rate with the recipe's quantisation of their inputs (as
    `layer_terms.layer_linears_s`; at their `roles`' precisions when per-module precision moves them,
    `module_rates.role_rate`), the mixer's kernels (`mixer_s`: their roofline), its norm, residual and launch
    overhead; `saved` the activations its kernels keep (the two GEMMs' inputs at the wider of the roles'
    saved bytes: an upper bound when they differ), `params` its weights (over tp), `cp` its context
    parallelism's exposed exchange."""
    model, M, t, hbm, gpu = T.model, T.M, T.t, T.hbm, T.gpu
    gf = gb = cf = cb = 0.0
    for (N, K), (rate, cast) in zip(linears(model, t), [role_rate(T, role) for role in roles]):
        fw, bw = linear_s(M, N, K, **rate)
        gf, gb, cf, cb = gf + fw, gb + bw, cf + cast * M * K / hbm, cb + cast * M * N / hbm
    mf, mb = mixer_s(model, M, t, flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency,
                     hbm_bytes_per_s=hbm)
    nf, nb = _norm_s(T)
    oh = T.overhead_s
    fwd, bwd = gf + cf + mf + nf + oh, gb + cb + mb + nb + 2 * oh
    stored = saved(model, M, t, T.rep, max(saved_input_bytes(T, role) for role in roles))
    act = np.where(T.rc == 2, BF16_BYTES * M * T.h / T.rep, stored)
    return _layer(T, fwd=fwd, bwd=bwd, rfwd=np.where(T.rc == 2, fwd, 0.0), gemm_fwd=gf, gemm_bwd=gb,
                  params_gpu=params / t, act=act, working=np.where(T.rc == 2, stored, 0.0), cp=cp)


def mamba_layer(T) -> dict:
    """A Mamba-2 sublayer (M): `_mixer_layer` of `mamba.py`."""
    return _mixer_layer(T, mamba.mamba_linears, mamba.mixer_s, mamba.mamba_activation_bytes, T.model.mamba_layer_params,
                        roles=("mamba_in_proj", "mamba_out_proj"))


def gdn_layer(T) -> dict:
    """A Gated DeltaNet sublayer (G): `_mixer_layer` of `gdn.py`, with its heads' all-to-all under context
    parallelism (`gdn.gdn_cp_a2a_s`)."""
    return _mixer_layer(T, gdn.gdn_linears, gdn.mixer_s, gdn.gdn_activation_bytes, T.model.gdn_layer_params,
                        cp=gdn.gdn_cp_a2a_s(T.model, T.cluster, T.M, T.t, T.c, T.rc))


# Megatron's --cuda-graph-modules name of each layer kind's block (transformer_config.py cuda_graph_modules:
# "attn", "mlp", "moe", "mamba")
GRAPH_MODULE = {"attention": "attn", "mlp": "mlp", "moe": "moe", "mamba": "mamba", "gdn": None}  # GDN: none


def moe_layer(T, before: dict, before_kind: str) -> dict:
    """A MoE sublayer (E): `moe_layer.moe_layer_terms` with no attention; its norm, residual and
    launch overhead stand in the attention's place. The host's calls before the dispatcher's sync
    (`host.py`: in a GPT layer, the attention's and the router's) are the preceding layer's -- `before`,
    of kind `before_kind` -- and the router's, hidden behind that layer's GPU time and this norm's;
    graphed when Megatron's --cuda-graph-modules names the preceding layer's block. After another MoE
    layer (whose dispatch and experts are its own post-sync segment) the window is this norm alone."""
    nf, nb = _norm_s(T)
    oh, zeros = T.overhead_s, np.zeros(len(T.z))
    impl, modules = T.cuda_graph
    graphed = [m for m in modules if m != "attn"] + (["attn"] if GRAPH_MODULE[before_kind] in modules else [])
    return moe_layer_terms(
        T.model, T.cluster, T.shapes, M=T.M, attn_fwd=nf + oh, attn_bwd=nb + 2 * oh, attn_gemm_fwd=zeros,
        attn_gemm_bwd=zeros, core_fwd=zeros, tp_pass=T.tp_pass, hidden=T.hidden, tp_comm_overlap=T.tp_comm_overlap,
        layer_cp=zeros, dp_step=T.dp_step, opt_per_param=T.opt_per_param, window=T.window,
        state_bytes=(T.pb, T.gb, T.ob), grad_bytes=T.grad_bytes, act_kw=T.act_kw,
        adam_s_per_param=T.adam_bytes / T.hbm, a2a_overlap=T.moe_a2a_overlap, dispatcher=T.moe_token_dispatcher,
        latent_bytes=latent_act_delta(T), latent_rate=role_rate(T, "latent_proj"), hbm=T.hbm, mm=T.mm, bf16mm=T.bf16mm, precision=T.precision,
        grad_reduce_dtype=T.grad_reduce_dtype, fp8_param_gather=T.fp8_param_gather, cuda_graph=(impl, tuple(graphed)),
        imbalance=T.moe_load_imbalance, adam_state_bytes=T.adam_state_bytes, sharding=sharding_of(T),
        num_microbatches=T.m, selective=dict(mods=T.mods, attn_s=zeros, attn_freed=0.0, attn_working=0.0),
        attention=False, outer_act=sublayer_activation_bytes(T, q_width=0, kv_width=0, heads=0, gate_width=0, ffn=0),
        host_window=(before["work"] - before["bwd"] + nf + oh, before["bwd"] + nb + 2 * oh))


KIND_TERMS = {"attention": attention_layer, "mlp": mlp_layer, "mamba": mamba_layer, "gdn": gdn_layer}
KINDS = HYBRID_SYMBOLS


def pattern_layers(T, pattern: str) -> list[dict]:
    """The terms of each layer of `pattern`, in order: each kind priced once (`KIND_TERMS`), a MoE
    layer after the layer before it (cyclically within the pattern: `moe_layer`)."""
    period = [KINDS[c] for c in pattern]
    kinds: dict = {k: KIND_TERMS[k](T) for k in set(period) - {"moe"}}
    kinds["moe"] = {"work": np.zeros(len(T.z)), "bwd": np.zeros(len(T.z))}  # after a MoE layer: its norm alone
    for i, k in enumerate(period):
        before = period[i - 1]
        if k == "moe" and ("moe", before) not in kinds:
            kinds[("moe", before)] = moe_layer(T, kinds[before], before)
    offloaded = {k: with_fine_offload(T, layer, _offloaded(T, k)) for k, layer in kinds.items() if k != "moe"}
    return [offloaded[("moe", period[i - 1])] if k == "moe" else offloaded[k] for i, k in enumerate(period)]


def _offloaded(T, kind) -> Offloaded:
    """What fine-grained offloading takes from a layer of `kind` (`fine_offload.py`): the attention's modules, a
    MoE layer's (`("moe", kind before)`) experts'; nothing from an MLP or Mamba layer (no Megatron module)."""
    if kind == "attention":
        return attention_offloaded(T)
    if isinstance(kind, tuple):
        return expert_offloaded(T, T.shapes.ep, T.shapes.etp)
    return Offloaded()


def summed(T, layers: list[dict]) -> dict:
    """The terms of `layers` run one after another: sums, the working set the largest layer's."""
    unit = {key: sum(layer[key] for layer in layers) for key in layers[0]}
    unit["working"] = np.maximum.reduce([np.broadcast_to(layer["working"], T.z.shape) for layer in layers])
    return unit


def hybrid_unit(T) -> tuple[dict, int]:
    """(the terms of one pipeline unit, the number of units): the sum of its layers' terms over one
    period of the pattern (`ModelSpec.pipeline_units`, `pattern_layers`), the working set the
    largest layer's."""
    model = T.model
    _, d, m, units = model.pipeline_units
    assert model.hybrid_layer_pattern is not None
    return summed(T, pattern_layers(T, model.hybrid_layer_pattern[:d + m])), units
