"""The step time and stage memory of every shape in its linear form (docs/DESIGN.md section 4).

Once a shape is chosen, every term of `pipeline.stage_arrays` is linear in a stage's layer
count l_i, with w = m - 1/v and `slot_i = l_i*layer_s + [i=0]first_s + [i=p-1]last_s + v*boundary_s`:

    T = sum_i slot_i / v                 (a constant of the shape: sum l_i = L)
      + max_i  w*slot_i                  (the steady-state part)
      + max_i  max(O_i, D_i - W_i + O_i) (exposed DP reduction + optimizer)

and the memory of stage i is linear in l_i, so it becomes a limit U[k, i] on the layer count,
checked against the float formulation itself. `search.candidates` builds the form once per
job and carries it to the pruning, the splits (`formulation.splits`) and the CP-SAT encoding
(no second copy of any cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .coefficients import StageCoefficients
from .pipeline import pipeline_depths, stage_arrays, stage_memory_bytes

FIRST, MID, LAST = 0, 1, 2  # stage classes: constants differ only for the first and last stage


def stage_class(i: int, p: int) -> int:
    """Class of stage i of a p-stage pipeline (a single stage is FIRST and holds both extras)."""
    return FIRST if i == 0 else LAST if i == p - 1 else MID


def expand(classes: np.ndarray, pp: np.ndarray, P: int | None = None) -> np.ndarray:
    """(S, 3) per-class constants -> (S, P) per-stage constants (0 beyond each pp)."""
    P = int(pp.max()) if P is None else P
    col = np.arange(P)[None, :]
    p = pp[:, None]
    out = np.where(col == 0, classes[:, FIRST:FIRST + 1],
                   np.where(col == p - 1, classes[:, LAST:LAST + 1], classes[:, MID:MID + 1]))
    return np.where(col < p, out, 0)


@dataclass
class LinearForm:
    """Per shape: the linear pieces of the step time, seconds. Slopes are per layer (S,);
    constants are per stage class (S, 3): FIRST, MID, LAST (`expand` gives them per stage)."""

    pp: np.ndarray  # (S,)
    slot_slope_s: np.ndarray  # (S,) layer_s
    slot_const_s: np.ndarray  # (S, 3) first/last extras + v*boundary
    y_slope_s: np.ndarray  # (S,) (m - 1/v) * layer_s
    y_const_s: np.ndarray  # (S, 3)
    base_s: np.ndarray  # (S,) sum_i slot_i / v
    opt_slope_s: np.ndarray  # (S,) optimizer step per layer
    opt_const_s: np.ndarray  # (S, 3)
    red_slope_s: np.ndarray  # (S,) reduction - overlap window + optimizer, per layer (may be < 0)
    red_const_s: np.ndarray  # (S, 3)
    max_layers: np.ndarray  # (S, P) int: most layers that fit on the stage (memory); 0 beyond pp

    @property
    def active(self) -> np.ndarray:
        """(S, P) bool: stage < pp."""
        return np.arange(self.max_layers.shape[1])[None, :] < self.pp[:, None]

    def take(self, idx) -> LinearForm:
        """The form of the shapes `idx` (every piece is per shape; P shrinks to their largest pp)."""
        idx = np.atleast_1d(idx)
        P = int(self.pp[idx].max()) if len(idx) else 1
        return LinearForm(**{name: (getattr(self, name)[idx, :P] if name == "max_layers" else getattr(self, name)[idx])
                             for name in self.__dataclass_fields__})


def linear_form(co: StageCoefficients, num_layers: int, max_layers: np.ndarray | None = None) -> LinearForm:
    """Decompose the float step time of every shape in `co` into the linear pieces above.
    `max_layers`: the memory limits when they are known already (they do not depend on links)."""
    L = num_layers
    S = len(co.pp)
    p = co.pp.astype(np.int64)
    single = (p == 1).astype(np.float64)
    v = co.vp.astype(np.float64)
    m = co.num_microbatches.astype(np.float64)
    w = m - 1.0 / v
    vb = v * co.boundary_s

    def classes(first, mid, last):
        return np.column_stack([np.broadcast_to(np.asarray(x, dtype=np.float64), (S,)) for x in (first, mid, last)])

    slot_const = classes(co.first_s + single * co.last_s + vb, vb, co.last_s + vb)
    base = (L * co.layer_s + co.first_s + co.last_s + p * v * co.boundary_s) / v
    win_slope, win_first, win_last = co.layer_window_s, co.first_window_s, co.last_window_s
    opt_first, opt_last = co.first_optimizer_step_s, co.last_optimizer_step_s
    opt_const = classes(opt_first + single * opt_last, 0.0, opt_last)
    red_first, red_last = co.first_dp_step_s - win_first, co.last_dp_step_s - win_last
    red_const = classes(red_first + single * red_last, 0.0, red_last) + opt_const
    return LinearForm(
        pp=p,
        slot_slope_s=np.asarray(co.layer_s, dtype=np.float64), slot_const_s=slot_const,
        y_slope_s=w * co.layer_s, y_const_s=w[:, None] * slot_const,
        base_s=base,
        opt_slope_s=np.asarray(co.layer_optimizer_step_s, dtype=np.float64),
        opt_const_s=opt_const,
        red_slope_s=co.layer_dp_step_s - win_slope + co.layer_optimizer_step_s,
        red_const_s=red_const,
        max_layers=stage_layer_limits(co, L) if max_layers is None else max_layers,
    )


def _stage_memory(co: StageCoefficients, layers: np.ndarray) -> np.ndarray:
    return stage_memory_bytes(stage_arrays(co, layers))


def pp_blocks(pp: np.ndarray):
    """(p, row indices) for every pipeline degree: work on (rows x p) blocks, not (S x max pp)."""
    for p in pipeline_depths(pp):
        yield int(p), np.flatnonzero(pp == p)


def stage_layer_limits(co: StageCoefficients, num_layers: int) -> np.ndarray:
    """U[k, i]: the most layers stage i of shape k can hold within GPU memory (0..L; -1 when
    not even the stage's fixed part fits; 0 beyond pp). Memory is linear in the stage's layer
    count; the division's answer is then checked (and corrected) against the float
    formulation itself at U and U+1, so the limit agrees exactly with `step_time_batch`."""
    L = num_layers
    S = len(co.pp)
    P = int(co.pp.max()) if S else 1
    out = np.zeros((S, P), dtype=np.int64)
    cap = float(co.capacity_bytes)
    for p, rows in pp_blocks(co.pp):
        cb = co.take(rows)
        R = len(rows)
        mem0 = _stage_memory(cb, np.zeros((R, p), dtype=np.int64))
        per = _stage_memory(cb, np.ones((R, p), dtype=np.int64)) - mem0
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = np.where(per > 0, np.floor((cap - mem0) / np.where(per > 0, per, 1.0)), np.where(mem0 <= cap, L, -1))
        U = np.clip(raw, -1, L).astype(np.int64)
        for _ in range(8):
            over = (U >= 0) & (_stage_memory(cb, np.clip(U, 0, L)) > cap)
            U = np.where(over, U - 1, U)
            under = (U < L) & (_stage_memory(cb, np.clip(U + 1, 0, L)) <= cap)
            U = np.where(under, U + 1, U)
            if not over.any() and not under.any():
                break
        out[rows, :p] = U
    return out


def memory_feasible(form: LinearForm, num_layers: int) -> np.ndarray:
    """Shapes with at least one layer split that fits: every stage holds >= 1 layer and the
    stages together hold >= L."""
    act = form.active
    U = form.max_layers
    return (np.where(act, U >= 1, True).all(axis=1) & (np.where(act, U, 0).sum(axis=1) >= num_layers)
            & (form.pp <= num_layers))


def middle_limits_sorted(form: LinearForm) -> bool:
    """True when every shape's memory limits are non-decreasing over its middle stages (what
    the symmetry breaking l_1 <= ... <= l_{p-2} relies on)."""
    U = form.max_layers
    for p, rows in pp_blocks(form.pp):
        if p >= 4 and (np.diff(U[rows, 1:p - 1], axis=1) < 0).any():
            return False
    return True
