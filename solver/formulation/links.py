"""Links as the formulation prices them, shared by placement on measured links (`placement`)
and the joint search (`search.joint`): bandwidth levels (`bandwidth_levels`: the distinct
attained bandwidths of a node x node matrix, bucketed past MAX_LEVELS), a cluster priced at one
link (`cluster_at_link`), the order-literal chain over levels (`level_chain`), a leaf/spine
fabric's bandwidth and latency (`leaf_spine`, which `placement.topology.generate_links` writes
as a link file), and classes of interchangeable nodes (`twin_classes`); what this pricing
covers: dense layers, not experts or Mamba layers (`refuse_moe_placement`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..specs import ClusterSpec, JobSpec
from ..specs.base import PLAUSIBLE
from ..specs.units import GBIT_BYTES

MAX_LEVELS = 24  # more distinct bandwidths than this are bucketed (rounded down, ~6% steps)
# The most nodes `leaf_spine` builds (and `generate_links` writes): 1024^2 cells of bandwidth and
# latency stay well under the link reader's file size limit (specs.reading.MAX_FILE_BYTES).
MAX_GENERATED_NODES = 1024


def refuse_moe_placement(job: JobSpec, field: str) -> None:
    """Placement on measured links and clusters of pools price dense layers only: a mixture-of-
    experts model is bad input there, named by the field that asked for it."""
    if job.model.is_hybrid and not job.model.is_moe:
        raise InputError(field, f"{job.model.name} is a hybrid Mamba model; placement on measured links and clusters "
                                f"of pools do not price Mamba layers yet: plan it on a cluster of one GPU type without "
                                f"--links")
    if job.model.is_moe:
        raise InputError(field, f"{job.model.name} is a mixture-of-experts model; placement on measured links and "
                                f"clusters of pools do not price expert parallelism yet: plan it on a cluster of one "
                                f"GPU type without --links")


def cluster_at_link(cluster: ClusterSpec, bw_bytes_per_s: float, lat_s: float) -> ClusterSpec:
    """`cluster` with every inter-node link at `bw_bytes_per_s` (attained, per GPU) and `lat_s`:
    the NIC rate that its network efficiency turns into that bandwidth, no racks, no overrides
    (a measured or generated matrix already holds them)."""
    return cluster.model_copy(update={
        "nic_gbit_per_s": bw_bytes_per_s / GBIT_BYTES / cluster.network_efficiency,
        "network_latency_us": lat_s * 1e6, "nodes_per_leaf": None, "spine_oversubscription": 1.0,
        "link_overrides": ()})


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


def level_chain(md, name: str, levels) -> dict:
    """Order literals `ge[l]` ("every link used is at least level l") for the increasing
    `levels`, each implying the one before, in the CP-SAT model `md` (`cp_model.CpModel`):
    the placement models' and the joint model's."""
    ge, prev = {}, None
    for lv in levels:
        ge[lv] = md.new_bool_var(f"{name}_ge{lv}")
        if prev is not None:
            md.add_implication(ge[lv], prev)
        prev = ge[lv]
    return ge


def leaf_spine(nodes: int, *, nodes_per_leaf: int | None = None, oversubscription: float = 1.0,
               nic_gbit_per_s: float = 200.0, latency_us: float = 8.0, hop_latency_us: float = 1.0,
               degraded_nodes: Iterable[tuple[int, float]] = (), degraded_links: Iterable[tuple[int, int, float]] = (),
               rack_order: str = "contiguous") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-GPU-pair bandwidth (Gbit/s) and latency (us) of a two-level leaf/spine fabric, nan on
    the diagonal, and a note per degradation: the matrices of `placement.topology.generate_links`
    (its docstring gives the model)."""
    if not 1 <= nodes <= MAX_GENERATED_NODES:
        raise InputError("nodes", f"must be 1 to {MAX_GENERATED_NODES} (got {nodes}): the matrix has nodes^2 cells "
                                  f"and must stay readable as a link file")
    if nodes_per_leaf is not None and not 1 <= nodes_per_leaf <= nodes:
        raise InputError("nodes_per_leaf", f"must be 1 to the {nodes} nodes (got {nodes_per_leaf})")
    for field, value, quantity in (("oversubscription", oversubscription, "spine_oversubscription"),
                                   ("nic_gbit_per_s", nic_gbit_per_s, "nic_gbit_per_s"),
                                   ("latency_us", latency_us, "latency_us"), ("hop_latency_us", hop_latency_us, "latency_us")):
        lo, hi = PLAUSIBLE[quantity]
        if not (math.isfinite(value) and lo <= value <= hi):
            raise InputError(field, f"must be a number from {lo:g} to {hi:g} (got {value!r})")
    per_leaf = nodes_per_leaf or nodes
    if rack_order == "contiguous":
        leaf = np.arange(nodes) // per_leaf
    elif rack_order == "round-robin":
        leaf = np.arange(nodes) % max(1, -(-nodes // per_leaf))
    else:
        raise InputError("rack_order", f"unknown rack order {rack_order!r}; use contiguous or round-robin")
    same = leaf[:, None] == leaf[None, :]
    bw = np.where(same, nic_gbit_per_s, nic_gbit_per_s / oversubscription).astype(np.float64)
    lat = np.where(same, latency_us, latency_us + 2 * hop_latency_us).astype(np.float64)
    notes = []
    for node, f in degraded_nodes:
        if not 0 <= node < nodes:
            raise InputError("degraded_nodes", f"node {node} is outside 0..{nodes - 1}")
        bw[node, :] *= f
        bw[:, node] *= f
        notes.append(f"node {node} NIC at {f:g}x")
    for a, b, f in degraded_links:
        for x in (a, b):
            if not 0 <= x < nodes:
                raise InputError("degraded_links", f"node {x} is outside 0..{nodes - 1}")
        bw[a, b] *= f
        bw[b, a] *= f
        notes.append(f"link {a}-{b} at {f:g}x")
    np.fill_diagonal(bw, np.nan)
    np.fill_diagonal(lat, np.nan)
    return bw, lat, notes


def twin_classes(M: np.ndarray) -> list[list[int]]:
    """Classes of interchangeable nodes of a symmetric matrix (diagonal ignored): u and v are
    twins when M[u][w] == M[v][w] for every other w. The relation is an equivalence (and all
    pairs inside a class share one value), so nodes of a class can swap freely."""
    n = len(M)
    unassigned = np.ones(n, dtype=bool)
    classes: list[list[int]] = []
    for u in range(n):  # one vectorised comparison per class: rows equal to u's off u and w
        if not unassigned[u]:
            continue
        rest = np.flatnonzero(unassigned)
        rest = rest[rest > u]
        eq = M[rest] == M[u][None, :]
        eq[:, u] = True
        eq[np.arange(len(rest)), rest] = True
        members = [u] + rest[eq.all(axis=1)].tolist()
        unassigned[members] = False
        classes.append(members)
    return classes
