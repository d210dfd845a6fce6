"""Collective and point-to-point times with the alpha-beta model (Thakur et al. 2005; NCCL's
ring algorithm): ring all-reduce over n ranks `2(n-1)a + 2(n-1)/n * S/b`, all-gather and
reduce-scatter `(n-1)a + (n-1)/n * S/b`, p2p `a + S/b`. `b` is the group's bottleneck
bandwidth (`group_bandwidth`). All functions are vectorised over numpy arrays.

Rank order is Megatron-LM's default `tp-cp-dp-pp` (TP fastest): a group of `n` ranks with
stride `k` stays inside a node when `n*k <= gpus_per_node`.
"""

from __future__ import annotations

import numpy as np

from ..specs import ClusterSpec


def group_links(cluster: ClusterSpec, n, stride):
    """(bandwidth_bytes_per_s, latency_s, intra_node_bool) of a collective group of `n` ranks
    spaced `stride` apart in the rank order.

    Inside a node: NVLink. Across nodes: NCCL runs one ring per NIC, so a group with `k`
    ranks on each node drives `k` NICs in parallel: bandwidth `min(NVLink, k * NIC)` per rank,
    divided by the spine oversubscription when the group spans more than one leaf (rack).
    """
    n = np.asarray(n, dtype=np.float64)
    stride = np.asarray(stride, dtype=np.float64)
    g = cluster.gpus_per_node
    intra = n * stride <= g
    per_node = np.clip(np.floor(g / np.maximum(stride, 1)), 1, None)
    per_node = np.minimum(per_node, n)
    nodes_spanned = np.ceil(n / per_node)
    nic = cluster.nic_bytes_per_s * per_node
    if cluster.nodes_per_leaf is not None and cluster.spine_oversubscription > 1:
        nic = np.where(nodes_spanned > cluster.nodes_per_leaf, nic / cluster.spine_oversubscription, nic)
    inter_bw = np.minimum(cluster.nvlink_bytes_per_s, nic)
    bw = np.where(intra, cluster.nvlink_bytes_per_s, inter_bw)
    lat = np.where(intra, cluster.nvlink_latency_s, cluster.network_latency_s)
    return bw, lat, intra


def p2p_link(cluster: ClusterSpec, stride):
    """Bandwidth and latency of one send between ranks `stride` apart: one NIC when they sit
    on different nodes (no k-fold striping for a single pair)."""
    stride = np.asarray(stride, dtype=np.float64)
    intra = stride < cluster.gpus_per_node
    bw = np.where(intra, cluster.nvlink_bytes_per_s, cluster.nic_bytes_per_s)
    lat = np.where(intra, cluster.nvlink_latency_s, cluster.network_latency_s)
    return bw, lat


def allreduce_s(size_bytes, n, bw, lat):
    n = np.asarray(n, dtype=np.float64)
    t = 2 * (n - 1) * lat + 2 * (n - 1) / n * size_bytes / bw
    return np.where(n > 1, t, 0.0)


def allgather_s(size_bytes, n, bw, lat):
    """All-gather (or reduce-scatter) of a buffer of `size_bytes` in total (each rank holds 1/n)."""
    n = np.asarray(n, dtype=np.float64)
    t = (n - 1) * lat + (n - 1) / n * size_bytes / bw
    return np.where(n > 1, t, 0.0)


reducescatter_s = allgather_s


def p2p_s(size_bytes, bw, lat):
    return lat + size_bytes / bw
