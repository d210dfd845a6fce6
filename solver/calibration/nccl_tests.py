"""Read the standard output of NVIDIA nccl-tests (`all_reduce_perf`, `all_gather_perf`,
`reduce_scatter_perf`, `sendrecv_perf`, ...) into plain rows.

The layout (nccl-tests src/common.cu; doc/PERFORMANCE.md for the bandwidths):

    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid   6899 on node-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3
    #  ...
    #
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2     float     sum      -1    30.51    0.00    0.00      0    30.09    0.00    0.00      0
    ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 220.921
    #
    # Collective test concluded: all_reduce_perf

Older releases have no `root` column, print `error` instead of `#wrong` (`0e+00`) and
`#   Rank  0 Pid ...` device lines; with `-c 0` the error column reads `N/A`. Releases since
2.17 print `# nccl-tests version ...` and `# Collective test starting: <test>` first; `-I 1`
adds per-iteration columns (`i_min i_max i_p99 i_cv%`) to each half; `-S 1` adds a `timestamp`
column whose cells are `%Y-%m-%d %H:%M:%S` (two tokens), after the in-place half in releases
(src/util.cu writeResultHeader / writeTimestamp), before the size in the first proposal
(nccl-tests PR 349). The column header line decides which columns a row has. `NCCL INFO`/`NCCL
WARN` debug lines may be interleaved anywhere; a launcher prefix in front of every line
(`[1,0]<stdout>:`, `0: `) is taken from the column header line and stripped.

`-J FILE.json` writes the same run as JSON (src/util.cu, JSON_FILE_VERSION 3): `args` (the
command line, whose program names the test), `config.devices` (rank, hostname), `results` (size,
count, type, redop, root, `out_of_place` / `in_place` {time or cpu_time, alg_bw, bus_bw,
nwrong}); `parse_nccl_log` reads it too.

The test (`op`) comes from the log (`*_perf` named in it, or the JSON's program) or the file
name; a log that names neither is left with `op` None for the caller to ask about (calibrate's
`LOG:all_reduce`, links import's `LOG:sendrecv`): busbw/algbw cannot tell an all-reduce over n
ranks from other tests reliably, so it is not guessed.

`parse_nccl_log(path_or_text)` returns an `NcclRun`; a malformed result row is an
`InputError` naming the file and the line number. `format_nccl_log(run)` writes a run back
in the same layout (test fixtures, synthetic logs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

# nccl-tests binary -> operation name used here
OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv", "alltoall", "broadcast", "reduce",
       "gather", "scatter", "hypercube")
_OP_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "ar": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "ag": "all_gather",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter", "rs": "reduce_scatter",
    "sendrecv": "sendrecv", "send_recv": "sendrecv", "p2p": "sendrecv",
    "alltoall": "alltoall", "all_to_all": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
    "gather": "gather", "scatter": "scatter", "hypercube": "hypercube",
}
_PERF_RE = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|sendrecv|alltoall|broadcast|reduce|gather|scatter|hypercube)_perf\b")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)")
# A log's largest messages are in the bandwidth regime when their time grows at least this fast
# with size (NcclRun.top_slope). Under alpha-beta, t = a + S/B grows as S^(S/(S + aB)): 0.7 is
# reached at 2.3x the half-bandwidth size aB, where the measured bus bandwidth is 70% of B.
# Below it the log's bus bandwidth says more about the latency than about the link.
BANDWIDTH_REGIME_SLOPE = 0.7
_NRANKS_RE = re.compile(r"\bnranks\s+(\d+)\b")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_NUM_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK_RE = re.compile(r"^\d{2}:\d{2}:\d{2}$")


def canonical_op(name: str) -> str | None:
    """`all_reduce_perf`, `allreduce`, `AllReduce`, `ar` -> `all_reduce` (None if unknown)."""
    key = name.strip().lower().replace("-", "_")
    key = key[:-5] if key.endswith("_perf") else key
    return _OP_ALIASES.get(key) or _OP_ALIASES.get(key.replace("_", ""))


def busbw_factor(op: str, nranks: int) -> float:
    """busbw / algbw of an operation over `nranks` ranks (nccl-tests doc/PERFORMANCE.md)."""
    n = float(nranks)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class NcclRow:
    """One result of one message size (out-of-place or in-place). `size_bytes` is the
    column nccl-tests prints: the whole buffer for all-gather/reduce-scatter (count is per
    rank there), the per-rank buffer for all-reduce and send/receive. (A record, not a
    NamedTuple: a tuple's field `count` would hide tuple.count.)"""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbs: float
    busbw_gbs: float


@dataclass
class NcclRun:
    source: str  # file name, or "<text>"
    op: str | None  # canonical name (OPS) or None when the log does not say
    nranks: int | None  # stated rank count (device lines or NCCL INFO `nranks`), else None
    out_of_place: list[NcclRow] = field(default_factory=list)
    in_place: list[NcclRow] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)  # 1-based line of each row (both lists share it)
    hosts: tuple[str, ...] = ()  # distinct host names of the device lines, in rank order
    redop: str | None = None
    avg_busbw_gbs: float | None = None
    wrong: int = 0  # elements reported wrong (both placements)
    op_from: str = ""  # where `op` came from: "log", "file name", "busbw/algbw ratio", "given"

    @property
    def sizes(self) -> list[int]:
        return sorted({r.size_bytes for r in self.out_of_place})

    def top_slope(self) -> float:
        """d log t / d log S between the largest message and the largest one at most a quarter
        of its size (time: geometric mean of out-of-place and in-place where both are printed);
        nan when the sizes span less than 4x. 1 when the time grows in proportion to the size
        (the bandwidth regime), 0 when it is flat (latency-bound); see BANDWIDTH_REGIME_SLOPE."""
        rows = []
        for i, a in enumerate(self.out_of_place):
            b = self.in_place[i] if i < len(self.in_place) else a
            ta, tb = a.time_us, b.time_us
            if a.size_bytes > 0 and ta > 0:
                rows.append((a.size_bytes, math.sqrt(ta * tb) if tb > 0 else ta))
        rows.sort()
        if not rows:
            return math.nan
        s_max, t_max = rows[-1]
        lower = [(sz, t) for sz, t in rows if sz <= s_max / 4]
        if not lower:
            return math.nan
        s_q, t_q = lower[-1]
        return math.log(t_max / t_q) / math.log(s_max / s_q)

    def ratio_nranks(self, op: str | None = None) -> int | None:
        """Rank count implied by busbw/algbw of the largest message for `op` (default: the
        run's); None when the ratio does not determine it (send/receive, broadcast, or
        bandwidths printed as 0.00)."""
        op = op or self.op
        if op not in ("all_reduce", "all_gather", "reduce_scatter", "alltoall"):
            return None
        rows = [r for r in self.out_of_place + self.in_place if r.algbw_gbs >= 1.0]
        if not rows:
            return None
        r = max(rows, key=lambda x: x.algbw_gbs)
        ratio = r.busbw_gbs / r.algbw_gbs
        denom = 2.0 - ratio if op == "all_reduce" else 1.0 - ratio
        if denom <= 1e-3:
            return None
        n = (2.0 if op == "all_reduce" else 1.0) / denom
        k = round(n)
        return k if k >= 2 and abs(n - k) <= 0.05 * k else None


