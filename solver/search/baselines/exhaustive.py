"""Exhaustive search: every candidate shape x every layer split, evaluated with the float
formulation (`step_time_batch`), in vectorised blocks. The ground truth where it finishes
(docs/DESIGN.md section 5).

Space. For a shape with `pp` stages the splits are the compositions of L layers into pp
positive parts: C(L-1, pp-1) of them (`count_space`); an even-split job (`uneven_split`
False) has one, the balanced split, and so has a shape that counts the embedding or the loss
as a layer (Megatron's split, `Candidates.fixed_splits`). They are generated in lexicographic
order of their pp-1 cut points (`itertools.combinations` read into numpy with `fromiter`),
rows of several shapes are packed into one block of about `block_rows` rows (fewer for deep
pipelines: at most ~0.5M row x stage cells), and each block is evaluated at once by
`step_time_batch` (~0.5-0.8M splits/s on one core). Nothing is pruned here: the method
searches what it is given. The harness hands it `candidates.prepare(job, prune_time=False,
apply_dominance=False)` (`PREPARE_KWARGS` in `solveplan.baselines`): every legal shape
except those that the valid memory lower bound proves cannot fit under any split.

Budget. `time_limit_s` (checked between blocks; a block takes ~0.1 s) and
`max_evaluations` (rows evaluated; the last block is cut to fit). When a budget stops the
search the result says so: finished=False, status "FEASIBLE" with the best plan found so far
(or "UNKNOWN" with none), the evaluations done, and no bound (an unfinished enumeration
proves nothing about the rest of the space).

Top-k (`distinct="shape"`, the default): the best split of each of the k best shapes, the
meaning CP-SAT and `alpa_dp` give top-k (alternatives differ in their parallel
configuration). `distinct="plan"`: the k best distinct (shape, split) pairs. Ties are broken
by the order of the enumeration (shapes by ascending pp, then in `cands.shapes` order; splits
by lexicographic cut points), so the answer is deterministic.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator

import numpy as np

from ...formulation.pipeline import step_time_batch
from ...formulation.splits import balanced_split
from ..candidates import Candidates
from ..result import Choice, MethodResult
from . import verdict

BLOCK_ROWS = 1 << 17
BLOCK_ELEMENTS = 1 << 19  # rows x stages per block: bounds the formulation's temporaries (~20 arrays)
PROGRESS_EVERY_S = 0.5


def count_splits(num_layers: int, pp: int) -> int:
    """Compositions of `num_layers` into `pp` positive parts: C(L-1, pp-1)."""
    if pp < 1 or pp > num_layers:
        return 0
    return math.comb(num_layers - 1, pp - 1)


def count_space_pp(num_layers: int, pp, uneven: bool = True) -> int:
    """Shape x split combinations for shapes with these pipeline degrees (exact big int); one
    split per shape (the balanced one) when `uneven` is False."""
    values, counts = np.unique(np.asarray(pp, dtype=np.int64), return_counts=True)
    per = (lambda p: count_splits(num_layers, p)) if uneven else (lambda p: int(p <= num_layers))
    return sum(int(c) * per(int(p)) for p, c in zip(values.tolist(), counts.tolist()))


def count_space(cands: Candidates) -> int:
    """Number of (shape, layer split) combinations in `cands` (exact big int): one split for a
    shape that counts the embedding or the loss as a layer (Megatron's)."""
    acc = cands.shapes.accounted
    return (count_space_pp(cands.job.model.num_pipeline_units, cands.shapes.pp[~acc],
                           cands.job.constraints.uneven_split) + int(acc.sum()))


def _splits(num_layers: int, pp: int, uneven: bool = True, only: list[int] | None = None):
    """A stream of all compositions of L into pp positive parts, lexicographic in their cut
    points (only the balanced split when `uneven` is False; only `only` when given: an
    accounted shape's); `take(n)` returns the next (up to) n of them as an n x pp int64 array."""
    return _SplitStream(num_layers, pp, uneven, only)


class _SplitStream:
    def __init__(self, num_layers: int, pp: int, uneven: bool = True, only: list[int] | None = None):
        self.L, self.p = num_layers, pp
        self.left = 1 if only is not None else count_splits(num_layers, pp) if uneven else int(pp <= num_layers)
        self._it: Iterator[int] = iter(())  # the cut points, flat (none for pp = 1)
        if pp > 1:
            one = only if only is not None else None if uneven else balanced_split(num_layers, pp)
            cuts = (itertools.combinations(range(1, num_layers), pp - 1) if one is None
                    else [tuple(np.cumsum(one)[:-1].tolist())])
            self._it = itertools.chain.from_iterable(cuts)

    def take(self, n: int) -> np.ndarray:
        n = min(n, self.left)
        self.left -= n
        if self.p == 1:
            return np.full((n, 1), self.L, dtype=np.int64)
        cuts = np.fromiter(self._it, dtype=np.int64, count=n * (self.p - 1)).reshape(n, self.p - 1)
        edges = np.empty((n, self.p + 1), dtype=np.int64)
        edges[:, 0] = 0
        edges[:, -1] = self.L
        edges[:, 1:-1] = cuts
        return np.diff(edges, axis=1)


class _TopK:
    """The k best rows seen so far: (objective, order key) ascending; order = enumeration order."""

    def __init__(self, k: int):
        self.k = k
        self.obj = np.zeros(0)
        self.order = np.zeros(0, dtype=np.int64)
        self.idx = np.zeros(0, dtype=np.int64)
        self.layers: list[np.ndarray] = []

    @property
    def worst(self) -> float:
        return float(self.obj[-1]) if len(self.obj) >= self.k else math.inf

    def offer(self, obj, order, idx, layers):
        if len(obj) == 0:
            return
        if len(obj) > self.k:
            part = np.argpartition(obj, self.k - 1)[: self.k]
            # keep every row tied with the k-th value so that enumeration order decides ties
            kth = obj[part].max()
            part = np.flatnonzero(obj <= kth)
            obj, order, idx, layers = obj[part], order[part], idx[part], layers[part]
        all_obj = np.concatenate([self.obj, obj])
        all_order = np.concatenate([self.order, order])
        keep = np.lexsort((all_order, all_obj))[: self.k]
        new_layers = self.layers + [row for row in layers]
        all_idx = np.concatenate([self.idx, idx])
        self.obj, self.order, self.idx = all_obj[keep], all_order[keep], all_idx[keep]
        self.layers = [new_layers[i] for i in keep.tolist()]

    def choices(self) -> list[Choice]:
        return [Choice(index=int(i), layers=[int(x) for x in lay[lay > 0]], objective_s=float(o))
                for o, i, lay in zip(self.obj.tolist(), self.idx.tolist(), self.layers)]


def search(
    cands: Candidates,
    time_limit_s: float,
    top_k: int = 1,
    progress: Callable[[dict], None] | None = None,
    max_evaluations: int | None = None,
    block_rows: int = BLOCK_ROWS,
    distinct: str = "shape",
) -> MethodResult:
    """Enumerate every (shape, split) of `cands`; return the best fitting plan(s).

    progress(info) is called about every 0.5 s and at the end with info = {"method", "phase",
    "evaluations", "space", "fraction", "shapes_done", "shapes", "best_s", "bound_s", "elapsed_s"}:
    `bound_s` is the least of the best plan and the time lower bounds of the shapes not done
    (a valid bound of the optimum at any moment); the fraction of splits is tiny on deep
    pipelines, the shapes done say more.
    """
    if distinct not in ("plan", "shape"):
        raise ValueError(f"distinct must be 'plan' or 'shape', not {distinct!r}")
    run = _Enumeration(cands, time_limit_s, top_k, progress, max_evaluations, distinct)
    return run.result(run.enumerate(block_rows))


class _Enumeration:
    """One exhaustive search: the best rows so far (top-k plans, or the best split of each
    shape), the rows pending for the next block, and the counters."""

    def __init__(self, cands: Candidates, time_limit_s: float, top_k: int, progress, max_evaluations: int | None,
                 distinct: str):
        self.t0 = time.perf_counter()
        self.cands, self.time_limit_s, self.progress, self.distinct = cands, time_limit_s, progress, distinct
        self.n_shapes = len(cands.shapes)
        self.space = count_space(cands)
        self.k = max(1, int(top_k))
        self.top = _TopK(self.k)
        self.shape_best = np.full(self.n_shapes, np.inf)  # read with distinct="shape" only
        self.shape_layers: dict[int, np.ndarray] = {}
        self.evaluations = 0
        self.order_base = 0
        self.last_report = self.t0
        # shapes by pipeline degree so that a block's rows share a width (stable: ties keep order)
        self.shape_order = np.argsort(cands.shapes.pp, kind="stable")
        self.done = 0  # shapes of shape_order whose every split is scored
        self.budget_rows = math.inf if max_evaluations is None else int(max_evaluations)
        self.buf: dict = {"idx": [], "lay": [], "order": [], "rows": 0}

    def report(self, final=False):
        if self.progress is None:
            return
        best = float(self.top.obj[0]) if len(self.top.obj) else None
        if self.distinct == "shape" and np.isfinite(self.shape_best).any():
            best = float(self.shape_best.min())
        rest = self.cands.time_lb_s[self.shape_order[self.done:]] if self.done < self.n_shapes else np.zeros(0)
        bound = min([x for x in (best, float(rest.min()) if len(rest) else None) if x is not None], default=None)
        self.progress({"method": "exhaustive", "phase": "every split of each shape", "evaluations": self.evaluations,
                       "space": self.space, "fraction": self.evaluations / self.space if self.space else 1.0,
                       "shapes_done": self.done, "shapes": self.n_shapes, "best_s": best, "bound_s": bound,
                       "elapsed_s": time.perf_counter() - self.t0, "final": final})

    def score_block(self, idx_parts, lay_parts, order_parts):
        """Evaluate the rows of several shapes at once; keep the best."""
        width = max(a.shape[1] for a in lay_parts)
        rows = sum(len(a) for a in lay_parts)
        layers = np.zeros((rows, width), dtype=np.int64)
        r = 0
        for a in lay_parts:
            layers[r:r + len(a), : a.shape[1]] = a
            r += len(a)
        idx = np.concatenate(idx_parts)
        order = np.concatenate(order_parts)
        step, _, fits = step_time_batch(self.cands.coeffs.take(idx), layers)
        self.evaluations += rows
        ok = np.flatnonzero(fits)
        if self.distinct == "plan":
            self.top.offer(step[ok], order[ok], idx[ok], layers[ok])
        elif len(ok):
            self._keep_best_per_shape(ok, idx, order, step, layers)

    def _keep_best_per_shape(self, ok, idx, order, step, layers):
        """The best row per shape in this block (first in enumeration order among ties), where
        it beats the shape's best so far."""
        o = ok[np.lexsort((order[ok], step[ok], idx[ok]))]
        first = np.ones(len(o), dtype=bool)
        first[1:] = idx[o][1:] != idx[o][:-1]
        for row in o[first].tolist():
            j = int(idx[row])
            if step[row] < self.shape_best[j]:
                self.shape_best[j] = step[row]
                self.shape_layers[j] = layers[row].copy()

    def flush(self) -> str | None:
        """Evaluate the pending rows; return why to stop, if the time is up."""
        buf = self.buf
        if buf["rows"]:
            self.score_block(buf["idx"], buf["lay"], buf["order"])
            buf.update(idx=[], lay=[], order=[], rows=0)
        now = time.perf_counter()
        if now - self.last_report >= PROGRESS_EVERY_S:
            self.last_report = now
            self.report()
        return "time_limit" if now - self.t0 >= self.time_limit_s else None

    def enumerate(self, block_rows: int) -> str | None:
        """Every split of every shape, in blocks of rows; why it stopped short, if it did."""
        cands, buf = self.cands, self.buf
        L = cands.job.model.num_pipeline_units
        uneven = cands.job.constraints.uneven_split
        stopped: str | None = None
        for pos, j in enumerate(self.shape_order.tolist()):
            self.done = pos  # the shapes before this one are in the scored or the pending rows
            p = int(cands.shapes.pp[j])
            target = min(block_rows, max(256, BLOCK_ELEMENTS // p))  # shapes come in ascending pp
            stream = _splits(L, p, uneven, cands.accounted_split(j))
            while stream.left > 0 and not stopped:
                if buf["rows"] >= target:
                    stopped = self.flush()
                    continue
                room = self.budget_rows - self.evaluations - buf["rows"]
                if room <= 0:
                    stopped = "max_evaluations"
                    break
                lay = stream.take(int(min(target - buf["rows"], room)))
                n = len(lay)
                buf["idx"].append(np.full(n, j, dtype=np.int64))
                buf["lay"].append(lay)
                buf["order"].append(np.arange(self.order_base, self.order_base + n, dtype=np.int64))
                self.order_base += n
                buf["rows"] += n
            if stopped:
                break
        if buf["rows"]:
            self.flush()
        if not stopped:
            self.done = self.n_shapes
        return stopped

    def result(self, stopped: str | None) -> MethodResult:
        finished = self.evaluations == self.space
        if finished:
            stopped = None
        elif stopped is None:
            stopped = "time_limit"
        if self.distinct == "plan":
            choices = self.top.choices()
        else:
            shape_best, shape_layers = self.shape_best, self.shape_layers
            order = np.lexsort((np.arange(self.n_shapes), shape_best))
            choices = [Choice(index=int(j), layers=[int(x) for x in shape_layers[j][shape_layers[j] > 0]],
                              objective_s=float(shape_best[j]))
                       for j in order[:self.k].tolist() if np.isfinite(shape_best[j])]
        best = choices[0] if choices else None
        status, bound = verdict(finished, best)
        self.report(final=True)
        t0, evaluations = self.t0, self.evaluations
        return MethodResult(
            status=status, best=best, bound_s=bound, top=choices, evaluations=evaluations, finished=finished,
            stats={"space": self.space, "shapes": self.n_shapes, "stopped_by": stopped,
                   "wall_time_s": time.perf_counter() - t0,
                   "evaluations_per_s": evaluations / max(1e-9, time.perf_counter() - t0)},
        )
