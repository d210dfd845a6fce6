"""Alpa's inter-operator dynamic program (Zheng et al., OSDI'22, Sec. 5.2) on our formulation.

Alpa slices the layers into contiguous stages: for each candidate bottleneck `t_max` it runs
a DP over (stage, layers assigned so far) that minimises the sum of the stage latencies with
every stage <= t_max, and scores `(B - 1) * t_max + sum`; it enumerates t_max in ascending
order and stops once `(B - 1) * t_max` alone cannot beat the best total. Here the shape
(tp, cp, dp, vp, micro-batch, recompute, SP, ZeRO, hence Alpa's sub-mesh and its logical mesh
shape) is enumerated outside the DP, as Alpa enumerates sub-mesh choices, and stage i's
per-micro-batch slot, DP tail and memory come from the single formulation
(`pipeline.stage_arrays`, called once per shape on a table of "every stage holds l layers"
rows, so stage-dependent memory -- in-flight micro-batches, embedding, LM head -- is exact).

Our objective for a split (l_0..l_{p-1}) of a shape is (evaluate.step_time_batch):

    T = (m - 1/v) * max_i slot_i(l_i) + sum_i slot_i(l_i) / v + max_i tail_i(l_i)

with tail_i the stage's exposed data-parallel reduction plus its optimizer step. The tail is
a second max over stages, which Alpa's scalar DP cannot carry exactly. Two exact modes:

- "minmax" (default). In this formulation every stage pays the same time per layer (the
  first/last extras and the p2p boundaries are paid once whatever the split), so
  sum_i slot_i = L*layer_s + first_s + last_s + p*v*boundary_s is the same for every split:
  Alpa's inner objective is a constant. The DP for a given t_max then minimises what still
  varies, max_i tail_i(l_i), subject to slot_i <= t_max and stage i fitting in memory: a
  min-max DP (max is monotone and associative, so this DP is exact).
- "sum" (general, Alpa's own DP). For each t_max and each candidate tail cap c (the distinct
  tail values, ascending), a DP minimises sum_i slot_i subject to slot_i <= t_max,
  tail_i <= c and memory; the score is (m - 1/v)*t_max + sum/v + c. The DP itself is exact for
  any per-stage slot and tail, at a cost of |tail caps| more DPs; the tests use it to
  cross-check "minmax".

Both modes (and the pruning below) rely on the sum being split-invariant; it is checked on
every shape from the formulation's own table, and a violation raises instead of answering
wrongly.

In both modes the optimum split of a shape is scored at the t_max that equals its own
bottleneck (and the cap that equals its own tail), so the minimum over the enumeration is the
exact optimum over all contiguous splits -- here, all splits. Every reported objective is the
split re-evaluated by `step_time_batch`, so it is bit-identical to the exhaustive search's
value for the same split.

Pruning is Alpa's, nothing of ours: shapes are visited in ascending order of
(m - 1/v) * t_low + S/v, with t_low = S/p the smallest bottleneck any split can have (max >=
mean), and the search stops -- for the shape and for all later shapes -- once
(m - 1/v) * t_max + S/v + (the shape's least possible tail) >= the k-th best objective found.

Top-k: the best split of each of the k best shapes (a k-best DP is not attempted).
Even-split jobs (`uneven_split` False): each stage may hold only its count in the balanced
split, so the DP runs unchanged and returns that split; likewise a shape that counts the
embedding or the loss as a layer, with Megatron's split (`Candidates.fixed_splits`).
Evaluations: DP cell updates, i.e. (layers assigned after stage i, layers of stage i) pairs
examined, over every t_max (and tail cap) tried, counting only reachable cells.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from ...formulation.pipeline import stage_arrays, stage_memory_bytes, step_time_batch
from ...formulation.splits import balanced_split
from ..candidates import Candidates
from ..result import Choice, MethodResult
from . import verdict

T_BATCH = 16  # t_max values solved at once (numpy batch)
REL_TOL = 1e-12


def _tables(co_one, L: int, p: int, uneven: bool = True, only: list[int] | None = None):
    """slot, tail, fits as (Lmax x p) arrays: row l-1 = stage i holding l layers. An even-split
    job allows each stage only its count in the balanced split (the DP then returns that split),
    an accounted shape only its count in `only` (Megatron's split)."""
    lmax = L - p + 1
    ls = np.arange(1, lmax + 1, dtype=np.int64)
    layers = np.repeat(ls[:, None], p, axis=1)
    st = stage_arrays(co_one.take(np.zeros(lmax, dtype=np.int64)), layers)
    slot = st["slot"][:, :p]
    tail = (st["exposed_dp"] + st["opt"])[:, :p]
    mem = stage_memory_bytes(st)[:, :p]
    fits = mem <= co_one.capacity_bytes
    if only is not None or not uneven:
        fits &= ls[:, None] == np.asarray(only if only is not None else balanced_split(L, p))[None, :]
    return slot, tail, fits


def _constant_sum(slot: np.ndarray) -> bool:
    """True when slot_i(l) = a_i + l*d with one d for every stage (sum over a split is fixed)."""
    if slot.shape[0] < 2:
        return True
    d = np.diff(slot, axis=0)
    ref = d[:, :1]
    return bool(np.all(np.abs(d - ref) <= REL_TOL * np.maximum(1e-30, np.abs(slot[1:]).max())))


def _cells(L: int, p: int) -> int:
    """Reachable DP cells of one DP run: stage 0 sets k in 1..L-p+1 directly; stage i (middle)
    reaches k in i+1..L-p+1+i from k-l >= i; the last stage only k = L."""
    lmax = L - p + 1
    n = lmax
    for i in range(1, p):
        ks = [L] if i == p - 1 else range(i + 1, lmax + i + 1)
        n += sum(k - i for k in ks)
    return n


def _chain_dp(cost: np.ndarray, L: int, combine):
    """cost: (T, Lmax, p) per-stage costs (inf where not allowed). For each of T problems, the
    minimum over splits (l_i >= 1, sum L) of cost[l_0 - 1, 0] (+) ... (+) cost[l_{p-1} - 1, p-1]
    with (+) = `combine` (np.maximum: min-max; np.add: min-sum); returns (value (T,), splits (T, p))."""
    T, lmax, p = cost.shape
    F = np.full((T, L + 1), np.inf)
    F[:, 1:lmax + 1] = cost[:, :, 0]
    arg = np.zeros((p, T, L + 1), dtype=np.int64)
    k = np.arange(L + 1)[:, None]
    lcol = np.arange(1, lmax + 1)[None, :]
    prev_idx = k - lcol  # (L+1, Lmax)
    valid = prev_idx >= 0
    prev_idx = np.where(valid, prev_idx, 0)
    for i in range(1, p):
        prev = np.where(valid[None], F[:, prev_idx], np.inf)  # (T, L+1, Lmax)
        cand = combine(prev, cost[:, None, :, i])
        j = np.argmin(cand, axis=2)
        F = np.take_along_axis(cand, j[:, :, None], axis=2)[:, :, 0]
        arg[i] = j + 1
    val = F[:, L]
    splits = np.zeros((T, p), dtype=np.int64)
    kk = np.full(T, L)
    for i in range(p - 1, 0, -1):
        li = arg[i, np.arange(T), kk]
        splits[:, i] = li
        kk = kk - li
    splits[:, 0] = np.where(np.isfinite(val), kk, 0)
    return val, splits


def _minmax_dp(cost: np.ndarray, L: int):
    """Min over splits of max_i cost[l_i - 1, i]."""
    return _chain_dp(cost, L, np.maximum)


def _minsum_dp(slot_allowed: np.ndarray, L: int):
    """Min over splits of sum_i slot[l_i - 1, i]."""
    return _chain_dp(slot_allowed, L, np.add)


class _Best:
    """Best (objective, split) per shape."""

    def __init__(self):
        self.per_shape: dict[int, tuple[float, np.ndarray]] = {}

    def offer(self, j: int, obj: float, split: np.ndarray):
        cur = self.per_shape.get(j)
        if cur is None or obj < cur[0]:
            self.per_shape[j] = (obj, split.copy())


def search(
    cands: Candidates,
    time_limit_s: float,
    top_k: int = 1,
    progress: Callable[[dict], None] | None = None,
    mode: str = "minmax",
    prune: bool = True,
) -> MethodResult:
    """Exact optimum of the formulation over contiguous layer splits of every shape in
    `cands`, by Alpa's t_max-enumerating DP. See the module docstring for the modes.

    progress(info) is called after each shape that ran a DP (at most every 0.5 s) and at the
    end, with info = {"method", "shapes_done", "shapes", "evaluations", "best_s", "elapsed_s"}.
    `prune=False` switches Alpa's stopping rules off (every shape, every t_max): the search
    cost without pruning against its own incumbent (`benchmarks/search_cost.py`).
    """
    if mode not in ("minmax", "sum"):
        raise ValueError(f"mode must be 'minmax' or 'sum', not {mode!r}")
    run = _AlpaSearch(cands, time_limit_s, top_k, progress, mode, prune)
    run.run()
    return run.result()


class _AlpaSearch:
    """One search: the shapes in order of Alpa's bound, the best split per shape, the counters."""

    def __init__(self, cands: Candidates, time_limit_s: float, top_k: int, progress, mode: str, prune: bool):
        self.t0 = time.perf_counter()
        self.cands, self.time_limit_s, self.progress, self.mode, self.prune = cands, time_limit_s, progress, mode, prune
        co = self.co = cands.coeffs
        L = self.L = cands.job.model.num_pipeline_units
        self.uneven = cands.job.constraints.uneven_split
        self.n = len(cands.shapes)
        self.k = max(1, int(top_k))
        self.p_all = co.pp.astype(np.int64)
        self.v_all = co.vp.astype(np.float64)
        self.A_all = co.num_microbatches.astype(np.float64) - 1.0 / self.v_all
        self.S_all = L * co.layer_s + co.first_s + co.last_s + self.p_all * self.v_all * co.boundary_s
        # Alpa's stopping rule at t_max = S/p, tail >= 0
        self.lb_all = self.A_all * self.S_all / self.p_all + self.S_all / self.v_all
        self.best = _Best()
        self.evaluations = 0
        self.dps = 0
        self.shapes_dp = 0
        self.stopped: str | None = None
        self.visited = 0
        self.last_report = self.t0

    def kth_all(self):
        vals = sorted(v[0] for v in self.best.per_shape.values())
        return vals[self.k - 1] if len(vals) >= self.k else math.inf

    def threshold(self, j):
        """Shape j must reach an objective below this to change the top-k."""
        vals = sorted(v[0] for s, v in self.best.per_shape.items() if s != j)
        other = vals[self.k - 1] if len(vals) >= self.k else math.inf
        own = self.best.per_shape[j][0] if j in self.best.per_shape else math.inf
        return min(other, own) if own < math.inf else other

    def offer_finite(self, j, val, splits):
        """Re-evaluate the DP's finite answers for shape j with the formulation; keep those that fit."""
        good = np.isfinite(val)
        if good.any():
            step, _, fits = step_time_batch(self.co.take(np.full(int(good.sum()), j)), splits[good])
            for o, f, s in zip(step.tolist(), fits.tolist(), splits[good]):
                if f:
                    self.best.offer(j, o, s)

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.t0 >= self.time_limit_s

    def run(self) -> None:
        """The shapes in order of their bound, until Alpa's rule prunes the rest or the time is up."""
        order = np.lexsort((np.arange(self.n), self.lb_all))
        for pos, j in enumerate(order.tolist()):
            if self.out_of_time():
                self.stopped = "time_limit"
                break
            if self.prune and self.lb_all[j] * (1 - 1e-12) >= self.kth_all():
                break  # Alpa's rule prunes this shape and every later one
            self.visited += 1
            if not self.shape(j):
                continue
            if self.stopped:
                break
            now = time.perf_counter()
            if self.progress is not None and now - self.last_report >= 0.5:
                self.last_report = now
                self.progress({"method": "alpa-dp", "shapes_done": pos + 1, "shapes": self.n,
                               "evaluations": self.evaluations, "best_s": self.kth_all() if self.k == 1 else None,
                               "elapsed_s": now - self.t0, "final": False})

    def shape(self, j: int) -> bool:
        """Every split of shape j that can matter, by its DPs; False when no split fits."""
        L, p = self.L, int(self.p_all[j])
        one = self.co.take(np.array([j]))
        slot, tail, fits = _tables(one, L, p, self.uneven, self.cands.accounted_split(j))
        cells = _cells(L, p)
        if not _constant_sum(slot):
            raise RuntimeError(
                "alpa_dp: the formulation's slot sum now depends on the split; the minmax DP and the "
                "pruning bound (m - 1/v)*S/p + S/v assume it does not (see the module docstring)")
        if not fits.any():
            return False
        # least possible tail of the shape (no bottleneck cap): one DP, also a first plan
        cost0 = np.where(fits, tail, np.inf)[None]
        tail_inf, split0 = _minmax_dp(cost0, L)
        self.evaluations += cells
        self.dps += 1
        self.shapes_dp += 1
        if not np.isfinite(tail_inf[0]):
            return False  # no split of this shape fits in memory
        self.offer_finite(j, tail_inf, split0)
        self.bottlenecks(j, slot, tail, fits, cells, float(tail_inf[0]))
        return True

    def bottlenecks(self, j: int, slot, tail, fits, cells: int, tail_lb: float) -> None:
        """Shape j's DPs at every candidate bottleneck t_max, ascending, in batches, until
        Alpa's stop (the bottleneck term alone loses) or the time limit."""
        p, A, v, S = int(self.p_all[j]), float(self.A_all[j]), float(self.v_all[j]), float(self.S_all[j])
        cand_t = np.unique(slot[fits])
        cand_t = cand_t[cand_t >= S / p * (1 - 1e-12)]  # the bottleneck is at least the mean slot
        tail_caps = np.unique(tail[fits]) if self.mode == "sum" else None
        done = False
        for b0 in range(0, len(cand_t), T_BATCH):
            if done:
                break
            ts = cand_t[b0:b0 + T_BATCH]
            # Alpa's stop: the bottleneck term alone (+ the constant sum and least tail) loses
            keep = (A * ts + S / v + tail_lb < self.threshold(j) * (1 - 1e-12) if self.prune
                    else np.ones(len(ts), dtype=bool))
            if not keep.all():
                ts = ts[keep]
                done = True
            if len(ts) == 0:
                break
            if self.mode == "minmax":
                allowed = fits[None] & (slot[None] <= ts[:, None, None])
                val, splits = _minmax_dp(np.where(allowed, tail[None], np.inf), self.L)
                self.evaluations += cells * len(ts)
                self.dps += len(ts)
                self.offer_finite(j, val, splits)
            else:
                self.tail_caps(j, ts, slot, tail, fits, tail_caps, cells)
            if self.out_of_time():
                self.stopped = "time_limit"
                break

    def tail_caps(self, j: int, ts, slot, tail, fits, tail_caps, cells: int) -> None:
        """Mode "sum": per bottleneck t, a min-sum DP per tail cap that can still win."""
        A, v, S = float(self.A_all[j]), float(self.v_all[j]), float(self.S_all[j])
        for t in ts.tolist():
            caps = tail_caps[A * t + S / v + tail_caps < self.threshold(j) * (1 - 1e-12)] if self.prune else tail_caps
            if len(caps) == 0:
                continue
            al = fits[None] & (slot[None] <= t) & (tail[None] <= caps[:, None, None])
            val, splits = _minsum_dp(np.where(al, slot[None], np.inf), self.L)
            self.evaluations += cells * len(caps)
            self.dps += len(caps)
            self.offer_finite(j, val, splits)

    def result(self) -> MethodResult:
        finished = self.stopped is None
        ranked = sorted(self.best.per_shape.items(), key=lambda kv: (kv[1][0], kv[0]))[:self.k]
        choices = [Choice(index=int(j), layers=[int(x) for x in s], objective_s=float(o)) for j, (o, s) in ranked]
        top = choices[0] if choices else None
        status, bound = verdict(finished, top)
        elapsed = time.perf_counter() - self.t0
        if self.progress is not None:
            self.progress({"method": "alpa-dp", "shapes_done": self.visited, "shapes": self.n,
                           "evaluations": self.evaluations, "best_s": top.objective_s if top else None,
                           "elapsed_s": elapsed, "final": True})
        return MethodResult(
            status=status, best=top, bound_s=bound, top=choices, evaluations=self.evaluations, finished=finished,
            stats={"shapes": self.n, "shapes_visited": self.visited, "shapes_with_dp": self.shapes_dp,
                   "dp_runs": self.dps, "mode": self.mode, "stopped_by": self.stopped, "wall_time_s": elapsed},
        )
