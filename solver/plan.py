"""The plan: one value type for every method's answer and every configuration evaluated.
Its times and memory are always recomputed with the float formulation (`make_plan`), never
read back from a solver's scaled integer objective (docs/DESIGN.md section 2).

Three ways to a plan, each through `make_plan`: a search method's choice (`optimize`), an
explicit configuration (`plan_config`: `space.rules.complete_config` fills and checks it),
and the textbook Megatron-LM configuration (`textbook_plan`). `Comparison` sets one plan
against another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

from .catalog import JOB_SETTINGS
from .errors import InputError, path
from .formulation.flops import FLOP_CONVENTION
from .formulation.job import job_assumptions, job_coefficients, throughput
from .formulation.pipeline import evaluate_split, step_time_batch
from .formulation.splits import default_layers, default_splits
from .search.candidates import ShapeCounts
from .search.result import MethodResult, PlanStatus
from .space.pipeline_layout import priced_split, read_layout
from .space.rules import complete_config, textbook_shapes
from .space.shapes import RECOMPUTE_CODES, Shapes
from .specs import JobSpec


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


def jsonable(x):
    """Solver statistics as JSON values: numpy scalars unwrapped, non-finite floats as None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class ParallelConfig(Out):
    tp: int
    pp: int
    dp: int
    cp: int
    vp: int
    micro_batch_size: int
    num_microbatches: int
    recompute: Literal["none", "selective", "full"]
    sequence_parallel: bool
    zero: int
    ep: int = 1  # expert parallelism (MoE; 1 for a dense model)
    etp: int = 1  # expert tensor parallelism
    # the embedding / the loss count as a layer of the pipeline split: Megatron's
    # --account-for-embedding/loss-in-pipeline-split, whose split the plan then has (space/pipeline_split.py)
    account_for_embedding: bool = False
    account_for_loss: bool = False
    # Megatron's --pipeline-model-parallel-layout as the user gave it (space/pipeline_layout.py): it fixes
    # pp, vp and the split, and the launch passes it on unchanged
    pipeline_layout: str | None = None

    def shapes(self) -> Shapes:
        return Shapes.single(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, vp=self.vp,
                             micro_batch_size=self.micro_batch_size, recompute=self.recompute,
                             sequence_parallel=self.sequence_parallel, zero=self.zero, ep=self.ep, etp=self.etp,
                             account_for_embedding=self.account_for_embedding, account_for_loss=self.account_for_loss)

    def key(self) -> tuple:
        """Canonical order used to break ties deterministically."""
        return (self.tp, self.cp, self.pp, self.vp, self.micro_batch_size,
                RECOMPUTE_CODES[self.recompute], int(self.sequence_parallel), self.zero, self.ep, self.etp,
                int(self.account_for_embedding), int(self.account_for_loss))

    def describe(self) -> str:
        experts = f" ep={self.ep} etp={self.etp}" if self.ep > 1 or self.etp > 1 else ""
        counted = [n for n, on in (("embedding", self.account_for_embedding), ("loss", self.account_for_loss)) if on]
        split = f" split-counts={'+'.join(counted)}" if counted else ""
        split += f" layout={self.pipeline_layout}" if self.pipeline_layout is not None else ""
        return (f"tp={self.tp} pp={self.pp} dp={self.dp} cp={self.cp} vp={self.vp} mbs={self.micro_batch_size} "
                f"recompute={self.recompute} sp={'on' if self.sequence_parallel else 'off'} zero={self.zero}"
                f"{experts}{split}")


class StageMemory(Out):
    params: float
    grads: float
    optimizer: float
    activations: float
    other: float
    total: float
    host: float = 0.0  # activations offloaded to pinned host memory per GPU (not in `total`: not GPU memory)


class Stage(Out):
    stage: int
    layers: int
    time_per_microbatch_s: float
    memory_bytes: StageMemory
    fits: bool


