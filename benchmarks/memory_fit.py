"""Published runs the memory estimate says cannot fit, although they ran: the cost of an upper bound.

    python benchmarks/memory_fit.py [--out benchmarks/results/memory_fit.md]

Every readable published row is predicted as `solveplan validate` does (calibration.runs_fit.RowCase: the
fastest of the row's legal shapes that fits, else the fastest), with the shipped parameters. A row whose
chosen shape is over its GPU's memory is one the planner would refuse although the source ran it: the
estimate (an upper bound of what a run reserves: allocator fragmentation, CUDA context and NCCL buffers
included, formulation/memory.py) is too high there by at least the overshoot shown. The table gives the
fullest stage's parts, so that what is over is visible.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import RESULTS, commit  # noqa: E402
from solveplan.calibration.rows import published_rows  # noqa: E402
from solveplan.calibration.runs_fit import RowCase  # noqa: E402

GIB = 1024**3
PARTS = ("params", "grads", "optimizer", "activations", "other")


def row_memory(r) -> dict:
    """The chosen shape's peak and capacity (GiB) and the fullest stage's parts."""
    ev, sh, fits = RowCase(r).evaluate_chosen()
    stage = max(ev.stages, key=lambda st: st["memory_bytes"]["total"])
    parts = {p: stage["memory_bytes"][p] / GIB for p in PARTS}
    return dict(id=r.id, source=r.source, fits=fits, peak=ev.peak_memory_bytes / GIB, cap=ev.capacity_bytes / GIB,
                parts=parts, shape=f"tp {sh.tp[0]} pp {sh.pp[0]} cp {sh.cp[0]} vp {sh.vp[0]} mbs {sh.micro_batch_size[0]} "
                                    f"zero {sh.zero[0]} {r.job_spec.precision}")


def report(mems: list[dict], commit: str) -> str:
    over = [m for m in mems if not m["fits"]]
    by_source: dict[str, list[dict]] = defaultdict(list)
    for m in mems:
        by_source[m["source"]].append(m)
    out = ["# Published runs predicted not to fit", "",
           f"`python benchmarks/memory_fit.py` at {commit}: {len(mems)} published rows predicted with the shipped "
           f"parameters; **{len(over)}** come out above their GPU's memory although they ran.", "",
           "| source | rows | predicted not to fit | worst overshoot |", "|---|---:|---:|---:|"]
    for src in sorted(by_source):
        ms = by_source[src]
        bad = [m["peak"] / m["cap"] - 1 for m in ms if not m["fits"]]
        out.append(f"| {src} | {len(ms)} | {len(bad)} | {f'+{max(bad):.1%}' if bad else '-'} |")
    out += ["", "The rows over (the fullest stage, GiB):", "",
            "| row | shape | params | grads | optimizer | activations | other | peak | memory | overshoot |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in sorted(over, key=lambda m: m["peak"] / m["cap"], reverse=True):
        p = m["parts"]
        out.append(f"| {m['id']} | {m['shape']} | " + " | ".join(f"{p[k]:.1f}" for k in PARTS)
                   + f" | {m['peak']:.1f} | {m['cap']:.0f} | +{m['peak'] / m['cap'] - 1:.1%} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "memory_fit.md")
    a = ap.parse_args(argv)
    mems = [row_memory(r) for r in published_rows() if not r.skipped]
    text = report(mems, commit())
    a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