def _fail(source: str, lineno: int, msg: str) -> InputError:
    return InputError(source, f"line {lineno}: {msg}")


def _op_from_name(name: str) -> str | None:
    """`nccl_allreduce_16gpu.log`, `all_gather_perf.out` -> the operation (longest alias first)."""
    stem = Path(name).name.lower().replace("-", "_")
    for key in sorted((k for k in _OP_ALIASES if len(k) >= 6), key=len, reverse=True):
        if key in stem:
            return _OP_ALIASES[key]
    return None


def _parse_number(tok: str) -> float | None:
    return float(tok) if _NUM_RE.match(tok) else None


def parse_nccl_log(src: str | Path, name: str | None = None) -> NcclRun:
    """Parse one nccl-tests log: a path, or the text itself (a string with a newline, or any
    string that is not a file when `name` is given; `name` labels the source in messages).

    Raises `InputError` whose field is the file name and whose message starts with the
    1-based `line N:` on a malformed result row; naming the file when it holds no result
    table at all."""
    text, source = _read_log(src, name)
    if text.lstrip().startswith("{"):
        return _parse_json(text, source)
    lines = text.splitlines()
    table = _result_table(lines, source)
    op = None
    op_from = ""
    ranks: dict[int, str] = {}
    nranks_info = []
    run = NcclRun(source=source, op=None, nranks=None)
    in_table = False
    for i, raw in enumerate(lines):
        line = table.strip(raw).strip()
        if not line:
            continue
        m = _PERF_RE.search(line)
        if m and op is None and "NCCL INFO" not in line:
            op, op_from = m.group(1), "log"
        if "NCCL INFO" in line or "NCCL WARN" in line:
            mr = _NRANKS_RE.search(line)
            if mr:
                nranks_info.append(int(mr.group(1)))
            continue
        if line.startswith("#"):
            mr = _RANK_RE.match(line)
            if mr:
                ranks[int(mr.group(1))] = mr.group(2)
            ma = _AVG_RE.match(line)
            if ma:
                run.avg_busbw_gbs = _parse_number(ma.group(1))
                in_table = False
            if _OOB_RE.match(line):
                in_table = False
            if i == table.header_at:
                in_table = True
            continue
        if not in_table or i < table.header_at:
            continue  # launcher output, prompts, environment dumps before the table
        _result_row(run, table, source, i + 1, line)
    if not run.out_of_place:
        raise _fail(source, table.header_at + 1, "the result table has no rows (the run stopped before the first size?)")
    _ranks_and_op(run, ranks, nranks_info, op, op_from)
    return run


