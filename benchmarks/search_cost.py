"""Search cost of CP-SAT against the exhaustive search and Alpa's DP, on one formulation.

For each instance (model x cluster x knobs) and method, one fresh subprocess builds the job,
prepares the candidates and searches; it reports space size, evaluations, wall time
(including shape enumeration, coefficients and model building), peak memory (maxrss of the
subprocess, and its growth over the interpreter after imports), the optimum re-evaluated by
the float formulation, status, bound and gap. Runs stopped by their time limit are kept as
results (their time is a lower bound on the method's cost). Where two methods finish, their
optima must agree (to CP-SAT's time quantum); disagreements are flagged in the table.

Candidates per method:
- cpsat: `prepare(job)` (dominance + memory and time bounds: the product's pruning);
- exhaustive, alpa-dp: `prepare(job, prune_time=False, apply_dominance=False)`: the legal
  space minus shapes the valid memory bound proves cannot fit under any split;
- cpsat-legal: CP-SAT over those same candidates (what the encoding costs without the
  product's dominance and time pruning; also a check on the dominance rules).

Usage:
    python benchmarks/search_cost.py --smoke          # < 1 minute
    python benchmarks/search_cost.py                  # full grid, < 15 minutes on 2 cores
    python benchmarks/search_cost.py --only llama2-70b --methods cpsat,alpa-dp --no-write
Writes benchmarks/results/search_cost.{md,csv,png}.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# cpsat-legal: CP-SAT over the baselines' candidates (no dominance, no time pruning in
# `prepare`), to separate what the encoding costs from what the product's pruning saves.
METHODS = ("cpsat", "exhaustive", "alpa-dp", "cpsat-legal")

# Knob presets. "fixed": Megatron-LM's usual recipe fixed (selective recompute, sequence
# parallelism, distributed optimizer, no interleaving); the degrees, micro-batch and split
# stay free.
FIXED = {"recompute": ["selective"], "sequence_parallel": [True], "zero": [1], "vp": [1]}

TINY = {"name": "tiny-0.3b", "num_layers": 12, "hidden_size": 1024, "num_attention_heads": 16,
        "ffn_hidden_size": 4096, "vocab_size": 50257, "seq_length": 2048, "global_batch_size": 64}


def inst(name, model, cluster, knobs="free", constraints=None, batch=None, seq=None):
    cons = dict(constraints or {})
    if knobs == "fixed":
        cons = {**FIXED, **cons}
    return {"name": name, "model": model, "cluster": cluster, "knobs": knobs, "constraints": cons,
            "batch": batch, "seq": seq}


FULL = [
    inst("tiny-0.3b/a100x8 free", TINY, "a100x8"),
    inst("tiny-0.3b/a100x32 free", TINY, "a100x32"),
    inst("gpt3-1.3b/a100x8 free", "gpt3-1.3b", "a100x8"),
    inst("gpt3-2.7b/a100x16 fixed", "gpt3-2.7b", "a100x16", "fixed"),
    inst("llama2-7b/a100x64 fixed pp<=4", "llama2-7b", "a100x64", "fixed", {"pp_max": 4}),
    inst("llama2-7b/a100x64 free", "llama2-7b", "a100x64"),
    inst("gpt3-13b/a100x128 free", "gpt3-13b", "a100x128"),
    inst("llama2-70b/h100x1024 free", "llama2-70b", "h100x1024"),
    inst("gpt3-175b/a100x1024 fixed", "gpt3-175b", "a100x1024", "fixed"),
    inst("megatron-530b/a100x2240 fixed", "megatron-530b", "a100x2240", "fixed"),
    inst("llama3.1-405b/h100x4096 free", "llama3.1-405b", "h100x4096"),
    inst("megatron-1t/h100x16384 free", "megatron-1t", "h100x16384"),
]
SMOKE = [
    inst("tiny-0.3b/a100x8 free", TINY, "a100x8"),
    inst("llama2-7b/a100x64 fixed pp<=4", "llama2-7b", "a100x64", "fixed", {"pp_max": 4}),
    inst("llama2-70b/h100x1024 free", "llama2-70b", "h100x1024"),
]
REPEAT_BELOW_S = 10.0
LIMITS = {"full": {"cpsat": 60.0, "exhaustive": 45.0, "alpa-dp": 60.0, "cpsat-legal": 60.0},
          "smoke": {"cpsat": 10.0, "exhaustive": 4.0, "alpa-dp": 10.0, "cpsat-legal": 10.0}}


# ----------------------------------------------------------------------------- worker
def _rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def build_job(spec: dict):
    from solveplan.catalog import load_cluster, load_model
    from solveplan.specs import Constraints, JobSpec, ModelSpec

    model = ModelSpec(**spec["model"]) if isinstance(spec["model"], dict) else load_model(spec["model"])
    cluster = load_cluster(spec["cluster"])
    cons = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["constraints"].items()}
    return JobSpec(model=model, cluster=cluster,
                   global_batch_size=spec["batch"] or model.global_batch_size,
                   seq_length=spec["seq"] or model.seq_length, constraints=Constraints(**cons))


def _cpsat_search():
    try:
        from solveplan.search import cpsat
    except ImportError as exc:
        return None, f"solveplan.search.cpsat not importable: {exc}"
    return cpsat.search, None


def worker(spec: dict, method: str, limit_s: float) -> dict:
    import numpy as np  # noqa: F401  (import cost outside the timed region)

    from solveplan.search.baselines import PREPARE_KWARGS, alpa_dp, exhaustive
    from solveplan.search.candidates import prepare
    from solveplan.formulation.pipeline import evaluate_split

    search_fn = {"exhaustive": exhaustive.search, "alpa-dp": alpa_dp.search}.get(method)
    if method in ("cpsat", "cpsat-legal"):
        search_fn, why = _cpsat_search()
        if search_fn is None:
            return {"status": "N/A", "note": why}
    base_rss = _rss_mib()
    t0 = time.perf_counter()
    job = build_job(spec)
    cands = prepare(job) if method == "cpsat" else prepare(job, **PREPARE_KWARGS)
    t_prep = time.perf_counter() - t0
    res = search_fn(cands, time_limit_s=max(0.0, limit_s - t_prep))
    wall = time.perf_counter() - t0
    peak = _rss_mib()
    out = {
        "status": res.status, "finished": bool(res.finished), "wall_s": wall, "prepare_s": t_prep,
        "search_s": wall - t_prep, "evaluations": res.evaluations, "peak_rss_mib": peak,
        "delta_rss_mib": peak - base_rss, "shapes_searched": len(cands.shapes),
        "shapes_legal": cands.num_legal, "space_searched": str(exhaustive.count_space(cands)),
        "bound_s": res.bound_s, "stats": {k: v for k, v in (res.stats or {}).items()
                                          if isinstance(v, (int, float, str, bool, type(None)))},
    }
    phases = (res.stats or {}).get("phases")
    if isinstance(phases, list):  # CP-SAT: search effort summed over its solves
        out["branches"] = sum(int(ph.get("branches") or 0) for ph in phases if isinstance(ph, dict))
        out["solves"] = len(phases)
    if res.best is not None:
        ev = evaluate_split(cands.coeffs, res.best.index, res.best.layers)
        out.update(optimum_s=ev.step_time_s, reported_s=res.best.objective_s, fits=ev.fits,
                   shape=cands.shapes.row(res.best.index), layers=list(res.best.layers))
    # size of the legal space (all legal shapes, no dominance, no pruning): outside the timing
    from solveplan.space.enumeration import enumerate_shapes

    pp = enumerate_shapes(job, apply_dominance=False).shapes.pp
    out["space_legal"] = str(exhaustive.count_space_pp(job.model.num_layers, pp))
    out["num_gpus"] = job.cluster.num_gpus
    out["params_b"] = job.model.num_params / 1e9
    return out


# ----------------------------------------------------------------------------- parent
def run_one(spec: dict, method: str, limit_s: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec), "--method", method,
           "--limit", str(limit_s)]
    hard = limit_s * 2 + 120  # the worker stops itself; this only catches a hang
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=hard)
    except subprocess.TimeoutExpired:
        return {"status": "KILLED", "finished": False, "wall_s": time.perf_counter() - t0,
                "note": f"no answer in {hard:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": "ERROR", "finished": False, "wall_s": time.perf_counter() - t0,
                "note": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(lines[-1])


def tolerance(a: dict, b: dict) -> float:
    """Agreement tolerance between two methods' optima: CP-SAT's stated optimality tolerance
    (`tolerance_s`: its time quantum times the quanta a plan's rounding can lose), else a
    relative 1e-9 (the float methods evaluate identical splits identically)."""
    ref = max(abs(a.get("optimum_s") or 0), abs(b.get("optimum_s") or 0))
    tol = 1e-9 * ref
    for r in (a, b):
        st = r.get("stats") or {}
        for key in ("tolerance_s", "time_quantum_s"):
            if isinstance(st.get(key), (int, float)):
                tol = max(tol, float(st[key]))
                break
    return tol


def proven(r: dict) -> bool:
    return r.get("finished") and r.get("status") in ("OPTIMAL", "INFEASIBLE")


def agreement(rows: dict) -> str:
    done = {m: r for m, r in rows.items() if proven(r)}
    if len(done) < 2:
        return "n/a"
    ms = list(done)
    ok = True
    for i in range(len(ms)):
        for j in range(i + 1, len(ms)):
            a, b = done[ms[i]], done[ms[j]]
            if a["status"] != b["status"]:
                ok = False
            elif a["status"] == "OPTIMAL" and abs(a["optimum_s"] - b["optimum_s"]) > tolerance(a, b):
                ok = False
    return ("yes (" + ", ".join(ms) + ")") if ok else "NO: " + "; ".join(
        f"{m} {done[m]['status']} {done[m].get('optimum_s')}" for m in ms)


def fmt_s(x):
    if x is None:
        return "-"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def fmt_big(s):
    if s is None:
        return "-"
    n = int(s)
    return f"{n:,}" if n < 10**6 else f"{float(n):.2e}"


def ratio(num: dict, den: dict) -> str:
    """Wall-time ratio num/den; '>=' when num was stopped by its budget (its time is a floor)."""
    if not num or not den or num.get("wall_s") is None or den.get("wall_s") is None:
        return "-"
    if den.get("status") in ("N/A", "ERROR", "KILLED"):
        return "-"
    r = num["wall_s"] / den["wall_s"]
    if not num.get("finished"):
        proj = projected(num)
        extra = f" (proj. {proj / den['wall_s']:.2g}x)" if proj else ""
        return f">= {r:.2g}x{extra}"
    return f"{r:.2g}x"


def projected(r: dict):
    """Exhaustive: wall time to finish at the measured rate (space / evaluations per second)."""
    ev, sp = r.get("evaluations"), r.get("space_searched")
    if not ev or not sp or r.get("search_s", 0) <= 0:
        return None
    rate = ev / r["search_s"]
    return r.get("prepare_s", 0) + int(sp) / rate


def gap_of(r: dict):
    if r.get("optimum_s") is None or r.get("bound_s") is None:
        return None
    return max(0.0, (r["optimum_s"] - r["bound_s"]) / r["optimum_s"])


def code_version() -> str:
    """The commit the code under test came from, and whether solver/ had local changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "solver"], cwd=HERE.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"{head}{' + local changes in solver/' if dirty else ''}" if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_results(results: list[dict], out_dir: Path, mode: str, limits: dict, started: float, plot: bool = True,
                  version: str = "unknown"):
    out_dir.mkdir(parents=True, exist_ok=True)
    fields = ["instance", "knobs", "num_gpus", "params_b", "method", "status", "finished", "optimum_s", "bound_s",
              "gap", "wall_s", "prepare_s", "search_s", "evaluations", "space_searched", "space_legal",
              "shapes_legal", "shapes_searched", "branches", "peak_rss_mib", "delta_rss_mib", "time_limit_s", "agree",
              "shape", "layers", "note"]
    with open(out_dir / "search_cost.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for inst_res in results:
            for m, r in inst_res["runs"].items():
                w.writerow({"instance": inst_res["name"], "knobs": inst_res["knobs"], "num_gpus": inst_res.get("num_gpus"),
                            "params_b": inst_res.get("params_b"), "method": m, "time_limit_s": limits[m],
                            "gap": gap_of(r), "agree": inst_res["agree"],
                            "shape": json.dumps(r.get("shape")) if r.get("shape") else "",
                            "layers": " ".join(map(str, r.get("layers") or [])),
                            **{k: r.get(k) for k in fields if k in r and k not in ("shape", "layers")}})
    lines = [
        "# Search cost: CP-SAT vs exhaustive vs Alpa DP",
        "",
        f"Mode `{mode}`; per-method time limits (s): " + ", ".join(f"{m} {limits[m]:g}" for m in METHODS)
        + f". Machine: {os.cpu_count()} CPUs; one method at a time, each in a fresh subprocess; runs "
        f"under {REPEAT_BELOW_S:g} s are repeated and the median is shown. "
        f"Code at {version}. Total harness time {time.time() - started:.0f} s. Rerun: `python benchmarks/search_cost.py"
        + (" --smoke" if mode == "smoke" else "") + "`.",
        "",
        "Wall time includes job building, shape enumeration, coefficients, pruning and (CP-SAT) model "
        "building. CP-SAT searches `prepare(job)` (dominance, memory and time bounds); exhaustive, "
        "Alpa and CP-SAT (legal) search `prepare(job, prune_time=False, apply_dominance=False)` (legal "
        "shapes minus those the valid memory bound rules out). A time with `>=` is a run stopped by its limit (its status is "
        "FEASIBLE/UNKNOWN, no bound); `proj.` extrapolates the exhaustive search at its measured rate. "
        "Ratios are wall-time ratios against CP-SAT.",
        "",
        "| instance | GPUs | params | legal space (shape x split) | CP-SAT | exhaustive | Alpa DP | CP-SAT (legal) "
        "| exh./CP-SAT | Alpa/CP-SAT | Alpa/CP-SAT (legal) | optimum (s) | agree |",
        "|---|---:|---:|---:|---|---|---|---|---:|---:|---:|---:|---|",
    ]

    def cell(r, opt=None):
        if not r:
            return "-"
        st = r.get("status")
        if st in ("N/A", "ERROR", "KILLED"):
            return st
        t = ("" if r.get("finished") else ">= ") + fmt_s(r.get("wall_s")) + " s"
        ev = r.get("evaluations")
        ev_s = f", {fmt_big(ev)} ev" if ev else ""
        if r.get("branches") is not None:
            shapes = (r.get("stats") or {}).get("shapes_in_model", r.get("shapes_searched"))
            ev_s = f", {shapes} shapes, {r['solves']} solves, {fmt_big(r['branches'])} branches"
        mem = f", {r['peak_rss_mib']:.0f} MiB" if r.get("peak_rss_mib") else ""
        g = gap_of(r)
        gs = f", gap {g:.1e}" if g else ""
        vs = ""
        if not proven(r) and opt and r.get("optimum_s"):
            excess = r["optimum_s"] / opt - 1
            vs = (f", best found +{100 * excess:.2g}% over optimum" if excess > 1e-9
                  else ", found the optimum (unproven)")
        return f"{st} {t}{ev_s}{gs}{vs}{mem}"

    for inst_res in results:
        runs = inst_res["runs"]
        opt = next((runs[m].get("optimum_s") for m in ("exhaustive", "alpa-dp", "cpsat-legal", "cpsat")
                    if runs.get(m) and proven(runs[m]) and runs[m].get("optimum_s")), None)
        lines.append(
            f"| {inst_res['name']} | {inst_res.get('num_gpus', '-')} | {inst_res.get('params_b', 0):.3g}B | "
            f"{fmt_big(inst_res.get('space_legal'))} | {cell(runs.get('cpsat'), opt)} | {cell(runs.get('exhaustive'), opt)} | "
            f"{cell(runs.get('alpa-dp'), opt)} | {cell(runs.get('cpsat-legal'), opt)} | "
            f"{ratio(runs.get('exhaustive'), runs.get('cpsat'))} | {ratio(runs.get('alpa-dp'), runs.get('cpsat'))} | "
            f"{ratio(runs.get('alpa-dp'), runs.get('cpsat-legal'))} | {fmt_s(opt)} | {inst_res['agree']} |")
    lines += ["", "Plans (CP-SAT's, else the first method that has one):", ""]
    for inst_res in results:
        runs = inst_res["runs"]
        r = next((runs[m] for m in ("cpsat", "alpa-dp", "exhaustive", "cpsat-legal")
                  if runs.get(m) and runs[m].get("shape")), None)
        if r:
            sh = r["shape"]
            lines.append(f"- {inst_res['name']}: tp={sh['tp']} pp={sh['pp']} dp={sh['dp']} cp={sh['cp']} vp={sh['vp']} "
                         f"mbs={sh['micro_batch_size']} recompute={sh['recompute']} sp={sh['sequence_parallel']} "
                         f"zero={sh['zero']} layers={r.get('layers')} step {r['optimum_s']:.4g} s")
    notes = [f"- {inst_res['name']} / {m}: {r['note']}" for inst_res in results for m, r in inst_res["runs"].items()
             if r.get("note")]
    if notes:
        lines += ["", "Notes:", ""] + notes
    (out_dir / "search_cost.md").write_text("\n".join(lines) + "\n")
    if plot:
        plot_results(results, out_dir / "search_cost.png")


def plot_results(results, path: Path):
    """Left: wall time vs GPUs per method (hollow: stopped by its limit, a lower bound).
    Right: the legal space (shape x split) and each method's evaluations vs GPUs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5))
    colors = {"cpsat": "tab:blue", "exhaustive": "tab:red", "alpa-dp": "tab:green", "cpsat-legal": "tab:purple"}
    for m in METHODS:
        pts = sorted(((r["num_gpus"], r["runs"][m]) for r in results
                      if r.get("num_gpus") and m in r["runs"] and r["runs"][m].get("wall_s")
                      and r["runs"][m].get("status") not in ("N/A", "ERROR")), key=lambda p: (p[0], p[1]["wall_s"]))
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1]["wall_s"] for p in pts], "-", color=colors[m], alpha=0.5, label=m)
        for x, r in pts:
            ax.plot([x], [r["wall_s"]], "o", color=colors[m], mfc=colors[m] if r.get("finished") else "white", ms=6)
        ev = [(x, r["evaluations"]) for x, r in pts if r.get("evaluations")]
        if ev:
            bx.plot([e[0] for e in ev], [e[1] for e in ev], "o-", color=colors[m], alpha=0.7, label=f"{m} evaluations")
    sp = sorted((r["num_gpus"], int(r["space_legal"])) for r in results if r.get("num_gpus") and r.get("space_legal"))
    if sp:
        bx.plot([p[0] for p in sp], [float(p[1]) for p in sp], "k^--", alpha=0.6, label="legal space (shape x split)")
    for a_ in (ax, bx):
        a_.set_xscale("log", base=2)
        a_.set_yscale("log")
        a_.set_xlabel("GPUs")
        a_.grid(True, which="both", alpha=0.3)
        a_.legend(fontsize=8)
    ax.set_ylabel("wall time incl. model building (s)")
    ax.set_title("Search time (hollow: stopped by its time limit)")
    bx.set_ylabel("count")
    bx.set_title("Space size and evaluations")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="three instances, short limits (< 1 minute)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--only", default=None, help="substring filter on instance names")
    ap.add_argument("--limit", type=float, default=None, help="override every method's time limit (s)")
    ap.add_argument("--repeats", type=int, default=3,
                    help=f"runs of each method finishing under {REPEAT_BELOW_S:g} s; the median is kept")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--method", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.method, args.limit)), flush=True)
        return 0
    mode = "smoke" if args.smoke else "full"
    limits = dict(LIMITS[mode])
    if args.limit is not None:
        limits = {m: args.limit for m in limits}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    grid = [i for i in (SMOKE if args.smoke else FULL) if not args.only or args.only in i["name"]]
    started = time.time()
    version = code_version()
    results = []
    for spec in grid:
        runs = {}
        for m in methods:
            r = run_one(spec, m, limits[m])
            if args.repeats > 1 and r.get("finished") and r.get("wall_s", math.inf) < REPEAT_BELOW_S:
                # short runs are noisy on a shared machine: keep the run with the median wall time
                reps = [r] + [run_one(spec, m, limits[m]) for _ in range(args.repeats - 1)]
                reps = [x for x in reps if x.get("wall_s") is not None]
                reps.sort(key=lambda x: x["wall_s"])
                r = dict(reps[len(reps) // 2])
                r["wall_runs_s"] = [x["wall_s"] for x in reps]
            runs[m] = r
            print(f"{spec['name']:34s} {m:10s} {r.get('status'):9s} wall {fmt_s(r.get('wall_s'))} s "
                  f"opt {fmt_s(r.get('optimum_s'))} ev {fmt_big(r.get('evaluations'))} "
                  f"{r.get('note', '')}", flush=True)
        meta = next((r for r in runs.values() if r.get("num_gpus")), {})
        res = {"name": spec["name"], "knobs": spec["knobs"], "runs": runs, "agree": agreement(runs),
               "num_gpus": meta.get("num_gpus"), "params_b": meta.get("params_b"), "space_legal": meta.get("space_legal")}
        print(f"{'':34s} agree: {res['agree']}", flush=True)
        results.append(res)
    if not args.no_write:
        if code_version() != version:
            print(f"warning: the code changed during the run ({version} -> {code_version()})", file=sys.stderr)
            version += f" (changed during the run, now {code_version()})"
        write_results(results, Path(args.out), mode, limits, started, plot=not args.no_plot, version=version)
    bad = [r["name"] for r in results if r["agree"].startswith("NO")]
    if bad:
        print("DISAGREEMENT:", ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
