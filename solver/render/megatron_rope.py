"""Megatron-LM's position-embedding flags for a RoPE model: what builds the rotation the model was trained with.

- plain RoPE: `--position-embedding-type rope --rotary-percent --rotary-base` (an integer there), Llama 3's scaling
  `--use-rope-scaling --rope-scaling-factor`, Llama 4's pairs `--rotary-interleaved` and its layers without RoPE `--no-rope-freq`;
- YaRN on a GPT layer (`specs/rope.py`; Megatron-LM d98e8a6 arguments.py ~2397-2411 and ~3558-3563,
  argument_utils.py `_apply_yarn_config_from_args`: GPTModel's YarnRotaryEmbedding reads config.yarn_*):
  `--position-embedding-type yarn --rotary-scaling-factor --yarn-original-max-position-embeddings --yarn-beta-fast
  --yarn-beta-slow --mscale --mscale-all-dim` and `--[no-]yarn-correction-range-round-to-int` (HF truncate);
- YaRN under multi-latent attention (MLATransformerConfig: rope_type, rotary_scaling_factor, mscale, mscale_all_dim
  by their own flags; original_max_position_embeddings by `--original-max-position-embeddings` on the `dev` branch
  only, 4096 on main; beta_fast / beta_slow have no flag, 32 and 1): `--rope-type yarn` and those flags, plain
  `--rope-type rope` without YaRN."""

from __future__ import annotations

MLA_YARN_DEFAULTS = dict(original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, truncate=True)


def num_arg(x: float) -> str:
    """A number as a flag's value: an integer without its point, else Python's shortest repr."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def rope_flags(model, notes: list[str]) -> list[str]:
    """The position flags of a RoPE model's GPT layers (module docstring); MLA's own are `mla_rope_flags`."""
    assert model.rotary_percent is not None and model.rotary_base is not None  # ModelSpec._defaults fills both
    yarn = model.rope_yarn if not model.multi_latent_attention else None
    a = ["--position-embedding-type", "yarn" if yarn else "rope", "--rotary-percent", num_arg(model.rotary_percent)]
    if float(model.rotary_base).is_integer():
        a += ["--rotary-base", str(int(model.rotary_base))]
    else:
        notes.append(f"Megatron-LM's --rotary-base is an integer: the model's {model.rotary_base} is not expressible")
    if model.rope_scaling_factor is not None:
        a += ["--use-rope-scaling", "--rope-scaling-factor", num_arg(model.rope_scaling_factor)]
    if model.rotary_interleaved:
        a.append("--rotary-interleaved")
    if model.no_rope_freq is not None:
        a += ["--no-rope-freq", str(model.no_rope_freq)]
    if yarn:
        a += ["--rotary-scaling-factor", num_arg(yarn.factor), "--yarn-original-max-position-embeddings",
              str(yarn.original_max_position_embeddings), "--yarn-beta-fast", num_arg(yarn.beta_fast),
              "--yarn-beta-slow", num_arg(yarn.beta_slow), "--mscale", num_arg(yarn.mscale), "--mscale-all-dim",
              num_arg(yarn.mscale_all_dim),
              "--yarn-correction-range-round-to-int" if yarn.truncate else "--no-yarn-correction-range-round-to-int"]
    return a


def mla_rope_flags(model, notes: list[str], *, dev: bool = False) -> list[str]:
    """Multi-latent attention's RoPE (module docstring): `--rope-type rope`, or YaRN with its factor and scales
    (`dev`: Megatron-LM's dev branch, which also takes the original context); what the command line cannot set is
    said in `notes`."""
    yarn = model.rope_yarn
    if yarn is None:
        return ["--rope-type", "rope"]
    a = ["--rope-type", "yarn", "--rotary-scaling-factor", num_arg(yarn.factor), "--mscale", num_arg(yarn.mscale),
         "--mscale-all-dim", num_arg(yarn.mscale_all_dim)]
    if dev:
        a += ["--original-max-position-embeddings", str(yarn.original_max_position_embeddings)]
    fixed = {k: v for k, v in MLA_YARN_DEFAULTS.items() if not (dev and k == "original_max_position_embeddings")}
    unset = [k for k, v in fixed.items() if getattr(yarn, k) != v]
    if unset:
        notes.append("Megatron-LM's command line cannot set multi-latent attention's YaRN " + ", ".join(
            f"{k} (the model's {getattr(yarn, k)}, built as {fixed[k]})" for k in unset) + ": set it in TransformerConfig")
    return a