class Plan(Out):
    model: str
    cluster: str
    num_gpus: int
    global_batch_size: int
    seq_length: int
    framework: str = "megatron"  # the software stack priced (JobSpec.framework, formulation/frameworks.py)
    parallel: ParallelConfig
    layers_per_stage: list[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    flop_convention: str = FLOP_CONVENTION  # how mfu and the TFLOP/s count FLOPs (formulation/flops.py)
    breakdown: dict[str, float]
    stages: list[Stage]
    peak_memory_bytes: float
    capacity_bytes: float
    fits: bool
    settings: dict[str, Any] = {}  # the job's software settings beyond its defaults (`job_settings`): what was priced
    assumptions: list[str] = []  # what the prediction assumes instead of fitting (formulation.job.job_assumptions)
    # error bars (`calibration.intervals`): where the measured step and memory lie with
    # probability `interval_coverage` on the published runs; None until `optimize` attaches them
    step_time_interval_s: list[float] | None = None
    peak_memory_interval_bytes: list[float] | None = None
    interval_coverage: float | None = None
    interval_basis: str | None = None


def unit_rule(model) -> str:
    """What a layer split of `model` must respect (`ModelSpec.pipeline_units`), in words."""
    k, d, m, _ = model.pipeline_units
    lead = f"the first stage holds the {k} leading dense layers, then " if k else ""
    return f"{lead}every stage holds whole units of {d + m} layers ({d} dense, {m} MoE)"


def parallel_from_row(job: JobSpec, row: dict) -> ParallelConfig:
    m = job.global_batch_size // (row["dp"] * row["micro_batch_size"])
    return ParallelConfig(num_microbatches=m, **{k: row[k] for k in (
        "tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero")},
                          ep=row.get("ep", 1), etp=row.get("etp", 1),
                          account_for_embedding=bool(row.get("account_for_embedding", False)),
                          account_for_loss=bool(row.get("account_for_loss", False)),
                          pipeline_layout=row.get("pipeline_layout"))


def default_plan_layers(job: JobSpec, parallel: ParallelConfig) -> list[int]:
    """Layers per stage of `parallel` when no split is given: the layout's when it has one,
    Megatron's when it counts the embedding or the loss as a layer, else the balanced split
    (`formulation.splits.default_layers`)."""
    if parallel.pipeline_layout is not None:
        return read_layout(parallel.pipeline_layout, parallel.pp, job.model).rank_layers
    return default_layers(job.model, parallel.pp, parallel.vp, parallel.account_for_embedding,
                          parallel.account_for_loss)


def job_settings(job: JobSpec) -> dict[str, Any]:
    """The job's software settings (`catalog.JOB_SETTINGS`, the framework apart: the plan has its own field) that
    differ from JobSpec's defaults, e.g. {"precision": "mxfp8", "precision_aware_optimizer": True}: what the plan
    was priced with beyond model, cluster, batch and stack, so that a plan's JSON says it."""
    fields = JobSpec.model_fields
    out: dict[str, Any] = {}
    for name in JOB_SETTINGS:
        value = getattr(job, name)
        if name != "framework" and value != fields[name].default:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def drop_absent_terms(job: JobSpec, breakdown: dict) -> None:
    """A plan's breakdown shows only the terms its job can have: expert-parallel traffic for MoE models,
    offloading copies for a job that offloads activations (every plan, single-type or placed, by this rule)."""
    if not job.model.is_moe:
        breakdown.pop("ep_comm_s", None)
    if not (job.cpu_offloading_num_layers or job.offload_modules):
        breakdown.pop("offload_s", None)


def make_plan(job: JobSpec, parallel: ParallelConfig, layers: list[int]) -> Plan:
    """Evaluate `parallel` with `layers` per stage using the float formulation. The formulation
    prices a split in pipeline units (`ModelSpec.pipeline_units`: a layer each for a dense
    model); a split that cuts a unit is a ValueError (`plan_config` names it as bad input). A plan
    with a pipeline layout is priced by the layout's units (`space.pipeline_layout.priced_split`),
    and what that pricing assumes joins the plan's assumptions."""
    units, layout_notes = _priced_units(job, parallel, layers)
    if (parallel.account_for_embedding or parallel.account_for_loss) and \
            list(layers) != default_plan_layers(job, parallel):
        raise ValueError(f"layers {list(layers)}: with the embedding / loss counted as layers the split is "
                         f"Megatron's, {default_plan_layers(job, parallel)}")
    co = job_coefficients(job, parallel.shapes())
    ev = evaluate_split(co, 0, units)
    for st, n in zip(ev.stages, layers):
        st["layers"] = int(n)
    drop_absent_terms(job, ev.breakdown)
    tp_ = throughput(job, ev.step_time_s, RECOMPUTE_CODES[parallel.recompute])
    return Plan(
        model=job.model.name, cluster=job.cluster.name, num_gpus=job.cluster.num_gpus,
        global_batch_size=job.global_batch_size, seq_length=job.seq_length, framework=job.framework,
        parallel=parallel, layers_per_stage=[int(x) for x in layers],
        step_time_s=ev.step_time_s, tokens_per_s=tp_.tokens_per_s, mfu=tp_.mfu,
        model_tflops_per_gpu=tp_.model_tflops_per_gpu, hardware_tflops_per_gpu=tp_.hardware_tflops_per_gpu,
        breakdown=ev.breakdown, stages=[Stage(**s) for s in ev.stages],
        peak_memory_bytes=ev.peak_memory_bytes, capacity_bytes=ev.capacity_bytes, fits=ev.fits,
        settings=job_settings(job), assumptions=job_assumptions(job) + layout_notes,
    )


def _priced_units(job: JobSpec, parallel: ParallelConfig, layers) -> tuple[list[int], list[str]]:
    """(the pipeline units per stage the formulation prices, what the layout's pricing assumes)."""
    if parallel.pipeline_layout is not None:
        layout = read_layout(parallel.pipeline_layout, parallel.pp, job.model)
        if list(layers) != layout.rank_layers or parallel.vp != layout.vp:
            raise ValueError(f"layers {list(layers)} with vp={parallel.vp}: the layout {parallel.pipeline_layout!r} "
                             f"holds {layout.rank_layers} with vp={layout.vp}")
        return priced_split(job.model, layout)
    units = job.model.layers_to_units(layers)
    if units is None:
        raise ValueError(f"layers {list(layers)} cut a pipeline unit of {job.model.name} ({unit_rule(job.model)})")
    return units, []


def plan_config(job: JobSpec, cfg: Mapping[str, Any], field: str = "", job_field: str | None = None) -> Plan:
    """The plan of one explicit configuration (keys `space.rules.CONFIG_KEYS`, defaults and
    checks there; the balanced split unless `layers` is given). InputError naming the key
    under `field` when the configuration is illegal for the job."""
    row, layers = complete_config(job, cfg, field, job_field)
    if layers is None:
        layers = default_plan_layers(job, parallel_from_row(job, row))
    elif row.get("pipeline_layout") is None and job.model.layers_to_units(layers) is None:
        raise InputError(path(field, "layers"), f"{layers} cuts a pipeline unit: {unit_rule(job.model)}")
    # with vp > 1 a rank holding fewer than vp layers has empty virtual chunks: legal in
    # Megatron Core's --pipeline-model-parallel-layout ("E||t|L": empty stages are allowed)
    return make_plan(job, parallel_from_row(job, row), layers)


def textbook_plan(job: JobSpec) -> Plan | None:
    """The best fitting plan among the usual Megatron-LM defaults (`space.rules.textbook_shapes`)
    with the balanced layer split: any tp, pp and micro-batch size the job allows. None when no
    such plan fits."""
    shapes = textbook_shapes(job)
    if len(shapes) == 0:
        return None
    co = job_coefficients(job, shapes)
    step, _, fits = step_time_batch(co, default_splits(job.model, shapes))
    step = np.where(fits, step, np.inf)
    if not np.isfinite(step).any():
        return None
    # fastest; ties by the canonical key
    best = min(np.flatnonzero(step == step.min()).tolist(),
               key=lambda k: parallel_from_row(job, shapes.row(k)).key())
    par = parallel_from_row(job, shapes.row(best))
    return make_plan(job, par, default_plan_layers(job, par))


class Comparison(Out):
    """Another configuration evaluated by the same float formulation, against the plan."""

    label: str
    parallel: ParallelConfig
    layers_per_stage: list[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: float
    fits: bool
    speedup: float | None = None  # its step time / the plan's (> 1: the plan is faster)
    note: str | None = None

    @classmethod
    def of(cls, label: str, other: Plan, plan: Plan | None) -> Comparison:
        return cls(label=label, parallel=other.parallel, layers_per_stage=other.layers_per_stage,
                   step_time_s=other.step_time_s, tokens_per_s=other.tokens_per_s, mfu=other.mfu,
                   peak_memory_bytes=other.peak_memory_bytes, fits=other.fits,
                   speedup=(other.step_time_s / plan.step_time_s) if plan is not None else None,
                   note=None if other.fits else "does not fit in GPU memory")


def gpu_hours_per_million_tokens(num_gpus: int, step_time_s: float, tokens_per_step: int) -> float:
    """GPU-hours per million tokens trained: GPUs x step time / 3600 / (tokens per step / 1e6)."""
    return num_gpus * step_time_s / 3600.0 / (tokens_per_step / 1e6)


class Cost(Out):
    """What a plan's step costs: GPU-hours always; dollars when the cluster states
    `price_per_gpu_hour_usd`; energy when the GPU states `tdp_watts` (every GPU at its board
    power limit for the whole step: an upper bound of the GPUs' draw, hosts and cooling not
    counted). Per step and per million tokens."""

    gpu_hours_per_step: float
    gpu_hours_per_million_tokens: float
    price_per_gpu_hour_usd: float | None = None
    usd_per_step: float | None = None
    usd_per_million_tokens: float | None = None
    tdp_watts: float | None = None
    energy_kwh_per_step: float | None = None
    energy_kwh_per_million_tokens: float | None = None

    @classmethod
    def of(cls, job: JobSpec, plan: Plan) -> Cost:
        n, t = plan.num_gpus, plan.step_time_s
        mtok = job.tokens_per_step / 1e6
        hours = n * t / 3600.0
        price, tdp = job.cluster.price_per_gpu_hour_usd, job.cluster.gpu.tdp_watts
        kwh = n * tdp * t / 3.6e6 if tdp is not None else None  # W x s / (3.6e6 J/kWh)
        return cls(gpu_hours_per_step=hours,
                   gpu_hours_per_million_tokens=gpu_hours_per_million_tokens(n, t, job.tokens_per_step),
                   price_per_gpu_hour_usd=price, usd_per_step=price * hours if price is not None else None,
                   usd_per_million_tokens=price * hours / mtok if price is not None else None, tdp_watts=tdp,
                   energy_kwh_per_step=kwh, energy_kwh_per_million_tokens=kwh / mtok if kwh is not None else None)


class Margin(Out):
    """The plan against another by the same formulation, with the error bar: `margin_rel` =
    other / plan - 1 (> 0: the plan is faster); `inside`: that margin is within the interval's
    relative half-width, so the model cannot tell the two apart."""

    label: str
    step_time_s: float
    margin_rel: float
    half_width_rel: float
    inside: bool
    statement: str


class TieBreak(Out):
    """How `prefer="simple"` chose the plan (`search.simple`): the fastest plan, the tolerance,
    the threshold and the plan's departures from the textbook plan."""

    prefer: Literal["simple"] = "simple"
    tolerance_rel: float
    threshold_s: float | None
    fastest: Plan | None
    fastest_bound_s: float | None
    departures: list[str]
    levels: list[dict]
    best_without_exotic_s: float | None = None
    statement: str


class SearchStats(Out):
    method: str
    wall_time_s: float
    shapes_legal: int
    shapes_dominated: int
    shapes_pruned_memory: int
    shapes_pruned_time: int
    shapes_searched: int
    evaluations: int | None = None
    solver: dict = {}
    finished: bool = True

    @classmethod
    def of(cls, method: str, wall_time_s: float, cands: ShapeCounts, res: MethodResult, **solver) -> SearchStats:
        """What a search did, on either path: the shapes at each step of its candidates'
        preparation, and the method's own statistics (`res.stats` but its notes) with `solver`'s."""
        return cls(method=method, wall_time_s=wall_time_s, shapes_legal=cands.num_legal,
                   shapes_dominated=cands.num_dominated, shapes_pruned_memory=cands.num_pruned_memory,
                   shapes_pruned_time=cands.num_pruned_time, shapes_searched=cands.num_survivors,
                   evaluations=res.evaluations, finished=bool(res.finished),
                   solver=jsonable({**{k: v for k, v in res.stats.items() if k != "notes"}, **solver}))


class Shortfall(Out):
    """Why no plan fits: the resource, how much is needed and available, and what would help."""

    resource: str
    stage: int | None = None
    needed_bytes: float | None = None
    available_bytes: float | None = None
    short_bytes: float | None = None
    best_shape: dict | None = None
    suggestions: list[str] = []
    message: str


class SolveResult(Out):
    status: PlanStatus
    plan: Plan | None = None
    bound_step_time_s: float | None = None
    gap: float | None = None
    tolerance_s: float | None = None
    alternatives: list[Plan] = []
    shortfall: Shortfall | None = None
    search: SearchStats
    notes: list[str] = []


class OptimizeResult(SolveResult):
    """What `optimize` returns on every cluster: SolveResult plus the comparisons it makes. On a
    cluster of pools or on measured links (the joint model) the plan is an `optimize.placed.PlacedPlan`
    (a Plan whose stages name their pool and nodes, with the hostfile) and `pools_alone`,
    `default_order` and `explanation` say what the placement gains; elsewhere those stay empty."""

    plan: SerializeAsAny[Plan] | None = None  # SerializeAsAny: a PlacedPlan keeps its own fields
    alternatives: list[SerializeAsAny[Plan]] = []
    textbook: Comparison | None = None
    compare: Comparison | None = None
    top_k_asked: int = Field(1, description="distinct configurations asked for (--top-k)")
    top_k_found: int = Field(0, description="distinct fitting configurations returned (the plan and its alternatives)")
    prefer: str = Field("fastest", description="fastest: the optimum; simple: the simplest plan within the tolerance")
    proof: str = Field("the fastest plan of the formulation", description="what status, bound and gap prove")
    margins: list[Margin] = Field(default_factory=list, description="the plan against the runner-up (or the fastest "
                                  "plan), the textbook plan and a compared configuration, with the error bar")
    tie_break: TieBreak | None = None
    cost: Cost | None = Field(None, description="GPU-hours, dollars (with a price) and energy (with a TDP)")
    pools_alone: list[Comparison] | None = Field(None, description="joint model: the best plan of each pool on "
                                                    "its own (equal links); None: not planned by the joint model")
    default_order: Comparison | None = Field(None, description="joint model: the same plan on the nodes in "
                                                "index order (Megatron's default rank order)")
    explanation: list[str] = Field(default_factory=list, description="joint model: what the placement keeps off "
                                   "the critical path")

    @property
    def placed(self) -> bool:
        """Planned by the joint model (a cluster of pools, or measured links)."""
        return self.pools_alone is not None

    @property
    def top_k_cut_short(self) -> bool:
        """The one rule: fewer plans than asked and the search stopped by the time limit."""
        return self.top_k_found < self.top_k_asked and not self.search.finished