def _read_log(src: str | Path, name: str | None) -> tuple[str, str]:
    """The log's text and the name of its source (`parse_nccl_log`)."""
    is_path = isinstance(src, Path) or ("\n" not in str(src) and (name is None or Path(str(src)).is_file()))
    if not is_path:
        return str(src), name or "<text>"
    path = Path(src)
    if not path.is_file():
        raise InputError(str(path), "file does not exist")
    from ..catalog import read_text  # the safe reader of every user file

    return read_text(path, str(path)), name or path.name


@dataclass
class _Table:
    """The result table's column header: its line, its columns, the launcher prefix in front of
    every line, the out-of-place and in-place `time` columns, and the time unit."""

    header_at: int
    columns: list[str]
    prefix: str
    times: list[int]
    time_scale: float  # to microseconds

    @property
    def lead(self) -> int:  # size count type redop [root]
        return self.times[0]

    @property
    def width(self) -> int:
        return len(self.columns)

    def strip(self, raw: str) -> str:
        return raw[len(self.prefix):] if self.prefix.strip() and raw.startswith(self.prefix) else raw


def _result_table(lines: list[str], source: str) -> _Table:
    """The column header: '# ... size ... count ... type ... time ... algbw ... busbw ...' (one)."""
    header_at, columns, prefix = None, None, ""
    for i, raw in enumerate(lines):
        k = raw.find("#")
        if k < 0:
            continue
        toks = [t for t in raw[k + 1:].split() if t != "timestamp"]  # -S 1 (either end)
        if toks[:3] == ["size", "count", "type"] and "algbw" in toks and "busbw" in toks:
            if header_at is not None:
                raise _fail(source, i + 1, f"a second result table (the first starts at line {header_at + 1}); "
                                           "give one nccl-tests run per file")
            header_at, columns, prefix = i, toks, raw[:k]
    if header_at is None or columns is None:
        raise InputError(source, f"no nccl-tests result table (no '#  size  count  type ... algbw  busbw' header "
                                 f"line in {len(lines)} lines); is this the output of an nccl-tests binary such as "
                                 "all_reduce_perf?")
    times = [j for j, c in enumerate(columns) if c in ("time", "cputime")]
    if len(times) != 2:
        raise _fail(source, header_at + 1, "expected out-of-place and in-place 'time algbw busbw' columns")
    time_scale = 1.0
    if header_at + 1 < len(lines) and "(ms)" in lines[header_at + 1]:
        time_scale = 1000.0
    return _Table(header_at, columns, prefix, times, time_scale)


