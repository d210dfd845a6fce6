"""Which catalog model a published row names: the catalog key it states, or an alias of one
(`CATALOG_MODEL_OF_KEY`); a row of another file that states no key gets the key its model name spells
(`with_named_key`), before anything reads the key (its recipe, its scripts' settings). Both row readers
(`rows.row_job`, `moe_rows.moe_row_job`) take the model from here and hold the entry to every dimension the
row states."""

from __future__ import annotations

import re

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
    """`raw` with its model's key filled from its name (`key_named`) when it states none, said in `assumed`."""
    m = raw.get("model") or {}
    named = None if m.get("key") else key_named(str(m.get("name") or ""), moe)
    if not named:
        return raw
    assumed.append(f"model {m.get('name')!r} read as the catalog's {named} (the row states no catalog key)")
    return {**raw, "model": {**m, "key": named}}


def row_catalog_key(m: dict) -> str | None:
    """The catalog entry of a row's model (`m`: its model block) by the key it states, through its alias; None
    when the catalog has none."""
    from ..catalog import catalog_models

    key = CATALOG_MODEL_OF_KEY.get(str(m.get("key")), str(m.get("key") or ""))
    return key if key in catalog_models() else None
