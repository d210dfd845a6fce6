"""Few-shot calibration of `--framework transformers` on measured single-GPU steps: what
`solveplan calibrate --steps` makes of K of a GPU's measured steps, judged on that GPU's other steps.

    python benchmarks/transformers_few_shot.py [--k 2 3 5] [--draws 5]

For each out-of-sample step set (the H200 steps measured after the profile was set, and the H100
steps, a GPU the profile never saw: benchmarks/transformers_steps.py's HELDOUT and ON_H100), the
runs of 1B+ models are sorted by measured step time and split into K strata; each draw takes one
run of each stratum (numpy default_rng([0, draw]), as benchmarks/few_shot.py draws), fits them
with `calibration.step_fit.fit_steps` (the same fit as `solveplan calibrate --steps`: the stack's
time scale, then only the knobs the rows identify) on that GPU's one-GPU cluster, and predicts the
runs not drawn on the calibrated cluster. Reported: the zero-shot MAPE of those runs and the few-shot
MAPE, median (worst) over draws. Writes benchmarks/results/transformers_few_shot.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transformers_steps  # noqa: E402
from _common import RESULTS, ROOT, code_state  # noqa: E402
from solveplan.calibration.step_fit import build_step_rows, fit_steps  # noqa: E402
from solveplan.catalog import load_cluster  # noqa: E402


def step_rows(runs: list[dict], cluster, source: str):
    """`calibrate --steps` rows of measured runs (the model read from its config.json)."""
    cells = [{"model": str(ROOT / "tests" / "data" / "hf" / run["config"] / "config.json"), "tp": 1, "pp": 1, "dp": 1,
              "micro_batch_size": run["micro_batch_size"], "global_batch_size": run["micro_batch_size"],
              "seq_length": run["seq_length"], "zero": 0, "framework": "transformers",
              "recompute": "full" if run["gradient_checkpointing"] else "none", "step_time_s": run["step_s"]}
             for run in runs]
    return build_step_rows(cells, cluster, source)


def draw(runs: list[dict], k: int, seed: int) -> list[int]:
    """One run of each of k strata of the runs sorted by measured step time."""
    order = np.argsort([run["step_s"] for run in runs], kind="stable")
    rng = np.random.default_rng([0, seed])
    return sorted(int(rng.choice(stratum)) for stratum in np.array_split(order, k))


def mape(rows) -> float:
    return float(np.mean([abs(r.before_s / r.measured_s - 1) for r in rows]))


def one_set(path: Path, ks: list[int], draws: int) -> list[str]:
    """The table rows of one measured set."""
    measured = json.loads(path.read_text())
    gpu = transformers_steps.gpu_of(measured)
    runs = [run for run in measured["rows"] if not run.get("oom") and run["params"] >= transformers_steps.ONE_B_CLASS]
    cluster = load_cluster({**transformers_steps.CLUSTER, "name": f"{gpu}x1", "gpu": gpu})
    out = []
    for k in ks:
        zero, few = [], []
        for seed in range(draws):
            picked = draw(runs, k, seed)
            fit = fit_steps(step_rows([runs[i] for i in picked], cluster, "drawn"), cluster, "drawn")
            calibrated = cluster.model_copy(update={**fit.cluster_update,
                                                    "gpu": cluster.gpu.model_copy(update=fit.gpu_update)})
            rest = [runs[i] for i in range(len(runs)) if i not in picked]
            zero.append(mape(step_rows(rest, cluster, "rest")))
            few.append(mape(step_rows(rest, calibrated, "rest")))
        out.append(f"| {path.parent.name} ({gpu}) | {len(runs)} | {k} | {100 * statistics.median(zero):.1f}% "
                   f"| {100 * statistics.median(few):.1f}% ({100 * max(few):.1f}%) |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[2, 3, 5])
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    lines = ["# Few-shot calibration of `--framework transformers` on measured steps", "",
             f"`python benchmarks/transformers_few_shot.py --k {' '.join(map(str, args.k))} --draws {args.draws}` at "
             f"{code_state()}: K runs of a set calibrate its GPU (`solveplan calibrate --steps`' fit), the set's other "
             "runs of 1B+ models are predicted; MAPE of those, zero-shot and calibrated (median, and worst, over "
             "draws).", "",
             "| steps | runs | K | zero-shot | few-shot |", "|---|---:|---:|---:|---:|"]
    for path in (transformers_steps.HELDOUT, transformers_steps.ON_H100):
        lines += one_set(path, args.k, args.draws)
    (RESULTS / "transformers_few_shot.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
