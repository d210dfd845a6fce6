"""Few-shot calibration on the published runs: calibrate on K rows of one source, GPU and
stack, predict that group's other rows (solveplan.calibration.fewshot_eval), and the pick
inside every published sweep before and after.

    python benchmarks/few_shot.py [--data FILE ...] [--k 2 3 5] [--draws 5] [--base left-out shipped]

Writes benchmarks/results/few_shot.md and few_shot.json. For each base (the GPU parameters
the calibration starts from: `left-out`, fitted without the group's source, the honest
start; `shipped`, clusters/gpus, fitted on every row), each K: per source and per group the
median and worst MAPE over the draws of the rows not drawn, beside the base's zero-shot MAPE
on the same rows; the fit `calibrate --steps` ran before the structured few-shot fit
(`legacy_fitter` below) on the same draws for comparison. A few minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from _common import RESULTS, code_state
from solveplan.calibration.crossval import Prediction
from solveplan.calibration.fewshot_eval import (DEFAULT_DRAWS, DEFAULT_SEED, Calibrated, base_jobs, few_shot,
                                                few_shot_sweeps, left_out_values)
from solveplan.calibration.fit import Param, fit_least_squares
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import row_cases
from solveplan.calibration.sweeps import sweep_report
from solveplan.render.validation import few_shot_table, few_shot_sweeps_table, sweeps_table

# The fit `solveplan calibrate --steps` ran before the structured few-shot fit (step_fit.py at
# c2bb4d9): GEMM efficiency, per-layer overhead and the fused attention efficiency all free,
# no priors, linear loss, started from the best point of a grid; refused below 3 measurements.
LEGACY_BOUNDS = {"matmul_efficiency": (0.02, 1.0, 0.1), "layer_overhead_us": (0.0, 20000.0, 100.0),
                 "attention_efficiency": (0.02, 1.0, 0.1)}
LEGACY_GRID = {"matmul_efficiency": (0.3, 0.5, 0.7, 0.9), "layer_overhead_us": (0.0, 100.0, 400.0, 1500.0),
               "attention_efficiency": (0.2, 0.45, 0.7)}


def _with_gpu(job, update):
    cl = job.cluster
    return job.model_copy(update={"cluster": cl.model_copy(update={"gpu": cl.gpu.model_copy(update=update)})})


def legacy_fitter(cases, jobs) -> Calibrated:
    names = ["matmul_efficiency", "layer_overhead_us"] + (["attention_efficiency"] if any(j.flash_attention for j in jobs)
                                                          else [])
    if len(cases) < len(names):
        raise ValueError("refused: fewer measurements than parameters")
    g = jobs[0].cluster.gpu
    params = [Param(n, float(g.fused_attention_efficiency if n == "attention_efficiency" else getattr(g, n)),
                    *LEGACY_BOUNDS[n]) for n in names]
    meas = np.array([c.row.measured_s for c in cases])

    def resid(v):
        return np.log([c.predict_job(_with_gpu(j, v))[0] for c, j in zip(cases, jobs)]) - np.log(meas)

    seeds = [dict(zip(names, combo)) for combo in itertools.product(*(LEGACY_GRID[n] for n in names))]
    res = fit_least_squares(resid, params, seeds=seeds, diff_step=1e-6)
    update = dict(res.values)
    return Calibrated(names, {}, lambda job: _with_gpu(job, update))


def folds(cases, cache) -> dict:
    """The left-out-by-source GPU parameters (one fit per source), from `cache` when given and present."""
    if cache and Path(cache).is_file():
        return json.loads(Path(cache).read_text())
    out = left_out_values(cases, lambda s, n: print(f"left-out: fit without {s} ({n} rows)", flush=True))
    if cache:
        Path(cache).write_text(json.dumps(out, indent=1))
    return out


def strip(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None)
    ap.add_argument("--k", nargs="+", type=int, default=[2, 3, 5])
    ap.add_argument("--draws", type=int, default=DEFAULT_DRAWS)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--base", nargs="+", default=["left-out", "shipped"], choices=["left-out", "shipped"])
    ap.add_argument("--no-legacy", action="store_true", help="skip the fit calibrate --steps ran before")
    ap.add_argument("--fold-cache", default=None,
                    help="JSON file of the left-out fits (read if it exists, else written): they depend only on the "
                         "formulation and runs_fit, not on the few-shot fit; delete it when those change")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = published_rows(args.data)
    cases = row_cases(rows)
    state = code_state()
    md = ["# Few-shot calibration on the published runs", "",
          f"`python benchmarks/few_shot.py --k {' '.join(map(str, args.k))} --draws {args.draws} --base "
          f"{' '.join(args.base)}{' --fold-cache ' + args.fold_cache if args.fold_cache else ''}` at commit {state}; "
          f"{len(cases)} rows. Groups: one source, GPU and stack "
          "(fsdp, megatron or moe: intervals.stack_of; MoE per model family, fewshot_eval.group_key); K rows drawn per group, one from each of K strata of its rows sorted by measured "
          f"step time (numpy default_rng([{args.seed}, draw])), {args.draws} draws; MAPE of the rows not drawn, "
          "median (worst) over draws. Zero-shot: the base parameters on the same rows. Knobs freed: the draws that freed "
          "each knob beside the time scale; kept as given: the draws whose time scale the fit's left-out check refused "
          "(fewshot.passes_left_out), which predict with the base parameters.", ""]
    blob: dict = {"commit": state, "k": args.k, "draws": args.draws, "seed": args.seed, "bases": {}}
    for base in args.base:
        jobs = base_jobs(cases, base, folds=folds(cases, args.fold_cache) if base == "left-out" else None)
        zero = [Prediction(c.row, c.predict_job(j)[0], c.shapes.row(c.predict_job(j)[1]), True) for c, j in zip(cases, jobs)]
        blob["bases"][base] = out = {"zero_shot_sweeps": sweep_report(zero), "structured": {}, "legacy": {}}
        md += [f"## Base: {base}", ""]
        for k in args.k:
            res = few_shot(cases, k, base, args.draws, args.seed, jobs=jobs,
                           progress=lambda g, n: print(f"{base} K={k}: {g} ({n} rows)", flush=True))
            out["structured"][k] = {**strip(res), "sweeps": few_shot_sweeps(res)}
            legacy = None
            if not args.no_legacy and k >= 3:
                legacy = strip(few_shot(cases, k, base, args.draws, args.seed, jobs=jobs, fitter=legacy_fitter))
                out["legacy"][k] = legacy
            md += [f"### K = {k}", "", few_shot_table(res, legacy), ""]
        md += ["### The pick inside each published sweep", "",
               f"Zero-shot ({base} parameters), then after few-shot calibration of the sweep's group "
               "(median (worst) regret over draws: how much slower the pick measured than the measured best):", "",
               few_shot_sweeps_table(out["zero_shot_sweeps"], {k: out["structured"][k]["sweeps"] for k in args.k}), ""]
    md += ["## Sweeps, in sample (shipped parameters), per sweep", "",
           sweeps_table(sweep_report([Prediction(c.row, *c.predict(None)[:1], c.shapes.row(c.predict(None)[1]), True)
                                      for c in cases])), "", f"Took {time.perf_counter() - t0:.0f} s."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "few_shot.md").write_text("\n".join(md) + "\n")
    (RESULTS / "few_shot.json").write_text(json.dumps(blob, indent=1, default=float))
    print("\n".join(md))


if __name__ == "__main__":
    main()
