"""Exhaustive search with the pruning's bounds (branch and bound): the yardstick that gets the
same information as the CP-SAT search, evaluated with the same float formulation.

Shapes are visited in ascending order of the candidates' time lower bound (`time_lb_s`, valid
for every split) and the search stops at the first shape whose bound exceeds the K-th best
plan found (so far, or the candidates' incumbent): no later shape can enter the top K. Inside
a shape, a split can beat that plan only if its steady-state part
Y = (m - 1/v) * max_i slot_i stays within plan - sum_i slot_i / v - (the tail's lower bound,
`pruning.tail_lower_bound_s`), which caps every stage's layer count, as does its memory limit
(`LinearForm.max_layers`, exact). The compositions of L within those caps are enumerated
(lexicographically, a Python generator) and evaluated in blocks by `step_time_batch`. An
even-split job has one split per shape.

Budget, progress, top-k (the best split of each of the K best shapes) and statuses as in
`exhaustive`: a search stopped by its budget is FEASIBLE (or UNKNOWN) and proves nothing.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from ...formulation.linear import expand
from ...formulation.pipeline import step_time_batch
from ..candidates import Candidates
from ..pruning import tail_lower_bound_s
from ..result import Choice, MethodResult
from . import verdict

BLOCK_ROWS = 1 << 15
PROGRESS_EVERY_S = 0.5


def bounded_compositions(num_layers: int, hi: list[int]):
    """Every split of L layers into len(hi) stages with 1 <= l_i <= hi[i], lexicographic."""
    p = len(hi)
    room = list(itertools.accumulate(reversed(hi)))[::-1] + [0]  # room[i]: most layers stages i.. hold

    def rec(i: int, left: int, prefix: tuple):
        if i == p - 1:
            if 1 <= left <= hi[i]:
                yield prefix + (left,)
            return
        for n in range(max(1, left - room[i + 1]), min(hi[i], left - (p - 1 - i)) + 1):
            yield from rec(i + 1, left - n, prefix + (n,))

    return rec(0, num_layers, ())


def _caps(cands: Candidates, j: int, threshold_s: float, tail_lb_s: float) -> list[int]:
    """Per stage of shape j: the most layers it may hold in a split that fits and can score
    <= threshold_s (rounded up by 1e-9 relative: never cuts a split that reaches it)."""
    form, L = cands.form, cands.num_layers
    p = int(form.pp[j])
    hi = np.minimum(form.max_layers[j, :p], L)
    slope = float(form.y_slope_s[j])
    if slope > 0 and math.isfinite(threshold_s):
        budget = threshold_s * (1 + 1e-9) - float(form.base_s[j]) - tail_lb_s
        const = expand(form.y_const_s[j:j + 1], form.pp[j:j + 1], p)[0]
        hi = np.minimum(hi, np.floor((budget - const) / slope * (1 + 1e-9)).astype(np.int64))
    return [int(x) for x in hi]


def search(cands: Candidates, time_limit_s: float, top_k: int = 1, progress: Callable[[dict], None] | None = None,
           max_evaluations: int | None = None) -> MethodResult:
    """The best fitting plan(s) of `cands` by branch and bound over shapes and splits."""
    t0 = time.perf_counter()
    L = cands.num_layers
    n = cands.num_survivors
    k = max(1, int(top_k))
    best: dict[int, tuple[float, list[int]]] = {}
    seed = cands.incumbent_step_s if k == 1 else math.inf  # the candidates' incumbent, as CP-SAT gets it
    evaluations, visited, stopped, last = 0, 0, None, t0
    tail_lb = tail_lower_bound_s(cands.coeffs, L) if n else np.zeros(0)
    order = np.lexsort((np.arange(n), cands.time_lb_s)) if n else np.zeros(0, dtype=np.int64)
    budget = math.inf if max_evaluations is None else int(max_evaluations)

    def kth() -> float:
        vals = sorted(v[0] for v in best.values())
        return min(seed, vals[k - 1] if len(vals) >= k else math.inf)

    for j in order.tolist():
        if cands.time_lb_s[j] > kth() * (1 + 1e-12):
            break  # bound: this shape and every later one score above the K-th best
        visited += 1
        p = int(cands.shapes.pp[j])
        caps = _caps(cands, j, kth(), float(tail_lb[j]))
        only = cands.split_of(j)  # Megatron's split of an accounted shape, the balanced one of an even-split job
        stream = iter([tuple(only)]) if only is not None else bounded_compositions(L, caps)
        while stopped is None:
            rows = int(min(BLOCK_ROWS, budget - evaluations))  # budget: int, or inf
            block = np.fromiter(itertools.chain.from_iterable(itertools.islice(stream, rows)), dtype=np.int64)
            if block.size == 0:
                break
            lay = block.reshape(-1, p)
            step, _, fits = step_time_batch(cands.coeffs.take(np.full(len(lay), j)), lay)
            evaluations += len(lay)
            step = np.where(fits, step, np.inf)
            i = int(np.argmin(step))  # first in enumeration order among ties
            if np.isfinite(step[i]) and (j not in best or step[i] < best[j][0]):
                best[j] = (float(step[i]), [int(x) for x in lay[i]])
            now = time.perf_counter()
            if now - t0 >= time_limit_s:
                stopped = "time_limit"
            elif evaluations >= budget:
                stopped = "max_evaluations"
            if progress is not None and now - last >= PROGRESS_EVERY_S:
                last = now
                progress({"method": "branch-and-bound", "evaluations": evaluations, "shapes_done": visited,
                          "shapes": n, "best_s": kth() if k == 1 else None, "elapsed_s": now - t0, "final": False})
        if stopped:
            break
    finished = stopped is None
    ranked = sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))[:k]
    choices = [Choice(index=int(j), layers=lay, objective_s=obj) for j, (obj, lay) in ranked]
    top = choices[0] if choices else None
    if finished and top is None and cands.incumbent_index is not None:
        finished, stopped = False, "inconsistent"  # the incumbent fits: a proof of INFEASIBLE would be wrong
    status, bound = verdict(finished, top)
    elapsed = time.perf_counter() - t0
    if progress is not None:
        progress({"method": "branch-and-bound", "evaluations": evaluations, "shapes_done": visited, "shapes": n,
                  "best_s": top.objective_s if top else None, "elapsed_s": elapsed, "final": True})
    return MethodResult(status=status, best=top, bound_s=bound, top=choices, evaluations=evaluations,
                        finished=finished, stats={"shapes": n, "shapes_visited": visited, "stopped_by": stopped,
                                                  "wall_time_s": elapsed,
                                                  "evaluations_per_s": evaluations / max(1e-9, elapsed)})
