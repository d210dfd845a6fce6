"""The plan: one value type for every method's answer. Its times and memory are always
recomputed with the float formulation (`make_plan`), never read back from a solver's
scaled integer objective (DESIGN.md section 2)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from .formulation.pipeline import evaluate_split
from .formulation.job import job_coefficients, throughput
from .space.shapes import RECOMPUTE_CODES, Shapes
from .specs import JobSpec

Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


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

    def shapes(self) -> Shapes:
        return Shapes.single(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, vp=self.vp,
                             micro_batch_size=self.micro_batch_size, recompute=self.recompute,
                             sequence_parallel=self.sequence_parallel, zero=self.zero)

    def key(self) -> tuple:
        """Canonical order used to break ties deterministically."""
        return (self.tp, self.cp, self.pp, self.vp, self.micro_batch_size,
                RECOMPUTE_CODES[self.recompute], int(self.sequence_parallel), self.zero)


class StageMemory(Out):
    params: float
    grads: float
    optimizer: float
    activations: float
    other: float
    total: float


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
    parallel: ParallelConfig
    layers_per_stage: list[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    breakdown: dict[str, float]
    stages: list[Stage]
    peak_memory_bytes: float
    capacity_bytes: float
    fits: bool


def parallel_from_row(job: JobSpec, row: dict) -> ParallelConfig:
    m = job.global_batch_size // (row["dp"] * row["micro_batch_size"])
    return ParallelConfig(num_microbatches=m, **{k: row[k] for k in (
        "tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero")})


def make_plan(job: JobSpec, parallel: ParallelConfig, layers: list[int]) -> Plan:
    """Evaluate `parallel` with `layers` per stage using the float formulation."""
    co = job_coefficients(job, parallel.shapes())
    ev = evaluate_split(co, 0, layers)
    tp_ = throughput(job, ev.step_time_s, RECOMPUTE_CODES[parallel.recompute])
    return Plan(
        model=job.model.name, cluster=job.cluster.name, num_gpus=job.cluster.num_gpus,
        global_batch_size=job.global_batch_size, seq_length=job.seq_length,
        parallel=parallel, layers_per_stage=[int(x) for x in layers],
        step_time_s=ev.step_time_s, tokens_per_s=tp_.tokens_per_s, mfu=tp_.mfu,
        model_tflops_per_gpu=tp_.model_tflops_per_gpu, hardware_tflops_per_gpu=tp_.hardware_tflops_per_gpu,
        breakdown=ev.breakdown, stages=[Stage(**s) for s in ev.stages],
        peak_memory_bytes=ev.peak_memory_bytes, capacity_bytes=ev.capacity_bytes, fits=ev.fits,
    )


class SearchStats(Out):
    method: str
    wall_time_s: float
    shapes_legal: int
    shapes_dominated: int
    shapes_pruned_memory: int
    shapes_pruned_time: int
    shapes_searched: int
    evaluations: Optional[int] = None
    solver: dict = {}
    finished: bool = True


class Shortfall(Out):
    """Why no plan fits: the resource, how much is needed and available, and what would help."""

    resource: str
    stage: Optional[int] = None
    needed_bytes: Optional[float] = None
    available_bytes: Optional[float] = None
    short_bytes: Optional[float] = None
    best_shape: Optional[dict] = None
    suggestions: list[str] = []
    message: str


class SolveResult(Out):
    status: Status
    plan: Optional[Plan] = None
    bound_step_time_s: Optional[float] = None
    gap: Optional[float] = None
    tolerance_s: Optional[float] = None
    alternatives: list[Plan] = []
    shortfall: Optional[Shortfall] = None
    search: SearchStats
    notes: list[str] = []
