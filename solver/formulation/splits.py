"""Layer splits over the pipeline stages: the balanced (textbook) split, Megatron-LM's split of a
shape that counts the embedding or the loss as a layer (`accounted_splits`, the rule in
`space.pipeline_split`), each shape's default split (`default_splits`), and water-filling -- one
bisection that every split and bound of this kind uses.

Water-filling. When stage i holding l layers costs `slope_i*l + const_i` (a stage slot in
seconds, or a stage's memory in bytes: both are linear in the layer count once the shape is
fixed, `formulation.linear`), a split whose largest stage cost is at most M exists iff every
stage can hold at least one layer and `sum_i min(upper_i, floor((M - const_i)/slope_i)) >= L`.
`waterfill` bisects on M; `fill` turns the bound it finds into a split (each stage its share,
then layers taken back from the costliest stages until they sum to L). Used for:

- `heuristic_splits`: the split that minimises the largest stage slot within each stage's
  memory limit (the incumbent of `search.candidates` and of the CP-SAT model);
- `min_max_slot_s`: a lower bound of the largest stage slot over every split that fits (the
  memory-aware time bound of the pruning);
- `least_memory_splits`: the split that minimises the peak stage memory (what an INFEASIBLE
  verdict reports, `diagnose`).
"""

from __future__ import annotations

import numpy as np

from ..space.pipeline_layout import priced_split, read_layout
from ..space.pipeline_split import unit_split
from ..space.shapes import Shapes
from ..specs import ModelSpec
from .coefficients import StageCoefficients
from .linear import LinearForm, expand, memory_feasible, pp_blocks
from .pipeline import stage_arrays, stage_memory_bytes


def balanced_split(num_layers: int, pp: int) -> list[int]:
    """The textbook split: as even as possible, extra layers on the middle stages (the first
    and last stages also hold the embedding and the LM head)."""
    base, extra = divmod(num_layers, pp)
    counts = [base] * pp
    order = sorted(range(pp), key=lambda i: (i in (0, pp - 1), abs(i - (pp - 1) / 2)))
    for i in order[:extra]:
        counts[i] += 1
    return counts


def balanced_layers_matrix(num_layers: int, pp: np.ndarray) -> np.ndarray:
    """The balanced split of every shape, as rows (zeros beyond each pp)."""
    P = int(pp.max()) if len(pp) else 1
    out = np.zeros((len(pp), P), dtype=np.int64)
    cache = {}
    for i, p in enumerate(pp.tolist()):
        if p not in cache:
            cache[p] = balanced_split(num_layers, p)
        out[i, :p] = cache[p]
    return out


def accounted_splits(model: ModelSpec, shapes: Shapes) -> np.ndarray:
    """(S, P) per shape that counts the embedding or the loss as a layer (`Shapes.accounted`):
    Megatron-LM's split in pipeline units (`space.pipeline_split.unit_split`), the only split
    such a shape has; zero rows for the other shapes (their split is the planner's)."""
    P = int(shapes.pp.max()) if len(shapes) else 1
    out = np.zeros((len(shapes), P), dtype=np.int64)
    cache: dict = {}
    for i in np.flatnonzero(shapes.accounted).tolist():
        key = (int(shapes.pp[i]), int(shapes.vp[i]), bool(shapes.account_for_embedding[i]),
               bool(shapes.account_for_loss[i]))
        if key not in cache:
            cache[key] = unit_split(model, *key)
            if cache[key] is None:
                raise ValueError(f"pp={key[0]} vp={key[1]} with embedding={key[2]} loss={key[3]} counted is not a "
                                 f"split Megatron-LM builds for {model.name}")
        out[i, :key[0]] = cache[key]
    return out


def with_accounted(model: ModelSpec, shapes: Shapes, splits: np.ndarray) -> np.ndarray:
    """`splits` (S x P, one row per shape) with the row of every accounted shape replaced by
    Megatron's split (in place; returned)."""
    acc = np.flatnonzero(shapes.accounted)
    if len(acc):
        fixed = accounted_splits(model, shapes.take(acc))
        splits[acc] = 0
        splits[acc, :fixed.shape[1]] = fixed
    return splits


def default_splits(model: ModelSpec, shapes: Shapes) -> np.ndarray:
    """(S, P) the split of each shape where the planner does not choose one: Megatron's for an
    accounted shape, the balanced split of the pipeline units otherwise."""
    return with_accounted(model, shapes, balanced_layers_matrix(model.num_pipeline_units, shapes.pp))


def layout_splits(model: ModelSpec, layout: str, shapes: Shapes) -> np.ndarray:
    """(S, pp) the split of every shape as a pipeline layout prices it (the layout's units,
    `space.pipeline_layout.priced_split`): the shapes of a job whose layout fixes pp and vp, every
    one of them at that pp and vp (ValueError otherwise)."""
    pp = int(shapes.pp[0]) if len(shapes) else 1
    lay = read_layout(layout, pp, model)
    if len(shapes) and ((shapes.pp != lay.pp).any() or (shapes.vp != lay.vp).any() or shapes.accounted.any()):
        raise ValueError(f"the layout {layout!r} fixes pp = {lay.pp} and vp = {lay.vp}, with neither the embedding nor "
                         f"the loss counted: every shape must have them")
    units, _ = priced_split(model, lay)
    return np.tile(np.asarray(units, dtype=np.int64), (len(shapes), 1))


