"""Hold-out check of `solveplan calibrate`'s step-time fit on the published runs.

For each GPU chip (A100 40/80 GB together, V100, H100), the timed rows of
../shared/data/published_runs.json (those `solveplan.calibration.published` can predict) are sorted by id
and split even/odd. The GPU efficiencies are fitted on one half with calibrate's fitter
(bounded least squares on log step-time ratios, started from the best point of its coarse
grid) through `validate_rows(..., overrides={"gpu": ...})`, and predict the other half;
then the halves swap (2-fold). Baselines on the same held-out rows:
- the shipped defaults (clusters/gpus/*.yaml), which were grid-fitted on ALL rows, held-out
  ones included (benchmarks/fit_published.py), so they are an optimistic baseline;
- benchmarks/fit_published.py's grid search (MAPE objective) fitted on the same half.

Parameters as in fit_published.py: matmul_efficiency and layer_overhead_us, plus
attention_efficiency where the rows use flash attention (H100); V100's overhead is fixed at
A100's 100 us (2 rows per half cannot carry two parameters).

    python benchmarks/calibrate_half.py [--data PATH] [--out benchmarks/results/calibrate_half.md] [--no-grid]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from solveplan.calibration.fit import Param, fit_least_squares
from solveplan.calibration.step_fit import gpu_params, grid_seeds
from solveplan.catalog import load_gpu
from solveplan.calibration.published import GPU_FAMILY, load, validate_rows

HERE = Path(__file__).resolve().parent
CHIPS = {  # chip: (validate families, catalog GPU holding the shipped values, flash attention)
    "a100": (("a100", "a100-40gb"), "a100-80gb", False),
    "v100": (("v100",), "v100-32gb", False),
    "h100": (("h100",), "h100-sxm", True),
}
FIXED = {"v100": {"layer_overhead_us": 100.0}}


def timed_ids(data, families) -> list[str]:
    ids = {r["id"] for r in data["measurements"] if GPU_FAMILY.get(r["hardware"]["gpu"]) in families}
    res = validate_rows(data, ids=ids)
    return sorted(r.id for r in res if r.error is not None)


def errors(data, ids, gpu_update) -> dict[str, float]:
    """Relative step-time error per row id (predicted/measured - 1)."""
    res = validate_rows(data, overrides={"gpu": gpu_update} if gpu_update else None, ids=set(ids))
    return {r.id: r.error for r in res if r.error is not None}


def lsq_fit(data, chip, ids) -> tuple[dict, list[Param], float]:
    families, gpu_name, flash = CHIPS[chip]
    names = ["matmul_efficiency", "layer_overhead_us"] + (["attention_efficiency"] if flash else [])
    params = gpu_params(load_gpu(gpu_name), names)
    for p in params:
        if p.name in FIXED.get(chip, {}):
            p.fixed, p.value = True, FIXED[chip][p.name]
    order = sorted(ids)

    def resid(v):
        e = errors(data, order, v)
        return np.array([math.log1p(e[i]) if i in e else 10.0 for i in order])

    fit = fit_least_squares(resid, params, seeds=grid_seeds(params), diff_step=1e-6)
    return fit.values, params, fit.rms


def grid_fit(data, chip, ids) -> dict:
    sys.path.insert(0, str(HERE))
    import fit_published

    _, params = fit_published.fit_chip(data, chip, set(ids))
    return params


def stats(errs: dict[str, float]) -> dict:
    a = np.abs(list(errs.values()))
    return {"n": len(a), "mape": float(a.mean()), "max": float(a.max()), "within10": int((a <= 0.10).sum())}


def fmt_params(p: dict) -> str:
    short = {"matmul_efficiency": "mm", "layer_overhead_us": "ovh_us", "attention_efficiency": "attn"}
    return ", ".join(f"{short[k]}={0 if abs(v) < 1e-3 else v:.3g}" for k, v in p.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=str(HERE / "results" / "calibrate_half.md"))
    ap.add_argument("--no-grid", action="store_true", help="skip the fit_published.py grid baseline")
    args = ap.parse_args()
    data = load(args.data)
    t0 = time.time()
    summary_rows, detail = [], []
    for chip, (families, gpu_name, _) in CHIPS.items():
        ids = timed_ids(data, families)
        shipped = load_gpu(gpu_name)
        shipped_vals = {k: getattr(shipped, k) for k in ("matmul_efficiency", "layer_overhead_us", "attention_efficiency")}
        halves = {"even": ids[::2], "odd": ids[1::2]}
        for fit_name, held_name in (("even", "odd"), ("odd", "even")):
            fit_ids, held_ids = halves[fit_name], halves[held_name]
            t = time.time()
            vals, params, rms = lsq_fit(data, chip, fit_ids)
            lsq_s = time.time() - t
            e_lsq = errors(data, held_ids, vals)
            e_def = errors(data, held_ids, None)
            e_fit = errors(data, fit_ids, vals)
            row = {"chip": chip, "fit": fit_name, "n_fit": len(fit_ids), "n_held": len(held_ids),
                   "params": {p.name: p.value for p in params}, "at_bound": [p.name for p in params if p.at_bound],
                   "fit_mape": stats(e_fit)["mape"], "lsq": stats(e_lsq), "default": stats(e_def), "lsq_s": lsq_s}
            if not args.no_grid:
                t = time.time()
                gp = grid_fit(data, chip, fit_ids)
                row["grid_s"] = time.time() - t
                row["grid_params"] = gp
                row["grid"] = stats(errors(data, held_ids, gp))
            summary_rows.append(row)
            for i in held_ids:
                detail.append((chip, held_name, i, e_def[i], e_lsq[i], errors(data, [i], row.get("grid_params"))[i]
                               if not args.no_grid else None))
            print(f"{chip} fit on {fit_name} ({len(fit_ids)} rows) -> {fmt_params(row['params'])}; held-out "
                  f"{held_name} ({len(held_ids)}): calibrate MAPE {row['lsq']['mape']:.1%}, shipped defaults "
                  f"{row['default']['mape']:.1%}" + (f", grid {row['grid']['mape']:.1%}" if 'grid' in row else ""), flush=True)
        print(f"  shipped {gpu_name}: {fmt_params({k: v for k, v in shipped_vals.items() if k != 'attention_efficiency' or CHIPS[chip][2]})}")

    lines = ["# Calibrate on half of the published runs, predict the other half", "",
             "Generated by `python benchmarks/calibrate_half.py` "
             f"({time.strftime('%Y-%m-%d')}, {time.time() - t0:.0f} s). Data: ../shared/data/published_runs.json; the rows "
             "`solveplan.calibration.published` can time (skipped rows excluded), sorted by id and split even/odd per GPU chip; each "
             "half fits the GPU efficiencies and predicts the other (2-fold). Errors are |predicted/measured - 1| of the "
             "step time, through `validate_rows` (free knobs at their best legal setting, as there).", "",
             "- **calibrate**: `solveplan.calibration.fit.fit_least_squares` (bounded least squares on log ratios, started "
             "from the best point of calibrate's coarse grid) on the fit half.",
             "- **shipped defaults**: clusters/gpus/*.yaml, grid-fitted by benchmarks/fit_published.py on *all* rows "
             "(the held-out half included), so this baseline has seen the test rows.",
             "- **grid (fit half)**: benchmarks/fit_published.py's grid search (MAPE objective, its bounds: overhead "
             "<= 400 us, attention >= 0.30) on the same fit half.", "",
             "| chip | fit half -> held-out | rows fit / held | fitted by calibrate | fit-half MAPE | held-out MAPE: "
             "calibrate | shipped defaults | grid (fit half) | held-out max error: calibrate / defaults | within 10%: "
             "calibrate / defaults |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary_rows:
        bound = f" (at bound: {', '.join(r['at_bound'])})" if r["at_bound"] else ""
        grid = f"{r['grid']['mape']:.1%} ({fmt_params(r['grid_params'])})" if "grid" in r else "not run"
        lines.append(f"| {r['chip']} | {r['fit']} -> {'odd' if r['fit'] == 'even' else 'even'} | {r['n_fit']} / {r['n_held']} | "
                     f"{fmt_params(r['params'])}{bound} | {r['fit_mape']:.1%} | **{r['lsq']['mape']:.1%}** | "
                     f"{r['default']['mape']:.1%} | {grid} | {r['lsq']['max']:.1%} / {r['default']['max']:.1%} | "
                     f"{r['lsq']['within10']} / {r['default']['within10']} of {r['n_held']} |")
    # pooled over both folds per chip
    lines += ["", "Pooled over both folds (every timed row predicted once by a fit that did not see it):", "",
              "| chip | rows | calibrate MAPE | shipped defaults MAPE | grid (fit half) MAPE |", "|---|---|---|---|---|"]
    for chip in CHIPS:
        d = [x for x in detail if x[0] == chip]
        if not d:
            continue
        mean = lambda k: float(np.mean([abs(x[k]) for x in d])) if d[0][k] is not None else float("nan")  # noqa: E731
        lines.append(f"| {chip} | {len(d)} | {mean(4):.1%} | {mean(3):.1%} | {mean(5):.1%} |")
    lines += ["", "Reading (generated from the numbers above):", ""]
    for chip in CHIPS:
        d = [x for x in detail if x[0] == chip]
        folds = [r for r in summary_rows if r["chip"] == chip]
        if not d:
            continue
        cal, dflt = float(np.mean([abs(x[4]) for x in d])), float(np.mean([abs(x[3]) for x in d]))
        g = lambda x: f"{0 if abs(x) < 1e-3 else x:.3g}"  # noqa: E731
        spread = "; ".join(f"{k} {g(min(f['params'][k] for f in folds))}..{g(max(f['params'][k] for f in folds))}"
                           for k in folds[0]["params"] if len({round(f['params'][k], 6) for f in folds}) > 1)
        verdict = ("better than" if cal < dflt - 0.002 else "worse than" if cal > dflt + 0.002 else "on par with")
        lines.append(f"- {chip}: fitted on half the rows, calibrate predicts the unseen half at {cal:.1%} MAPE, {verdict} "
                     f"the shipped defaults' {dflt:.1%} (which saw those rows)"
                     + (f"; the two folds' parameters span {spread}" if spread else "") + ".")
    lines += ["- Parameters that move a lot between folds while the held-out error barely does are weakly determined "
              "by these rows (few rows per chip, overhead and attention trade off against matmul efficiency).", ""]
    lines += ["", "Per held-out row (signed error, predicted/measured - 1):", "",
              "| chip | half | row id | shipped defaults | calibrate | grid (fit half) |", "|---|---|---|---|---|---|"]
    for chip, half, i, ed, el, eg in detail:
        lines.append(f"| {chip} | {half} | {i} | {ed:+.1%} | {el:+.1%} | {'' if eg is None else f'{eg:+.1%}'} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
