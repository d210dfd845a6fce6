"""One MoE layer's terms in the stage coefficients, and the composition of dense and MoE layers
into pipeline units (`ModelSpec.pipeline_units`) with the first and last stages' extras; called
by `coefficients.stage_coefficients`, whose dense layer they extend (the MoE-specific formulas
are in `moe.py`)."""

from __future__ import annotations

import numpy as np

from ..space.shapes import Shapes
from ..specs import ClusterSpec, ModelSpec
from . import comm, eager_attention, eager_moe, frameworks, module_rates
from .data_parallel import hsdp_step_s
from .fine_offload import attention_offloaded, expert_offloaded, with_fine_offload
from .host import host_calls_s, host_exposed_s
from .kernels import linear_s
from .layer_terms import sharded_terms, sharding_of
from .memory import ADAM_STATE_BYTES, BF16_BYTES, layer_activation_bytes
from .moe import (
    a2a_alone_share,
    expert_clamp_bytes,
    expert_clamp_saved_bytes,
    moe_comm_pass_s,
    moe_layer_params_per_gpu,
    moe_mlp_activation_bytes,
    moe_mlp_compute_s,
    routed_tokens,
)
from .precision import gathered_param_bytes, is_quantized, quantize_bytes_per_element
from .recompute import modules_of, norm_recompute


