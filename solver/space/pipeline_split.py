"""Megatron-LM's split of the transformer layers over pipeline ranks and virtual stages when the
embedding and/or the loss count as a layer (`--account-for-embedding-in-pipeline-split`,
`--account-for-loss-in-pipeline-split`; TransformerConfig.account_for_embedding_in_pipeline_split
/ account_for_loss_in_pipeline_split). The one place solveplan states that rule; read at
Megatron-LM d98e8a6:

- megatron/core/transformer/transformer_block.py `get_num_layers_to_build`: the layers plus one
  slot for the embedding (plus one for the loss) are split evenly, S = L + e + l slots, S / pp per
  rank and S / (pp * vp) per virtual stage; the first virtual stage of the first rank builds one
  transformer layer fewer (its slot is the embedding), the last virtual stage of the last rank
  one fewer (the loss), asserting that none builds fewer than 0.
- megatron/core/transformer/transformer_layer.py `get_transformer_layer_offset`: virtual stage
  v of rank r starts at layer v * S / vp + r * S / (pp * vp), less 1 for the embedding's slot on
  every stage but the first.
- megatron/training/arguments.py `validate_args` and TransformerConfig.__post_init__
  (megatron/core/transformer/transformer_config.py): S must be divisible by pp ("Number of layers
  should be divisible by the pipeline-model-parallel size"), and with interleaving S / pp by vp
  ("number of layers on each pipeline rank ... must be divisible by
  virtual_pipeline_model_parallel_size"); the flags cannot be combined with
  `--decoder-first/last-pipeline-num-layers` nor with `--pipeline-model-parallel-layout`
  ("pipeline_model_parallel_layout cannot be set with other pipeline layout arguments"), so the
  chunks are always even in slots.

Where solveplan is stricter than Megatron, and why: every pipeline rank must hold at least one
transformer layer (the formulation prices a stage's time and memory from its layers; a rank
holding only the embedding is not a stage it models).
"""

from __future__ import annotations

from ..specs import ModelSpec

MEGATRON_FLAGS = {"account_for_embedding": "--account-for-embedding-in-pipeline-split",
                  "account_for_loss": "--account-for-loss-in-pipeline-split"}


def slot_count(num_layers: int, embedding: bool, loss: bool) -> int:
    """S = the transformer layers plus one slot each for the embedding and the loss when they count."""
    return num_layers + int(bool(embedding)) + int(bool(loss))


def _counted(embedding: bool, loss: bool) -> str:
    return " and ".join(n for n, on in (("embedding", embedding), ("loss", loss)) if on)


def split_problems(num_layers: int, pp: int, vp: int, embedding: bool, loss: bool) -> list[tuple[str, str]]:
    """(field, 'what is wrong; the fix') for each rule of the module docstring the configuration
    breaks; none when neither the embedding nor the loss counts (that split is the planner's)."""
    if not (embedding or loss):
        return []
    field = "account_for_embedding" if embedding else "account_for_loss"
    S, what = slot_count(num_layers, embedding, loss), _counted(embedding, loss)
    fits = [p for p in range(2, S + 1) if S % p == 0]
    if S % pp:
        return [(field, f"{num_layers} layers + the {what} = {S} slots are not divisible by pp = {pp} (Megatron-LM "
                        f"validate_args: 'Number of layers should be divisible by the pipeline-model-parallel "
                        f"size'); use pp in {fits[:8]} or leave the {what} out of the split")]
    per_rank = S // pp
    if vp > 1 and per_rank % vp:
        return [("vp", f"{per_rank} slots per pipeline rank (counting the {what}) are not divisible by vp = {vp} "
                       f"(Megatron-LM TransformerConfig: 'number of layers on each pipeline rank ... must be "
                       f"divisible by virtual_pipeline_model_parallel_size'); use a vp dividing {per_rank}")]
    first = per_rank - int(bool(embedding)) - (int(bool(loss)) if pp == 1 else 0)
    last = per_rank - int(bool(loss)) - (int(bool(embedding)) if pp == 1 else 0)
    if min(first, last) < 1:
        return [(field, f"pp = {pp} leaves the {'first' if first < 1 else 'last'} pipeline rank {per_rank} slot(s), "
                        f"none of them a transformer layer once the {what} take theirs: a rank of no layers is "
                        f"not priced; use a smaller pp")]
    return []


def virtual_stage_layers(num_layers: int, pp: int, vp: int, embedding: bool, loss: bool) -> list[list[int]]:
    """Transformer layers built by each virtual stage of each rank, [virtual stage][rank], as
    `get_num_layers_to_build` (transformer_block.py) gives them. ValueError when the split is
    illegal (`split_problems`)."""
    bad = split_problems(num_layers, pp, vp, embedding, loss)
    if bad:
        raise ValueError(bad[0][1])
    S = slot_count(num_layers, embedding, loss)
    per = S // (pp * vp)
    out = [[per] * pp for _ in range(vp)]
    if embedding:
        out[0][0] -= 1
    if loss:
        out[vp - 1][pp - 1] -= 1
    return out


def layer_offsets(num_layers: int, pp: int, vp: int, embedding: bool, loss: bool) -> list[list[int]]:
    """The first layer index of each virtual stage of each rank, [virtual stage][rank], as
    `get_transformer_layer_offset` (transformer_layer.py) gives it."""
    virtual_stage_layers(num_layers, pp, vp, embedding, loss)  # the same legality
    S = slot_count(num_layers, embedding, loss)
    per = S // (pp * vp)
    return [[v * (S // vp) + r * per - int(bool(embedding) and (v, r) != (0, 0)) for r in range(pp)]
            for v in range(vp)]


def rank_layers(num_layers: int, pp: int, vp: int, embedding: bool, loss: bool) -> list[int]:
    """Transformer layers per pipeline rank (its virtual stages summed): the split the
    formulation prices."""
    chunks = virtual_stage_layers(num_layers, pp, vp, embedding, loss)
    return [sum(c[r] for c in chunks) for r in range(pp)]


def unit_split(model: ModelSpec, pp: int, vp: int, embedding: bool, loss: bool) -> list[int] | None:
    """Megatron's split in the model's pipeline units (`ModelSpec.pipeline_units`: one per layer
    of a dense model), or None when it is illegal or gives a rank layers that are not whole units
    (a MoE model's ranks must hold their dense and MoE layers in the unit pattern the formulation
    prices: the leading dense layers on the first rank, then whole units)."""
    L = model.num_layers
    if split_problems(L, pp, vp, embedding, loss):
        return None
    counts = rank_layers(L, pp, vp, embedding, loss)
    units = model.layers_to_units(counts)
    if units is None or min(units) < 1:
        return None
    if not model.is_moe:
        return units
    _, _, m, _ = model.pipeline_units
    mask = model.moe_layer_mask
    sizes, starts = virtual_stage_layers(L, pp, vp, embedding, loss), layer_offsets(L, pp, vp, embedding, loss)
    for r in range(pp):  # the formulation prices a rank by its counts of dense and MoE layers
        moe = sum(sum(mask[starts[v][r]:starts[v][r] + sizes[v][r]]) for v in range(vp))
        if moe != units[r] * m:
            return None
    return units
