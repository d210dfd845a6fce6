"""Links, from nccl-tests logs. Each log is one link class: NVLink inside a node or the
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

A parameter the log cannot identify keeps the cluster's value, said in a note: the latency
when even the smallest message is bandwidth-bound; the efficiency when even the largest is
latency-bound. Whether the largest messages are latency-bound is read from the data (the time's
growth with size over the top quarter of sizes, `NcclRun.top_slope`: 1 when the time is proportional
to the size, 0 when flat), not from the prior alone: a log whose bus bandwidth is 8x below the
prior looks latency-bound at the prior efficiency, and keeping the prior there is what
issue 24 caught (40 GB/s measured, 320 predicted, "latency-bound", 113% rms). A fitted value
more than PRIOR_TOLERANCE times away from the cluster's (either way) is a contradiction of the
prior: the data's value is used and a note says by how much.

Refusals (`InputError`, one line saying what to measure next): fewer than 3 message sizes
in a class; time falling with message size beyond the noise seen between out-of-place and
in-place; a latency fitted to zero, or a parameter pinned at a bound, with large residuals;
a kept parameter that leaves large residuals (the prior contradicts the data and the data
cannot set it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..formulation import comm
from ..specs import ClusterSpec
from ..specs.units import GBIT_BYTES
from .fit import BAD_FIT_RMS, Param, fit_least_squares, fmt_bytes
from .nccl_tests import BANDWIDTH_REGIME_SLOPE, NcclRun, canonical_op

LINK_CLASSES = ("nvlink", "network")
FITTABLE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
MIN_SIZES = 3
# A latency (or bandwidth) term below this share of the time at its most favourable message
# size cannot be fitted: the parameter is kept at its current value and the report says so.
MIN_TERM_SHARE = 0.25
LATENCY_FLOOR_US = 1e-3  # ClusterSpec latencies are positive
PRIOR_TOLERANCE = 2.0  # a fitted latency or efficiency beyond 2x (or 1/2x) the cluster's contradicts it


@dataclass
class LogInput:
    path: str
    link_class: str | None = None  # hint
    op: str | None = None  # hint


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
            raise InputError("nccl_tests", f"{arg!r}: unknown hint {tok!r}; use LOG, LOG:nvlink or LOG:network "
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
    nic = cluster.nic_gbit_per_s * GBIT_BYTES
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
                f"{fmt_bytes(run.out_of_place[peak_i].size_bytes)} to {t:.1f} us at {fmt_bytes(run.out_of_place[i].size_bytes)}, "
                f"beyond the {tol:.0%} noise between out-of-place and in-place; rerun on an idle link with more "
                "iterations (-w 20 -n 100)"))
        if t > peak_t:
            peak_t, peak_i = t, i


@dataclass
class _AlphaBeta:
    """The fit's points as arrays: size S, measured time t (us), the operation's latency and
    bandwidth factors ka, kb, and the nominal bandwidth B; the model t = ka a + kb S / (e B)
    with a, e under the cluster's field names."""

    S: np.ndarray
    t: np.ndarray
    ka: np.ndarray
    kb: np.ndarray
    B: np.ndarray
    lat_field: str
    eff_field: str

    @classmethod
    def of(cls, points: list[LinkPoint], link_class: str) -> _AlphaBeta:
        return cls(np.array([p.size_bytes for p in points], dtype=np.float64), np.array([p.measured_us for p in points]),
                   np.array([p.log.k_lat for p in points]), np.array([p.log.k_bw for p in points]),
                   np.array([p.log.nominal_bytes_per_s for p in points]), f"{link_class}_latency_us",
                   f"{link_class}_efficiency")

    def model_us(self, v):
        return self.ka * v[self.lat_field] + self.kb * self.S / (v[self.eff_field] * self.B) * 1e6

    def resid(self, v):
        return np.log(self.model_us(v) / self.t)


