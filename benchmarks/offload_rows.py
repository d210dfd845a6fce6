"""The published runs that offload activations to the Grace CPU (Megatron-Bridge's Megatron-FSDP GB200/GB300
presets, `cpu_offloading_num_layers`): measured vs predicted step time and predicted peak memory, with the
shipped parameters (nothing refitted).

    python benchmarks/offload_rows.py [--out benchmarks/results/offload_rows.md]

Each row is predicted as `solveplan validate` does (calibration.runs_fit.RowCase: the fastest of the row's
legal shapes that fits, else the fastest); the table adds the shape, the exposed offloading time
(formulation/offload.py) and the memory of that plan.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import RESULTS, commit  # noqa: E402
from solveplan.calibration.rows import published_rows  # noqa: E402
from solveplan.calibration.runs_fit import RowCase  # noqa: E402

GIB = 1024**3


def row_line(r) -> str:
    ev, sh, fits = RowCase(r).evaluate_chosen()
    step = ev.step_time_s
    act = ev.stages[0]["memory_bytes"]["activations"] / GIB
    return (f"| {r.id} | {r.job_spec.cpu_offloading_num_layers} of {r.job_spec.model.num_layers} | "
            f"{r.job_spec.precision} | tp {sh.tp[0]}, mbs {sh.micro_batch_size[0]}, zero {sh.zero[0]}, "
            f"SP {'on' if sh.sequence_parallel[0] else 'off'} | {r.measured:.3f} | {step:.3f} | "
            f"{100 * (step / r.measured - 1):+.1f}% | {ev.breakdown['offload_s']:.3f} | {act:.1f} | "
            f"{ev.peak_memory_bytes / GIB:.1f} of {ev.capacity_bytes / GIB:.0f} | {'yes' if fits else 'NO'} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "offload_rows.md")
    a = ap.parse_args(argv)
    rows = [r for r in published_rows() if not r.skipped and r.job_spec.cpu_offloading_num_layers]
    out = ["# Published runs with CPU activation offloading", "",
           f"`python benchmarks/offload_rows.py` at {commit()}: the {len(rows)} published rows that offload activations "
           "to the Grace CPU, predicted with the shipped parameters (nothing refitted). Where each row's layer count "
           "comes from is in its assumptions (`solveplan validate --json`).", "",
           "| row | layers offloaded | precision | shape chosen | measured s | predicted s | error | exposed "
           "offload s | activations GiB | peak GiB | fits |", "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    out += [row_line(r) for r in rows]
    text = "\n".join(out) + "\n"
    a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
