"""The model a published row runs: its stated shape (`row_model`), or the catalog model it names -- the key it
states, or an alias of one (`CATALOG_MODEL_OF_KEY`). A row of another file that states no key, or one the catalog
lacks, gets the key its model name spells or, naming none, the key of the one entry with every dimension it states
(`with_named_key`) before anything reads the key (its recipe, its scripts' settings). Both row readers
(`rows.row_job`, `moe_rows.moe_row_job`) take the model from here and hold a catalog entry to every dimension the
row states (`dims_disagreement`)."""

from __future__ import annotations

import re

from ..specs import ModelSpec
from ..specs.model import PositionEmbedding

# Published model names whose catalog entry has the same architecture (the row states no vocabulary):
# Llama 3 and 3.1 share layers, widths, heads and the 128,256-token vocabulary (3.1 adds RoPE
# scaling for long context, which costs nothing).
CATALOG_MODEL_OF_KEY = {"llama3-8b": "llama3.1-8b", "llama3-70b": "llama3.1-70b"}


def squeezed(text: str) -> str:
    """Letters and digits only, lower case: "GPT-OSS 120B" -> "gptoss120b"."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def key_named(name: str, moe: bool | None = None) -> str | None:
    """The key a model name spells: the longest catalog key or alias (`CATALOG_MODEL_OF_KEY`) whose letters and
    digits run unbroken in the name's ("DeepSeek-V3 671B" -> deepseek-v3, "Llama 4 Scout (16 experts)" ->
    llama4-scout, "GPT-OSS 120B" -> gpt-oss-120b, not gpt-oss-20b, "Llama 3 70B" -> llama3-70b), among the
    mixture-of-experts entries (`moe` True), the others (False) or all; None when none is spelled."""
    from ..catalog import catalog_models

    name_ = squeezed(name)
    keys = {k for k, spec in catalog_models().items() if moe is None or spec.is_moe == moe}
    keys |= {alias for alias, k in CATALOG_MODEL_OF_KEY.items() if k in keys}
    spelled = [k for k in keys if squeezed(k) in name_]
    return max(spelled, key=lambda k: len(squeezed(k))) if spelled and name_ else None


def with_named_key(raw: dict, assumed: list[str], moe: bool | None = None) -> dict:
    """`raw` with its model's key set to the catalog entry the row names when the key it states names none (or it
    states none): the key its name spells (`key_named`), else the one entry with every dimension the row states
    (`key_of_shape`); a spelled key whose dimensions the row contradicts is not taken. Said in `assumed`."""
    from ..catalog import catalog_models

    m = raw.get("model") or {}
    if m.get("key") and row_catalog_key(m):
        return raw
    named = key_named(str(m.get("name") or ""), moe)
    entry = row_catalog_key({"key": named}) if named else None  # key_named spells catalog keys or their aliases
    if entry and m.get("key") and dims_disagreement(m, catalog_models()[entry]):
        named = None
    how = "its name spells"
    if not named and m.get("key"):
        named, how = key_of_shape(m, moe), "it has every dimension the row states"
    if not named:
        return raw
    stated = f"the row's key {m['key']!r} names no catalog entry" if m.get("key") else "the row states no catalog key"
    assumed.append(f"model {m.get('name')!r} read as the catalog's {named} ({how}; {stated})")
    return {**raw, "model": {**m, "key": named}}


# what a row must state for its shape to name a catalog entry alone (`key_of_shape`)
SHAPE_NAMES_ENTRY = {False: ("layers", "hidden", "heads"), True: ("layers", "hidden", "heads", "num_experts", "top_k")}


def key_of_shape(m: dict, moe: bool | None = None) -> str | None:
    """The catalog key of the one model (MoE or dense as `moe`) that has every dimension the row states
    (`dims_disagreement`), when it states at least `SHAPE_NAMES_ENTRY`'s; None when none or several have."""
    from ..catalog import catalog_models

    if not all(isinstance(m.get(k), int) for k in SHAPE_NAMES_ENTRY[bool(moe)]):
        return None
    fits = [k for k, spec in catalog_models().items()
            if (moe is None or spec.is_moe == moe) and dims_disagreement(m, spec) is None]
    return fits[0] if len(fits) == 1 else None


