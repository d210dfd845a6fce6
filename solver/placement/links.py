"""Measured or generated node-to-node links: the input of placement (docs/DESIGN.md sections 1, 4).

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
  Pipette's mpiGraph JSON `{"0": ..., "1": ...}` (MiB/s): see solveplan.placement.link_formats.
- CSV: a header row `host,node0,node1,...` then one row per source host
  (`node0,<bw to node0>,<bw to node1>,...`); rows may come in any order. A file with no
  header (all numbers) names its nodes node0..node{n-1}. Bandwidth only.

A matrix that states no unit (`"bandwidth"` without `"unit"`, a CSV) must be plausible as Gbit/s
for the cluster (`cluster=`; link_formats.check_plausible).

`hosts=` (e.g. the cluster's hostnames from a hostfile) re-orders the matrix so node index
`i` is `hosts[i]`; a host the matrix does not know is an `InputError`.

Matrices that are built rather than read (a generated topology, nccl-tests imports) and their
summary live in `placement.topology`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError, escape_text, host_name_reason
from ..specs.base import PLAUSIBLE
from ..specs.units import GBIT_BYTES
from ..specs.writing import write_text
from .link_formats import MAX_LINK_ELEMENTS, MAX_LINK_HOSTS, check_hosts


@dataclass(frozen=True)
class LinkMatrix:
    hosts: tuple[str, ...]
    bandwidth_gbit_per_s: np.ndarray  # (n, n) float, diagonal NaN
    latency_us: np.ndarray | None = None  # (n, n) float, diagonal NaN
    measured: bool = False
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        """Every host name is one a hostfile and a launcher accept (no newline to add lines to
        a hostfile, no space, not empty), whichever reader built the matrix."""
        for i, host in enumerate(self.hosts):
            reason = host_name_reason(str(host))
            if reason:
                raise InputError(f"hosts[{i}]", f"{escape_text(repr(host), 60)}: {reason}")
        _check_range(self.bandwidth_gbit_per_s, "bandwidth_gbit_per_s", "gbit_per_s", "Gbit/s")
        if self.latency_us is not None:
            _check_range(self.latency_us, "latency_us", "latency_us", "us")

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

    def reordered(self, hosts: Sequence[str]) -> LinkMatrix:
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
            return [[None if (i == j or not math.isfinite(float(x))) else json_number(x) for j, x in enumerate(row)]
                    for i, row in enumerate(a.tolist())]

        out = {"hosts": list(self.hosts), "bandwidth_gbit_per_s": mat(self.bandwidth_gbit_per_s)}
        if self.latency_us is not None:
            out["latency_us"] = mat(self.latency_us)
        out["measured"] = self.measured
        out["source"] = self.source
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def write(self, path: str | Path, field: str = "output") -> None:
        """The matrix as JSON, written whole (`specs.writing`)."""
        write_text(path, json.dumps(self.to_json(), indent=1) + "\n", field)


def json_number(x: float):
    """A number as JSON writes it: an int when whole, else rounded to 6 decimals."""
    x = float(x)
    return int(x) if x.is_integer() else round(x, 6)


# ---------------------------------------------------------------- validation
def _fmt(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return repr(v)


def _check_range(matrix: np.ndarray, field: str, quantity: str, unit: str) -> None:
    """Every off-diagonal cell inside the plausible range of `quantity` (`specs.base.PLAUSIBLE`),
    whatever unit the file gave: 1e-300 Gbit/s would hang the placement, 1e300 plan nonsense."""
    lo, hi = PLAUSIBLE[quantity]
    off = ~np.eye(len(matrix), dtype=bool)
    bad = np.argwhere(off & ~((matrix >= lo) & (matrix <= hi)) & ~np.isnan(matrix))
    if len(bad):
        i, j = (int(x) for x in bad[0])
        raise InputError(f"{field}[{i}][{j}]", f"{matrix[i, j]:.4g} {unit} is outside the plausible range "
                                              f"[{lo:g}, {hi:g}] {unit}")


def check_matrix(values, n: int, name: str, *, allow_missing_diagonal: bool = True) -> np.ndarray:
    """An n x n float matrix from nested lists; every off-diagonal cell a positive finite
    number, else an InputError naming the cell (`bandwidth[3][5]: must be a positive number
    (got nan)`). At most MAX_LINK_HOSTS hosts."""
    check_hosts(n, name)
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
    if text.count(",") > (MAX_LINK_HOSTS + 1) ** 2:  # before the cells are split
        raise InputError("links", f"the CSV file holds more than {(MAX_LINK_HOSTS + 1) ** 2:,} cells; a link matrix "
                                  f"holds at most {MAX_LINK_HOSTS:,} hosts")
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


def load_links(path: str | Path, hosts: Sequence[str] | None = None, cluster=None) -> LinkMatrix:
    """A link matrix from a JSON or CSV file (see the module docstring); `hosts` re-orders it;
    `cluster` bounds what a matrix without a unit may hold."""
    from ..catalog import parse_data, read_text  # the safe reader of every user file

    path = Path(path)
    text = read_text(path, "links")
    if path.suffix.lower() in (".csv", ".tsv", ".txt"):
        lm = links_from_csv(text if path.suffix.lower() != ".tsv" else text.replace("\t", ","), str(path), cluster)
    else:
        lm = links_from_mapping(parse_data(text, "links", path.name, "json", max_elements=MAX_LINK_ELEMENTS),
                                str(path), cluster)
    return lm.reordered(hosts) if hosts is not None else lm
