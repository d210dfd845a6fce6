"""`admit`: one decision per job of a batch, first come first served, on a free cluster. A job
asks for an allocation (`specs.request.AdmitJob`: `num_gpus`, a `cluster` of the free
cluster's GPU type, or a throughput `target`); it is admitted when the allocation fits in
what is still free and a plan fits on it (`check`, then `plan`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from ..errors import InputError, path
from ..plan import Out, Plan, default_plan_layers, make_plan
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, PlanStatus
from ..specs import ClusterSpec, JobSpec
from ..specs.base import build
from ..specs.request import AdmitJob
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Clock, ResultCache
from .check import timed_check
from .limits import as_job, with_cluster
from .planner import bounded_plan
from .sizing import Sizer, fewest_gpus, sizer

DecisionStatus = Literal[PlanStatus, "NO_CAPACITY", "INVALID"]


class Decision(Out):
    id: int | str | None = None
    admitted: bool
    status: DecisionStatus
    num_gpus: int | None = None
    cluster: str | None = None
    plan: Plan | None = None
    gap: float | None = Field(None, description="the plan's gap to the solver's bound, when it has one")
    reason: str
    field: str | None = Field(None, description="the offending field when status is INVALID")


class AdmitResult(Out):
    cluster: str
    gpus_free_before: int
    gpus_free_after: int
    decisions: list[Decision]


def parse_admit_job(data: Any, field: str = "job") -> AdmitJob:
    """An AdmitJob from a mapping; InputError naming the first offending field under `field`."""
    if isinstance(data, AdmitJob):
        return data
    if not isinstance(data, Mapping):
        raise InputError(field, f"a job must be a JSON object, not {type(data).__name__}")
    return build(AdmitJob, dict(data), field, list_keys=True)


def _nodes_asked(aj: AdmitJob, sz: Sizer, field: str) -> int | None:
    """Nodes asked for (None for a target: decided by fewest_gpus)."""
    given = [k for k in ("num_gpus", "cluster", "target") if getattr(aj, k) is not None]
    if len(given) != 1:
        raise InputError(field if not given else path(field, given[1]),
                         "give exactly one of num_gpus, cluster or target (the allocation the job asks for)")
    per_node = sz.gpus_per_node
    if aj.num_gpus is not None:
        if aj.num_gpus % per_node:
            raise InputError(path(field, "num_gpus"), f"{aj.num_gpus} is not a multiple of {per_node} GPUs per node")
        return aj.num_gpus // per_node
    if aj.cluster is not None:
        asked = as_job(aj.job_fields(), field).cluster
        if asked.gpu.name != sz.base.gpu.name:
            raise InputError(path(field, "cluster"), f"asks for {asked.gpu.name} GPUs; the free cluster has {sz.base.gpu.name}")
        if asked.gpus_per_node != per_node:
            raise InputError(path(field, "cluster"), f"{asked.gpus_per_node} GPUs per node; the free cluster has {per_node}")
        return asked.num_nodes
    return None


def admit(jobs: Sequence[JobSpec | AdmitJob | Mapping[str, Any]], free_cluster: str | ClusterSpec,
          time_limit_s: float | None = None, *, cache: ResultCache | None = None,
          on_decision: Callable[[int, Decision], None] | None = None, cancel=None) -> AdmitResult:
    """One decision per job, in order (first come, first served): a job is admitted when its
    allocation fits in what is still free and a plan fits on it; an admitted job's GPUs are no
    longer free for the jobs after it. The time limit covers the batch: each job gets an equal
    share of what is left (time a job does not use flows to the next ones).

    Jobs are JobSpecs (their cluster is the allocation asked for), AdmitJobs or mappings with
    an allocation (`num_gpus`, `cluster` or `target`). A job that cannot be read is decided
    INVALID with the offending field (`jobs[i].<path>`); the others go on.
    `on_decision(i, decision)` is called as each job is decided (to stream them). An allocation
    of k nodes is the first k nodes' worth of the free cluster (racks and link overrides are
    kept for those nodes): which physical nodes is the scheduler's choice.
    """
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["admit"], cancel)
    cache = DEFAULT_CACHE if cache is None else cache
    sz = sizer(free_cluster, field="cluster")
    per_node = sz.gpus_per_node
    free_nodes = sz.max_nodes
    free_before = free_nodes * per_node
    decisions: list[Decision] = []
    for i, item in enumerate(jobs):
        share = max(0.0, (clock.left() - clock.reserve()) / (len(jobs) - i))
        d = _admit_one(item, f"jobs[{i}]", sz, free_nodes, clock.sub(share), cache)
        decisions.append(d)
        if on_decision is not None:
            on_decision(i, d)
        if d.admitted and d.num_gpus:
            free_nodes -= d.num_gpus // per_node
    return AdmitResult(cluster=sz.cluster(sz.max_nodes).name, gpus_free_before=free_before,
                       gpus_free_after=free_nodes * per_node, decisions=decisions)


def _admit_one(item, field: str, sz: Sizer, free_nodes: int, clock: Clock, cache: ResultCache) -> Decision:
    per_node = sz.gpus_per_node
    ident = item.get("id", item.get("name")) if isinstance(item, Mapping) else None
    if not isinstance(ident, (int, str)) or isinstance(ident, bool):
        ident = None
    nodes: int | None
    fields: JobSpec | dict
    try:
        if isinstance(item, JobSpec):
            if item.cluster.gpu.name != sz.base.gpu.name:
                raise InputError(path(field, "cluster"), f"asks for {item.cluster.gpu.name} GPUs; the free cluster has another type")
            nodes, fields = item.cluster.num_nodes, item
        else:
            aj = parse_admit_job(item, field)
            ident = aj.id if aj.id is not None else aj.name
            nodes = _nodes_asked(aj, sz, field)
            fields = aj.job_fields()
        # the job on its allocation (or, for a target, on what is free): validated before capacity
        job = with_cluster(fields, sz.cluster(nodes if nodes is not None else max(1, free_nodes)), field)
        if nodes is not None:
            if nodes > free_nodes:
                return Decision(id=ident, admitted=False, status="NO_CAPACITY", num_gpus=nodes * per_node,
                                reason=f"asks for {nodes * per_node} GPUs; {free_nodes * per_node} are free")
            return _decide_job(ident, job, clock, cache)
        if free_nodes == 0:
            return Decision(id=ident, admitted=False, status="NO_CAPACITY", reason="no GPUs are free")
        target = aj.target  # nodes is None: the job gives a target (`_nodes_asked`)
        assert target is not None
        fg = fewest_gpus(job, sz.cluster(free_nodes), target, time_limit_s=clock.limit, cache=cache, cancel=clock.cancel)
        if fg.num_gpus is None:
            status = "NO_CAPACITY" if fg.status == INFEASIBLE else UNKNOWN
            return Decision(id=ident, admitted=False, status=status, reason=fg.reason)
        res = fg.result
        return Decision(id=ident, admitted=True, status=res.status if res is not None else FEASIBLE,
                        num_gpus=fg.num_gpus, cluster=fg.cluster, plan=res.plan if res is not None else None,
                        gap=res.gap if res is not None else None, reason=fg.reason)
    except InputError as exc:
        return Decision(id=ident, admitted=False, status="INVALID", reason=exc.message, field=exc.field or None)


def _decide_job(ident, job: JobSpec, clock: Clock, cache: ResultCache) -> Decision:
    n, name = job.cluster.num_gpus, job.cluster.name
    verdict = timed_check(job, clock, cache)
    if verdict.status == INFEASIBLE:
        return Decision(id=ident, admitted=False, status=INFEASIBLE, num_gpus=n, cluster=name, reason=verdict.reason)
    if verdict.status == UNKNOWN:
        return Decision(id=ident, admitted=False, status=UNKNOWN, num_gpus=n, cluster=name,
                        reason=f"not decided in time: {verdict.reason}")
    res = bounded_plan(job, clock, cache) if clock.left() > clock.reserve() else None
    if res is not None and res.plan is not None:
        return Decision(id=ident, admitted=True, status=res.status, num_gpus=n, cluster=name, plan=res.plan, gap=res.gap,
                        reason=verdict.reason if res.status != OPTIMAL else
                        f"fits; optimal plan {res.plan.step_time_s:.3f} s per step")
    # feasible by the witness, no solver plan in time: the witness's plan
    w = verdict.witness
    assert w is not None, "a FEASIBLE check names its witness"
    p = make_plan(job, w, verdict.witness_layers_per_stage or default_plan_layers(job, w))
    return Decision(id=ident, admitted=True, status=FEASIBLE, num_gpus=n, cluster=name, plan=p, reason=verdict.reason)
