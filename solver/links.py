"""Measured or generated node-to-node links: the input of placement (DESIGN.md sections 1, 4).

A `LinkMatrix` holds, for `n` nodes (hosts), the bandwidth of one GPU pair between node `i`
and node `j` in one direction, in Gbit/s (`bandwidth_gbit_per_s[i][j]`, traffic from `i` to
`j`), and optionally its one-way latency in microseconds. Asymmetric matrices are allowed;
the diagonal (traffic inside a node, over NVLink) is ignored and may be null, 0 or anything.

`measured` says whether the numbers are attained bandwidths (nccl-tests busbw: NCCL's
efficiency is already in them) or nominal link rates (generated topologies, datasheets): the
cluster's `network_efficiency` is applied to nominal numbers only.

Accepted files (`load_links`):

- JSON, native: `{"hosts": ["node0", ...], "bandwidth_gbit_per_s": [[...], ...],
  "latency_us": [[...], ...] (optional), "measured": false, "source": "..."}`
  (`"bandwidth"` is accepted for `"bandwidth_gbit_per_s"`).
- JSON, Pipette's form `{"gpus": [...], "bandwidth": [[...]]}` (rows per GPU `"host:3"` or per
  host, collapsed to the slowest GPU pair per node pair; GB/s strings unless `"unit"` says), and
  Pipette's mpiGraph JSON `{"0": ..., "1": ...}` (MiB/s): see solveplan.link_formats.
- CSV: a header row `host,node0,node1,...` then one row per source host
  (`node0,<bw to node0>,<bw to node1>,...`); rows may come in any order. A file with no
  header (all numbers) names its nodes node0..node{n-1}. Bandwidth only.

A matrix that states no unit (`"bandwidth"` without `"unit"`, a CSV) must be plausible as Gbit/s
for the cluster (`cluster=`; link_formats.check_plausible).

`hosts=` (e.g. the cluster's hostnames from a hostfile) re-orders the matrix so node index
`i` is `hosts[i]`; a host the matrix does not know is an `InputError`.

`generate_links` builds the matrix of a leaf/spine topology with degraded nodes (a slow NIC)
and degraded links; `import_nccl_logs` builds a measured matrix from nccl-tests
`sendrecv_perf` runs, one per node pair (see its docstring for the file-naming convention).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from .errors import InputError

GBIT_BYTES = 1e9 / 8


@dataclass(frozen=True)
class LinkMatrix:
    hosts: tuple[str, ...]
    bandwidth_gbit_per_s: np.ndarray  # (n, n) float, diagonal NaN
    latency_us: Optional[np.ndarray] = None  # (n, n) float, diagonal NaN
    measured: bool = False
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def n(self) -> int:
        return len(self.hosts)

    def index(self, host: str) -> int:
        try:
            return self.hosts.index(host)
        except ValueError:
            raise InputError("host", f"unknown host {host!r}; the link matrix names {', '.join(self.hosts[:8])}"
                             f"{' ...' if self.n > 8 else ''}") from None

    def pair_gbit_per_s(self) -> np.ndarray:
        """Bandwidth of a node pair used both ways (1F1B boundaries carry activations one way
        and gradients the other every slot; ring collectives run channels both ways): the
        slower direction, min(B[i][j], B[j][i]). Diagonal NaN."""
        b = np.fmin(self.bandwidth_gbit_per_s, self.bandwidth_gbit_per_s.T)
        np.fill_diagonal(b, np.nan)
        return b

    def pair_latency_us(self, default_us: float) -> np.ndarray:
        if self.latency_us is None:
            lat = np.full((self.n, self.n), float(default_us))
        else:
            lat = np.fmax(self.latency_us, self.latency_us.T)
        lat = lat.copy()
        np.fill_diagonal(lat, np.nan)
        return lat

    def effective_bytes_per_s(self, network_efficiency: float) -> np.ndarray:
        """Attained bytes/s of each node pair (both ways): nominal rates times the cluster's
        network efficiency, measured ones as they are."""
        eff = 1.0 if self.measured else float(network_efficiency)
        return self.pair_gbit_per_s() * GBIT_BYTES * eff

    def reordered(self, hosts: Sequence[str]) -> "LinkMatrix":
        """The same links with node i = hosts[i] (hosts must be exactly the matrix's hosts)."""
        hosts = list(hosts)
        if len(hosts) != self.n or len(set(hosts)) != len(hosts):
            raise InputError("hosts", f"give each of the {self.n} hosts of the link matrix exactly once (got {len(hosts)})")
        idx = [self.index(h) for h in hosts]
        ix = np.ix_(idx, idx)
        lat = None if self.latency_us is None else self.latency_us[ix]
        return LinkMatrix(tuple(hosts), self.bandwidth_gbit_per_s[ix], lat, self.measured, self.source, self.notes)

    def to_json(self) -> dict:
        def mat(a):
            return [[None if (i == j or not math.isfinite(float(x))) else _num(x) for j, x in enumerate(row)]
                    for i, row in enumerate(a.tolist())]

        out = {"hosts": list(self.hosts), "bandwidth_gbit_per_s": mat(self.bandwidth_gbit_per_s)}
        if self.latency_us is not None:
            out["latency_us"] = mat(self.latency_us)
        out["measured"] = self.measured
        out["source"] = self.source
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def _num(x: float):
    x = float(x)
    return int(x) if x.is_integer() else round(x, 6)


# ---------------------------------------------------------------- validation
def _fmt(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return repr(v)


def check_matrix(values, n: int, name: str, *, allow_missing_diagonal: bool = True) -> np.ndarray:
    """An n x n float matrix from nested lists; every off-diagonal cell a positive finite
    number, else an InputError naming the cell (`bandwidth[3][5]: must be a positive number
    (got nan)`)."""
    if not isinstance(values, (list, tuple)):
        raise InputError(name, f"must be a list of {n} rows (got {type(values).__name__})")
    if len(values) != n:
        raise InputError(name, f"has {len(values)} rows but there are {n} hosts; give one row per host")
    out = np.full((n, n), np.nan)
    for i, row in enumerate(values):
        if not isinstance(row, (list, tuple)):
            raise InputError(f"{name}[{i}]", f"must be a list of {n} numbers (got {type(row).__name__})")
        if len(row) != n:
            raise InputError(f"{name}[{i}]", f"has {len(row)} entries but there are {n} hosts; give one per host")
        for j, v in enumerate(row):
            if i == j:
                continue  # inside a node: ignored
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and v > 0
            if not ok:
                raise InputError(f"{name}[{i}][{j}]", f"must be a positive number (got {_fmt(v)})")
            out[i, j] = float(v)
    return out


def _check_hosts(hosts, field_name: str) -> tuple[str, ...]:
    if not isinstance(hosts, (list, tuple)) or not hosts:
        raise InputError(field_name, "must be a non-empty list of host names")
    hosts = tuple(str(h) for h in hosts)
    seen = set()
    for i, h in enumerate(hosts):
        if not h.strip():
            raise InputError(f"{field_name}[{i}]", "empty host name")
        if h in seen:
            raise InputError(f"{field_name}[{i}]", f"host {h!r} appears twice")
        seen.add(h)
    return hosts


# ---------------------------------------------------------------- loaders
def links_from_mapping(data: dict, source: str = "", cluster=None) -> LinkMatrix:
    """A link matrix from a parsed JSON mapping (native, Pipette's or mpiGraph's form); `cluster`
    bounds what a unit-less matrix may hold (link_formats.check_plausible)."""
    from .link_formats import check_plausible, from_mpigraph, is_mpigraph

    if not isinstance(data, dict):
        raise InputError("links", f"must be a mapping with hosts and bandwidth_gbit_per_s (got {type(data).__name__})")
    if is_mpigraph(data):
        hosts, bw = from_mpigraph(data, cluster)
        return LinkMatrix(hosts, bw, None, True, source or "mpiGraph (Pipette's JSON), MiB/s",
                          ("mpiGraph MiB/s per process pair; the slower of send and receive",))
    if "gpus" in data and "hosts" not in data:
        return _from_pipette(data, source, cluster)
    known = {"hosts", "bandwidth_gbit_per_s", "bandwidth", "latency_us", "measured", "source", "notes", "unit"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"links.{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(known - {'unit'}))}")
    bw_key = "bandwidth_gbit_per_s" if "bandwidth_gbit_per_s" in data else "bandwidth"
    if bw_key not in data:
        raise InputError("bandwidth_gbit_per_s", "missing; give the node x node bandwidth matrix in Gbit/s")
    rows = data[bw_key]
    n = len(rows) if isinstance(rows, list) else 0
    hosts = _check_hosts(data["hosts"], "hosts") if "hosts" in data else tuple(f"node{i}" for i in range(n))
    bw = check_matrix(rows, len(hosts), "bandwidth" if bw_key == "bandwidth" else "bandwidth_gbit_per_s")
    bw = bw * _unit_factor(data.get("unit"))
    lat = check_matrix(data["latency_us"], len(hosts), "latency_us") if data.get("latency_us") is not None else None
    if bw_key == "bandwidth" and data.get("unit") is None:
        check_plausible(bw, "bandwidth", "Gbit/s", cluster)
    measured = data.get("measured", False)
    if not isinstance(measured, bool):
        raise InputError("measured", f"must be true or false (got {measured!r})")
    return LinkMatrix(hosts, bw, lat, measured, str(data.get("source") or source), tuple(data.get("notes") or ()))


def _unit_factor(unit) -> float:
    """Gbit/s per unit (None: Gbit/s); see link_formats.UNITS."""
    from .link_formats import unit_factor

    return unit_factor(unit)


PIPETTE_UNIT = "GB/s"  # round_robin_test.py stores nccl-tests sendrecv bus bandwidth (GB/s)


def _from_pipette(data: dict, source: str, cluster=None) -> LinkMatrix:
    from .link_formats import check_plausible, node_matrix

    if "bandwidth" not in data:
        raise InputError("bandwidth", "missing; Pipette's form is {\"gpus\": [...], \"bandwidth\": [[...]]}")
    unknown = sorted(set(data) - {"gpus", "bandwidth", "unit", "measured", "source", "notes"})
    if unknown:
        raise InputError(f"links.{unknown[0]}", "unknown key in Pipette's form; allowed: gpus, bandwidth, unit, measured")
    hosts, bw, G = node_matrix(data["gpus"], data["bandwidth"], "")
    unit = data.get("unit") or PIPETTE_UNIT
    bw = bw * _unit_factor(unit)
    if data.get("unit") is None:
        check_plausible(bw, "bandwidth", PIPETTE_UNIT, cluster)
    n = len(hosts)
    notes = [f"Pipette's link file: {unit}" + ("" if data.get("unit") else " (its nccl-tests bus bandwidths)")]
    if G != n:
        notes.append(f"collapsed {G} GPUs to {n} nodes (slowest GPU pair per node pair)")
    measured = data.get("measured", True)
    return LinkMatrix(hosts, bw, None, bool(measured), source or "Pipette-style matrix", tuple(notes))


def _parse_cell(text: str, where: str):
    t = text.strip()
    if t == "" or t.lower() in ("-", "null", "none"):
        return None
    try:
        return float(t)
    except ValueError:
        raise InputError(where, f"must be a positive number (got {t!r})") from None


def links_from_csv(text: str, source: str = "", cluster=None) -> LinkMatrix:
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
    if not rows:
        raise InputError("links", "the CSV file is empty")

    def numeric(cell):
        try:
            float(cell)
            return True
        except ValueError:
            return cell.strip() == ""

    if all(numeric(c) for c in rows[0]):  # no header: node0..node{n-1}
        n = len(rows)
        hosts = tuple(f"node{i}" for i in range(n))
        vals = [[_parse_cell(c, f"bandwidth[{i}][{j}]") for j, c in enumerate(r)] for i, r in enumerate(rows)]
    else:
        hosts = _check_hosts([c.strip() for c in rows[0][1:]], "header")
        n = len(hosts)
        body = rows[1:]
        if len(body) != n:
            raise InputError("bandwidth", f"has {len(body)} rows but the header names {n} hosts; give one row per host")
        by_host: dict[str, list] = {}
        for r, row in enumerate(body):
            h = row[0].strip()
            if h not in hosts:
                raise InputError(f"row {r + 2}", f"unknown host {h!r}; the header names {', '.join(hosts[:8])}"
                                 f"{' ...' if n > 8 else ''}")
            if h in by_host:
                raise InputError(f"row {r + 2}", f"host {h!r} has two rows")
            by_host[h] = row[1:]
        vals = []
        for i, h in enumerate(hosts):
            row = by_host[h]
            vals.append([_parse_cell(c, f"bandwidth[{i}][{j}]") for j, c in enumerate(row)])
    bw = check_matrix(vals, n, "bandwidth")
    from .link_formats import check_plausible

    check_plausible(bw, "bandwidth", "Gbit/s", cluster)  # a CSV has no unit slot
    return LinkMatrix(hosts, bw, None, False, source)


def load_links(path: str | Path, hosts: Optional[Sequence[str]] = None, cluster=None) -> LinkMatrix:
    """A link matrix from a JSON or CSV file (see the module docstring); `hosts` re-orders it;
    `cluster` bounds what a matrix without a unit may hold."""
    path = Path(path)
    if not path.is_file():
        raise InputError("--links", f"file {str(path)!r} does not exist")
    text = path.read_text()
    if path.suffix.lower() in (".csv", ".tsv", ".txt"):
        lm = links_from_csv(text if path.suffix.lower() != ".tsv" else text.replace("\t", ","), str(path), cluster)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError("--links", f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
        lm = links_from_mapping(data, str(path), cluster)
    return lm.reordered(hosts) if hosts is not None else lm


# ---------------------------------------------------------------- topology generator
def parse_degraded_node(text: str) -> tuple[int, float]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*([0-9.eE+-]+)\s*", text)
    if not m:
        raise InputError("--degraded-node", f"{text!r}: write NODE:FACTOR, e.g. 3:0.25")
    node, f = int(m.group(1)), float(m.group(2))
    if not (0 < f <= 1):
        raise InputError("--degraded-node", f"{text!r}: the factor must be in (0, 1] (got {f})")
    return node, f


def parse_degraded_link(text: str) -> tuple[int, int, float]:
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*:\s*([0-9.eE+-]+)\s*", text)
    if not m:
        raise InputError("--degraded-link", f"{text!r}: write A-B:FACTOR, e.g. 2-5:0.5")
    a, b, f = int(m.group(1)), int(m.group(2)), float(m.group(3))
    if a == b:
        raise InputError("--degraded-link", f"{text!r}: a link joins two different nodes")
    if not (0 < f <= 1):
        raise InputError("--degraded-link", f"{text!r}: the factor must be in (0, 1] (got {f})")
    return a, b, f


def generate_links(nodes: int, *, nodes_per_leaf: Optional[int] = None, oversubscription: float = 1.0,
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
    if nodes < 1:
        raise InputError("--nodes", f"must be at least 1 (got {nodes})")
    if nodes_per_leaf is not None and nodes_per_leaf < 1:
        raise InputError("--nodes-per-leaf", f"must be at least 1 (got {nodes_per_leaf})")
    if oversubscription < 1:
        raise InputError("--oversubscription", f"must be >= 1, e.g. 4 for 4:1 (got {oversubscription})")
    if nic_gbit_per_s <= 0:
        raise InputError("--nic-gbit-per-s", f"must be positive (got {nic_gbit_per_s})")
    per_leaf = nodes_per_leaf or nodes
    if rack_order == "contiguous":
        leaf = np.arange(nodes) // per_leaf
    elif rack_order == "round-robin":
        leaf = np.arange(nodes) % max(1, -(-nodes // per_leaf))
    else:
        raise InputError("--rack-order", f"unknown rack order {rack_order!r}; use contiguous or round-robin")
    same = leaf[:, None] == leaf[None, :]
    bw = np.where(same, nic_gbit_per_s, nic_gbit_per_s / oversubscription).astype(np.float64)
    lat = np.where(same, latency_us, latency_us + 2 * hop_latency_us).astype(np.float64)
    notes = []
    for node, f in degraded_nodes:
        if not 0 <= node < nodes:
            raise InputError("--degraded-node", f"node {node} is outside 0..{nodes - 1}")
        bw[node, :] *= f
        bw[:, node] *= f
        notes.append(f"node {node} NIC at {f:g}x")
    for a, b, f in degraded_links:
        for x in (a, b):
            if not 0 <= x < nodes:
                raise InputError("--degraded-link", f"node {x} is outside 0..{nodes - 1}")
        bw[a, b] *= f
        bw[b, a] *= f
        notes.append(f"link {a}-{b} at {f:g}x")
    np.fill_diagonal(bw, np.nan)
    np.fill_diagonal(lat, np.nan)
    hosts = tuple(f"{host_prefix}{i}" for i in range(nodes))
    desc = f"generated: {nodes} nodes, NIC {nic_gbit_per_s:g} Gbit/s per GPU"
    if nodes_per_leaf:
        desc += f", {nodes_per_leaf} nodes per leaf ({rack_order}), spine {oversubscription:g}:1"
    return LinkMatrix(hosts, bw, lat, False, desc, tuple(notes))


def links_for_cluster(cluster, **kw) -> LinkMatrix:
    """The matrix the cluster spec implies: its NIC, leaves and spine, and its link_overrides."""
    lm = generate_links(cluster.num_nodes, nodes_per_leaf=cluster.nodes_per_leaf,
                        oversubscription=cluster.spine_oversubscription, nic_gbit_per_s=cluster.nic_gbit_per_s,
                        latency_us=cluster.network_latency_us, **kw)
    bw = lm.bandwidth_gbit_per_s.copy()
    lat = lm.latency_us.copy()
    for o in cluster.link_overrides:
        bw[o.src, o.dst] = o.gbit_per_s
        if o.latency_us is not None:
            lat[o.src, o.dst] = o.latency_us
    return LinkMatrix(lm.hosts, bw, lat, False, f"cluster {cluster.name}", lm.notes)


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


def import_nccl_logs(paths: Sequence[str | Path], hosts: Optional[Sequence[str]] = None,
                     symmetric: bool = True) -> LinkMatrix:
    """Measured matrix from nccl-tests `sendrecv_perf` logs, one run per node pair (two ranks,
    one GPU on each node: `mpirun -np 2 -H A,B sendrecv_perf -b 8 -e 1G -f 2 -g 1`).

    Which pair a log measured: see `pair_of_log` (header comment, `A__B.log`, or the log's
    own device lines). A log that does not name its test is refused unless given as
    `LOG:sendrecv`. Bandwidth = the out-of-place bus bandwidth at the largest message
    size (GB/s x 8 -> Gbit/s); latency = the out-of-place time of the smallest message (us).
    A pair measured one way only is used both ways unless `symmetric=False`; a pair measured
    twice keeps the slower run. Every ordered pair of the hosts must be covered. Logs are
    read by `solveplan.nccl_tests.parse_nccl_log`.
    """
    from .nccl_tests import parse_nccl_log

    if not paths:
        raise InputError("logs", "give at least one sendrecv_perf log")
    direct: dict[tuple[str, str], tuple[float, float]] = {}
    names: list[str] = []
    for p in paths:
        hint = None
        if not Path(p).is_file() and str(p).endswith(":sendrecv"):  # LOG:sendrecv names an unnamed log's test
            p, hint = str(p)[: -len(":sendrecv")], "sendrecv"
        p = Path(p)
        if not p.is_file():
            raise InputError(str(p), "file does not exist")
        text = p.read_text(errors="replace")
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
        val = (big.busbw_gbs * 8.0, small.time_us)
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
    return LinkMatrix(tuple(order), bw, lat, True, f"nccl-tests sendrecv_perf, {len(paths)} logs")


# ---------------------------------------------------------------- summary
def describe(lm: LinkMatrix) -> dict:
    """Levels of bandwidth with counts, the slowest pairs, asymmetry, classes of
    interchangeable nodes (identical link profiles)."""
    from .placement import twin_classes

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
        slow.append({"a": lm.hosts[i], "b": lm.hosts[j], "gbit_per_s": _num(pair[i, j])})
    classes = twin_classes(np.nan_to_num(pair, nan=0.0)) if lm.n > 1 else [[0]]
    return {
        "hosts": lm.n,
        "measured": lm.measured,
        "source": lm.source,
        "levels_gbit_per_s": [{"gbit_per_s": _num(v), "directed_pairs": int(c)} for v, c in zip(vals, counts)],
        "asymmetric_pairs": asym,
        "slowest_pairs": slow,
        "interchangeable_classes": len(classes),
        "largest_class": max(len(c) for c in classes),
        "notes": list(lm.notes),
    }
