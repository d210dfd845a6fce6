"""How the formulation predicts published runs it was not fitted to.

    python benchmarks/cross_validate.py [--data FILE ...] [--by source model gpu]

For each grouping (by default: source, model family, GPU), fits the GPU parameters on every
group but one and predicts the one left out (solveplan.calibration.crossval), then writes
benchmarks/results/cross_validation.md (per-group MAPE, worst rows, the pick inside measured
sweeps, the memory points, the in-sample errors with the shipped parameters for comparison)
and one predicted-vs-measured plot per GPU (benchmarks/results/validation_<gpu>.png: in
sample and left out by source). About 10 minutes on 2 cores (one fit per group).

`--dense` keeps the dense rows only (the mixture-of-experts rows neither fitted nor predicted:
the protocol of the dense accuracy table in README) and writes cross_validation_dense.md/.json,
without plots.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import RESULTS, commit
from solveplan.calibration.crossval import cross_validate, in_sample, memory_points, ranking, row_json, summary, worst
from solveplan.calibration.rows import load_rows, published_rows
from solveplan.calibration.runs_fit import row_cases
from solveplan.render.validation import memory_table, plot_by_gpu, ranking_table, summary_table, worst_rows_table



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None)
    ap.add_argument("--by", nargs="+", default=["source", "model", "gpu"], choices=["source", "model", "gpu"])
    ap.add_argument("--dense", action="store_true", help="dense rows only (module docstring)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = published_rows(args.data)
    if args.dense:
        rows = [r for r in rows if not (r.job is not None and r.job.model.is_moe)]
    name = "cross_validation_dense" if args.dense else "cross_validation"
    cases = row_cases(rows)
    shipped = in_sample(cases)
    md = ["# Cross-validation on the published runs", "",
          f"`python benchmarks/cross_validate.py{' --dense' if args.dense else ''}` at commit {commit()}; "
          f"{len(cases)} rows, "
          f"{sum(1 for r in rows if r.skipped)} skipped ({'; '.join(sorted({r.skipped for r in rows if r.skipped}))}).",
          ""]
    blob: dict = {"commit": commit(), "in_sample": summary(shipped, "source")}
    series = {"in sample": shipped}
    for by in args.by:
        preds, fits = cross_validate(cases, by, progress=lambda g, a, b: print(f"{by}: fold {g} ({a} fit, {b} left out)",
                                                                               flush=True))
        if by == "source":
            series["left out by source"] = preds
        rank = ranking(preds)
        md += [f"## Left out by {by}", "", summary_table(summary(preds, by), by), ""]
        if by != "gpu":
            md += [summary_table(summary(preds, "gpu"), "gpu"), ""]
        md += [f"Worst rows when their {by} is left out:", "", worst_rows_table([row_json(p) for p in worst(preds, 10)]),
               "", f"Pick inside measured sweeps, left out by {by}:", "", ranking_table(rank), ""]
        blob[by] = {"summary": summary(preds, by), "ranking_median": rank["median_regret"],
                    "ranking_max": rank["max_regret"],
                    "folds": {g: {"values": f.values, "notes": f.notes} for g, f in fits.items()}}
    md += ["## In sample (the shipped parameters of clusters/gpus/*.yaml)", "",
           summary_table(summary(shipped, "source"), "source"), "",
           "Pick inside measured sweeps, in sample:", "", ranking_table(ranking(shipped)), ""]
    _, mem = load_rows(args.data)
    md += ["## Memory per GPU, first stage (Korthikanti et al. 2022 Fig. 1)", "", memory_table(memory_points(mem, rows)), ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.dense:
        plots = plot_by_gpu(series, str(RESULTS / "validation_"))
        md += ["Plots: " + ", ".join(f"[{Path(p).name}]({Path(p).name})" for p in plots), ""]
    md += [f"Took {time.perf_counter() - t0:.0f} s."]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(blob, indent=1, default=float))
    print("\n".join(md))


if __name__ == "__main__":
    main()
