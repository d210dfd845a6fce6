"""Megatron-LM's `--pipeline-model-parallel-layout` as an input: the grammar, Megatron's checks,
and how the formulation prices a layout. Read at Megatron-LM d98e8a6,
megatron/core/transformer/pipeline_parallel_layer_layout.py (`PipelineParallelLayerLayout`):

- grammar (`parse_str_to_list`, lines 283-321): commas are cosmetic and removed; then one pass of
  `\\(([^)]+)\\)\\*(\\d+)` unrolls `(...)*N` (no nesting: the group holds no `)`), then one pass of
  `(.)\\*(\\d+)` unrolls `x*N`; the result is split on `|` into stages (an empty stage is legal),
  each character one of `E` embedding, `L` loss, `t` a decoder layer, `m` an MTP layer, anything
  else refused ("Invalid layer character"). `parse_layout` is that code, the same regular
  expressions in the same order.
- pp and vp (`__init__`, lines 40-55; megatron/training/arguments.py validate_args lines 941-952):
  the stage count must be divisible by pp, vp = stages / pp, and stage i is virtual stage i // pp of
  rank i % pp ("Let i = a * pp_size + b", transformer_config.py); TransformerConfig.__post_init__
  (transformer_config.py lines 2241-2291) refuses a layout beside
  `--account-for-embedding/loss-in-pipeline-split` or first/last-stage counts, and a vp that
  conflicts with the layout's; validate_args (arguments.py lines 928-939) refuses it beside
  `--num-layers-per-virtual-pipeline-stage` / `--num-virtual-stages-per-pipeline-rank`, and
  (lines 825-828) beside a hybrid layer pattern.
- validation (`validate_layer_layout`, lines 86-151), in Megatron's order: the first layer is the
  embedding and the last the loss (in layer order: virtual stage 0 of every rank, then 1, ...),
  each exactly once; the decoder layers number num_layers; the MTP layers number mtp_num_layers and
  follow every decoder layer; the MTP layers sit in the last virtual stage of one rank, all of
  them (`mtp_standalone` when that rank is not the last).
- layer ids (`get_layer_offset`, lines 171-193): decoder layers are numbered in layer order, so
  rank r holds the layers of its chunks (r, 0), (r, 1), ... at those positions: with interleaving
  a rank's layers are not contiguous (which decides where a MoE model's leading dense layers land).

What the formulation prices (`priced_split`): a rank by its layer total (the interleaved schedule
of `formulation.pipeline` splits a rank's work over its vp chunks evenly), the embedding on rank 0,
the LM head, the loss and the MTP modules on the last rank, and a MoE model's layers in pipeline
units (`ModelSpec.pipeline_units`: the k leading dense layers on rank 0, then whole units). A layout
within those rules is priced exactly; one that places a MoE model's dense layers elsewhere is priced
by an upper bound (stated in the plan's assumptions); the embedding off rank 0, the loss off the
last rank and standalone MTP (on a rank before the last) are refused, each in one line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..specs import ModelSpec

LAYER_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
# parse_str_to_list's two patterns, applied in this order (pipeline_parallel_layer_layout.py lines 291-301)
_UNROLL = (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)")
# solveplan's own bound on the unrolled text (Megatron has none): a model has at most 65536 layers
# (specs/base.py), so a layout of a planned model is far below it, and a hostile "t*999999999" is refused
# before it is built
MAX_LAYOUT_CHARS = 1 << 18
MEGATRON_FLAG = "--pipeline-model-parallel-layout"


def _unroll(text: str, pattern: str) -> str:
    def repeat(match: re.Match) -> str:
        if len(match.group(1)) * int(match.group(2)) > MAX_LAYOUT_CHARS:
            raise ValueError(f"{match.group(0)!r} unrolls to more than {MAX_LAYOUT_CHARS} characters; "
                             f"a layout lists the model's layers once")
        return match.group(1) * int(match.group(2))

    out = re.sub(pattern, repeat, text)
    if len(out) > MAX_LAYOUT_CHARS:
        raise ValueError(f"the layout unrolls to {len(out)} characters, above {MAX_LAYOUT_CHARS}; a layout lists "
                         f"the model's layers once")
    return out


def parse_layout(text: str) -> list[str]:
    """The layout's stages in Megatron's order (stage i: virtual stage i // pp of rank i % pp),
    each a string of `E`, `L`, `t`, `m`: `parse_str_to_list` (see the module docstring).
    ValueError, one line, on a character Megatron refuses."""
    s = str(text).replace(",", "")
    for pattern in _UNROLL:
        s = _unroll(s, pattern)
    stages = s.split("|")
    for stage in stages:
        bad = next((ch for ch in stage if ch not in LAYER_CHARS), None)
        if bad is not None:
            raise ValueError(f"invalid layer character {bad!r} in stage {stage[:40]!r}: Megatron's layout knows E "
                             f"(embedding), t (decoder layer), m (MTP layer), L (loss), '|' between stages, "
                             f"x*N and (...)*N repetition (not nested) and cosmetic commas")
    return stages


@dataclass(frozen=True)
class Layout:
    """A parsed layout: `stages` in Megatron's order, over `pp` ranks of `vp` virtual stages."""

    text: str
    pp: int
    vp: int
    stages: tuple[str, ...]

    def chunk(self, rank: int, virtual: int) -> str:
        return self.stages[virtual * self.pp + rank]

    def rank_of_stage(self, i: int) -> int:
        return i % self.pp

    @property
    def chunk_layers(self) -> list[list[int]]:
        """Decoder layers of each chunk, [rank][virtual stage]."""
        return [[self.chunk(r, v).count("t") for v in range(self.vp)] for r in range(self.pp)]

    @property
    def rank_layers(self) -> list[int]:
        """Decoder layers per pipeline rank (its chunks summed): the plan's layers per stage."""
        return [sum(c) for c in self.chunk_layers]

    def layer_ranks(self) -> list[int]:
        """The rank holding each decoder layer, by layer id (`get_layer_offset`: layer order)."""
        return [self.rank_of_stage(i) for i, stage in enumerate(self.stages) for ch in stage if ch == "t"]

    def ranks_holding(self, ch: str) -> list[int]:
        return sorted({self.rank_of_stage(i) for i, stage in enumerate(self.stages) if ch in stage})


def stage_count(text: str) -> int:
    """Stages (pp x vp) of a layout: `get_num_stages_from_str`."""
    return len(parse_layout(text))


def layout_degrees(text: str, pp: int | None, vp: int | None) -> tuple[int, int]:
    """(pp, vp) of a layout: vp = stages / pp as Megatron derives it (validate_args: "The length
    of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size"); pp from
    a given vp when pp is not given. ValueError (one line, with the fix) otherwise."""
    n = stage_count(text)
    if pp is None and vp is None:
        raise ValueError(f"the layout lists {n} stages, pp x vp of them: give pp (the layout then fixes vp = {n} / pp)")
    if pp is None:
        assert vp is not None
        if n % vp:
            raise ValueError(f"the layout's {n} stages are not divisible by vp = {vp}; give pp (vp follows)")
        pp = n // vp
    if n % pp:
        fits = [p for p in range(1, n + 1) if n % p == 0]
        raise ValueError(f"the layout's {n} stages are not divisible by pp = {pp} (Megatron: 'The length of "
                         f"pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size'); use pp "
                         f"in {fits[:12]}")
    if vp is not None and vp != n // pp:
        raise ValueError(f"vp = {vp} conflicts with the layout's {n} stages over pp = {pp} (vp {n // pp}; Megatron: "
                         f"'virtual_pipeline_model_parallel_size conflicts with pipeline_model_parallel_layout'); "
                         f"leave vp out")
    return pp, n // pp


def layout_problems(layout: Layout, num_layers: int, mtp_num_layers: int) -> list[str]:
    """Each rule of `validate_layer_layout` the layout breaks, in Megatron's order, as 'what is
    wrong; the fix' (see the module docstring); none for a layout Megatron accepts."""
    flat = "".join(layout.stages)
    errs = []
    if not flat or flat[0] != "E":
        errs.append(f"the first layer must be the embedding, got {LAYER_CHARS.get(flat[:1], 'nothing')}; start the "
                    f"first stage with E")
    if not flat or flat[-1] != "L":
        errs.append(f"the last layer must be the loss, got {LAYER_CHARS.get(flat[-1:], 'nothing')}; end the last "
                    f"stage with L")
    for ch in "EL":
        if flat.count(ch) != 1:
            errs.append(f"{LAYER_CHARS[ch]} ({ch}) must appear exactly once, it appears {flat.count(ch)} times; "
                        f"list it once")
    if flat.count("t") != num_layers:
        errs.append(f"{flat.count('t')} decoder layers (t) but the model has num_layers {num_layers}; list each "
                    f"layer once")
    if flat.count("m") != mtp_num_layers:
        errs.append(f"{flat.count('m')} MTP layers (m) but the model has mtp_num_layers {mtp_num_layers}; list "
                    f"each MTP layer once")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        errs.append("decoder layers must be placed before MTP layers; move every m after the last t")
    errs += _mtp_place_problems(layout, mtp_num_layers)
    return errs


def _mtp_place_problems(layout: Layout, mtp_num_layers: int) -> list[str]:
    """validate_layer_layout's rules on where the MTP layers sit (lines 121-136)."""
    errs = []
    for r in range(layout.pp):
        if any("m" in layout.chunk(r, v) for v in range(layout.vp - 1)):
            errs.append(f"MTP layers on rank {r} before its last virtual stage; Megatron keeps the MTP in the last "
                        f"virtual stage of a rank")
            break
    for r in range(layout.pp):
        last = layout.chunk(r, layout.vp - 1)
        if "m" in last and last.count("m") != mtp_num_layers:
            errs.append(f"rank {r}'s last virtual stage holds {last.count('m')} of the {mtp_num_layers} MTP layers; "
                        f"Megatron keeps all of them in one virtual stage")
    return errs


def read_layout(text: str, pp: int, model: ModelSpec) -> Layout:
    """The layout parsed over `pp` ranks and checked as Megatron checks it for `model`;
    ValueError (one line, the rule and the fix) at the first rule it breaks."""
    if model.is_hybrid:
        raise ValueError("Megatron-LM refuses --pipeline-model-parallel-layout with a hybrid layer pattern (its '|' "
                         "separators define the stages); leave the layout out")
    stages = parse_layout(text)
    pp, vp = layout_degrees(text, pp, None)
    layout = Layout(text=str(text), pp=pp, vp=vp, stages=tuple(stages))
    errs = layout_problems(layout, model.num_layers, model.mtp_num_layers)
    if errs:
        raise ValueError(errs[0] + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""))
    return layout


