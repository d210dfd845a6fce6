"""The formulation applied to a `JobSpec`: its coefficients, the shapes another shape dominates,
and a step time's throughput and MFU (Narayanan et al. 2021: MFU = model FLOPs / (T N peak); FLOPs
in the reported convention, `flops.FLOP_CONVENTION`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..space.shapes import Shapes
from ..specs import JobSpec, require_uniform
from .coefficients import StageCoefficients, stage_coefficients
from .data_parallel import distributed_optimizer_dominates
from .flops import reported_flop_per_step
from .memory import adam_state_bytes_per_param
from .offload import with_offload
from .precision import is_fp4, is_fp8, peak_flop_per_s


def job_coefficients(job: JobSpec, shapes: Shapes) -> StageCoefficients:
    """The coefficients of `shapes` on the job's cluster, which must have one GPU type (a mixed
    cluster is priced pool by pool: `ClusterSpec.pool_views`), with the job's activation offloading: module by module
    (`fine_offload.py`, inside the layers' terms) or Megatron's layer-level CPU offloading (`offload.with_offload`)."""
    cluster = require_uniform(job.cluster)
    co = stage_coefficients(
        job.model, cluster, shapes,
        global_batch_size=job.global_batch_size, seq_length=job.seq_length,
        precision=job.precision, flash_attention=job.flash_attention, attention_kernel=job.attention_kernel,
        grad_reduce_dtype=job.grad_reduce_dtype, overlap_grad_reduce=job.overlap_grad_reduce,
        tp_comm_overlap=job.tp_comm_overlap, moe_load_imbalance=job.moe_load_imbalance,
        moe_a2a_overlap=job.moe_a2a_overlap, moe_token_dispatcher=job.moe_token_dispatcher, framework=job.framework,
        recompute_modules=job.recompute_modules, fp8_param_gather=job.fp8_param_gather,
        cuda_graph_impl=job.cuda_graph_impl, cuda_graph_modules=job.cuda_graph_modules,
        fp8_attention=job.fp8_dot_product_attention,
        bf16_layers=(job.bf16_layers_at_start, job.bf16_layers_at_end),
        adam_state_bytes=adam_state_bytes_per_param(job.precision, job.precision_aware_optimizer,
                                                    job.optimizer_moment_dtype),
        offload_modules=job.offload_modules, zero3_gathers=job.zero3_gathers,
        distributed_optimizer_instances=job.distributed_optimizer_instances,
        min_offloaded_tensor_size=job.min_offloaded_tensor_size,
        lora=(job.lora_rank, tuple(job.lora_target_modules)) if job.peft == "lora" else None,
        module_precision=job.module_precision,
    )
    # Megatron's CPU activation offloading (dense models, pp 1: specs.job.cpu_offload_problem)
    return with_offload(co, job.model.num_layers, job.cpu_offloading_num_layers, cluster.gpu.host_link_gbyte_per_s)


def zero0_dominated(job: JobSpec, shapes: Shapes) -> np.ndarray:
    """Which shapes are dominated, exactly under the formulation: plain data parallelism
    (zero=0, dp*cp > 1) where the distributed optimizer (zero=1, every other knob the same,
    always legal there) is no slower (`distributed_optimizer_dominates`) and needs less memory.
    Only when the user left the ZeRO knob free, and not under LoRA (its DP traffic is the adapters', which that
    rule does not price). (Sequence parallelism does NOT dominate: it
    shortens the backward that hides the data-parallel reduction; a property test found the
    counterexample.)"""
    out = np.zeros(len(shapes), dtype=bool)
    rows = np.flatnonzero((shapes.zero == 0) & (shapes.dp * shapes.cp > 1))
    if job.constraints.zero is not None or not len(rows) or job.peft != "none":  # LoRA reduces its adapters only
        return out
    degrees = [shapes.tp[rows], shapes.cp[rows], shapes.dp[rows], shapes.pp[rows] > 1, shapes.ep[rows], shapes.etp[rows]]
    order = np.lexsort(degrees)  # the rule depends on the degrees only: evaluate once per combination
    new = np.ones(len(rows), dtype=bool)
    new[1:] = np.any([d[order][1:] != d[order][:-1] for d in degrees], axis=0)
    first = order[new]
    tp, cp, dp, pipelined, ep, etp = (d[first] for d in degrees)
    beats = distributed_optimizer_dominates(job.model, job.cluster, tp, cp, dp, np.where(pipelined, 2, 1),
                                            precision=job.precision, grad_reduce_dtype=job.grad_reduce_dtype,
                                            ep=ep, etp=etp, fp8_param_gather=job.fp8_param_gather)
    out[rows[order]] = beats[np.cumsum(new) - 1]
    return out


@dataclass
class Throughput:
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float


def throughput(job: JobSpec, step_time_s: float, recompute_code: int) -> Throughput:
    n = job.cluster.num_gpus
    mf, hf = reported_flop_per_step(job.model, job.global_batch_size, job.seq_length, recompute_code, job.framework,
                                    frozen_weights=job.peft == "lora")
    peak = peak_flop_per_s(job.cluster.gpu, job.precision)
    return Throughput(
        tokens_per_s=job.tokens_per_step / step_time_s,
        model_tflops_per_gpu=mf / step_time_s / n / 1e12,
        hardware_tflops_per_gpu=hf / step_time_s / n / 1e12,
        mfu=mf / (step_time_s * n * peak),
    )



def job_assumptions(job: JobSpec) -> list[str]:
    """What the job's prediction assumes instead of fitting, to be said in every plan (table and
    JSON): a GPU whose efficiencies are borrowed from another GPU's fit, and an FP8 recipe whose
    own GEMM efficiency is not fitted on that GPU (its per-tensor FP8 efficiency is used)."""
    out: list[str] = []
    for pool in job.cluster.pool_specs():
        gpu = pool.gpu
        for line in (gpu.assumption(), _recipe_assumption(gpu, job.precision)):
            if line and line not in out:
                out.append(line)
    if job.model.is_moe and job.bf16_layers_at_start + job.bf16_layers_at_end:
        out.append(f"{job.bf16_layers_at_start + job.bf16_layers_at_end} layers kept in BF16 priced with the dense "
                   f"layer's linears at the BF16 rate (layer_terms.bf16_layer_extra_s); their experts' BF16 GEMMs "
                   f"are not priced")
    return out


def _recipe_assumption(gpu, precision: str):
    if is_fp4(precision) and gpu.nvfp4_matmul_efficiency is None:
        return (f"nvfp4 GEMM efficiency of {gpu.name} not fitted: the fraction of the FP4 peak is its MXFP8 "
                f"efficiency {gpu.fp4_efficiency():.3g} of the FP8 peak (GPUSpec.fp4_efficiency)")
    own = {"mxfp8": gpu.mxfp8_matmul_efficiency, "fp8-blockwise": gpu.fp8_blockwise_matmul_efficiency}
    if is_fp8(precision) and precision in own and own[precision] is None:
        return (f"{precision} GEMM efficiency of {gpu.name} not fitted: its per-tensor FP8 efficiency "
                f"{gpu.fp8_efficiency('fp8'):.3g} is used")
    return None
