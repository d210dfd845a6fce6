"""Cluster: GPU type, nodes, links. Bandwidths are per GPU and unidirectional."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from .base import Spec
from .units import GBIT_BYTES
from .gpu import GPUSpec


class LinkOverride(Spec):
    """Measured bandwidth between two nodes (per GPU pair, unidirectional), e.g. from nccl-tests."""

    src: NonNegativeInt
    dst: NonNegativeInt
    gbit_per_s: PositiveFloat
    latency_us: Optional[PositiveFloat] = None


class ClusterSpec(Spec):
    name: str
    gpu: GPUSpec
    gpus_per_node: PositiveInt = 8
    num_nodes: PositiveInt
    nvlink_gbyte_per_s: PositiveFloat = Field(description="NVLink/NVSwitch bandwidth per GPU per direction, GB/s")
    nic_gbit_per_s: PositiveFloat = Field(description="network bandwidth per GPU per direction, Gbit/s")
    nvlink_latency_us: PositiveFloat = 3.0
    network_latency_us: PositiveFloat = 8.0
    nvlink_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of NVLink bandwidth by NCCL")
    network_efficiency: float = Field(0.8, gt=0, le=1, description="attained fraction of NIC bandwidth by NCCL")
    nodes_per_leaf: Optional[PositiveInt] = Field(None, description="nodes behind one leaf switch (rack)")
    spine_oversubscription: float = Field(1.0, ge=1.0, description="leaf-to-spine oversubscription, e.g. 4 for 4:1")
    link_overrides: tuple[LinkOverride, ...] = ()
    price_per_gpu_hour_usd: Optional[PositiveFloat] = Field(
        None, description="what one GPU-hour costs, USD (optional; sweeps report cost per million tokens from it)")
    source: str = "user supplied"

    @model_validator(mode="after")
    def _check_links(self):
        for i, link in enumerate(self.link_overrides):
            for end in ("src", "dst"):
                node = getattr(link, end)
                if node >= self.num_nodes:
                    raise ValueError(
                        f"link_overrides[{i}].{end} is node {node} but the cluster has nodes 0..{self.num_nodes - 1}"
                    )
        return self

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

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
