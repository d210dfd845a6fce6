"""Joint model benchmark (issue #13): generated mixed-pool and unequal-link clusters of 4 to 128
nodes; per instance, the joint CP-SAT model against the sequential method (shape and split for
equal links, then the optimal placement of that plan), Pipette-style simulated annealing over
placements, and the exhaustive joint search where the cluster is small (<= 8 nodes). Every
step time is the same float formulation's. Records search time, status, gap and step of each,
how often and by how much joint beats sequential, and the 128-node two-pool instance with
degraded links. Writes benchmarks/results/joint.md.

    python benchmarks/joint.py [--time-limit 60] [--workers 2] [--quick] [--only NAME ...] [--methods joint ...]

`--only` runs just the named instances (cluster names: mixed-32-s0, unequal-64-s0,
mixed-128-degraded, ...) and prints their rows without writing the results file; `--methods`
runs a subset of the methods (same rule).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import commit  # noqa: E402

from solveplan.catalog import load_cluster, load_model  # noqa: E402
from solveplan.optimize import POOL_ALONE, optimize  # noqa: E402
from solveplan.search.joint.baselines import anneal, sequential, uniform_description  # noqa: E402
from solveplan.search.joint.exhaustive import EXHAUSTIVE_MAX_NODES, solve_exhaustive  # noqa: E402
from solveplan.search.joint.nodes import node_set  # noqa: E402
from solveplan.search.joint.prepare import prepare_joint  # noqa: E402
from solveplan.optimize.joint import optimize_joint  # noqa: E402
from solveplan.specs import JobSpec  # noqa: E402

OUT = Path(__file__).parent / "results" / "joint.md"
METHODS = ("joint", "sequential", "anneal", "exhaustive")
H100 = {"gpu": "h100-sxm", "gpus_per_node": 8, "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400}
A100 = {"gpu": "a100-80gb", "gpus_per_node": 8, "nvlink_gbyte_per_s": 300, "nic_gbit_per_s": 200}
# (total nodes, model, global batch) of the generated instances
# (small models on <= 8 nodes so that the exhaustive search can finish)
SIZES = [(4, "gpt3-125m", 64), (6, "gpt3-6.7b", 256), (8, "gpt3-350m", 128), (16, "gpt3-6.7b", 512),
         (32, "gpt3-13b", 1024), (64, "gpt3-13b", 1024)]


def degraded(rng, n: int, k: int) -> list[dict]:
    """`k` random node pairs at a quarter or a tenth of their rate (measured as 25 or 10 Gbit/s)."""
    out, seen = [], set()
    while len(out) < min(k, n * (n - 1) // 2):
        a, b = sorted(map(int, rng.integers(0, n, 2)))
        if a != b and (a, b) not in seen:
            seen.add((a, b))
            out.append({"src": a, "dst": b, "gbit_per_s": float(rng.choice([10.0, 25.0]))})
    return out


def mixed_cluster(n: int, seed: int, fast_share: float = 0.25, spine: bool = False) -> dict:
    """Two pools (H100 then A100), `fast_share` of the nodes H100, inter-pool 100 Gbit/s,
    a few degraded pairs; with `spine`, racks of 16 (8 on small clusters) behind a 2:1 spine."""
    rng = np.random.default_rng(seed)
    fast = max(1, int(round(n * fast_share)))
    pools = [{"name": "h100", "num_nodes": fast, **H100}, {"name": "a100", "num_nodes": n - fast, **A100}]
    if spine:
        for p in pools:
            if p["num_nodes"] >= 4:
                p.update(nodes_per_leaf=min(16, p["num_nodes"] // 2), spine_oversubscription=2.0)
    return {"name": f"mixed-{n}-s{seed}", "pools": pools, "inter_pool_gbit_per_s": 100.0,
            "link_overrides": degraded(rng, n, max(1, n // 16))}


def unequal_cluster(n: int, seed: int) -> dict:
    """One A100 pool with unequal links: racks behind a 4:1 spine and a few degraded pairs."""
    rng = np.random.default_rng(1000 + seed)
    return {"name": f"unequal-{n}-s{seed}", "gpu": "a100-80gb", "gpus_per_node": 8, "num_nodes": n,
            "nvlink_gbyte_per_s": 300, "nic_gbit_per_s": 200, "nodes_per_leaf": max(1, n // 2),
            "spine_oversubscription": 4.0, "link_overrides": degraded(rng, n, max(1, n // 8))}


@dataclass
class Row:
    kind: str
    nodes: int
    model: str
    batch: int
    cluster: str
    res: dict = field(default_factory=dict)  # method -> (status, step_s, gap, wall_s)


def pools_alone(job: JobSpec, limit_s: float, workers: int):
    """Each pool planned alone by the single-type model (as `optimize._search_placed` does)."""
    out = []
    for pl, view in enumerate(job.cluster.pool_views()):
        r = optimize(job.model_copy(update={"cluster": view}), time_limit_s=min(POOL_ALONE.most_s, POOL_ALONE.share * limit_s),
                     workers=workers, textbook=False)
        if r.plan is not None:
            out.append((pl, r.plan))
    return out


def seeds(alone):
    return [(p.parallel.model_dump(), (pl,) * p.parallel.pp, tuple(p.layers_per_stage)) for pl, p in alone]


def _gap(step: Optional[float], bound: Optional[float]) -> Optional[float]:
    return None if step is None or bound is None else max(0.0, (step - bound) / step)


def run_instance(kind: str, cluster: dict, model: str, batch: int, limit_s: float, workers: int,
                 exhaustive_limit_s: float, methods=METHODS) -> Row:
    job = JobSpec(model=load_model(model), cluster=load_cluster(cluster), global_batch_size=batch, seq_length=2048)
    row = Row(kind, job.cluster.num_nodes, model, batch, cluster["name"])
    nodes = node_set(job.cluster)
    if "joint" in methods:
        t0 = time.perf_counter()  # joint, as `optimize` runs it: each pool alone first (seeds), then the model
        alone = pools_alone(job, limit_s, workers)
        alone_s = time.perf_counter() - t0
        res = optimize_joint(job, method="cpsat", time_limit_s=max(0.05, limit_s - alone_s), workers=workers,
                             pools_alone=alone)
        row.res["joint"] = (res.status, res.plan.step_time_s if res.plan else None, res.gap,
                            time.perf_counter() - t0, res.bound_step_time_s)
    if "sequential" in methods:
        _sequential(row, job, nodes, limit_s, workers)
    if "anneal" in methods:
        _anneal(row, job, nodes, limit_s, workers)
    if "exhaustive" in methods and job.cluster.num_nodes <= EXHAUSTIVE_MAX_NODES:
        t0 = time.perf_counter()
        b, _, done = solve_exhaustive(job, nodes, time_limit_s=exhaustive_limit_s)
        row.res["exhaustive"] = ("OPTIMAL" if done else "UNFINISHED", b.objective_s if b else None, None,
                                 time.perf_counter() - t0)
    return row


def _sequential(row: Row, job: JobSpec, nodes, limit_s: float, workers: int) -> None:
    t0 = time.perf_counter()  # sequential: shape for equal links, then the optimal placement of that plan
    flat = optimize(job.model_copy(update={"cluster": uniform_description(job.cluster)}), time_limit_s=limit_s,
                    workers=workers, textbook=False)
    seq = sequential(job, nodes, flat.plan, max(0.05, limit_s - (time.perf_counter() - t0)), workers) \
        if flat.plan is not None else None
    row.res["sequential"] = ((seq.status, seq.best.objective_s, None, time.perf_counter() - t0) if seq is not None and
                             seq.best is not None else ("NO PLACEMENT", None, None, time.perf_counter() - t0))


def _anneal(row: Row, job: JobSpec, nodes, limit_s: float, workers: int) -> None:
    t0 = time.perf_counter()  # annealing over placements of the joint candidates' best-bounded shapes
    alone = pools_alone(job, limit_s, workers)
    acands = prepare_joint(job, nodes, seeds(alone))
    best, _ = anneal(acands, time_limit_s=max(0.05, limit_s - (time.perf_counter() - t0)))
    row.res["anneal"] = ("FEASIBLE" if best is not None else "NONE", best.objective_s if best else None, None,
                         time.perf_counter() - t0)


def instances(quick: bool):
    sizes = [s for s in SIZES if s[0] <= 16] if quick else SIZES
    for n, model, batch in sizes:
        for seed in ((0, 1) if n <= 32 else (0,)):
            yield "mixed", mixed_cluster(n, seed, fast_share=(0.25, 0.5)[seed], spine=n >= 16), model, batch
        yield "unequal", unequal_cluster(n, 0), model, batch


def big_instance() -> dict:
    """The judged instance: 128 nodes in two pools (64 H100, 64 A100), racks of 16 behind a 2:1
    spine, 100 Gbit/s between pools, 8 degraded pairs."""
    c = mixed_cluster(128, 7, fast_share=0.5, spine=True)
    c["name"] = "mixed-128-degraded"
    c["link_overrides"] = degraded(np.random.default_rng(7), 128, 8)
    return c


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def report(rows: list[Row], big: Row, args, wall_s: float) -> str:
    methods = ["joint", "sequential", "anneal", "exhaustive"]
    lines = [
        "# Joint model: shape, split and placement in one CP-SAT model (issue #13)", "",
        f"Generated by `python benchmarks/joint.py{' --quick' if args.quick else ''} --time-limit {args.time_limit:g} "
        f"--workers {args.workers}` at commit {commit()} on {platform.machine()} / {platform.python_version()} "
        f"({os.cpu_count()} cores, shared with other work: times are noisy), {args.workers} CP-SAT worker(s), "
        f"{wall_s:.0f} s in all.", "",
        "Every step time is the float formulation's (`formulation.pipeline.evaluate_stages` on each stage's GPU "
        "type and links). Methods, each with the same time limit:",
        "- **joint**: as `optimize` runs it: each pool alone by the single-type model (seeds), then the joint CP-SAT model (`search.joint`), preparation included; gap from its bound;",
        "- **sequential**: today's method: shape and split for the cluster described as one GPU type (its most "
        "numerous pool) with equal links, then the optimal placement of that plan on the real pools and links;",
        "- **anneal**: Pipette-style simulated annealing over placements of the 8 best-bounded shapes;",
        "- **exhaustive**: every shape, pool, node choice (up to interchangeable nodes) and split (<= 8 nodes).", "",
        "Mixed: H100 + A100 pools (a quarter or half H100), 100 Gbit/s between pools, racks behind a 2:1 spine "
        "from 16 nodes, n/16 degraded pairs at 10 or 25 Gbit/s. Unequal: one A100 pool, two racks behind a 4:1 spine, "
        "n/8 degraded pairs. Sequence 2048.", "",
        "| kind | nodes | model | batch | " + " | ".join(f"{m} status | {m} step s | {m} time s" for m in methods)
        + " | joint gap | seq/joint |",
        "|" + "---|" * (4 + 3 * len(methods) + 2),
    ]
    wins, ratios = 0, []
    for r in rows + [big]:
        cells = []
        for m in methods:
            st, step, _, wall = r.res.get(m, (None, None, None, None))[:4]
            cells += [st or "-", _fmt(step, ".4f"), _fmt(wall, ".1f")]
        j, s = r.res["joint"][1], r.res["sequential"][1]
        ratio = (s / j) if (j and s) else None
        if r is not big and ratio is not None:
            ratios.append(ratio)
            wins += ratio > 1 + 1e-6
        lines.append(f"| {r.kind} | {r.nodes} | {r.model} | {r.batch} | " + " | ".join(cells)
                     + f" | {_fmt(r.res['joint'][2], '.2e')} | {_fmt(ratio, '.3f')} |")
    ex = [r for r in rows if "exhaustive" in r.res and r.res["exhaustive"][0] == "OPTIMAL"]
    agree = sum(1 for r in ex if r.res["joint"][1] is not None and r.res["exhaustive"][1] is not None
                and r.res["joint"][1] <= r.res["exhaustive"][1] * (1 + 1e-4))
    opt = sum(r.res["joint"][0] == "OPTIMAL" for r in rows)
    an = [r.res["anneal"][1] / r.res["joint"][1] for r in rows if r.res["anneal"][1] and r.res["joint"][1]]
    lines += ["", "## Summary", "",
              f"- joint OPTIMAL on {opt} of {len(rows)} generated instances; equal to exhaustive (within 1e-4) on "
              f"{agree} of {len(ex)} instances where exhaustive finished.",
              f"- joint faster than sequential on {wins} of {len(ratios)} instances where both have a plan; "
              f"sequential/joint step: median {np.median(ratios):.3f}, max {max(ratios):.3f}." if ratios else
              "- no instance where both joint and sequential have a plan.",
              f"- annealing/joint step: median {np.median(an):.3f}, max {max(an):.3f}." if an else "",
              f"- 128 nodes in two pools with degraded links ({big.cluster}, {big.model}, batch {big.batch}): joint "
              f"{big.res['joint'][0]}, gap {_fmt(big.res['joint'][2], '.2e')}, {big.res['joint'][3]:.1f} s "
              f"(limit {args.time_limit:g} s).", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--exhaustive-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="clusters up to 16 nodes only")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--only", nargs="+", help="run just these instances (cluster names); no results file")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                    help="run just these methods; no results file unless all")
    a = ap.parse_args(argv)
    if a.only or set(a.methods) != set(METHODS):
        return run_some(a)
    t_all = time.perf_counter()
    rows = []
    for kind, cluster, model, batch in instances(a.quick):
        r = run_instance(kind, cluster, model, batch, a.time_limit, a.workers, a.exhaustive_limit)
        print(kind, r.nodes, model, {m: (v[0], v[1] and round(v[1], 4), round(v[3], 1)) for m, v in r.res.items()},
              flush=True)
        rows.append(r)
    big = run_instance("mixed, judged", big_instance(), "gpt3-175b", 1536, a.time_limit, a.workers, 0)
    print("big", big.res, flush=True)
    text = report(rows, big, a, time.perf_counter() - t_all)
    Path(a.out).write_text(text)
    print(text)


def run_some(a) -> None:
    """The instances named by `--only` (all when not given), the methods of `--methods`, one
    line each: method -> (status, step s, gap, wall s, bound s)."""
    every = list(instances(a.quick)) + [("mixed, judged", big_instance(), "gpt3-175b", 1536)]
    chosen = [i for i in every if not a.only or i[1]["name"] in a.only]
    missing = set(a.only or ()) - {i[1]["name"] for i in every}
    if missing:
        raise SystemExit(f"no instance named {sorted(missing)}; names: {[i[1]['name'] for i in every]}")
    for kind, cluster, model, batch in chosen:
        r = run_instance(kind, cluster, model, batch, a.time_limit, a.workers, a.exhaustive_limit, a.methods)
        print(cluster["name"], model, {m: tuple(round(x, 4) if isinstance(x, float) else x for x in v)
                                       for m, v in r.res.items()}, flush=True)


if __name__ == "__main__":
    main()
