"""Placement: which node hosts which (pipeline stage, data-parallel replica) on a cluster whose
links are not all equal (DESIGN.md sections 1 and 4; Pipette's fine-grained assignment).

Unit and grid. A (stage, replica) slot is a model-parallel group of `tp*cp` GPUs, kept inside
one node (TP and CP on NVLink; groups that span nodes are out of scope). A node then holds
`k = gpus_per_node / (tp*cp)` replicas of one stage, as Megatron's default rank order
tp-cp-dp-pp does, so placement assigns the cluster's nodes to a grid of cells
`(stage s, replica group j)`, `pp` rows by `dp/k` columns, cell index `s*(dp/k) + j`.
Column `j` is a pipeline chain: the boundary between stages `b` and `b+1` of replica group `j`
uses the node pair of cells (b, j) and (b+1, j). Row `s` is stage s's data-parallel (x CP)
group: NCCL's ring visits the nodes in rank order, i.e. j = 0, 1, ..., D-1, back to 0.

Pricing (the formulation's own account). A pair's bandwidth is the slower direction of the
measured per-GPU-pair matrix (`LinkMatrix.pair_gbit_per_s`), attained bytes/s after the
cluster's network efficiency for nominal numbers. A boundary's bandwidth is the slowest of
its replica groups' links, a stage's DP ring the slowest link of its ring. The stage-time
formulation (`formulation.coefficients`) is re-evaluated with the NIC bandwidth and latency
set to those values (no oversubscription: the matrix already holds it), so every cost is the
formulation's: stage `s` pays its DP collectives (and ZeRO-2/3 per-micro-batch traffic) at
its ring's bandwidth and, in its 1F1B slot, the p2p of its slower adjacent boundary (a stage
receives from and sends to both neighbours every steady-state slot). Then
`T = (m - 1/v) max_s slot_s + sum_s slot_s / v + max_s (exposed DP_s + optimizer_s)`, exactly
`evaluate_split` with per-stage bandwidths; with all links equal it equals `make_plan`.

CP-SAT model. Nodes with identical link profiles (twins: racks of a fabric, after bucketing
bandwidths into levels) are interchangeable, so the decision is which *class* of node sits in
each cell (`y[k][c]`, class counts fixed). Each boundary and each stage's ring has an
order-encoded bandwidth level (`ge[l]`: "every link it uses is at least level l"), bounded by
the assigned links through clauses `ge[l] & y[k][a] -> OR(y[k'][c] : level(k, k') >= l)`.
The objective is the step time above, tabulated per level and stage in integer time quanta.
Since costs fall with bandwidth, the solver sets each level to the real bottleneck. Small
clusters (<= 8 nodes) can be solved exhaustively over every class labelling of the cells
(all node permutations up to interchangeable nodes) with the same integer objective.
Baselines: Megatron's default rank order (node `c` hosts cell `c`) and whole-server pipelines
(rank order tp-cp-pp-dp: each replica group's pipeline on consecutive nodes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .errors import InputError
from .formulation.evaluate import _stage_arrays, balanced_split
from .formulation.job import job_coefficients
from .links import GBIT_BYTES, LinkMatrix
from .plan import Out, ParallelConfig
from .specs import JobSpec

MAX_LEVELS = 24  # more distinct bandwidths than this are bucketed (rounded down, ~6% steps)
EXHAUSTIVE_MAX_NODES = 8


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
        raise InputError("--tp/--cp", f"placement keeps each tp*cp = {mp} group inside one node, so tp*cp must divide "
                         f"the {g} GPUs per node; groups spanning nodes are not supported")
    k = g // mp
    if parallel.dp % k:
        raise InputError("--dp", f"with tp*cp = {mp} a node holds {k} data-parallel replicas of one stage, so dp must "
                         f"be a multiple of {k} (got {parallel.dp})")
    grid = Grid(parallel.tp, parallel.cp, parallel.pp, parallel.dp, parallel.vp, g, k, parallel.dp // k)
    if grid.cells != job.cluster.num_nodes:
        raise InputError("--tp/--pp/--dp", f"tp*cp*pp*dp uses {grid.cells} nodes but {job.cluster.name} has "
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
        cluster = cl.model_copy(update={
            "nic_gbit_per_s": key[0] / GBIT_BYTES / cl.network_efficiency,
            "network_latency_us": key[1] * 1e6, "nodes_per_leaf": None, "spine_oversubscription": 1.0,
            "link_overrides": ()})
        co = job_coefficients(self.job.model_copy(update={"cluster": cluster}), self.shapes)
        st = _stage_arrays(co, self.layers[None, :])
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
        t_pipe = (m - 1.0 / v) * slot.max() + slot.sum() / v
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


# ---------------------------------------------------------------- interchangeable nodes
def twin_classes(M: np.ndarray) -> list[list[int]]:
    """Classes of interchangeable nodes of a symmetric matrix (diagonal ignored): u and v are
    twins when M[u][w] == M[v][w] for every other w. The relation is an equivalence (and all
    pairs inside a class share one value), so nodes of a class can swap freely."""
    n = len(M)
    cls_of = [-1] * n
    classes: list[list[int]] = []
    idx = np.arange(n)
    for u in range(n):
        if cls_of[u] >= 0:
            continue
        cls_of[u] = len(classes)
        members = [u]
        for w in range(u + 1, n):
            if cls_of[w] >= 0:
                continue
            mask = (idx != u) & (idx != w)
            if np.array_equal(M[u, mask], M[w, mask]):
                cls_of[w] = cls_of[u]
                members.append(w)
        classes.append(members)
    return classes


@dataclass
class Levels:
    values_bytes_per_s: np.ndarray  # ascending
    latency_s: np.ndarray  # per level: the slowest latency of its pairs
    index: np.ndarray  # (n, n) level of each pair, -1 on the diagonal


def bandwidth_levels(eff_bytes: np.ndarray, lat_s: np.ndarray, max_levels: int = MAX_LEVELS) -> Levels:
    n = len(eff_bytes)
    off = ~np.eye(n, dtype=bool)
    vals = eff_bytes[off]
    uniq = np.unique(np.round(vals, 3))
    if len(uniq) > max_levels:  # bucket downward on a geometric grid (~6% steps, conservative)
        step = 2 ** (1 / 12)
        base = vals.min()
        b = np.floor(np.log(np.maximum(eff_bytes, base) / base) / np.log(step) + 1e-9)
        eff_bytes = base * step ** b
        uniq = np.unique(np.round(eff_bytes[off], 3))
    index = np.full((n, n), -1, dtype=np.int64)
    index[off] = np.searchsorted(uniq, np.round(eff_bytes[off], 3))
    lat = np.zeros(len(uniq))
    for i in range(len(uniq)):
        lat[i] = np.nanmax(np.where(index == i, lat_s, -np.inf))
    return Levels(uniq.astype(float), lat, index)


# ---------------------------------------------------------------- integer objective tables
@dataclass
class Tables:
    quantum_s: float
    tau: np.ndarray  # (levels, pp) int: stage time per micro-batch at its ring level
    tail: np.ndarray  # (levels, pp) int: exposed DP + optimizer
    pi: np.ndarray  # (levels,) int: boundary p2p per micro-batch
    mv: int  # m*v
    v: int

    def objective(self, ring_level: np.ndarray, bnd_level: np.ndarray) -> np.ndarray:
        """v * step time in quanta for rows of per-stage ring levels (R x pp) and boundary
        levels (R x pp-1); the same integer the CP-SAT model minimises."""
        R, p = ring_level.shape
        cols = np.arange(p)[None, :]
        tau = self.tau[ring_level, cols]
        tail = self.tail[ring_level, cols]
        pis = np.zeros((R, p), dtype=np.int64)
        if p > 1:
            bp = self.pi[bnd_level]  # R x p-1
            pis[:, :-1] = bp
            pis[:, 1:] = np.maximum(pis[:, 1:], bp)
        slot = tau + self.v * pis
        return (self.mv - 1) * slot.max(1) + slot.sum(1) + self.v * tail.max(1)


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


# ---------------------------------------------------------------- results
class PlacementEval(Out):
    name: str
    hosts_by_cell: list[str]
    step_time_s: float
    pipeline_s: float
    pp_comm_s: float
    dp_comm_s: float
    exposed_dp_s: float
    boundary_gbit_per_s: list[float]
    dp_ring_gbit_per_s: list[Optional[float]]
    objective: int


class AvoidedLink(Out):
    a: str
    b: str
    gbit_per_s: float
    role_in_default: str


class PlacementResult(Out):
    status: str
    method: str
    wall_time_s: float
    objective: int
    bound: Optional[int] = None
    gap: Optional[float] = None
    quantum_s: float
    tp: int
    cp: int
    pp: int
    dp: int
    gpus_per_node: int
    replicas_per_node: int
    node_classes: int
    bandwidth_levels: int
    optimized: PlacementEval
    default: PlacementEval
    whole_server: PlacementEval
    speedup_vs_default: float
    speedup_vs_whole_server: float
    avoided_links: list[AvoidedLink]
    explanation: list[str]
    solver: dict = {}

    def grid(self) -> Grid:
        return Grid(self.tp, self.cp, self.pp, self.dp, 1, self.gpus_per_node, self.replicas_per_node,
                    self.dp // self.replicas_per_node)


# ---------------------------------------------------------------- the problem
class Problem:
    def __init__(self, job: JobSpec, parallel: ParallelConfig, links: LinkMatrix, layers=None,
                 max_levels: int = MAX_LEVELS):
        if links.n != job.cluster.num_nodes:
            raise InputError("--links", f"the link matrix has {links.n} hosts but {job.cluster.name} has "
                             f"{job.cluster.num_nodes} nodes")
        self.job, self.parallel, self.links = job, parallel, links
        self.grid = placement_grid(job, parallel)
        if layers is None:
            layers = balanced_split(job.model.num_layers, parallel.pp)
        self.layers = list(layers)
        self.pricer = Pricer(job, parallel, layers)
        self.eff = links.effective_bytes_per_s(job.cluster.network_efficiency)
        self.lat = links.pair_latency_us(job.cluster.network_latency_us) * 1e-6
        self.levels = bandwidth_levels(self.eff, self.lat, max_levels)
        self.tables = build_tables(self.pricer, self.levels)
        self.classes = twin_classes(self.levels.index) if links.n > 1 else [[0]]
        self.class_of = np.empty(links.n, dtype=np.int64)
        for k, members in enumerate(self.classes):
            self.class_of[members] = k
        K = len(self.classes)
        self.class_level = np.full((K, K), -1, dtype=np.int64)
        for k, mk in enumerate(self.classes):
            for k2, mk2 in enumerate(self.classes):
                if k != k2:
                    self.class_level[k, k2] = self.levels.index[mk[0], mk2[0]]
                elif len(mk) > 1:
                    self.class_level[k, k] = self.levels.index[mk[0], mk[1]]
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
    def evaluate(self, name: str, node_of_cell) -> PlacementEval:
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


# ---------------------------------------------------------------- exhaustive
def _multiset_permutations(counts: list[int]):
    n = sum(counts)
    counts = list(counts)
    out = [0] * n

    def rec(pos):
        if pos == n:
            yield tuple(out)
            return
        for k, c in enumerate(counts):
            if c:
                counts[k] -= 1
                out[pos] = k
                yield from rec(pos + 1)
                counts[k] += 1

    yield from rec(0)


def solve_exhaustive(prob: Problem, max_nodes: int = EXHAUSTIVE_MAX_NODES):
    """Every distinct class labelling of the cells (all node permutations up to
    interchangeable nodes); returns (objective, labels, count)."""
    if prob.grid.cells > max_nodes:
        raise InputError("--method", f"exhaustive placement is limited to {max_nodes} nodes (got {prob.grid.cells})")
    rows = np.array(list(_multiset_permutations(prob.counts.tolist())), dtype=np.int64)
    obj = prob.tables.objective(*prob.level_rows(rows))
    k = int(np.argmin(obj))
    return int(obj[k]), rows[k], len(rows)


# ---------------------------------------------------------------- CP-SAT
def default_workers() -> int:
    import os

    return max(1, min(8, os.cpu_count() or 1))


def solve_cpsat(prob: Problem, time_limit_s: float = 60.0, workers: Optional[int] = None, seed: int = 0,
                hints: tuple = ()):
    """Returns (status, objective, bound, labels, info)."""
    from ortools.sat.python import cp_model

    g, T = prob.grid, prob.tables
    K, C = len(prob.classes), g.cells
    Lv = len(prob.levels.values_bytes_per_s)
    CL = prob.class_level
    md = cp_model.CpModel()
    y = [[md.NewBoolVar(f"y{k}_{c}") for c in range(C)] for k in range(K)]
    for c in range(C):
        md.AddExactlyOne(y[k][c] for k in range(K))
    for k in range(K):
        md.Add(sum(y[k][c] for c in range(C)) == int(prob.counts[k]))
    allowed = [[[k2 for k2 in range(K) if CL[k, k2] >= l] for l in range(Lv)] for k in range(K)]

    def level_vars(name, edges, useful):
        # order encoding; a level whose costs equal the one below it needs no literal
        ge = [None] * Lv
        prev = None
        for l in range(1, Lv):
            if not useful[l]:
                continue
            ge[l] = md.NewBoolVar(f"{name}_ge{l}")
            if prev is not None:
                md.AddImplication(ge[l], prev)
            prev = ge[l]
        for l in range(1, Lv):
            if ge[l] is None:
                continue
            for a, b in edges:
                for src, dst in ((a, b), (b, a)):
                    for k in range(K):
                        al = allowed[k][l]
                        if len(al) == K:
                            continue
                        md.AddBoolOr([ge[l].Not(), y[k][src].Not()] + [y[k2][dst] for k2 in al])
        return ge

    def cost(ge, table):  # table[l] nonincreasing: value at the chosen level
        expr = int(table[0])
        for l in range(1, Lv):
            d = int(table[l - 1] - table[l])
            if d:
                expr = expr - d * ge[l]  # ge[l] exists wherever the table changes
        return expr

    tau_e, tail_e = [], []
    for s in range(g.pp):
        edges = g.ring_edges(s)
        if edges:
            ge = level_vars(f"r{s}", edges, [l > 0 and (T.tau[l - 1, s] != T.tau[l, s] or T.tail[l - 1, s] != T.tail[l, s])
                                              for l in range(Lv)])
            tau_e.append(cost(ge, T.tau[:, s]))
            tail_e.append(cost(ge, T.tail[:, s]))
        else:
            tau_e.append(int(T.tau[-1, s]))
            tail_e.append(int(T.tail[-1, s]))
    pi_e = []
    for b in range(g.pp - 1):
        ge = level_vars(f"b{b}", g.boundary_edges(b), [l > 0 and T.pi[l - 1] != T.pi[l] for l in range(Lv)])
        pi_e.append(cost(ge, T.pi))
    slot_ub = int(T.tau[0].max() + T.v * T.pi[0]) + 1
    slots = []
    M = md.NewIntVar(0, slot_ub, "maxslot")
    for s in range(g.pp):
        sl = md.NewIntVar(0, slot_ub, f"slot{s}")
        adj = [pi_e[b] for b in (s - 1, s) if 0 <= b < g.pp - 1]
        if adj:
            for pe in adj:
                md.Add(sl >= tau_e[s] + T.v * pe)
        else:
            md.Add(sl >= tau_e[s])
        md.Add(M >= sl)
        slots.append(sl)
    tail = md.NewIntVar(0, int(T.tail[0].max()) + 1, "tail")
    for s in range(g.pp):
        md.Add(tail >= tail_e[s])
    objective = (T.mv - 1) * M + sum(slots) + T.v * tail
    md.Minimize(objective)
    # symmetry: rotating or mirroring the replica groups (columns) keeps every ring and chain
    if hints:
        best = min(hints, key=prob.objective_of_nodes)
        md.Add(objective <= prob.objective_of_nodes(best))  # a baseline's value caps the search
        labels = prob.class_of[best]
        for k in range(K):
            for c in range(C):
                md.AddHint(y[k][c], int(labels[c] == k))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    workers = default_workers() if workers is None else int(workers)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = int(seed)
    solver.parameters.catch_sigint_signal = False  # keep Ctrl-C with Python (see encoding.cpsat._solve)
    st = solver.Solve(md)
    name = solver.StatusName(st)
    info = {"status": name, "wall_time_s": solver.WallTime(), "booleans": K * C, "workers": workers,
            "branches": solver.NumBranches(), "conflicts": solver.NumConflicts()}
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return name, None, None, None, info
    labels = np.array([next(k for k in range(K) if solver.Value(y[k][c])) for c in range(C)], dtype=np.int64)
    return name, int(round(solver.ObjectiveValue())), int(math.ceil(solver.BestObjectiveBound() - 1e-6)), labels, info


# ---------------------------------------------------------------- explanation
def _roles(prob: Problem, node_of_cell) -> dict[tuple[int, int], list[str]]:
    g = prob.grid
    roles: dict[tuple[int, int], list[str]] = {}
    for b in range(g.pp - 1):
        for j, (x, y) in enumerate(g.boundary_edges(b)):
            u, w = sorted((int(node_of_cell[x]), int(node_of_cell[y])))
            roles.setdefault((u, w), []).append(f"pipeline boundary {b}->{b + 1} (replica group {j})")
    for s in range(g.pp):
        for x, y in g.ring_edges(s):
            u, w = sorted((int(node_of_cell[x]), int(node_of_cell[y])))
            roles.setdefault((u, w), []).append(f"stage {s} data-parallel ring")
    return roles


def explain(prob: Problem, opt_nodes, default_nodes, opt: PlacementEval, dflt: PlacementEval):
    lm = prob.links
    pair = lm.pair_gbit_per_s()
    opt_roles = _roles(prob, opt_nodes)
    def_roles = _roles(prob, default_nodes)
    opt_pp = min(opt.boundary_gbit_per_s) if opt.boundary_gbit_per_s else math.inf
    rings = [x for x in opt.dp_ring_gbit_per_s if x is not None]
    opt_dp = min(rings) if rings else math.inf
    top = float(np.nanmax(pair)) if lm.n > 1 else 0.0
    avoided = []
    for (u, w), roles in sorted(def_roles.items(), key=lambda kv: (pair[kv[0]], kv[0])):
        bw = float(pair[u, w])
        if bw >= top or (u, w) in opt_roles:
            continue  # full-speed links, and slow links the optimised placement also uses
        avoided.append(AvoidedLink(a=lm.hosts[u], b=lm.hosts[w], gbit_per_s=round(bw, 6),
                                   role_in_default="; ".join(roles)))
    lines = []
    G = prob.grid.groups

    def where(nodes, i):
        return ", ".join(f"stage {c // G} replica group {c % G}" for c, n in enumerate(nodes) if n == i)

    slow_nodes = [i for i in range(lm.n) if lm.n > 1 and np.nanmax(pair[i]) < top]
    for i in slow_nodes[:8]:
        lines.append(f"{lm.hosts[i]} has no link faster than {np.nanmax(pair[i]):g} Gbit/s: placed at "
                     f"{where(opt_nodes, i)} (default rank order: {where(default_nodes, i)})")
    if avoided:
        shown = ", ".join(f"{a.a}<->{a.b} ({a.gbit_per_s:g} Gbit/s, {a.role_in_default})" for a in avoided[:6])
        more = f" and {len(avoided) - 6} more" if len(avoided) > 6 else ""
        lines.append(f"slow links the default rank order puts on critical paths and the optimised placement "
                     f"avoids: {shown}{more}")
    lines.append(
        f"optimised: slowest pipeline boundary {opt_pp:g} Gbit/s, slowest data-parallel ring {opt_dp:g} Gbit/s; "
        f"default rank order: {min(dflt.boundary_gbit_per_s, default=math.inf):g} and "
        f"{min([x for x in dflt.dp_ring_gbit_per_s if x is not None], default=math.inf):g} Gbit/s")
    lines.append(f"predicted step {opt.step_time_s:.4f} s vs {dflt.step_time_s:.4f} s with the default rank order "
                 f"(pipeline p2p {opt.pp_comm_s:.4f} vs {dflt.pp_comm_s:.4f} s, data-parallel {opt.dp_comm_s:.4f} vs "
                 f"{dflt.dp_comm_s:.4f} s per step)")
    return avoided, lines


# ---------------------------------------------------------------- entry point
def place(job: JobSpec, parallel: ParallelConfig, links: LinkMatrix, *, layers=None, method: str = "auto",
          time_limit_s: float = 60.0, workers: Optional[int] = None, seed: int = 0) -> PlacementResult:
    """Place the (stage, replica) groups of `parallel` on the nodes of `links` to minimise the
    formulation's step time. `method`: "cpsat", "exhaustive" (<= 8 nodes) or "auto" (CP-SAT).
    Returns the placement priced exactly against the default rank order and whole-server
    pipelines, with an explanation."""
    t0 = time.perf_counter()
    prob = Problem(job, parallel, links, layers)
    g = prob.grid
    dflt_nodes, ws_nodes = default_order(g), whole_server_order(g)
    solver_info: dict = {}
    if method == "exhaustive":
        obj, labels, count = solve_exhaustive(prob)
        status, bound = "OPTIMAL", obj
        solver_info = {"labellings": count}
    elif method in ("cpsat", "auto"):
        status, obj, bound, labels, solver_info = solve_cpsat(prob, time_limit_s, workers, seed,
                                                              hints=(dflt_nodes, ws_nodes))
        if labels is None:  # no solution in time: fall back to the better baseline
            best = min((dflt_nodes, ws_nodes), key=prob.objective_of_nodes)
            labels = prob.class_of[best]
            obj = prob.objective_of_nodes(best)
            status = "FEASIBLE"
    else:
        raise InputError("--method", f"unknown method {method!r}; use cpsat, exhaustive or auto")
    opt_nodes = prob.nodes_from_labels(labels)
    # never return worse than a baseline (by the objective), e.g. on a time-out
    for base in (dflt_nodes, ws_nodes):
        if prob.objective_of_nodes(base) < prob.objective_of_nodes(opt_nodes):
            opt_nodes = base
    obj_check = prob.objective_of_nodes(opt_nodes)
    if obj is not None and obj_check != obj:
        solver_info["objective_mismatch"] = [obj, obj_check]
    obj = obj_check
    # among placements optimal for the integer objective, keep the fastest by the exact pricing
    # (the objective buckets latency per bandwidth level)
    opt = prob.evaluate("optimized", opt_nodes)
    dflt = prob.evaluate("default rank order", dflt_nodes)
    ws = prob.evaluate("whole-server pipelines", ws_nodes)
    for base, ev in ((dflt_nodes, dflt), (ws_nodes, ws)):
        if ev.objective <= obj and ev.step_time_s < opt.step_time_s:
            opt_nodes, opt = base, prob.evaluate("optimized", base)
    gap = None if bound is None else max(0.0, (obj - bound) / max(obj, 1))
    if status == "OPTIMAL":
        gap = 0.0
    avoided, lines = explain(prob, opt_nodes, dflt_nodes, opt, dflt)
    return PlacementResult(
        status=status, method="exhaustive" if method == "exhaustive" else "cpsat",
        wall_time_s=time.perf_counter() - t0, objective=obj, bound=bound, gap=gap,
        quantum_s=prob.tables.quantum_s / prob.tables.v,
        tp=g.tp, cp=g.cp, pp=g.pp, dp=g.dp, gpus_per_node=g.gpus_per_node, replicas_per_node=g.per_node,
        node_classes=len(prob.classes), bandwidth_levels=len(prob.levels.values_bytes_per_s),
        optimized=opt, default=dflt, whole_server=ws,
        speedup_vs_default=dflt.step_time_s / opt.step_time_s,
        speedup_vs_whole_server=ws.step_time_s / opt.step_time_s,
        avoided_links=avoided, explanation=lines, solver=solver_info,
    )
