"""Link matrices that are built, not read, and their summary: `generate_links` (a leaf/spine
topology with degraded nodes -- a slow NIC -- and degraded links), `import_nccl_logs` (a
measured matrix from nccl-tests `sendrecv_perf` runs, one per node pair: see its docstring for
the file-naming convention), and `describe` (levels, slowest pairs, asymmetry, classes of
interchangeable nodes). The fabric's matrices and `twin_classes` are the formulation's
(`formulation.links`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..calibration.nccl_tests import BANDWIDTH_REGIME_SLOPE, parse_nccl_log
from ..catalog import read_text
from ..errors import InputError
from ..formulation.links import leaf_spine, twin_classes
from .links import LinkMatrix, json_number


# ---------------------------------------------------------------- topology generator
def generate_links(nodes: int, *, nodes_per_leaf: int | None = None, oversubscription: float = 1.0,
                   nic_gbit_per_s: float = 200.0, latency_us: float = 8.0, hop_latency_us: float = 1.0,
                   degraded_nodes: Iterable[tuple[int, float]] = (), degraded_links: Iterable[tuple[int, int, float]] = (),
                   host_prefix: str = "node", rack_order: str = "contiguous") -> LinkMatrix:
    """Per-GPU-pair bandwidth of a two-level leaf/spine fabric.

    Nodes `i` and `j` under the same leaf (`i // nodes_per_leaf`) get the NIC rate; across
    leaves the spine's oversubscription divides it (every GPU sending at once, as in a
    collective) and latency grows by two switch hops. A degraded node (a slow NIC, factor f)
    scales every link touching it; a degraded link scales that pair, both directions.
    `rack_order="round-robin"` puts node i under leaf i % leaves (host lists that interleave
    racks, as a scheduler's allocation or sorted hostnames often do) instead of i // per_leaf.
    """
    bw, lat, notes = leaf_spine(nodes, nodes_per_leaf=nodes_per_leaf, oversubscription=oversubscription,
                                nic_gbit_per_s=nic_gbit_per_s, latency_us=latency_us,
                                hop_latency_us=hop_latency_us, degraded_nodes=degraded_nodes,
                                degraded_links=degraded_links, rack_order=rack_order)
    hosts = tuple(f"{host_prefix}{i}" for i in range(nodes))
    desc = f"generated: {nodes} nodes, NIC {nic_gbit_per_s:g} Gbit/s per GPU"
    if nodes_per_leaf:
        desc += f", {nodes_per_leaf} nodes per leaf ({rack_order}), spine {oversubscription:g}:1"
    return LinkMatrix(hosts, bw, lat, False, desc, tuple(notes))


# ---------------------------------------------------------------- nccl-tests import
_PAIR_HEADER = re.compile(r"#\s*solveplan-pair\s*:\s*(\S+)\s+(\S+)", re.I)


def pair_of_log(path: Path, text: str, log_hosts: Sequence[str] = ()) -> tuple[str, str]:
    """The node pair (sender, receiver) a sendrecv_perf log measured, in this order of precedence:
    a comment line `# solveplan-pair: A B` anywhere in the log; the file name `A__B.log`
    (double underscore; any extension); the two hosts of the log's device lines
    (`#  Rank 0 ... on A ...`, `#  Rank 1 ... on B ...`)."""
    m = _PAIR_HEADER.search(text)
    if m:
        return m.group(1), m.group(2)
    stem = path.name.split(".")[0] if "." in path.name else path.name
    if "__" in stem:
        a, _, b = stem.partition("__")
        if a and b and "__" not in b:
            return a, b
    if len(log_hosts) == 2:
        return log_hosts[0], log_hosts[1]
    raise InputError(str(path), "cannot tell which node pair this log measured; name it SRC__DST.log, add a line "
                     "'# solveplan-pair: SRC DST', or run one rank on each of two hosts")


def import_nccl_logs(paths: Sequence[str | Path], hosts: Sequence[str] | None = None,
                     symmetric: bool = True, allow_latency_bound: bool = False,
                     notes: list[str] | None = None) -> LinkMatrix:
    """Measured matrix from nccl-tests `sendrecv_perf` logs, one run per node pair (two ranks,
    one GPU on each node: `mpirun -np 2 -H A,B sendrecv_perf -b 8 -e 1G -f 2 -g 1`).

    Which pair a log measured: see `pair_of_log` (header comment, `A__B.log`, or the log's
    own device lines). A log that does not name its test is refused unless given as
    `LOG:sendrecv`. Bandwidth = the out-of-place bus bandwidth at the largest message
    size (GB/s x 8 -> Gbit/s); latency = the out-of-place time of the smallest message (us).
    A pair measured one way only is used both ways unless `symmetric=False`; a pair measured
    twice keeps the slower run. Every ordered pair of the hosts must be covered. Logs are
    read by `calibration.nccl_tests.parse_nccl_log`.

    A log must reach the bandwidth regime to set a bandwidth: its time must grow with size over
    its top quarter of sizes at least as fast as `BANDWIDTH_REGIME_SLOPE` (`NcclRun.top_slope`).
    A log that stops earlier (at 4 KB a 400 Gbit/s link shows about 1 Gbit/s, its latency) is
    refused, naming the file and the size it stops at, unless `allow_latency_bound`; then its
    bandwidth is written and a line is added to `notes`.
    """
    if not paths:
        raise InputError("logs", "give at least one sendrecv_perf log")
    direct: dict[tuple[str, str], tuple[float, float]] = {}
    names: list[str] = []
    for p in paths:
        a, b, val = _pair_measurement(p, allow_latency_bound, notes)
        for h in (a, b):
            if h not in names:
                names.append(h)
        prev = direct.get((a, b))
        direct[(a, b)] = val if prev is None or val[0] < prev[0] else prev
    found = dict(direct)
    if symmetric:  # a pair measured one way only is used both ways
        for (a, b), val in direct.items():
            found.setdefault((b, a), val)
    order = list(hosts) if hosts is not None else names
    unknown = [h for h in names if h not in order]
    if unknown:
        raise InputError("hosts", f"unknown host {unknown[0]!r} in the logs; it is not among {', '.join(order[:8])}")
    bw, lat = _pair_matrices(order, found)
    return LinkMatrix(tuple(order), bw, lat, True, f"nccl-tests sendrecv_perf, {len(paths)} logs")


def _pair_measurement(log: str | Path, allow_latency_bound: bool, notes: list[str] | None
                      ) -> tuple[str, str, tuple[float, float]]:
    """One sendrecv_perf log (`LOG:sendrecv` names an unnamed log's test): its node pair and
    (bandwidth Gbit/s, latency us), as `import_nccl_logs` says."""
    hint = None
    if not Path(log).is_file() and str(log).endswith(":sendrecv"):
        log, hint = str(log)[: -len(":sendrecv")], "sendrecv"
    p = Path(log)
    if not p.is_file():
        raise InputError(str(p), "file does not exist")
    text = read_text(p, str(p))
    run = parse_nccl_log(text, name=p.name)
    op = run.op or hint
    if op is None:
        raise InputError(str(p), "the log does not say which nccl-tests binary wrote it (older releases print no "
                         "test name); if it is a sendrecv_perf run, pass it as LOG:sendrecv")
    if op != "sendrecv":
        raise InputError(str(p), f"is a {op}_perf log; import needs sendrecv_perf runs between node pairs")
    a, b = pair_of_log(p, text, run.hosts)
    if a == b:
        raise InputError(str(p), f"both ends of the pair are {a!r}; sendrecv between nodes needs two hosts")
    rows = [r for r in run.out_of_place if r.size_bytes > 0] or [r for r in run.in_place if r.size_bytes > 0]
    if not rows:
        raise InputError(str(p), "no result rows found in this nccl-tests log")
    big = max(rows, key=lambda r: (r.size_bytes, -r.busbw_gbs))
    small = min(rows, key=lambda r: (r.size_bytes, r.time_us))
    if not (big.busbw_gbs > 0 and math.isfinite(big.busbw_gbs)):
        raise InputError(str(p), f"bus bandwidth at {big.size_bytes} bytes is {big.busbw_gbs}; the run moved no data")
    slope = run.top_slope()
    if not slope >= BANDWIDTH_REGIME_SLOPE:  # nan (under 4x of sizes) too
        growth = (f"its time grows as size^{slope:.2f} over the top quarter of sizes, under the "
                  f"{BANDWIDTH_REGIME_SLOPE:g} of the bandwidth regime" if not math.isnan(slope)
                  else "its sizes span less than 4x, too few to tell the bandwidth regime")
        msg = (f"stops at {big.size_bytes} bytes below the bandwidth regime ({growth}): its "
               f"{big.busbw_gbs * 8.0:.4g} Gbit/s is latency, not the link's bandwidth")
        if not allow_latency_bound:
            raise InputError(str(p), f"{msg}; rerun sendrecv_perf up to 1 GiB (-b 8 -e 1G -f 2), or pass "
                                     f"--allow-latency-bound to write it anyway")
        if notes is not None:
            notes.append(f"{p}: {msg}; written anyway (--allow-latency-bound)")
    return a, b, (big.busbw_gbs * 8.0, small.time_us)


def _pair_matrices(order: list[str], found: dict[tuple[str, str], tuple[float, float]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Bandwidth and latency of every ordered pair of the hosts `order`; each must be measured."""
    n = len(order)
    bw = np.full((n, n), np.nan)
    lat = np.full((n, n), np.nan)
    missing = []
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if i == j:
                continue
            if (a, b) not in found:
                missing.append(f"{a}->{b}")
                continue
            bw[i, j], lat[i, j] = found[(a, b)]
    if missing:
        raise InputError("logs", f"no measurement for {len(missing)} node pair(s), e.g. {', '.join(missing[:4])}; run "
                         "sendrecv_perf for every pair")
    return bw, lat


# ---------------------------------------------------------------- summary
def describe(lm: LinkMatrix) -> dict:
    """Levels of bandwidth with counts, the slowest pairs, asymmetry, classes of
    interchangeable nodes (identical link profiles)."""
    b = lm.bandwidth_gbit_per_s
    off = ~np.eye(lm.n, dtype=bool)
    vals, counts = np.unique(np.round(b[off], 6), return_counts=True)
    pair = lm.pair_gbit_per_s()
    asym = int(np.sum(np.abs(b - b.T)[off] > 1e-9 * np.nanmax(b)) // 2) if lm.n > 1 else 0
    order = np.argsort(np.where(np.triu(off, 1), pair, np.inf), axis=None)
    slow = []
    top = float(np.nanmax(pair)) if lm.n > 1 else 0.0
    for flat in order[: min(10, lm.n * (lm.n - 1) // 2)]:
        i, j = divmod(int(flat), lm.n)
        if pair[i, j] >= top:
            break
        slow.append({"a": lm.hosts[i], "b": lm.hosts[j], "gbit_per_s": json_number(pair[i, j])})
    classes = twin_classes(np.nan_to_num(pair, nan=0.0)) if lm.n > 1 else [[0]]
    return {
        "hosts": lm.n,
        "measured": lm.measured,
        "source": lm.source,
        "levels_gbit_per_s": [{"gbit_per_s": json_number(v), "directed_pairs": int(c)} for v, c in zip(vals, counts)],
        "asymmetric_pairs": asym,
        "slowest_pairs": slow,
        "interchangeable_classes": len(classes),
        "largest_class": max(len(c) for c in classes),
        "notes": list(lm.notes),
    }
