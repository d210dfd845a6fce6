"""Collective and point-to-point times as NCCL runs them, vectorised over numpy arrays.

Alpha-beta model per algorithm (Thakur et al. 2005; NCCL's ring and tree, nccl-tests
doc/PERFORMANCE.md for the bus-bandwidth factors):
- ring all-gather / reduce-scatter of S bytes in total over n ranks: `(n-1) a + (n-1)/n S/b`;
- all-reduce: ring `2(n-1) a + 2(n-1)/n S/b`, or NCCL's tree across nodes (chain inside each
  node, double binary tree between nodes) with latency `2 (log2(k) a_net + (r-1) a_nvl)` and
  the same bandwidth term; NCCL picks the faster, and so does `allreduce_s`;
- point-to-point `a + S/b`.
`b` is the bus bandwidth of one rank and `a` the latency of one ring step.

Which links a group uses (`group_links`: the one place that decides whether a group of any
kind -- TP, CP, DP, pipeline neighbours, expert groups -- runs on NVLink or on the NICs). The
unit is the NVLink domain (`ClusterSpec.domain_gpus`): a node of 8 GPUs on NVSwitch, or a
GB200/GB300 NVL72 rack of 18 four-GPU trays whose NVLink switches join all 72 GPUs (NVIDIA
GB200 NVL72 datasheet: one 130 TB/s NVLink domain). Ranks follow Megatron-LM's order
`tp-cp-dp-pp` (TP fastest), so a group of n ranks `stride` apart puts r = min(n, D / stride)
ranks on each of k = n / r domains of D GPUs.
- Inside one domain: NVLink, `b = nvlink_gbyte_per_s * nvlink_efficiency` per GPU (through the
  NVSwitches, every GPU of the domain at its full NVLink rate: NCCL's NVLS/ring over NVLink).
- Across domains: NCCL builds one ring per NIC ("rail"), and every ring crosses each domain
  boundary once, so the S bytes of a collective go through a domain's NICs together, not once
  per rank (docs/DESIGN.md section 3). The r ranks of a group in a domain drive r NICs (one per
  GPU), while the other D/r groups there drive the rest: the domain's D NICs are shared by the
  D/r groups that run at once (the data-parallel groups of the TP ranks, all-gathers of every
  FSDP rank). So `b = min(NVLink, r * nic_gbit_per_s/8 * network_efficiency)`, divided by the
  spine oversubscription when the group spans more than one leaf (nodes_per_leaf nodes).
RCCL on AMD Instinct (Infinity Fabric inside a node, NICs across) is priced the same way on
the links the cluster states.
"""

from __future__ import annotations

import numpy as np

from ..specs import ClusterSpec

# Thread blocks a running NCCL collective keeps on the GPU: one per channel, and NCCL opens
# 16 channels on NVSwitch/InfiniBand systems by default (NCCL_MIN_NCHANNELS..MAX; nccl-tests
# show 16-32). Work overlapped with a collective runs on the remaining SMs.
NCCL_CTAS = 16


def interference(num_sms: int) -> float:
    """Fraction of compute lost while a collective overlaps it (its CTAs' share of the SMs)."""
    return min(1.0, NCCL_CTAS / float(num_sms))


def placement(cluster: ClusterSpec, n, stride):
    """(ranks per NVLink domain r, domains spanned k) of a group of n ranks `stride` apart."""
    n = np.asarray(n, dtype=np.float64)
    stride = np.asarray(stride, dtype=np.float64)
    g = cluster.domain_gpus
    r = np.minimum(np.clip(np.floor(g / np.maximum(stride, 1.0)), 1.0, None), np.maximum(n, 1.0))
    return r, np.ceil(n / r)