def _result_row(run: NcclRun, table: _Table, source: str, lineno: int, line: str) -> None:
    """One result row (one message size) into `run`: its out-of-place and in-place halves."""
    toks = _drop_timestamp(line.split())
    if len(toks) != table.width:
        raise _fail(source, lineno, f"expected {table.width} columns ({' '.join(table.columns)}), got {len(toks)}: "
                                    f"{line[:80]!r}")
    size, count = _parse_number(toks[0]), _parse_number(toks[1])
    if size is None or count is None or size != int(size) or count != int(count) or size < 0:
        raise _fail(source, lineno, f"size and count must be non-negative integers (got {toks[0]!r}, {toks[1]!r})")
    dtype = toks[2]
    if table.lead >= 4:
        run.redop = run.redop or toks[3]
    halves = []
    for start in table.times:
        t, alg, bus = (_parse_number(x) for x in toks[start:start + 3])
        wrong_tok = toks[start + 3].rstrip("*")
        if t is None or alg is None or bus is None:
            raise _fail(source, lineno, f"time/algbw/busbw must be numbers (got {' '.join(toks[start:start + 3])})")
        if not (t > 0 and math.isfinite(t)) or alg < 0 or bus < 0:
            raise _fail(source, lineno, f"time must be positive and bandwidths non-negative "
                                        f"(got {' '.join(toks[start:start + 3])})")
        if wrong_tok != "N/A":
            w = _parse_number(wrong_tok)
            if w is None:
                raise _fail(source, lineno, f"the #wrong column must be a number or N/A (got {toks[start + 3]!r})")
            run.wrong += int(w)
        halves.append(NcclRow(int(size), int(count), dtype, t * table.time_scale, alg, bus))
    run.out_of_place.append(halves[0])
    run.in_place.append(halves[1])
    run.line_numbers.append(lineno)


def _ranks_and_op(run: NcclRun, ranks: dict[int, str], nranks_info: list[int], op: str | None,
                  op_from: str) -> None:
    """The rank count and hosts (device lines, else NCCL INFO `nranks`), and the operation (the
    log's, else the file name's)."""
    if ranks:
        run.nranks = max(ranks) + 1
        hosts: list[str] = []
        for r in sorted(ranks):
            if ranks[r] not in hosts:
                hosts.append(ranks[r])
        run.hosts = tuple(hosts)
    elif nranks_info:
        run.nranks = max(nranks_info)
    if op is None:
        op = _op_from_name(run.source)
        op_from = "file name" if op else ""
    run.op, run.op_from = op, op_from


def _drop_timestamp(toks: list[str]) -> list[str]:
    """A row without the `-S 1` timestamp (`YYYY-MM-DD HH:MM:SS`, first or last two tokens)."""
    if len(toks) >= 2 and _DATE_RE.match(toks[-2]) and _CLOCK_RE.match(toks[-1]):
        return toks[:-2]
    if len(toks) >= 2 and _DATE_RE.match(toks[0]) and _CLOCK_RE.match(toks[1]):
        return toks[2:]
    return toks


