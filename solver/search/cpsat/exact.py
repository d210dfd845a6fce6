"""The exact optimum of every shape over its layer splits, in the integer form's quanta.

Per shape (`IntegerForm`, p stages, L layers, memory limits U_i), the objective of a split is

    max(base + Y + tail, lower_bound)
    Y    = max(0, max_i y_slope*l_i + y_const_i)
    tail = max(0, max_i f_i(l_i)),   f_i(l) = max(opt_slope*l + opt_const_i, red_slope*l + red_const_i)

over 1 <= l_i <= U_i, sum_i l_i = L. It is found exactly, with integer arithmetic only:

- Y takes one of the values y_slope*l + y_const_c (l in 1..L, c a stage class) or 0; each
  candidate value caps every stage's layer count (l_i <= (Y - y_const_i) // y_slope);
- for a given Y, the least tail is the least t >= 0 for which every stage has a layer count in
  [max(1, lo_i(t)), min(U_i, cap_i(Y), hi_i(t))] and the ranges' sums bracket L: each f_i is
  convex (a max of two lines), so {l : f_i(l) <= t} is an interval, and the test is monotone
  in t (a bisection over integers);
- the optimum is the least base + Y + tail over the candidate Ys (every split's own Y is one of
  them, and the split is then admissible), never below the shape's lower bound.

Middle stages share their constants and differ only in U_i, so their summed upper ends come
from the sorted limits (one `searchsorted`): the cost is O(L log p) per shape and bisection
step, vectorised over the shapes of one pipeline degree.

What it serves (`solve`): these values are valid, exact per-shape lower bounds of the model's
objective -- every split of shape k scores at least `optima[k]`, and one split scores exactly
that -- so the rows `objective >= optima[k] * x_k` prove the optimum at CP-SAT's root, the
best shape and its split are the incumbent and the hint, and the shapes above the cap leave
the model. An even-split job has one split per shape: its objective, if it fits.
"""

from __future__ import annotations

import numpy as np

from ...formulation.linear import FIRST, LAST, MID, pp_blocks
from ...formulation.splits import balanced_layers_matrix
from ...specs.deadline import Deadline
from .integer import IntegerForm

NO_SPLIT = np.iinfo(np.int64).max // 4  # the value of a shape none of whose splits fits
CHUNK_CELLS = 1 << 16  # (shape, Y candidate) pairs per chunk: arrays of ~2 MiB, a few dozen of them


def _sublevel(slope: np.ndarray, const: np.ndarray, t: np.ndarray, num_layers: int):
    """{l : slope*l + const <= t} as (first, last) layer counts, clipped to 1..L (first > last:
    empty). `slope` and `const` broadcast against `t`."""
    d = np.where(slope == 0, 1, np.abs(slope))
    diff = t - const
    q = diff // d  # floor
    last = np.where(slope > 0, q, np.where((slope < 0) | (diff >= 0), num_layers, 0))
    first = np.where(slope < 0, -q, np.where((slope > 0) | (diff >= 0), 1, num_layers + 1))
    return np.maximum(first, 1), np.minimum(last, num_layers)


def _sum_min(sorted_u: np.ndarray, prefix: np.ndarray, cap: np.ndarray, num_layers: int) -> np.ndarray:
    """Per row r and column j: sum_i min(sorted_u[r, i], cap[r, j]) (rows' limits sorted ascending)."""
    R, n = sorted_u.shape
    if n == 0:
        return np.zeros(cap.shape, dtype=np.int64)
    c = np.clip(cap, -2, num_layers + 1)
    width = num_layers + 4
    off = np.arange(R, dtype=np.int64)[:, None] * width
    below = np.searchsorted((sorted_u + off).ravel(), (c + off).ravel(), side="left").reshape(c.shape)
    below -= np.arange(R, dtype=np.int64)[:, None] * n  # limits < cap in the row
    return np.take_along_axis(prefix, below, axis=1) + c * (n - below)


