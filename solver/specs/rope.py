"""YaRN rotary embeddings as a checkpoint states them (Peng et al. 2023, "YaRN: Efficient Context Window Extension
of Large Language Models", Sec. 3.2-3.4): a Hugging Face config's `rope_scaling` (or transformers 5's
`rope_parameters`) with rope_type "yarn". The frequencies between the correction range's two wavelengths (beta_fast
and beta_slow rotations over the original context) are interpolated by `factor`, and the attention scores scaled by
mscale(factor, mscale) / mscale(factor, mscale_all_dim) with mscale(s, m) = 0.1 m ln s + 1 (DeepSeek-V2's form,
which transformers' `_compute_yarn_parameters` and Megatron-Core's `YarnRotaryEmbedding` share; both read absent
mscale keys as mscale 1, mscale_all_dim 0: the paper's 0.1 ln s + 1).

The positions a layer sees change nothing the formulation prices (the same rotation kernels); the launch must build
them as the checkpoint was trained, or a fine-tune starts from different attention (`render/megatron_rope.py`)."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from .base import Spec
from .hf_read import fail, read_bool, read_int, read_num


class YarnRope(Spec):
    """HF rope_scaling {rope_type: yarn} (transformers modeling_rope_utils.py `_compute_yarn_parameters`)."""

    factor: PositiveFloat = Field(le=1e6, description="context extension factor s (HF factor)")
    original_max_position_embeddings: PositiveInt = Field(le=1 << 24, description="the context before extension")
    beta_fast: PositiveFloat = Field(32.0, le=1e4, description="rotations bounding the correction range (HF default 32)")
    beta_slow: PositiveFloat = Field(1.0, le=1e4, description="rotations bounding it on the other side (HF default 1)")
    mscale: float = Field(1.0, ge=0, le=1e3, description="numerator's m of the attention scale (absent: 1)")
    mscale_all_dim: float = Field(0.0, ge=0, le=1e3, description="denominator's m (absent: 0, the paper's 0.1 ln s + 1)")
    truncate: bool = Field(True, description="round the correction range to whole dimensions (HF truncate; "
                                             "gpt-oss: false)")


def yarn_from_hf(scaling: dict, mt: str, positions: int | None, notes: list[str]) -> dict:
    """`YarnRope`'s fields from HF rope_scaling {rope_type: yarn} (transformers `_compute_yarn_parameters`: factor,
    original_max_position_embeddings (else the config's `positions`), beta_fast 32, beta_slow 1, truncate True; the
    attention scale from mscale and mscale_all_dim only when both are non-zero, else 0.1 ln s + 1, which mscale 1 /
    mscale_all_dim 0 give). An explicit attention_factor has no Megatron-LM field: said in `notes`."""
    out = dict(factor=read_num(scaling, mt, "factor", None),
               original_max_position_embeddings=read_int(scaling, mt, "original_max_position_embeddings", default=positions),
               beta_fast=read_num(scaling, mt, "beta_fast", 32.0), beta_slow=read_num(scaling, mt, "beta_slow", 1.0),
               truncate=read_bool(scaling, mt, "truncate", True))
    if out["factor"] is None or out["original_max_position_embeddings"] is None:
        raise fail(f"({mt}) rope_scaling of type yarn needs 'factor' and 'original_max_position_embeddings' (or "
                    f"max_position_embeddings)")
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        out.update(mscale=read_num(scaling, mt, "mscale", 1.0), mscale_all_dim=read_num(scaling, mt, "mscale_all_dim", 0.0))
    if scaling.get("attention_factor") is not None:
        notes.append(f"YaRN's attention_factor {scaling['attention_factor']} has no Megatron-LM field: the launch "
                     f"scales attention as mscale and mscale_all_dim give")
    notes.append(f"YaRN RoPE (factor {out['factor']:g} over {out['original_max_position_embeddings']} positions), "
                 f"launched as the checkpoint has it (no cost)")
    return out


def llama4_rope_fields(data: dict, mt: str) -> dict:
    """Llama 4's RoPE beyond theta and scaling (transformers Llama4TextConfig / modeling_llama4.py): `apply_rotary_emb`
    rotates query and key as complex pairs (interleaved: Megatron --rotary-interleaved), and the layers
    `no_rope_layers` marks 0, by default every `no_rope_layer_interval`-th (4), have none: Megatron's --no-rope-freq,
    whose integer n skips RoPE on every n-th layer counting from 1 (transformer_config.py `no_rope_freq`). Another
    shape is refused, naming it. {} for another family."""
    if mt != "llama4_text":
        return {}
    layers, interval = read_int(data, mt, "num_hidden_layers"), read_int(data, mt, "no_rope_layer_interval", default=4)
    listed = data.get("no_rope_layers")
    rule = [int((i + 1) % interval != 0) for i in range(layers)]
    if (listed is not None and list(listed) != rule) or layers % interval:
        raise fail(f"({mt}) the layers without RoPE must be every n-th of the {layers} (Megatron-LM's --no-rope-freq "
                   f"n, dividing the layers); state no_rope_layer_interval such an n and drop no_rope_layers")
    return {"rotary_interleaved": True, "no_rope_freq": interval}


def describe_positions(model) -> str:
    """A model's position encoding in words, as `show` prints it: what the launch builds (theta, the rotated share,
    Llama 4's pairs and layers without RoPE, Llama 3's or YaRN's scaling; DeepSeek-V4's YaRN is its compressed
    layers', with their own theta)."""
    if model.position_embedding != "rope":
        return model.position_embedding

    def num(x: float) -> str:
        return f"{x:.0f}" if float(x).is_integer() else f"{x:g}"

    share = f" on {num(model.rotary_percent)} of each head" if model.rotary_percent != 1 else ""
    parts = [f"RoPE theta {num(model.rotary_base)}{share}"]
    if model.rotary_interleaved:
        parts.append("adjacent pairs rotated")
    if model.no_rope_freq:
        parts.append(f"none on every {model.no_rope_freq}th layer")
    if model.rope_scaling_factor:
        parts.append(f"Llama 3 scaling x{num(model.rope_scaling_factor)}")
    yarn = model.rope_yarn
    if yarn is not None:
        scaled = f"YaRN x{num(yarn.factor)} over {yarn.original_max_position_embeddings}"
        base = model.csa_compress_rotary_base
        parts.append(f"compressed layers theta {num(base)} with {scaled}" if base else scaled)
    return ", ".join(parts)
