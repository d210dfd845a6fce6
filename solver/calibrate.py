"""Calibrate the formulation to one's own cluster (`solveplan calibrate`).

Two independent fits, both bounded least squares (scipy.optimize.least_squares, 'trf') on
log-ratio residuals `log(predicted / measured)`, so an 8-byte message and a 1 GiB one, or a
1 s step and a 30 s one, weigh the same:

**Links, from nccl-tests logs.** Each log is one link class: NVLink inside a node or the
network across nodes (a `LOG:nvlink` / `LOG:network` hint wins; otherwise the device lines'
host names, else the rank count against `gpus_per_node`). The formulation's alpha-beta
model (formulation/comm.py) of each operation over `n` ranks is

    all-reduce                  t = 2(n-1) a + 2(n-1)/n * S / (e B)
    all-gather, reduce-scatter  t =  (n-1) a +  (n-1)/n * S / (e B)
    send/receive                t =        a +            S / (e B)

with `S` the size column of the log, so `e B` is the bus bandwidth of nccl-tests
(doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
reduce-scatter, 1 for send/receive) and algbw = S/t grows with S toward it. `B` is the
nominal bandwidth the formulation assigns the group: NVLink per GPU inside a node; across
nodes `k` NICs per rank for a group with `k` ranks per node (NCCL runs one ring per NIC),
divided by the spine oversubscription beyond one leaf, one NIC for send/receive. All logs of
a class are fitted together for its two ClusterSpec fields: latency `a` ->
`{class}_latency_us`, `e` -> `{class}_efficiency` (fitted bandwidth / nominal). A fitted
`e` above 1 (the log beats the datasheet) sets the efficiency to 1 and raises the nominal
bandwidth, said in the report.

**GPU efficiencies, from measured steps** of known configurations: matmul_efficiency,
layer_overhead_us and, when any configuration uses flash attention, attention_efficiency,
predicted through the real formulation (`evaluate_config`, the code behind `solveplan
evaluate`), on the cluster with the fitted links. The step time is piecewise smooth in these
parameters (bottleneck stage, exposed overlap), so the fit starts from the best point of a
coarse grid (as benchmarks/fit_published.py does) and refines with least squares.

Uncertainty: covariance `s^2 (J^T J)^-1` from the Jacobian at the solution, `s^2` the
residual variance with m - p degrees of freedom (none for an exact fit: shown as n/a).

Refusals (`InputError`, one line saying what to measure next): fewer than 3 message sizes
in a link class; fewer step measurements than parameters; time falling with message size
beyond the noise seen between out-of-place and in-place; the same configuration measured
twice with >25% different times; a latency fitted to zero, or a GPU parameter pinned at a
bound, with large residuals (the points do not follow the model).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import InputError
from .formulation import comm
from .nccl_tests import NcclRun, canonical_op, parse_nccl_log
from .specs import ClusterSpec, JobSpec

LINK_CLASSES = ("nvlink", "network")
FITTABLE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
MIN_SIZES = 3
# A latency (or bandwidth) term below this share of the time at its most favourable message
# size cannot be fitted: the parameter is kept at its current value and the report says so.
MIN_TERM_SHARE = 0.25
LATENCY_FLOOR_US = 1e-3  # ClusterSpec latencies are positive
BAD_FIT_RMS = 0.20  # log-residual rms beyond which a parameter at a bound means the model cannot explain the points
DUPLICATE_SPREAD = 1.25
GIB = 1024**3


# ---------------------------------------------------------------------------------- fitting
@dataclass
class Param:
    name: str
    before: float  # the value in the cluster before calibration
    lower: float
    upper: float
    scale: float  # typical magnitude (least_squares x_scale)
    unit: str = ""
    value: float = math.nan
    sd: float = math.nan
    fixed: bool = False
    note: str = ""

    @property
    def at_bound(self) -> bool:
        if self.fixed:
            return False
        tol = 1e-6 * max(self.scale, abs(self.value))
        return self.value <= self.lower + tol or self.value >= self.upper - tol


@dataclass
class FitResult:
    values: dict[str, float]
    sd: dict[str, float]
    residuals: np.ndarray
    rms: float
    dof: int
    nfev: int
    message: str


def fit_least_squares(residuals: Callable[[dict], np.ndarray], params: Sequence[Param],
                      seeds: Optional[Sequence[dict]] = None, diff_step: Optional[float] = None) -> FitResult:
    """Bounded least squares over the free `params` (fixed ones pass their `value`).
    `residuals(values)` returns log-ratio residuals. `seeds`: candidate starting points (a
    coarse grid); the fit starts from the best of them. Fills `value` and `sd` of each free
    parameter and returns the result."""
    from scipy.optimize import least_squares

    free = [p for p in params if not p.fixed]
    fixed = {p.name: p.value for p in params if p.fixed}

    def values_of(x) -> dict:
        return {**fixed, **{p.name: float(v) for p, v in zip(free, x)}}

    def fun(x):
        return np.asarray(residuals(values_of(x)), dtype=np.float64)

    lo = np.array([p.lower for p in free])
    hi = np.array([p.upper for p in free])
    starts = [np.clip([s.get(p.name, p.before) for p in free], lo, hi) for s in (seeds or [])]
    starts.append(np.clip([p.before for p in free], lo, hi))
    best_x, best_cost = None, np.inf
    for x in starts:
        r = fun(x)
        cost = float(np.sum(r**2)) if np.all(np.isfinite(r)) else np.inf
        if cost < best_cost:
            best_x, best_cost = np.asarray(x, dtype=np.float64), cost
    if best_x is None:  # every start gave non-finite residuals
        best_x = starts[-1]
    kw = {"diff_step": diff_step} if diff_step else {}
    res = least_squares(fun, best_x, bounds=(lo, hi), x_scale=np.array([p.scale for p in free]),
                        method="trf", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=400 * max(1, len(free)), **kw)
    m, k = len(res.fun), len(free)
    dof = m - k
    sd = np.full(k, np.nan)
    if dof > 0 and k:
        J = res.jac
        s2 = float(np.sum(res.fun**2)) / dof
        try:
            cov = np.linalg.pinv(J.T @ J) * s2
            sd = np.sqrt(np.clip(np.diag(cov), 0, None))
        except np.linalg.LinAlgError:
            pass
        # a parameter the residuals do not depend on has no finite uncertainty
        sd = np.where(np.linalg.norm(J, axis=0) > 0, sd, np.inf)
    for p, v, s in zip(free, res.x, sd):
        p.value, p.sd = float(v), float(s)
    return FitResult(values=values_of(res.x), sd={p.name: p.sd for p in free}, residuals=res.fun,
                     rms=float(np.sqrt(np.mean(res.fun**2))) if m else 0.0, dof=dof, nfev=int(res.nfev),
                     message=str(res.message))


# ---------------------------------------------------------------------------------- links
@dataclass
class LogInput:
    path: str
    link_class: Optional[str] = None  # hint
    op: Optional[str] = None  # hint


def parse_log_arg(arg: str) -> LogInput:
    """`LOG`, `LOG:nvlink`, `LOG:network`, `LOG:all_gather`, `LOG:network:sendrecv`."""
    parts = str(arg).split(":")
    # the longest prefix that is an existing file is the path (paths may hold colons)
    for k in range(len(parts), 0, -1):
        if Path(":".join(parts[:k])).is_file():
            path, rest = ":".join(parts[:k]), parts[k:]
            break
    else:  # no such file: hints are the trailing known words; the loader reports the missing file
        k = len(parts)
        while k > 1 and (parts[k - 1].strip().lower() in LINK_CLASSES or canonical_op(parts[k - 1]) is not None):
            k -= 1
        path, rest = ":".join(parts[:k]), parts[k:]
    cls, op = None, None
    for tok in rest:
        t = tok.strip().lower()
        if t in LINK_CLASSES:
            cls = t
        elif canonical_op(t) in FITTABLE_OPS + ("alltoall", "broadcast", "reduce"):
            op = canonical_op(t)
        else:
            raise InputError("--nccl-tests", f"{arg!r}: unknown hint {tok!r}; use LOG, LOG:nvlink or LOG:network "
                                             "(optionally :all_reduce, :all_gather, :reduce_scatter, :sendrecv)")
    return LogInput(path=path, link_class=cls, op=op)


@dataclass
class LinkLog:
    run: NcclRun
    op: str
    nranks: int
    link_class: str
    ranks_per_node: int
    how: str  # how the class/ranks were decided
    k_lat: float
    k_bw: float
    nominal_bytes_per_s: float


@dataclass
class LinkPoint:
    log: LinkLog
    line: int
    size_bytes: int
    measured_us: float  # out-of-place and in-place, one point each
    placement: str
    before_us: float = math.nan
    after_us: float = math.nan


@dataclass
class LinkFit:
    link_class: str
    logs: list[LinkLog]
    points: list[LinkPoint]
    latency: Param
    efficiency: Param
    rms: float = math.nan
    nominal_field: str = ""
    nominal_before: float = math.nan
    nominal_after: float = math.nan
    notes: list[str] = field(default_factory=list)


def _op_terms(op: str, n: int) -> tuple[float, float]:
    """(latency multiplier, bandwidth multiplier) of comm.py's alpha-beta model."""
    if op == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return float(n - 1), (n - 1) / n
    return 1.0, 1.0