def _block_optima(form: IntegerForm, ks: np.ndarray, p: int, L: int) -> np.ndarray:
    """Exact optima of the p-stage shapes `ks` (see the module docstring)."""
    R = len(ks)
    classes = [FIRST] if p == 1 else [FIRST, LAST] if p == 2 else [FIRST, MID, LAST]
    col = lambda a: a[ks].astype(np.int64)[:, None, None]  # noqa: E731  (R, 1, 1)
    cls = lambda a: a[ks][:, classes].astype(np.int64)[:, None, :]  # noqa: E731  (R, 1, C)
    y_s, opt_s, red_s = col(form.y_slope), col(form.opt_slope), col(form.red_slope)
    y_c, opt_c, red_c = cls(form.y_const), cls(form.opt_const), cls(form.red_const)
    U = np.clip(form.max_layers[ks, :p].astype(np.int64), -1, L)
    u_first = U[:, 0][:, None]
    u_last = U[:, p - 1][:, None]
    u_mid = np.sort(U[:, 1:p - 1], axis=1)
    n_mid = u_mid.shape[1]
    prefix = np.concatenate([np.zeros((R, 1), dtype=np.int64), np.cumsum(u_mid, axis=1)], axis=1)
    u_mid_min = u_mid[:, :1] if n_mid else np.full((R, 1), L, dtype=np.int64)

    ls = np.arange(1, L + 1, dtype=np.int64)
    ys = (y_s[:, 0, :, None] * ls + y_c[:, 0, :, None]).reshape(R, -1)
    ys = np.maximum(np.concatenate([np.zeros((R, 1), dtype=np.int64), ys], axis=1), 0)  # (R, nY)
    # per class: the most layers a stage may hold under Y
    y_last = np.where(y_s > 0, (ys[:, :, None] - y_c) // np.where(y_s > 0, y_s, 1),
                      np.where(y_c <= ys[:, :, None], L, 0))
    y_last = np.minimum(y_last, L)  # (R, nY, C)

    def f(l):
        return np.maximum(opt_s * l + opt_c, red_s * l + red_c)

    t_hi = np.maximum(0, np.maximum(f(1), f(L)).max(axis=2))  # (R, 1): every l in 1..L qualifies
    t_hi = np.broadcast_to(t_hi, ys.shape).copy()

    def feasible(t):  # t (R, nY)
        tt = t[:, :, None]
        a1, b1 = _sublevel(opt_s, opt_c, tt, L)
        a2, b2 = _sublevel(red_s, red_c, tt, L)
        lo = np.maximum(a1, a2)
        hi = np.minimum(np.minimum(b1, b2), y_last)  # (R, nY, C)
        hi_first = np.minimum(hi[:, :, 0], u_first)
        ok = lo[:, :, 0] <= hi_first
        sum_lo, sum_hi = lo[:, :, 0], hi_first
        if p >= 2:
            hi_last = np.minimum(hi[:, :, -1], u_last)
            ok &= lo[:, :, -1] <= hi_last
            sum_lo, sum_hi = sum_lo + lo[:, :, -1], sum_hi + hi_last
        if p >= 3:
            ok &= lo[:, :, 1] <= np.minimum(hi[:, :, 1], u_mid_min)
            sum_lo = sum_lo + n_mid * lo[:, :, 1]
            sum_hi = sum_hi + _sum_min(u_mid, prefix, hi[:, :, 1], L)
        return ok & (sum_lo <= L) & (sum_hi >= L)

    reach = feasible(t_hi)
    lo_t = np.full(ys.shape, -1, dtype=np.int64)  # infeasible (t < 0 is never needed: tail >= 0)
    hi_t = t_hi
    while True:
        open_ = reach & (hi_t - lo_t > 1)
        if not open_.any():
            break
        mid = (lo_t + hi_t) // 2
        ok = feasible(np.where(open_, mid, hi_t))
        hi_t = np.where(open_ & ok, mid, hi_t)
        lo_t = np.where(open_ & ~ok, mid, lo_t)
    total = np.where(reach, form.base[ks].astype(np.int64)[:, None] + ys + hi_t, NO_SPLIT)
    best = total.min(axis=1)
    return np.where(best < NO_SPLIT, np.maximum(best, form.lower_bound[ks].astype(np.int64)), NO_SPLIT)


def shape_optima(form: IntegerForm, shapes, num_layers: int, uneven: bool = True,
                 deadline: Deadline | None = None, fixed: np.ndarray | None = None) -> np.ndarray:
    """Per shape of `shapes` (indices into `form`): the least objective over its splits that fit
    (NO_SPLIT where none fits). With `uneven=False` the only split is the balanced one; a shape
    with a nonzero row of `fixed` (rows as `form`'s: `Candidates.fixed_splits`) has that split
    only. Shapes go in chunks of at most CHUNK_CELLS (shape, Y) pairs; TimeoutError once
    `deadline` passes or is stopped (tens of thousands of shapes take seconds)."""
    ks = np.asarray(shapes, dtype=np.int64)
    out = np.full(len(ks), NO_SPLIT, dtype=np.int64)
    L = num_layers
    # (asarray: numpy's stubs type any(axis=1) as a scalar or an array; here it is the array)
    one = np.zeros(len(ks), dtype=bool) if fixed is None else np.asarray(fixed[ks].any(axis=1))
    for p, rows in pp_blocks(form.pp[ks]):
        if p > L:
            continue
        searched = rows[~one[rows]] if uneven else np.zeros(0, dtype=np.int64)
        step = max(1, CHUNK_CELLS // (3 * L + 1))
        for i in range(0, len(searched), step):
            if deadline is not None and deadline.expired():
                raise TimeoutError("time limit reached while computing the shapes' exact optima")
            out[searched[i:i + step]] = _block_optima(form, ks[searched[i:i + step]], p, L)
        bal = balanced_layers_matrix(L, np.full(1, p))[0]
        for r in np.setdiff1d(rows, searched).tolist():
            k = int(ks[r])
            split = fixed[k, :p] if fixed is not None and one[r] else bal  # one[r] only where fixed is given
            if (split <= form.max_layers[k, :p]).all():
                out[r] = form.objective(k, split)
    return out
