"""DeepSeek's sparse attention fields of a Hugging Face config: DeepSeek Sparse Attention (`DSA_FAMILIES`:
transformers DeepseekV32Config and GlmMoeDsaConfig: the indexer's heads, head dimension and top-k, GLM's interleaved
indexer RoPE, the family's Hadamard rotation, index sharing) and DeepSeek-V4's attention (`DSV4_FAMILIES`:
transformers DeepseekV4Config, mapped as Megatron-Bridge's deepseek_v4_bridge.py maps it to Megatron-LM dev's
fields). Values are read with `hf_read`'s checked readers."""

from __future__ import annotations

from .hf_families import DSA_FAMILIES
from .hf_read import fail as _fail
from .hf_read import read_bool as _bool
from .hf_read import read_int as _int
from .hf_read import read_num as _num
from .moe_shape import index_mask


def dsa_fields(data: dict, mt: str, layers: int, notes: list[str]) -> dict:
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


DSV4_FAMILIES = ("deepseek_v4",)


def dsv4_fields(data: dict, mt: str, layers: int, notes: list[str], yarn: dict | None = None) -> dict:
    """DeepSeek-V4 (Megatron-Bridge @ 067f987df03b deepseek_v4_bridge.py ~390-526): head_dim -> v_head_dim with the
    rope part qk_rope_head_dim (qk_head_dim = kv_lora_rank = the rest, as Megatron derives them), q_lora_rank,
    o_groups, o_lora_rank, compress_ratios (one per layer and MTP layer) -> csa_compress_ratios, sliding_window ->
    csa_window_size, index_* -> the indexer, hc_mult -> num_residual_streams, hc_sinkhorn_iters ->
    mhc_sinkhorn_iterations, num_hash_layers -> moe_n_hash_layers, swiglu_limit -> the experts' clamp,
    compress_rope_theta -> csa_compress_rotary_base, the compressed layers' YaRN (`yarn`, read from rope_scaling) with
    mscale = mscale_all_dim = 1 ("DSv4 has no mscale in HF config; Set both equal to cancel out (like DSv3)"). {} for
    another family."""
    if mt not in DSV4_FAMILIES:
        return {}
    d, d_rope = _int(data, mt, "head_dim"), _int(data, mt, "qk_rope_head_dim")
    ratios = data.get("compress_ratios")
    mtp = _int(data, mt, "num_nextn_predict_layers", default=0)
    if not isinstance(ratios, list) or len(ratios) < layers or any(r not in (0, 4, 128) for r in ratios):
        raise _fail(f"({mt}) 'compress_ratios' must list 0, 4 or 128 for each of the {layers} layers")
    ratios = list(ratios) + [0] * (layers + mtp - len(ratios))  # the bridge pads the MTP layers with 0
    out = dict(multi_latent_attention=True, q_lora_rank=_int(data, mt, "q_lora_rank"), kv_channels=d, v_head_dim=d,
               qk_pos_emb_head_dim=d_rope, qk_head_dim=d - d_rope, kv_lora_rank=d - d_rope,
               o_groups=_int(data, mt, "o_groups"), o_lora_rank=_int(data, mt, "o_lora_rank"),
               csa_compress_ratios=tuple(ratios), csa_window_size=_int(data, mt, "sliding_window"),
               dsa_indexer_n_heads=_int(data, mt, "index_n_heads"), dsa_indexer_head_dim=_int(data, mt, "index_head_dim"),
               dsa_indexer_topk=_int(data, mt, "index_topk"), dsa_indexer_rotate_activation=True,
               num_residual_streams=_int(data, mt, "hc_mult", default=1),
               mhc_sinkhorn_iterations=_int(data, mt, "hc_sinkhorn_iters", default=20),
               moe_n_hash_layers=_int(data, mt, "num_hash_layers", default=0))
    if data.get("swiglu_limit") is not None:
        out["activation_clamp"] = float(data["swiglu_limit"])
    if data.get("compress_rope_theta") is not None:
        out["csa_compress_rotary_base"] = _num(data, mt, "compress_rope_theta", None)
    if yarn is not None:
        out["rope_yarn"] = {**yarn, "mscale": 1.0, "mscale_all_dim": 1.0}
    counts = {r: ratios[:layers].count(r) for r in (0, 4, 128)}
    notes.append(f"DeepSeek-V4 attention: a {out['csa_window_size']}-token window on every layer, {counts[4]} layers "
                 f"with the top-{out['dsa_indexer_topk']} of 4-token compressed entries, {counts[128]} with every "
                 f"128-token entry; mHC with {out['num_residual_streams']} residual streams; the first "
                 f"{out['moe_n_hash_layers']} MoE layers routed by hash")
    return out


def sparse_attention_fields(data: dict, mt: str, layers: int, notes: list[str], yarn: dict | None = None) -> dict:
    """The fields of DeepSeek's sparse attention families (`dsa_fields`, `dsv4_fields`, which takes the YaRN fields
    `specs.hf` read); {} for another family."""
    return dsa_fields(data, mt, layers, notes) | dsv4_fields(data, mt, layers, notes, yarn)
