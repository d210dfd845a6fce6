"""Time and memory of one vectorised evaluation of N configurations (issue 3: 10,000 in < 1 s;
issue 14: 1M in < 2 GB).

    python benchmarks/evaluate_speed.py                  # N = 10k, 100k, 1M; writes results/evaluate_speed.md
    python benchmarks/evaluate_speed.py --n 10000 --no-write

Takes the legal shapes of gpt3-175b on a100x1024 (the first N of the enumeration, cycled if
fewer), computes their stage coefficients and evaluates each with its balanced split
(`formulation.pipeline.step_time_batch`). Each N runs in a fresh subprocess: the median wall
time of coefficients and of the evaluation over the repeats, and the process's peak RSS
before the coefficients (interpreter, imports, shapes, the layer matrix), after them and after
the evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import RESULTS, code_state  # noqa: E402

SIZES = (10_000, 100_000, 1_000_000)
MEMORY_TARGET_MIB = 2048


def _rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(n: int, repeat: int) -> dict:
    import numpy as np

    from solveplan.catalog import load_cluster, load_model
    from solveplan.formulation.job import job_coefficients
    from solveplan.formulation.pipeline import step_time_batch
    from solveplan.formulation.splits import balanced_layers_matrix
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.specs import JobSpec

    model = load_model("gpt3-175b")
    job = JobSpec(model=model, cluster=load_cluster("a100x1024"), global_batch_size=1536, seq_length=2048)
    shapes = enumerate_shapes(job).shapes
    shapes = shapes.take(np.arange(n) % len(shapes))
    layers = balanced_layers_matrix(model.num_layers, shapes.pp)
    rss0 = _rss_mib()
    coef_s, eval_s, rss1, fits = [], [], 0.0, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        co = job_coefficients(job, shapes)
        t1 = time.perf_counter()
        rss1 = max(rss1, _rss_mib())
        _, _, fits = step_time_batch(co, layers)
        t2 = time.perf_counter()
        coef_s.append(t1 - t0)
        eval_s.append(t2 - t1)
        del co
    return {"n": n, "coefficients_s": statistics.median(coef_s), "evaluate_s": statistics.median(eval_s),
            "rss_inputs_mib": rss0, "rss_coefficients_mib": rss1, "rss_peak_mib": _rss_mib(), "fit": int(fits.sum()),
            "max_pp": int(shapes.pp.max())}


def run(n: int, repeat: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", str(n), "--repeat", str(repeat)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(rows: list[dict], repeat: int) -> Path:
    lines = [
        "# Vectorised evaluation: time and memory",
        "",
        f"`python benchmarks/evaluate_speed.py` at commit {code_state()}; {os.cpu_count()} CPUs; median of {repeat} "
        f"repeats, each N in a fresh process. gpt3-175b on a100x1024: the legal shapes (pp up to 96) cycled to N, "
        f"each with its balanced split. Peak RSS is the process's (interpreter, imports and inputs included); "
        f"the layer matrix alone is N x 96 int64.",
        "",
        "| configurations | coefficients | evaluation | evaluations/s | peak RSS: inputs | + coefficients | + evaluation "
        f"| under {MEMORY_TARGET_MIB} MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n']:,} | {r['coefficients_s']:.3f} s | {r['evaluate_s']:.3f} s | "
                     f"{r['n'] / r['evaluate_s'] / 1e6:.2f} M | {r['rss_inputs_mib']:.0f} MiB | "
                     f"{r['rss_coefficients_mib']:.0f} MiB | {r['rss_peak_mib']:.0f} MiB | "
                     f"{'yes' if r['rss_peak_mib'] < MEMORY_TARGET_MIB else 'NO'} |")
    out = RESULTS / "evaluate_speed.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="one size only (default: 10k, 100k, 1M)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.repeat)))
        return
    rows = []
    for n in ([args.n] if args.n else SIZES):
        r = run(n, args.repeat)
        rows.append(r)
        print(f"{n:>9,} configurations: coefficients {r['coefficients_s'] * 1e3:.1f} ms, evaluation "
              f"{r['evaluate_s'] * 1e3:.1f} ms; peak RSS {r['rss_inputs_mib']:.0f} -> {r['rss_coefficients_mib']:.0f} "
              f"-> {r['rss_peak_mib']:.0f} MiB; {r['fit']} fit", flush=True)
    if not args.no_write:
        print(f"wrote {write(rows, args.repeat)}")


if __name__ == "__main__":
    main()