def moe_layer_terms(model: ModelSpec, cluster: ClusterSpec, shapes: Shapes, *, M, attn_fwd, attn_bwd, attn_gemm_fwd,
               attn_gemm_bwd, core_fwd, tp_pass, hidden, tp_comm_overlap, layer_cp, dp_step, opt_per_param, window,
               state_bytes, grad_bytes, act_kw, latent_bytes, hbm, mm, bf16mm, precision, grad_reduce_dtype, imbalance,
               adam_s_per_param, a2a_overlap: bool = False, dispatcher: str = "alltoall", selective=None,
               fp8_param_gather: bool = False, cuda_graph: tuple = ("none", ()), attention: bool = True,
               outer_act=None, host_window=None, adam_state_bytes: float = ADAM_STATE_BYTES, sharding: dict,
               num_microbatches, stack: frameworks.Framework = frameworks.MEGATRON, latent_rate=None) -> dict:
    """The per-layer terms of one MoE layer (the keys of `stage_coefficients`' dense layer): the
    dense layer's attention with the MLP replaced by the MoE block (`moe.py`):
    - compute: router, grouped expert GEMMs, shared experts, (un)permutation; and the time the GPU
      waits for the host outside CUDA graphs (`moe_host_s`, `host.py`: the dispatcher's sync splits
      the forward in two segments, each the longer of its GPU and host time);
    - TP collectives: attention's gather/scatter pair, the shared experts' (they run on the
      SP-gathered tokens, Megatron `SharedExpertMLP`), the ETP gather/scatter of the routed
      copies; exposed, or behind the layer's GEMMs with --tp-comm-overlap, as the dense layer's;
    - expert-parallel all-to-alls (`exposed_a2a_s`): dispatch + combine per pass, exposed; with the
      job's `moe_a2a_overlap` (Megatron's --overlap-moe-expert-parallel-comm: one micro-batch's forward
      beside another's backward) hidden behind the compute, but for the passes run alone;
    - data parallelism: the non-expert parameters as the dense layer's (over dp x cp, stride
      tp), the local experts' gradients over the expert-data-parallel group (edp ranks etp*ep
      apart) and their optimizer state sharded over it by the distributed optimizer; under
      ZeRO-2/3 (Megatron-FSDP) each layer's traffic per micro-batch over the same two groups
      (`layer_terms.sharded_terms`; `sharding`: `layer_terms.sharding_of` the dense layer's terms);
    - memory: attention's activations (`layer_activation_bytes` without an MLP) plus the MoE block's
      (`moe.moe_mlp_activation_bytes`), none kept under full recomputation (one layer rebuilt at a time);
    - selective recomputation by Megatron module (`recompute.py`, `selective`: the job's modules and the attention's
      share from the dense layer): "layernorm" frees the separate norms' outputs (the pre-MLP norm, and the attention
      norm with MLA), "moe_act" the experts' activation output, "shared_experts" the shared experts' activations,
      "moe" the whole block (rebuilt one layer at a time, its all-to-alls run again); each adds its forward to the backward.
    A hybrid model's MoE layer (`hybrid.py`): `attention` False, `outer_act` its norm's, `host_window` the
    (forward, backward) GPU time before the sync in place of the attention's.
    `stack` eager (torchtitan): its block, state (`layer_times`, `layer_activations`), TP-sharded experts' SP pair;
    `latent_rate`, `latent_bytes`: LatentMoE's projections' rate, activations beyond the block (module_rates)."""
    t, c, d = (getattr(shapes, k).astype(np.float64) for k in ("tp", "cp", "dp"))
    ep, etp, rc, z = shapes.ep.astype(np.float64), shapes.etp.astype(np.float64), shapes.recompute, shapes.zero
    eager = cuda_graph[0] != "full_iteration"  # the experts' bias and clamp as PyTorch ops, not TE's op fuser (moe.py)
    mf, mb, gf, gbw = moe_mlp_compute_s(model, M, t, ep, etp, imbalance, mm=mm, bf16=bf16mm, hbm_bytes_per_s=hbm,
                                        cast_bytes=quantize_bytes_per_element(precision),
                                        eager_epilogue=eager, latent=latent_rate)
    a2a, etp_pass = moe_comm_pass_s(model, cluster, M, t, ep, etp, imbalance, dispatcher)
    etp_pass = etp_pass if stack.fused else np.where(etp > 1, tp_pass / 2, 0.0)
    a2a_gpu = 0.0 if a2a_overlap else a2a  # on the GPU's timeline between the host's calls
    ne, ex = moe_layer_params_per_gpu(model, t, ep, etp)
    fwd, bwd, mf = layer_times(model, cluster, stack, block=(mf, mb, gf, gbw), attn=(attn_fwd, attn_bwd), a2a_gpu=a2a_gpu,
                               host_window=host_window, precision=precision, cuda_graph=cuda_graph, hbm=hbm,
                               routing=(M, t, ep, etp, imbalance), casts=(z, ne + ex))
    sel = selective or dict(mods=modules_of(None), attn_s=core_fwd, attn_freed=0.0, attn_working=0.0)
    moe_on = "moe" in sel["mods"]
    sel_s, freed = moe_selective(model, sel, M=M, t=t, ep=ep, etp=etp, imbalance=imbalance, mf=mf, mm=mm,
                                 act_kw=act_kw, hbm=hbm, precision=precision, eager_epilogue=eager)
    rfwd = np.where(rc == 2, fwd, np.where(rc == 1, sel_s, 0.0))
    tp_moe = tp_pass / 2 * (attention + bool(model.moe_shared_expert_intermediate_size)) + etp_pass
    if tp_comm_overlap:
        tp_f, tp_b = hidden(tp_moe, attn_gemm_fwd + gf), hidden(tp_moe, attn_gemm_bwd + gbw)
    else:
        tp_f = tp_b = tp_moe
    edp, r = t * c * d / (ep * etp), sharding["instances"]  # HSDP: the experts' ZeRO-3 inside r instances of edp
    (pb, gb, ob), (pbe, gbe, obe) = state_bytes, frameworks.model_state_bytes_per_param(
        stack, z, edp, precision, grad_reduce_dtype, fp8_param_gather, adam_state_bytes, r)
    param_bytes = gathered_param_bytes(precision, fp8_param_gather)
    red_ne, ag_ne = dp_step(ne, param_bytes)
    red_ex, ag_ex = expert_dp_step_s(cluster, ex, edp, ep, etp, z, grad_bytes, param_bytes, sharding["z2_mb"], r)
    zero3, _, live = sharded_terms(sharding, z, params_gpu=ne, experts_gpu=ex, edp=edp / r, expert_stride=etp * ep,
                                fwd=fwd + tp_f, bwd_window=bwd + tp_b + rfwd)
    opt_ex = ex * adam_s_per_param / np.where(z >= 1, edp, 1.0)
    att_act, att_working, moe_block = layer_activations(model, stack, M=M, t=t, ep=ep, etp=etp, imbalance=imbalance,
                                                        act_kw=act_kw, outer_act=outer_act, eager_epilogue=eager)
    block = moe_block + latent_bytes
    # selective by module: what stays of the block, and what is rebuilt one layer at a time
    kept = np.where(moe_on, 0.0, moe_block - freed["act"] - freed["shared"])
    att_act = att_act - np.where(rc == 1, sel["attn_freed"] + freed["norm"] + moe_block - kept, 0.0)
    att_working = att_working + np.where(rc == 1, sel["attn_working"] + np.where(moe_on, moe_block, 0.0), 0.0)
    ep_s = exposed_a2a_s(a2a, hidden, fwd + bwd, shapes=shapes, num_microbatches=num_microbatches,
                         passes=2 + (rc == 2) + ((rc == 1) & moe_on), overlap=a2a_overlap)
    return dict(compute=fwd + bwd + rfwd, tp=tp_f * (1 + (rc == 2)) + tp_b, cp=layer_cp, zero3=zero3,
                ep=ep_s, fwd=fwd + tp_f, bwd=bwd + tp_b, work=fwd + bwd,
                dp_step=red_ne + ag_ne + red_ex + ag_ex, opt=ne * opt_per_param + opt_ex,
                window=window(fwd + tp_f, bwd + tp_b), params=ne * pb + ex * pbe, grads=ne * gb + ex * gbe,
                optim=ne * ob + ex * obe, act=att_act + np.where(rc == 2, 0.0, block),
                working=att_working + np.where(rc == 2, block, 0.0) + live)