def default_layers(model: ModelSpec, pp: int, vp: int = 1, account_for_embedding: bool = False,
                   account_for_loss: bool = False) -> list[int]:
    """Layers per stage (not units) of one configuration's default split (`default_splits`)."""
    shape = Shapes.single(pp=pp, vp=vp, account_for_embedding=account_for_embedding, account_for_loss=account_for_loss)
    return model.units_to_layers(default_splits(model, shape)[0, :pp].tolist())


def waterfill(slope, const, upper, active, num_layers: int, *, iterations: int,
              rel_tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bisection on the largest stage cost M of a split (see the module docstring). Arrays are
    (R, P) per stage (`slope` may be (R, 1)); `upper` bounds each stage's layers; inactive
    stages (beyond pp) hold none. Returns (lo, hi) per row: no split has its costliest stage
    below lo, and `fill(..., hi, ...)` reaches hi. A row stops once hi - lo <= rel_tol * hi
    (each row on its own, so a row's answer does not depend on the others), else after
    `iterations` halvings."""
    L = num_layers
    lo = np.zeros(const.shape[0])
    hi = np.where(active, const + slope * L, -np.inf).max(axis=1) + 1.0
    going = np.ones(len(lo), dtype=bool)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        cnt = np.where(active, np.clip(np.floor((mid[:, None] - const) / slope), 0, upper), 0)
        ok = np.where(active, cnt >= 1, True).all(axis=1) & (cnt.sum(axis=1) >= L)
        hi = np.where(going & ok, mid, hi)
        lo = np.where(going & ~ok, mid, lo)
        if rel_tol is not None:
            going &= hi - lo > rel_tol * hi
            if not going.any():
                break
    return lo, hi


def fill(slope, const, upper, active, hi: np.ndarray, num_layers: int) -> np.ndarray:
    """The split that reaches `hi` (from `waterfill`): every active stage its share
    floor((hi - const)/slope) within [1, upper], then one layer at a time back from the
    costliest stage holding more than one until the split sums to L."""
    lay = np.where(active, np.clip(np.floor((hi[:, None] - const) / slope), 1, np.maximum(upper, 1)), 0)
    lay = lay.astype(np.int64)
    excess = lay.sum(axis=1) - num_layers
    rows = np.arange(len(lay))
    while (excess > 0).any():
        cost = np.where(active & (lay > 1), slope * lay + const, -np.inf)
        j = np.argmax(cost, axis=1)
        r = rows[excess > 0]
        lay[r, j[r]] -= 1
        excess[r] -= 1
    return lay


def _slot_problem(form: LinearForm, p: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slope, const, upper, active) of the stage slots of the p-stage shapes `rows`."""
    slope = np.maximum(form.slot_slope_s[rows], 1e-300)[:, None]
    const = expand(form.slot_const_s[rows], form.pp[rows], p)
    upper = form.max_layers[rows, :p]
    return slope, const, upper, np.ones(upper.shape, dtype=bool)


SLOT_ITERATIONS, SLOT_REL_TOL = 64, 1e-12


def slot_waterfill(form: LinearForm, num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """One water-filling on the stage slots within the memory limits, per memory-feasible shape:
    (a lower bound of the largest stage slot over every split that fits, -inf elsewhere; the
    split that reaches the bisection's upper end, middle stages sorted ascending -- same time,
    and the memory limits grow with the stage index -- zeros elsewhere)."""
    L = num_layers
    S, P = form.max_layers.shape
    bound = np.full(S, -np.inf)
    out = np.zeros((S, P), dtype=np.int64)
    ok_shape = memory_feasible(form, L)
    for p, rows in pp_blocks(form.pp):
        rows = rows[ok_shape[rows]]
        if not len(rows):
            continue
        problem = _slot_problem(form, p, rows)
        lo, hi = waterfill(*problem, L, iterations=SLOT_ITERATIONS, rel_tol=SLOT_REL_TOL)
        bound[rows] = lo * (1 - 1e-12)
        lay = fill(*problem, hi, L)
        if p >= 4:
            lay[:, 1:p - 1] = np.sort(lay[:, 1:p - 1], axis=1)
        out[rows, :p] = lay
    return bound, out


def min_max_slot_s(form: LinearForm, num_layers: int) -> np.ndarray:
    """Per shape, a lower bound of the largest stage slot over every split that fits in
    memory (-inf marks shapes with no such split: see `memory_feasible`)."""
    return slot_waterfill(form, num_layers)[0]


def heuristic_splits(form: LinearForm, num_layers: int) -> np.ndarray:
    """A fitting split per memory-feasible shape (zeros elsewhere): the split that minimises the
    largest stage slot within the memory limits (water-filling on time), then middle stages
    sorted ascending (same time; memory limits grow with the stage index)."""
    return slot_waterfill(form, num_layers)[1]


def least_memory_splits(co: StageCoefficients, num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Per shape of `co`: the layer split with the smallest peak stage memory (memory is
    linear in each stage's layer count), as (peak_bytes, layers matrix); inf where pp > L."""
    L = num_layers
    S = len(co.pp)
    P = int(co.pp.max())
    active = np.arange(P)[None, :] < co.pp[:, None]

    def mem(lay):
        return stage_memory_bytes(stage_arrays(co, lay))

    m0 = mem(np.zeros((S, P), dtype=np.int64))
    per = np.maximum(mem(active.astype(np.int64)) - m0, 1e-9)
    _, hi = waterfill(per, m0, L, active, L, iterations=80)
    lay = fill(per, m0, L, active, hi, L)
    peak = np.where(co.pp <= L, np.where(active, mem(lay), 0.0).max(axis=1), np.inf)
    return peak, lay