def _parse_json(text: str, source: str) -> NcclRun:
    """nccl-tests' `-J` output (src/util.cu: jsonOutputInit, writeDeviceReport,
    writeBenchmarkLine*, writeResultFooter)."""
    from ..catalog import parse_data

    data = parse_data(text, source, "the log", "json")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise InputError(source, "JSON without a 'results' list: not nccl-tests' -J output")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    op = next((canonical_op(m.group(1)) for a in args for m in [_PERF_RE.search(str(a))] if m), None)
    run = NcclRun(source=source, op=op, nranks=None, op_from="log" if op else "")
    if op is None:
        run.op = _op_from_name(source)
        run.op_from = "file name" if run.op else ""
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = config.get("devices", data.get("devices"))  # writeDeviceReport nests them in "config"
    devices = devices if isinstance(devices, list) else []
    hosts: list[str] = []
    for d in devices:
        if isinstance(d, dict) and d.get("hostname") and d["hostname"] not in hosts:
            hosts.append(str(d["hostname"]))
    run.hosts = tuple(hosts)
    run.nranks = len(devices) or None
    for i, r in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(r, dict):
            raise InputError(source, f"{where}: must be an object")
        size, count = r.get("size"), r.get("count")
        if not isinstance(size, int) or not isinstance(count, int) or size < 0:
            raise InputError(source, f"{where}: size and count must be non-negative integers (got {size!r}, {count!r})")
        run.redop = run.redop or r.get("redop")
        halves = []
        for key in ("out_of_place", "in_place"):
            h = r.get(key)
            if not isinstance(h, dict):
                raise InputError(source, f"{where}.{key}: missing (trace replay without both placements?)")
            t, alg, bus = h.get("time", h.get("cpu_time")), h.get("alg_bw"), h.get("bus_bw")
            nums = [v for v in (t, alg, bus) if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if len(nums) < 3 or nums[0] <= 0:  # nums[0] is the time when all three are numbers
                raise InputError(source, f"{where}.{key}: time/alg_bw/bus_bw must be numbers, time positive "
                                         f"(got {t!r}, {alg!r}, {bus!r})")
            if isinstance(h.get("nwrong"), (int, float)):
                run.wrong += int(h["nwrong"])
            halves.append(NcclRow(size, count, str(r.get("type")), float(nums[0]), float(nums[1]), float(nums[2])))
        run.out_of_place.append(halves[0])
        run.in_place.append(halves[1])
        run.line_numbers.append(i + 1)
    if not run.out_of_place:
        raise InputError(source, "the JSON has no results (the run stopped before the first size?)")
    avg = data.get("average_bus_bandwidth")
    if isinstance(avg, dict) and isinstance(avg.get("bandwidth"), (int, float)):
        run.avg_busbw_gbs = float(avg["bandwidth"])
    return run


def _time_str(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_nccl_log(run: NcclRun, *, gpu_name: str = "NVIDIA H100 80GB HBM3", iters: int = 20) -> str:
    """The run in nccl-tests' stdout layout (current releases: Group/root/#wrong columns)."""
    op = run.op or "all_reduce"
    sizes = [r.size_bytes for r in run.out_of_place]
    n = run.nranks or 1
    hosts = run.hosts or ("node-0",)
    per_host = max(1, math.ceil(n / len(hosts)))
    out = [f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: 2(factor) warmup iters: 5 "
           f"iters: {iters} agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for r in range(n):
        host = hosts[min(r // per_host, len(hosts) - 1)]
        dev = r % per_host
        out.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {host:>10s} device {dev:2d} "
                   f"[0000:{0x10 + dev:02x}:00] {gpu_name}")
    out.append("#")
    out.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
               % ("", "", "", "", ""))
    out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
               % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"))
    out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
               % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
    redop = run.redop or ("sum" if op in ("all_reduce", "reduce_scatter", "reduce") else "none")
    root = 0 if op in ("broadcast", "reduce") else -1
    bus = []
    for a, b in zip(run.out_of_place, run.in_place):
        line = "%12li  %12li  %8s  %6s  %6i" % (a.size_bytes, a.count, a.dtype, redop, root)
        for half in (a, b):
            line += "  %7s  %6.2f  %6.2f  %5g" % (_time_str(half.time_us), half.algbw_gbs, half.busbw_gbs, 0)
            bus.append(half.busbw_gbs)
        out.append(line)
    avg = run.avg_busbw_gbs if run.avg_busbw_gbs is not None else (sum(bus) / len(bus) if bus else 0.0)
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#",
            f"# Collective test concluded: {op}_perf", "#", ""]
    return "\n".join(out)


def synthetic_run(op: str, nranks: int, sizes, time_us, *, dtype: str = "float", hosts=(), source="<synthetic>",
                  in_place_factor: float = 1.0) -> NcclRun:
    """An `NcclRun` whose rows carry the given times (one per size), with count, algbw and
    busbw computed as nccl-tests does; `in_place_factor` scales the in-place times."""
    word = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "int32": 4}.get(dtype, 4)
    oop: list[NcclRow] = []
    inp: list[NcclRow] = []
    for s, t in zip(sizes, time_us):
        count = s // word // (nranks if op in ("all_gather", "reduce_scatter", "alltoall") else 1)
        for lst, tt in ((oop, t), (inp, t * in_place_factor)):
            alg = s / (tt * 1e-6) / 1e9
            lst.append(NcclRow(int(s), int(count), dtype, float(tt), alg, alg * busbw_factor(op, nranks)))
    return NcclRun(source=source, op=op, nranks=nranks, out_of_place=oop, in_place=inp,
                   line_numbers=list(range(1, len(oop) + 1)), hosts=tuple(hosts), op_from="given")