def _placement_refusal(layout: Layout) -> str | None:
    """Why the formulation cannot price where the layout puts the embedding, the loss or the MTP
    modules (module docstring), or None."""
    first, last = layout.ranks_holding("E")[0], layout.ranks_holding("L")[0]
    if first != 0:
        return (f"the embedding on pipeline rank {first} (rank 0's first virtual stage empty) is not modelled: the "
                f"formulation prices it on rank 0; give rank 0's first stage the E")
    if last != layout.pp - 1:
        return (f"the loss on pipeline rank {last}, not the last ({layout.pp - 1}), is not modelled: the formulation "
                f"prices the LM head and loss on the last rank; put L in the last stage")
    mtp = layout.ranks_holding("m")
    if mtp and mtp[0] != layout.pp - 1:
        return (f"standalone MTP (the MTP layers on rank {mtp[0]}, before the last rank) is not modelled: the "
                f"formulation prices the MTP modules with the LM head on the last rank; put the m before the L")
    return None


def _kind_counts(model: ModelSpec, layout: Layout) -> list[tuple[int, int]]:
    """(dense, MoE) decoder layers per rank, by layer id (`Layout.layer_ranks`)."""
    out = [[0, 0] for _ in range(layout.pp)]
    for layer, r in enumerate(layout.layer_ranks()):
        out[r][int(bool(model.moe_layer_mask[layer]))] += 1
    return [(d, e) for d, e in out]


