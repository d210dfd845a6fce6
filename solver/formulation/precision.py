"""What a precision recipe costs: the GEMM rate, the quantisation traffic and the weight copies
(one table, read by `coefficients.py` and `memory.py`; the recipes are listed in specs/job.py).

- **GEMM rate.** BF16/FP16 GEMMs run at the dense BF16 peak times `matmul_efficiency`. Every FP8
  recipe runs its linear-layer GEMMs at the dense FP8 peak (datasheets: MXFP8 at the FP8/FP6 rate on
  Blackwell and CDNA 4; blockwise FP8 is FP8 tensor-core MMA with per-block scales applied in the
  epilogue / promotion, DeepSeek-V3 report Sec. 3.3) times that recipe's efficiency
  (`GPUSpec.fp8_efficiency`: fitted per recipe where published rows exist). Attention and the LM
  head stay in BF16 (Transformer Engine's default: fp8_dot_product_attention off, the output layer
  is not a TE FP8 module unless fp8_output_proj).
- **Quantisation traffic** (`quantize_bytes_per_element`), per element of a GEMM input (forward:
  the activation; backward: the output gradient), memory-bound at HBM bandwidth. Transformer
  Engine quantises each input once for its row-wise use and once column-wise (the transposed
  operand of the weight-gradient GEMM) in one fused kernel: read BF16 (2) + write 1 + 1.
  - fp8 (delayed scaling): 4; the scale comes from the amax history, computed in the same kernel.
  - fp8-tensorwise (current scaling): 6: the amax of the tensor must be known before the cast, so
    the input is read once more (2) (TE Float8CurrentScaling: amax kernel, then cast-transpose).
  - fp8-blockwise: 4 + an fp32 scale per 128 elements in each of the two layouts (2 x 4/128):
    4.0625 (TE Float8BlockScaling, 1x128 activation and 128x128 weight blocks).
  - mxfp8: 4 + an E8M0 (1-byte) scale per 32 elements in each layout (2 x 1/32): 4.0625 (OCP MX
    spec v1.0: block of 32, E8M0 shared scale).
- **Weight copies** (`weight_copy_bytes_per_param`): Megatron keeps the BF16 weight (no
  --fp8-param-gather) and TE caches its FP8 copy in both layouts for the iteration: 2 bytes per
  parameter, plus the scales: mxfp8 2/32, blockwise 2 x 4/16384 (negligible), per-tensor none.
  With `--fp8-param-gather` (Megatron's FP8 primary weights: TE modules built under
  `fp8_model_init`, the weights are quantised tensors cast from the fp32 master copy) the BF16 weight
  is not kept (megatron/core/distributed/param_and_grad_buffer.py at d98e8a6: the DDP parameter buffer
  holds FP8 parameters as uint8; with `--reuse-grad-buf-for-mxfp8-param-ag` MXFP8 parameters have no
  parameter buffer, their all-gather is staged in the gradient buffer): the FP8 copies alone
  (`weight_bytes_per_param`). The distributed optimizer then gathers 1-byte FP8 weights, except MXFP8,
  whose BF16 weights are gathered and quantised after (Megatron-Core MoE README, "FP8 Training":
  "50% parameter all-gather, with FP8 primary weights (except MXFP8)"): `gathered_param_bytes`.
- **Saved activations** (`saved_linear_input_bytes`): a TE linear layer under FP8 saves for backward
  the quantised copy of its input that the weight-gradient GEMM reads (transformer_engine/pytorch/
  module/linear.py and layernorm_linear.py: `saved_inputmat` is the FP8 tensor when FP8 is on):
  1 byte per element instead of 2 for the inputs of QKV, the attention projection, fc1 and fc2
  (memory.layer_activation_bytes); the other saved tensors stay BF16.
"""

from __future__ import annotations

from ..specs import FP8_RECIPES, GPUSpec

BF16_BYTES = 2
QUANTIZE_BYTES_PER_ELEMENT = {
    "fp8": 4.0,
    "fp8-tensorwise": 6.0,
    "fp8-blockwise": 4.0 + 2 * 4.0 / 128,
    "mxfp8": 4.0 + 2 * 1.0 / 32,
}
WEIGHT_COPY_BYTES_PER_PARAM = {
    "fp8": 2.0,
    "fp8-tensorwise": 2.0,
    "fp8-blockwise": 2.0 + 2 * 4.0 / (128 * 128),
    "mxfp8": 2.0 + 2 * 1.0 / 32,
}


def is_fp8(precision: str) -> bool:
    """Any FP8 recipe (its linear GEMMs run at the FP8 peak)."""
    return precision in FP8_RECIPES


def matmul_rate(gpu: GPUSpec, precision: str, hbm_bytes_per_s: float) -> dict:
    """Keyword arguments of `kernels.gemm_s` for the linear-layer GEMMs under `precision`."""
    if is_fp8(precision):
        assert gpu.peak_fp8_tflops is not None  # JobSpec refuses an FP8 recipe on a GPU without an FP8 peak
        return dict(flop_per_s=gpu.peak_fp8_tflops * 1e12, efficiency=gpu.fp8_efficiency(precision),
                    num_sms=gpu.num_sms, hbm_bytes_per_s=hbm_bytes_per_s, in_bytes=1)
    return dict(flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency, num_sms=gpu.num_sms,
                hbm_bytes_per_s=hbm_bytes_per_s)


def quantize_bytes_per_element(precision: str) -> float:
    """HBM bytes to quantise one element of a GEMM input (0 without FP8)."""
    return QUANTIZE_BYTES_PER_ELEMENT.get(precision, 0.0)


def weight_copy_bytes_per_param(precision: str) -> float:
    """Extra bytes per parameter of the FP8 weight copies (0 without FP8)."""
    return WEIGHT_COPY_BYTES_PER_PARAM.get(precision, 0.0)


def weight_bytes_per_param(precision: str, fp8_param_gather: bool = False) -> float:
    """Bytes per parameter of the weights a layer keeps: BF16 plus the recipe's FP8 copies, or with
    fp8_param_gather the FP8 copies alone (module docstring)."""
    copies = weight_copy_bytes_per_param(precision)
    return copies if fp8_param_gather and is_fp8(precision) else BF16_BYTES + copies


def gathered_param_bytes(precision: str, fp8_param_gather: bool = False) -> float:
    """Bytes per parameter of the distributed optimizer's parameter all-gather: BF16, or FP8 (1) with
    fp8_param_gather under a recipe other than MXFP8 (module docstring)."""
    return 1.0 if fp8_param_gather and is_fp8(precision) and precision != "mxfp8" else float(BF16_BYTES)


def peak_flop_per_s(gpu: GPUSpec, precision: str) -> float:
    """The peak MFU is measured against: FP8 for an FP8 recipe, else BF16."""
    if is_fp8(precision):
        assert gpu.peak_fp8_tflops is not None  # JobSpec refuses an FP8 recipe on a GPU without an FP8 peak
        return gpu.peak_fp8_tflops * 1e12
    return gpu.peak_flop_per_s


def saved_linear_input_bytes(precision: str) -> float:
    """Bytes per element of a linear layer's input saved for backward (1 under FP8, else 2)."""
    return 1.0 if is_fp8(precision) else float(BF16_BYTES)
