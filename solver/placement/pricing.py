"""Pricing a placement with the formulation (the package docstring gives the account): the
grid of (stage, replica group) cells, `Pricer` (stage times at given ring and boundary
bandwidths, from `formulation.pipeline`), bandwidth levels (`formulation.links`), the integer tables the solvers
minimise, and `Problem`, which holds all of them for one configuration on one link matrix."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..formulation.job import job_coefficients
from ..formulation.links import MAX_LEVELS, Levels, bandwidth_levels, cluster_at_link, twin_classes
from ..formulation.pipeline import pipeline_s, stage_arrays
from ..plan import Out, ParallelConfig, default_plan_layers
from ..specs import JobSpec
from ..specs.units import GBIT_BYTES
from .links import LinkMatrix


# ---------------------------------------------------------------- grid
@dataclass(frozen=True)
class Grid:
    tp: int
    cp: int
    pp: int
    dp: int
    vp: int
    gpus_per_node: int
    per_node: int  # replicas of one stage per node (k)
    groups: int  # replica groups = dp / k (columns)

    @property
    def cells(self) -> int:
        return self.pp * self.groups

    def cell(self, stage: int, group: int) -> int:
        return stage * self.groups + group

    def boundary_edges(self, b: int) -> list[tuple[int, int]]:
        return [(self.cell(b, j), self.cell(b + 1, j)) for j in range(self.groups)]

    def ring_edges(self, s: int) -> list[tuple[int, int]]:
        D = self.groups
        if D < 2:
            return []
        if D == 2:
            return [(self.cell(s, 0), self.cell(s, 1))]
        return [(self.cell(s, j), self.cell(s, (j + 1) % D)) for j in range(D)]


def placement_grid(job: JobSpec, parallel: ParallelConfig) -> Grid:
    g = job.cluster.gpus_per_node
    mp = parallel.tp * parallel.cp
    if g % mp:
        raise InputError("tp/cp", f"placement keeps each tp*cp = {mp} group inside one node, so tp*cp must divide "
                         f"the {g} GPUs per node; groups spanning nodes are not supported")
    k = g // mp
    if parallel.dp % k:
        raise InputError("dp", f"with tp*cp = {mp} a node holds {k} data-parallel replicas of one stage, so dp must "
                         f"be a multiple of {k} (got {parallel.dp})")
    grid = Grid(parallel.tp, parallel.cp, parallel.pp, parallel.dp, parallel.vp, g, k, parallel.dp // k)
    if grid.cells != job.cluster.num_nodes:
        raise InputError("tp/pp/dp", f"tp*cp*pp*dp uses {grid.cells} nodes but {job.cluster.name} has "
                         f"{job.cluster.num_nodes}")
    return grid


def default_order(grid: Grid) -> np.ndarray:
    """Megatron's default rank order tp-cp-dp-pp with nodes in index order: node c hosts cell c."""
    return np.arange(grid.cells)


def whole_server_order(grid: Grid) -> np.ndarray:
    """Each replica group's whole pipeline on consecutive servers (rank order tp-cp-pp-dp):
    cell (s, j) on node j*pp + s."""
    out = np.empty(grid.cells, dtype=np.int64)
    for s in range(grid.pp):
        for j in range(grid.groups):
            out[grid.cell(s, j)] = j * grid.pp + s
    return out


# ---------------------------------------------------------------- pricing with the formulation
class Pricer:
    """Stage times of one configuration re-evaluated by the formulation at given DP-ring and
    boundary bandwidths (cached per distinct bandwidth and latency)."""

    def __init__(self, job: JobSpec, parallel: ParallelConfig, layers):
        self.job = job
        self.parallel = parallel
        self.shapes = parallel.shapes()
        self.layers = np.asarray(layers, dtype=np.int64)
        self.p = parallel.pp
        self.v = float(parallel.vp)
        self.m = float(parallel.num_microbatches)
        self._cache: dict = {}

    def at(self, bw_bytes_per_s: float, lat_s: float) -> dict:
        """Per-stage tau, exposed DP, optimizer and DP totals, and the boundary p2p time, with
        every inter-node link at `bw_bytes_per_s` (attained) and `lat_s`."""
        cl = self.job.cluster
        if not math.isfinite(bw_bytes_per_s) or bw_bytes_per_s <= 0:
            bw_bytes_per_s = cl.nic_bytes_per_s
        if not math.isfinite(lat_s):
            lat_s = cl.network_latency_s
        key = (float(f"{bw_bytes_per_s:.9g}"), float(f"{lat_s:.9g}"))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        co = job_coefficients(self.job.model_copy(update={"cluster": cluster_at_link(cl, *key)}), self.shapes)
        st = stage_arrays(co, self.layers[None, :])
        p = self.p
        first = np.zeros(p)
        first[0] = 1
        last = np.zeros(p)
        last[-1] = 1
        L = self.layers.astype(float)
        dp_total = L * co.layer_dp_step_s[0] + first * co.first_dp_step_s[0] + last * co.last_dp_step_s[0]
        out = {
            "tau": st["tau"][0, :p].copy(),
            "exposed_dp": st["exposed_dp"][0, :p].copy(),
            "opt": st["opt"][0, :p].copy(),
            "dp_total": dp_total,
            "pi": float(co.boundary_s[0]),
        }
        self._cache[key] = out
        return out

    def step(self, ring_bw, ring_lat, bnd_bw, bnd_lat) -> dict:
        """Step time with per-stage ring bandwidths (bytes/s; inf = inside a node) and
        per-boundary bandwidths (length pp-1)."""
        p, v, m = self.p, self.v, self.m
        tau = np.zeros(p)
        exposed = np.zeros(p)
        opt = np.zeros(p)
        dp_total = np.zeros(p)
        for s in range(p):
            a = self.at(ring_bw[s], ring_lat[s])
            tau[s], exposed[s], opt[s], dp_total[s] = a["tau"][s], a["exposed_dp"][s], a["opt"][s], a["dp_total"][s]
        pi = np.zeros(p)
        if p > 1:
            bpi = np.array([self.at(bnd_bw[b], bnd_lat[b])["pi"] for b in range(p - 1)])
            for s in range(p):
                adj = [bpi[b] for b in (s - 1, s) if 0 <= b < p - 1]
                pi[s] = max(adj)
        slot = tau + v * pi
        t_pipe = pipeline_s(slot.max(), slot.sum(), m, v)
        tail = exposed + opt
        k = int(np.argmax(tail))
        b = int(np.argmax(slot))
        return {
            "step_time_s": float(t_pipe + tail[k]),
            "pipeline_s": float(t_pipe),
            "pp_comm_s": float(m * v * pi[b]),
            "exposed_dp_s": float(exposed[k]),
            "dp_comm_s": float(dp_total.max()),
            "bottleneck_stage": b,
        }