def moe_layer_of(terms) -> dict:
    """A MoE layer's terms (`moe_layer_terms`) from the stage's dense-layer terms `terms` (`coefficients._StageTerms`):
    the dense layer without its MLP (its GEMMs and the stack's elementwise traffic of the MLP taken out of the layer's
    GPU time, before an eager stack's casts and host bound, which the MoE layer prices itself), and the experts; with
    fine-grained offloading, its attention's and MoE block's modules (`fine_offload.py`)."""
    model, M, h, t, rep, hbm, g, sel = terms.model, terms.M, terms.h, terms.t, terms.rep, terms.hbm, terms.g, terms.sel
    mlp_fwd, mlp_bwd = g.mlp_fwd, g.mlp_bwd
    el0_fwd, el0_bwd = frameworks.elementwise_bytes_per_token(
        terms.stack, hidden=h, q_width=terms.hq, kv_width=terms.hkv, ffn=0, gated=model.gated_mlp,
        rotary=model.position_embedding == "rope", sp_degree=rep, tp=t,
        attention_extra=eager_attention.traffic_extra_bytes(model, t))
    attn_fwd = terms.fwd_gpu - mlp_fwd - M * (terms.el_fwd - el0_fwd) / hbm  # the layer without its MLP
    attn_bwd = terms.bwd_gpu - mlp_bwd - M * (terms.el_bwd - el0_bwd) / hbm
    scores = terms.scores
    layer = moe_layer_terms(
        model, terms.cluster, terms.shapes, M=M, attn_fwd=attn_fwd, attn_bwd=attn_bwd,
        attn_gemm_fwd=g.gemm_fwd - mlp_fwd, attn_gemm_bwd=g.gemm_bwd - mlp_bwd, core_fwd=terms.core_fwd,
        tp_pass=terms.tp_pass, hidden=terms.hidden, tp_comm_overlap=terms.tp_comm_overlap, layer_cp=terms.layer_cp,
        dp_step=terms.dp_step, opt_per_param=terms.opt_per_param, window=terms.window,
        state_bytes=(terms.pb, terms.gb, terms.ob), grad_bytes=terms.grad_bytes, act_kw=terms.act_kw,
        adam_s_per_param=terms.adam_bytes / hbm, a2a_overlap=terms.moe_a2a_overlap,
        dispatcher=terms.moe_token_dispatcher,
        latent_bytes=terms.latent_width * M + module_rates.attention_act_delta(terms) + module_rates.latent_act_delta(terms),
        latent_rate=module_rates.role_rate(terms, "latent_proj"), hbm=hbm, mm=terms.mm, bf16mm=terms.bf16mm, precision=terms.precision,
        grad_reduce_dtype=terms.grad_reduce_dtype, fp8_param_gather=terms.fp8_param_gather, cuda_graph=terms.cuda_graph,
        imbalance=terms.moe_load_imbalance, adam_state_bytes=terms.adam_state_bytes, sharding=sharding_of(terms),
        num_microbatches=terms.m, stack=terms.stack,
        selective=dict(mods=terms.mods, attn_s=sel.attention_s, attn_freed=sel.attention_freed_bytes - scores,
                       attn_working=-scores))
    shapes = terms.shapes
    return with_fine_offload(terms, layer, attention_offloaded(terms) + expert_offloaded(terms, shapes.ep, shapes.etp))


