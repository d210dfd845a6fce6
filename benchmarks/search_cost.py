"""Search cost of CP-SAT, the Alpa-style DP, branch and bound and the exhaustive search, on one
formulation and the same candidates.

Two columns of runs per instance, every method in both (branch and bound only in the first:
its bounds are the pruning):
- "pruned": `prepare(job)` (dominance, memory and time bounds: the product's pruning) and each
  method's own pruning against its incumbent (CP-SAT's cap, Alpa's stopping rules, the branch
  and bound's bounds);
- "none": `prepare(job, prune_time=False, apply_dominance=False)` (the legal shapes minus those
  the memory bound proves cannot fit any split) and no pruning inside any method
  (`cpsat.search(prune=False)`, `alpa_dp.search(prune=False)`; the exhaustive search has none).

Each run is a fresh subprocess; the time is end to end, from starting the interpreter to the
answer (imports, job, enumeration, coefficients, pruning, model building, search), with
`prepare` and the search also timed in-process. Every method gets the same time limit for
prepare + search. Runs under REPEAT_BELOW_S are repeated and the median kept; runs stopped by
the limit are kept as results (their time is a lower bound). Where runs finish, their optima must
agree (to CP-SAT's stated tolerance), across both columns.

    python benchmarks/search_cost.py --smoke          # 3 instances, 5 s limit
    python benchmarks/search_cost.py                  # 13 instances, 30 s limit (~25 minutes on 2 cores)
    python benchmarks/search_cost.py --limit 10       # the same, 10 s for every method (~12 minutes)
    python benchmarks/search_cost.py --only llama2-70b --methods cpsat,alpa-dp --no-write
Writes benchmarks/results/search_cost.{md,csv,png}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import RESULTS, code_state  # noqa: E402
METHODS = ("cpsat", "alpa-dp", "branch-bound", "exhaustive")
PRUNINGS = ("pruned", "none")
NAMES = {"cpsat": "CP-SAT", "alpa-dp": "Alpa DP", "branch-bound": "B&B", "exhaustive": "exhaustive"}
LIMIT_S = {"full": 30.0, "smoke": 5.0}  # the same for every method
REPEAT_BELOW_S = 10.0

# "fixed": Megatron-LM's usual recipe (selective recompute, SP, distributed optimizer, no
# interleaving); the degrees, micro-batch and split stay free.
FIXED = {"recompute": ["selective"], "sequence_parallel": [True], "zero": [1], "vp": [1]}
TINY = {"name": "tiny-0.3b", "num_layers": 12, "hidden_size": 1024, "num_attention_heads": 16,
        "ffn_hidden_size": 4096, "vocab_size": 50257, "seq_length": 2048, "global_batch_size": 64}
DEEP = {"name": "deep-1024L", "num_layers": 1024, "hidden_size": 2048, "num_attention_heads": 16,
        "ffn_hidden_size": 8192, "vocab_size": 50257, "seq_length": 2048, "global_batch_size": 1024}


def inst(name, model, cluster, knobs="free", constraints=None):
    cons = {**(FIXED if knobs == "fixed" else {}), **(constraints or {})}
    return {"name": name, "model": model, "cluster": cluster, "knobs": knobs, "constraints": cons}


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
    inst("deep-1024L/a100x256 fixed", DEEP, "a100x256", "fixed"),
]
SMOKE = [FULL[0], FULL[4], FULL[7]]


# ----------------------------------------------------------------------------- worker
def _rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def build_job(spec: dict):
    from solveplan.catalog import load_cluster, load_model
    from solveplan.specs import Constraints, JobSpec, ModelSpec

    model = ModelSpec(**spec["model"]) if isinstance(spec["model"], dict) else load_model(spec["model"])
    cons = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["constraints"].items()}
    return JobSpec(model=model, cluster=load_cluster(spec["cluster"]), global_batch_size=model.global_batch_size,
                   seq_length=model.seq_length, constraints=Constraints(**cons))


def _method(method: str, pruning: str):
    """The search function (imported here: a run imports what its method needs)."""
    prune = pruning == "pruned"
    if method == "cpsat":
        from solveplan.search.cpsat.solve import search

        return lambda c, t: search(c, t, prune=prune)
    from solveplan.search.baselines import alpa_dp, branch_bound, exhaustive

    return {"alpa-dp": lambda c, t: alpa_dp.search(c, t, prune=prune), "branch-bound": branch_bound.search,
            "exhaustive": exhaustive.search}[method]


def worker(spec: dict, method: str, pruning: str, limit_s: float) -> None:
    """Prints the answer as soon as it is known (the parent stamps the end-to-end time), then
    what is measured afterwards (space sizes, the plan re-evaluated)."""
    t_imp = time.perf_counter()
    from solveplan.search.candidates import prepare

    search = _method(method, pruning)
    job = build_job(spec)
    t0 = time.perf_counter()
    cands = prepare(job) if pruning == "pruned" else prepare(job, prune_time=False, apply_dominance=False)
    t_prep = time.perf_counter() - t0
    res = search(cands, max(0.0, limit_s - t_prep))
    t_search = time.perf_counter() - t0 - t_prep
    phases = (res.stats or {}).get("phases") or []
    out = {"status": res.status, "finished": bool(res.finished), "import_s": t0 - t_imp, "prepare_s": t_prep,
           "search_s": t_search, "peak_rss_mib": _rss_mib(), "evaluations": res.evaluations,
           "shapes_searched": cands.num_survivors, "bound_s": res.bound_s,
           "branches": sum(int(p.get("branches") or 0) for p in phases) if method == "cpsat" else None,
           "in_model": (res.stats or {}).get("shapes_in_model"), "tolerance_s": (res.stats or {}).get("tolerance_s"),
           "reported_s": res.best.objective_s if res.best else None}
    print("ANSWER " + json.dumps(out), flush=True)
    from solveplan.formulation.pipeline import evaluate_split
    from solveplan.search.baselines import exhaustive
    from solveplan.space.enumeration import enumerate_shapes

    extra = {"space_searched": str(exhaustive.count_space(cands)), "num_gpus": job.cluster.num_gpus,
             "params_b": job.model.num_params / 1e9, "shapes_legal": cands.num_legal,
             "space_legal": str(exhaustive.count_space_pp(job.model.num_layers,
                                                          enumerate_shapes(job).shapes.pp,
                                                          job.constraints.uneven_split))}
    if res.best is not None:
        ev = evaluate_split(cands.coeffs, res.best.index, res.best.layers)
        extra.update(optimum_s=ev.step_time_s, fits=ev.fits, shape=cands.shapes.row(res.best.index),
                     layers=list(res.best.layers))
    print("EXTRA " + json.dumps(extra), flush=True)


# ----------------------------------------------------------------------------- parent
def run_one(spec: dict, method: str, pruning: str, limit_s: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec), "--method", method,
           "--pruning", pruning, "--limit", str(limit_s)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, e2e = {}, None
    try:
        for line in proc.stdout:
            if line.startswith("ANSWER "):
                e2e = time.perf_counter() - t0
                out.update(json.loads(line[7:]))
            elif line.startswith("EXTRA "):
                out.update(json.loads(line[6:]))
        proc.wait(timeout=limit_s * 2 + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return {"status": "KILLED", "finished": False, "e2e_s": time.perf_counter() - t0}
    if e2e is None:
        return {"status": "ERROR", "finished": False, "e2e_s": time.perf_counter() - t0,
                "note": (proc.stderr.read().strip().splitlines() or ["?"])[-1][:200]}
    out["e2e_s"] = e2e
    return out


def run_median(spec: dict, method: str, pruning: str, limit_s: float, repeats: int) -> dict:
    r = run_one(spec, method, pruning, limit_s)
    if repeats > 1 and r.get("finished") and r["e2e_s"] < REPEAT_BELOW_S:
        reps = sorted([r] + [run_one(spec, method, pruning, limit_s) for _ in range(repeats - 1)],
                      key=lambda x: x["e2e_s"])
        r = dict(reps[len(reps) // 2])
        r["e2e_runs_s"] = [x["e2e_s"] for x in reps]
    return r


def proven(r: dict) -> bool:
    return bool(r.get("finished")) and r.get("status") in ("OPTIMAL", "INFEASIBLE")


def agreement(runs: dict) -> str:
    """All runs that proved their answer (both columns) agree, to the coarsest stated tolerance."""
    done = {k: r for k, r in runs.items() if proven(r)}
    if len(done) < 2:
        return "n/a"
    statuses = {r["status"] for r in done.values()}
    opts = [r["optimum_s"] for r in done.values() if r.get("optimum_s") is not None]
    tol = max([1e-9 * max(opts, default=1.0)] + [r["tolerance_s"] for r in done.values() if r.get("tolerance_s")])
    ok = len(statuses) == 1 and (not opts or max(opts) - min(opts) <= tol)
    names = ", ".join(f"{NAMES[m]} ({p})" for p, m in done)
    return f"yes: {names}" if ok else "NO: " + "; ".join(f"{NAMES[m]} ({p}) {r['status']} {r.get('optimum_s')}"
                                                        for (p, m), r in done.items())


def fastest(runs: dict, pruning: str):
    """(method, run) of the fastest run in this column that proved its answer."""
    cands = [(m, r) for (p, m), r in runs.items() if p == pruning and proven(r)]
    return min(cands, key=lambda mr: mr[1]["e2e_s"]) if cands else (None, None)


def fmt_s(x) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.3g} s" if x < 100 else f"{x:.0f} s"


def fmt_big(s) -> str:
    if s is None:
        return "-"
    n = int(s)
    return f"{n:,}" if n < 10**6 else f"{float(n):.2e}"


def cell(r: dict) -> str:
    if not r:
        return "-"
    if r.get("status") in ("ERROR", "KILLED"):
        return r["status"]
    stop = "" if r.get("finished") else ">= "
    if r.get("branches") is None:
        work = f"{fmt_big(r.get('evaluations'))} ev"
    elif r.get("in_model") is None:  # stopped before the model was built
        work = "stopped before the model"
    else:
        work = f"{r['in_model']} shapes in model, {fmt_big(r.get('branches'))} branches"
    return f"{r['status']} {stop}{fmt_s(r['e2e_s'])} ({fmt_s(r.get('search_s'))} search; {work})"


def write_results(results: list[dict], out_dir: Path, mode: str, limit_s: float, header: dict, plot: bool = True):
    out_dir.mkdir(parents=True, exist_ok=True)
    fields = ["instance", "knobs", "num_gpus", "params_b", "pruning", "method", "status", "finished", "optimum_s",
              "bound_s", "e2e_s", "import_s", "prepare_s", "search_s", "evaluations", "branches", "in_model",
              "space_searched", "space_legal", "shapes_legal", "shapes_searched", "peak_rss_mib", "time_limit_s",
              "agree", "shape", "layers", "e2e_runs_s", "note"]
    with open(out_dir / "search_cost.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for res in results:
            for (p, m), r in res["runs"].items():
                w.writerow({**r, "instance": res["name"], "knobs": res["knobs"], "num_gpus": res.get("num_gpus"),
                            "params_b": res.get("params_b"), "pruning": p, "method": m, "time_limit_s": limit_s,
                            "agree": res["agree"], "shape": json.dumps(r["shape"]) if r.get("shape") else "",
                            "layers": " ".join(map(str, r.get("layers") or []))})
    lines = [
        "# Search cost: CP-SAT vs Alpa DP vs branch and bound vs exhaustive",
        "",
        f"Mode `{mode}`, code at {header['version']}; every method gets {limit_s:g} s for prepare + search. "
        f"{os.cpu_count()} CPUs, shared: load average {header['load_start']:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end. Each run is a fresh process; runs under {REPEAT_BELOW_S:g} s are "
        f"repeated 3 times and the median is shown. Harness time {time.time() - header['started']:.0f} s. "
        f"Rerun: `python benchmarks/search_cost.py{' --smoke' if mode == 'smoke' else ''}`.",
        "",
        "Times are end to end: from starting the interpreter to the answer (imports, job, enumeration, "
        "coefficients, pruning, model building, search); `search` is the method alone. `>=`: stopped by the "
        "limit (FEASIBLE/UNKNOWN, nothing proven). `ev`: configurations evaluated (the Alpa DP: DP cells).",
        "",
        "**With pruning** -- every method on `prepare(job)` (dominance, memory and time bounds) with its own "
        "incumbent pruning on:",
        "",
        "| instance | GPUs | shapes | CP-SAT | Alpa DP | branch and bound | exhaustive | fastest | CP-SAT / fastest |",
        "|---|---:|---:|---|---|---|---|---|---:|",
    ]
    slower = []
    for col in PRUNINGS:
        if col == "none":
            lines += ["", "**Without pruning** -- every method on `prepare(job, prune_time=False, "
                      "apply_dominance=False)` (legal shapes minus those no split fits) and no pruning against an "
                      "incumbent inside any method (CP-SAT: every shape in the model, uncapped; Alpa: no stopping "
                      "rule):", "",
                      "| instance | legal space (shape x split) | shapes | CP-SAT | Alpa DP | exhaustive | fastest "
                      "| CP-SAT / fastest |", "|---|---:|---:|---|---|---|---|---:|"]
        for res in results:
            runs = res["runs"]
            fm, fr = fastest(runs, col)
            cp = runs.get((col, "cpsat"))
            ratio = f"{cp['e2e_s'] / fr['e2e_s']:.2f}" if cp and fr and proven(cp) else ">= " + (
                f"{cp['e2e_s'] / fr['e2e_s']:.2f}" if cp and fr else "-")
            if fm and fm != "cpsat":
                slower.append(f"- {res['name']}, {'with' if col == 'pruned' else 'without'} pruning: {NAMES[fm]} "
                              f"{fmt_s(fr['e2e_s'])}, CP-SAT {fmt_s(cp['e2e_s']) if cp else '-'} ({ratio}x)")
            shapes = next((r.get("shapes_searched") for (p, _), r in runs.items() if p == col and r.get("shapes_searched")
                           is not None), None)
            cells = [cell(runs.get((col, m))) for m in METHODS if not (col == "none" and m == "branch-bound")]
            head = (f"| {res['name']} | {res.get('num_gpus', '-')} | {fmt_big(shapes)} |" if col == "pruned" else
                    f"| {res['name']} | {fmt_big(res.get('space_legal'))} | {fmt_big(shapes)} |")
            lines.append(f"{head} {' | '.join(cells)} | {NAMES.get(fm, '-')} | {ratio} |")
    lines += ["", "Where CP-SAT is not the fastest (end to end):", ""] + (slower or ["- nowhere"])
    lines += ["", "Agreement of the runs that proved their answer:", ""]
    lines += [f"- {res['name']}: {res['agree']}" for res in results]
    lines += ["", "Plans (the first run with one):", ""]
    for res in results:
        r = next((r for r in res["runs"].values() if r.get("shape")), None)
        if r:
            sh = r["shape"]
            lines.append(f"- {res['name']}: tp={sh['tp']} pp={sh['pp']} dp={sh['dp']} cp={sh['cp']} vp={sh['vp']} "
                         f"mbs={sh['micro_batch_size']} recompute={sh['recompute']} sp={sh['sequence_parallel']} "
                         f"zero={sh['zero']} layers={r.get('layers')} step {r['optimum_s']:.4g} s")
    notes = [f"- {res['name']} / {NAMES[m]} ({p}): {r['note']}" for res in results for (p, m), r in res["runs"].items()
             if r.get("note")]
    if notes:
        lines += ["", "Notes:", ""] + notes
    (out_dir / "search_cost.md").write_text("\n".join(lines) + "\n")
    if plot:
        plot_results(results, out_dir / "search_cost.png")


def plot_results(results, path: Path):
    """End-to-end time vs GPUs per method, with pruning (left) and without (right); hollow
    markers: stopped by the limit (a lower bound)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    colors = {"cpsat": "tab:blue", "exhaustive": "tab:red", "alpa-dp": "tab:green", "branch-bound": "tab:orange"}
    for ax, col in zip(axes, PRUNINGS):
        for m in METHODS:
            pts = sorted(((r["num_gpus"], r["runs"][(col, m)]) for r in results
                          if r.get("num_gpus") and (col, m) in r["runs"] and r["runs"][(col, m)].get("e2e_s")),
                         key=lambda p: p[0])  # instances with equal GPU counts keep their order
            pts = [(x, r) for x, r in pts if r.get("status") not in ("ERROR", "KILLED")]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1]["e2e_s"] for p in pts], "-", color=colors[m], alpha=0.4, label=NAMES[m])
            for x, r in pts:
                ax.plot([x], [r["e2e_s"]], "o", color=colors[m], mfc=colors[m] if proven(r) else "white", ms=6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(("With" if col == "pruned" else "Without") + " pruning (hollow: stopped by the limit)")
    axes[0].set_ylabel("end-to-end time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="three instances, 5 s limit")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--prunings", default=",".join(PRUNINGS))
    ap.add_argument("--only", default=None, help="substring filter on instance names")
    ap.add_argument("--limit", type=float, default=None, help="override the time limit (s), for every method")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--method", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pruning", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker), args.method, args.pruning, args.limit)
        return 0
    mode = "smoke" if args.smoke else "full"
    limit_s = args.limit if args.limit is not None else LIMIT_S[mode]
    methods = [m for m in args.methods.split(",") if m]
    prunings = [p for p in args.prunings.split(",") if p]
    grid = [i for i in (SMOKE if args.smoke else FULL) if not args.only or args.only in i["name"]]
    header = {"started": time.time(), "version": code_state(), "load_start": os.getloadavg()[0]}
    results = []
    for spec in grid:
        runs = {}
        for p in prunings:
            for m in methods:
                if p == "none" and m == "branch-bound":
                    continue
                r = runs[(p, m)] = run_median(spec, m, p, limit_s, args.repeats)
                print(f"{spec['name']:32s} {p:6s} {m:12s} {r.get('status'):9s} e2e {fmt_s(r.get('e2e_s')):>8s} "
                      f"search {fmt_s(r.get('search_s')):>8s} opt {r.get('optimum_s')} {r.get('note', '')}", flush=True)
        meta = next((r for r in runs.values() if r.get("num_gpus")), {})
        res = {"name": spec["name"], "knobs": spec["knobs"], "runs": runs, "agree": agreement(runs),
               "num_gpus": meta.get("num_gpus"), "params_b": meta.get("params_b"), "space_legal": meta.get("space_legal")}
        print(f"{'':32s} agree: {res['agree']}", flush=True)
        results.append(res)
    if not args.no_write:
        if code_state() != header["version"]:
            header["version"] += f" (changed during the run, now {code_state()})"
        write_results(results, Path(args.out), mode, limit_s, header, plot=not args.no_plot)
    bad = [r["name"] for r in results if r["agree"].startswith("NO")]
    if bad:
        print("DISAGREEMENT:", ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