# ---------------------------------------------------------------- integer objective tables
@dataclass
class Tables:
    quantum_s: float
    tau: np.ndarray  # (levels, pp) int: stage time per micro-batch at its ring level
    tail: np.ndarray  # (levels, pp) int: exposed DP + optimizer
    pi: np.ndarray  # (levels,) int: boundary p2p per micro-batch
    mv: int  # m*v
    v: int

    def terms(self, ring_level: np.ndarray, bnd_level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-stage slots (tau + v * the slower adjacent boundary's p2p) and tails, R x pp, for
        rows of per-stage ring levels (R x pp) and boundary levels (R x pp-1)."""
        R, p = ring_level.shape
        cols = np.arange(p)[None, :]
        pis = np.zeros((R, p), dtype=np.int64)
        if p > 1:
            bp = self.pi[bnd_level]  # R x p-1
            pis[:, :-1] = bp
            pis[:, 1:] = np.maximum(pis[:, 1:], bp)
        return self.tau[ring_level, cols] + self.v * pis, self.tail[ring_level, cols]

    def objective(self, ring_level: np.ndarray, bnd_level: np.ndarray) -> np.ndarray:
        """v * step time in quanta for rows of levels (`terms`); the same integer the CP-SAT
        model minimises."""
        slot, tail = self.terms(ring_level, bnd_level)
        return (self.mv - 1) * slot.max(1) + slot.sum(1) + self.v * tail.max(1)

    def least_slots(self) -> np.ndarray:
        """Each stage's least slot: its ring and boundaries at the top level."""
        p = self.tau.shape[1]
        return self.tau[-1] + (self.v * int(self.pi[-1]) if p > 1 else 0)


def build_tables(pricer: Pricer, levels: Levels) -> Tables:
    Lv = len(levels.values_bytes_per_s)
    p = pricer.p
    tau = np.zeros((Lv, p))
    tail = np.zeros((Lv, p))
    pi = np.zeros(Lv)
    for l in range(Lv):
        a = pricer.at(levels.values_bytes_per_s[l], levels.latency_s[l])
        tau[l], tail[l], pi[l] = a["tau"], a["exposed_dp"] + a["opt"], a["pi"]
    v = int(pricer.parallel.vp)
    top = max(float((tau[0] + v * pi[0]).max()), float(tail[0].max()), 1e-12)
    q = top / 1e5
    # costs fall with bandwidth; keep the tables monotone against rounding noise
    tau_q = np.minimum.accumulate(np.round(tau / q).astype(np.int64), axis=0)
    tail_q = np.minimum.accumulate(np.round(tail / q).astype(np.int64), axis=0)
    pi_q = np.minimum.accumulate(np.round(pi / q).astype(np.int64))
    return Tables(q, tau_q, tail_q, pi_q, int(pricer.parallel.num_microbatches) * v, v)


class PlacementEval(Out):
    name: str
    hosts_by_cell: list[str]
    step_time_s: float
    pipeline_s: float
    pp_comm_s: float
    dp_comm_s: float
    exposed_dp_s: float
    boundary_gbit_per_s: list[float]
    dp_ring_gbit_per_s: list[float | None]
    objective: int


# ---------------------------------------------------------------- the problem
class Problem:
    """One placement problem: the grid, the link levels and classes, the pricing tables."""

    def __init__(self, job: JobSpec, parallel: ParallelConfig, links: LinkMatrix, layers=None,
                 max_levels: int = MAX_LEVELS):
        if links.n != job.cluster.num_nodes:
            raise InputError("links", f"the link matrix has {links.n} hosts but {job.cluster.name} has "
                             f"{job.cluster.num_nodes} nodes")
        self.job, self.parallel, self.links = job, parallel, links
        self.grid = placement_grid(job, parallel)
        if layers is None:
            layers = default_plan_layers(job, parallel)
        self.layers = list(layers)
        self.pricer = Pricer(job, parallel, layers)
        self.eff = links.effective_bytes_per_s(job.cluster.network_efficiency)
        self.lat = links.pair_latency_us(job.cluster.network_latency_us) * 1e-6
        self.levels = bandwidth_levels(self.eff, self.lat, max_levels)
        self.tables = build_tables(self.pricer, self.levels)
        self.classify(self.levels.index)

    def classify(self, index: np.ndarray) -> None:
        """Classes of interchangeable nodes under the pair levels `index` (the links' own, or a
        relaxation's: `relax.relaxed`), with the level between (and inside) classes."""
        n = len(index)
        self.classes = twin_classes(index) if n > 1 else [[0]]
        self.class_of = np.empty(n, dtype=np.int64)
        for k, members in enumerate(self.classes):
            self.class_of[members] = k
        K = len(self.classes)
        self.class_level = np.full((K, K), -1, dtype=np.int64)
        for k, mk in enumerate(self.classes):
            for k2, mk2 in enumerate(self.classes):
                if k != k2:
                    self.class_level[k, k2] = index[mk[0], mk2[0]]
                elif len(mk) > 1:
                    self.class_level[k, k] = index[mk[0], mk[1]]
        self.counts = np.array([len(c) for c in self.classes])

    # -- levels of a labelling (rows of class labels per cell) --
    def level_rows(self, labels: np.ndarray):
        g = self.grid
        R = labels.shape[0]
        top = len(self.levels.values_bytes_per_s) - 1
        CL = self.class_level
        ring = np.full((R, g.pp), top, dtype=np.int64)
        for s in range(g.pp):
            for a, b in g.ring_edges(s):
                ring[:, s] = np.minimum(ring[:, s], CL[labels[:, a], labels[:, b]])
        bnd = np.full((R, max(g.pp - 1, 0)), top, dtype=np.int64)
        for b in range(g.pp - 1):
            for a, c in g.boundary_edges(b):
                bnd[:, b] = np.minimum(bnd[:, b], CL[labels[:, a], labels[:, c]])
        return ring, bnd

    def objective_of_nodes(self, node_of_cell: np.ndarray) -> int:
        labels = self.class_of[np.asarray(node_of_cell)][None, :]
        return int(self.tables.objective(*self.level_rows(labels))[0])

    # -- exact float pricing of a node placement --
    def price(self, name: str, node_of_cell) -> PlacementEval:
        """A node placement priced exactly by the formulation (per-stage bandwidths)."""
        g = self.grid
        node_of_cell = np.asarray(node_of_cell, dtype=np.int64)
        E, LAT = self.eff, self.lat
        ring_bw, ring_lat = np.full(g.pp, np.inf), np.full(g.pp, np.nan)
        for s in range(g.pp):
            edges = g.ring_edges(s)
            if edges:
                ring_bw[s] = min(E[node_of_cell[a], node_of_cell[b]] for a, b in edges)
                ring_lat[s] = max(LAT[node_of_cell[a], node_of_cell[b]] for a, b in edges)
        bnd_bw, bnd_lat = np.zeros(max(g.pp - 1, 0)), np.zeros(max(g.pp - 1, 0))
        for b in range(g.pp - 1):
            edges = g.boundary_edges(b)
            bnd_bw[b] = min(E[node_of_cell[x], node_of_cell[y]] for x, y in edges)
            bnd_lat[b] = max(LAT[node_of_cell[x], node_of_cell[y]] for x, y in edges)
        r = self.pricer.step(ring_bw, ring_lat, bnd_bw, bnd_lat)
        eff_factor = GBIT_BYTES * (1.0 if self.links.measured else self.job.cluster.network_efficiency)
        return PlacementEval(
            name=name, hosts_by_cell=[self.links.hosts[i] for i in node_of_cell],
            step_time_s=r["step_time_s"], pipeline_s=r["pipeline_s"], pp_comm_s=r["pp_comm_s"],
            dp_comm_s=r["dp_comm_s"], exposed_dp_s=r["exposed_dp_s"],
            boundary_gbit_per_s=[round(float(x) / eff_factor, 6) for x in bnd_bw],
            dp_ring_gbit_per_s=[None if not math.isfinite(x) else round(float(x) / eff_factor, 6) for x in ring_bw],
            objective=self.objective_of_nodes(node_of_cell),
        )

    def nodes_from_labels(self, labels) -> np.ndarray:
        """Cells' class labels -> nodes: each class's nodes in index order, cells in order."""
        pools = {k: list(m) for k, m in enumerate(self.classes)}
        return np.array([pools[int(k)].pop(0) for k in labels], dtype=np.int64)
