"""Megatron-LM arguments of a hybrid Mamba-Transformer model (Nemotron-H, Nemotron 3), on top of the
GPT ones `render.megatron` builds: the model is Megatron-Core's `HybridModel`, launched as
NVIDIA/Megatron-LM's docs/user-guide/hybrid-model-migration.md says (at d98e8a6) -- `pretrain_hybrid.py`
instead of `pretrain_gpt.py`, `--hybrid-layer-pattern` (one symbol per layer: M Mamba-2, * attention,
- MLP, E MoE; it replaces `--num-layers`, which validate_args derives from it) and
`--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec`; the Mamba-2 mixer's
`--mamba-state-dim`, `--mamba-head-dim`, `--mamba-num-heads`, `--mamba-num-groups` (TransformerConfig
fields, megatron/core/transformer/transformer_config.py); no position embedding
(`--position-embedding-type none`, as Megatron-Bridge's NemotronHBridge sets). The MoE layers are
the pattern's E: no `--moe-layer-freq`.

An MTP block is Megatron-LM's unified pattern format (arguments.py ~757-785 deprecates
--mtp-hybrid-override-pattern and converts it to this; hybrid_layer_allocation.py
`parse_hybrid_pattern`): "<main>/<mtp>/<mtp>...", one identical '/' part per depth after the main
pattern and its '|' segments, from which validate_args infers --mtp-num-layers (~864-879, kept equal
here); `--mtp-use-repeated-layer` (TransformerConfig `mtp_use_repeated_layer`) builds one shared
depth. HybridModel places the block on the last pipeline stage (hybrid_model.py ~219-231)."""

from __future__ import annotations

from ..specs import ModelSpec

ENTRY = "pretrain_hybrid.py"
SPEC = ["megatron.core.models.hybrid.hybrid_layer_specs", "hybrid_stack_spec"]
MAMBA_KERNEL_DEFAULTS = {"mamba_conv_kernel": 4, "mamba_chunk_size": 128}  # MambaMixer's d_conv, chunk_size


def _without(args: list[str], flag: str) -> list[str]:
    """`args` without `flag` and the values after it (up to the next flag)."""
    if flag not in args:
        return args
    i = args.index(flag)
    j = next((k for k in range(i + 1, len(args)) if args[k].startswith("--")), len(args))
    return args[:i] + args[j:]


SPLIT_FLAGS = ("--num-layers", "--moe-layer-freq", "--num-virtual-stages-per-pipeline-rank",
               "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
               "--pipeline-model-parallel-layout", "--account-for-embedding-in-pipeline-split",
               "--account-for-loss-in-pipeline-split")


