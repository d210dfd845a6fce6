"""What the runner-up margin costs: prepare + CP-SAT search in-process for top-1 and top-2
(`optimize` solves top-2 to state the winner's margin over the runner-up).

    python benchmarks/runner_up_cost.py [--runs 3]

Writes benchmarks/results/runner_up_cost.md (medians of the runs, interleaved).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import RESULTS, code_state
from solveplan.catalog import load_job
from solveplan.search.candidates import prepare
from solveplan.search.cpsat.solve import search

INSTANCES = (("gpt3-13b", "a100x64"), ("gpt3-175b", "a100x1024"), ("llama3.1-70b", "h100x4096"),
             ("nemotron4-340b", "h100x512"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    lines = ["# Cost of the runner-up (top-2) against top-1", "",
             f"`python benchmarks/runner_up_cost.py --runs {args.runs}` at {code_state()}: prepare + CP-SAT search "
             "in-process, medians, top-1 and top-2 interleaved.", "",
             "| instance | top-1 ms | top-2 ms | ratio |", "|---|---:|---:|---:|"]
    for model, cluster in INSTANCES:
        job = load_job({"model": model, "cluster": cluster})
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.runs):
            for k in (1, 2):
                t0 = time.perf_counter()
                search(prepare(job, top_k=k), 60, top_k=k)
                times[k].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[k]) * 1e3 for k in (1, 2))
        lines.append(f"| {model} / {cluster} | {a:.0f} | {b:.0f} | {b / a:.2f} |")
        print(lines[-1], flush=True)
    (RESULTS / "runner_up_cost.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