def layer_times(model: ModelSpec, cluster: ClusterSpec, stack: frameworks.Framework, *, block, attn, a2a_gpu,
                host_window, precision: str, cuda_graph: tuple, hbm: float, routing, casts):
    """(forward, backward, the MoE block's forward) of one MoE layer, the all-to-alls left to the layer's `ep` term.
    Megatron: attention (`attn`) plus the block (`block`: `moe.moe_mlp_compute_s`), plus the time the GPU waits for
    the host (`moe_host_s`). An eager stack (`eager_moe.py`): the block's GEMMs with its own elementwise traffic,
    autocast's weight casts at the ZeRO stages it casts (`casts`: the shapes' zero, the layer's weights on this GPU),
    each forward segment and the backward the longer of GPU and host time (`eager_moe.layer_s`; the all-to-alls
    `a2a_gpu` are on the GPU's timeline there, and taken out again)."""
    mf, mb, gf, gbw = block
    attn_fwd, attn_bwd = attn
    M, t, ep, etp, imbalance = routing
    if stack.fused:
        pre_f, pre_b = (attn_fwd, attn_bwd) if host_window is None else host_window
        host_f, host_b = moe_host_s(model, cluster, ep, precision, cuda_graph, pre_gpu_s=pre_f,
                                    post_gpu_s=mf + a2a_gpu, bwd_gpu_s=pre_b + mb + a2a_gpu)
        return attn_fwd + mf + host_f, attn_bwd + mb + host_b, mf + host_f
    traffic_f, traffic_b = eager_moe.traffic_bytes(model, M, t, ep, etp, imbalance)
    block_f, block_b = gf + traffic_f / hbm, gbw + traffic_b / hbm
    zero, params_gpu = casts
    on = np.asarray(zero) <= stack.weight_cast_zero_max
    cast_f, cast_b = (np.where(on, c * params_gpu / hbm, 0.0) for c in stack.weight_cast_bytes)
    fwd, bwd = eager_moe.layer_s(pre_gpu_s=attn_fwd + cast_f, post_gpu_s=block_f + a2a_gpu,
                                 bwd_gpu_s=attn_bwd + block_b + cast_b + a2a_gpu, op_s=stack.dispatch_us_per_op * 1e-6,
                                 ep=ep, attention_ops=attention_ops(model), block=eager_moe.block_ops(model))
    return fwd - a2a_gpu, bwd - a2a_gpu, block_f


def attention_ops(model: ModelSpec) -> tuple[int, int]:
    """(forward, backward) aten ops of an eager MoE layer's attention part: torchtitan's decoder layer without its
    FeedForward (`eager_moe.ATTENTION_OPS`) and what its attention dispatches beyond GQA (`eager_attention.ops_extra`)."""
    extra = eager_attention.ops_extra(model)
    return eager_moe.ATTENTION_OPS[0] + extra[0], eager_moe.ATTENTION_OPS[1] + extra[1]


def layer_activations(model: ModelSpec, stack: frameworks.Framework, *, M, t, ep, etp, imbalance: float, act_kw: dict,
                      outer_act, eager_epilogue: bool = True):
    """(attention's stored, its working set, the MoE block's stored) bytes of one MoE layer per micro-batch: Megatron's
    counts (`memory.layer_activation_bytes` without an MLP, `moe.moe_mlp_activation_bytes`; `outer_act` a hybrid
    sublayer's), or an eager stack's layer without its FeedForward (less the FeedForward's shared input, 2h per token
    unless fully recomputed) and its MoE block (`eager_moe.saved_bytes`)."""
    if stack.fused:
        att_act, att_working = layer_activation_bytes(ffn=0, **act_kw) if outer_act is None else outer_act
        return att_act, att_working, moe_mlp_activation_bytes(model, M, t, ep, etp, imbalance,
                                                             act_kw["linear_input_bytes"], eager_epilogue)
    att_act, att_working = frameworks.layer_activation_bytes(
        stack, gated=model.gated_mlp, ffn=0, attention_extra=eager_attention.saved_extra_bytes(model, t), **act_kw)
    mlp_input = np.where(np.asarray(act_kw["recompute"]) == 2, 0.0, BF16_BYTES * M * model.hidden_size / act_kw["sp_degree"])
    return att_act - mlp_input, att_working, eager_moe.saved_bytes(model, M, t, ep, etp, imbalance)


