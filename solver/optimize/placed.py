"""A joint plan as the product reports it: `PlacedPlan` is a `Plan` (the float formulation's
evaluation, so every renderer reads it) whose stages name their pool, GPU type and nodes, with
the links they use, the hostfile in Megatron-LM's rank order, and the nodes left idle;
`explain` says which slow GPUs and links the plan keeps off its critical path."""

from __future__ import annotations

import numpy as np

from ..formulation.flops import reported_flop_per_step
from ..formulation.job import job_assumptions
from ..formulation.precision import peak_flop_per_s
from ..plan import Plan, Stage, StageMemory, drop_absent_terms, job_settings, parallel_from_row
from ..search.joint.heuristic import Assignment
from ..search.joint.nodes import NodeSet
from ..search.joint.prices import Prices
from ..space.shapes import RECOMPUTE_CODES
from ..specs import JobSpec
from ..specs.units import GBIT_BYTES


class PlacedStage(Stage):
    pool: str
    gpu: str
    nodes: list[str]
    capacity_bytes: float
    data_parallel_link_gbit_per_s: float | None  # attained, slowest pair of its nodes (None: one node)
    next_boundary_gbit_per_s: float | None  # attained, slowest pair towards the next stage


class PlacedPlan(Plan):
    stages: list[PlacedStage]  # type: ignore[assignment]  # pydantic narrows the field
    gpus_per_pool: dict[str, int]
    idle_nodes: list[str]
    hostfile: str


def _gbit(nodes: NodeSet, level: int) -> float | None:
    if level >= nodes.num_levels:
        return None
    return round(float(nodes.levels.values_bytes_per_s[level]) / GBIT_BYTES, 6)


def hostfile(nodes: NodeSet, a: Assignment, gpus_per_node: int) -> str:
    """One line per node in Megatron's rank order tp-cp-dp-pp: stage 0's nodes, then stage 1's..."""
    return "".join(f"{nodes.hosts[i]} slots={gpus_per_node}\n" for stage in a.nodes for i in stage)


def placed_plan(job: JobSpec, prices: Prices, a: Assignment) -> PlacedPlan:
    """The plan of assignment `a`, evaluated by the float formulation."""
    nodes = prices.nodes
    pools = job.cluster.pool_specs()
    par = parallel_from_row(job, prices.shapes.row(a.k))
    ev = prices.evaluate(a.k, a.pools, a.nodes, a.layers)
    ring, bnd = prices.levels_of(a.nodes)
    g = pools[0].gpus_per_node
    used = sorted(i for st in a.nodes for i in st)
    n_gpus = len(used) * g
    peak = sum(peak_flop_per_s(p.gpu, job.precision) * g for st, pl in zip(a.nodes, a.pools) for p in [pools[pl]] for _ in st)
    T = ev.step_time_s
    drop_absent_terms(job, ev.breakdown)
    mf, hf = reported_flop_per_step(job.model, job.global_batch_size, job.seq_length, RECOMPUTE_CODES[par.recompute],
                                    job.framework, frozen_weights=job.peft == "lora")
    stages = []
    for s, st in enumerate(ev.stages):
        pool = pools[a.pools[s]]
        stages.append(PlacedStage(
            stage=s, layers=st["layers"], time_per_microbatch_s=st["time_per_microbatch_s"],
            memory_bytes=StageMemory(**st["memory_bytes"]), fits=st["fits"], pool=pool.name, gpu=pool.gpu.name,
            nodes=[nodes.hosts[i] for i in a.nodes[s]], capacity_bytes=float(pool.gpu.hbm_bytes),
            data_parallel_link_gbit_per_s=_gbit(nodes, ring[s]),
            next_boundary_gbit_per_s=_gbit(nodes, bnd[s]) if s < len(bnd) else None))
    per_pool: dict[str, int] = {}
    for s, stage_nodes in enumerate(a.nodes):
        per_pool[pools[a.pools[s]].name] = per_pool.get(pools[a.pools[s]].name, 0) + len(stage_nodes) * g
    return PlacedPlan(
        model=job.model.name, cluster=job.cluster.name, num_gpus=n_gpus, global_batch_size=job.global_batch_size,
        seq_length=job.seq_length, framework=job.framework, parallel=par, layers_per_stage=[int(x) for x in a.layers],
        step_time_s=T,
        tokens_per_s=job.tokens_per_step / T, mfu=mf / (T * peak),
        model_tflops_per_gpu=mf / T / n_gpus / 1e12, hardware_tflops_per_gpu=hf / T / n_gpus / 1e12,
        breakdown=ev.breakdown, stages=stages, peak_memory_bytes=ev.peak_memory_bytes,
        capacity_bytes=ev.capacity_bytes, fits=ev.fits, gpus_per_pool=per_pool,
        idle_nodes=[nodes.hosts[i] for i in range(nodes.n) if i not in set(used)],
        hostfile=hostfile(nodes, a, g), settings=job_settings(job), assumptions=job_assumptions(job))


def explain(job: JobSpec, prices: Prices, a: Assignment, plan: PlacedPlan) -> list[str]:
    """Which pools host which stages, what the split gives the slower GPUs, and which slow
    nodes and links the plan leaves off its rings and boundaries."""
    nodes = prices.nodes
    pools = job.cluster.pool_specs()
    lines = []
    for pl, pool in enumerate(pools):
        on = [s for s in range(len(a.pools)) if a.pools[s] == pl]
        idle = [nodes.hosts[i] for i in range(nodes.n) if nodes.pool_of[i] == pl and nodes.hosts[i] in plan.idle_nodes]
        if on:
            lay = [a.layers[s] for s in on]
            lines.append(f"pool {pool.name} ({pool.gpu.name}): stages {_ranges(on)}, {min(lay)}-{max(lay)} layers "
                         f"each" + (f"; {len(idle)} node(s) idle" if idle else ""))
        else:
            lines.append(f"pool {pool.name} ({pool.gpu.name}): not used ({len(idle)} nodes idle)")
    slots = [st.time_per_microbatch_s for st in plan.stages]
    b = int(np.argmax(slots))
    lines.append(f"slowest stage per micro-batch: stage {b} on {plan.stages[b].gpu} "
                 f"({slots[b] * 1e3:.2f} ms; fastest {min(slots) * 1e3:.2f} ms)")
    ring, bnd = prices.levels_of(a.nodes)
    used_levels = [lv for lv in ring + bnd if lv < nodes.num_levels]
    if nodes.num_levels > 1:
        worst_used = min(used_levels) if used_levels else nodes.num_levels
        slow = [lv for lv in range(nodes.num_levels) if lv < worst_used]
        if slow:
            pairs = int(sum((nodes.levels.index == lv).sum() for lv in slow) // 2)
            lines.append(f"{pairs} node pair(s) slower than {_gbit(nodes, worst_used) or 0:g} Gbit/s (down to "
                         f"{_gbit(nodes, 0):g}) are kept off every data-parallel ring and pipeline boundary")
    idle_slow = [h for h in plan.idle_nodes if _best_level(nodes, nodes.hosts.index(h)) < nodes.num_levels - 1]
    if idle_slow:
        lines.append(f"idle nodes with degraded links: {', '.join(idle_slow[:8])}" + (" ..." if len(idle_slow) > 8 else ""))
    return lines


def _best_level(nodes: NodeSet, i: int) -> int:
    row = nodes.levels.index[i]
    return int(row[row >= 0].max()) if (row >= 0).any() else nodes.num_levels


def _ranges(xs: list[int]) -> str:
    out: list[str] = []
    start: int | None = xs[0]
    for prev, cur in zip(xs, xs[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(out)
