"""Fit the GPU parameters of the formulation on every published run and (with --write) put
them into clusters/gpus/*.yaml with the rows and uncertainty that produced them.

    python benchmarks/fit_published.py [--data FILE ...] [--dense] [--write] [--only FIELD]

Bounded, regularised least squares through the formulation (solveplan.calibration.runs_fit):
one parameter set per GPU chip, robust loss, priors from datasheets and kernel papers.
Writes benchmarks/results/fit_published.md (parameters, uncertainties, in-sample errors).

`--only FIELD` fits that GPUSpec field alone (every chip's parameter of it, with its prior), the other
parameters at their shipped values, on the rows of those chips, and writes
benchmarks/results/fit_published_FIELD.md (with --write, that field alone and a `FIELD_fit` note):
how a parameter new to the formulation (nvfp4_matmul_efficiency, for the NVFP4 rows) is fitted once
without refitting, and so moving, the others.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter

from _common import RESULTS, ROOT, commit
from solveplan.calibration.crossval import in_sample, summary
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import CHIP_OF_GPU, FIT_PARAMS, fit, gpu_updates, row_cases
from solveplan.render.validation import fit_table, summary_table

FIELDS = ("matmul_efficiency", "attention_efficiency", "flash2_attention_efficiency", "flash1_attention_efficiency",
          "fp8_matmul_efficiency", "mxfp8_matmul_efficiency", "nvfp4_matmul_efficiency",
          "layer_overhead_us", "sharded_layer_overhead_us")


def fit_only(field: str, rows, write: bool, dense: bool) -> None:
    """`--only FIELD` (module docstring); `dense`: the rows are the dense ones (--dense), as the provenance says."""
    how = f"benchmarks/fit_published.py{' --dense' if dense else ''} --only {field}"
    params = [p for p in FIT_PARAMS if p.field == field]
    assert params, f"no fitted parameter of field {field}"
    chips = {c for p in params for c in p.chips}
    cases = [c for c in row_cases(rows) if c.chip in chips]
    t0 = time.perf_counter()
    out = fit(cases, params)
    preds = in_sample(cases, out.values)
    md = [f"# {field} fitted alone on the published runs", "",
          f"`python {how}` at commit {commit()}: {len(cases)} rows of "
          f"the {', '.join(sorted(chips))} chips, the other parameters at their shipped values (clusters/gpus/*.yaml); "
          f"{out.nfev} function evaluations, {time.perf_counter() - t0:.0f} s; log-residual rms {out.rms:.3f}.", "",
          fit_table(out.values, out.sd, params), "",
          "Notes: " + ("; ".join(out.notes) if out.notes else "no parameter on a bound."), "",
          "## In sample (these chips' rows)", "", summary_table(summary(preds, "gpu"), "gpu"), ""]
    (RESULTS / f"fit_published_{field}.md").write_text("\n".join(md))
    print("\n".join(md))
    if write:
        upd = gpu_updates(out.values, params)
        per_chip = Counter(c.chip for c in cases)
        for gpu, chip in CHIP_OF_GPU.items():
            if field in upd.get(chip, {}):
                write_field(gpu, field, upd[chip][field], f"fitted alone on {per_chip[chip]} {chip}-chip rows, prior "
                            f"{params[0].prior:g}: {how} at {commit()}")


def write_field(gpu: str, field: str, value: float, comment: str) -> None:
    """Replace (or add) one field of clusters/gpus/<gpu>.yaml, the line ending in `comment`."""
    path = ROOT / "clusters" / "gpus" / f"{gpu}.yaml"
    text, line = path.read_text(), f"{field}: {value:.4g}  # {comment}"
    pattern = re.compile(rf"^{field}:.*$", re.M)
    path.write_text(pattern.sub(line, text) if pattern.search(text) else text.rstrip("\n") + "\n" + line + "\n")


def write_yaml(gpu: str, values: dict, note: str, assumed_from: str | None = None) -> None:
    """Replace (or add) the fitted fields and fit_notes of clusters/gpus/<gpu>.yaml, keeping its comments;
    `efficiencies_assumed_from` names the GPU whose fit a GPU without rows borrows (removed when it has rows)."""
    path = ROOT / "clusters" / "gpus" / f"{gpu}.yaml"
    text = re.sub(r"^efficiencies_assumed_from:.*\n", "", path.read_text(), flags=re.M)
    if assumed_from:
        values = {**values, "efficiencies_assumed_from": assumed_from}
    for key, val in list(values.items()) + [("fit_notes", note)]:
        line = f"{key}: {val}" if isinstance(val, str) else f"{key}: {val:.4g}"
        if key == "fit_notes":
            line = f'fit_notes: "{note}"'
        pattern = re.compile(rf"^{key}:.*$", re.M)
        text = pattern.sub(line, text) if pattern.search(text) else text.rstrip("\n") + "\n" + line + "\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append", default=None)
    ap.add_argument("--write", action="store_true", help="write the values into clusters/gpus/*.yaml")
    ap.add_argument("--dense", action="store_true",
                    help="fit on the dense rows only (the MoE rows neither fitted nor reported): the protocol of the "
                         "shipped parameters and of `cross_validate.py --dense`")
    ap.add_argument("--only", default=None, help="fit this GPUSpec field alone (module docstring)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = published_rows(args.data)
    if args.dense:
        rows = [r for r in rows if not (r.job is not None and r.job.model.is_moe)]
    if args.only:
        return fit_only(args.only, rows, args.write, args.dense)
    cases = row_cases(rows)
    out = fit(cases)
    preds = in_sample(cases, out.values)
    took = time.perf_counter() - t0
    per_chip = Counter(c.chip for c in cases)
    sources = Counter(c.row.source for c in cases)
    md = [
        "# GPU parameters fitted on the published runs",
        "",
        f"`python benchmarks/fit_published.py{' --dense' if args.dense else ''}` at commit {commit()}: {len(cases)} rows "
        f"({', '.join(f'{k} {v}' for k, v in sorted(sources.items()))}), {out.nfev} function evaluations, "
        f"{took:.0f} s; log-residual rms {out.rms:.3f}.",
        "",
        fit_table(out.values, out.sd, FIT_PARAMS),
        "",
        "Notes: " + ("; ".join(out.notes) if out.notes else "no parameter on a bound; every parameter informed by rows."),
        "",
        "## In sample",
        "",
        summary_table(summary(preds, "source"), "source"),
        "",
        summary_table(summary(preds, "gpu"), "gpu"),
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fit_published.md").write_text("\n".join(md))
    print("\n".join(md))
    if args.write:
        upd = gpu_updates(out.values)
        per_gpu = Counter(c.row.gpu for c in cases)
        for gpu, chip in CHIP_OF_GPU.items():
            vals = {k: v for k, v in upd.get(chip, {}).items() if k in FIELDS}
            if not vals:
                continue
            n = per_chip.get(chip, 0)
            if per_gpu.get(gpu):
                note = (f"fitted by benchmarks/fit_published.py at {commit()} on {n} published {chip}-chip rows "
                        f"({per_gpu[gpu]} of this GPU); see benchmarks/results/fit_published.md")
                write_yaml(gpu, vals, note)
            else:  # the GPU of its chip with the most rows lends its fit, and every plan says so
                donor = max((g for g, ch in CHIP_OF_GPU.items() if ch == chip), key=lambda g: per_gpu.get(g, 0))
                note = f"not fitted: no published rows for this GPU; {donor}'s fitted values ({n} {chip}-chip rows) are assumed"
                write_yaml(gpu, vals, note, assumed_from=donor)
        print("wrote clusters/gpus/*.yaml")


if __name__ == "__main__":
    main()
