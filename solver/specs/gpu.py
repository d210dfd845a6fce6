"""GPU type: datasheet peaks plus the efficiency parameters of the formulation
(solveplan.formulation.compute documents how each is used)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, PositiveFloat

from .base import Spec
from .units import GIB


class GPUSpec(Spec):
    name: str
    peak_bf16_tflops: PositiveFloat = Field(description="dense BF16/FP16 tensor-core peak, TFLOP/s")
    peak_fp8_tflops: Optional[PositiveFloat] = Field(None, description="dense FP8 peak, TFLOP/s, where it exists")
    hbm_gib: PositiveFloat
    hbm_gbyte_per_s: PositiveFloat = Field(description="HBM bandwidth, GB/s (10^9 B/s)")
    # Formulation parameters (fitted: see `source`/`fit_notes`).
    matmul_efficiency: float = Field(0.75, gt=0, le=1, description="attained fraction of peak for large GEMMs")
    attention_efficiency: float = Field(0.5, gt=0, le=1, description="attained fraction of peak for the attention core")
    hbm_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of HBM bandwidth for memory-bound work")
    layer_overhead_us: float = Field(0.0, ge=0, description="fixed per-layer, per-pass time (kernel launches), microseconds")
    runtime_reserve_gib: float = Field(2.0, ge=0, description="CUDA context + NCCL buffers per GPU, GiB")
    runtime_reserve_fraction: float = Field(0.05, ge=0, lt=1, description="allocator fragmentation, fraction of HBM")
    source: str = "user supplied"
    fit_notes: Optional[str] = None

    @property
    def peak_flop_per_s(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbyte_per_s * 1e9

    @property
    def usable_memory_bytes(self) -> float:
        """HBM left for parameters, optimizer state and activations after the runtime reserve."""
        return self.hbm_bytes * (1.0 - self.runtime_reserve_fraction) - self.runtime_reserve_gib * GIB
