"""Issue 24's judged sweep: the share of exotic plans with prefer fastest and prefer simple.

    python benchmarks/simple_sweep.py [--time-limit 60] [--workers 1]

Runs benchmarks/grids/issue24.yaml (4 models x 5 clusters x 2 batches = 40 scenarios) twice,
`prefer: fastest` then `prefer: simple` (`solveplan.api.sweep`, one CP-SAT worker each), and
writes benchmarks/results/simple_sweep_{fastest,simple}.csv and simple_sweep.md: per mode the
share of plans with interleaving (vp > 1), context parallelism (cp > 1), an uneven split, any
of the three; whether every row carries an interval; and the judged rule for every simple plan
with vp > 1 or cp > 1: its gain over the best plan without them (a separate solve with vp and
cp fixed to 1) exceeds the tolerance (the interval's relative half-width).
"""

from __future__ import annotations

import argparse
import csv
import time

import yaml

from _common import RESULTS, ROOT, code_state
from solveplan import api
from solveplan.catalog import load_job
from solveplan.optimize import optimize

GRID = ROOT / "benchmarks" / "grids" / "issue24.yaml"


def uneven(row: dict) -> bool:
    lay = [int(x) for x in str(row["layers_per_stage"]).split(",")]
    return max(lay) - min(lay) > 1


def shares(rows: list[dict]) -> dict:
    planned = [r for r in rows if r["step_time_s"] is not None]
    n = len(planned)
    count = {"vp > 1": sum(r["vp"] > 1 for r in planned), "cp > 1": sum(r["cp"] > 1 for r in planned),
             "uneven split": sum(uneven(r) for r in planned),
             "any of them": sum(r["vp"] > 1 or r["cp"] > 1 or uneven(r) for r in planned)}
    return {"planned": n, "rows": len(rows), "with interval": sum(r["step_time_lo_s"] is not None for r in planned),
            **{k: (v, v / n if n else 0.0) for k, v in count.items()}}


def judged(row: dict, time_limit_s: float) -> dict:
    """The best plan with vp = cp = 1 against the row's plan."""
    job = load_job({"model": row["model"], "cluster": row["cluster"], "global_batch_size": row["global_batch_size"],
                    "seq_length": row["seq_length"], "constraints": {"vp": [1], "cp": [1]}})
    plain = optimize(job, time_limit_s=time_limit_s)
    plain_s = plain.plan.step_time_s if plain.plan is not None else None
    gain = plain_s / row["step_time_s"] - 1 if plain_s is not None else None
    return {"plain_s": plain_s, "plain_status": plain.status, "gain": gain, "tol": row["tolerance_rel"],
            "ok": gain is None or gain > row["tolerance_rel"]}


def _pct(x) -> str:
    return f"{x:.1%}"


def _s(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _run(prefer: str, args) -> list[dict]:
    grid = {**yaml.safe_load(GRID.read_text()), "prefer": prefer}
    return api.sweep(grid, None, workers=args.workers, time_limit_s=args.time_limit)


def _markdown(out: dict, walls: dict, checks: list, args) -> str:
    lines = ["# Exotic plans before and after `prefer: simple` (issue 24)", "",
             f"`python benchmarks/simple_sweep.py --time-limit {args.time_limit:g} --workers {args.workers}` at "
             f"{code_state()}: [grids/issue24.yaml](../grids/issue24.yaml), 4 models x 5 clusters x 2 batches; "
             "every scenario planned with prefer fastest, then prefer simple (2 shared cores).", "",
             "| | fastest | simple |", "|---|---:|---:|"]
    sh = {p: shares(rows) for p, rows in out.items()}
    lines.append(f"| scenarios planned | {sh['fastest']['planned']} of {sh['fastest']['rows']} | "
                 f"{sh['simple']['planned']} of {sh['simple']['rows']} |")
    lines.append(f"| rows with an interval | {sh['fastest']['with interval']} | {sh['simple']['with interval']} |")
    for k in ("vp > 1", "cp > 1", "uneven split", "any of them"):
        lines.append(f"| {k} | {sh['fastest'][k][0]} ({_pct(sh['fastest'][k][1])}) | "
                     f"{sh['simple'][k][0]} ({_pct(sh['simple'][k][1])}) |")
    lines.append(f"| sweep wall time | {walls['fastest']:.0f} s | {walls['simple']:.0f} s |")
    slower = [r["step_time_s"] / r["fastest_step_time_s"] - 1 for r in out["simple"] if r["step_time_s"] is not None]
    if slower:
        slower.sort()
        lines += ["", f"Simple plans against the fastest: median {_pct(slower[len(slower) // 2])} slower, at most "
                      f"{_pct(slower[-1])}; {sum(s == 0 for s in slower)} of {len(slower)} are the fastest plan."]
    lines += ["", "The judged rule, for every simple plan with vp > 1 or cp > 1: its gain over the best plan with "
                  "vp = cp = 1 (a separate solve) exceeds the tolerance (the interval's relative half-width).", ""]
    if not checks:
        lines.append("No simple plan uses vp > 1 or cp > 1.")
    else:
        lines += ["| scenario | plan | step s | best with vp = cp = 1 | gain | tolerance | rule holds |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r, c in checks:
            lines.append(f"| {r['model']} / {r['cluster']} / {r['global_batch_size']} | tp {r['tp']} pp {r['pp']} "
                         f"cp {r['cp']} vp {r['vp']} | {r['step_time_s']:.4f} | "
                         f"{_s(c['plain_s'])} | "
                         f"{'-' if c['gain'] is None else _pct(c['gain'])} | {_pct(c['tol'])} | "
                         f"{'yes' if c['ok'] else 'NO'} |")
        lines.append(f"\nRule holds on {sum(c['ok'] for _, c in checks)} of {len(checks)}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    out: dict = {}
    walls: dict = {}
    for prefer in ("fastest", "simple"):
        t0 = time.perf_counter()
        rows = _run(prefer, args)
        walls[prefer] = time.perf_counter() - t0
        with (RESULTS / f"simple_sweep_{prefer}.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        out[prefer] = rows
        print(prefer, shares(rows), f"{walls[prefer]:.0f} s", flush=True)
    checks = [(r, judged(r, args.time_limit)) for r in out["simple"]
              if r["step_time_s"] is not None and (r["vp"] > 1 or r["cp"] > 1)]
    md = _markdown(out, walls, checks, args)
    (RESULTS / "simple_sweep.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
