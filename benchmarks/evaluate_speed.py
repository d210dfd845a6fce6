"""Time one vectorised evaluation of 10,000 configurations (issue 3's target: < 1 s here).

    python benchmarks/evaluate_speed.py [--n 10000] [--repeat 5]

Takes the legal shapes of gpt3-175b on a100x1024 (the first N of the enumeration, cycled if
fewer), computes their stage coefficients and evaluates each with its balanced split; prints
the median wall time of coefficients + evaluation over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from solveplan.formulation.splits import balanced_layers_matrix
from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.pipeline import step_time_batch
from solveplan.formulation.job import job_coefficients
from solveplan.space.enumeration import enumerate_shapes
from solveplan.specs import JobSpec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = load_model("gpt3-175b")
    job = JobSpec(model=model, cluster=load_cluster("a100x1024"), global_batch_size=1536, seq_length=2048)
    shapes = enumerate_shapes(job, apply_dominance=False).shapes
    idx = np.arange(args.n) % len(shapes)
    shapes = shapes.take(idx)
    layers = balanced_layers_matrix(model.num_layers, shapes.pp)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        co = job_coefficients(job, shapes)
        step, peak, fits = step_time_batch(co, layers)
        times.append(time.perf_counter() - t0)
    print(f"{args.n} configurations: median {statistics.median(times) * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}) over {args.repeat} runs; "
          f"{int(fits.sum())} fit")


if __name__ == "__main__":
    main()
