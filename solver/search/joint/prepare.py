"""The first phase of a joint search: the joint shapes, pruned by valid bounds against the best
plan known, with the prices of the survivors.

Order (branch and bound; every bound is valid for every placement and split, `space`):
1. the seeds (plans known before: each pool alone, a sequential plan) placed by the
   contiguous-block heuristic give the first incumbent;
2. every (tp, cp, pp, dp, micro-batch, vp, SP) on 1..N nodes with the least-computation knobs
   is ranked by the compute bound; those above the incumbent go;
3. the rest are expanded to every knob (recompute, ZeRO) and ranked again by the compute bound;
   the `PROBE` best are priced, bounded by the equal-link relaxation and placed by the
   heuristic, which may improve the incumbent; every shape whose compute bound exceeds it goes;
4. the survivors, in chunks of RELAX_CHUNK in order of their cheap bound, are priced and bounded
   by the relaxation, then by pool counts (`bounds.pool_count_bound_s`), and tried by the
   heuristic in order of their bound until the bound passes the incumbent; shapes whose bound
   exceeds it go. Past the deadline, the chunks left are left out: the least of their bounds
   is `outside_bound_s`.
Without time pruning (`prune_time=False`, the exhaustive search's input) only shapes with no
split that fits within the largest memory limits go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...space.shapes import Shapes
from ...specs import JobSpec
from ...specs.deadline import Deadline, DeadlineExpired
from .bounds import bound_and_patterns as _bound
from .heuristic import Assignment, heuristic_plans, node_order, stage_nodes
from .nodes import NodeSet
from .prices import Prices
from .space import (
    JointShapes,
    base_shapes,
    cheap_bound_s,
    compute_bound_s,
    expand_shapes,
    relaxed_bound_s,
    uniform_gpus_per_node,
)

PROBE = 256  # shapes priced and placed by the heuristic first, for the first incumbent
PROBE_BASE = 64  # base tuples expanded for them
CHUNK = 16  # shapes the heuristic tries at a time, in order of their bound
RELAX_CHUNK = 20000  # shapes bounded by the relaxation at a time (memory, and the deadline's grain)
Seed = tuple  # (shape row as `Shapes.row` gives it, pool index of each stage, layers per stage)
SHAPE_KEYS = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero")


@dataclass
class JointCandidates:
    job: JobSpec
    nodes: NodeSet
    prices: Prices  # of the surviving shapes
    stage_nodes: np.ndarray  # (S,) nodes per stage of each survivor
    lower_bound_s: np.ndarray  # (S,) the relaxation's bound of each survivor
    incumbent: Assignment | None  # k indexes the survivors
    incumbent_step_s: float  # float formulation
    num_legal: int
    num_shapes: int  # whole-node stages that pack into the pools (after dominance)
    num_pruned_memory: int
    num_pruned_time: int
    outside_bound_s: float = float("inf")  # least bound of the shapes left out unbounded (deadline)

    @property
    def num_dominated(self) -> int:
        """Legal shapes set aside before pricing: dominated, or with stages that do not fill whole
        nodes of the pools (`search.candidates.ShapeCounts`)."""
        return self.num_legal - self.num_shapes

    @property
    def num_survivors(self) -> int:
        return len(self.lower_bound_s)


def _single(row: dict) -> Shapes:
    return Shapes.single(**{k: row[k] for k in SHAPE_KEYS})


def seed_plans(job: JobSpec, nodes: NodeSet, seeds: Sequence[Seed]) -> list[tuple[dict, Assignment]]:
    """Plans given as (shape row, pool of each stage, layers), on the pools' nodes in
    `node_order`, priced; those the joint space cannot hold are left out."""
    g = uniform_gpus_per_node(job)
    orders = [node_order(nodes, pl) for pl in range(len(job.cluster.pool_specs()))]
    out = []
    for row, pools, layers in seeds:
        stage_gpus = row["tp"] * row["cp"] * row["dp"]
        n = stage_gpus // g
        if stage_gpus % g or any(pools.count(pl) * n > len(orders[pl]) for pl in set(pools)):
            continue
        node_lists = stage_nodes(orders, pools, n)
        ev = Prices(job, nodes, _single(row)).evaluate(0, pools, node_lists, layers)
        if ev.fits:
            out.append((row, Assignment(0, tuple(pools), node_lists, tuple(layers), ev.step_time_s)))
    return out


def _index(shapes: Shapes, row: dict) -> int | None:
    one = _single(row)
    hit = np.ones(len(shapes), dtype=bool)
    for key in SHAPE_KEYS:
        hit &= getattr(shapes, key) == getattr(one, key)[0]
    idx = np.flatnonzero(hit)
    return int(idx[0]) if len(idx) else None


def _try(prices: Prices, per_stage: np.ndarray, lb: np.ndarray, ok: np.ndarray, uneven: bool,
         best: Assignment | None, patterns: list | None = None,
         deadline: Deadline | None = None) -> Assignment | None:
    """Heuristic plans of the shapes in order of their bound, until the bound passes the best
    or the deadline; `patterns`: per shape, one more pattern of pools to try (`heuristic_plans`'
    extra)."""
    order = [int(i) for i in np.argsort(lb, kind="stable") if ok[i]]
    extra = {k: p for k, p in enumerate(patterns) if p is not None} if patterns is not None else None
    for start in range(0, len(order), CHUNK):
        chunk = order[start:start + CHUNK]
        if best is not None and lb[chunk[0]] > best.objective_s:
            break
        if deadline is not None and deadline.expired():
            break
        for a in heuristic_plans(prices, per_stage, chunk, uneven, extra=extra, deadline=deadline):
            if a is not None and (best is None or a.objective_s < best.objective_s):
                best = a
    return best


def _probe(job: JobSpec, nodes: NodeSet, base: JointShapes, lbb: np.ndarray, best, best_row, deadline: Deadline):
    """Heuristic plans of the shapes most promising by their bounds: the PROBE_BASE best base
    tuples, expanded, the PROBE best of those by the cheap bound."""
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    few = expand_shapes(job, base.take(np.argsort(lbb, kind="stable")[:PROBE_BASE]).shapes, deadline)
    top = np.sort(np.argsort(cheap_bound_s(job, few.shapes, few.stage_nodes, nodes), kind="stable")[:PROBE])
    pr = Prices(job, nodes, few.shapes.take(top))
    lb, ok = relaxed_bound_s(pr, few.stage_nodes[top], pool_nodes)
    found = _try(pr, few.stage_nodes[top], lb, ok, job.constraints.uneven_split, None, deadline=deadline)
    if found is not None and (best is None or found.objective_s < best.objective_s):
        return pr.shapes.row(found.k), found
    return best_row, best


def prepare_joint(job: JobSpec, nodes: NodeSet, seeds: Sequence[Seed] = (), prune_time: bool = True,
                  deadline: Deadline | None = None) -> JointCandidates:
    """The candidates of a joint search (module docstring). Past `deadline`, the shapes not yet
    bounded by the relaxation are left out of the candidates, and the least of their compute and
    cheap bounds becomes `outside_bound_s` (0 when the deadline passes before the shapes are
    enumerated: nothing is known of them)."""
    dl = deadline if deadline is not None else Deadline()
    seeded = seed_plans(job, nodes, seeds)
    best_row, best = min(seeded, key=lambda x: x[1].objective_s) if seeded else (None, None)
    try:
        base, _ = base_shapes(job, dl)
        lbb = compute_bound_s(job, base.shapes, base.stage_nodes)
    except DeadlineExpired:
        return _cut_short(job, nodes, best_row, best, 0.0, 0, 0)
    try:
        return _prepare(job, nodes, base, lbb, best_row, best, prune_time, dl)
    except DeadlineExpired:  # while expanding the base shapes: their compute bounds stand
        return _cut_short(job, nodes, best_row, best, float(np.min(lbb, initial=np.inf)), len(base.shapes),
                          len(base.shapes))


def _prepare(job: JobSpec, nodes: NodeSet, base: JointShapes, lbb: np.ndarray, best_row, best, prune_time: bool,
             dl: Deadline) -> JointCandidates:
    """`prepare_joint` from the base shapes and their compute bounds `lbb` on; raises
    DeadlineExpired when the deadline passes while the shapes are expanded."""
    uneven = job.constraints.uneven_split
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    late = dl.expired
    if prune_time and len(base.shapes) and not late():
        best_row, best = _probe(job, nodes, base, lbb, best, best_row, dl)
    cut = lambda lb: lb <= (best.objective_s * (1 + 1e-9) if best is not None else np.inf)  # noqa: E731
    if prune_time:
        base = base.take(np.flatnonzero(cut(lbb)))
        if late():
            return _cut_short(job, nodes, best_row, best, float(np.min(lbb[cut(lbb)], initial=np.inf)),
                              len(base.shapes), len(base.shapes))
    js = expand_shapes(job, base.shapes, dl)
    n_shapes = len(js.shapes)
    bound = np.zeros(n_shapes)
    if prune_time:
        bound = compute_bound_s(job, js.shapes, js.stage_nodes)
        keep = np.flatnonzero(cut(bound))
        js, bound = js.take(keep), bound[keep]
        if not late():
            bound = np.maximum(bound, cheap_bound_s(job, js.shapes, js.stage_nodes, nodes))
    # the relaxation, chunk by chunk in order of the cheaper bounds: the heuristic tries each
    # chunk's survivors at once, so a better incumbent prunes the chunks after it
    order = np.argsort(bound, kind="stable")
    surv_parts, lb_parts, n_mem, outside = [], [], 0, np.inf
    k_inc = _index(js.shapes, best_row) if best is not None else None
    if k_inc is not None:  # the incumbent's shape goes first: it is always a candidate
        order = np.concatenate([[k_inc], order[order != k_inc]])
    for start in range(0, len(order), RELAX_CHUNK):
        chunk = order[start:start + RELAX_CHUNK]
        if prune_time:
            chunk = chunk[cut(bound[chunk]) | (chunk == k_inc)]
        if not len(chunk):
            continue
        if start and late():
            rest = order[start:]
            outside = float(np.min(bound[rest][cut(bound[rest])], initial=np.inf))
            break
        pr = Prices(job, nodes, js.shapes.take(chunk))
        lb, ok = relaxed_bound_s(pr, js.stage_nodes[chunk], pool_nodes)
        mine = chunk == k_inc  # the incumbent fits (its own bound lies below its value)
        ok |= mine
        n_mem += int((~ok).sum())
        keep = np.flatnonzero((ok & cut(lb)) | mine if prune_time else ok)
        pats = None
        if prune_time and len(keep):  # the bound by pool counts on the relaxation's survivors (`bounds`)
            sub = pr.take(keep)
            by_count, pats = _bound(sub, js.stage_nodes[chunk[keep]], pool_nodes)
            lb[keep] = np.maximum(lb[keep], by_count)
            inside = cut(lb[keep]) | mine[keep]
            keep, pats = keep[inside], [p for p, i in zip(pats, inside) if i]
        if prune_time and len(keep):
            at = np.flatnonzero(mine[keep])
            local = Assignment(int(at[0]), best.pools, best.nodes, best.layers, best.objective_s) if len(at) else None
            found = _try(pr.take(keep), js.stage_nodes[chunk[keep]], lb[keep], np.ones(len(keep), dtype=bool),
                         uneven, local, pats, deadline=dl)
            if found is not None and found is not local and (best is None or found.objective_s < best.objective_s):
                k_inc = int(chunk[keep[found.k]])
                best_row, best = js.shapes.row(k_inc), found
        surv_parts.append(chunk[keep])
        lb_parts.append(lb[keep])
    surv = np.concatenate(surv_parts) if surv_parts else np.zeros(0, dtype=np.int64)
    lbs = np.concatenate(lb_parts) if lb_parts else np.zeros(0)
    if prune_time:
        sel = cut(lbs) | (surv == (k_inc if k_inc is not None else -1))
        surv, lbs = surv[sel], lbs[sel]
    return _survivors(job, nodes, js, surv, lbs, best, k_inc, n_shapes, n_mem, outside)


def _survivors(job: JobSpec, nodes: NodeSet, js: JointShapes, surv: np.ndarray, lbs: np.ndarray,
               best: Assignment | None, k_inc: int | None, n_shapes: int, n_mem: int, outside: float
               ) -> JointCandidates:
    """The candidates: the surviving shapes `surv` (indices into `js`) in index order with their
    bounds `lbs`, priced, and the incumbent (shape `k_inc` of `js`) re-indexed and evaluated;
    `n_shapes` expanded, `n_mem` of them without a split that fits."""
    srt = np.argsort(surv, kind="stable")
    surv, lbs = surv[srt], lbs[srt]
    prices = Prices(job, nodes, js.shapes.take(surv))
    inc_step = float("inf")
    if best is not None and k_inc is not None:
        best = Assignment(int(np.searchsorted(surv, k_inc)), best.pools, best.nodes, best.layers, best.objective_s)
        inc_step = prices.evaluate(best.k, best.pools, best.nodes, best.layers).step_time_s
    else:
        best = None
    n_time = n_shapes - len(surv) - n_mem
    return JointCandidates(job, nodes, prices, js.stage_nodes[surv], lbs, best, inc_step,
                           js.num_legal, n_shapes, n_mem, n_time, outside)


def _cut_short(job: JobSpec, nodes: NodeSet, best_row, best, outside: float, n_shapes: int, n_time: int
               ) -> JointCandidates:
    """The candidates when the deadline passes before the shapes are expanded: the incumbent's
    shape alone, and the least compute bound of the rest as `outside_bound_s`; the `n_shapes`
    counted so far are all the legal ones known (none set aside as dominated yet)."""
    if best is None:
        pr = Prices(job, nodes, Shapes(*(np.zeros(0, dtype=np.int64) for _ in range(11))))
        return JointCandidates(job, nodes, pr, np.zeros(0, dtype=np.int64), np.zeros(0), None, float("inf"),
                               n_shapes, n_shapes, 0, n_time, outside)
    pr = Prices(job, nodes, _single(best_row))
    per = np.array([len(best.nodes[0])])
    inc = Assignment(0, best.pools, best.nodes, best.layers, best.objective_s)
    step = pr.evaluate(0, inc.pools, inc.nodes, inc.layers).step_time_s
    return JointCandidates(job, nodes, pr, per, np.array([min(outside, step)]), inc, step, n_shapes, n_shapes, 0,
                           n_time, outside)


def prepare_fixed(job: JobSpec, nodes: NodeSet, row: dict, layers) -> JointCandidates | None:
    """Candidates of one shape whose split is given: the placement of a fixed plan (the
    sequential method). None when its stages cannot sit on whole nodes of the pools."""
    g = uniform_gpus_per_node(job)
    stage_gpus = row["tp"] * row["cp"] * row["dp"]
    pool_nodes = [p.num_nodes for p in job.cluster.pool_specs()]
    if stage_gpus % g or sum(x // (stage_gpus // g) for x in pool_nodes) < row["pp"]:
        return None
    per = np.array([stage_gpus // g])
    pr = Prices(job, nodes, _single(row))
    lb, ok = relaxed_bound_s(pr, per, pool_nodes)
    inc = heuristic_plans(pr, per, [0], job.constraints.uneven_split, layers=tuple(layers))[0]
    step = pr.evaluate(0, inc.pools, inc.nodes, inc.layers).step_time_s if inc is not None else float("inf")
    return JointCandidates(job, nodes, pr, per, np.where(ok, lb, 0.0), inc, step, 1, 1, 0, 0)
