"""SDPA's explicit-mask kernel (transformers' sliding-window layers) against the formulation's
kernel "masked" (`layer_terms.attention_core_s`): the efficiency per head dimension fitted from
benchmarks/measured/h200-2026-11-27/sdpa_masked_sweep.json (`calibration.kernel_fit.fit_masked_attention`),
and the model's error per case at the H200 catalog's values and at one efficiency for all head
dimensions (the median of every case). Writes benchmarks/results/masked_kernel_fit.md.

    python benchmarks/masked_kernel_fit.py
"""

from __future__ import annotations

import json
import statistics

import numpy as np
from _common import RESULTS, ROOT, code_state
from solveplan.calibration.kernel_fit import attention_fwd_bwd_s, fit_masked_attention, solve_attention_efficiency
from solveplan.catalog import load_gpu

SWEEP = ROOT / "benchmarks" / "measured" / "h200-2026-11-27" / "sdpa_masked_sweep.json"


def main() -> None:
    sweep = json.loads(SWEEP.read_text())
    rows = [r for r in sweep["rows"] if r["masked"] and "fwd_bwd_s" in r]
    gpu = load_gpu("h200")
    fits = fit_masked_attention(rows, gpu)
    pooled = float(np.median([solve_attention_efficiency(r, gpu, gpu.exp_overlaps_matmul) for r in rows]))
    lines = ["# SDPA's explicit-mask kernel against the formulation", "",
             f"`python benchmarks/masked_kernel_fit.py` at {code_state()}: {len(rows)} masked cases of "
             f"`{SWEEP.relative_to(ROOT)}` ({sweep['env'].get('device')}, torch {sweep['env'].get('torch')}; "
             "benchmarks/sdpa_masked_sweep.py says how they were taken).", "",
             "| head dim | cases | fitted efficiency | MAPE at it | catalog (h200.yaml) | MAPE at catalog "
             f"| MAPE at one value for all ({pooled:.3f}) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for head_dim, fit in fits.items():
        mine = [r for r in rows if r["head_dim"] == head_dim]
        catalog = gpu.masked_attention_rate(head_dim)

        def mape(value, mine=mine):
            overlap = gpu.exp_overlaps_matmul
            return 100 * statistics.mean(abs(attention_fwd_bwd_s(r, gpu, value, overlap) / r["fwd_bwd_s"] - 1) for r in mine)
        lines.append(f"| {head_dim} | {fit.count} | {fit.value:.4f} | {100 * fit.mape:.1f}% | {catalog:.4f} "
                     f"| {mape(catalog):.1f}% | {mape(pooled):.1f}% |")
    lines += ["", "Per case, predicted / measured forward + backward at the fitted value of its head dimension:", "",
              "| heads | kv heads | head dim | tokens | measured | ratio |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = attention_fwd_bwd_s(r, gpu, fits[r["head_dim"]].value, gpu.exp_overlaps_matmul) / r["fwd_bwd_s"]
        lines.append(f"| {r['heads']} | {r['kv_heads']} | {r['head_dim']} | {r['seq']:,} "
                     f"| {1e3 * r['fwd_bwd_s']:.2f} ms | {ratio:.2f} |")
    (RESULTS / "masked_kernel_fit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
