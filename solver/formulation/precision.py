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

**NVFP4** (Transformer Engine's NVFP4BlockScaling, transformer_engine/common/recipe/__init__.py:489-609
at d0067d0; Megatron-LM `--fp4-format e2m1`, megatron/core/fp4_utils.py). All three GEMMs of a TE
linear layer (fprop, dgrad, wgrad) take FP4 (E2M1) operands: fprop reads `fp4_quant_fwd_inp` x
`fp4_quant_fwd_weight`, dgrad the gradient x weight, wgrad the gradient x input, each quantised by
its QParams (recipe lines 596-609). Each FP4 value is 0.5 byte; "each group of 16 consecutive
values is scaled together" by an E4M3 (1-byte) scale, plus one FP32 per tensor (recipe docstring).
- GEMM rate: the dense FP4 peak (`GPUSpec.peak_fp4_tflops`) times `GPUSpec.fp4_efficiency()`;
  operands of 0.5 byte in the GEMM's own traffic (`in_bytes`).
- Quantisation traffic per element of a GEMM input (activation forward, output gradient backward):
  TE needs the tensor's row-wise form (fprop / dgrad) and its column-wise form (wgrad), each computed
  from the BF16 input ("both versions are computed from the high precision input", recipe docstring);
  the column-wise form of inputs and gradients passes a 16x16 random Hadamard transform first
  (`random_hadamard_transform=not disable_rht`, lines 598 and 606: "RHT is currently only applied to
  column-wise usage so that it can be used for wgrad GEMM"), and the per-tensor FP32 scale needs the
  amax of the input and of its transform before any cast (NVFP4Quantizer `with_rht`,
  `with_post_rht_amax`, transformer_engine/pytorch/tensor/nvfp4_tensor.py:119-162). Counted: one
  read for the amaxes (2), one read per layout for the two casts (2 + 2), and each layout written as
  0.5 + 1/16 (E4M3 scale per 16): 7.125 bytes. Stochastic rounding of the gradients (line 607) is
  computed in the cast kernel: no traffic of its own.
- Weight copies: the weight is quantised with one E4M3 scale per 16x16 block
  (`fp4_2d_quantization`, line 603) and cached in both layouts: 2 x (0.5 + 1/256) bytes per
  parameter; with `--fp4-param-gather` (Megatron-Bridge's bf16_with_nvfp4_mixed sets
  fp4_param_gather = True) the NVFP4 weights alone, and the distributed optimizer gathers them as
  native NVFP4 (megatron/training/arguments.py:1516-1520 at d98e8a6): 0.5 + 1/256 bytes per parameter.
- Saved activations: the wgrad GEMM reads the column-wise (Hadamard-transformed) NVFP4 copy of the
  input, which is what the layer saves: 0.5 + 1/16 bytes per element.
- Layers kept in BF16 (`--first-last-layers-bf16`, `--num-layers-at-start-in-bf16`, `--num-layers-at-
  end-in-bf16`; megatron/core/fp4_utils.py:250-262 builds those layers without the FP4 recipe): their
  linear GEMMs at the BF16 rate without casts, priced per layer as an extra of the first / last
  pipeline stage (`bf16_layer_extra_s`).
- The MTP block (`mtp.py`): Megatron-LM runs eh_proj, and a Transformer model's MTP layer, without FP4
  (multi_token_prediction.py:1384-1402 at d98e8a6 enters only the FP8 recipe's autocast; an NVFP4 job
  has no FP8 recipe, transformer_config.py:1581-1582): those are priced at BF16 (`mtp_linear_precision`);
  a hybrid model's MTP layers run NVFP4 like its decoder's (hybrid_block.py:339-402 enters the FP4
  context per layer).
"""

from __future__ import annotations

from ..specs import FP4_RECIPES, FP8_RECIPES, GPUSpec

BF16_BYTES = 2
FP4_BYTES = 0.5  # E2M1
NVFP4_SCALE_BYTES = 1.0 / 16  # one E4M3 scale per 16 elements (1D blocks: activations, gradients)
NVFP4_WEIGHT_SCALE_BYTES = 1.0 / 256  # one E4M3 scale per 16x16 block (2D weight quantisation)
NVFP4_PER_ELEMENT = FP4_BYTES + NVFP4_SCALE_BYTES
# (bytes read once, bytes per layout) to quantise one BF16 element (module docstring): the cast reads the
# input (current scaling and NVFP4 read it once more for the amax; NVFP4 reads it once per layout), and each
# layout writes the quantised value and its share of the scales. A GEMM input takes two layouts (row- and
# column-wise); an FP8 attention tensor one (`layer_terms.fp8_attention_cast_s`).
QUANTIZE_PASSES = {
    "fp8": (BF16_BYTES, 1.0),
    "fp8-tensorwise": (2 * BF16_BYTES, 1.0),
    "fp8-blockwise": (BF16_BYTES, 1.0 + 4.0 / 128),
    "mxfp8": (BF16_BYTES, 1.0 + 1.0 / 32),
    "nvfp4": (BF16_BYTES, BF16_BYTES + NVFP4_PER_ELEMENT),
}
WEIGHT_COPY_BYTES_PER_PARAM = {
    "fp8": 2.0,
    "fp8-tensorwise": 2.0,
    "fp8-blockwise": 2.0 + 2 * 4.0 / (128 * 128),
    "mxfp8": 2.0 + 2 * 1.0 / 32,
    "nvfp4": 2 * (FP4_BYTES + NVFP4_WEIGHT_SCALE_BYTES),
}


def is_fp8(precision: str) -> bool:
    """Any FP8 recipe (its linear GEMMs run at the FP8 peak)."""
    return precision in FP8_RECIPES


def is_fp4(precision: str) -> bool:
    """An FP4 recipe (nvfp4: its linear GEMMs run at the FP4 peak)."""
    return precision in FP4_RECIPES


def is_quantized(precision: str) -> bool:
    """A Transformer Engine recipe that quantises the linear layers' GEMM inputs (FP8 or NVFP4)."""
    return is_fp8(precision) or is_fp4(precision)


def matmul_rate(gpu: GPUSpec, precision: str, hbm_bytes_per_s: float) -> dict:
    """Keyword arguments of `kernels.gemm_s` for the linear-layer GEMMs under `precision`."""
    if is_fp4(precision):
        assert gpu.peak_fp4_tflops is not None  # JobSpec refuses nvfp4 on a GPU without an FP4 peak
        return dict(flop_per_s=gpu.peak_fp4_tflops * 1e12, efficiency=gpu.fp4_efficiency(),
                    num_sms=gpu.num_sms, hbm_bytes_per_s=hbm_bytes_per_s, in_bytes=FP4_BYTES)
    if is_fp8(precision):
        assert gpu.peak_fp8_tflops is not None  # JobSpec refuses an FP8 recipe on a GPU without an FP8 peak
        return dict(flop_per_s=gpu.peak_fp8_tflops * 1e12, efficiency=gpu.fp8_efficiency(precision),
                    num_sms=gpu.num_sms, hbm_bytes_per_s=hbm_bytes_per_s, in_bytes=1)
    return dict(flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency, num_sms=gpu.num_sms,
                hbm_bytes_per_s=hbm_bytes_per_s)


def quantize_bytes_per_element(precision: str, layouts: int = 2) -> float:
    """HBM bytes to quantise one element into `layouts` layouts (`QUANTIZE_PASSES`; a GEMM input: two), 0
    without FP8 or NVFP4."""
    if precision not in QUANTIZE_PASSES:
        return 0.0
    once, per_layout = QUANTIZE_PASSES[precision]
    return once + layouts * per_layout


def weight_copy_bytes_per_param(precision: str) -> float:
    """Extra bytes per parameter of the FP8 / NVFP4 weight copies (0 without a quantised recipe)."""
    return WEIGHT_COPY_BYTES_PER_PARAM.get(precision, 0.0)


def edge_weight_precision(precision: str) -> str:
    """The precision whose weight bytes the word embedding and the LM head keep: BF16 under every
    quantised recipe, whose FP8/FP4 weight copies exist only for Transformer Engine's linear layers
    (Megatron-LM d98e8a6 megatron/core/models/gpt/gpt_model.py:272-276: the output layer is
    tensor_parallel.ColumnParallelLinear unless MXFP8's opt-in fp8_output_proj; the embedding is a
    VocabParallelEmbedding). BF16/FP16 stay themselves (FP16 keeps its 2-byte gradients)."""
    return "bf16" if is_quantized(precision) else precision


def weight_bytes_per_param(precision: str, fp8_param_gather: bool = False) -> float:
    """Bytes per parameter of the weights a layer keeps: BF16 plus the recipe's FP8 copies, or with
    fp8_param_gather the FP8 copies alone (module docstring)."""
    copies = weight_copy_bytes_per_param(precision)
    return copies if fp8_param_gather and is_quantized(precision) else BF16_BYTES + copies


def gathered_param_bytes(precision: str, fp8_param_gather: bool = False) -> float:
    """Bytes per parameter of the distributed optimizer's parameter all-gather: BF16, or FP8 (1) with
    fp8_param_gather under a recipe other than MXFP8, NVFP4 with scales under nvfp4 (module docstring)."""
    if is_fp4(precision) and fp8_param_gather:
        return FP4_BYTES + NVFP4_WEIGHT_SCALE_BYTES
    return 1.0 if fp8_param_gather and is_fp8(precision) and precision != "mxfp8" else float(BF16_BYTES)


def peak_flop_per_s(gpu: GPUSpec, precision: str) -> float:
    """The peak MFU is measured against: FP4 for nvfp4, FP8 for an FP8 recipe, else BF16."""
    if is_fp4(precision):
        assert gpu.peak_fp4_tflops is not None  # JobSpec refuses nvfp4 on a GPU without an FP4 peak
        return gpu.peak_fp4_tflops * 1e12
    if is_fp8(precision):
        assert gpu.peak_fp8_tflops is not None  # JobSpec refuses an FP8 recipe on a GPU without an FP8 peak
        return gpu.peak_fp8_tflops * 1e12
    return gpu.peak_flop_per_s


def saved_linear_input_bytes(precision: str) -> float:
    """Bytes per element of a linear layer's input saved for backward (1 under FP8, 0.5 + 1/16 under
    NVFP4, else 2)."""
    if is_fp4(precision):
        return NVFP4_PER_ELEMENT
    return 1.0 if is_fp8(precision) else float(BF16_BYTES)


def mtp_linear_precision(precision: str) -> str:
    """The precision Megatron-LM runs an MTP depth's eh_proj and a Transformer model's MTP layer at: BF16
    under an FP4 recipe (multi_token_prediction.py:1384-1402 at d98e8a6: only `config.fp8` enters a
    quantised autocast, "currently ignoring FP4 in MTP layers"), else the job's (module docstring)."""
    return "bf16" if is_fp4(precision) else precision
