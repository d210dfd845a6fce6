"""Qwen3-MoE, DeepSeek and GPT-OSS planned for torchtitan and for Megatron-LM side by side: one MoE layer's saved bytes and time on the
same shape, and the plan each stack gets (`--framework torchtitan` prices torchtitan's own MoE block,
formulation/eager_moe.py). Writes benchmarks/results/torchtitan_moe.md.

    python benchmarks/torchtitan_moe.py

No published run states torchtitan: these are the formulation's estimates, not measurements.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from solveplan.catalog import load_job
from solveplan.formulation.job import job_coefficients
from solveplan.optimize import optimize
from solveplan.space.enumeration import enumerate_shapes

from _common import commit

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "torchtitan_moe.md"
STACKS = ("megatron", "torchtitan")
# (model, cluster, the shape's constraints) of the per-layer comparison: ep 8 with FSDP2, and TP-sharded experts
LAYER_CASES = [
    ("qwen3-30b-a3b", "h100x64", dict(tp=[1], pp=[2], ep=[8], zero=[2])),
    ("qwen3-30b-a3b", "h100x64", dict(tp=[2], pp=[2], ep=[1], etp=[2], zero=[2])),
    ("qwen3-235b-a22b", "h100x256", dict(tp=[1], pp=[8], ep=[8], zero=[2])),
    ("deepseek-v2-lite", "h100x16", dict(tp=[1], pp=[1], ep=[8], zero=[2])),
    ("deepseek-v3", "h100x1024", dict(tp=[1], pp=[16], ep=[8], zero=[2])),
    ("gpt-oss-120b", "h100x64", dict(tp=[1], pp=[4], ep=[8], zero=[2])),
]
PLAN_CASES = [("qwen3-30b-a3b", "h100x64"), ("qwen3-235b-a22b", "h100x256"), ("deepseek-v2-lite", "h100x64"),
              ("deepseek-v3", "h100x1024"), ("gpt-oss-120b", "h100x64")]
GIB = 2 ** 30


def layer_row(model: str, cluster: str, cons: dict) -> str:
    cells = []
    for fw in STACKS:
        job = load_job({"model": model, "cluster": cluster, "framework": fw,
                        "constraints": {**cons, "recompute": ["none"], "micro_batch_size": [1], "vp": [1]}})
        shapes = enumerate_shapes(job).shapes
        co = job_coefficients(job, shapes)
        cells.append(f"{co.layer_act_bytes[0] / GIB:.2f} GiB, {(co.layer_fwd_s[0] + co.layer_bwd_s[0]) * 1e3:.1f} ms "
                     f"+ {co.layer_ep_s[0] * 1e3:.1f} ms all-to-all + {co.layer_tp_s[0] * 1e3:.2f} ms TP")
    shape = ", ".join(f"{k} {v[0]}" for k, v in cons.items())
    return f"| {model} on {cluster} ({shape}; 4,096 tokens) | " + " | ".join(cells) + " |"


def plan_row(model: str, cluster: str) -> str:
    cells = []
    for fw in STACKS:
        res = optimize(load_job({"model": model, "cluster": cluster, "framework": fw}))
        p = res.plan.parallel
        cells.append(f"{res.status} {res.plan.step_time_s:.2f} s, tp {p.tp} pp {p.pp} dp {p.dp} ep {p.ep} etp {p.etp} "
                     f"vp {p.vp} mbs {p.micro_batch_size} {p.recompute} zero {p.zero}, "
                     f"{res.plan.peak_memory_bytes / GIB:.1f} GiB")
    return f"| {model} on {cluster} | " + " | ".join(cells) + " |"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    start = time.perf_counter()
    lines = [
        "# Qwen3-MoE, DeepSeek and GPT-OSS under torchtitan and Megatron-LM", "",
        f"`python benchmarks/torchtitan_moe.py` at {commit()}: the formulation's estimates (no published run states "
        "torchtitan). torchtitan's MoE block is counted from its code and measured on its module on CPU "
        "(formulation/eager_moe.py, benchmarks/measured/torchtitan-moe-cpu/moe_block.json).", "",
        "## One MoE layer on the same shape (no recompute, one micro-batch of 4,096 tokens)", "",
        "Saved for backward, forward + backward time, the exposed all-to-alls and TP collectives per layer:", "",
        "| layer | megatron | torchtitan |", "|---|---|---|",
        *(layer_row(*case) for case in LAYER_CASES), "",
        "## The plan each stack gets", "",
        "| job (the catalog's batch and sequence) | megatron | torchtitan |", "|---|---|---|",
        *(plan_row(*case) for case in PLAN_CASES), "",
        f"({time.perf_counter() - start:.0f} s.)", ""]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
