"""Behaviour snapshot (issue #25): the benchmark instances' answers -- status, parallel
configuration, layers per stage, nodes of each stage, step time, bound, gap -- written to a
JSON file, so that a refactoring can be checked to change none of them (`diff` two snapshots).

Instances: the single-type `optimize` targets (benchmarks/optimize_targets.py, top-1 and the
top-10 instance, prefer simple), generated mixed-pool and unequal-link clusters of
benchmarks/joint.py through `optimize` (the joint path), the catalog's mixed cluster
(prefer fastest and simple), `--links` files of tests/data/links, the placement benchmark's
generated leaf/spine matrix (benchmarks/placement.py: smaller clusters, and one of its own 256-node instances) and the admission
planner (`admission.planner.plan`) on a single-type and a mixed job. One CP-SAT worker,
seed 0; every limit is long enough for a proven answer (times are not recorded). One
instance is near its limit: the 256-node placement proves its optimum in 35-50 s of its 60 s
on 2 shared cores; on a loaded machine it may stop FEASIBLE with another placement -- run it
again alone (`--only placement`) before reading a difference there as a change.

    python benchmarks/behaviour_snapshot.py -o /tmp/before.json
    python benchmarks/behaviour_snapshot.py -o /tmp/after.json && diff /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from joint import mixed_cluster, unequal_cluster  # noqa: E402
from optimize_targets import INSTANCES as TARGETS  # noqa: E402
from optimize_targets import TOP_K  # noqa: E402

from solveplan.catalog import load_cluster, load_job, load_model  # noqa: E402
from solveplan.optimize import optimize  # noqa: E402
from solveplan.specs import JobSpec  # noqa: E402

LINKS = HERE.parent / "tests" / "data" / "links"
LIMIT_S = 60.0


def _r(x, digits: int = 9):
    return None if x is None else float(f"{x:.{digits}g}")


def _plan(p) -> dict | None:
    if p is None:
        return None
    d = {"parallel": p.parallel.model_dump(), "layers": list(p.layers_per_stage), "step_time_s": _r(p.step_time_s)}
    stages = getattr(p, "stages", None)
    if stages:
        d["stages"] = [{k: v for k, v in (st if isinstance(st, dict) else st.model_dump()).items()
                        if k in ("pool", "nodes", "gpu", "layers")} for st in stages]
    return d


def _result(res) -> dict:
    return {"status": res.status, "plan": _plan(res.plan), "bound_s": _r(res.bound_step_time_s),
            "gap": _r(res.gap, 4), "alternatives": [_plan(a) for a in res.alternatives],
            "top_k_found": res.top_k_found, "prefer": res.prefer,
            "pools_alone": [[c.label, _r(c.step_time_s)] for c in getattr(res, "pools_alone", None) or []],
            "default_order": _r(res.default_order.step_time_s) if getattr(res, "default_order", None) else None,
            "shortfall": res.shortfall is not None}


def _job(model: str, cluster, batch=None, seq=None, **kw) -> JobSpec:
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=batch or m.global_batch_size,
                   seq_length=seq or m.seq_length, **kw)


def optimize_instances():
    for model, cluster, _, _ in TARGETS:
        yield f"optimize {model}/{cluster}", lambda m=model, c=cluster: optimize(_job(m, c), time_limit_s=LIMIT_S)
    model, cluster, k, _ = TOP_K
    yield f"optimize {model}/{cluster} top-{k}", lambda: optimize(_job(model, cluster), time_limit_s=LIMIT_S, top_k=k)
    yield "optimize gpt3-13b/a100x64 prefer simple", lambda: optimize(_job("gpt3-13b", "a100x64", prefer="simple"),
                                                                    time_limit_s=LIMIT_S)


def joint_instances():
    gens = [("mixed", 8, "gpt3-350m", 128, 1), ("mixed", 6, "gpt3-6.7b", 256, 0), ("mixed", 4, "gpt3-125m", 64, 1), ("unequal", 4, "gpt3-125m", 64, 0),
            ("mixed", 6, "gpt3-6.7b", 256, 1), ("unequal", 8, "gpt3-350m", 128, 0), ("mixed", 16, "gpt3-6.7b", 512, 0),
            ("unequal", 16, "gpt3-6.7b", 512, 0), ("mixed", 32, "gpt3-13b", 1024, 1)]
    for kind, n, model, batch, seed in gens:
        c = mixed_cluster(n, seed, fast_share=(0.25, 0.5)[seed], spine=n >= 16) if kind == "mixed" \
            else unequal_cluster(n, seed)
        yield f"joint {c['name']} {model}", lambda c=c, m=model, b=batch: optimize(_job(m, c, b, 2048),
                                                                                   time_limit_s=LIMIT_S)
    yield "joint mixed-h100-a100 gpt3-1.3b", lambda: optimize(_job("gpt3-1.3b", "mixed-h100-a100"), time_limit_s=LIMIT_S)
    yield "joint mixed-h100-a100 gpt3-6.7b prefer simple", lambda: optimize(
        _job("gpt3-6.7b", "mixed-h100-a100", prefer="simple"), time_limit_s=LIMIT_S)
    yield "joint mixed-h100-a100 gpt3-175b", lambda: optimize(_job("gpt3-175b", "mixed-h100-a100"),
                                                                             time_limit_s=LIMIT_S)
    yield "joint mixed-h100-a100 llama3.1-405b", lambda: optimize(_job("llama3.1-405b", "mixed-h100-a100"),
                                                                   time_limit_s=LIMIT_S)
    yield "joint mixed-h100-a100 gpt3-6.7b top-3", lambda: optimize(_job("gpt3-6.7b", "mixed-h100-a100"),
                                                                     time_limit_s=LIMIT_S, top_k=3)


def links_instances():
    from solveplan.placement.links import load_links

    yield "links rack4.csv gpt3-1.3b/a100x32", lambda: optimize(
        _job("gpt3-1.3b", "a100x32"), time_limit_s=LIMIT_S, links=load_links(LINKS / "rack4.csv"))
    c32 = load_cluster("a100x32")
    yield "links pipette round_robin gpt3-6.7b/a100x32", lambda: optimize(
        _job("gpt3-6.7b", "a100x32"), time_limit_s=LIMIT_S,
        links=load_links(LINKS / "pipette" / "round_robin_links.json", cluster=c32))
    yield "links mpigraph16 gpt3-13b/a100x128", lambda: optimize(
        _job("gpt3-13b", "a100x128"), time_limit_s=LIMIT_S,
        links=load_links(LINKS / "pipette" / "mpigraph_16nodes_time_0.json", cluster=load_cluster("a100x128")))


def placement_instances():
    import numpy as np

    from solveplan.placement.place import place
    from solveplan.placement.topology import generate_links
    from solveplan.plan import plan_config

    def run(nodes: int, pp: int, seed: int):
        rng = np.random.default_rng(seed)
        pairs = []
        while len(pairs) < nodes // 16:
            a, b = map(int, rng.integers(0, nodes, 2))
            if a != b:
                pairs.append((a, b, float(rng.choice([0.25, 0.5]))))
        nics = [(int(n), float(rng.choice([0.25, 0.5]))) for n in rng.choice(nodes, 2, replace=False)]
        links = generate_links(nodes, nodes_per_leaf=16, oversubscription=4, degraded_links=pairs, degraded_nodes=nics)
        job = load_job({"model": "gpt3-175b", "cluster": f"a100x{nodes * 8}"})
        par = plan_config(job, dict(tp=8, pp=pp)).parallel
        r = place(job, par, links, time_limit_s=LIMIT_S, workers=1, seed=0)
        return {"status": r.status, "objective": r.objective, "bound": r.bound, "gap": _r(r.gap, 4),
                "hosts_by_cell": np.asarray(r.optimized.hosts_by_cell).tolist(),
                "step_time_s": _r(r.optimized.step_time_s), "default_s": _r(r.default.step_time_s),
                "whole_server_s": _r(r.whole_server.step_time_s)}

    for nodes, pp, seed in ((64, 8, 0), (64, 16, 1), (128, 8, 0)):
        yield f"placement a100x{nodes * 8} gpt3-175b tp8 pp{pp} matrix {seed}", lambda n=nodes, p=pp, s=seed: run(n, p, s)
    yield "placement benchmark a100x2048 pp32 matrix 0", lambda: _benchmark_placement(32, 0)


def _benchmark_placement(pp: int, seed: int) -> dict:
    """One instance of benchmarks/placement.py itself (256 nodes), one worker."""
    import numpy as np
    from placement import NODES, matrix

    from solveplan.placement.place import place
    from solveplan.plan import plan_config

    job = load_job({"model": "gpt3-175b", "cluster": f"a100x{NODES * 8}"})
    r = place(job, plan_config(job, dict(tp=8, pp=pp)).parallel, matrix(seed), time_limit_s=LIMIT_S, workers=1)
    return {"status": r.status, "objective": r.objective, "bound": r.bound, "gap": _r(r.gap, 4),
            "hosts_by_cell": np.asarray(r.optimized.hosts_by_cell).tolist(), "step_time_s": _r(r.optimized.step_time_s)}


def admission_instances():
    from solveplan.admission.cache import ResultCache
    from solveplan.admission.planner import plan

    yield "admission plan gpt3-13b/a100x64", lambda: plan(_job("gpt3-13b", "a100x64"), 30.0, cache=ResultCache())
    yield "admission plan gpt3-1.3b/mixed-h100-a100", lambda: plan(_job("gpt3-1.3b", "mixed-h100-a100"), 30.0,
                                                                   cache=ResultCache())


GROUPS = {"optimize": optimize_instances, "joint": joint_instances, "links": links_instances,
          "placement": placement_instances, "admission": admission_instances}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--only", nargs="*", choices=sorted(GROUPS), help="groups to run (default: all)")
    a = ap.parse_args(argv)
    out: dict = {}
    for name in a.only or GROUPS:
        for label, fn in GROUPS[name]():
            t0 = time.perf_counter()
            res = fn()
            out[label] = res if isinstance(res, dict) else _result(res)
            print(f"{label}: {out[label].get('status')} ({time.perf_counter() - t0:.1f} s)", flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
