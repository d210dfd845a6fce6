"""The mixture-of-experts and multi-latent-attention part of `ModelSpec`: Megatron-LM's rules on the
expert and MLA fields, and the derived sizes MoE and MLA terms ask for. A mixin of ModelSpec, whose
fields (num_experts, moe_*, multi_latent_attention, the MLA ranks) it reads."""

from __future__ import annotations

from typing import Any

# Fields that only a mixture-of-experts model (num_experts set) may state.
MOE_FIELDS = ("moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
              "moe_layer_pattern", "moe_router_num_groups", "moe_router_group_topk", "moe_expert_capacity_factor",
              "moe_latent_size", "moe_router_topk_scaling_factor")
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
DSA_FIELDS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def index_mask(freq: int, offset: int, layers: int) -> tuple[bool, ...]:
    """Which of `layers` layers run DeepSeek Sparse Attention's indexer under index sharing: layer number l
    (1-indexed) unless max(l - max(offset, 1), 0) % freq (Megatron-LM d98e8a6 dsa.py `is_dsa_skip_topk_layer`)."""
    return tuple(max(n - max(offset, 1), 0) % freq == 0 for n in range(1, layers + 1))


class MoeShape:
    """MoE and MLA checks and derived sizes (module docstring); `self` is a ModelSpec."""

    name: str
    num_layers: int
    hidden_size: int
    add_bias_linear: bool
    num_experts: int | None
    moe_ffn_hidden_size: int | None
    moe_router_topk: int | None
    moe_layer_pattern: Any
    moe_latent_size: int | None
    moe_router_num_groups: int | None
    moe_router_group_topk: int | None
    moe_router_pre_softmax: bool
    moe_router_score_function: str
    multi_latent_attention: bool
    kv_lora_rank: int | None
    qk_head_dim: int | None
    qk_pos_emb_head_dim: int | None
    v_head_dim: int | None
    q_lora_rank: int | None
    dsa_indexer_n_heads: int | None
    dsa_indexer_head_dim: int | None
    dsa_indexer_topk: int | None
    dsa_indexer_topk_freq: int
    dsa_indexer_skip_topk_offset: int
    moe_layer_freq: int
    hybrid_layer_pattern: str | None

    def _check_moe(self) -> None:
        if self.num_experts is None:
            given = [f for f in MOE_FIELDS if getattr(self, f) is not None] + (
                ["moe_router_pre_softmax"] if self.moe_router_pre_softmax else [])
            if given:
                raise ValueError(f"{given[0]} applies to mixture-of-experts models only; set num_experts or drop it")
            return
        if self.moe_router_pre_softmax and self.moe_router_score_function != "softmax":
            raise ValueError(f"moe_router_pre_softmax applies to softmax scores; this router's are "
                             f"{self.moe_router_score_function} (renormalised whenever top-k > 1)")
        for f in ("moe_ffn_hidden_size", "moe_router_topk"):
            if getattr(self, f) is None:
                raise ValueError(f"a mixture-of-experts model (num_experts {self.num_experts}) needs {f}")
        E, k, _ = self.moe_dims
        if k > E:
            raise ValueError(f"moe_router_topk ({k}) exceeds num_experts ({E})")
        pattern = self.moe_layer_pattern
        if pattern is not None:
            if len(pattern) != self.num_layers or any(v not in (0, 1) for v in pattern):
                raise ValueError(f"moe_layer_pattern must list 0 or 1 for each of the {self.num_layers} layers; "
                                 f"got {len(pattern)} values")
        if not any(self.moe_layer_mask):
            raise ValueError("no layer is MoE: moe_layer_pattern holds no 1 (drop num_experts for a dense model)")
        if self.moe_latent_size is not None and self.moe_latent_size >= self.hidden_size:
            raise ValueError(f"moe_latent_size ({self.moe_latent_size}) must be below hidden_size ({self.hidden_size}): "
                             "a latent no narrower than the hidden width is not a LatentMoE")
        groups, group_topk = self.moe_router_num_groups, self.moe_router_group_topk
        if (groups is None) != (group_topk is None):
            raise ValueError("moe_router_num_groups and moe_router_group_topk go together; give both or neither")
        if groups is not None and group_topk is not None and (E % groups or group_topk > groups):
            raise ValueError(f"moe_router_num_groups ({groups}) must divide num_experts ({self.num_experts}) "
                             f"and be at least moe_router_group_topk ({group_topk})")

    def _check_mla(self) -> None:
        if not self.multi_latent_attention:
            given = [f for f in MLA_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to multi-latent attention only; set multi_latent_attention: true")
            return
        for f in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if getattr(self, f) is None:
                raise ValueError(f"multi_latent_attention needs {f}")

    def _check_dsa(self) -> None:
        """Megatron-LM's rules for DeepSeek Sparse Attention (d98e8a6): "Currently only MLA supports sparse
        attention" (experimental_attention_variant_module_specs.py); `add_bias_linear` must be off
        (transformer_config.py `__post_init__`, the dsa branch); the indexer's heads, head dimension and top-k
        have no default (dsa.py builds its projections from them). Hybrid layer patterns ('D' layers) are not
        read here."""
        given = [f for f in DSA_FIELDS if getattr(self, f) is not None]
        if not given or getattr(self, "csa_compress_ratios", None) is not None:  # DeepSeek-V4's indexer: Dsv4Shape
            return
        if len(given) < len(DSA_FIELDS):
            missing = next(f for f in DSA_FIELDS if getattr(self, f) is None)
            raise ValueError(f"DeepSeek Sparse Attention needs {', '.join(DSA_FIELDS)} together; {missing} is missing")
        if not self.multi_latent_attention:
            raise ValueError("DeepSeek Sparse Attention (dsa_indexer_*) runs on multi-latent attention only (Megatron-LM: "
                             "'Currently only MLA supports sparse attention'); set multi_latent_attention: true")
        if self.add_bias_linear:
            raise ValueError("DeepSeek Sparse Attention needs add_bias_linear: false (Megatron-LM refuses linear biases "
                             "with experimental_attention_variant dsa)")
        if self.hybrid_layer_pattern is not None:
            raise ValueError("DeepSeek Sparse Attention in a hybrid layer pattern is not modelled; drop one")

    @property
    def is_dsa(self) -> bool:
        """Whether attention is DeepSeek Sparse Attention (`_check_dsa`: the three indexer fields set), not DeepSeek-V4's
        attention, whose ratio-4 layers use the same indexer fields (`Dsv4Shape`)."""
        return self.dsa_indexer_topk is not None and getattr(self, "csa_compress_ratios", None) is None

    @property
    def dsa_dims(self) -> tuple[int, int, int]:
        """(indexer heads H_I, indexer head dimension D_I, top-k K) of a DSA model."""
        n, d, k = self.dsa_indexer_n_heads, self.dsa_indexer_head_dim, self.dsa_indexer_topk
        assert n is not None and d is not None and k is not None, f"{self.name} does not use sparse attention"
        return n, d, k

    @property
    def dsa_index_sharing(self) -> bool:
        """Whether layers reuse another layer's top-k (`dsa_indexer_topk_freq` > 1: GLM-5.2's IndexShare)."""
        return self.is_dsa and self.dsa_indexer_topk_freq > 1

    @property
    def dsa_index_mask(self) -> tuple[bool, ...]:
        """Which layers run the indexer (compute their own top-k: `index_mask`); a layer that reuses builds no
        indexer (dsa.py ~1580). All layers without sharing, none without DSA."""
        mask = index_mask(self.dsa_indexer_topk_freq, self.dsa_indexer_skip_topk_offset, self.num_layers)
        return tuple(self.is_dsa and v for v in mask)

    @property
    def dsa_index_share(self) -> float:
        """The fraction of layers that run the indexer (`dsa_index_mask`): every layer is priced with this share
        of an indexer, exact for the model's sum (as a sliding window's layers are)."""
        return sum(self.dsa_index_mask) / self.num_layers

    @property
    def dsa_indexer_params(self) -> int:
        """One layer's lightning indexer (Megatron-LM d98e8a6 dsa.py `DSAIndexer`, ~1159-1208): linear_wq_b
        from the normed Q latent q_lora_rank -> H_I D_I (from h without q_lora_rank), linear_wk h -> D_I and its
        LayerNorm with bias (2 D_I), linear_weights_proj h -> H_I; no biases. 0 without DSA."""
        if not self.is_dsa:
            return 0
        n, d, _ = self.dsa_dims
        q_in = self.q_lora_rank or self.hidden_size
        return q_in * n * d + self.hidden_size * d + 2 * d + self.hidden_size * n

    @property
    def moe_dims(self) -> tuple[int, int, int]:
        """(num_experts, moe_router_topk, moe_ffn_hidden_size) of a mixture-of-experts model, all
        three set (`_check_moe` requires them together); only MoE terms ask for them."""
        E, k, f_e = self.num_experts, self.moe_router_topk, self.moe_ffn_hidden_size
        assert E is not None and k is not None and f_e is not None, f"{self.name} is not a mixture-of-experts model"
        return E, k, f_e

    @property
    def moe_expert_width(self) -> int:
        """The width the routed experts read and write and the dispatcher moves: `moe_latent_size`
        under LatentMoE (Megatron-LM d98e8a6 megatron/core/transformer/moe/moe_layer.py: fc1_latent_proj
        h -> l before dispatch, fc2_latent_proj l -> h after combine; experts.py builds fc1/fc2 on
        moe_latent_size), else hidden_size."""
        return self.moe_latent_size or self.hidden_size

    @property
    def moe_latent_proj_params(self) -> int:
        """LatentMoE's two projections, h x l and l x h (+ l and h biases with add_bias_linear), TELinear
        `parallel_mode="duplicated"`: every TP rank holds them whole (moe_layer.py at d98e8a6); 0 without."""
        l, h = self.moe_latent_size, self.hidden_size
        if l is None:
            return 0
        return 2 * h * l + ((l + h) if self.add_bias_linear else 0)

    @property
    def mla_dims(self) -> tuple[int, int, int, int]:
        """(kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim) of a multi-latent attention
        model, all four set (`_check_mla` requires them); only MLA terms ask for them."""
        r_kv, d_nope, d_rope, d_v = self.kv_lora_rank, self.qk_head_dim, self.qk_pos_emb_head_dim, self.v_head_dim
        assert r_kv is not None and d_nope is not None and d_rope is not None and d_v is not None, \
            f"{self.name} does not use multi-latent attention"
        return r_kv, d_nope, d_rope, d_v

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def moe_layer_mask(self) -> tuple[bool, ...]:
        """Which layers are MoE: `moe_layer_pattern`, else layer i is MoE when i % moe_layer_freq == 0
        (Megatron-LM `get_gpt_decoder_block_spec`); all False for a dense model."""
        if not self.is_moe:
            return (False,) * self.num_layers
        if self.hybrid_layer_pattern is not None:
            return tuple(c == "E" for c in self.hybrid_layer_pattern)
        if self.moe_layer_pattern is not None:
            return tuple(bool(v) for v in self.moe_layer_pattern)
        return tuple(i % self.moe_layer_freq == 0 for i in range(self.num_layers))