def dims_disagreement(m: dict, model) -> str | None:
    """The first dimension the row states (`m`: its model block) that the catalog entry `model` does not have, or None."""
    stated = {"layers": model.num_layers, "hidden": model.hidden_size, "heads": model.num_attention_heads,
              "num_experts": model.num_experts, "top_k": model.moe_router_topk,
              "moe_ffn_hidden": model.moe_ffn_hidden_size}
    if m.get("kv_heads") and not model.multi_latent_attention:
        stated["kv_heads"] = model.num_kv_heads
    for key, have in stated.items():
        # a Gated DeltaNet model of GPT layers (Qwen3.5) is counted as its config counts (half the pattern) or not
        also = model.gdn_gpt_layers if key == "layers" else None
        if isinstance(m.get(key), int) and m[key] not in (have, also):
            return f"the row states {key} {m[key]}, the catalog's {model.name} has {have}"
    mla = m.get("mla") or {}
    for key, field in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                       ("qk_head_dim", "qk_head_dim"), ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
                       ("v_head_dim", "v_head_dim")):
        if isinstance(mla.get(key), int) and mla[key] != getattr(model, field):
            return f"the row states MLA {key} {mla[key]}, the catalog's {model.name} has {getattr(model, field)}"
    return None


def row_catalog_key(m: dict) -> str | None:
    """The catalog entry of a row's model (`m`: its model block) by the key it states, through its alias; None
    when the catalog has none."""
    from ..catalog import catalog_models

    key = CATALOG_MODEL_OF_KEY.get(str(m.get("key")), str(m.get("key") or ""))
    return key if key in catalog_models() else None


def names_catalog_moe(m: dict) -> bool:
    """Whether a row's model (`m`: its model block) is a catalog MoE model by the key it states or, stating
    none, by its name (`key_named`): a row that states neither experts nor EP is still the MoE reader's."""
    from ..catalog import catalog_models

    key = row_catalog_key(m) if m.get("key") else key_named(str(m.get("name") or ""), moe=True)
    return key is not None and catalog_models()[key].is_moe


STATED_SHAPE = ("layers", "hidden", "heads", "vocab")  # what a row must state to be built without a catalog entry


def model_problem(m: dict) -> str | None:
    """Why a dense row's model cannot be built (one line naming what is missing), or None: its stated shape
    (`STATED_SHAPE`, and the sequence length), or a catalog entry it names (`row_catalog_key`)."""
    if not isinstance(m.get("seq_len"), int):
        return f"model {m.get('name')!r}: the row states no seq_len"
    if m.get("vocab") is None and row_catalog_key(m):
        return None
    missing = [k for k in STATED_SHAPE if not isinstance(m.get(k), int)]
    if missing:
        return (f"model {m.get('name')!r} (key {m.get('key')!r}) names no catalog entry and the row states no "
                f"{missing[0]} as an integer: add models/<key>.yaml or state the shape")
    return None


def row_model(m: dict, assumed: list | None = None) -> ModelSpec:
    """The row's model: its stated shape; a row without a vocabulary takes its catalog entry's (`model_problem`
    has checked that one of the two is there)."""
    if m.get("vocab") is None:
        from ..catalog import catalog_models

        key = row_catalog_key(m)
        assert key is not None  # model_problem
        if assumed is not None:
            assumed.append(f"model shape from the catalog's {key} (the row states no vocabulary)")
        return catalog_models()[key].model_copy(update={"seq_length": m["seq_len"]})
    arch = str(m.get("arch", "")).lower()
    h = m["hidden"]
    gated = "swiglu" in arch or "geglu" in arch
    # tied input/output embeddings: Megatron GPT (default) and MPT tie; Llama and Nemotron-4 do not
    untied = any(k in arch for k in ("llama", "nemotron"))
    position: PositionEmbedding = "rope" if "rope" in arch else "alibi" if "alibi" in arch else "learned_absolute"
    # Megatron's GPT recipes train with dropout 0.1; Llama, Nemotron-4 and MPT with none
    modern = any(k in arch or k in str(m.get("name", "")).lower() for k in ("llama", "nemotron", "mpt"))
    return ModelSpec(
        name=m.get("name") or "row", num_layers=m["layers"], hidden_size=h, num_attention_heads=m["heads"],
        num_kv_heads=m.get("kv_heads"), ffn_hidden_size=m.get("ffn_hidden") or 4 * h, vocab_size=m["vocab"],
        seq_length=m["seq_len"], tied_embeddings=not untied, gated_mlp=gated, position_embedding=position,
        normalization="RMSNorm" if "rmsnorm" in arch else "LayerNorm", dropout=0.0 if modern else 0.1,
        activation="swiglu" if gated else "squared_relu" if "squared-relu" in arch else "gelu",
    )
