"""GPU type: datasheet peaks plus the efficiency parameters of the formulation
(solveplan.formulation.compute documents how each is used)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_serializer, field_validator

from .base import Name, Spec
from .units import GIB

# Architectures whose tensor cores scale blocks of 32 elements in hardware (OCP microscaling,
# MXFP8/MXFP4): NVIDIA Blackwell (5th-generation tensor cores, `tcgen05` block-scaled MMA) and
# AMD CDNA 4 (MI350 series, "MXFP8/MXFP6/MXFP4" in the CDNA 4 whitepaper). Hopper and CDNA 3
# have FP8 with per-tensor scales only.
MX_ARCHITECTURES = ("blackwell", "cdna4")
ROCM_ARCHITECTURES = ("cdna3", "cdna4")
Architecture = Literal["volta", "ampere", "hopper", "blackwell", "cdna3", "cdna4"]


class GPUSpec(Spec):
    name: Name
    architecture: Architecture | None = Field(
        None, description="GPU architecture: which precision recipes it runs (MXFP8 on blackwell/cdna4) and whether "
                          "it runs CUDA or ROCm (cdna3/cdna4)")
    peak_bf16_tflops: PositiveFloat = Field(description="dense BF16/FP16 tensor-core peak, TFLOP/s")
    peak_fp8_tflops: PositiveFloat | None = Field(
        None, description="dense FP8 peak, TFLOP/s, where it exists (MXFP8 and blockwise FP8 run at this rate)")
    peak_fp4_tflops: PositiveFloat | None = Field(
        None, description="dense FP4 (NVFP4/MXFP4) peak, TFLOP/s, where the datasheet gives it: the rate of the "
                          "nvfp4 recipe's GEMMs (formulation/precision.py)")
    hbm_gib: PositiveFloat
    hbm_gbyte_per_s: PositiveFloat = Field(description="HBM bandwidth, GB/s (10^9 B/s)")
    num_sms: int = Field(108, gt=0, description="streaming multiprocessors (compute units): wave quantisation of GEMMs")
    sfu_tops: PositiveFloat = Field(
        2.4, description="exponentials per second of the special-function units, 10^12/s (16 per SM per clock)")
    exp_overlaps_matmul: bool = Field(
        False, description="asynchronous tensor cores (Hopper+): fused attention overlaps softmax and matmul")
    # Formulation parameters (fitted: see `source`/`fit_notes`).
    matmul_efficiency: float = Field(0.75, gt=0, le=1, description="attained fraction of peak of large BF16 GEMMs")
    fp8_matmul_efficiency: float | None = Field(
        None, gt=0, le=1, description="attained fraction of the FP8 peak of large FP8 GEMMs (default: matmul_efficiency)")
    mxfp8_matmul_efficiency: float | None = Field(
        None, gt=0, le=1, description="the same for MXFP8 GEMMs (default: fp8_matmul_efficiency)")
    fp8_blockwise_matmul_efficiency: float | None = Field(
        None, gt=0, le=1, description="the same for blockwise-scaled FP8 GEMMs (default: fp8_matmul_efficiency)")
    nvfp4_matmul_efficiency: float | None = Field(
        None, gt=0, le=1, description="attained fraction of the FP4 peak of large NVFP4 GEMMs (default, the prior: the "
                                      "fraction of the FP8 peak MXFP8 GEMMs reach on this chip, `fp4_efficiency`)")
    attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="attained fraction of peak of the attention matmuls, fused (cuDNN) kernel "
                                      "(default: matmul_efficiency: tensor-core kernels of the same generation)")
    fp8_attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="attained fraction of the FP8 peak of the fused attention's matmuls under "
                                      "fp8_dot_product_attention (default: attention_efficiency, the BF16 kernel's "
                                      "fraction of its peak: a prior, no FP8 SDPA timing behind it)")
    flash2_attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="the same for FlashAttention-2 (default: the fused kernel's); on Hopper "
                                      "FlashAttention-2 cannot use the asynchronous tensor cores")
    flash1_attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="the same for the FlashAttention-1 generation: the CUDA v1 kernel and its "
                                      "Triton port (flash_attn_triton.py; llm-foundry attn_impl: triton), which "
                                      "Dao 2023 puts at 25-40% of the A100's peak against FlashAttention-2's 50-73% "
                                      "(default: FlashAttention-2's)")

    masked_attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="attained fraction of peak of PyTorch SDPA's kernel given an explicit mask (an "
                                      "additive bias over the whole s x s, no causal skipping: transformers' "
                                      "sliding-window layers); default: the FlashAttention-2 efficiency")
    masked_attention_efficiency_by_head_dim: tuple[tuple[PositiveInt, Annotated[float, Field(gt=0, le=1)]], ...] | None = (
        Field(None, description="the same per head dimension, where it was measured at several (the kernel's rate "
                                "differs by head dimension more than by sequence length: benchmarks/sdpa_masked_sweep.py), "
                                "a mapping {head_dim: efficiency}; a head dimension not listed takes the nearest listed "
                                "one's; overrides masked_attention_efficiency"))

    @field_validator("masked_attention_efficiency_by_head_dim", mode="before")
    @classmethod
    def _head_dim_pairs(cls, value):
        """A mapping {head_dim: efficiency} (as a GPU file writes it) becomes sorted pairs: a spec stays hashable."""
        return tuple(sorted(value.items())) if isinstance(value, dict) else value

    @field_serializer("masked_attention_efficiency_by_head_dim")
    def _head_dim_mapping(self, pairs):
        """Written back as the mapping a GPU file states (YAML has no tuples)."""
        return dict(pairs) if pairs is not None else None

    @property
    def fused_attention_efficiency(self) -> float:
        return self.attention_efficiency or self.matmul_efficiency

    @property
    def flash1_attention_rate(self) -> float:
        """`flash1_attention_efficiency`, else FlashAttention-2's, else the fused kernel's."""
        return self.flash1_attention_efficiency or self.flash2_attention_efficiency or self.fused_attention_efficiency

    def masked_attention_rate(self, head_dim: float) -> float:
        """`masked_attention_efficiency_by_head_dim` at the nearest listed head dimension (the smaller on a
        tie), else `masked_attention_efficiency`, else FlashAttention-2's (a kernel off Hopper's asynchronous
        pipeline), else the fused kernel's."""
        if self.masked_attention_efficiency_by_head_dim:
            rates = dict(self.masked_attention_efficiency_by_head_dim)
            return rates[min(rates, key=lambda dim: (abs(dim - head_dim), dim))]
        return self.masked_attention_efficiency or self.flash2_attention_efficiency or self.fused_attention_efficiency
    hbm_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of HBM bandwidth for memory-bound work")
    layer_overhead_us: float = Field(0.0, ge=0, description="fixed per-layer, per-pass time (kernel launches), microseconds")
    sharded_layer_overhead_us: float = Field(
        0.0, ge=0, description="extra per-layer, per-pass time of ZeRO-2/3 (FSDP) sharding: the unshard/reshard "
                               "hooks, allocations and stream waits around every layer, microseconds")
    host_op_us: float = Field(
        20.0, ge=0, description="host (CPU) time of one eager PyTorch op on this GPU's system (Python, dispatch "
                                "and launch), microseconds; a Transformer Engine module call costs "
                                "formulation/host.py's TE_CALL_OPS of them; prices the host-bound part of MoE "
                                "layers outside CUDA graphs. Default: NVIDIA's measured launch latency of one "
                                "PyTorch op, about 20 us (NVIDIA Technical Blog, 'Understanding the Visualization "
                                "of Overhead and Latency in Nsight Systems'); the catalog's systems: Transformer "
                                "Engine issue #2053 (x86 DGX 13.48 us, Grace 37.08 us)")
    host_link_gbyte_per_s: PositiveFloat | None = Field(
        None, description="GPU-to-host (CPU memory) bandwidth per direction per GPU, GB/s (10^9 B/s), when every "
                          "GPU of a node copies at once: the rate of Megatron's layer-level activation offloading "
                          "(--cpu-offloading-num-layers; formulation/offload.py). x86 hosts: the GPU's PCIe link "
                          "(Gen5 x16 64, Gen4 x16 32, Gen3 x16 16); Grace superchips: NVLink-C2C shared by the "
                          "Grace's GPUs, or the Grace's LPDDR5X where that is slower. None: not stated (a job "
                          "that offloads is then refused, naming this field)")
    runtime_reserve_gib: float = Field(
        1.5, ge=0, description="CUDA context and cuBLAS/cuDNN workspaces per GPU, GiB (added to every stage, with "
                               "NCCL's buffers per communicator: formulation/memory.py)")
    runtime_reserve_fraction: float = Field(
        0.08, ge=0, lt=1, description="allocator fragmentation: reserved over allocated memory, fraction (added to every stage)")
    tdp_watts: PositiveFloat | None = Field(
        None, description="board power limit (TDP) from the datasheet, W: `optimize` reports energy at this power "
                          "(an upper bound of the GPUs' draw; hosts, NICs and cooling not counted); optional")
    source: str = "user supplied"
    fit_notes: str | None = None
    efficiencies_assumed_from: str | None = Field(
        None, description="the GPU whose fitted efficiencies this one borrows (no published rows of its own); every "
                          "plan on it says so")

    @property
    def is_rocm(self) -> bool:
        """AMD Instinct: ROCm, RCCL and Transformer Engine's ROCm build instead of CUDA/NCCL/cuDNN."""
        return self.architecture in ROCM_ARCHITECTURES

    @property
    def has_mx_formats(self) -> bool:
        """Hardware block scaling (MXFP8) in the tensor cores."""
        return self.architecture in MX_ARCHITECTURES

    def fp8_efficiency(self, recipe: str) -> float:
        """Attained fraction of the FP8 peak of a large GEMM under `recipe` (fp8 / fp8-blockwise / mxfp8)."""
        base = self.fp8_matmul_efficiency or self.matmul_efficiency
        if recipe == "mxfp8":
            return self.mxfp8_matmul_efficiency or base
        if recipe == "fp8-blockwise":
            return self.fp8_blockwise_matmul_efficiency or base
        return base

    def fp4_efficiency(self) -> float:
        """Attained fraction of the FP4 peak of a large NVFP4 GEMM: the fitted `nvfp4_matmul_efficiency`, or
        by one rule the same fraction of the FP4 peak as the chip's MXFP8 GEMMs reach of the FP8 peak (both are
        block-scaled tcgen05 MMAs of Blackwell at the datasheet rate of their format; no row informs it)."""
        return self.nvfp4_matmul_efficiency or self.fp8_efficiency("mxfp8")

    def assumption(self) -> str | None:
        """What a plan on this GPU must say about its efficiencies, or None when they are fitted."""
        if self.efficiencies_assumed_from:
            return (f"efficiencies of {self.name} assumed from {self.efficiencies_assumed_from}'s fit (no published "
                    f"rows for {self.name}); calibrate with `solveplan calibrate` on your own runs")
        return None

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
