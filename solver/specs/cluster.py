"""Cluster: one or more pools of nodes (GPU type, GPUs per node, NVLink, NICs, racks) and the
links between them. Bandwidths are per GPU and unidirectional.

A cluster of one GPU type is a `ClusterSpec` with its node fields at the top (`gpu`,
`num_nodes`, ...), as every catalog cluster is. A mixed cluster lists `pools` (each a
`PoolSpec`) and the bandwidth between pools; its top-level node fields then describe pool 0
(filled in from it) and `num_nodes` counts every pool's nodes. Code that plans for one GPU
type takes `pool_views()` (one single-type ClusterSpec per pool); `require_uniform` is the
guard of everything that cannot (the formulation's coefficients, for one).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from ..errors import InputError
from .base import HostName, Name, Spec
from .gpu import GPUSpec
from .units import GBIT_BYTES


class LinkOverride(Spec):
    """Measured bandwidth between two nodes (per GPU pair, unidirectional), e.g. from nccl-tests."""

    src: NonNegativeInt
    dst: NonNegativeInt
    gbit_per_s: PositiveFloat
    latency_us: PositiveFloat | None = None


class NodeFabric(Spec):
    """Nodes of one GPU type and their links: what a pool and a single-type cluster share."""

    gpu: GPUSpec
    gpus_per_node: PositiveInt = 8
    num_nodes: PositiveInt
    nvlink_domain_gpus: PositiveInt | None = Field(
        None, description="GPUs that share one NVLink (NVSwitch) domain, e.g. 72 for a GB200/GB300 NVL72 rack of 18 "
                          "4-GPU trays (default: gpus_per_node): a multiple of gpus_per_node dividing the GPUs")
    nvlink_gbyte_per_s: PositiveFloat = Field(description="NVLink/NVSwitch bandwidth per GPU per direction, GB/s")
    nic_gbit_per_s: PositiveFloat = Field(description="network bandwidth per GPU per direction, Gbit/s")
    nvlink_latency_us: PositiveFloat = 3.0
    network_latency_us: PositiveFloat = 8.0
    nvlink_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of NVLink bandwidth by NCCL")
    network_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of NIC bandwidth by NCCL")
    nodes_per_leaf: PositiveInt | None = Field(None, description="nodes behind one leaf switch (rack)")
    spine_oversubscription: float = Field(1.0, ge=1.0, description="leaf-to-spine oversubscription, e.g. 4 for 4:1")
    node_names: tuple[HostName, ...] = Field((), description="host names of the nodes, in order (optional)")
    price_per_gpu_hour_usd: PositiveFloat | None = Field(
        None, description="what one GPU-hour costs, USD (optional; sweeps report cost per million tokens from it)")

    @model_validator(mode="after")
    def _check_names(self):
        if self.node_names and len(self.node_names) != self.num_nodes:
            raise ValueError(f"node_names lists {len(self.node_names)} names for {self.num_nodes} nodes")
        if len(set(self.node_names)) != len(self.node_names):
            raise ValueError("node_names repeats a name")
        d, g = self.nvlink_domain_gpus, self.gpus_per_node
        if d is not None and not getattr(self, "pools", ()):
            gpus = g * self.num_nodes
            if d % g or gpus % d:
                raise ValueError(f"nvlink_domain_gpus = {d} must be a multiple of gpus_per_node ({g}) that divides the "
                                 f"cluster's {gpus} GPUs (e.g. {g} or {_domain_hint(g, gpus)})")
        return self

    @property
    def domain_gpus(self) -> int:
        """GPUs per NVLink domain: groups inside one are priced on NVLink, across domains on the NICs."""
        return self.nvlink_domain_gpus or self.gpus_per_node

    @property
    def nvlink_bytes_per_s(self) -> float:
        """Attained NVLink bandwidth per GPU per direction: nominal x nvlink_efficiency."""
        return self.nvlink_gbyte_per_s * 1e9 * self.nvlink_efficiency

    @property
    def nic_bytes_per_s(self) -> float:
        """Attained network bandwidth per GPU per direction: nominal x network_efficiency."""
        return self.nic_gbit_per_s * GBIT_BYTES * self.network_efficiency

    @property
    def nvlink_latency_s(self) -> float:
        return self.nvlink_latency_us * 1e-6

    @property
    def network_latency_s(self) -> float:
        return self.network_latency_us * 1e-6

    def cross_leaf_bytes_per_s(self) -> float:
        """Per-GPU bandwidth of traffic that crosses the spine (oversubscription divides it)."""
        return self.nic_bytes_per_s / self.spine_oversubscription


FABRIC_FIELDS = tuple(NodeFabric.model_fields)


class PoolSpec(NodeFabric):
    """A pool of identical nodes inside a mixed cluster."""

    name: HostName


class ClusterSpec(NodeFabric):
    name: Name
    link_overrides: tuple[LinkOverride, ...] = ()
    pools: tuple[PoolSpec, ...] = Field(
        (), description="pools of nodes of different GPU types (a mixed cluster); the top-level node fields are pool 0's")
    inter_pool_gbit_per_s: PositiveFloat | None = Field(
        None, description="bandwidth between nodes of different pools, per GPU per direction, Gbit/s "
                          "(default: the slower pool's NIC)")
    inter_pool_latency_us: PositiveFloat | None = Field(
        None, description="latency between nodes of different pools (default: the larger pool latency)")
    source: str = "user supplied"

    @model_validator(mode="before")
    @classmethod
    def _from_pools(cls, data: Any):
        """With `pools`, the top-level node fields come from pool 0 and `num_nodes` is the total;
        one pool is a plain single-type cluster."""
        if not isinstance(data, dict) or not data.get("pools"):
            return data
        pools = [p if isinstance(p, PoolSpec) else PoolSpec(**p) for p in data["pools"]]
        given = sorted(k for k in FABRIC_FIELDS if k in data)
        if given:
            raise ValueError(f"give the node fields ({given[0]}, ...) inside each pool, not at the top of a cluster "
                             f"with pools")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must differ (got {names})")
        first = pools[0].model_dump(include=set(FABRIC_FIELDS))
        first["gpu"] = pools[0].gpu
        out = {**data, **first}
        if len(pools) == 1:
            out["pools"] = ()
            return out
        out["num_nodes"] = sum(p.num_nodes for p in pools)
        out["node_names"] = tuple(n for p in pools for n in (p.node_names or pool_node_names(p)))
        out["nodes_per_leaf"], out["spine_oversubscription"] = None, 1.0
        out["pools"] = tuple(pools)
        return out

    @model_validator(mode="after")
    def _check_links(self):
        seen: dict[tuple[int, int], tuple[int, LinkOverride]] = {}
        for i, link in enumerate(self.link_overrides):
            for end in ("src", "dst"):
                node = getattr(link, end)
                if node >= self.num_nodes:
                    raise ValueError(
                        f"link_overrides[{i}].{end} is node {node} but the cluster has nodes 0..{self.num_nodes - 1}"
                    )
            if link.src == link.dst:
                raise ValueError(f"link_overrides[{i}] links node {link.src} to itself; inside a node NVLink is used: "
                                 f"remove it")
            first = seen.setdefault((link.src, link.dst), (i, link))
            if first[1] != link:
                raise ValueError(f"link_overrides[{i}] and [{first[0]}] both give {link.src} -> {link.dst}, with "
                                 f"different values; keep one")
        if len(set(self.node_names)) != len(self.node_names):
            raise ValueError("node names repeat across pools; give each node its own name")
        return self

    @property
    def is_mixed(self) -> bool:
        """More than one pool: nodes of several kinds (GPU types, links)."""
        return len(self.pools) > 1

    @property
    def num_gpus(self) -> int:
        if self.pools:
            return sum(p.gpus_per_node * p.num_nodes for p in self.pools)
        return self.gpus_per_node * self.num_nodes

    def pool_specs(self) -> tuple[PoolSpec, ...]:
        """The pools; a single-type cluster is one pool named after its GPU."""
        if self.pools:
            return self.pools
        return (PoolSpec(name=self.gpu.name, **{k: getattr(self, k) for k in FABRIC_FIELDS}),)

    def pool_views(self) -> tuple[ClusterSpec, ...]:
        """One single-type ClusterSpec per pool (the cluster itself when it has one pool)."""
        if not self.pools:
            return (self,)
        return tuple(ClusterSpec(name=f"{self.name}/{p.name}", source=self.source,
                                 **{k: getattr(p, k) for k in FABRIC_FIELDS}) for p in self.pools)


def _domain_hint(g: int, gpus: int) -> int:
    """The largest legal NVLink domain of `gpus` GPUs in nodes of `g` (for an error message)."""
    return max(d for d in range(g, gpus + 1, g) if gpus % d == 0)


def pool_node_names(pool: PoolSpec) -> tuple[str, ...]:
    """A pool's host names: its own, else `<pool>-<i>`."""
    return pool.node_names or tuple(f"{pool.name}-{i}" for i in range(pool.num_nodes))


def require_uniform(cluster: ClusterSpec, field: str = "cluster") -> ClusterSpec:
    """`cluster` when it has one GPU type; an InputError naming `field` otherwise."""
    if cluster.is_mixed:
        kinds = ", ".join(f"{p.name} ({p.gpu.name})" for p in cluster.pools)
        raise InputError(field, f"{cluster.name} mixes pools {kinds}; this needs one GPU type: plan it with "
                                f"`optimize` (the joint model), or name one pool's cluster")
    return cluster
