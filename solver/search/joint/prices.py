"""What the joint model charges, all of it the formulation's: every candidate shape's
coefficients on each pool's GPUs with its inter-node links at each bandwidth level
(`formulation.links.cluster_at_link`), their linear pieces per stage, and the float evaluation of one
assignment -- a shape, a pool and nodes per stage, a layer split (`formulation.pipeline.
evaluate_stages`).

A stage on pool P whose nodes' slowest pair sits at level r (its data-parallel ring, its TP/CP
groups when they span nodes, the ZeRO traffic, the tied-embedding all-reduce) takes the
coefficients of P at level r; a stage on one node takes P's own NIC (level `sentinel`: only
the tied-embedding all-reduce between the first and last stage leaves the node). Its exposed
p2p is the slower of its boundaries, each priced at the boundary's level with the stage's
own coefficients (the overlap window of an interleaved send is the stage's compute):

    slot_s = tau_s(P_s, r_s) + v * max_{b adjacent} pi_s(P_s, level_b)
    T      = (m - 1/v) max_s slot_s + sum_s slot_s / v + max_s tail_s(P_s, r_s)

With one pool and equal links every stage takes the same coefficients and T is
`evaluate_split`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formulation.coefficients import StageCoefficients
from ...formulation.job import job_coefficients
from ...formulation.linear import LinearForm, expand, linear_form
from ...formulation.links import cluster_at_link
from ...formulation.pipeline import Evaluation, evaluate_stages, step_time_stages
from ...space.shapes import Shapes
from ...specs import JobSpec
from .nodes import NodeSet


@dataclass
class StageRows:
    """The linear pieces of stages as functions of their layer counts, seconds: the slot, and the
    two tail rows (the tail of a stage is the larger: optimizer step, or exposed reduction +
    optimizer step); `w` = m - 1/v and `v` per shape or plan row."""

    slot_slope: np.ndarray
    slot_const: np.ndarray
    opt_slope: np.ndarray
    opt_const: np.ndarray
    red_slope: np.ndarray
    red_const: np.ndarray
    w: np.ndarray
    v: np.ndarray


@dataclass(kw_only=True)
class StageTable(StageRows):
    """Every shape's stages on one pool at one ring level: per layer (S,) or per stage (S, P), the
    slot without its p2p, and `pi` the exposed p2p of a boundary at this level (S,)."""

    pi: np.ndarray


@dataclass(kw_only=True)
class StageCosts(StageRows):
    """Stages of R plans (rows) as linear functions of their layer counts (R, p): the slot with
    v x the exposed p2p, the tail rows, and each stage's memory limit; `objective` the step time
    of splits."""

    limit: np.ndarray

    def objective(self, layers: np.ndarray) -> np.ndarray:
        """Step time (s) of each row's split (R x p); inf where a stage exceeds its limit."""
        lay = np.asarray(layers, dtype=np.float64)
        slot = self.slot_slope * lay + self.slot_const
        tail = np.maximum(self.opt_slope * lay + self.opt_const, self.red_slope * lay + self.red_const)
        t = self.w * slot.max(axis=1) + slot.sum(axis=1) / self.v + np.maximum(tail.max(axis=1), 0.0)
        return np.where((lay <= self.limit).all(axis=1), t, np.inf)


