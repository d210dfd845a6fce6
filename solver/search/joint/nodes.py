"""The nodes of a cluster as the joint model sees them: which pool each node belongs to, the
attained bandwidth and latency of every node pair, the bandwidth levels, and the classes of
interchangeable nodes.

Links. Without a measured matrix the pairs come from the cluster's description: inside a pool,
the pool's NIC (divided by its spine oversubscription between nodes under different leaves,
`nodes_per_leaf` in node order: `formulation.links.leaf_spine`); between pools
`min(nic_a, nic_b, inter_pool_gbit_per_s)` at the larger of the two latencies (or
`inter_pool_latency_us`); `link_overrides` replace single pairs. Nominal rates are attained at
the lower network efficiency of the two pools. A measured matrix (`--links`, as `links place`
reads it) replaces all of this and is used as measured.

Levels. A group of nodes (a stage's data-parallel ring, its TP/CP groups when they span
nodes, a pipeline boundary) is priced at its slowest pair: the bandwidth of that pair's level
and the level's latency (the slowest latency among the pairs of that level), so a group's
price depends only on the level of its slowest pair (`formulation.links.bandwidth_levels`, bucketed
downward beyond 24 distinct bandwidths).

Classes. Nodes of one pool whose pairs to every other node sit at the same levels are
interchangeable (`formulation.links.twin_classes`): the joint model counts the nodes of each class a
stage takes instead of naming nodes. `class_level[c, c']` is the level between two nodes of
classes c and c' (between two nodes of c on the diagonal; -1 when c has one node).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputError
from ...formulation.links import MAX_LEVELS, Levels, bandwidth_levels, leaf_spine, twin_classes
from ...specs import ClusterSpec
from ...specs.cluster import pool_node_names
from ...specs.units import GBIT_BYTES


@dataclass
class NodeSet:
    hosts: tuple[str, ...]
    pool_of: np.ndarray  # (n,) pool index of each node
    bandwidth_bytes_per_s: np.ndarray  # (n, n) attained, both ways (the slower direction); diagonal nan
    latency_s: np.ndarray  # (n, n)
    levels: Levels
    classes: list[list[int]]  # node indices per class, each inside one pool
    class_pool: np.ndarray  # (K,)
    class_level: np.ndarray  # (K, K)
    measured: bool
    source: str

    @property
    def n(self) -> int:
        return len(self.hosts)

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(c) for c in self.classes], dtype=np.int64)

    @property
    def num_levels(self) -> int:
        return len(self.levels.values_bytes_per_s)

    def group_level(self, nodes) -> int:
        """Level of the slowest pair among `nodes` (num_levels when there is no pair: one node)."""
        nodes = list(nodes)
        if len(nodes) < 2:
            return self.num_levels
        sub = self.levels.index[np.ix_(nodes, nodes)]
        return int(sub[~np.eye(len(nodes), dtype=bool)].min())

    def cross_level(self, a, b) -> int:
        """Level of the slowest pair between two disjoint node sets."""
        return int(self.levels.index[np.ix_(list(a), list(b))].min())


def _pool_matrix(cluster: ClusterSpec):
    """Nominal Gbit/s, network efficiency and latency (us) of every node pair, from the pools."""
    pools = cluster.pool_specs()
    sizes = [p.num_nodes for p in pools]
    n = sum(sizes)
    start = np.cumsum([0] + sizes)
    pool_of = np.repeat(np.arange(len(pools)), sizes)
    gbit = np.full((n, n), np.nan)
    eff = np.ones((n, n))
    lat = np.full((n, n), np.nan)
    for a, pa in enumerate(pools):
        for b, pb in enumerate(pools):
            ia, ib = slice(start[a], start[a + 1]), slice(start[b], start[b + 1])
            if a == b:
                gbit[ia, ib] = leaf_spine(pa.num_nodes, nodes_per_leaf=pa.nodes_per_leaf,
                                          oversubscription=pa.spine_oversubscription, nic_gbit_per_s=pa.nic_gbit_per_s)[0]
                lat[ia, ib] = pa.network_latency_us
            else:
                cap = cluster.inter_pool_gbit_per_s or np.inf
                gbit[ia, ib] = min(pa.nic_gbit_per_s, pb.nic_gbit_per_s, cap)
                lat[ia, ib] = cluster.inter_pool_latency_us or max(pa.network_latency_us, pb.network_latency_us)
            eff[ia, ib] = min(pa.network_efficiency, pb.network_efficiency)
            if a == b and pa.domain_gpus > pa.gpus_per_node:
                # nodes of one NVLink domain (an NVL72 rack's trays) talk over NVLink, not their NICs
                dom = np.arange(pa.num_nodes) // (pa.domain_gpus // pa.gpus_per_node)
                same = (dom[:, None] == dom[None, :]) & ~np.eye(pa.num_nodes, dtype=bool)
                gbit[ia, ib] = np.where(same, pa.nvlink_gbyte_per_s * 8.0, gbit[ia, ib])
                eff[ia, ib] = np.where(same, pa.nvlink_efficiency, eff[ia, ib])
                lat[ia, ib] = np.where(same, pa.nvlink_latency_us, lat[ia, ib])
    for o in cluster.link_overrides:
        gbit[o.src, o.dst] = o.gbit_per_s
        if o.latency_us is not None:
            lat[o.src, o.dst] = o.latency_us
    return pool_of, gbit, eff, lat


def node_set(cluster: ClusterSpec, links: Any | None = None, max_levels: int = MAX_LEVELS) -> NodeSet:
    """The nodes of `cluster` with their links: from the pools, or from a measured matrix
    `links` whose hosts are the cluster's nodes (by name when the cluster names them, else in
    node order)."""
    pool_of, gbit, eff, lat_us = _pool_matrix(cluster)
    hosts = tuple(cluster.node_names) if cluster.node_names else \
        tuple(h for p in cluster.pool_specs() for h in pool_node_names(p)) if cluster.is_mixed else \
        tuple(f"node{i}" for i in range(cluster.num_nodes))
    measured, source = False, "the cluster's description"
    if links is not None:
        if links.n != cluster.num_nodes:
            raise InputError("links", f"the link matrix has {links.n} hosts but {cluster.name} has "
                                      f"{cluster.num_nodes} nodes")
        if cluster.node_names:
            links = links.reordered(cluster.node_names)
        hosts = links.hosts
        gbit = np.array(links.bandwidth_gbit_per_s, dtype=np.float64)
        if links.latency_us is not None:
            lat_us = np.array(links.latency_us, dtype=np.float64)
        measured, source = links.measured, links.source or "link matrix"
        if measured:
            eff = np.ones_like(eff)
    pair = np.fmin(gbit, gbit.T)
    np.fill_diagonal(pair, np.nan)
    bw = pair * GBIT_BYTES * eff
    lat = np.fmax(lat_us, lat_us.T) * 1e-6
    np.fill_diagonal(lat, np.nan)
    n = len(hosts)
    levels = bandwidth_levels(bw, lat, max_levels) if n > 1 else Levels(np.zeros(0), np.zeros(0),
                                                                         np.full((1, 1), -1, dtype=np.int64))
    classes = []
    twins = twin_classes(levels.index) if n > 1 else [[0]]
    for members in twins:  # twins of different pools are not interchangeable (GPU types differ)
        for p in sorted(set(pool_of[members].tolist())):
            classes.append([i for i in members if pool_of[i] == p])
    classes.sort(key=lambda c: c[0])
    K = len(classes)
    CL = np.full((K, K), -1, dtype=np.int64)
    for k, mk in enumerate(classes):
        for k2, mk2 in enumerate(classes):
            if k != k2:
                CL[k, k2] = levels.index[mk[0], mk2[0]]
            elif len(mk) > 1:
                CL[k, k] = levels.index[mk[0], mk[1]]
    return NodeSet(hosts, pool_of, bw, lat, levels, classes, np.array([pool_of[c[0]] for c in classes]), CL,
                   measured, source)
