"""One MoE layer's terms in the stage coefficients, and the composition of dense and MoE layers
into pipeline units (`ModelSpec.pipeline_units`) with the first and last stages' extras; called
by `coefficients.stage_coefficients`, whose dense layer they extend (the MoE-specific formulas
are in `moe.py`)."""

from __future__ import annotations

import numpy as np

from ..space.shapes import Shapes
from ..specs import ClusterSpec, ModelSpec
from . import comm
from .data_parallel import hsdp_step_s
from .host import host_calls_s, host_exposed_s
from .kernels import linear_s
from .layer_terms import sharded_terms
from .memory import ADAM_STATE_BYTES, BF16_BYTES, layer_activation_bytes, model_state_bytes_per_param
from .moe import (
    a2a_alone_share,
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
               num_microbatches) -> dict:
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
    - memory: attention's activations (`layer_activation_bytes` without an MLP) plus the MoE
      block's (`moe.moe_mlp_activation_bytes`), none kept under full recomputation (one layer
      rebuilt at a time);
    - selective recomputation by Megatron module (`recompute.py`, `selective`: the job's modules
      and the attention's share from the dense layer): "layernorm" frees the separate norms'
      outputs (the pre-MLP norm, and the attention norm with MLA), "moe_act" the experts'
      activation output, "shared_experts" the shared experts' activations, "moe" the whole
      block (rebuilt one layer at a time, its all-to-alls run again); each adds its forward to
      the backward. A hybrid model's MoE layer (`hybrid.py`): `attention` False, `outer_act` its norm's,
      `host_window` the (forward, backward) GPU time before the sync in place of the attention's."""
    t, c, d = (getattr(shapes, k).astype(np.float64) for k in ("tp", "cp", "dp"))
    ep, etp, rc, z = shapes.ep.astype(np.float64), shapes.etp.astype(np.float64), shapes.recompute, shapes.zero
    mf, mb, gf, gbw = moe_mlp_compute_s(model, M, t, ep, etp, imbalance, mm=mm, bf16=bf16mm, hbm_bytes_per_s=hbm,
                                        cast_bytes=quantize_bytes_per_element(precision),
                                        eager_expert_bias=cuda_graph[0] != "full_iteration")
    a2a, etp_pass = moe_comm_pass_s(model, cluster, M, t, ep, etp, imbalance, dispatcher)
    a2a_gpu = 0.0 if a2a_overlap else a2a  # on the GPU's timeline between the host's calls
    pre_f, pre_b = (attn_fwd, attn_bwd) if host_window is None else host_window
    host_f, host_b = moe_host_s(model, cluster, ep, precision, cuda_graph, pre_gpu_s=pre_f,
                                post_gpu_s=mf + a2a_gpu, bwd_gpu_s=pre_b + mb + a2a_gpu)
    fwd, bwd = attn_fwd + mf + host_f, attn_bwd + mb + host_b
    sel = selective or dict(mods=modules_of(None), attn_s=core_fwd, attn_freed=0.0, attn_working=0.0)
    moe_on = "moe" in sel["mods"]
    sel_s, freed = moe_selective(model, sel, M=M, t=t, ep=ep, etp=etp, imbalance=imbalance, mf=mf + host_f, mm=mm,
                                 act_kw=act_kw, hbm=hbm, precision=precision)
    rfwd = np.where(rc == 2, fwd, np.where(rc == 1, sel_s, 0.0))
    tp_moe = tp_pass / 2 * (attention + bool(model.moe_shared_expert_intermediate_size)) + etp_pass
    if tp_comm_overlap:
        tp_f, tp_b = hidden(tp_moe, attn_gemm_fwd + gf), hidden(tp_moe, attn_gemm_bwd + gbw)
    else:
        tp_f = tp_b = tp_moe
    ne, ex = moe_layer_params_per_gpu(model, t, ep, etp)
    edp, r = t * c * d / (ep * etp), sharding["instances"]  # HSDP: the experts' ZeRO-3 inside r instances of edp
    (pb, gb, ob), (pbe, gbe, obe) = state_bytes, model_state_bytes_per_param(
        z, edp, precision, grad_reduce_dtype, fp8_param_gather, adam_state_bytes, r)
    param_bytes = gathered_param_bytes(precision, fp8_param_gather)
    red_ne, ag_ne = dp_step(ne, param_bytes)
    red_ex, ag_ex = expert_dp_step_s(cluster, ex, edp, ep, etp, z, grad_bytes, param_bytes, sharding["z2_mb"], r)
    zero3, _, live = sharded_terms(sharding, z, params_gpu=ne, experts_gpu=ex, edp=edp / r, expert_stride=etp * ep,
                                fwd=fwd + tp_f, bwd_window=bwd + tp_b + rfwd)
    opt_ex = ex * adam_s_per_param / np.where(z >= 1, edp, 1.0)
    att_act, att_working = layer_activation_bytes(ffn=0, **act_kw) if outer_act is None else outer_act
    moe_block = moe_mlp_activation_bytes(model, M, t, ep, etp, imbalance, act_kw["linear_input_bytes"])
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
                  hbm: float, precision: str):
    """(recomputed forward of Megatron's selective modules, the bytes they free: norm, act, shared) of one
    MoE layer (`recompute.py`; `sel`: the job's modules and the attention's share from the dense layer):
    "layernorm" the separate norms' outputs, "moe_act" the experts' activation output, "shared_experts"
    the shared experts' activations, "moe" the whole block (its forward `mf` again)."""
    mods, lib = sel["mods"], act_kw["linear_input_bytes"]
    h, mats, f_s = model.hidden_size, model.mlp_matrices, model.moe_shared_expert_intermediate_size or 0
    norm_freed, norm_s = norm_recompute(model, mods, True, tokens=M, hidden=h, rep=act_kw["sp_degree"],
                                        linear_input_bytes=lib, hbm=hbm)
    _, copies = routed_tokens(model, M / t, ep, etp, imbalance)
    f_l = model.moe_ffn_hidden_size / etp
    act_on, shared_on, moe_on = ("moe_act" in mods), ("shared_experts" in mods and f_s > 0), ("moe" in mods)
    act_s = act_on * copies * f_l * (BF16_BYTES * mats + quantize_bytes_per_element(precision)) / hbm
    shared_s = 0.0
    if shared_on:
        for N, K in (((mats - 1) * f_s / t, h), (h, f_s / t)):
            shared_s = shared_s + linear_s(M, N, K, **mm)[0]
    sel_s = sel["attn_s"] + norm_s + np.where(moe_on, mf, act_s + shared_s)
    return sel_s, dict(norm=norm_freed, act=act_on * copies * f_l * lib, shared=shared_on * M * BF16_BYTES * mats * f_s / t)


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
