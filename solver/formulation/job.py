"""The formulation applied to a `JobSpec`: its coefficients, and a step time's throughput and
MFU (Narayanan et al. 2021: MFU = model FLOPs / (T N peak))."""

from __future__ import annotations

from dataclasses import dataclass

from ..space.shapes import Shapes
from ..specs import JobSpec, require_uniform
from .coefficients import StageCoefficients, stage_coefficients
from .flops import hardware_flop_per_step, model_flop_per_step


def job_coefficients(job: JobSpec, shapes: Shapes) -> StageCoefficients:
    """The coefficients of `shapes` on the job's cluster, which must have one GPU type (a mixed
    cluster is priced pool by pool: `ClusterSpec.pool_views`)."""
    return stage_coefficients(
        job.model, require_uniform(job.cluster), shapes,
        global_batch_size=job.global_batch_size, seq_length=job.seq_length,
        precision=job.precision, flash_attention=job.flash_attention, attention_kernel=job.attention_kernel,
        grad_reduce_dtype=job.grad_reduce_dtype, overlap_grad_reduce=job.overlap_grad_reduce,
        tp_comm_overlap=job.tp_comm_overlap,
    )


@dataclass
class Throughput:
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float


def throughput(job: JobSpec, step_time_s: float, recompute_code: int) -> Throughput:
    n = job.cluster.num_gpus
    mf = model_flop_per_step(job.model, job.global_batch_size, job.seq_length)
    hf = float(hardware_flop_per_step(job.model, job.global_batch_size, job.seq_length, recompute_code))
    peak = job.cluster.gpu.peak_fp8_tflops * 1e12 if job.precision == "fp8" else job.cluster.gpu.peak_flop_per_s
    return Throughput(
        tokens_per_s=job.tokens_per_step / step_time_s,
        model_tflops_per_gpu=mf / step_time_s / n / 1e12,
        hardware_tflops_per_gpu=hf / step_time_s / n / 1e12,
        mfu=mf / (step_time_s * n * peak),
    )

