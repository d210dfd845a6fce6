"""The hybrid part of `ModelSpec`: Megatron-LM's layer pattern of Mamba-Transformer models (Nemotron-H,
Nemotron 3) and Gated DeltaNet ones (Qwen3-Next, Qwen3.5), the Mamba-2 mixer's and the Gated DeltaNet's
dimensions, the pattern's pipeline units. A mixin of ModelSpec, whose fields (hybrid_layer_pattern,
mamba_*, gdn_*) it reads."""

from __future__ import annotations

from typing import Any

# Megatron-LM's hybrid layer symbols (megatron/core/models/hybrid/hybrid_layer_allocation.py
# `Symbols`, at d98e8a6): each symbol is one layer of its own, with its own pre-norm
HYBRID_SYMBOLS = {"M": "mamba", "G": "gdn", "*": "attention", "-": "mlp", "E": "moe"}
SYMBOLS_TEXT = "M (Mamba), G (Gated DeltaNet), * (attention), - (MLP), E (MoE)"
MAMBA_FIELDS = ("mamba_state_dim", "mamba_head_dim", "mamba_num_heads", "mamba_num_groups")
GDN_FIELDS = ("gdn_num_key_heads", "gdn_num_value_heads", "gdn_key_head_dim", "gdn_value_head_dim")