def fit_link_class(cls: str, logs: list[LinkLog], cluster: ClusterSpec) -> LinkFit:
    names = ", ".join(sorted({lg.run.source for lg in logs}))
    points = _link_points(cls, logs, names)
    ab = _AlphaBeta.of(points, cls)
    S, t, ka, kb, B = ab.S, ab.t, ab.ka, ab.kb, ab.B
    lat0, eff0 = getattr(cluster, ab.lat_field), getattr(cluster, ab.eff_field)
    lat = Param(ab.lat_field, lat0, LATENCY_FLOOR_US, 1e5, max(lat0, 1.0), "us")
    eff = Param(ab.eff_field, eff0, 1e-4, 20.0, max(eff0, 0.1))
    seeds = [{ab.lat_field: float(np.min(t / ka)) * f, ab.eff_field: float(np.max(kb * S * 1e6 / (t * B)))}
             for f in (0.3, 0.7)]
    fit = fit_least_squares(ab.resid, [lat, eff], seeds=seeds)
    out = LinkFit(cls, logs, points, lat, eff)
    _refuse_if_contradictory(cls, fit, lat, eff, names)
    fit = _keep_unidentifiable(out, ab, fit)
    _refuse_if_contradictory(cls, fit, lat, eff, names)
    _judge_priors(out, fit, names, float(np.median(B)))
    out.rms = fit.rms
    if fit.rms > 0.35:
        out.notes.append(f"{cls}: the alpha-beta line leaves {fit.rms:.0%} rms error on these logs (NCCL switches "
                         "algorithms and protocols with size); the fitted values are the formulation's best compromise.")
    _map_onto_cluster(out, cluster)
    return out


