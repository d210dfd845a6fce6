"""Scenarios per second of `solveplan sweep` (issue #15): in this process (1 worker), over 2
local processes, and as Ray tasks on a local Ray instance with 2 CPUs -- the same grid, the
same machine -- and the overhead of the Ray path per scenario.

Measured in `--runs` rounds, each timing every mode once (each run plans the whole grid
anew: the workers' result caches are emptied before every scenario); best and median reported:
- 1 worker: `sweep.run(grid, workers=1)` in this process (imports warmed up first);
- 2 processes: `sweep.run(grid, workers=2)`, starting its 2 spawned processes (~1 s) included;
- Ray local: `ray.init(num_cpus=2)` (its start-up reported apart), the sweep on that session
  (the first starts Ray's worker processes), a second sweep (workers warm), shutdown; the
  end-to-end figure of `--ray local` (start, first sweep, shut down) too.
Overhead per scenario = (CPUs x wall - the time spent planning, the rows' wall_time_s summed)
/ scenarios: what the runner costs beyond planning. Rows are checked identical across modes
(wall_time_s excluded). Writes benchmarks/results/sweep_scale.md.

    python benchmarks/sweep_scale.py                 # 80 scenarios, 3 rounds
    python benchmarks/sweep_scale.py --runs 1 --smoke --no-write
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "sweep_scale.md"
CPUS = 2
GRID = {
    "models": ["gpt3-1.3b", "gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-70b", "llama3.1-8b", "llama3.1-70b",
               "llama3.1-405b"],
    "clusters": ["a100x64", "a100x512",
                 {"family": "h100", "num_gpus": [64, 512, 4096], "price_per_gpu_hour_usd": 2.5}],
    "global_batch_sizes": [512, 1024],
}
SMOKE = {**GRID, "models": GRID["models"][:2], "global_batch_sizes": [512]}


def strip(rows):
    from solveplan.sweep import TIMING_COLUMNS

    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def overhead_s(wall_s: float, cpus: int, rows: list[dict]) -> float:
    planning = sum(r["wall_time_s"] or 0.0 for r in rows)
    return (cpus * wall_s - planning) / len(rows)


def measure(grid: dict, runs: int) -> dict:
    """`runs` rounds; each round times every mode once (this machine is shared: interleaving
    spreads other load over the modes alike, and the report gives the least-disturbed run)."""
    import ray

    from solveplan.sweep import run

    run({"scenarios": [{"model": "gpt3-125m", "cluster": "a100x8"}]}, workers=1)  # imports, catalogs
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    modes = ("local1", "local2", "ray_init", "ray_first", "ray_warm", "ray_shutdown")
    res: dict = {m: [] for m in modes} | {"load": [], "rows": {}, "overhead": {m: [] for m in modes}}

    def start_ray():
        ray.init(address="local", num_cpus=CPUS, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)

    def record(mode, cpus, fn):
        wall, rep = timed(fn)
        res[mode].append(wall)
        if rep is not None:
            res["rows"][mode] = rep.rows
            res["overhead"][mode].append(overhead_s(wall, cpus, rep.rows))

    for _ in range(runs):
        res["load"].append(os.getloadavg()[0])
        record("local1", 1, lambda: run(grid, workers=1))
        record("local2", CPUS, lambda: run(grid, workers=CPUS))
        record("ray_init", CPUS, start_ray)
        record("ray_first", CPUS, lambda: run(grid, ray="local"))
        record("ray_warm", CPUS, lambda: run(grid, ray="local"))
        record("ray_shutdown", CPUS, ray.shutdown)
        res["load"].append(os.getloadavg()[0])
    res["n"] = len(res["rows"]["local1"])
    return res


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "solver"], capture_output=True, text=True,
                               cwd=Path(__file__).parent, timeout=10).stdout.strip()
        return sha + (" (solver/ modified)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(res: dict, runs: int, grid: dict) -> str:
    import ortools
    import ray

    n = res["n"]
    best = {m: min(res[m]) for m in ("local1", "local2", "ray_init", "ray_first", "ray_warm", "ray_shutdown")}
    med = {m: statistics.median(res[m]) for m in best}
    e2e = [i + f + d for i, f, d in zip(res["ray_init"], res["ray_first"], res["ray_shutdown"])]
    rows = res["rows"]
    same = strip(rows["local1"]) == strip(rows["local2"]) == strip(rows["ray_first"]) == strip(rows["ray_warm"])
    counts: dict[str, int] = {}
    for row in rows["local1"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    n_clusters = n // len(grid["models"]) // len(grid["global_batch_sizes"])

    def line(label, mode, walls):
        oh = res["overhead"].get(mode) or []
        overhead = f"{min(oh) * 1e3:.0f} ms" if oh else "--"
        return (f"| {label} | {min(walls):.2f} s ({statistics.median(walls):.2f} s) | {n / min(walls):.2f} "
                f"({n / statistics.median(walls):.2f}) | {overhead} |")

    pool, warm, first = best["local2"], best["ray_warm"], best["ray_first"]
    lines = [
        "# sweep scale (issue #15)",
        "",
        f"`python benchmarks/sweep_scale.py` -- commit {git_commit()}; {cpu_model()}, {os.cpu_count()} CPUs "
        f"(shared: load average {min(res['load']):.1f}-{max(res['load']):.1f} during the runs); Python "
        f"{platform.python_version()}, ortools {ortools.__version__}, Ray {ray.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        f"Grid: {len(grid['models'])} models x {n_clusters} clusters x {len(grid['global_batch_sizes'])} global "
        f"batches = {n} scenarios ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); models "
        f"{', '.join(grid['models'])}; clusters a100x64, a100x512, h100x64/512/4096. {runs} rounds, each timing "
        f"every mode once; every run plans the whole grid anew. Rows identical across all modes (wall_time_s "
        f"excluded): **{'yes' if same else 'NO'}**.",
        "",
        "| mode | wall: best (median) | scenarios/s: best (median) | overhead per scenario (best) |",
        "|---|---:|---:|---:|",
        line("1 worker (this process)", "local1", res["local1"]),
        line("2 local processes (their start included)", "local2", res["local2"]),
        line("Ray local, 2 CPUs: first sweep of the session (starts Ray's workers)", "ray_first", res["ray_first"]),
        line("Ray local, 2 CPUs: next sweep (workers warm)", "ray_warm", res["ray_warm"]),
        line("`--ray local` end to end: ray.init + first sweep + shutdown", "", e2e),
        "",
        f"Ray start-up: ray.init {best['ray_init']:.1f} s ({med['ray_init']:.1f} s), shutdown "
        f"{best['ray_shutdown']:.1f} s ({med['ray_shutdown']:.1f} s).",
        "",
        f"Ray local against the 2-process pool on the same 2 cores (best runs): the first sweep of a Ray session "
        f"takes **{first / pool:.2f}x** the pool's wall time, a sweep on a running session **{warm / pool:.2f}x** "
        f"(target: within 1.5x); end to end with Ray's start and shutdown {min(e2e) / pool:.2f}x. Ray's overhead "
        f"per scenario beyond the pool's: {(first - pool) / n * 1e3:+.0f} ms (first sweep), "
        f"{(warm - pool) / n * 1e3:+.0f} ms (warm), plus {best['ray_init'] + best['ray_shutdown']:.1f} s once to "
        f"start and stop a local Ray.",
        "",
        "Overhead per scenario = (CPUs x wall - the rows' wall_time_s summed) / scenarios: the time a worker "
        "was not planning (process or Ray worker start-up and imports, task dispatch, result transfer, the driver "
        "resolving scenarios and writing rows, idle CPUs at the end); for 1 worker it is the driver's own cost. "
        "On a shared machine other load inflates every figure; the best of the rounds is the least disturbed.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="a 10-scenario grid")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    grid = SMOKE if args.smoke else GRID
    text = report(measure(grid, args.runs), args.runs, grid)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
