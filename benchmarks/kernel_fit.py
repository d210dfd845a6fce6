"""The formulation's kernel terms against kernels measured on a real GPU.

    python benchmarks/kernel_fit.py [--kernels FILE] [--gpu NAME]

Reads a kernel file (`../shared/data/h200_kernels.json` by default: 288 bf16 and 64 FP8 GEMMs
of real layers and 30 causal attention cases measured on one H200, with how they were taken;
or what `solveplan probe` writes) and reports, per kernel family:
- the efficiency fitted from the kernels alone (`solveplan.calibration.kernel_fit`), and the
  model's error at it (how well its shape terms -- waves, short K, causal blocks -- follow them);
- the model's error at the GPU's catalog efficiency (fitted end to end on published training
  runs, or assumed: the catalog file says which).
Writes benchmarks/results/kernel_fit.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from _common import RESULTS, ROOT, code_state
from solveplan.calibration.kernel_fit import fit_kernels, ratios_at
from solveplan.catalog import load_gpu

DEFAULT_KERNELS = ROOT.parent / "shared" / "data" / "h200_kernels.json"


def _mape(ratios) -> str:
    return "—" if ratios is None or not len(ratios) else f"{100 * float(np.mean(np.abs(np.asarray(ratios) - 1))):.1f}%"


def _row(fit, gpu, measurements) -> str:
    errs = np.abs(np.asarray(fit.ratios) - 1)
    catalog = getattr(gpu, fit.field, None)
    if catalog is None and fit.field != "hbm_efficiency":  # unset: the formulation falls back to the GEMM one
        catalog = gpu.matmul_efficiency
    at_catalog = ratios_at(measurements, gpu, fit.field, catalog) if fit.field != "hbm_efficiency" else None
    return (f"| {fit.field} | {fit.count} | {fit.value:.3f} | {_mape(fit.ratios)} | {100 * np.median(errs):.1f}% | "
            f"{100 * errs.max():.1f}% | {catalog:.3f} | {_mape(at_catalog)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=DEFAULT_KERNELS)
    ap.add_argument("--gpu", default="h200", help="catalog GPU whose datasheet and efficiencies are compared")
    args = ap.parse_args()
    measurements = json.loads(args.kernels.read_text())
    gpu = load_gpu(args.gpu)
    fits = fit_kernels(measurements, gpu)
    env = measurements.get("env", {})
    lines = [
        "# Kernel terms of the formulation against measured kernels",
        "",
        f"`python benchmarks/kernel_fit.py --kernels {args.kernels.name} --gpu {args.gpu}` at {code_state()}.",
        f"Kernels: {measurements.get('what', '?')} ({env.get('device', '?')}, torch {env.get('torch', '?')}).",
        "",
        "Fitted: the efficiency at which the formulation's kernel model (`formulation/kernels.py`) "
        "matches the median kernel; error: |predicted/measured - 1| per kernel at that value. "
        f"Catalog: the value in `clusters/gpus/{args.gpu}.yaml` ({gpu.fit_notes or 'no fit notes'}) "
        "and the model's error at it.",
        "",
        "| field | kernels | fitted | MAPE | median err | worst | catalog | MAPE at catalog |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(fit, gpu, measurements) for fit in fits]
    lines += ["", "A kernel-level efficiency is an upper bound of the end-to-end one: a training step also "
              "waits on launches, synchronisation and memory-bound work the kernels here do not include."]
    out = RESULTS / "kernel_fit.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
