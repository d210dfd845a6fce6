"""How the formulation predicts the published NVFP4 runs (Transformer Engine's NVFP4BlockScaling).

    python benchmarks/nvfp4_rows.py

The NVFP4 rows of the published files (../shared/data, or the shipped copy): each one in sample
(the shipped GPU parameters, nvfp4_matmul_efficiency fitted by `fit_published.py --dense --only
nvfp4_matmul_efficiency`) and left out of the fit by source, by model family and by GPU (the folds of
`cross_validate.py --dense`, fitted on the dense rows of the other groups: the NVFP4 efficiency at its
prior where the fold holds no NVFP4 row). The mixture-of-experts NVFP4 rows are predicted by
`moe_validation.py` (its folds fit on every row, MoE included): their errors are read from its committed
results/moe_validation.json, so run that first. The NVFP4 rows a reader skips are listed with the reason.
Writes benchmarks/results/nvfp4_rows.md.
"""

from __future__ import annotations

import json
import time

import numpy as np
from _common import RESULTS, commit
from solveplan.calibration.crossval import cross_validate, group_of, in_sample
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import row_cases


def main() -> None:
    t0 = time.perf_counter()
    rows = published_rows()
    fp4 = [r for r in rows if "nvfp4" in str(r.raw.get("precision", "")).lower()]
    dense = row_cases([r for r in rows if not r.skipped and not r.job_spec.model.is_moe])
    mine = [c for c in dense if c.row.job_spec.precision == "nvfp4"]
    errors = {"in sample": {id(p.row): p.error for p in in_sample(mine)}}
    for by in ("source", "model", "gpu"):
        errors[f"left out by {by}"] = {}
        for g in sorted({group_of(c.row, by) for c in mine}):
            preds, _ = cross_validate(dense, by, only=g)
            errors[f"left out by {by}"].update({id(p.row): p.error for p in preds
                                                if p.row.job_spec.precision == "nvfp4"})
    cols = list(errors)
    md = ["# The published NVFP4 runs", "",
          f"`python benchmarks/nvfp4_rows.py` at commit {commit()}: {len(fp4)} NVFP4 rows, {len(mine)} dense ones "
          f"predicted here, "
          f"{time.perf_counter() - t0:.0f} s. Error = predicted / measured - 1.", "",
          "| row | measured s | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    for c in mine:
        md.append(f"| {c.row.id} | {c.row.measured:.3f} | "
                  + " | ".join(f"{100 * errors[k][id(c.row)]:+.1f}%" for k in cols) + " |")
    md.append("| **MAPE** | | " + " | ".join(
        f"**{100 * np.mean([abs(v) for v in errors[k].values()]):.1f}%**" for k in cols) + " |")
    md += _moe_lines({r.id for r in fp4 if not r.skipped and r.job_spec.model.is_moe}, cols)
    md += ["", "Skipped:", ""] + [f"- {r.id}: {r.skipped}" for r in fp4 if r.skipped] + [""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "nvfp4_rows.md").write_text("\n".join(md))
    print("\n".join(md))


def _moe_lines(ids: set[str], cols: list[str]) -> list[str]:
    """The MoE NVFP4 rows as moe_validation.py predicted them (its committed JSON), one table."""
    if not ids:
        return []
    res = json.loads((RESULTS / "moe_validation.json").read_text())
    runs = [("in sample", res["rows"])] + [(f"left out by {by}", res["left_out"][by]["rows"]) for by in
                                           ("source", "model", "gpu")]
    err = {k: {x["id"]: x for x in rows if x["id"] in ids} for k, rows in runs}
    out = ["", f"Mixture-of-experts NVFP4 rows ({len(ids)}), from moe_validation.json at {res['commit']} "
                "(`python benchmarks/moe_validation.py`):", "",
           "| row | measured s | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    for i in sorted(ids):
        first = err["in sample"].get(i)
        cells = [f"{100 * err[k][i]['error']:+.1f}%" if i in err[k] else "-" for k in cols]
        out.append(f"| {i} | {first['measured_s']:.3f} | " + " | ".join(cells) + " |" if first else f"| {i} | - | "
                   + " | ".join(cells) + " |")
    out.append("| **MAPE** | | " + " | ".join(
        f"**{100 * np.mean([abs(x['error']) for x in err[k].values()]):.1f}%**" if err[k] else "-" for k in cols) + " |")
    return out


if __name__ == "__main__":
    main()
