"""Writes the fixtures of the newer nccl-tests output layouts from the rows of
all_reduce_perf_8gpu.log, using nccl-tests' own format strings (NVIDIA/nccl-tests @
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432, src/util.cu: writeDeviceReport, writeResultHeader,
writeBenchmarkLinePreamble, writeBenchmarkLineBody, writeTimestamp, writeResultFooter, and the
JSON writer jsonOutputInit ... writeResultFooter). No log with these options was at hand, so they
are rendered here rather than copied; run `python write_newer_layouts.py` in this directory.

- all_reduce_perf_timestamps.log: `-S 1` as released (timestamp after the in-place half)
- all_reduce_perf_timestamp_first.log: the layout of nccl-tests PR 349 (timestamp before the
  size), whose header lines are copied from that PR's example
- all_reduce_perf.json: `-J all_reduce_perf.json`
- all_reduce_perf_64k.log: the same run stopped at 64 KiB (-e 64K): latency-bound
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
rows = []
for line in (HERE / "all_reduce_perf_8gpu.log").read_text().splitlines():
    t = line.split()
    if line and not line.startswith("#") and len(t) == 13:
        rows.append(t)

DEV = [f"#  Rank {r:2d} Group {0:2d} Pid {1000 + r:6d} on {'node-a':>10s} device {r:2d} [{0:04x}:{0x10 + r:02x}:{0:02x}] "
       f"NVIDIA H100 80GB HBM3" for r in range(8)]


def head(maxb):
    return ["# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803",
            "# Collective test starting: all_reduce_perf",
            f"# nThread 1 nGpus 1 minBytes 8 maxBytes {maxb} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0 unalign: 0", "#", "# Using devices", *DEV]


def table_header(ts_last=True):
    lbl, fmt = ("timestamp", "%Y-%m-%d %H:%M:%S") if ts_last else ("", "")
    pad = 19 if ts_last else 0
    return ["#",
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
                "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                "#wrong", pad, lbl),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", pad, fmt)]


def row(t, stamp):
    line = "%12li  %12li  %8s  %6s  %6s" % (int(t[0]), int(t[1]), t[2], t[3], "%6i" % int(t[4]))
    for k in (5, 9):
        line += "  %7s  %6s  %6s  %6g" % (t[k], t[k + 1], t[k + 2], float(t[k + 3]))
    return line + ("%21s" % stamp if stamp else "")


def footer(avg):
    return ["# %-20s : %d %s" % ("Out of bounds values", 0, "OK"), "# %-20s : %g %s" % ("Avg bus bandwidth", avg, ""),
            "#", "# Collective test concluded: all_reduce_perf", "#"]


stamps = [f"2026-07-09 16:{3 + i // 60:02d}:{i % 60:02d}" for i in range(len(rows))]
avg = sum(float(t[7]) for t in rows) / len(rows)
(HERE / "all_reduce_perf_timestamps.log").write_text("\n".join(
    head(2**30) + table_header() + [row(t, s) for t, s in zip(rows, stamps)] + footer(avg)) + "\n")

pr349 = ["#                                                                                    out-of-place                       in-place",
         "#           timestamp        size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
         "#                              (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
(HERE / "all_reduce_perf_timestamp_first.log").write_text("\n".join(
    head(2**30) + ["#"] + pr349 + ["%21s" % s + row(t, "") for t, s in zip(rows, stamps)] + footer(avg)) + "\n")

small = [t for t in rows if int(t[0]) <= 65536]
(HERE / "all_reduce_perf_64k.log").write_text("\n".join(
    head(65536) + table_header(False) + [row(t, "") for t in small]
    + footer(sum(float(t[7]) for t in small) / len(small))) + "\n")

doc = {"version": 3, "start_time": "2026-07-09 16:03:00",
       "args": ["./build/all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "8", "-J", "all_reduce_perf.json"],
       "env": ["NCCL_DEBUG=WARN"], "nccl_version": 22803,
       "config": {"nthreads": 1, "ngpus": 8, "minimum_bytes": 8, "maximum_bytes": 2**30, "step_factor": 2,
                  "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                  "blocking_collectives": "false", "per_iter_timing": "false", "per_iter_skip": 0,
                  "parallel_init": "false",
                  "devices": [{"rank": r, "group": 0, "pid": 1000, "hostname": "node-a", "device": r,
                               "device_hex": f"0000:{0x10 + r:02x}:00", "device_info": "NVIDIA H100 80GB HBM3"}
                              for r in range(8)]},
       "results": [{"size": int(t[0]), "count": int(t[1]), "type": t[2], "redop": t[3], "root": "%6i" % int(t[4]),
                    "out_of_place": {"time": float(t[5]), "alg_bw": float(t[6]), "bus_bw": float(t[7]), "nwrong": 0.0},
                    "in_place": {"time": float(t[9]), "alg_bw": float(t[10]), "bus_bw": float(t[11]), "nwrong": 0.0},
                    "actual_iterations": 20, "experiment_name": ""} for t in rows],
       "out_of_bounds": {"count": 0, "okay": "true"}, "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked"},
       "errors": [], "end_time": "2026-07-09 16:03:27"}
(HERE / "all_reduce_perf.json").write_text(json.dumps(doc) + "\n")