class HybridShape:
    """Hybrid-model checks and derived quantities (module docstring); `self` is a ModelSpec."""

    hybrid_layer_pattern: str | None
    mamba_num_heads: int | None
    mamba_head_dim: int | None
    mamba_num_groups: int | None
    mamba_state_dim: int | None
    mamba_conv_kernel: int
    gdn_num_key_heads: int | None
    gdn_num_value_heads: int | None
    gdn_key_head_dim: int | None
    gdn_value_head_dim: int | None
    num_layers: int
    hidden_size: int
    num_experts: int | None
    moe_layer_pattern: Any
    moe_layer_freq: int
    mtp_num_layers: int
    mtp_hybrid_layer_pattern: str | None
    mtp_use_repeated_layer: bool
    multi_latent_attention: bool
    name: str

    def _check_hybrid(self) -> None:
        """Megatron-LM's hybrid pattern and MambaMixer asserts (hybrid_layer_allocation.py
        `validate_segment_layers`, mamba_mixer.py at d98e8a6: nheads % ngroups)."""
        pattern = self.hybrid_layer_pattern
        if pattern is None:
            if self.mtp_hybrid_layer_pattern is not None or self.mtp_use_repeated_layer:
                raise ValueError("mtp_hybrid_layer_pattern / mtp_use_repeated_layer apply to hybrid models only (a "
                                 "Transformer's MTP depth repeats its last layer); set hybrid_layer_pattern or drop them")
            given = [f for f in MAMBA_FIELDS + GDN_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to hybrid models only; set hybrid_layer_pattern or drop it")
            return
        bad = sorted(set(pattern) - set(HYBRID_SYMBOLS))
        if bad:
            raise ValueError(f"hybrid_layer_pattern has symbol {bad[0]!r}; use {SYMBOLS_TEXT}")
        if len(pattern) != self.num_layers:
            raise ValueError(f"hybrid_layer_pattern lists {len(pattern)} layers but num_layers is {self.num_layers}")
        if ("E" in pattern) != (self.num_experts is not None):
            raise ValueError("hybrid_layer_pattern has MoE layers (E) only with num_experts set, and num_experts "
                             "needs an E in hybrid_layer_pattern")
        if self.multi_latent_attention:
            raise ValueError("multi_latent_attention of a hybrid model is not modelled (Megatron's + MLA layers); "
                             "use false")
        self._check_hybrid_mtp()
        if self.moe_layer_pattern is not None or self.moe_layer_freq != 1:
            raise ValueError("moe_layer_pattern / moe_layer_freq do not apply to a hybrid model: its E layers are MoE")
        if self._layer_fields("M", MAMBA_FIELDS, "Mamba"):
            heads, groups = self.mamba_num_heads, self.mamba_num_groups
            assert heads is not None and groups is not None
            if heads % groups:
                raise ValueError(f"mamba_num_groups ({groups}) must divide mamba_num_heads ({heads})")
        self._check_gdn()

    def _layer_fields(self, symbol: str, fields: tuple[str, ...], kind: str) -> bool:
        """Whether the pattern (or an MTP depth's) has `symbol` layers; if it has, each of `fields` must be set."""
        assert self.hybrid_layer_pattern is not None
        if symbol not in self.hybrid_layer_pattern + (self.mtp_hybrid_layer_pattern or ""):
            return False
        missing = [f for f in fields if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a hybrid model with {kind} layers ({symbol}) needs {missing[0]}")
        return True

    def _check_gdn(self) -> None:
        """The Gated DeltaNet fields a G layer needs, and TransformerConfig's rule that the value heads are a
        multiple of the key heads (transformer_config.py at d98e8a6)."""
        if not self._layer_fields("G", GDN_FIELDS, "Gated DeltaNet"):
            given = [f for f in GDN_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to Gated DeltaNet layers (G) only; add them to "
                                 f"hybrid_layer_pattern or drop it")
            return
        keys, values = self.gdn_num_key_heads, self.gdn_num_value_heads
        assert keys is not None and values is not None
        if values % keys:
            raise ValueError(f"gdn_num_value_heads ({values}) must be a multiple of gdn_num_key_heads ({keys})")

    def _check_hybrid_mtp(self) -> None:
        """A hybrid model's MTP depths as Megatron-LM builds them (d98e8a6): the unified pattern's parts
        after '/' are one per depth, identical, of layer symbols only (hybrid_layer_allocation.py
        `parse_hybrid_pattern`, `_validate_pattern` with allow_pipe False); --mtp-num-layers with a
        hybrid model needs an MTP pattern (arguments.py ~899-907)."""
        mtp, n = self.mtp_hybrid_layer_pattern, self.mtp_num_layers
        if n and not mtp:
            raise ValueError(f"mtp_num_layers ({n}) of a hybrid model needs mtp_hybrid_layer_pattern, the layers of one "
                             f"MTP depth (Megatron's unified --hybrid-layer-pattern 'main/mtp/mtp'; Nemotron 3 Super: '*E')")
        if mtp is None:
            if self.mtp_use_repeated_layer:
                raise ValueError("mtp_use_repeated_layer needs MTP depths: set mtp_num_layers and mtp_hybrid_layer_pattern")
            return
        if not n:
            raise ValueError(f"mtp_hybrid_layer_pattern {mtp!r} needs mtp_num_layers >= 1 (the MTP depths it runs)")
        bad = sorted(set(mtp) - set(HYBRID_SYMBOLS))
        if not mtp or bad:
            raise ValueError(f"mtp_hybrid_layer_pattern has symbol {(bad or [''])[0]!r}; one depth's layers as "
                             f"{SYMBOLS_TEXT}, no '|' or '/'")
        if "E" in mtp and self.num_experts is None:
            raise ValueError("mtp_hybrid_layer_pattern has MoE layers (E) but the model has no experts (num_experts)")

    def _hybrid_units(self) -> tuple[int, int, int, int]:
        """A hybrid model's pipeline units (`pipeline_units`): (0, q - m, m, L/q) for the shortest
        period q of `hybrid_layer_pattern` (m MoE layers in it); a pattern with no period, such as
        Nemotron 3 Nano's, is one unit (a single pipeline stage)."""
        pattern = self.hybrid_layer_pattern
        assert pattern is not None
        L = len(pattern)
        q = next(q for q in range(1, L + 1) if L % q == 0 and pattern == pattern[:q] * (L // q))
        m = pattern[:q].count("E")
        return 0, q - m, m, L // q

    @property
    def is_hybrid(self) -> bool:
        return self.hybrid_layer_pattern is not None

    @property
    def gdn_gpt_layers(self) -> int | None:
        """The GPT layers of a Gated DeltaNet model made of them -- each pair of its pattern a token mixer (G or *)
        then an MLP (E or -), its MTP depth one such layer, no Mamba -- else None. Qwen3-Next and Qwen3.5 are:
        Megatron-Bridge builds them as GPT models with an experimental attention variant, and a source counts
        their layers as the config does (half the pattern)."""
        p = self.hybrid_layer_pattern
        if p is None or "G" not in p or len(p) % 2 or "M" in p or self.mtp_use_repeated_layer:
            return None
        pairs = all(p[i] in "G*" and p[i + 1] in "E-" for i in range(0, len(p), 2))
        return len(p) // 2 if pairs and self.mtp_hybrid_layer_pattern in (None, "*E", "*-") else None

    def hybrid_layer_counts(self, pattern: str | None = None) -> dict[str, int]:
        """Layers of each kind (`HYBRID_SYMBOLS`' names) in `pattern` (default the whole model's)."""
        pattern = self.hybrid_layer_pattern if pattern is None else pattern
        assert pattern is not None, f"{self.name} is not a hybrid model"
        return {kind: pattern.count(sym) for sym, kind in HYBRID_SYMBOLS.items()}

    @property
    def mamba_dims(self) -> tuple[int, int, int, int]:
        """(heads H, head dim P, groups G, state N) of a hybrid model's Mamba-2 mixer (`_check_hybrid`
        requires them with an M layer)."""
        H, P, G, N = self.mamba_num_heads, self.mamba_head_dim, self.mamba_num_groups, self.mamba_state_dim
        assert H is not None and P is not None and G is not None and N is not None, f"{self.name} has no Mamba layers"
        return H, P, G, N

    @property
    def mamba_d_inner(self) -> int:
        """d_inner = H x P (mamba_mixer.py: with mamba_num_heads set, d_inner = nheads * headdim)."""
        H, P, _, _ = self.mamba_dims
        return H * P

    @property
    def mamba_in_proj_width(self) -> int:
        """in_proj's output [z, x, B, C, dt]: 2 d_inner + 2 G N + H (mamba_mixer.py `in_proj`)."""
        H, _, G, N = self.mamba_dims
        return 2 * self.mamba_d_inner + 2 * G * N + H

    @property
    def gdn_key_width(self) -> int:
        """Width of Q (and of K) of a Gated DeltaNet layer: Hk x dk (gdn.py `qk_dim`)."""
        assert self.gdn_num_key_heads is not None and self.gdn_key_head_dim is not None, f"{self.name} has no GDN layers"
        return self.gdn_num_key_heads * self.gdn_key_head_dim

    @property
    def gdn_value_width(self) -> int:
        """Width of V (and of the output gate z): Hv x dv (gdn.py `v_dim`)."""
        assert self.gdn_num_value_heads is not None and self.gdn_value_head_dim is not None, \
            f"{self.name} has no GDN layers"
        return self.gdn_num_value_heads * self.gdn_value_head_dim

    @property
    def gdn_in_proj_width(self) -> int:
        """in_proj's output [q, k, v, z, beta, alpha]: 2 Hk dk + 2 Hv dv + 2 Hv (gdn.py `in_proj_dim`)."""
        assert self.gdn_num_value_heads is not None
        return 2 * self.gdn_key_width + 2 * self.gdn_value_width + 2 * self.gdn_num_value_heads

    @property
    def gdn_conv_channels(self) -> int:
        """Channels of the depthwise conv1d over [q, k, v]: 2 Hk dk + Hv dv (common.py `conv_dim`)."""
        return 2 * self.gdn_key_width + self.gdn_value_width

    @property
    def mamba_conv_channels(self) -> int:
        """Channels of the depthwise conv1d [x, B, C]: d_inner + 2 G N (mamba_mixer.py `conv_dim`)."""
        _, _, G, N = self.mamba_dims
        return self.mamba_d_inner + 2 * G * N

