"""How a model's layers are split over pipeline stages (`PipelineUnits.pipeline_units`): a prefix the first stage
holds, then identical units, so that every split searched is priced exactly by costs linear in one count per
stage. A mixin of ModelSpec, whose layer masks (`moe_layer_mask`, `moe_shape.index_mask`) and hybrid units it reads."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .moe_shape import index_mask


@lru_cache(maxsize=256)
def _boundaries(freq: int, offset: int, layers: int, hash_layers: int) -> tuple[bool, ...]:
    """`PipelineUnits.stage_boundaries` of these fields (cached): starts on a layer that runs the indexer
    (`moe_shape.index_mask`; every layer with freq 1), never inside the first `hash_layers`."""
    starts = index_mask(freq, offset, layers)
    return tuple(ok and not 0 < c < hash_layers for c, ok in enumerate(starts)) + (True,)


@lru_cache(maxsize=256)
def _units_from(mask: tuple, k: int, allowed: tuple) -> tuple[int, int, int, int] | None:
    """(k, d, m, n): the prefix of k layers, then n units of the shortest period of `mask[k:]` whose every start
    is an `allowed` stage boundary (`allowed[c]`: a stage may start after c layers); None when the prefix's end is
    not one. Cached: the search asks for a model's units thousands of times."""
    rest = mask[k:]
    for q in range(1, len(rest) + 1):
        n = len(rest) // q
        if len(rest) % q == 0 and rest == rest[:q] * n and all(allowed[k + q * i] for i in range(n)):
            m = sum(rest[:q])
            return k, q - m, m, n
    return None


class PipelineUnits:
    """Pipeline units and the conversions between layers and units (module docstring); `self` is a ModelSpec."""

    num_layers: int
    hybrid_layer_pattern: Any
    moe_n_hash_layers: int
    dsa_indexer_topk_freq: int
    dsa_indexer_skip_topk_offset: int
    if TYPE_CHECKING:  # properties of the other mixins (MoeShape, HybridShape), for the type checker only
        is_moe: bool
        moe_layer_mask: tuple
        dsa_index_sharing: bool

        def _hybrid_units(self) -> tuple[int, int, int, int]: ...

    @property
    def stage_boundaries(self) -> tuple[bool, ...]:
        """For each layer count c = 0 .. L, whether a stage (or virtual stage) may start after c layers: with
        DeepSeek Sparse Attention's index sharing only on a layer that computes its own top-k (`index_mask`;
        "Cross-layer top-k sharing does not cross PP boundaries. Choose a pipeline layout where each stage starts
        on a computing layer": Megatron-LM d98e8a6 experimental_attention_variant_module_specs.py
        `_validate_dsa_index_share_pipeline_split`); never inside DeepSeek-V4's hash-routed layers, which
        Megatron-LM dev keeps on the embedding's stage (transformer_config.py ~2882-2896); everywhere otherwise."""
        freq = self.dsa_indexer_topk_freq if self.dsa_index_sharing else 1
        return _boundaries(freq, self.dsa_indexer_skip_topk_offset, self.num_layers, self.moe_n_hash_layers)

    def stage_boundary_ok(self, count: int) -> bool:
        """Whether a stage may start after `count` layers (`stage_boundaries`)."""
        return self.stage_boundaries[count]

    @property
    def pipeline_units(self) -> tuple[int, int, int, int]:
        """(k, d, m, n) = k layers held by the first stage (`pipeline_prefix`: the leading dense layers, and with
        index sharing the layers up to its first computing boundary), then n identical units of d dense and m MoE
        layers each (the periodic remainder of `moe_layer_mask`, each unit starting on an allowed boundary:
        `stage_boundaries`). A dense model: (0, 1, 0, num_layers), a unit per layer; all layers MoE (Mixtral,
        Qwen3-MoE): (0, 0, 1, L); DeepSeek-V3's first 3 dense: (3, 0, 1, 58); Llama 4 Maverick's alternation:
        (0, 1, 1, 24); GLM-5.2 (3 dense, top-k on layers 1-3, 7, 11, ...): (6, 0, 4, 18). Of the readings (no
        prefix, the leading dense layers, the first boundary after them) the one with most units is taken; a
        pattern with no period is one unit (a single pipeline stage)."""
        if self.hybrid_layer_pattern is not None:
            return self._hybrid_units()
        if not self.is_moe and not self.dsa_index_sharing:
            return 0, 1, 0, self.num_layers
        mask, allowed = self.moe_layer_mask, self.stage_boundaries
        lead = next((i for i, v in enumerate(mask) if v), 0)
        seeds = (0, lead, self.moe_n_hash_layers)
        starts = {0, lead} | {next(c for c in range(x, self.num_layers + 1) if allowed[c]) for x in seeds}
        found = [u for k in sorted(starts) if k < self.num_layers and (u := _units_from(mask, k, allowed))]
        return max(found, key=lambda u: u[3])  # k = 0 always has one: the whole model as a unit

    @property
    def pipeline_prefix(self) -> tuple[int, int]:
        """(dense, MoE) layers among the `pipeline_units` prefix the first stage holds."""
        k = self.pipeline_units[0]
        moe = sum(self.moe_layer_mask[:k]) if self.is_moe else 0
        return k - moe, moe

    @property
    def num_pipeline_units(self) -> int:
        """What a layer split divides over the stages (`pipeline_units`; num_layers for a dense model)."""
        return self.pipeline_units[3]

    def units_to_layers(self, units) -> list[int]:
        """Layers per stage of a split given in pipeline units (`pipeline_units`)."""
        k, d, m, _ = self.pipeline_units
        return [int(u) * (d + m) + (k if i == 0 else 0) for i, u in enumerate(units)]

    def layers_to_units(self, layers) -> list[int] | None:
        """The split in pipeline units of `layers` per stage; None when it cuts a unit or does
        not give the first stage the prefix."""
        k, d, m, _ = self.pipeline_units
        out = [int(x) - (k if i == 0 else 0) for i, x in enumerate(layers)]
        if any(x < 0 or x % (d + m) for x in out):
            return None
        return [x // (d + m) for x in out]
