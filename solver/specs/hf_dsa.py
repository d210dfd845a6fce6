"""DeepSeek Sparse Attention's fields of a Hugging Face config (`specs.hf`'s `DSA_FAMILIES`: transformers
DeepseekV32Config and GlmMoeDsaConfig): the indexer's heads, head dimension and top-k, GLM's interleaved indexer
RoPE, and the family's Hadamard rotation. `specs.hf` passes its readers (`_int`, `_bool`) and its error (`_fail`)."""

from __future__ import annotations

from .hf_families import DSA_FAMILIES
from .moe_shape import index_mask


def dsa_fields(data: dict, mt: str, layers: int, notes: list[str], _int, _bool, _fail) -> dict:
    """DeepSeek Sparse Attention's indexer (transformers DeepseekV32Config / GlmMoeDsaConfig: index_n_heads,
    index_head_dim, index_topk, GLM's indexer_rope_interleave) and its index sharing across layers (GLM-5.2:
    index_topk_freq 4, index_skip_topk_offset 3, as Megatron-Bridge's glm5_bridge.py maps them; transformers'
    per-layer `indexer_types` checked against that rule, an `index_topk_pattern` refused). {} for a family
    without sparse attention."""
    if mt not in DSA_FAMILIES:
        return {}
    freq = _int(data, mt, "index_topk_freq", default=1)
    offset = _int(data, mt, "index_skip_topk_offset", default=0) if freq > 1 else 0
    types, pattern = data.get("indexer_types"), data.get("index_topk_pattern")
    if pattern is not None or (isinstance(types, list) and types != _types(freq, offset, layers)):
        raise _fail(f"({mt}) indexer_types / index_topk_pattern name an index-sharing layout other than Megatron-LM's "
                    f"every-n-th rule (index_topk_freq {freq}, index_skip_topk_offset {offset}); only that rule is "
                    f"modelled: drop them and state index_topk_freq and index_skip_topk_offset")
    out = dict(dsa_indexer_n_heads=_int(data, mt, "index_n_heads"), dsa_indexer_head_dim=_int(data, mt, "index_head_dim"),
               dsa_indexer_topk=_int(data, mt, "index_topk"), dsa_indexer_topk_freq=freq,
               dsa_indexer_skip_topk_offset=offset,
               dsa_indexer_rope_interleaved=_bool(data, mt, "indexer_rope_interleave", False),
               dsa_indexer_rotate_activation=DSA_FAMILIES[mt])
    computing = sum(index_mask(freq, offset, layers))
    notes.append(f"DeepSeek Sparse Attention: an indexer of {out['dsa_indexer_n_heads']} heads picks "
                 f"{out['dsa_indexer_topk']} keys per query" + (f", on {computing} of {layers} layers (the others "
                                                                f"reuse a top-k)" if freq > 1 else ""))
    return out


def _types(freq: int, offset: int, layers: int) -> list[str]:
    """transformers' `indexer_types` spelling of `index_mask`: "full" runs the indexer, "shared" reuses a top-k."""
    return ["full" if v else "shared" for v in index_mask(freq, offset, layers)]