class Prices:
    """Coefficients of `shapes` per (pool, level), computed on first use and kept."""

    def __init__(self, job: JobSpec, nodes: NodeSet, shapes: Shapes):
        self.job, self.nodes, self.shapes = job, nodes, shapes
        self.views = job.cluster.pool_views()
        self.L = job.model.num_layers
        self._co: dict[tuple[int, int], StageCoefficients] = {}
        self._form: dict[tuple[int, int], LinearForm] = {}
        self._table: dict[tuple[int, int], StageTable] = {}

    @property
    def sentinel(self) -> int:
        """The level of a group with no inter-node pair (a one-node stage)."""
        return self.nodes.num_levels

    def take(self, idx) -> Prices:
        """The prices of the shapes `idx` (what is computed already is carried)."""
        out = Prices(self.job, self.nodes, self.shapes.take(idx))
        out._co = {key: co.take(idx) for key, co in self._co.items()}
        out._form = {key: f.take(idx) for key, f in self._form.items()}
        return out

    def co(self, pool: int, level: int) -> StageCoefficients:
        key = (pool, level)
        if key not in self._co:
            view = self.views[pool]
            if level >= self.sentinel:
                cluster = cluster_at_link(view, view.nic_bytes_per_s, view.network_latency_s)
            else:
                lv = self.nodes.levels
                cluster = cluster_at_link(view, float(lv.values_bytes_per_s[level]), float(lv.latency_s[level]))
            self._co[key] = job_coefficients(self.job.model_copy(update={"cluster": cluster}), self.shapes)
        return self._co[key]

    def form(self, pool: int, level: int) -> LinearForm:
        key = (pool, level)
        if key not in self._form:
            limits = None if level == self.sentinel else self.limits(pool)
            self._form[key] = linear_form(self.co(pool, level), self.L, limits)
        return self._form[key]

    def limits(self, pool: int) -> np.ndarray:
        """(S, P) the most layers each stage of each shape holds on this pool's GPUs (memory does
        not depend on links: computed once, at the sentinel level)."""
        return self.form(pool, self.sentinel).max_layers

    def pi(self, pool: int, level: int) -> np.ndarray:
        """(S,) exposed p2p per micro-batch of a boundary at `level`, on this pool's GPUs."""
        return self.co(pool, level).boundary_s

    def table(self, pool: int, level: int) -> StageTable:
        key = (pool, level)
        if key not in self._table:
            f, co = self.form(pool, level), self.co(pool, level)
            P = f.max_layers.shape[1]
            v = co.vp.astype(np.float64)
            cls = lambda a: expand(a, f.pp, P).astype(np.float64)  # noqa: E731
            self._table[key] = StageTable(
                slot_slope=f.slot_slope_s, slot_const=cls(f.slot_const_s) - (v * co.boundary_s)[:, None],
                opt_slope=f.opt_slope_s, opt_const=cls(f.opt_const_s), red_slope=f.red_slope_s,
                red_const=cls(f.red_const_s), w=co.num_microbatches - 1.0 / v, v=v, pi=co.boundary_s)
        return self._table[key]

    def costs(self, ks, pools, ring, bnd) -> StageCosts:
        """Stage costs of the shapes `ks` (rows) with stage s on pool `pools[s]` at ring level
        `ring[s]` and boundary b at level `bnd[b]`."""
        ks = np.atleast_1d(np.asarray(ks, dtype=np.int64))
        p = len(pools)
        tabs = [self.table(pools[s], ring[s]) for s in range(p)]
        pis = np.zeros((len(ks), p))
        for s in range(p):
            for b in (s - 1, s):
                if 0 <= b < p - 1:
                    pis[:, s] = np.maximum(pis[:, s], self.table(pools[s], bnd[b]).pi[ks])
        v = tabs[0].v[ks]
        col = lambda name: np.column_stack([getattr(t, name)[ks] for t in tabs])  # noqa: E731
        at = lambda name: np.column_stack([getattr(t, name)[ks, s] for s, t in enumerate(tabs)])  # noqa: E731
        limit = np.column_stack([self.limits(pools[s])[ks, s] for s in range(p)])
        return StageCosts(slot_slope=col("slot_slope"), slot_const=at("slot_const") + v[:, None] * pis,
                          opt_slope=col("opt_slope"), opt_const=at("opt_const"), red_slope=col("red_slope"),
                          red_const=at("red_const"), w=tabs[0].w[ks], v=v, limit=limit)

    # ---------------------------------------------------------------- one assignment
    def levels_of(self, node_lists) -> tuple[list[int], list[int]]:
        """(ring level per stage, level per boundary) of stages on these nodes."""
        ring = [self.nodes.group_level(nl) for nl in node_lists]
        bnd = [self.nodes.cross_level(node_lists[b], node_lists[b + 1]) for b in range(len(node_lists) - 1)]
        return ring, bnd

    def stage_inputs(self, k: int, pools, ring, bnd) -> tuple[list[StageCoefficients], list[float]]:
        """Per stage: its coefficients (one row) and its exposed p2p (slower boundary)."""
        p = len(pools)
        cos = [self.co(pools[s], ring[s]).take(k) for s in range(p)]
        pis = [max([float(self.pi(pools[s], bnd[b])[k]) for b in (s - 1, s) if 0 <= b < p - 1], default=0.0)
               for s in range(p)]
        return cos, pis

    def evaluate(self, k: int, pools, node_lists, layers) -> Evaluation:
        """The float formulation's step and memory of shape k with these stages."""
        ring, bnd = self.levels_of(node_lists)
        return evaluate_stages(*self.stage_inputs(k, pools, ring, bnd), layers)

    def step_rows(self, k: int, pools, ring, bnd, splits: np.ndarray):
        """(step_time_s, fits) of shape k at these levels for every row of `splits`."""
        return step_time_stages(*self.stage_inputs(k, pools, ring, bnd), splits)
