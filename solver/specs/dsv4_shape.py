"""DeepSeek-V4's attention and residual stream as Megatron-LM's `dev` branch builds them (d48bd6be0a:
experimental_attention_variant/deepseek_v4_hybrid_attention.py and csa.py, transformer/hyper_connection.py,
moe/router.py): the rules on ModelSpec's csa_*, o_*, mHC and hash-routing fields, and the per-layer sizes the
formulation reads. A mixin of ModelSpec.

Every layer attends through a sliding window of `csa_window_size` tokens with one 512-wide KV head (K = V, MQA) and,
by its compression ratio (`csa_compress_ratios`, HF `compress_ratios`): 0 nothing more; 128 every compressed entry
(a compressor pools each 128 tokens into one); 4 the top-k (`dsa_indexer_topk`) of the entries pooled from each 4
tokens (overlapping windows of 8), chosen by a lightning indexer. Queries come through a low-rank Q (q_lora_rank),
the output through `o_groups` grouped projections of rank `o_lora_rank` and one linear back to h. mHC
(`num_residual_streams` > 1, HF hc_mult) widens the residual stream to n copies mixed per layer by two
hyper-connection modules; the first `moe_n_hash_layers` MoE layers choose experts by a token-id table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

CSA_RATIOS = (0, 4, 128)  # transformer_config.py ~1745-1759: the ratios Megatron builds
def mhc_mappings(n: int) -> int:
    """Outputs of an mHC module's mapping projection (hyper_connection.py ~250-266): H_pre (n), H_post (n), H_res (n x n)."""
    return n * n + 2 * n


