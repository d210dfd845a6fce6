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
