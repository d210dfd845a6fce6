"""Link matrices as other tools write them, read with their own units, and the plausibility
check for matrices that state no unit (used by solveplan.placement.links).

- Pipette (yimjinkyu1/date2024_pipette, `strategy/nccl-test/nccl-test-a100/round_robin_test.py`):
  `{"gpus": [host, ...], "bandwidth": [[...]]}`, one row per host (or per `host:gpu`), each cell the
  bus bandwidth column of an nccl-tests `sendrecv_perf` run between the two hosts, in GB/s, written
  as the string nccl-tests printed ("23.81"); the diagonal is the same test inside one node.
- mpiGraph as Pipette stores it (`mpigraph/log_to_csv.py`, e.g. `mpigraph/temp/mpigraph_file.json`):
  `{"0": {"gpus", "bandwidth"}, "1": {"gpus", "bandwidth"}}`, "0" the receive table (row i
  received from column j), "1" the send table (row i sent to column j), per-process averages
  over each node pair; the diagonal is filled with the row maximum (not a measurement). mpiGraph
  prints MB/sec computed as `size * 1e6 / (1024 * 1024)` per microsecond (mpiGraph.c, v1.5), so
  a value is MiB/s.

A matrix whose unit is not stated (`"bandwidth"` without `"unit"`, a CSV) is read as Gbit/s only
when its median cross-node value is plausible for the cluster: not above the cluster's NVLink
rate and not below a quarter of its NIC rate (without a cluster: 25 Gbit/s to 7200 Gbit/s, the
NVLink 4 rate). Otherwise the error names the unit the numbers look like.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError

# hosts of a link matrix (as `links generate` writes at most): the joint model's node set and
# placement price n^2 pairs, and a larger matrix is refused before it is read cell by cell
MAX_LINK_HOSTS = 1024
MAX_LINK_ELEMENTS = 3 * MAX_LINK_HOSTS ** 2  # of a link file: bandwidth, latency and a few keys


def check_hosts(n: int, name: str) -> None:
    """Refuse a matrix of more than MAX_LINK_HOSTS hosts."""
    if n > MAX_LINK_HOSTS:
        raise InputError(name, f"{n:,} hosts; a link matrix holds at most {MAX_LINK_HOSTS:,} hosts")

GBIT = 1.0
UNITS = {  # unit -> Gbit/s per unit
    "gbit/s": GBIT, "gbps": GBIT, "gbit_per_s": GBIT,
    "gb/s": 8.0, "gbyte/s": 8.0, "gbyte_per_s": 8.0,
    "mb/s": 8e-3, "mbyte/s": 8e-3, "mib/s": 8 * 1.048576e-3, "mbit/s": 1e-3,
}
_LOOKS_LIKE = (("GB/s", 8.0), ("MB/s", 8e-3), ("Mbit/s", 1e-3))
DEFAULT_RANGE_GBIT = (25.0, 7200.0)  # a slow 25G NIC .. NVLink 4 (900 GB/s)


def unit_factor(unit) -> float:
    """Gbit/s per unit; None is Gbit/s."""
    if unit is None:
        return 1.0
    u = str(unit).lower().replace(" ", "")
    if u in UNITS:
        return UNITS[u]
    raise InputError("unit", f"unknown unit {unit!r}; use 'Gbit/s' (default), 'GB/s', 'MB/s', 'MiB/s' or 'Mbit/s'")


def plausible_range_gbit(cluster=None) -> tuple[float, float]:
    """(lowest, highest) plausible cross-node bandwidth of one GPU pair, Gbit/s."""
    if cluster is None:
        return DEFAULT_RANGE_GBIT
    return cluster.nic_gbit_per_s / 4.0, cluster.nvlink_gbyte_per_s * 8.0


def check_plausible(bw_gbit: np.ndarray, field: str, assumed: str, cluster=None) -> None:
    """Refuse a matrix read in an assumed unit whose values are implausible for the cluster."""
    off = bw_gbit[~np.eye(len(bw_gbit), dtype=bool)]
    off = off[np.isfinite(off)]
    if off.size == 0:
        return
    med = float(np.median(off))
    lo, hi = plausible_range_gbit(cluster)
    if lo <= med <= hi:
        return
    where = f"{cluster.name} (NIC {cluster.nic_gbit_per_s:g} Gbit/s, NVLink {cluster.nvlink_gbyte_per_s:g} GB/s)" \
        if cluster is not None else "a GPU cluster"
    raw = med / unit_factor(assumed)
    guess = next((u for u, f in _LOOKS_LIKE if lo <= raw * f <= hi and u.lower() != assumed.lower()), None)
    hint = (f"they look like {guess} ({raw * dict(_LOOKS_LIKE)[guess]:.4g} Gbit/s): add \"unit\": \"{guess}\""
            if guess else "give the unit with \"unit\" (Gbit/s, GB/s, MB/s, MiB/s, Mbit/s)")
    raise InputError(field, f"no unit given; read as {assumed}, the median cross-node value {raw:.4g} is "
                            f"{med:.4g} Gbit/s, implausible for {where} (expected {lo:.4g} to {hi:.4g} Gbit/s); {hint}")


def _cell(v, where: str) -> float:
    """A positive finite number; numeric strings (as Pipette and mpiGraph write them) too."""
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise InputError(where, f"must be a positive number (got {v!r})") from None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and v > 0
    if not ok:
        raise InputError(where, f"must be a positive number (got {'nan' if isinstance(v, float) and math.isnan(v) else repr(v)})")
    return float(v)


def node_matrix(names: list, raw, field: str) -> tuple[tuple[str, ...], np.ndarray, int]:
    """Pipette-style GPU (or host) rows -> (hosts, host x host matrix of the slowest GPU pair, rows)."""
    if not isinstance(names, list) or not names:
        raise InputError(f"{field}gpus", "must be a non-empty list of GPU names ('host:index' or 'host')")
    names = [str(g) for g in names]
    node_of = [g.rsplit(":", 1)[0] if ":" in g else g for g in names]
    hosts = tuple(dict.fromkeys(node_of))
    G = len(names)
    if not isinstance(raw, list) or len(raw) != G:
        raise InputError(f"{field}bandwidth", f"has {len(raw) if isinstance(raw, list) else 0} rows but there are "
                                              f"{G} gpus")
    full = np.full((G, G), np.nan)
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != G:
            raise InputError(f"{field}bandwidth[{i}]", f"must be a list of {G} numbers")
        for j, v in enumerate(row):
            if node_of[i] != node_of[j]:  # inside a node: ignored
                full[i, j] = _cell(v, f"{field}bandwidth[{i}][{j}]")
    n = len(hosts)
    check_hosts(n, f"{field}gpus")
    hidx = np.array([hosts.index(h) for h in node_of])
    bw = np.full((n, n), np.nan)
    for a in range(n):
        for b in range(n):
            if a != b:
                bw[a, b] = np.nanmin(full[np.ix_(hidx == a, hidx == b)])
    return hosts, bw, G


def is_mpigraph(data) -> bool:
    return isinstance(data, dict) and bool(data) and set(data) <= {"0", "1"} and all(
        isinstance(v, dict) and "bandwidth" in v for v in data.values())


def from_mpigraph(data: dict, cluster=None):
    """(hosts, bandwidth Gbit/s) from Pipette's mpiGraph JSON: i -> j is the send table's [i][j]
    and the receive table's [j][i]; with both, the slower of the two."""
    mats = {}
    hosts = None
    for key, direction in (("1", "send"), ("0", "recv")):
        if key not in data:
            continue
        h, bw, _ = node_matrix(data[key].get("gpus"), data[key].get("bandwidth"), f"links.{key}.")
        if hosts is not None and h != hosts:
            raise InputError(f"links.{key}.gpus", "the send and receive tables name different hosts")
        hosts = h
        mats[direction] = bw if direction == "send" else bw.T
    bw = np.fmin(mats["send"], mats["recv"]) if len(mats) == 2 else next(iter(mats.values()))
    bw = bw * unit_factor("MiB/s")
    check_plausible(bw, "links", "MiB/s", cluster)
    return hosts, bw