def exposed_a2a_s(a2a, hidden, work_s, *, shapes: Shapes, num_microbatches, passes, overlap: bool):
    """The exposed all-to-alls of one MoE layer per micro-batch (`a2a`: one pass's dispatch + combine):
    every pass's (`passes`: forward, backward, and a recomputed forward) without the overlap; with it, the
    forward's and backward's hidden behind the layer's compute `work_s` (`hidden`: what stays exposed, the
    collective's SMs lost beside it), but for the `alone` share of passes the schedule runs alone
    (`moe.a2a_alone_share` of the shapes' pipelines and `num_microbatches`), whose all-to-alls stay exposed."""
    if not overlap:
        return a2a * passes
    alone = a2a_alone_share(shapes.pp, shapes.vp, num_microbatches)
    return (1.0 - alone) * hidden(2 * a2a, work_s) + alone * 2 * a2a


def moe_selective(model: ModelSpec, sel: dict, *, M, t, ep, etp, imbalance: float, mf, mm: dict, act_kw: dict,
                  hbm: float, precision: str, eager_epilogue: bool = True):
    """(recomputed forward of Megatron's selective modules, the bytes they free: norm, act, shared) of one
    MoE layer (`recompute.py`; `sel`: the job's modules and the attention's share from the dense layer):
    "layernorm" the separate norms' outputs, "moe_act" the experts' activation output, "shared_experts"
    the shared experts' activations, "moe" the whole block (its forward `mf` again). "moe_act" checkpoints the whole
    activation function (experts.py `CheckpointWithoutOutput`), so on the eager path quick GeGLU's clamps run again
    and their saved input is freed (`moe.expert_clamp_bytes`, `expert_clamp_saved_bytes`)."""
    mods, lib = sel["mods"], act_kw["linear_input_bytes"]
    h, mats, f_s = model.hidden_size, model.mlp_matrices, model.moe_shared_expert_intermediate_size or 0
    norm_freed, norm_s = norm_recompute(model, mods, True, tokens=M, hidden=h, rep=act_kw["sp_degree"],
                                        linear_input_bytes=lib, hbm=hbm)
    _, copies = routed_tokens(model, M / t, ep, etp, imbalance)
    f_l = model.moe_ffn_hidden_size / etp
    act_on, shared_on, moe_on = ("moe_act" in mods), ("shared_experts" in mods and f_s > 0), ("moe" in mods)
    clamp_f = expert_clamp_bytes(model, copies, f_l, eager_epilogue)[0]
    clamp_kept = expert_clamp_saved_bytes(model, copies, f_l, eager_epilogue)
    act_s = act_on * (copies * f_l * (BF16_BYTES * mats + quantize_bytes_per_element(precision)) + clamp_f) / hbm
    shared_s = 0.0
    if shared_on:
        for N, K in (((mats - 1) * f_s / t, h), (h, f_s / t)):
            shared_s = shared_s + linear_s(M, N, K, **mm)[0]
    sel_s = sel["attn_s"] + norm_s + np.where(moe_on, mf, act_s + shared_s)
    return sel_s, dict(norm=norm_freed, act=act_on * (copies * f_l * lib + clamp_kept),
                       shared=shared_on * M * BF16_BYTES * mats * f_s / t)