def group_links(cluster: ClusterSpec, n, stride):
    """(bus bandwidth bytes/s per rank, latency per ring step s, inside one NVLink domain) of a
    group of `n` ranks `stride` apart in the rank order."""
    r, k = placement(cluster, n, stride)
    intra = k <= 1
    nic = cluster.nic_bytes_per_s * r
    if cluster.nodes_per_leaf is not None and cluster.spine_oversubscription > 1:
        nodes = k * (cluster.domain_gpus // cluster.gpus_per_node)
        nic = np.where(nodes > cluster.nodes_per_leaf, nic / cluster.spine_oversubscription, nic)
    bw = np.where(intra, cluster.nvlink_bytes_per_s, np.minimum(cluster.nvlink_bytes_per_s, nic))
    lat = np.where(intra, cluster.nvlink_latency_s, cluster.network_latency_s)
    return bw, lat, intra


def p2p_link(cluster: ClusterSpec, stride):
    """Bandwidth and latency of one send between ranks `stride` apart: NVLink inside one NVLink
    domain, one NIC when they sit in different domains (a single pair is not striped over the
    NICs)."""
    stride = np.asarray(stride, dtype=np.float64)
    intra = stride < cluster.domain_gpus
    bw = np.where(intra, cluster.nvlink_bytes_per_s, cluster.nic_bytes_per_s)
    lat = np.where(intra, cluster.nvlink_latency_s, cluster.network_latency_s)
    return bw, lat


def allgather_s(size_bytes, n, bw, lat):
    """Ring all-gather (or reduce-scatter) of a buffer of `size_bytes` in total (each rank holds 1/n)."""
    n = np.asarray(n, dtype=np.float64)
    t = (n - 1) * lat + (n - 1) / np.maximum(n, 1.0) * size_bytes / bw
    return np.where(n > 1, t, 0.0)


reducescatter_s = allgather_s


def allreduce_s(size_bytes, n, bw, lat, *, nodes=None, cluster: ClusterSpec | None = None):
    """All-reduce of `size_bytes` per rank: ring, or (given the nodes spanned and the
    cluster) the faster of ring and NCCL's tree."""
    n = np.asarray(n, dtype=np.float64)
    band = 2 * (n - 1) / np.maximum(n, 1.0) * size_bytes / bw
    t = 2 * (n - 1) * lat + band
    if nodes is not None and cluster is not None:
        k = np.asarray(nodes, dtype=np.float64)
        r = n / np.maximum(k, 1.0)
        tree = 2 * (np.log2(np.maximum(k, 1.0)) * cluster.network_latency_s + (r - 1) * cluster.nvlink_latency_s) + band
        t = np.where(k > 1, np.minimum(t, tree), t)
    return np.where(n > 1, t, 0.0)


def p2p_s(size_bytes, bw, lat):
    return lat + size_bytes / bw


def collective_s(kind: str, size_bytes, cluster: ClusterSpec, n, stride):
    """Time of one collective of `kind` ('all_gather', 'reduce_scatter', 'all_reduce') of
    `size_bytes` (the full buffer) over n ranks `stride` apart."""
    bw, lat, _ = group_links(cluster, n, stride)
    if kind == "all_reduce":
        _, k = placement(cluster, n, stride)
        return allreduce_s(size_bytes, n, bw, lat, nodes=k, cluster=cluster)
    return allgather_s(size_bytes, n, bw, lat)


def all_to_all_s(send_bytes, cluster: ClusterSpec, n, stride):
    """All-to-all in which each of n ranks `stride` apart sends `send_bytes` in total, 1/n to
    each rank (itself included): NCCL runs it as grouped point-to-point sends, all at once, so
    one latency (Megatron's EP dispatch/combine, `torch.distributed.all_to_all_single`). With
    r ranks of the group on each of k nodes (`placement`), a rank's (r-1)/n share goes over
    NVLink and its (n-r)/n share leaves the node; the r ranks of a node send r times that over
    the group's links across nodes (`group_links`: r NICs, spine oversubscription), while NVLink
    carries the rest at the same time: the slower of the two."""
    n = np.asarray(n, dtype=np.float64)
    r, k = placement(cluster, n, stride)
    bw, lat, intra = group_links(cluster, n, stride)
    nvl = send_bytes * (r - 1) / np.maximum(n, 1.0) / cluster.nvlink_bytes_per_s
    out = send_bytes * r * (n - r) / np.maximum(n, 1.0) / bw
    t = lat + np.where(intra, nvl, np.maximum(nvl, out))
    return np.where(n > 1, t, 0.0)


def node_dedup_all_to_all_s(token_bytes, copies, remote_nodes, cluster: ClusterSpec, n, stride):
    """A dispatch (or combine) that sends each token once to every other node it is routed to
    and forwards it to the ranks there over NVLink (DeepEP / HybridEP, Megatron's `flex` token
    dispatcher): a rank's `token_bytes * remote_nodes` leave the node (the r ranks of a node
    together over the group's links, as in `all_to_all_s`), while NVLink carries every copy
    bound for another rank, `token_bytes * copies * (n-1)/n`, at the same time: the slower of
    the two, plus one latency. Inside one node it is `all_to_all_s` of the copies."""
    n = np.asarray(n, dtype=np.float64)
    r, _ = placement(cluster, n, stride)
    bw, lat, intra = group_links(cluster, n, stride)
    nvl = token_bytes * copies * (n - 1) / np.maximum(n, 1.0) / cluster.nvlink_bytes_per_s
    out = token_bytes * remote_nodes * r / bw
    t = lat + np.where(intra, nvl, np.maximum(nvl, out))
    return np.where(n > 1, t, 0.0)