class Dsv4Shape:
    """DeepSeek-V4 checks and derived sizes (module docstring); `self` is a ModelSpec."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    multi_latent_attention: bool
    q_lora_rank: int | None
    kv_lora_rank: int | None
    qk_head_dim: int | None
    qk_pos_emb_head_dim: int | None
    v_head_dim: int | None
    mtp_num_layers: int
    hybrid_layer_pattern: Any
    num_experts: int | None
    moe_layer_pattern: Any
    dsa_indexer_topk: int | None
    dsa_indexer_n_heads: int | None
    dsa_indexer_head_dim: int | None
    csa_compress_ratios: tuple[int, ...] | None
    csa_window_size: int
    o_groups: int | None
    o_lora_rank: int | None
    num_residual_streams: int
    moe_n_hash_layers: int
    csa_compress_rotary_base: float | None
    if TYPE_CHECKING:  # a property of MoeShape, for the type checker only
        moe_layer_mask: tuple

    def _check_dsv4(self) -> None:
        """Megatron-LM dev's rules (transformer_config.py ~1744-1791, ~3795-3808, ~2878-2907): a ratio for every layer
        and MTP layer, each 0, 4 or 128; multi-latent attention with q_lora_rank, the grouped output projection and,
        with ratio-4 layers, the indexer; qk_head_dim = kv_lora_rank = v_head_dim - the rope part (derived there);
        hash-routed layers lead and are MoE layers. mHC and hash routing go with DeepSeek-V4 here."""
        ratios = self.csa_compress_ratios
        if ratios is None:
            if (self.o_groups or self.o_lora_rank or self.moe_n_hash_layers or self.num_residual_streams > 1
                    or self.csa_compress_rotary_base is not None):
                raise ValueError("o_groups, o_lora_rank, moe_n_hash_layers, num_residual_streams > 1 and "
                                 "csa_compress_rotary_base describe DeepSeek-V4's layers; give csa_compress_ratios "
                                 "too, or drop them")
            return
        if self.hybrid_layer_pattern is not None:
            raise ValueError("DeepSeek-V4's attention in a hybrid layer pattern is not modelled; drop one")
        need = self.num_layers + self.mtp_num_layers
        if len(ratios) < need or any(r not in CSA_RATIOS for r in ratios):
            raise ValueError(f"csa_compress_ratios must give 0, 4 or 128 for each of the {need} layers and MTP layers; "
                             f"got {len(ratios)} values")
        if not (self.multi_latent_attention and self.q_lora_rank and self.o_groups and self.o_lora_rank):
            raise ValueError("DeepSeek-V4's attention needs multi_latent_attention, q_lora_rank, o_groups and o_lora_rank")
        d, d_rope = self.v_head_dim or 0, self.qk_pos_emb_head_dim or 0
        if self.qk_head_dim != d - d_rope or self.kv_lora_rank != d - d_rope:
            raise ValueError(f"DeepSeek-V4's single KV head of v_head_dim {d} holds the rope part: qk_head_dim and "
                             f"kv_lora_rank must be {d - d_rope} (v_head_dim - qk_pos_emb_head_dim)")
        if (self.num_attention_heads * d) % self.o_groups:
            raise ValueError(f"o_groups ({self.o_groups}) must divide the heads' output width {self.num_attention_heads * d}")
        if 4 in ratios[:self.num_layers] and self.dsa_indexer_topk is None:
            raise ValueError("ratio-4 layers pick their compressed keys with an indexer: give dsa_indexer_n_heads, "
                             "dsa_indexer_head_dim and dsa_indexer_topk")
        hashed = self.moe_n_hash_layers
        if hashed and (self.num_experts is None or not all(self.moe_layer_mask[:hashed])):
            raise ValueError(f"moe_n_hash_layers ({hashed}) routes the first {hashed} layers by hash: they must be MoE")

    @property
    def is_dsv4(self) -> bool:
        return self.csa_compress_ratios is not None

    @property
    def csa_shares(self) -> tuple[float, float, float]:
        """The decoder layers' shares of ratios 0, 4 and 128 (`formulation/dsv4.py` prices the average layer)."""
        assert self.csa_compress_ratios is not None, f"{self.name} is not DeepSeek-V4"
        layers = self.csa_compress_ratios[:self.num_layers]
        return tuple(sum(r == ratio for r in layers) / self.num_layers for ratio in CSA_RATIOS)  # type: ignore[return-value]

    @property
    def mhc_module_params(self) -> int:
        """One hyper-connection module (hyper_connection.py ~250-266): mapping_proj n h -> n^2 + 2n with its bias, and
        the three gates alpha; two per layer. 0 without mHC."""
        n = self.num_residual_streams
        return 0 if n == 1 else (n * self.hidden_size + 1) * mhc_mappings(n) + 3

    def _dsv4_compressor_params(self, ratio: int, width: int) -> int:
        """A compressor (csa.py ~1050-1096): linear_wkv and linear_wgate h -> coff w (coff 2 at ratio 4: the
        overlapping window, 1 at 128), the position bias ape (ratio x coff w) and the RMSNorm of w."""
        coff = 2 if ratio == 4 else 1
        return 2 * self.hidden_size * coff * width + ratio * coff * width + width

    @property
    def dsv4_attention_params(self) -> float:
        """The average layer's attention weights (deepseek_v4_hybrid_attention.py ~526-570, ~172-202; csa.py
        ~1435-1519): Q down h x rq and its norm, Q up rq x a d, the KV head h x d and its norm, the sinks (a), the
        grouped output a d x ro and ro G x h; per ratio its compressor, and at ratio 4 the indexer (Q rq x ni di,
        head weights h x ni, its own compressor of width di); both mHC modules."""
        h, a, d = self.hidden_size, self.num_attention_heads, self.v_head_dim or 0
        rq, ro, groups = self.q_lora_rank or 0, self.o_lora_rank or 0, self.o_groups or 0
        common = h * rq + rq + rq * a * d + h * d + d + a + a * d * ro + groups * ro * h + 2 * self.mhc_module_params
        shares = dict(zip(CSA_RATIOS, self.csa_shares))
        index = 0
        if shares[4]:
            ni, di = self.dsa_indexer_n_heads or 0, self.dsa_indexer_head_dim or 0
            index = rq * ni * di + h * ni + self._dsv4_compressor_params(4, di)
        return (common + shares[4] * (self._dsv4_compressor_params(4, d) + index)
                + shares[128] * self._dsv4_compressor_params(128, d))
