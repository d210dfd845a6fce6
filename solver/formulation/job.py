"""The formulation applied to a `JobSpec`: coefficients, FLOPs and one configuration's
evaluation with throughput and MFU (Narayanan et al. 2021: MFU = model FLOPs / (T N peak))."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import JobSpec
from .coefficients import StageCoefficients, stage_coefficients
from .evaluate import Evaluation, balanced_split, evaluate_split
from .flops import hardware_flop_per_step, model_flop_per_step
from .shapes import Shapes


def job_coefficients(job: JobSpec, shapes: Shapes) -> StageCoefficients:
    return stage_coefficients(
        job.model, job.cluster, shapes,
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


def evaluate_shape(job: JobSpec, shapes: Shapes, index: int = 0, layers=None) -> Evaluation:
    """Evaluate one shape of `shapes` with `layers` (default: the balanced split)."""
    co = job_coefficients(job, shapes.take(index))
    if layers is None:
        layers = balanced_split(job.model.num_layers, int(shapes.pp[index]))
    return evaluate_split(co, 0, np.asarray(layers))