def pattern_with_stages(pattern: str, layers: list[int], vp: int) -> str:
    """The pattern with `|` between pipeline segments (Megatron-LM's hybrid pipeline layout: the
    segments are the model chunks in order -- rank 0's first chunk, rank 1's first, ..., then each
    rank's second -- and validate_args derives vp = segments / pp): `layers` per rank, each rank's
    split over its `vp` chunks as evenly as possible (earlier chunks take the extra)."""
    if len(layers) == 1 and vp == 1:
        return pattern
    per = [[n // vp + (1 if c < n % vp else 0) for c in range(vp)] for n in layers]
    sizes = [per[r][c] for c in range(vp) for r in range(len(layers))]
    out, at = [], 0
    for n in sizes:
        out.append(pattern[at:at + n])
        at += n
    return "|".join(out)


def unified_pattern(model: ModelSpec, layers: list[int], vp: int) -> str:
    """--hybrid-layer-pattern: the main pattern with its pipeline segments (`pattern_with_stages`),
    then '/' and the MTP depth's pattern once per depth (module docstring)."""
    assert model.hybrid_layer_pattern is not None
    main = pattern_with_stages(model.hybrid_layer_pattern, layers, vp)
    if not (model.mtp_num_layers and model.mtp_hybrid_layer_pattern):
        return main
    return "/".join([main] + [model.mtp_hybrid_layer_pattern] * model.mtp_num_layers)


def hybrid_flags(model: ModelSpec, args: list[str], notes: list[str], layers: list[int], vp: int) -> list[str]:
    """The GPT arguments `args` turned into a hybrid model's (module docstring), the plan's split
    (`layers` per pipeline rank, `vp` chunks each) as `|` segments of the pattern, which replace
    Megatron's GPT split flags (validate_args refuses them with --hybrid-layer-pattern); `notes`
    gains what the flags cannot say."""
    assert model.hybrid_layer_pattern is not None
    out = args
    for flag in SPLIT_FLAGS:
        out = _without(out, flag)
    notes[:] = [n for n in notes if "layout" not in n and "count as a layer" not in n]
    if model.position_embedding != "rope":  # Megatron-LM's CLI has `none` (the GPT renderer's note is for GPTModel)
        out = _without(out, "--position-embedding-type") + ["--position-embedding-type", "none"]
        notes[:] = [n for n in notes if "position-free" not in n]
    out += ["--hybrid-layer-pattern", unified_pattern(model, layers, vp), "--spec", *SPEC]
    if model.mtp_use_repeated_layer and model.mtp_num_layers:
        out += ["--mtp-use-repeated-layer"]
        notes.append(f"the {model.mtp_num_layers} MTP depths share one set of weights (--mtp-use-repeated-layer)")
    if model.gdn_num_key_heads is not None:
        out += gdn_kernel_flags(model)
        if model.qk_norm:
            notes.append("Megatron's hybrid stack spec builds its attention layers without a QK norm: the model's "
                         "--qk-layernorm is not built there")
    if model.mamba_num_heads is not None:
        H, P, G, N = model.mamba_dims
        out += ["--mamba-state-dim", str(N), "--mamba-head-dim", str(P), "--mamba-num-heads", str(H),
                "--mamba-num-groups", str(G)]
        off = [f"{k} {getattr(model, k)}" for k, v in MAMBA_KERNEL_DEFAULTS.items() if getattr(model, k) != v]
        if off:
            notes.append(f"Megatron's MambaMixer fixes d_conv 4 and chunk_size 128 in its layer spec; the model's "
                         f"{', '.join(off)} needs a custom spec")
    notes.append(f"launch with {ENTRY} (Megatron-Core HybridModel), not pretrain_gpt.py")
    return out


# ---- Gated DeltaNet models of GPT layers (Qwen3-Next, Qwen3.5)
GDN_VARIANT = "gdn"  # --experimental-attention-variant (transformer_config.py; 'gated_delta_net' its deprecated alias)


def gdn_as_gpt(model: ModelSpec) -> bool:
    """Whether a hybrid model with Gated DeltaNet layers is a GPT model's layers (`ModelSpec.gdn_gpt_layers`).
    Megatron-Bridge builds Qwen3-Next and Qwen3.5 so (qwen3_next_bridge.py, qwen35_bridge.py at 067f987: GPTModel
    with experimental_attention_variant "gated_delta_net" and linear_attention_freq), with their per-head QK norm,
    which the hybrid stack spec lacks."""
    return model.gdn_gpt_layers is not None


def gpt_view(model: ModelSpec) -> ModelSpec:
    """The GPT model Megatron builds for a `gdn_as_gpt` model, without its Gated DeltaNet (`gdn_gpt_flags` adds
    it): one layer per pair, MoE where the pair's MLP is E (--moe-layer-freq as a list when not every layer).
    Not validated (a GPT ModelSpec without the G layers' fields): for rendering only."""
    p = model.hybrid_layer_pattern
    assert p is not None and gdn_as_gpt(model)
    mlps = p[1::2]  # `gdn_gpt_layers` of them
    moe = tuple(int(m == "E") for m in mlps) if "E" in mlps and "-" in mlps else None
    return model.model_copy(update=dict(
        num_layers=len(mlps), hybrid_layer_pattern=None, moe_layer_pattern=moe, mtp_hybrid_layer_pattern=None,
        gdn_num_key_heads=None, gdn_num_value_heads=None, gdn_key_head_dim=None, gdn_value_head_dim=None))


def gdn_kernel_flags(model: ModelSpec) -> list[str]:
    """The Gated DeltaNet's dimensions (TransformerConfig linear_conv_kernel_dim, linear_key_head_dim,
    linear_value_head_dim, linear_num_key_heads, linear_num_value_heads)."""
    return ["--linear-conv-kernel-dim", str(model.gdn_conv_kernel), "--linear-key-head-dim", str(model.gdn_key_head_dim),
            "--linear-value-head-dim", str(model.gdn_value_head_dim), "--linear-num-key-heads",
            str(model.gdn_num_key_heads), "--linear-num-value-heads", str(model.gdn_num_value_heads)]


def gdn_gpt_flags(model: ModelSpec) -> tuple[list[str], list[str]]:
    """(flags, notes) that turn `gpt_view`'s GPT model into the Gated DeltaNet one: the variant, which layers
    are linear attention (--linear-attention-freq: an integer N when every N-th layer is softmax attention,
    training.py's rule `0 if (i + 1) % N == 0 else 1`, else the list of 1s and 0s) and the kernel's dimensions."""
    p = model.hybrid_layer_pattern
    assert p is not None
    linear = [int(c == "G") for c in p[0::2]]
    every = next((n for n in range(2, len(linear) + 1)
                  if linear == [0 if (i + 1) % n == 0 else 1 for i in range(len(linear))]), None)
    freq = str(every) if every is not None else "[" + ",".join(map(str, linear)) + "]"
    flags = ["--experimental-attention-variant", GDN_VARIANT, "--linear-attention-freq", freq, *gdn_kernel_flags(model)]
    notes = [f"{sum(linear)} of {len(linear)} layers are Gated DeltaNet (linear attention), the others softmax "
             f"attention: Megatron-Core's experimental attention variant (Megatron-Bridge builds Qwen3-Next and "
             f"Qwen3.5 so); it needs flash-linear-attention installed"]
    return flags, notes
