"""FP8 dot-product attention (Megatron-Core `TransformerConfig.fp8_dot_product_attention`, Transformer Engine's
`fp8_dpa`): which jobs can run it, as Transformer Engine decides.

Transformer Engine d0067d0, transformer_engine/pytorch/attention/dot_product_attention/utils.py
`get_attention_backend`, "Filter: Execution type" (~647-735): with `fp8_dpa` FlashAttention 2 and 4 are
disabled, FlashAttention 3 is disabled for training and the unfused backend without emulation, so training
runs the fused (cuDNN) kernel only; FusedAttention is disabled under Float8BlockScaling and NVFP4 recipes, for
FP8 current scaling below sm100 and for MXFP8 below sm100 (and cuDNN < 9.21); with a softmax other than
vanilla (attention sinks) below sm100 (~1122-1133) and with a sliding window below sm100 ("Filter: Sliding window
attention", ~1344-1353). Megatron-Core hands the flag to TE's recipe
(megatron/core/fp8_utils.py at d98e8a6: `fp8_dpa=config.fp8_dot_product_attention`).
"""

from __future__ import annotations

# The precision recipes whose FP8 attention Transformer Engine runs, and the architectures that run it:
# delayed scaling on Hopper and Blackwell, current scaling and MXFP8 on sm100+ only.
FP8_ATTENTION_ARCHITECTURES = {"fp8": ("hopper", "blackwell"), "fp8-tensorwise": ("blackwell",),
                               "mxfp8": ("blackwell",)}


def fp8_attention_problem(job) -> str | None:
    """Why `job` cannot run FP8 dot-product attention (one line naming the fix), or None (module docstring)."""
    if not job.fp8_dot_product_attention:
        return None
    drop = "; drop fp8_dot_product_attention"
    if job.framework != "megatron":
        return f"fp8_dot_product_attention is Transformer Engine's FP8 attention: it needs framework megatron{drop}"
    if job.precision not in FP8_ATTENTION_ARCHITECTURES:
        return (f"fp8_dot_product_attention needs precision fp8, fp8-tensorwise or mxfp8: Transformer Engine runs "
                f"no FP8 attention under {job.precision}{drop}")
    if not job.flash_attention or job.attention_kernel != "cudnn":
        return (f"fp8_dot_product_attention runs only Transformer Engine's fused (cuDNN) attention: set "
                f"attention_kernel cudnn with flash_attention{drop}")
    if job.model.is_dsa or job.model.is_dsv4:
        return (f"fp8_dot_product_attention is priced for Transformer Engine's dense attention; {job.model.name}'s "
                f"sparse attention runs its own kernels{drop}")
    archs = FP8_ATTENTION_ARCHITECTURES[job.precision]
    sm100 = [what for on, what in ((job.model.softmax_type != "vanilla",
                                    f"softmax {job.model.softmax_type} (attention sinks)"),
                                   (bool(job.model.windowed_layers), "a sliding window")) if on]
    for pool in job.cluster.pool_specs():
        arch = pool.gpu.architecture
        if arch not in archs or (sm100 and arch != "blackwell"):
            why = sm100[0] if arch in archs else f"precision {job.precision}"
            return (f"fp8_dot_product_attention with {why} needs {' or '.join(('blackwell',) if sm100 else archs)} "
                    f"GPUs (Transformer Engine's fused attention); {pool.gpu.name} is "
                    f"{arch or 'of an unstated architecture'}{drop}")
    return None
