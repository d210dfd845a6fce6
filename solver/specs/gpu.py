"""GPU type: datasheet peaks plus the efficiency parameters of the formulation
(solveplan.formulation.compute documents how each is used)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, PositiveFloat

from .base import Name, Spec
from .units import GIB


class GPUSpec(Spec):
    name: Name
    peak_bf16_tflops: PositiveFloat = Field(description="dense BF16/FP16 tensor-core peak, TFLOP/s")
    peak_fp8_tflops: Optional[PositiveFloat] = Field(None, description="dense FP8 peak, TFLOP/s, where it exists")
    hbm_gib: PositiveFloat
    hbm_gbyte_per_s: PositiveFloat = Field(description="HBM bandwidth, GB/s (10^9 B/s)")
    num_sms: int = Field(108, gt=0, description="streaming multiprocessors (compute units): wave quantisation of GEMMs")
    sfu_tops: PositiveFloat = Field(
        2.4, description="exponentials per second of the special-function units, 10^12/s (16 per SM per clock)")
    exp_overlaps_matmul: bool = Field(
        False, description="asynchronous tensor cores (Hopper+): fused attention overlaps softmax and matmul")
    # Formulation parameters (fitted: see `source`/`fit_notes`).
    matmul_efficiency: float = Field(0.75, gt=0, le=1, description="attained fraction of peak of large BF16 GEMMs")
    fp8_matmul_efficiency: Optional[float] = Field(
        None, gt=0, le=1, description="attained fraction of the FP8 peak of large FP8 GEMMs (default: matmul_efficiency)")
    attention_efficiency: Optional[float] = Field(
        None, gt=0, le=1, description="attained fraction of peak of the attention matmuls, fused (cuDNN) kernel "
                                      "(default: matmul_efficiency: tensor-core kernels of the same generation)")
    flash2_attention_efficiency: Optional[float] = Field(
        None, gt=0, le=1, description="the same for FlashAttention-2 (default: the fused kernel's); on Hopper "
                                      "FlashAttention-2 cannot use the asynchronous tensor cores")

    @property
    def fused_attention_efficiency(self) -> float:
        return self.attention_efficiency or self.matmul_efficiency
    hbm_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of HBM bandwidth for memory-bound work")
    layer_overhead_us: float = Field(0.0, ge=0, description="fixed per-layer, per-pass time (kernel launches), microseconds")
    sharded_layer_overhead_us: float = Field(
        0.0, ge=0, description="extra per-layer, per-pass time of ZeRO-2/3 (FSDP) sharding: the unshard/reshard "
                               "hooks, allocations and stream waits around every layer, microseconds")
    runtime_reserve_gib: float = Field(
        1.5, ge=0, description="CUDA context and cuBLAS/cuDNN workspaces per GPU, GiB (added to every stage, with "
                               "NCCL's buffers per communicator: formulation/memory.py)")
    runtime_reserve_fraction: float = Field(
        0.08, ge=0, lt=1, description="allocator fragmentation: reserved over allocated memory, fraction (added to every stage)")
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
        """What a stage's memory estimate may reach: the whole HBM, since the estimate already
        holds the runtime reserve and the allocator's fragmentation (formulation/memory.py)."""
        return self.hbm_bytes
