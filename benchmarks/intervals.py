"""The error bars of every prediction: quantiles of the cross-validation residuals, written once
as package data (solver/calibration/intervals.json), never recomputed at optimize time.

    python benchmarks/intervals.py [--data FILE ...] [--residuals-only | --from-residuals]

1. Cross-validation by source (`crossval.cross_validate(cases, "source")`: the GPU parameters
   fitted on every source but one, the left-out source predicted) gives, per published row,
   the ratio measured / predicted step time of a stack the fit has not seen.
2. A GPU with no published rows of its own runs on borrowed or prior parameters; when a chip's
   rows were left out of the fit (benchmarks/results/cross_validation.json, "gpu": the
   committed cross-validation by GPU) its median measured / predicted ranged over the chips
   from R_lo to R_hi (V100 0.94 ... H100 1.19): its band is the stack's, scaled by that range
   ([lo x R_lo, hi x R_hi]).
3. Rows are grouped by stack (mixture-of-experts models apart; else Megatron-style when the
   chosen configuration's ZeRO stage is 0 or 1, FSDP when 2 or 3:
   `solveplan.calibration.intervals.stack_of`) and chip; the 10th and
   90th percentiles of the ratio are an 80% interval. A cell with fewer than MIN_ROWS rows uses
   its stack pooled over chips.
4. Memory: Korthikanti et al. 2022 Fig. 1 (the only published per-GPU memory), the range of
   measured / predicted over its points.
5. A stack no published run states (transformers) gets a band of its own only where this project
   measured it: single-GPU transformers steps on an H200 and an H100 measured after its profile was set
   (benchmarks/measured/h200-2026-11-27/hf_train_steps_heldout.json, h100-2026-11-27/hf_train_steps.json,
   models of 1B+), predicted as
   benchmarks/transformers_steps.py plans them (`frameworks`, keyed stack/GPU): the step's
   quantiles as above, and the whole range of reserved / predicted peak memory.

Writes benchmarks/results/intervals_residuals.json (every row's ratio, so step 3 can be
re-run alone with --from-residuals), solver/calibration/intervals.json and
benchmarks/results/intervals.md. One fit per source (6), run in `--jobs` processes: about
10-30 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path

import numpy as np

from _common import RESULTS, ROOT, commit
from solveplan.calibration.crossval import cross_validate, memory_points
from solveplan.calibration.intervals import COVERAGE, MIN_ROWS, QUANTILES, stack_of
from solveplan.calibration.rows import find_data, load_rows, published_rows
from solveplan.calibration.runs_fit import CHIP_OF_GPU, row_cases

RESIDUALS = RESULTS / "intervals_residuals.json"
OUT = ROOT / "solver" / "calibration" / "intervals.json"


def _fold(args) -> list[dict]:
    """The rows of one source, predicted by parameters fitted on every other source."""
    data, source = args
    cases = row_cases(published_rows(data))
    preds, _ = cross_validate(cases, "source", only=source)
    print(f"fold {source}: {len(preds)} rows", flush=True)
    return [{"id": p.row.id, "source": p.row.source, "gpu": p.row.gpu, "chip": CHIP_OF_GPU.get(p.row.gpu, p.row.gpu),
             "stack": stack_of(int(p.config["zero"]), p.row.job.model.is_moe), "ratio": p.row.measured_s / p.predicted_s} for p in preds]


def residuals(data, jobs: int) -> dict:
    """One record per row (source, gpu, chip, stack, ratio), each left out by source."""
    rows = published_rows(data)
    sources = sorted({r.source for r in rows if not r.skipped})
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        folds = pool.map(_fold, [(data, s) for s in sources], chunksize=1)
    out: dict = {"commit": commit(), "rows": sum(len(f) for f in folds),
                 "source": [r for f in folds for r in f], "source_time_s": time.perf_counter() - t0}
    _, mem = load_rows(data)
    out["memory"] = [{"model": m["model"], "mode": m["mode"],
                      "ratio": (m["state_published_gib"] + m["act_published_gib"]) / (m["state_gib"] + m["act_gib"])}
                     for m in memory_points(mem, rows)]
    return out


def _band(ratios) -> dict:
    r = np.asarray(ratios, dtype=float)
    lo, hi = np.quantile(r, QUANTILES)
    return {"rows": int(len(r)), "lo": float(lo), "hi": float(hi), "median": float(np.median(r))}


def framework_bands() -> dict:
    """Item 5 of the module docstring: {"transformers/<gpu>": band} from the steps measured out of sample."""
    import transformers_steps

    out = {}
    for path in (transformers_steps.HELDOUT, transformers_steps.ON_H100):
        measured = json.loads(path.read_text())
        gpu = transformers_steps.gpu_of(measured)
        plans = [(run, transformers_steps.predict(run, gpu)[0]) for run in measured["rows"]
                 if not run.get("oom") and run["params"] >= transformers_steps.ONE_B_CLASS]
        memory = np.array([run["max_reserved_bytes"] / plan.peak_memory_bytes for run, plan in plans])
        source = (f"single-GPU transformers steps measured after the profile was set "
                  f"({path.relative_to(ROOT)}, 1B+ models)")
        out[f"transformers/{gpu}"] = {**_band([run["step_s"] / plan.step_time_s for run, plan in plans]),
                                      "source": source,
                                      "memory": {"rows": len(memory), "lo": float(memory.min()), "hi": float(memory.max())}}
    return out


def intervals(res: dict, data=None) -> dict:
    """The bands of intervals.json (format: `solveplan.calibration.intervals`)."""
    src = res["source"]
    by_gpu = json.loads((RESULTS / "cross_validation.json").read_text())
    offsets = [1 / (1 + g["median_error"]) for g in by_gpu["gpu"]["summary"] if g["group"] != "all"]
    r_lo, r_hi = min(offsets), max(offsets)
    cells, stacks, unfitted = {}, {}, {}
    for stack in sorted({r["stack"] for r in src}):
        stacks[stack] = _band([r["ratio"] for r in src if r["stack"] == stack])
        unfitted[stack] = {**stacks[stack], "lo": stacks[stack]["lo"] * r_lo, "hi": stacks[stack]["hi"] * r_hi,
                           "median": None}
        for chip in sorted({r["chip"] for r in src if r["stack"] == stack}):
            ratios = [r["ratio"] for r in src if r["stack"] == stack and r["chip"] == chip]
            if len(ratios) >= MIN_ROWS:
                cells[f"{stack}/{chip}"] = _band(ratios)
    mem = np.array([m["ratio"] for m in res["memory"]])
    return {
        "made_by": "python benchmarks/intervals.py",
        "commit": res["commit"],
        "data": [Path(f).name for f in find_data(data)],
        "coverage": COVERAGE,
        "quantiles": list(QUANTILES),
        "ratio": "measured / predicted step time",
        "cells": cells,
        "stacks": stacks,
        "unfitted_gpu": unfitted,
        "unfitted_gpu_rule": (f"the stack's band scaled by the range of a chip's median measured / predicted when its "
                              f"rows were left out of the fit ({r_lo:.3f} to {r_hi:.3f}; cross_validation.json at "
                              f"{by_gpu['commit']}, by gpu)"),
        "gpus_with_rows": sorted({r.gpu for r in published_rows(data) if not r.skipped}),
        "frameworks": framework_bands(),
        "memory": {"rows": int(len(mem)), "lo": float(mem.min()), "hi": float(mem.max()),
                   "source": "Korthikanti et al. 2022 Fig. 1, measured / predicted per-GPU memory (first stage)"},
    }


def markdown(iv: dict, res: dict) -> str:
    pct = lambda x: "-" if x is None else f"{(x - 1) * 100:+.1f}%"  # noqa: E731
    lines = ["# Prediction intervals", "",
             f"`python benchmarks/intervals.py` at commit {iv['commit']} ({res['rows']} published rows; "
             f"cross-validation by source {res['source_time_s']:.0f} s).", "",
             f"An {iv['coverage']:.0%} interval: the {QUANTILES[0]:.0%} and {QUANTILES[1]:.0%} quantiles of "
             "measured / predicted step time on rows predicted by parameters fitted without their source. "
             "A step predicted at T lies in [lo x T, hi x T]. `unfitted GPU`: " + iv["unfitted_gpu_rule"] + ".", "",
             "| band | rows | lo | median | hi |", "|---|---:|---:|---:|---:|"]
    for kind, table in (("", iv["cells"]), ("stack ", iv["stacks"]), ("unfitted GPU, ", iv["unfitted_gpu"]),
                        ("measured steps, ", iv["frameworks"])):
        for k, b in table.items():
            lines.append(f"| {kind}{k} | {b['rows']} | {pct(b['lo'])} | {pct(b['median'])} | {pct(b['hi'])} |")
    m = iv["memory"]
    lines += ["", f"Memory: {m['rows']} points of {m['source']}: measured / predicted from {pct(m['lo'])} to "
              f"{pct(m['hi'])} (the whole range is the interval)."]
    for key, band in iv["frameworks"].items():
        mem = band["memory"]
        lines += ["", f"Memory, measured steps of {key}: {mem['rows']} {band['source']}: reserved / predicted from "
                      f"{pct(mem['lo'])} to {pct(mem['hi'])} (the whole range)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None)
    ap.add_argument("--from-residuals", action="store_true", help="rebuild the bands from the saved residuals")
    ap.add_argument("--jobs", type=int, default=3, help="processes, one fold each")
    args = ap.parse_args()
    if args.from_residuals:
        res = json.loads(RESIDUALS.read_text())
    else:
        res = residuals(args.data, args.jobs)
        RESULTS.mkdir(parents=True, exist_ok=True)
        RESIDUALS.write_text(json.dumps(res, indent=1))
    iv = intervals(res, args.data)
    OUT.write_text(json.dumps(iv, indent=1) + "\n")
    md = markdown(iv, res)
    (RESULTS / "intervals.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
