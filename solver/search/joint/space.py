"""The joint space and its valid bounds: every legal shape on any number of whole nodes, each
stage on whole nodes of one pool (docs/DESIGN.md section 4, issue #13).

Shapes. A shape is what `space.enumeration` makes legal for a cluster of n_used nodes, for
every n_used from 1 to the cluster's nodes (a plan may leave nodes idle: when that is faster,
or when the batch does not divide), whose stage -- tp*cp*dp GPUs, Megatron's rank order
tp-cp-dp-pp -- fills whole nodes, and whose stages fit in the pools (pp stages of n nodes:
sum over pools of floor(nodes / n) >= pp). Pools must have the same GPUs per node.

Bounds, each valid for every assignment of stages to pools and nodes and every layer split:
- compute (`compute_bound_s`, cheap, over every shape): each stage slot is at least its layers'
  computation on the fastest pool, so T >= L c ((m - 1/v)/p + 1/v) with c the least per-layer
  compute time over the pools;
- the equal-link relaxation (`relaxed_bound_s`): `search.pruning.time_lower_bound_s` on the
  coefficients of the best pool and the best link of every term (the elementwise least time
  and largest overlap window over pools and levels), with the largest-slot bound water-filled
  within the largest memory limit of each stage over the pools.
A shape is memory-feasible only if a split fits within those largest limits.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from ...errors import InputError
from ...formulation.coefficients import StageCoefficients
from ...formulation.job import job_coefficients
from ...formulation.linear import memory_feasible
from ...formulation.links import cluster_at_link
from ...formulation.splits import min_max_slot_s
from ...search.pruning import time_lower_bound_s
from ...space.enumeration import enumerate_shapes
from ...space.shapes import Shapes
from ...specs import JobSpec
from ...specs.deadline import Deadline
from ...specs.job import Constraints
from .nodes import NodeSet
from .prices import Prices

WINDOW_FIELDS = ("layer_window_s", "first_window_s", "last_window_s")


@dataclass
class JointShapes:
    shapes: Shapes
    stage_nodes: np.ndarray  # (S,) nodes per stage
    num_legal: int  # legal shapes on any node count (before dominance, whole nodes and pools)
    num_dominated: int

    def take(self, idx) -> JointShapes:
        return JointShapes(self.shapes.take(idx), self.stage_nodes[idx], self.num_legal, self.num_dominated)


def uniform_gpus_per_node(job: JobSpec) -> int:
    per = {p.gpus_per_node for p in job.cluster.pool_specs()}
    if len(per) > 1:
        raise InputError("cluster.pools", f"pools with different GPUs per node ({sorted(per)}) are not supported; "
                                          f"give pools of one node size")
    return per.pop()


BASE_KEYS = ("tp", "cp", "pp", "dp", "micro_batch_size", "vp")
RECOMPUTE_BY_COST = ("none", "selective", "full")


SPLIT_KNOBS = ("account_for_embedding", "account_for_loss")


def _on_nodes(job: JobSpec, n_used: int, constraints: Constraints) -> JobSpec:
    """The job on `n_used` nodes of its first pool. The joint model prices the planner's own
    layer splits only: Megatron's split with the embedding / loss counted as layers
    (space/pipeline_split.py) is not among its shapes (a job that requires it is refused)."""
    for knob in SPLIT_KNOBS:
        if not constraints.allows(knob, False):
            raise InputError(f"constraints.{knob}", "placement on measured links or pools does not count the "
                                                    "embedding / loss as layers of the split; leave it unset")
    base = job.cluster.pool_views()[0]
    cluster = base.model_copy(update={"num_nodes": n_used, "link_overrides": (), "node_names": ()})
    narrowed = constraints.model_copy(update={k: (False,) for k in SPLIT_KNOBS})
    return job.model_copy(update={"cluster": cluster, "constraints": narrowed})


def _placeable(job: JobSpec, shapes: Shapes) -> tuple[np.ndarray, np.ndarray]:
    """(keep, nodes per stage): stages fill whole nodes and pp of them fit in the pools."""
    g = uniform_gpus_per_node(job)
    stage_gpus = shapes.tp * shapes.cp * shapes.dp
    per = np.maximum(stage_gpus // g, 1)
    hosts = sum(p.num_nodes // per for p in job.cluster.pool_specs())
    return (stage_gpus % g == 0) & (hosts >= shapes.pp), per


def base_shapes(job: JobSpec, deadline: Deadline | None = None) -> tuple[JointShapes, np.ndarray]:
    """One shape per (tp, cp, pp, dp, micro-batch, vp, SP) on 1..N nodes with the knobs of least
    computation (no or least recompute, no ZeRO sharding): what the compute bound ranks before
    the knobs are expanded (`expand_shapes`). Also the GPUs each uses. Raises DeadlineExpired
    when `deadline` passes (one enumeration per node count: 5 s at 1,024 nodes)."""
    dl = deadline if deadline is not None else Deadline()
    cons = job.constraints
    least_rc = next(r for r in RECOMPUTE_BY_COST if cons.allows("recompute", r)) \
        if any(cons.allows("recompute", r) for r in RECOMPUTE_BY_COST) else "none"
    zero = (0,) if cons.allows("zero", 0) else cons.zero
    c = cons.model_copy(update={"recompute": (least_rc,), "zero": zero})
    parts = []
    for n_used in range(1, sum(p.num_nodes for p in job.cluster.pool_specs()) + 1):
        dl.check()
        sh = enumerate_shapes(_on_nodes(job, n_used, c)).shapes
        keep, _ = _placeable(job, sh)
        if keep.any():
            parts.append(sh.take(np.flatnonzero(keep)))
    shapes = Shapes.concat(parts) if parts else Shapes(*(np.zeros(0, dtype=np.int64) for _ in range(11)))
    return JointShapes(shapes, _placeable(job, shapes)[1], 0, 0), shapes.tp * shapes.cp * shapes.pp * shapes.dp


def _base_keys(shapes: Shapes) -> np.ndarray:
    return np.column_stack([getattr(shapes, k) for k in BASE_KEYS])


def expand_shapes(job: JobSpec, base: Shapes, deadline: Deadline | None = None) -> JointShapes:
    """Every legal shape (all knobs) whose (tp, cp, pp, dp, micro-batch, vp) is one of `base`'s.
    No dominance: the single-type rule (`formulation.job.zero0_dominated`) depends on the links
    of one cluster, and a joint stage may sit on any pool and link level. Raises
    DeadlineExpired when `deadline` passes."""
    dl = deadline if deadline is not None else Deadline()
    g = uniform_gpus_per_node(job)
    cons = job.constraints
    keys = _base_keys(base)
    gpus = base.tp * base.cp * base.pp * base.dp
    parts, legal = [], 0
    for n_gpus in np.unique(gpus).tolist():
        dl.check()
        sel = keys[gpus == n_gpus]
        narrow = {}
        for i, k in enumerate(("tp", "cp", "pp", "dp", "micro_batch_size")):
            vals = set(sel[:, i].tolist())
            if getattr(cons, k) is not None:
                vals &= set(getattr(cons, k))
            narrow[k] = tuple(sorted(vals))
        space = enumerate_shapes(_on_nodes(job, n_gpus // g, cons.model_copy(update=narrow)))
        sh = space.shapes
        wanted = {tuple(r) for r in sel.tolist()}
        hit = np.array([tuple(r) in wanted for r in _base_keys(sh).tolist()], dtype=bool) if len(sh) else \
            np.zeros(0, dtype=bool)
        legal += space.num_legal
        if hit.any():
            parts.append(sh.take(np.flatnonzero(hit)))
    shapes = Shapes.concat(parts) if parts else Shapes(*(np.zeros(0, dtype=np.int64) for _ in range(11)))
    return JointShapes(shapes, _placeable(job, shapes)[1], legal, 0)


def joint_shapes(job: JobSpec) -> JointShapes:
    """Every legal shape on 1..N whole nodes with whole-node stages that pack into the pools."""
    base, _ = base_shapes(job)
    return expand_shapes(job, base.shapes)


def compute_bound_s(job: JobSpec, shapes: Shapes, stage_nodes: np.ndarray) -> np.ndarray:
    """Per shape, the compute bound: with c_P the per-layer computation on pool P's GPUs and at
    most floor(nodes_P / n) of the p stages on pool P, the largest slot is at least
    M = L / max sum_s 1/c_{P_s} (the stages with the fastest GPUs first), and
    T >= (m - 1/v) M + L min_P c_P / v. Computed once per distinct tp, cp, micro-batch,
    recompute, SP and ZeRO stage."""
    if len(shapes) == 0:
        return np.zeros(0)
    keys = np.column_stack([shapes.tp, shapes.cp, shapes.micro_batch_size, shapes.recompute,
                            shapes.sequence_parallel.astype(np.int64), shapes.zero])
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    reps = shapes.take(first)
    c = np.column_stack([job_coefficients(job.model_copy(update={"cluster": view}), reps).layer_compute_s
                         for view in job.cluster.pool_views()])[np.ravel(inverse)]  # (S, pools)
    L = job.model.num_layers
    M = _slowest_first_slot(c, _stage_capacity(job, stage_nodes), shapes.pp, L)
    m = shapes.num_microbatches(job.global_batch_size).astype(np.float64)
    v = shapes.vp.astype(np.float64)
    return (m - 1.0 / v) * M + L * c.min(axis=1) / v


def _best(cos: list[StageCoefficients]) -> StageCoefficients:
    """The elementwise least time (largest overlap window) of coefficients of the same shapes."""
    vals = {}
    for f in fields(StageCoefficients):
        arrs = [getattr(co, f.name) for co in cos]
        if not isinstance(arrs[0], np.ndarray) or f.name in ("num_microbatches", "pp", "vp"):
            vals[f.name] = arrs[0]
        elif f.name in WINDOW_FIELDS:
            vals[f.name] = np.max(arrs, axis=0)
        else:
            vals[f.name] = np.min(arrs, axis=0)
    return replace(cos[0], **vals)


def _stage_capacity(job: JobSpec, stage_nodes: np.ndarray) -> np.ndarray:
    """(S, pools) how many stages each pool can host."""
    return np.column_stack([p.num_nodes // np.maximum(stage_nodes, 1) for p in job.cluster.pool_specs()])


def _slowest_first_slot(per_layer: np.ndarray, capacity: np.ndarray, pp: np.ndarray, L: int) -> np.ndarray:
    """L / max sum_s 1/a_{P_s}: the largest slot when each stage costs a_P per layer and pool P
    hosts at most capacity_P of the pp stages (fastest pools first)."""
    order = np.argsort(per_layer, axis=1, kind="stable")
    a, cap = np.take_along_axis(per_layer, order, 1), np.take_along_axis(capacity, order, 1)
    taken = np.minimum(cap, np.maximum(0, pp[:, None] - (np.cumsum(cap, axis=1) - cap)))
    return L / np.maximum((taken / np.maximum(a, 1e-300)).sum(axis=1), 1e-300)


def cheap_bound_s(job: JobSpec, shapes: Shapes, stage_nodes: np.ndarray, nodes: NodeSet) -> np.ndarray:
    """Per shape, `search.pruning.time_lower_bound_s` on the elementwise best of the pools'
    coefficients, each pool's at the best link any of its groups can have (the fastest pair of
    the cluster or its own NIC, the least latency), with the largest slot at least
    `_slowest_first_slot` of the per-layer stage time: one coefficient evaluation per pool."""
    if len(shapes) == 0:
        return np.zeros(0)
    lv = nodes.levels
    cos = []
    for view in job.cluster.pool_views():
        bw = max([view.nic_bytes_per_s] + list(lv.values_bytes_per_s))
        lat = min([view.network_latency_s] + list(lv.latency_s))
        cos.append(job_coefficients(job.model_copy(update={"cluster": cluster_at_link(view, bw, lat)}), shapes))
    per_layer = np.column_stack([co.layer_s for co in cos])
    L = job.model.num_layers
    slot = _slowest_first_slot(per_layer, _stage_capacity(job, stage_nodes), shapes.pp, L)
    return time_lower_bound_s(_best(cos), L, slot)


def best_case(prices: Prices) -> StageCoefficients:
    """The elementwise least time (largest overlap window) over pools and the best links."""
    top = [lv for lv in (prices.sentinel - 1, prices.sentinel) if lv >= 0]
    return _best([prices.co(p, lv) for p in range(len(prices.views)) for lv in top])


def largest_limits(prices: Prices) -> np.ndarray:
    """(S, P) the largest memory limit of each stage over the pools."""
    return np.max([prices.limits(p) for p in range(len(prices.views))], axis=0)


def pool_slot_bound_s(prices: Prices, stage_nodes: np.ndarray, pool_nodes) -> np.ndarray:
    """Per shape, a lower bound of its largest stage slot that knows how many stages each pool
    can host: the least M such that stages of at most floor(nodes_P / n) per pool, each
    holding at most min(U_P, (M - c_P) / a_P) layers (a_P, c_P: the pool's least per-layer
    slot and least constant with the cheapest p2p, over its stages and the best links; U_P its
    largest memory limit), can hold L layers, every stage at least one. inf: none can."""
    L, S = prices.L, len(prices.shapes)
    pp = prices.shapes.pp
    levels = [lv for lv in (prices.sentinel - 1, prices.sentinel) if lv >= 0]
    cols = np.arange(prices.limits(0).shape[1])[None, :] < pp[:, None]
    slopes, consts, limits, stages = [], [], [], []  # per pool: a_P, c_P, U_P, stages it can host
    for pl in range(len(prices.views)):
        tabs = [prices.table(pl, lv) for lv in levels]
        slopes.append(np.min([t.slot_slope for t in tabs], axis=0))
        pi = np.where(pp > 1, np.min([t.pi for t in tabs], axis=0) * tabs[0].v, 0.0)
        consts.append(np.min([np.where(cols, t.slot_const, np.inf).min(axis=1) for t in tabs], axis=0) + pi)
        limits.append(np.clip(np.where(cols, prices.limits(pl), 0).max(axis=1), 0, L))
        stages.append(pool_nodes[pl] // np.maximum(stage_nodes, 1))
    a, c, U, cap = (np.array(x, dtype=np.float64).T for x in (slopes, consts, limits, stages))  # (S, pools)
    a = np.maximum(a, 1e-300)
    lo, hi = np.zeros(S), (c + a * L).max(axis=1) + 1.0

    def holds(M):
        cnt = np.clip(np.floor((M[:, None] - c) / a), 0, U)
        order = np.argsort(-cnt, axis=1, kind="stable")
        cnt_s, cap_s = np.take_along_axis(cnt, order, 1), np.take_along_axis(cap, order, 1)
        taken = np.minimum(cap_s, np.maximum(0, pp[:, None] - (np.cumsum(cap_s, axis=1) - cap_s)))
        stages_ok = np.where(cnt_s >= 1, cap_s, 0).sum(axis=1) >= pp
        return stages_ok & ((taken * cnt_s).sum(axis=1) >= L)

    feasible = holds(hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        ok = holds(mid)
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return np.where(feasible, lo * (1 - 1e-12), np.inf)


def relaxed_bound_s(prices: Prices, stage_nodes: np.ndarray, pool_nodes) -> tuple[np.ndarray, np.ndarray]:
    """(time lower bound per shape, memory-feasible per shape) by the equal-link relaxation."""
    from ...formulation.linear import linear_form

    L = prices.L
    co = best_case(prices)
    form = linear_form(co, L)
    form.max_layers = largest_limits(prices)
    ok = memory_feasible(form, L)
    slot_lb = np.maximum(min_max_slot_s(form, L), pool_slot_bound_s(prices, stage_nodes, pool_nodes))
    ok &= np.isfinite(slot_lb)
    lb = np.where(ok, time_lower_bound_s(co, L, np.where(ok, slot_lb, 0.0)), np.inf)
    return lb, ok
