"""DeepSeek Sparse Attention's fields of a Hugging Face config (`specs.hf`'s `DSA_FAMILIES`: transformers
DeepseekV32Config and GlmMoeDsaConfig): the indexer's heads, head dimension and top-k, GLM's interleaved indexer
RoPE, and the family's Hadamard rotation. `specs.hf` passes its readers (`_int`, `_bool`) and its error (`_fail`)."""

from __future__ import annotations

from .hf_families import DSA_FAMILIES


def dsa_fields(data: dict, mt: str, notes: list[str], _int, _bool, _fail) -> dict:
    """DeepSeek Sparse Attention's indexer (transformers DeepseekV32Config / GlmMoeDsaConfig: index_n_heads,
    index_head_dim, index_topk, GLM's indexer_rope_interleave). Index sharing across layers (GLM-5.2's
    index_topk_freq > 1, or an indexer_types list with "shared" layers) is refused: its layers without an
    indexer, and Megatron's rule that every pipeline chunk starts on a layer with one, are not modelled. {} for a
    family without sparse attention."""
    if mt not in DSA_FAMILIES:
        return {}
    freq = _int(data, mt, "index_topk_freq", default=1)
    types = data.get("indexer_types")
    if freq > 1 or (isinstance(types, list) and "shared" in types):
        raise _fail(f"({mt}) DeepSeek Sparse Attention with index sharing (index_topk_freq {freq}: layers that reuse "
                    f"another layer's top-k) is not modelled; plan it with index_topk_freq 1")
    out = dict(dsa_indexer_n_heads=_int(data, mt, "index_n_heads"), dsa_indexer_head_dim=_int(data, mt, "index_head_dim"),
               dsa_indexer_topk=_int(data, mt, "index_topk"),
               dsa_indexer_rope_interleaved=_bool(data, mt, "indexer_rope_interleave", False),
               dsa_indexer_rotate_activation=DSA_FAMILIES[mt])
    notes.append(f"DeepSeek Sparse Attention: an indexer of {out['dsa_indexer_n_heads']} heads picks "
                 f"{out['dsa_indexer_topk']} keys per query")
    return out