def _stride(cluster: ClusterSpec, log: LinkLog) -> int:
    if log.link_class == "nvlink":
        return 1
    return max(1, cluster.gpus_per_node // max(1, log.ranks_per_node))


def formulation_time_us(cluster: ClusterSpec, log: LinkLog, size_bytes) -> np.ndarray:
    """What the formulation (comm.py) predicts for this log's operation on `cluster`."""
    S = np.asarray(size_bytes, dtype=np.float64)
    stride = _stride(cluster, log)
    if log.op == "sendrecv":
        p_stride = 1 if log.link_class == "nvlink" else cluster.gpus_per_node
        bw, lat = comm.p2p_link(cluster, p_stride)
        return comm.p2p_s(S, bw, lat) * 1e6
    bw, lat, _ = comm.group_links(cluster, log.nranks, stride)
    if log.op == "all_reduce":
        return comm.allreduce_s(S, log.nranks, bw, lat) * 1e6
    return comm.allgather_s(S, log.nranks, bw, lat) * 1e6


def _nominal_bytes_per_s(cluster: ClusterSpec, cls: str, op: str, n: int, per_node: int) -> float:
    if cls == "nvlink":
        return cluster.nvlink_gbyte_per_s * 1e9
    nic = cluster.nic_gbit_per_s * 1e9 / 8
    if op == "sendrecv":
        return nic
    nodes = math.ceil(n / per_node)
    b = nic * per_node
    if cluster.nodes_per_leaf is not None and nodes > cluster.nodes_per_leaf:
        b /= cluster.spine_oversubscription
    return b


def classify_log(run: NcclRun, hint: LogInput, cluster: ClusterSpec) -> LinkLog:
    g = cluster.gpus_per_node
    op = hint.op or run.op
    if op is None:
        raise InputError(run.source, "the log does not say which test produced it; name it "
                                         "after the test (all_reduce_perf.log) or append :all_reduce to the path")
    if op not in FITTABLE_OPS:
        raise InputError(run.source, f"{op}_perf is not in the formulation's communication model; "
                                         "give all_reduce_perf, all_gather_perf, reduce_scatter_perf or sendrecv_perf logs")
    n, how_n = run.nranks, "stated in the log"
    if n is None:
        n = run.ratio_nranks(op)
        how_n = "from busbw/algbw"
    if n is None and op == "sendrecv":
        n, how_n = 2, "assumed (send/receive)"
    if n is None:
        raise InputError(run.source, "the rank count is not stated (no '#  Rank' device lines) and "
                                         "busbw/algbw do not determine it; rerun with the default device listing")
    if n < 2:
        raise InputError(run.source, f"{n} rank; a link needs at least 2 ranks (mpirun -np 2 or -g 2)")
    if hint.link_class:
        cls, how = hint.link_class, "given"
    elif run.hosts:
        cls = "network" if len(run.hosts) > 1 else "nvlink"
        how = f"{len(run.hosts)} host(s) in the device lines"
    elif op == "sendrecv" and how_n.startswith("assumed"):
        raise InputError(run.source, "cannot tell whether this send/receive crossed nodes; "
                                         "append :nvlink or :network to the path")
    else:
        cls = "nvlink" if n <= g else "network"
        how = f"{n} ranks {'<=' if n <= g else '>'} {g} GPUs per node"
    if run.hosts:
        per_node = math.ceil(n / len(run.hosts))
    elif cls == "nvlink":
        per_node = n
    else:
        per_node = g if n > g else 1
        if n <= g:
            how += "; one rank per node assumed (no device lines)"
    if cls == "nvlink" and (n > g or (run.hosts and len(run.hosts) > 1)):
        raise InputError(run.source, f"marked nvlink but spans "
                                         f"{f'{len(run.hosts)} hosts' if run.hosts and len(run.hosts) > 1 else f'{n} ranks > {g} GPUs per node'}; "
                                         "use :network or measure inside one node")
    if cls == "network" and run.hosts and len(run.hosts) == 1:
        raise InputError(run.source, f"marked network but every rank runs on host {run.hosts[0]}; "
                                         "use :nvlink or measure across nodes")
    ka, kb = _op_terms(op, n)
    return LinkLog(run=run, op=op, nranks=n, link_class=cls, ranks_per_node=per_node, how=f"ranks {how_n}; class {how}",
                   k_lat=ka, k_bw=kb, nominal_bytes_per_s=_nominal_bytes_per_s(cluster, cls, op, n, per_node))


def _check_monotone(log: LinkLog) -> None:
    run = log.run
    pairs = [(a.time_us, b.time_us) for a, b in zip(run.out_of_place, run.in_place)]
    noise = float(np.median([abs(math.log(a / b)) for a, b in pairs])) if pairs else 0.0
    tol = max(0.15, 4 * noise)
    order = sorted(range(len(run.out_of_place)), key=lambda i: run.out_of_place[i].size_bytes)
    peak_t, peak_i = 0.0, None
    for i in order:
        t = math.sqrt(pairs[i][0] * pairs[i][1])
        if peak_i is not None and t < peak_t * (1 - tol) and run.out_of_place[i].size_bytes > run.out_of_place[peak_i].size_bytes:
            raise InputError(run.source, (
                f"line {run.line_numbers[i]}: time falls from {peak_t:.1f} us at "
                f"{_fmt_bytes(run.out_of_place[peak_i].size_bytes)} to {t:.1f} us at {_fmt_bytes(run.out_of_place[i].size_bytes)}, "
                f"beyond the {tol:.0%} noise between out-of-place and in-place; rerun on an idle link with more "
                "iterations (-w 20 -n 100)"))
        if t > peak_t:
            peak_t, peak_i = t, i


def fit_link_class(cls: str, logs: list[LinkLog], cluster: ClusterSpec) -> LinkFit:
    sizes = sorted({r.size_bytes for lg in logs for r in lg.run.out_of_place if r.size_bytes > 0})
    names = ", ".join(sorted({lg.run.source for lg in logs}))
    if len(sizes) < MIN_SIZES:
        raise InputError("--nccl-tests", f"{cls}: {len(sizes)} message size(s) in {names}; measure at least "
                                         f"{MIN_SIZES} sizes from 8 B to 1 GiB (e.g. all_reduce_perf -b 8 -e 1G -f 2)")
    for lg in logs:
        _check_monotone(lg)
    points = []
    for lg in logs:
        for ln, a, b in zip(lg.run.line_numbers, lg.run.out_of_place, lg.run.in_place):
            if a.size_bytes <= 0:
                continue
            points.append(LinkPoint(lg, ln, a.size_bytes, a.time_us, "out-of-place"))
            points.append(LinkPoint(lg, ln, b.size_bytes, b.time_us, "in-place"))
    S = np.array([p.size_bytes for p in points], dtype=np.float64)
    t = np.array([p.measured_us for p in points])
    ka = np.array([p.log.k_lat for p in points])
    kb = np.array([p.log.k_bw for p in points])
    B = np.array([p.log.nominal_bytes_per_s for p in points])

    lat_field, eff_field = f"{cls}_latency_us", f"{cls}_efficiency"
    lat0, eff0 = getattr(cluster, lat_field), getattr(cluster, eff_field)
    lat = Param(lat_field, lat0, LATENCY_FLOOR_US, 1e5, max(lat0, 1.0), "us")
    eff = Param(eff_field, eff0, 1e-4, 20.0, max(eff0, 0.1))

    def model_us(v):
        return ka * v[lat_field] + kb * S / (v[eff_field] * B) * 1e6

    def resid(v):
        return np.log(model_us(v) / t)

    seeds = [{lat_field: float(np.min(t / ka)) * f, eff_field: float(np.max(kb * S * 1e6 / (t * B)))} for f in (0.3, 0.7)]
    fit = fit_least_squares(resid, [lat, eff], seeds=seeds)
    out = LinkFit(cls, logs, points, lat, eff)

    def refuse_if_contradictory(fit):
        if fit.rms <= BAD_FIT_RMS:
            return
        if not lat.fixed and lat.value <= LATENCY_FLOOR_US * 1.01:
            raise InputError("--nccl-tests", (
                f"{cls}: the latency fits to 0 with {fit.rms:.0%} rms error in {names}: small messages run faster than "
                "the large-message bandwidth allows, so the points do not follow t = a + S/b; check that every log of "
                "the class measures the same link (hint LOG:nvlink / LOG:network) and rerun from 8 B to 1 GiB "
                "(-b 8 -e 1G -f 2)"))
        for p in (lat, eff):
            if p.at_bound:
                raise InputError("--nccl-tests", (
                    f"{cls}: {p.name} is pinned at its bound {p.value:.3g} with {fit.rms:.0%} rms error in {names}: "
                    "the points do not follow t = a + S/b; check the logs measure one link each and rerun from 8 B "
                    "to 1 GiB (-b 8 -e 1G -f 2) on an idle link"))

    refuse_if_contradictory(fit)
    # identifiability: each term must matter somewhere. The bandwidth term is judged both with the
    # fitted values and with the cluster's prior efficiency: a latency-bound log (stopped at 64 KiB)
    # is fitted just as well by a tiny efficiency, whose bandwidth term then looks large.
    pred = model_us(fit.values)
    lat_share = float(np.max(ka * lat.value / pred))
    bw_share = float(np.max(1 - ka * lat.value / pred))
    bw_share = min(bw_share, float(np.max(kb * S / (eff0 * B) * 1e6 / t)))
    if lat_share < MIN_TERM_SHARE:
        lat.fixed, lat.value, lat.sd = True, lat0, math.nan
        lat.note = "kept: not identifiable"
        out.notes.append(f"{cls}: latency is under {MIN_TERM_SHARE:.0%} of even the smallest message's time "
                         f"({_fmt_bytes(int(S.min()))}); kept {lat0:g} us. Measure down to 8 B (-b 8) to fit it.")
        fit = fit_least_squares(resid, [lat, eff])
    elif bw_share < MIN_TERM_SHARE:
        eff.fixed, eff.value, eff.sd = True, eff0, math.nan
        eff.note = "kept: not identifiable"
        out.notes.append(f"{cls}: even the largest message ({_fmt_bytes(int(S.max()))}) is latency-bound (at the prior "
                         f"efficiency the bandwidth term is {bw_share:.0%} of its time), so the log cannot tell the "
                         f"bandwidth; kept efficiency {eff0:g}. Measure up to 1 GiB (-e 1G) to fit it.")
        fit = fit_least_squares(resid, [lat, eff])
    refuse_if_contradictory(fit)
    out.rms = fit.rms
    if fit.rms > 0.35:
        out.notes.append(f"{cls}: the alpha-beta line leaves {fit.rms:.0%} rms error on these logs (NCCL switches "
                         "algorithms and protocols with size); the fitted values are the formulation's best compromise.")
    # map onto the ClusterSpec fields
    nominal_field = "nvlink_gbyte_per_s" if cls == "nvlink" else "nic_gbit_per_s"
    out.nominal_field = nominal_field
    out.nominal_before = out.nominal_after = float(getattr(cluster, nominal_field))
    if eff.value > 1.0:
        out.nominal_after = out.nominal_before * eff.value
        out.notes.append(f"{cls}: measured bus bandwidth is {eff.value:.2f}x the nominal {out.nominal_before:g} "
                         f"{'GB/s' if cls == 'nvlink' else 'Gbit/s'}; set {nominal_field} to {out.nominal_after:.4g} "
                         f"with efficiency 1 (check gpus_per_node and the NIC count if that is unexpected).")
    wrong = sum(lg.run.wrong for lg in logs)
    if wrong:
        out.notes.append(f"{cls}: the logs report {wrong} wrong elements: a faulty link or driver; the times may not "
                         "be representative.")
    return out


# ---------------------------------------------------------------------------------- steps
STEP_COLUMNS = ("model", "tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero",
                "global_batch_size", "seq_length", "step_time_s")
_OPTIONAL = ("dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero", "global_batch_size",
             "seq_length", "num_gpus", "flash_attention", "precision", "tp_comm_overlap", "label", "name", "id")
_ALIASES = {"mbs": "micro_batch_size", "gbs": "global_batch_size", "seq_len": "seq_length", "seq": "seq_length",
            "step_time": "step_time_s", "iteration_time_s": "step_time_s", "sp": "sequence_parallel",
            "zero_stage": "zero", "flash": "flash_attention"}


@dataclass
class StepRow:
    index: int  # 1-based row number in the file
    label: str
    job: JobSpec
    config: dict
    measured_s: float
    before_s: float = math.nan
    after_s: float = math.nan
    fits_memory: Optional[bool] = None


@dataclass
class StepFit:
    rows: list[StepRow]
    params: list[Param]
    rms_before: float
    rms_after: float
    dof: int
    notes: list[str] = field(default_factory=list)


def _bool(v, where):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on", "y", "t"):
        return True
    if s in ("0", "false", "no", "off", "n", "f"):
        return False
    raise InputError("--steps", f"{where}: expected true/false (got {v!r})")


def _int(v, where, lo=1):
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError("--steps", f"{where}: expected an integer (got {v!r})") from None
    if f != int(f) or f < lo:
        raise InputError("--steps", f"{where}: expected an integer >= {lo} (got {v!r})")
    return int(f)


def read_steps(path: str | Path) -> list[dict]:
    """Rows of a CSV (header line) or JSON (a list, or {'measurements'|'steps': [...]}) file,
    keys normalised (lower case, '-' -> '_', common aliases), empty cells dropped."""
    path = Path(path)
    if not path.is_file():
        raise InputError("--steps", f"file {str(path)!r} does not exist")
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError("--steps", f"{path.name} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if isinstance(data, dict):
            data = data.get("measurements", data.get("steps"))
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError("--steps", f"{path.name}: expected a list of objects (or {{\"measurements\": [...]}})")
        rows = data
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise InputError("--steps", f"{path.name}: empty file; expected a header line with {', '.join(STEP_COLUMNS)}")
        rows = list(reader)
    out = []
    for r in rows:
        norm = {}
        for k, v in r.items():
            if k is None:
                raise InputError("--steps", f"{path.name} row {len(out) + 1}: more cells than header columns")
            key = _ALIASES.get(k.strip().lower().replace("-", "_"), k.strip().lower().replace("-", "_"))
            if v is None or (isinstance(v, str) and v.strip() == ""):
                continue
            norm[key] = v.strip() if isinstance(v, str) else v
        out.append(norm)
    return out


def _row_cluster(cluster: ClusterSpec, n: int, where: str) -> ClusterSpec:
    if n == cluster.num_gpus:
        return cluster
    g = cluster.gpus_per_node
    if n < g:
        return cluster.model_copy(update={"gpus_per_node": n, "num_nodes": 1})
    if n % g:
        raise InputError("--steps", f"{where}: {n} GPUs is not a multiple of {g} GPUs per node of {cluster.name}")
    return cluster.model_copy(update={"num_nodes": n // g})


def build_step_rows(rows: list[dict], cluster: ClusterSpec, source: str) -> list[StepRow]:
    from .catalog import load_model
    from .cli.evaluate import evaluate_config

    out = []
    for i, r in enumerate(rows, 1):
        where = f"{source} row {i}"
        unknown = sorted(set(r) - set(STEP_COLUMNS) - set(_OPTIONAL))
        if unknown:
            raise InputError("--steps", f"{where}: unknown column {unknown[0]!r}; columns are {', '.join(STEP_COLUMNS)} "
                                        "(+ num_gpus, flash_attention, precision, tp_comm_overlap, label)")
        for req in ("model", "tp", "pp", "step_time_s"):
            if req not in r:
                raise InputError("--steps", f"{where}: missing {req}")
        try:
            model = load_model(str(r["model"]))
        except InputError as exc:
            raise InputError("--steps", f"{where}: {exc.message}") from None
        tp, pp = _int(r["tp"], f"{where} tp"), _int(r["pp"], f"{where} pp")
        cp = _int(r.get("cp", 1), f"{where} cp")
        vp = _int(r.get("vp", 1), f"{where} vp")
        mbs = _int(r.get("micro_batch_size", 1), f"{where} micro_batch_size")
        if "dp" in r:
            n = tp * pp * cp * _int(r["dp"], f"{where} dp")
            if "num_gpus" in r and _int(r["num_gpus"], f"{where} num_gpus") != n:
                raise InputError("--steps", f"{where}: num_gpus {r['num_gpus']} != tp*pp*cp*dp = {n}")
        elif "num_gpus" in r:
            n = _int(r["num_gpus"], f"{where} num_gpus")
        else:
            n = cluster.num_gpus
        try:
            t = float(r["step_time_s"])
        except (TypeError, ValueError):
            raise InputError("--steps", f"{where}: step_time_s must be a number of seconds (got {r['step_time_s']!r})") from None
        if not (t > 0 and math.isfinite(t)):
            raise InputError("--steps", f"{where}: step_time_s must be positive (got {r['step_time_s']!r})")
        recompute = str(r.get("recompute", "selective")).lower()
        if recompute not in ("none", "selective", "full"):
            raise InputError("--steps", f"{where}: recompute must be none, selective or full (got {recompute!r})")
        sp = _bool(r["sequence_parallel"], f"{where} sequence_parallel") if "sequence_parallel" in r else tp > 1
        dp = n // (tp * pp * cp) if n % (tp * pp * cp) == 0 else 0
        zero = _int(r["zero"], f"{where} zero", lo=0) if "zero" in r else (1 if dp * cp > 1 else 0)
        c = _row_cluster(cluster, n, where)
        job_kw = dict(model=model, cluster=c,
                      global_batch_size=_int(r.get("global_batch_size", model.global_batch_size), f"{where} global_batch_size"),
                      seq_length=_int(r.get("seq_length", model.seq_length), f"{where} seq_length"),
                      flash_attention=_bool(r.get("flash_attention", True), f"{where} flash_attention"),
                      tp_comm_overlap=_bool(r.get("tp_comm_overlap", False), f"{where} tp_comm_overlap"))
        if "precision" in r:
            job_kw["precision"] = str(r["precision"]).lower()
        from .catalog import build

        job = build(JobSpec, job_kw, f"{where}")
        cfg = dict(tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=recompute, sequence_parallel=sp, zero=zero)
        try:
            plan = evaluate_config(job, **cfg)
        except InputError as exc:
            raise InputError("--steps", f"{where}: {exc}") from None
        label = str(r.get("label") or r.get("name") or r.get("id") or
                    f"{model.name} tp{tp} pp{pp} dp{dp}" + (f" cp{cp}" if cp > 1 else "") + (f" vp{vp}" if vp > 1 else "")
                    + f" mbs{mbs} {recompute}")
        out.append(StepRow(i, label, job, cfg, t, before_s=plan.step_time_s, fits_memory=plan.fits))
    return out


GPU_PARAMS = {  # name: (lower, upper, scale, unit)
    "matmul_efficiency": (0.02, 1.0, 0.1, ""),
    "layer_overhead_us": (0.0, 20000.0, 100.0, "us"),
    "attention_efficiency": (0.02, 1.0, 0.1, ""),
}
GPU_GRID = {
    "matmul_efficiency": (0.3, 0.5, 0.7, 0.9),
    "layer_overhead_us": (0.0, 100.0, 400.0, 1500.0),
    "attention_efficiency": (0.2, 0.45, 0.7),
}


def gpu_params(base_gpu, names: Sequence[str], bounds: Optional[dict] = None) -> list[Param]:
    out = []
    for name in names:
        lo, hi, scale, unit = (bounds or {}).get(name, GPU_PARAMS[name])
        out.append(Param(name, float(getattr(base_gpu, name)), lo, hi, scale, unit))
    return out


def grid_seeds(params: Sequence[Param]) -> list[dict]:
    import itertools

    free = [p for p in params if not p.fixed]
    return [dict(zip([p.name for p in free], combo)) for combo in itertools.product(*(GPU_GRID[p.name] for p in free))]


def predict_steps(rows: list[StepRow], gpu_update: dict) -> np.ndarray:
    from .cli.evaluate import evaluate_config

    out = np.empty(len(rows))
    for k, row in enumerate(rows):
        c = row.job.cluster
        job = row.job.model_copy(update={"cluster": c.model_copy(update={"gpu": c.gpu.model_copy(update=gpu_update)})})
        out[k] = evaluate_config(job, **row.config).step_time_s
    return out


def fit_steps(rows: list[StepRow], cluster: ClusterSpec, source: str) -> StepFit:
    names = ["matmul_efficiency", "layer_overhead_us"]
    if any(r.job.flash_attention for r in rows):
        names.append("attention_efficiency")
    if len(rows) < len(names):
        raise InputError("--steps", (
            f"{len(rows)} measured step(s) in {source} for {len(names)} parameters ({', '.join(names)}); measure at "
            f"least {len(names) - len(rows)} more configuration(s), e.g. the same model at another micro-batch size "
            "and another sequence length"))
    # the same configuration measured twice must agree
    seen: dict[tuple, StepRow] = {}
    for r in rows:
        key = (r.job.model.name, r.job.cluster.num_gpus, r.job.global_batch_size, r.job.seq_length,
               r.job.flash_attention, r.job.precision, tuple(sorted(r.config.items())))
        if key in seen:
            a = seen[key]
            hi, lo = max(a.measured_s, r.measured_s), min(a.measured_s, r.measured_s)
            if hi / lo > DUPLICATE_SPREAD:
                raise InputError("--steps", (
                    f"{source} rows {a.index} and {r.index} are the same configuration but measured {a.measured_s:.4g} s "
                    f"and {r.measured_s:.4g} s; remeasure it (skip warm-up steps, average 20+ steps on an idle cluster)"))
        else:
            seen[key] = r
    params = gpu_params(cluster.gpu, names)
    meas = np.array([r.measured_s for r in rows])

    def resid(v):
        return np.log(predict_steps(rows, v) / meas)

    fit = fit_least_squares(resid, params, seeds=grid_seeds(params), diff_step=1e-6)
    before = np.array([r.before_s for r in rows])
    after = predict_steps(rows, fit.values)
    for r, a in zip(rows, after):
        r.after_s = float(a)
    out = StepFit(rows, params, rms_before=float(np.sqrt(np.mean(np.log(before / meas) ** 2))),
                  rms_after=fit.rms, dof=fit.dof)
    for p in params:
        if p.at_bound:
            side = "upper" if p.value >= p.upper - 1e-9 * max(1, p.upper) else "lower"
            if fit.rms > BAD_FIT_RMS:
                faster = side == "upper" if p.name != "layer_overhead_us" else side == "lower"
                raise InputError("--steps", (
                    f"{p.name} is pinned at its {side} bound {p.lower if side == 'lower' else p.upper:g} with "
                    f"{fit.rms:.0%} rms error: the measured steps in {source} are "
                    f"{'faster' if faster else 'slower'} than the formulation can explain; check the GPU type, the "
                    "cluster size and each row's tp/pp/micro-batch/recompute, then measure again"))
            out.notes.append(f"{p.name} sits at its {side} bound ({p.value:g}); the fit is still within "
                             f"{fit.rms:.1%} rms, so it is kept, but the value is a limit, not an estimate.")
        if not p.fixed and not math.isfinite(p.sd) and fit.dof > 0:
            out.notes.append(f"{p.name} is not determined by these measurements (its effect is confounded with the "
                             "others); vary the sequence length and the micro-batch size to separate them.")
    if fit.dof == 0:
        out.notes.append("as many measurements as parameters: an exact fit with no uncertainty estimate; add "
                         "measurements to get one.")
    for r in rows:
        if r.fits_memory is False:
            out.notes.append(f"row {r.index} ({r.label}): the formulation's memory estimate says this configuration "
                             "does not fit, yet it ran: the memory model is conservative for it.")
    return out


# ---------------------------------------------------------------------------------- driver
@dataclass
class Calibration:
    base: ClusterSpec
    cluster: ClusterSpec
    links: dict[str, LinkFit]
    steps: Optional[StepFit]
    step_source: str = ""
    log_inputs: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        out = [n for lf in self.links.values() for n in lf.notes]
        return out + (self.steps.notes if self.steps else [])

    def cluster_mapping(self) -> dict:
        """A mapping `load_cluster` accepts: the cluster with its GPU inline."""
        d = self.cluster.model_dump(mode="json", exclude_none=True)
        d["gpu"] = self.cluster.gpu.model_dump(mode="json", exclude_none=True)
        if not d.get("link_overrides"):
            d.pop("link_overrides", None)
        return d

    def write_yaml(self, path: str | Path) -> None:
        import yaml

        header = (f"# Calibrated by `solveplan calibrate` from {self.base.name}"
                  + (f"; links from {', '.join(self.log_inputs)}" if self.log_inputs else "")
                  + (f"; GPU efficiencies from {self.step_source}" if self.steps else "") + ".\n"
                  "# Use it as --cluster with optimize, evaluate and the API.\n")
        Path(path).write_text(header + yaml.safe_dump(self.cluster_mapping(), sort_keys=False, width=110))

    # ------------------------------------------------------------------ report
    def report_markdown(self) -> str:
        L = [f"# Calibration of `{self.base.name}` -> `{self.cluster.name}`", ""]
        L.append(f"Cluster: {self.base.num_nodes} node(s) x {self.base.gpus_per_node} {self.base.gpu.name}; "
                 f"NVLink {self.base.nvlink_gbyte_per_s:g} GB/s, NIC {self.base.nic_gbit_per_s:g} Gbit/s per GPU per "
                 "direction (nominal). Fits: bounded least squares on log(predicted/measured); +- is one standard "
                 "deviation from the Jacobian and the residual spread.")
        L.append("")
        if self.links:
            L += ["## Links (nccl-tests)", "",
                  "| class | logs | points | sizes | latency us: before -> fitted | bus bandwidth GB/s: before -> fitted | "
                  "efficiency: before -> fitted | rms error before -> after |",
                  "|---|---|---|---|---|---|---|---|"]
            for cls, lf in self.links.items():
                bnom = lf.logs[0].nominal_bytes_per_s
                lat, eff = lf.latency, lf.efficiency
                pm = lambda p, k=1.0, fmt="{:.3g}": (fmt.format(p.value * k) + (  # noqa: E731
                    f" +- {fmt.format(p.sd * k)}" if math.isfinite(p.sd) else (" (kept)" if p.fixed else " +- n/a")))
                meas = np.array([p.measured_us for p in lf.points])
                rb = _rms_log([p.before_us for p in lf.points], meas)
                ra = _rms_log([p.after_us for p in lf.points], meas)
                L.append(f"| {cls} | {len(lf.logs)} | {len(lf.points)} | {len({p.size_bytes for p in lf.points})} | "
                         f"{lat.before:.3g} -> {pm(lat)} | {eff.before * bnom / 1e9:.4g} -> {pm(eff, bnom / 1e9, '{:.4g}')} | "
                         f"{eff.before:.3g} -> {pm(eff)} | {rb:.1%} -> {ra:.1%} |")
            L += ["", "Efficiency = fitted bus bandwidth / the nominal bandwidth the formulation assigns the group "
                  "(NVLink per GPU; k NICs per rank for k ranks per node across nodes).", "",
                  "| log | op | ranks | ranks/node | class | nominal GB/s | how decided |", "|---|---|---|---|---|---|---|"]
            for cls, lf in self.links.items():
                for lg in lf.logs:
                    L.append(f"| {lg.run.source} | {lg.op} | {lg.nranks} | {lg.ranks_per_node} | {cls} | "
                             f"{lg.nominal_bytes_per_s / 1e9:.4g} | op {lg.run.op_from or 'given'}; {lg.how} |")
            L += ["", "Per message size (geometric mean of out-of-place and in-place):", "",
                  "| log | line | size | measured us | before us | err | after us | err |", "|---|---|---|---|---|---|---|---|"]
            for cls, lf in self.links.items():
                for a, b in zip(lf.points[::2], lf.points[1::2]):
                    m = math.sqrt(a.measured_us * b.measured_us)
                    L.append(f"| {a.log.run.source} | {a.line} | {_fmt_bytes(a.size_bytes)} | {m:.4g} | {a.before_us:.4g} | "
                             f"{a.before_us / m - 1:+.1%} | {a.after_us:.4g} | {a.after_us / m - 1:+.1%} |")
            L.append("")
        if self.steps:
            sf = self.steps
            L += ["## GPU efficiencies (measured steps)", "",
                  f"{len(sf.rows)} measurements from {self.step_source}, {len([p for p in sf.params if not p.fixed])} "
                  f"parameters, {sf.dof} degrees of freedom; rms error {sf.rms_before:.1%} before -> {sf.rms_after:.1%} after.", "",
                  "| parameter | before | fitted | +- sd | bounds |", "|---|---|---|---|---|"]
            for p in sf.params:
                sd = f"{p.sd:.3g}" if math.isfinite(p.sd) else "n/a"
                L.append(f"| {p.name} | {p.before:.4g} | {p.value:.4g}{' (at bound)' if p.at_bound else ''} | {sd} | "
                         f"[{p.lower:g}, {p.upper:g}] {p.unit} |")
            L += ["", "| row | configuration | measured s | before s | err | after s | err |", "|---|---|---|---|---|---|---|"]
            for r in sf.rows:
                L.append(f"| {r.index} | {r.label} | {r.measured_s:.4g} | {r.before_s:.4g} | {r.before_s / r.measured_s - 1:+.1%} | "
                         f"{r.after_s:.4g} | {r.after_s / r.measured_s - 1:+.1%} |")
            L.append("")
        if self.notes:
            L += ["## Notes", ""] + [f"- {n}" for n in self.notes] + [""]
        return "\n".join(L)

    def plot(self, path: str | Path) -> None:
        """Links: time and bus bandwidth against message size (measured, before, fitted);
        steps: predicted against measured, and each row's error before and after."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = list(self.links.values()) + ([self.steps] if self.steps else [])
        if not panels:
            raise InputError("--plot", "nothing to plot: give --nccl-tests logs or --steps")
        fig, axes = plt.subplots(2, len(panels), figsize=(5.2 * len(panels), 8.2), squeeze=False)
        for col, pan in enumerate(panels):
            top, bottom = axes[0][col], axes[1][col]
            if isinstance(pan, LinkFit):
                for k, lg in enumerate(pan.logs):
                    pts = [p for p in pan.points if p.log is lg]
                    S = np.array([p.size_bytes for p in pts], dtype=float)
                    t = np.array([p.measured_us for p in pts])
                    color = f"C{k}"
                    grid = np.geomspace(S.min(), S.max(), 100)
                    before = formulation_time_us(self.base, lg, grid)
                    after = formulation_time_us(self.cluster, lg, grid)
                    top.loglog(S, t, "o", ms=3, color=color, label=f"{lg.run.source} ({lg.op}, {lg.nranks} ranks)")
                    top.loglog(grid, before, "--", color=color, lw=1, alpha=0.6)
                    top.loglog(grid, after, "-", color=color, lw=1.5)
                    bus = lambda tt, ss: lg.k_bw * ss / (np.asarray(tt) * 1e-6) / 1e9  # noqa: E731
                    bottom.semilogx(S, bus(t, S), "o", ms=3, color=color)
                    bottom.semilogx(grid, bus(before, grid), "--", color=color, lw=1, alpha=0.6)
                    bottom.semilogx(grid, bus(after, grid), "-", color=color, lw=1.5)
                top.set_ylabel("time (us)")
                top.set_title(f"{pan.link_class}: latency {pan.latency.value:.3g} us, efficiency {pan.efficiency.value:.3g}")
                top.plot([], [], "k--", lw=1, alpha=0.6, label="before")
                top.plot([], [], "k-", lw=1.5, label="fitted")
                top.legend(fontsize=7)
                bottom.set_xlabel("message size (bytes)")
                bottom.set_ylabel("bus bandwidth (GB/s)")
                bottom.set_title("bandwidth grows with size: S / (a + S/b)")
            else:
                meas = np.array([r.measured_s for r in pan.rows])
                top.loglog(meas, [r.before_s for r in pan.rows], "x", color="C3", label=f"before (rms {pan.rms_before:.1%})")
                top.loglog(meas, [r.after_s for r in pan.rows], "o", color="C0", label=f"fitted (rms {pan.rms_after:.1%})")
                lo, hi = meas.min() / 1.3, meas.max() * 1.3
                top.plot([lo, hi], [lo, hi], "k-", lw=0.8)
                top.set_xlabel("measured step time (s)")
                top.set_ylabel("predicted step time (s)")
                top.set_title("measured steps")
                top.legend(fontsize=7)
                x = np.arange(len(pan.rows))
                bottom.bar(x - 0.2, [100 * (r.before_s / r.measured_s - 1) for r in pan.rows], 0.4, color="C3", label="before")
                bottom.bar(x + 0.2, [100 * (r.after_s / r.measured_s - 1) for r in pan.rows], 0.4, color="C0", label="fitted")
                bottom.axhline(0, color="k", lw=0.8)
                bottom.set_xticks(x, [str(r.index) for r in pan.rows])
                bottom.set_xlabel("row")
                bottom.set_ylabel("error (%)")
                bottom.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def _sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (the YAML stays readable; far inside the fit's uncertainty)."""
    x = float(x)
    return x if x == 0 or not math.isfinite(x) else float(f"{x:.{digits}g}")


def _rms_log(pred, meas) -> float:
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    return float(np.sqrt(np.mean(np.log(pred / meas) ** 2))) if len(meas) else math.nan


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def calibrate(cluster: ClusterSpec, logs: Sequence[str] = (), steps: Optional[str] = None,
              name: Optional[str] = None) -> Calibration:
    """Fit the cluster's link parameters from nccl-tests logs (`LOG[:class][:op]`) and its
    GPU efficiencies from a measured-steps file; returns the calibrated cluster and the fits."""
    if not logs and not steps:
        raise InputError("calibrate", "nothing to fit: give --nccl-tests LOG... and/or --steps FILE")
    inputs = [parse_log_arg(a) for a in logs]
    by_class: dict[str, list[LinkLog]] = {}
    for inp in inputs:
        run = parse_nccl_log(inp.path)
        lg = classify_log(run, inp, cluster)
        by_class.setdefault(lg.link_class, []).append(lg)
    links: dict[str, LinkFit] = {}
    update: dict = {}
    for cls in LINK_CLASSES:  # NVLink first: the network fit's "after" uses its NVLink cap
        if cls not in by_class:
            continue
        lf = fit_link_class(cls, by_class[cls], cluster)
        links[cls] = lf
        update[lf.latency.name] = _sig(lf.latency.value)
        update[lf.efficiency.name] = _sig(min(lf.efficiency.value, 1.0))
        if lf.nominal_after != lf.nominal_before:
            lf.nominal_after = _sig(lf.nominal_after)
            update[lf.nominal_field] = lf.nominal_after
    new = cluster.model_copy(update=update)
    if name:
        new = new.model_copy(update={"name": name})
    parts = [f"{cls} from {', '.join(lg.run.source for lg in lf.logs)}" for cls, lf in links.items()]
    for lf in links.values():
        for p in lf.points:
            p.before_us = float(formulation_time_us(cluster, p.log, p.size_bytes))
            p.after_us = float(formulation_time_us(new, p.log, p.size_bytes))
        after = _rms_log([p.after_us for p in lf.points], [p.measured_us for p in lf.points])
        if after > lf.rms + 0.02:
            lf.notes.append(f"{lf.link_class}: the formulation with the fitted values misses these points by {after:.1%} rms "
                            f"against the fitted line's {lf.rms:.1%}: it caps a cross-node group's bandwidth at NVLink's "
                            "attained bandwidth, which this log exceeds.")
    step_fit = None
    step_source = ""
    if steps:
        step_source = Path(steps).name
        rows = build_step_rows(read_steps(steps), new, step_source)
        if not rows:
            raise InputError("--steps", f"{step_source} holds no measurements")
        # "before" = the cluster as given (links included), as a user would have predicted
        if links:
            base_rows = build_step_rows(read_steps(steps), cluster, step_source)
            for r, b in zip(rows, base_rows):
                r.before_s = b.before_s
        step_fit = fit_steps(rows, new, step_source)
        fitted = {p.name: _sig(p.value) for p in step_fit.params}
        notes = (f"calibrated by solveplan calibrate on {len(rows)} measured steps ({step_source}): "
                 + ", ".join(f"{k}={v:.4g}" for k, v in fitted.items())
                 + f"; rms error {step_fit.rms_before:.1%} -> {step_fit.rms_after:.1%}")
        gpu = new.gpu.model_copy(update={**fitted, "fit_notes": notes,
                                         "source": f"{new.gpu.source.strip()} Efficiencies: {notes}."})
        new = new.model_copy(update={"gpu": gpu})
        parts.append(f"GPU efficiencies from {step_source}")
    new = new.model_copy(update={"source": f"{cluster.name} calibrated by solveplan calibrate: " + "; ".join(parts)})
    # re-validate through the spec (model_copy does not)
    from .catalog import build

    gpu = build(type(new.gpu), new.gpu.model_dump(), "gpu")
    new = build(ClusterSpec, {**new.model_dump(exclude={"gpu"}), "gpu": gpu}, "cluster")
    return Calibration(cluster, new, links, step_fit, step_source, [inp.path for inp in inputs])
