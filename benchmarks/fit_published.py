"""Fit the GPU efficiency parameters of the formulation on the published runs.

One parameter set per GPU chip (A100 40 GB and 80 GB share one: same SMs and tensor cores;
their HBM bandwidths stay the datasheet values), fitted on every timed row of that chip in
../shared/data/published_runs.json by grid search minimising the mean absolute percentage
error of the step time. Parameters: matmul_efficiency, layer_overhead_us and, where rows use
flash attention (H100), attention_efficiency. Prints the values to put into
clusters/gpus/*.yaml; `--half` fits on even-indexed rows and reports the odd ones (hold-out).

    python benchmarks/fit_published.py [--data PATH] [--half]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from solveplan.calibration.published import load, summary, validate_rows

CHIPS = {
    "a100": (["a100", "a100-40gb"], False),
    "v100": (["v100"], False),
    "h100": (["h100"], True),
}
# V100 has 4 rows: too few for two parameters, so its per-layer overhead is A100's fitted value.
FIXED_OVERHEAD_US = {"v100": 50.0}
MATMUL = np.round(np.arange(0.50, 0.96, 0.01), 2)
OVERHEAD_US = [0, 50, 100, 150, 200, 300, 400]
ATTENTION = np.round(np.arange(0.30, 0.81, 0.05), 2)


def rows_for(data, families, ids=None):
    from solveplan.calibration.published import GPU_FAMILY

    return {r["id"] for r in data["measurements"] if GPU_FAMILY.get(r["hardware"]["gpu"]) in families
            and (ids is None or r["id"] in ids)}


def mape(data, ids, params):
    res = validate_rows(data, overrides={"gpu": params}, ids=ids)
    s = summary(res)
    return s.get("mape", np.inf), s


def fit_chip(data, chip, ids):
    families, flash = CHIPS[chip]
    overheads = [FIXED_OVERHEAD_US[chip]] if chip in FIXED_OVERHEAD_US else OVERHEAD_US
    grid = itertools.product(MATMUL, overheads, ATTENTION if flash else [None])
    best = (np.inf, None)
    for mm, ov, at in grid:
        params = {"matmul_efficiency": float(mm), "layer_overhead_us": float(ov)}
        if at is not None:
            params["attention_efficiency"] = float(at)
        err, _ = mape(data, ids, params)
        if err < best[0]:
            best = (err, params)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--half", action="store_true", help="fit on even rows, report odd rows")
    ap.add_argument("--chip", choices=list(CHIPS), default=None)
    args = ap.parse_args()
    data = load(args.data)
    for chip in [args.chip] if args.chip else CHIPS:
        all_ids = sorted(rows_for(data, CHIPS[chip][0]))
        fit_ids = set(all_ids[::2]) if args.half else set(all_ids)
        err, params = fit_chip(data, chip, fit_ids)
        line = f"{chip}: fitted on {len(fit_ids)} rows, MAPE {err:.2%}, params {params}"
        if args.half:
            held = set(all_ids[1::2])
            herr, _ = mape(data, held, params)
            line += f"; held-out {len(held)} rows MAPE {herr:.2%}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