def moe_host_s(model: ModelSpec, cluster: ClusterSpec, ep, precision: str, cuda_graph: tuple, *, pre_gpu_s, post_gpu_s,
               bwd_gpu_s):
    """(forward, backward) time the GPU of one MoE layer waits for the host outside CUDA graphs
    (`host.py`): `cuda_graph` is the job's (--cuda-graph-impl, --cuda-graph-modules)."""
    impl, modules = cuda_graph
    full = impl == "full_iteration"
    graphed = tuple(modules) if impl in ("local", "transformer_engine") else ()
    op_s = cluster.gpu.host_op_us * 1e-6
    calls = host_calls_s(op_s, model.num_experts / ep, fp8=is_quantized(precision), graphed=graphed, full_iteration=full,
                         expert_bias=model.add_bias_linear)
    return host_exposed_s(calls, pre_gpu_s=pre_gpu_s, post_gpu_s=post_gpu_s, bwd_gpu_s=bwd_gpu_s, host_op_s=op_s,
                          full_iteration=full)


def expert_dp_step_s(cluster: ClusterSpec, expert_params_gpu, edp, ep, etp, zero, grad_bytes: float,
                     param_bytes: float = BF16_BYTES, zero2_gathers_every_microbatch: bool = False, instances: int = 1):
    """(gradient reduction, parameter all-gather) per step of the local experts' `expert_params_gpu`
    parameters over the expert-data-parallel group (edp ranks etp x ep apart, Megatron's expert
    rank order): an all-reduce without the distributed optimizer, else a reduce-scatter and, after
    the sharded optimizer step, an all-gather of the weights (`param_bytes` each: BF16, or FP8 with
    fp8_param_gather, `precision.gathered_param_bytes`). ZeRO-2/3 reduce per micro-batch inside the layer
    (`layer_terms.sharded_terms`); ZeRO-2 gathers the weights once per step, as the dense layer's (`dp_step`); HSDP's
    `instances` add their step-level traffic across the instances (`data_parallel.hsdp_step_s`)."""
    def collective(kind, size):
        return comm.collective_s(kind, size, cluster, edp, etp * ep)

    grads = expert_params_gpu * grad_bytes
    red = np.where(zero == 0, collective("all_reduce", grads),
                   np.where(zero >= 2, 0.0, collective("reduce_scatter", grads)))
    step_gather = (zero == 1) | ((zero == 2) & (not zero2_gathers_every_microbatch))
    group = edp / instances
    hsdp_red, hsdp_gat = hsdp_step_s(cluster, expert_params_gpu, group=group, stride=etp * ep * group,
                                     instances=instances, zero=zero, grad_bytes=grad_bytes)
    return red + hsdp_red, np.where(step_gather, collective("all_gather", expert_params_gpu * param_bytes), 0.0) + hsdp_gat


LAYER_TIME_KEYS = ("compute", "tp", "cp", "zero3", "ep", "offload")


def fold_layers(model: ModelSpec, dense: dict, moe_layer: dict, ends: dict):
    """The coefficients of one pipeline unit (`ModelSpec.pipeline_units`: d dense and m MoE
    layers) and the stage extras with the prefix's layers on the first stage (`ModelSpec.pipeline_prefix`:
    the leading dense layers, and with sparse attention's index sharing the MoE layers up to its first
    boundary). Every cost stays linear in the units a stage holds, so each split searched is priced exactly.
    (The MTP block on the last stage is `mtp.with_mtp`'s, for every model kind.)"""
    _, d_u, m_u, units = model.pipeline_units
    unit = {key: d_u * dense[key] + m_u * moe_layer[key] for key in dense.keys()}
    unit["working"] = np.maximum(dense["working"], moe_layer["working"])
    ends = dict(ends)
    k_dense, k_moe = model.pipeline_prefix
    if k_dense or k_moe:
        pre = {key: k_dense * dense[key] + k_moe * moe_layer[key] for key in dense.keys()}
        ends["first_s"] = ends["first_s"] + sum(pre[x] for x in LAYER_TIME_KEYS)
        ends["first_fwd_s"] = ends["first_fwd_s"] + pre["fwd"]
        ends["first_dp_step_s"] = ends["first_dp_step_s"] + pre["dp_step"]
        ends["first_optimizer_step_s"] = ends["first_optimizer_step_s"] + pre["opt"]
        ends["first_window_s"] = ends["first_window_s"] + pre["window"]
        ends["first_static_bytes"] = ends["first_static_bytes"] + pre["params"] + pre["grads"] + pre["optim"]
        ends["first_act_bytes"] = ends["first_act_bytes"] + pre["act"]
        ends["first_host_bytes"] = ends["first_host_bytes"] + pre["host"]
    return unit, units, ends
