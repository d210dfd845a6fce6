"""The CP-SAT model's numbers: `LinearForm` in integer time quanta (`IntegerForm`), every
piece rounded down so the integer objective never exceeds the float one, and the canonical
split of a shape at a given objective (what makes the answer deterministic). The package
docstring gives the scaling argument."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formulation.linear import FIRST, LAST, LinearForm, expand
from ...formulation.splits import balanced_split


def floor_q(x, q: float) -> np.ndarray:
    """floor(x / q), shaved by 1e-12 relative so float rounding can never round it up."""
    r = np.asarray(x, dtype=np.float64) / q
    return np.floor(r - np.abs(r) * 1e-12).astype(np.int64)


@dataclass
class IntegerForm:
    """`LinearForm`'s pieces in quanta of `q` seconds, every one rounded down, under
    LinearForm's names without the `_s`: slopes per layer (S,), constants per stage class (S, 3)."""

    q: float
    pp: np.ndarray
    y_slope: np.ndarray  # steady-state part: Y = max_i (y_slope*l_i + y_const_i)
    y_const: np.ndarray
    base: np.ndarray  # sum_i slot_i / v
    opt_slope: np.ndarray  # tail rows: optimizer step
    opt_const: np.ndarray
    red_slope: np.ndarray  # tail rows: exposed data-parallel reduction + optimizer step
    red_const: np.ndarray
    lower_bound: np.ndarray  # the pruning's time lower bound per shape
    max_layers: np.ndarray  # (S, P) memory limit on each stage's layer count

    @classmethod
    def make(cls, form: LinearForm, time_lb_s: np.ndarray, q: float) -> IntegerForm:
        f = lambda x: floor_q(x, q)  # noqa: E731
        return cls(q=q, pp=form.pp, y_slope=f(form.y_slope_s), y_const=f(form.y_const_s), base=f(form.base_s),
                   opt_slope=f(form.opt_slope_s), opt_const=f(form.opt_const_s), red_slope=f(form.red_slope_s),
                   red_const=f(form.red_const_s), lower_bound=f(time_lb_s), max_layers=form.max_layers)

    def stage_consts(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(y_const, opt_const, red_const) per stage of shape k."""
        p = self.pp[k:k + 1]
        return tuple(expand(a[k:k + 1], p, int(p[0]))[0] for a in (self.y_const, self.opt_const, self.red_const))

    def parts(self, k: int, layers) -> tuple[int, int, int]:
        """(base, Y, tail) of shape k with this split, in quanta."""
        p = int(self.pp[k])
        lay = np.asarray(layers, dtype=np.int64)[:p]
        y_const, opt_const, red_const = self.stage_consts(k)
        y = max(0, int((self.y_slope[k] * lay + y_const).max()))
        tail = max(0, int((self.opt_slope[k] * lay + opt_const).max()), int((self.red_slope[k] * lay + red_const).max()))
        return int(self.base[k]), y, tail

    def objective(self, k: int, layers) -> int:
        """The model's objective of shape k with this split (ignoring memory), in quanta."""
        b, y, t = self.parts(k, layers)
        return max(b + y + t, int(self.lower_bound[k]))

    def reduction_rows_bind(self, k: int) -> bool:
        """False when the reduction rows can never bind (decreasing and <= 0 at one layer)."""
        return not (self.red_slope[k] < 0 and self.red_slope[k] + int(self.red_const[k].max()) <= 0)

    def coefficient_max(self, k: int) -> int:
        """Largest coefficient shape k brings into the model."""
        red = abs(int(self.red_slope[k])) if self.reduction_rows_bind(k) else 0
        return int(max(abs(self.y_slope[k]), abs(self.opt_slope[k]), red, abs(self.base[k]),
                       abs(self.lower_bound[k])))

    def objective_floor(self, num_layers: int) -> np.ndarray:
        """Per shape, a lower bound of its objective over every split (every stage holds
        1..L layers): the base, Y and tail rows of the first and last stage at their least."""
        two = np.where(self.pp >= 2, LAST, FIRST)
        rows = np.arange(len(self.pp))
        pick = lambda a: np.maximum(a[:, FIRST], a[rows, two])  # noqa: E731
        ylow = np.maximum(0, self.y_slope + pick(self.y_const))
        l2 = np.where(self.red_slope >= 0, 1, num_layers)
        tlow = np.maximum(0, np.maximum(self.opt_slope + pick(self.opt_const), self.red_slope * l2 + pick(self.red_const)))
        return np.maximum(self.base + ylow + tlow, self.lower_bound)


def canonical_split(form: IntegerForm, k: int, target: int, num_layers: int, uneven: bool = True,
                    fixed: list[int] | None = None) -> list[int] | None:
    """The canonical split of shape k among those whose integer objective is <= target:
    the smallest feasible budget for the steady-state part Y (the rest goes to the tail), then
    the most balanced split within the per-stage layer ranges this leaves; leftover layers go
    to the last, the first, then the later middle stages. None when no split reaches the
    target. A shape with one split (`fixed`: Megatron's of an accounted shape; the balanced one
    of an even-split job) has that split or none."""
    L = num_layers
    p = int(form.pp[k])
    if fixed is not None or not uneven:
        only = [int(x) for x in fixed] if fixed is not None else balanced_split(L, p)
        fits = all(only[i] <= form.max_layers[k, i] for i in range(p))
        return only if form.objective(k, only) <= target and fits else None
    if form.lower_bound[k] > target:
        return None
    budget = int(target - form.base[k])
    y_slope, opt_slope, red_slope = int(form.y_slope[k]), int(form.opt_slope[k]), int(form.red_slope[k])
    y_const, opt_const, red_const = form.stage_consts(k)
    U = np.minimum(np.asarray(form.max_layers[k, :p], dtype=np.int64), L)
    if (U < 1).any() or U.sum() < L:
        return None
    if y_slope > 0:
        ls = np.arange(1, L + 1, dtype=np.int64)
        ys = np.sort((y_slope * ls[None, :] + y_const[:, None]).ravel())  # repeats only repeat a test
        ys = ys[ys >= y_slope * -(-L // p) + int(y_const.min())]  # some stage holds >= ceil(L/p) layers
    else:
        ys = np.array([max(0, int(y_const.max()))], dtype=np.int64)
    order = [p - 1] + ([0] if p > 1 else []) + list(range(p - 2, 0, -1))
    for y in ys.tolist():
        tail = budget - y
        if tail < 0:
            break
        lo = np.ones(p, dtype=np.int64)
        hi = U.copy()
        if y_slope > 0:
            hi = np.minimum(hi, (y - y_const) // y_slope)
        elif (y_const > y).any():
            continue
        ok = True
        for slope, const in ((opt_slope, opt_const), (red_slope, red_const)):
            if slope > 0:
                hi = np.minimum(hi, (tail - const) // slope)
            elif slope < 0:
                lo = np.maximum(lo, -((tail - const) // (-slope)))  # ceil((const - tail) / -slope)
            elif (const > tail).any():
                ok = False
        if not ok or (lo > hi).any() or lo.sum() > L or hi.sum() < L:
            continue
        # the most balanced split within [lo, hi]: the largest t with sum clip(t, lo, hi) <= L
        t_lo, t_hi = 0, L
        while t_lo < t_hi:
            mid = (t_lo + t_hi + 1) // 2
            if np.clip(mid, lo, hi).sum() <= L:
                t_lo = mid
            else:
                t_hi = mid - 1
        lay = np.clip(t_lo, lo, hi)
        left = L - int(lay.sum())
        for i in order:
            if left == 0:
                break
            if lo[i] <= t_lo < hi[i]:
                lay[i] += 1
                left -= 1
        if left:
            continue
        out = [int(x) for x in lay]
        if form.objective(k, out) <= target:
            return out
    return None