def priced_split(model: ModelSpec, layout: Layout) -> tuple[list[int], list[str]]:
    """(pipeline units per rank that the formulation prices, the assumptions that pricing makes)
    for a layout `read_layout` accepted. Rank r holding d_r dense and e_r MoE layers is priced
    exactly when they are k*[r = 0] + u*d dense and u*m MoE (`ModelSpec.pipeline_units`: units of
    d dense and m MoE layers, the k leading dense layers on rank 0); otherwise by the fewest units
    u_r covering them, a dense layer beyond rank 0's k priced in a MoE layer's place
    (u_r = max(ceil(e_r / m), ceil((d_r - k*[r = 0] + e_r) / (d + m)))) while rank 0 keeps its k
    dense layers: more layers than the rank holds, each at least as costly where a MoE layer costs
    at least a dense one -- said in the assumptions. ValueError (one line) for what is not
    modelled (`_placement_refusal`)."""
    why = _placement_refusal(layout)
    if why:
        raise ValueError(why)
    k, d, m, _ = model.pipeline_units
    units, off = [], []
    for r, (dense, moe) in enumerate(_kind_counts(model, layout)):
        own = dense - (k if r == 0 else 0)
        u = max(math.ceil(moe / m) if m else 0, math.ceil(max(0, own + moe) / (d + m)))
        units.append(u)
        if own != u * d or moe != u * m:
            off.append((r, dense, moe, u))
    notes = [f"pipeline layout {layout.text!r} (pp {layout.pp} x vp {layout.vp}): layers per rank "
             f"{layout.rank_layers}, each rank priced by its total over its virtual stages"]
    uneven = [r for r, c in enumerate(layout.chunk_layers) if max(c) - min(c) > 1]
    if uneven:
        notes.append(f"the layout's chunks on rank(s) {uneven[:6]} differ by more than one layer "
                     f"({[layout.chunk_layers[r] for r in uneven[:3]]}): the interleaved schedule is priced as if each "
                     f"rank's work were spread evenly over its {layout.vp} chunks")
    if off:
        held = "; ".join(f"rank {r}: {dn} dense + {mo} MoE, priced as {u * d + (k if r == 0 else 0)} dense + {u * m} MoE"
                         for r, dn, mo, u in off[:4])
        notes.append(f"the layout does not hold {model.name}'s layers in the formulation's pipeline units (the {k} "
                     f"leading dense layers on rank 0, then units of {d} dense + {m} MoE): {held}; an upper bound "
                     f"where a MoE layer costs at least a dense one")
    return units, notes
