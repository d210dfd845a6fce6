"""The CP-SAT model of one search round (the package docstring lists its variables and
rows): `build_model` over the shapes of an `IntegerForm`, `add_hint` for a known plan."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...formulation.linear import stage_class
from ...formulation.splits import balanced_split
from ...specs.deadline import Deadline
from .integer import IntegerForm
from .ortools_cp import cp_model
from .scaling import OBJECTIVE_UNITS


@dataclass
class Model:
    """A built CP-SAT model and the handles the solve reads back."""

    model: cp_model.CpModel
    shapes: list[int]  # indices into the candidates, one per x
    x: list
    layers: list
    y: object  # the steady-state part
    tail: object
    obj: object
    aux: dict = field(default_factory=dict)


def _row(model, var, slope: int, lvar, const: int, lit) -> None:
    """var >= slope*l + const under lit, for an active stage (l >= 1); skipped when it can
    never bind (var >= 0)."""
    if slope <= 0 and slope + const <= 0:
        return
    if slope == 0:
        model.add(var >= const).only_enforce_if(lit)
    else:
        model.add(var >= slope * lvar + const).only_enforce_if(lit)


def build_model(form: IntegerForm, shapes: list[int], num_layers: int, cap: int | None, *,
                uneven: bool = True, symmetry: bool = True, hint: tuple[int, list[int]] | None = None,
                deadline: Deadline | None = None, fixed: np.ndarray | None = None) -> Model:
    """The CP-SAT model over `shapes` (indices into the integer form) with the objective capped
    at `cap` quanta (None: uncapped, domain 64x the scaling units). A shape whose row of `fixed`
    (rows as the form's: `Candidates.fixed_splits`) is nonzero holds that split only (its middle
    stages are equal, so the symmetry rows keep it). TimeoutError once `deadline` passes or is
    stopped (a model of tens of thousands of shapes takes seconds)."""
    L = num_layers
    model = cp_model.CpModel()
    ub = int(cap) if cap is not None else OBJECTIVE_UNITS * 64
    x = [model.new_bool_var(f"x{k}") for k in shapes]
    model.add_exactly_one(x)
    pps = form.pp[shapes] if shapes else np.zeros(0, dtype=np.int64)
    P = int(pps.max()) if len(shapes) else 1
    sym = symmetry and uneven
    z = {}
    for p in sorted(set(pps.tolist())):
        z[p] = model.new_bool_var(f"pp{p}")
        model.add(z[p] == sum(xv for xv, pk in zip(x, pps.tolist()) if pk == p))
    act: list = [None]  # act[i]: stage i exists (stage 0 always does)
    for i in range(1, P):
        a = model.new_bool_var(f"active{i}")
        model.add(a == sum(zv for p, zv in z.items() if p > i))
        act.append(a)
    U = np.clip(form.max_layers[shapes, :P] if shapes else np.zeros((0, P), dtype=np.int64), 0, L)
    lmax = [int(U[:, i].max()) if len(shapes) else 0 for i in range(P)]
    layers = []
    for i in range(P):
        lv = model.new_int_var(min(1, lmax[i]) if i == 0 else 0, lmax[i], f"l{i}")
        layers.append(lv)
    model.add(sum(layers) == L)
    for i in range(1, P):
        model.add(layers[i] >= act[i])
        model.add(layers[i] <= lmax[i] * act[i])
    for i in range(P):  # memory: the chosen shape's limit on stage i
        terms = [int(U[j, i]) * x[j] for j in range(len(shapes)) if U[j, i] > 0]
        model.add(layers[i] <= (sum(terms) if terms else 0))
    if sym:
        for i in range(1, P - 2):
            model.add(layers[i] <= layers[i + 1]).only_enforce_if(act[i + 2])
    _one_split_rows(model, layers, x, z, pps, L, uneven, fixed[shapes] if fixed is not None and shapes else None)
    y = model.new_int_var(0, ub, "Y")
    tail = model.new_int_var(0, ub, "tail")
    obj = model.new_int_var(0, ub, "objective")
    for j, k in enumerate(shapes):
        if deadline is not None and j % 256 == 0 and deadline.expired():
            raise TimeoutError(f"time limit reached while building the model ({j} of {len(shapes)} shapes)")
        p = int(form.pp[k])
        lit = x[j]
        y_slope, opt_slope, red_slope = int(form.y_slope[k]), int(form.opt_slope[k]), int(form.red_slope[k])
        if sym:
            top = sorted({0, p - 1} | ({p - 2} if p >= 3 else set()))
            red = sorted({0, p - 1} | ({(p - 2) if red_slope >= 0 else 1} if p >= 3 else set()))
        else:
            top = red = list(range(p))
        for i in top:
            c = stage_class(i, p)
            _row(model, y, y_slope, layers[i], int(form.y_const[k, c]), lit)
            _row(model, tail, opt_slope, layers[i], int(form.opt_const[k, c]), lit)
        for i in red:
            _row(model, tail, red_slope, layers[i], int(form.red_const[k, stage_class(i, p)]), lit)
    model.add(obj == y + tail + sum(int(form.base[k]) * x[j] for j, k in enumerate(shapes)))
    model.add(obj >= sum(int(form.lower_bound[k]) * x[j] for j, k in enumerate(shapes)))
    model.minimize(obj)
    m = Model(model, list(shapes), x, layers, y, tail, obj, aux={"z": z, "act": act})
    if hint is not None:
        add_hint(m, form, hint[0], hint[1])
    return m


def _one_split_rows(model, layers, x, z, pps, L: int, uneven: bool, fixed: np.ndarray | None) -> None:
    """The rows of the shapes that have one split: `fixed` (one row per model shape, Megatron's
    split of an accounted shape, zeros elsewhere) under the shape's literal; with `uneven` off the
    balanced split under each depth's literal (each shape's own where accounted shapes share it)."""
    one: dict[int, np.ndarray] = {}
    if fixed is not None:
        one = {j: fixed[j, :int(pps[j])] for j in np.flatnonzero(fixed.any(axis=1)).tolist()}
    for j, split in one.items():
        for i, n in enumerate(split.tolist()):
            model.add(layers[i] == n).only_enforce_if(x[j])
    if uneven:
        return
    mixed = {int(pps[j]) for j in one}
    for p, zv in z.items():
        for i, n in enumerate(balanced_split(L, p)):
            if p not in mixed:
                model.add(layers[i] == n).only_enforce_if(zv)
                continue
            for j in np.flatnonzero(pps == p).tolist():  # accounted shapes at this depth: each other shape
                if j not in one:
                    model.add(layers[i] == n).only_enforce_if(x[j])


def add_hint(m: Model, form: IntegerForm, k: int, split: list[int]) -> None:
    """Hint shape k with `split` (its values of every variable)."""
    if k not in m.shapes:
        return
    m.model.clear_hints()
    p = int(form.pp[k])
    for j, kk in enumerate(m.shapes):
        m.model.add_hint(m.x[j], kk == k)
    for pv, zv in m.aux["z"].items():
        m.model.add_hint(zv, pv == p)
    for i, a in enumerate(m.aux["act"]):
        if a is not None:
            m.model.add_hint(a, i < p)
    for i, lv in enumerate(m.layers):
        m.model.add_hint(lv, int(split[i]) if i < p else 0)
    b, y, t = form.parts(k, split)
    obj = max(b + y + t, int(form.lower_bound[k]))
    m.model.add_hint(m.y, y)
    m.model.add_hint(m.tail, obj - b - y)  # objective == Y + tail + base: the tail absorbs the bound
    m.model.add_hint(m.obj, obj)