def _link_points(cls: str, logs: list[LinkLog], names: str) -> list[LinkPoint]:
    """Every result of the class's logs (out-of-place and in-place) of a positive size, after
    the checks on the sizes measured and on time falling with size."""
    sizes = sorted({r.size_bytes for lg in logs for r in lg.run.out_of_place if r.size_bytes > 0})
    if len(sizes) < MIN_SIZES:
        raise InputError("nccl_tests", f"{cls}: {len(sizes)} message size(s) in {names}; measure at least "
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
    return points


def _refuse_if_contradictory(cls: str, fit, lat: Param, eff: Param, names: str) -> None:
    if fit.rms <= BAD_FIT_RMS:
        return
    if not lat.fixed and lat.value <= LATENCY_FLOOR_US * 1.01:
        raise InputError("nccl_tests", (
            f"{cls}: the latency fits to 0 with {fit.rms:.0%} rms error in {names}: small messages run faster than "
            "the large-message bandwidth allows, so the points do not follow t = a + S/b; check that every log of "
            "the class measures the same link (hint LOG:nvlink / LOG:network) and rerun from 8 B to 1 GiB "
            "(-b 8 -e 1G -f 2)"))
    for p in (lat, eff):
        if p.at_bound:
            raise InputError("nccl_tests", (
                f"{cls}: {p.name} is pinned at its bound {p.value:.3g} with {fit.rms:.0%} rms error in {names}: "
                "the points do not follow t = a + S/b; check the logs measure one link each and rerun from 8 B "
                "to 1 GiB (-b 8 -e 1G -f 2) on an idle link"))


def _keep_unidentifiable(out: LinkFit, ab: _AlphaBeta, fit):
    """Identifiability: each term must matter somewhere, else its parameter keeps the cluster's
    value and the other is refitted (the fit returned). The bandwidth term is judged both with
    the fitted values and with the cluster's prior efficiency: a latency-bound log (stopped at
    64 KiB) is fitted just as well by a tiny efficiency, whose bandwidth term then looks large."""
    cls, lat, eff = out.link_class, out.latency, out.efficiency
    S, t, ka, kb, B = ab.S, ab.t, ab.ka, ab.kb, ab.B
    lat0, eff0 = lat.before, eff.before
    pred = ab.model_us(fit.values)
    lat_share = float(np.max(ka * lat.value / pred))
    bw_share = float(np.max(1 - ka * lat.value / pred))
    prior_bw_share = float(np.max(kb * S / (eff0 * B) * 1e6 / t))
    slopes = [lg.run.top_slope() for lg in out.logs]
    data_bw_regime = any(x >= BANDWIDTH_REGIME_SLOPE for x in slopes if not math.isnan(x))
    if not data_bw_regime:
        bw_share = min(bw_share, prior_bw_share)
    elif prior_bw_share < MIN_TERM_SHARE:
        out.notes.append(f"{cls}: the largest messages are bandwidth-bound in the data (time grows as "
                         f"size^{max(x for x in slopes if not math.isnan(x)):.2f}) although at the prior efficiency "
                         f"{eff0:g} the bandwidth term would be {prior_bw_share:.0%} of their time: the link is far "
                         f"slower than the cluster file says; the efficiency is fitted from the data.")
    if lat_share < MIN_TERM_SHARE:
        lat.fixed, lat.value, lat.sd = True, lat0, math.nan
        lat.note = "kept: not identifiable"
        out.notes.append(f"{cls}: latency is under {MIN_TERM_SHARE:.0%} of even the smallest message's time "
                         f"({fmt_bytes(int(S.min()))}); kept {lat0:g} us. Measure down to 8 B (-b 8) to fit it.")
        return fit_least_squares(ab.resid, [lat, eff])
    if bw_share < MIN_TERM_SHARE:
        eff.fixed, eff.value, eff.sd = True, eff0, math.nan
        eff.note = "kept: not identifiable"
        out.notes.append(f"{cls}: even the largest message ({fmt_bytes(int(S.max()))}) is latency-bound (at the prior "
                         f"efficiency the bandwidth term is {bw_share:.0%} of its time), so the log cannot tell the "
                         f"bandwidth; kept efficiency {eff0:g}. Measure up to 1 GiB (-e 1G) to fit it.")
        return fit_least_squares(ab.resid, [lat, eff])
    return fit


def _judge_priors(out: LinkFit, fit, names: str, median_nominal: float) -> None:
    """A kept parameter that leaves large residuals is refused; a fitted one far from the
    cluster's value is noted."""
    cls, lat, eff = out.link_class, out.latency, out.efficiency
    for p in (lat, eff):
        if p.fixed and fit.rms > BAD_FIT_RMS:
            raise InputError("nccl_tests", (
                f"{cls}: the log cannot set {p.name} (kept at {p.before:g}) and with it the fit leaves {fit.rms:.0%} "
                f"rms error in {names} (tolerance {BAD_FIT_RMS:.0%}): the cluster's value contradicts the data; "
                f"measure from 8 B to 1 GiB (-b 8 -e 1G -f 2) so that both terms can be fitted"))
        if not p.fixed and p.before > 0 and not (1 / PRIOR_TOLERANCE <= p.value / p.before <= PRIOR_TOLERANCE):
            what = (f"measured bus bandwidth {p.value * median_nominal / 1e9:.4g} GB/s against the "
                    f"{p.before * median_nominal / 1e9:.4g} GB/s of efficiency {p.before:g}" if p is eff
                    else f"latency {p.value:.3g} us against {p.before:g} us")
            out.notes.append(f"{cls}: the data contradict the cluster file by {max(p.value / p.before, p.before / p.value):.1f}x "
                             f"(more than the {PRIOR_TOLERANCE:g}x tolerance): {what}; {p.name} is set from the data "
                             f"to {p.value:.4g}. " + ("Check the fabric (NIC count, GPUDirect RDMA, link speed) if that is "
                                                        "unexpected." if p is eff else "Check that the log measures "
                                                        "the link you meant if that is unexpected."))


def _map_onto_cluster(out: LinkFit, cluster: ClusterSpec) -> None:
    """The fit onto the ClusterSpec fields: an efficiency above 1 raises the nominal bandwidth."""
    cls, eff = out.link_class, out.efficiency
    nominal_field = "nvlink_gbyte_per_s" if cls == "nvlink" else "nic_gbit_per_s"
    out.nominal_field = nominal_field
    out.nominal_before = out.nominal_after = float(getattr(cluster, nominal_field))
    if eff.value > 1.0:
        out.nominal_after = out.nominal_before * eff.value
        out.notes.append(f"{cls}: measured bus bandwidth is {eff.value:.2f}x the nominal {out.nominal_before:g} "
                         f"{'GB/s' if cls == 'nvlink' else 'Gbit/s'}; set {nominal_field} to {out.nominal_after:.4g} "
                         f"with efficiency 1 (check gpus_per_node and the NIC count if that is unexpected).")
    wrong = sum(lg.run.wrong for lg in out.logs)
    if wrong:
        out.notes.append(f"{cls}: the logs report {wrong} wrong elements: a faulty link or driver; the times may not "
                         "be representative.")
