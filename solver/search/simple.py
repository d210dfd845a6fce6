"""The simplest plan within the error (`optimize(prefer="simple")`): among the plans whose step
is within a tolerance of the optimum, the one with the fewest departures from the textbook
Megatron-LM plan, still proven.

Departures of a shape and split from the textbook plan (`space.rules.textbook_shapes`, the
fastest of which with its balanced split is `plan.textbook_plan`), ranked lexicographically:
1. exotic: interleaving (vp > 1) and context parallelism (cp > 1), one each -- they change the
   schedule or the attention kernel, and the error of the formulation is largest where they
   are used (issue 24);
2. an uneven layer split;
3. degrees changed: each knob of DEGREE_KNOBS whose value differs from the textbook plan's.

Levels (exotic, uneven, changed) are solved in that order, each by the same search on the
candidates of its subspace (`candidates.prepare(keep=...)`: its own pruning and incumbent; an
even-split level solves the job with `uneven_split` off). The first level whose optimum is
within the threshold wins, with that optimum. The threshold is (1 + tol) x the optimum T*,
and, for a level with exotic departures, also the best plan without any (M0) / (1 + tol): a plan
that interleaves or splits the context must beat every plan that does not by more than the
tolerance. (M0 is the least optimum of the exotic-free levels, all solved before; when the
search reaches exotic levels M0 > (1 + tol) T*, so the level holding T* always qualifies.)

The answer is proven (OPTIMAL) when T* is, every earlier level is proven above its threshold
(its search's bound, or every shape's time lower bound, exceeds it) and the chosen level's own
optimum is proven: it is then the best plan under the tie-break among the plans within the
tolerance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..space.enumeration import enumerate_shapes
from ..space.shapes import RECOMPUTE_CODES, RECOMPUTE_NAMES, Shapes
from ..specs import JobSpec
from .candidates import Candidates, prepare
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, MethodResult, PlanStatus

DEGREE_KNOBS = ("tp", "pp", "micro_batch_size", "recompute", "sequence_parallel", "zero")
EXOTIC_KNOBS = ("vp", "cp")  # a value above 1 is a departure
MAX_EXOTIC = len(EXOTIC_KNOBS)
STATEMENT = ("best under the tie-break (fewest departures from the textbook plan: interleaving and context "
             "parallelism first, then an uneven split, then degrees changed) among plans within the tolerance")


def reference(textbook_parallel: dict | None) -> dict:
    """The textbook plan's value of each DEGREE_KNOBS knob, coded as `Shapes` holds it
    (recompute as its code); with no textbook plan, only the textbook recompute (selective)."""
    if textbook_parallel is None:
        return {"recompute": RECOMPUTE_CODES["selective"]}
    out = {k: textbook_parallel[k] for k in DEGREE_KNOBS}
    out["recompute"] = RECOMPUTE_CODES[out["recompute"]] if isinstance(out["recompute"], str) else out["recompute"]
    return out


def exotic_count(shapes: Shapes) -> np.ndarray:
    return sum((getattr(shapes, k) > 1).astype(np.int64) for k in EXOTIC_KNOBS)


def changed_count(shapes: Shapes, ref: dict) -> np.ndarray:
    out = np.zeros(len(shapes), dtype=np.int64)
    for k, v in ref.items():
        out += (np.asarray(getattr(shapes, k)) != v).astype(np.int64)
    return out


def departure_names(row: dict, layers: list[int], ref: dict) -> list[str]:
    """The departures of one plan (its shape row and split) in words, in rank order."""
    out = [f"{k}={row[k]}" for k in EXOTIC_KNOBS if row[k] > 1]
    if max(layers) - min(layers) > 1:
        out.append("uneven split")
    for k, v in ref.items():
        mine = RECOMPUTE_CODES[row[k]] if k == "recompute" else row[k]
        if mine != v:
            was = RECOMPUTE_NAMES[v] if k == "recompute" else v
            out.append(f"{k} {was}->{row[k]}")
    return out


@dataclass
class Level:
    exotic: int
    uneven: bool
    changed: int
    shapes: int  # legal shapes of the subspace
    status: str  # the search's status, or "ABOVE" when the time lower bounds exceed the threshold
    best_s: float | None = None
    bound_s: float | None = None
    threshold_s: float | None = None


@dataclass
class SimpleResult:
    """The chosen level's candidates and search result (its `best` indexes `cands.shapes`);
    `proven`: every earlier level was proven above its threshold."""

    status: PlanStatus
    cands: Candidates | None
    result: MethodResult | None
    threshold_s: float | None
    levels: list[Level] = field(default_factory=list)
    proven: bool = True
    best_without_exotic_s: float | None = None


def _levels(job: JobSpec):
    for a in range(MAX_EXOTIC + 1):
        for uneven in ((False, True) if job.constraints.uneven_split else (False,)):
            for c in range(len(DEGREE_KNOBS) + 1):
                yield a, uneven, c


def simplest(job: JobSpec, ref: dict, optimum_s: float, tol: float, deadline: float,
             search: Callable[[Candidates, float], MethodResult], prepare_kwargs: dict | None = None,
             progress: Callable[[dict], None] | None = None) -> SimpleResult:
    """The first level (see the module docstring) whose optimum is within its threshold, with
    `search(cands, seconds)` on each level's candidates until `deadline` (time.perf_counter)."""
    legal = enumerate_shapes(job).shapes
    counts: dict[tuple[int, int], int] = {}
    for a, c in zip(exotic_count(legal).tolist(), changed_count(legal, ref).tolist()):
        counts[(a, c)] = counts.get((a, c), 0) + 1
    levels: list[Level] = []
    proven, m0 = True, float("inf")
    even_job = job.model_copy(update={"constraints": job.constraints.model_copy(update={"uneven_split": False})})
    for a, uneven, c in _levels(job):
        n = counts.get((a, c), 0)
        if not n:
            continue
        threshold = (1 + tol) * optimum_s if a == 0 else min((1 + tol) * optimum_s, m0 / (1 + tol))
        left = deadline - time.perf_counter()
        if left <= 0:
            return SimpleResult(FEASIBLE, None, None, threshold, levels, False, m0)
        if progress is not None:
            progress({"method": "simple", "phase": f"tie-break level exotic={a} uneven={int(uneven)} changed={c}",
                      "best_s": optimum_s, "bound_s": None, "elapsed_s": None, "final": False})
        def in_level(sh: Shapes, a: int = a, c: int = c) -> np.ndarray:
            return (exotic_count(sh) == a) & (changed_count(sh, ref) == c)

        cands = prepare(job if uneven else even_job, apply_dominance=False, keep=in_level, **(prepare_kwargs or {}))
        lv = Level(a, uneven, c, n, INFEASIBLE, threshold_s=threshold)
        levels.append(lv)
        if cands.num_survivors == 0:
            continue
        lb = float(np.min(cands.time_lb_s))
        if lb > threshold and (a > 0 or lb >= m0):  # every shape's bound is above (and M0 stays exact): no search
            lv.status, lv.bound_s = "ABOVE", lb
            continue
        res = search(cands, deadline - time.perf_counter())
        lv.status, lv.bound_s = res.status, res.bound_s
        lv.best_s = res.best.objective_s if res.best is not None else None
        if a == 0 and lv.best_s is not None:
            m0 = min(m0, lv.best_s)
        if lv.best_s is not None and lv.best_s <= threshold * (1 + 1e-12):
            status: PlanStatus = OPTIMAL if (proven and res.status == OPTIMAL) else FEASIBLE
            return SimpleResult(status, cands, res, threshold, levels, proven, m0 if np.isfinite(m0) else None)
        if res.status not in (OPTIMAL, INFEASIBLE) and (res.bound_s is None or res.bound_s <= threshold):
            proven = False
    return SimpleResult(UNKNOWN, None, None, None, levels, proven, m0 if np.isfinite(m0) else None)
