"""`fewest_gpus`: the smallest allocation of a cluster kind whose best plan meets a throughput
(or deadline) target. The node counts are searched with `diagnose.fewest_nodes` (doubling,
then bisection), the clusters made with `catalog.resize_cluster`, each probe decided as
cheaply as it can be (see `probe`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..catalog import catalog_families, cluster_family, family_cluster, load_cluster, resize_cluster
from ..diagnose import fewest_nodes
from ..errors import InputError
from ..formulation.flops import layers_gemm_fwd_flop, lm_head_fwd_flop
from ..plan import Out, SolveResult
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, PlanStatus
from ..specs import ClusterSpec, JobSpec
from ..specs.base import build
from ..specs.request import Target
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Busy, Clock, ResultCache
from .limits import MAX_GPUS, JobLike, as_cluster_ref, check_limits, with_cluster
from .planner import bounded_plan
from .screen import candidates

# Largest allocation fewest_gpus considers for a family without a size (e.g. "h100").
FEWEST_MAX_GPUS = 16384


class Probe(Out):
    """One allocation fewest_gpus looked at."""

    num_gpus: int
    meets: bool | None = Field(description="null: not decided within the time limit")
    tokens_per_s: float | None = Field(None, description="throughput of the best plan known at this size")
    max_tokens_per_s: float | None = Field(None, description="proven upper bound on throughput at this size")
    how: str
    nodes_per_pool: dict[str, int] | None = Field(None, description="a cluster of pools: nodes of each pool")


class FewestGpusResult(Out):
    status: PlanStatus = Field(
        description="OPTIMAL: the smallest allocation on the searched grid; FEASIBLE: meets the target, "
                    "smaller ones not all ruled out in time; INFEASIBLE: no allocation up to the maximum meets it")
    num_gpus: int | None = None
    cluster: str | None = None
    nodes_per_pool: dict[str, int] | None = Field(
        None, description="a cluster of pools: the nodes of each pool (its first ones, in listed order)")
    required_tokens_per_s: float
    result: SolveResult | None = Field(None, description="the plan at num_gpus")
    probes: list[Probe] = []
    reason: str
    notes: list[str] = []


@dataclass(frozen=True)
class Sizer:
    """Clusters of one kind at any node count up to `max_nodes`: `base` resized."""

    base: ClusterSpec
    max_nodes: int

    @property
    def gpus_per_node(self) -> int:
        return self.base.gpus_per_node

    def cluster(self, nodes: int) -> ClusterSpec:
        return resize_cluster(self.base, nodes)

    @property
    def label(self) -> str:
        return cluster_family(self.base) or self.base.name


def resolve(ref: str | ClusterSpec | Mapping[str, Any], field: str = "cluster") -> str | ClusterSpec:
    """A catalog family's key (e.g. "h100"), or the ClusterSpec that `ref` names or is."""
    ref = as_cluster_ref(ref, field)
    if isinstance(ref, str) and ref.strip().lower() in catalog_families():
        return ref.strip().lower()
    return ref if isinstance(ref, ClusterSpec) else load_cluster(ref, field)


def sizer(ref: str | ClusterSpec | Mapping[str, Any], field: str = "cluster",
          max_gpus: int | None = None) -> Sizer:
    """A family name (up to `max_gpus`, default FEWEST_MAX_GPUS), a cluster name, `<gpu>x<N>`,
    a ClusterSpec or a cluster mapping (up to its size). A cluster of pools is refused
    (`admission.pools` sizes one; admission does not take one yet)."""
    cl = resolve(ref, field)
    if isinstance(cl, str):
        per_node = int(catalog_families()[cl].get("gpus_per_node", 8))
        nodes = max(1, (max_gpus or FEWEST_MAX_GPUS) // per_node)
        return Sizer(family_cluster(cl, nodes * per_node, field), nodes)
    if cl.is_mixed:  # resizing has one node kind to add or remove; a cluster of pools has several
        raise InputError(f"{field}.pools", "this sizes a cluster of one GPU type (admission's free cluster is one); "
                                           "give one pool's cluster (fewest_gpus, plan and check take pools)")
    if cl.num_gpus > MAX_GPUS:
        raise InputError(field, f"{cl.num_gpus} GPUs is beyond what the planner accepts (at most {MAX_GPUS})")
    return Sizer(cl, cl.num_nodes)


def flop_per_token(model) -> float:
    """FLOPs every plan does per trained token at least: the GEMMs of a step, 3 x (layers x
    GEMMs + LM head) per token, active parameters for MoE (the attention core is left out so
    causal savings cannot break the bound)."""
    m = model
    return 3.0 * (float(layers_gemm_fwd_flop(m, 1)) + (1 + m.mtp_num_layers) * float(lm_head_fwd_flop(m, 1)))


def peak_flop_per_s(gpu, precision: str = "bf16") -> float:
    """A GPU's peak rate (bf16 or fp8, the larger; under nvfp4 the FP4 peak too, formulation/precision.py):
    no plan computes faster (efficiencies <= 1)."""
    fp4 = (gpu.peak_fp4_tflops or 0.0) * 1e12 if precision == "nvfp4" else 0.0
    return max(gpu.peak_flop_per_s, (gpu.peak_fp8_tflops or 0.0) * 1e12, fp4)


def min_nodes_by_peak(job: JobSpec, need: float, gpus_per_node: int) -> int:
    """Nodes below which no plan can reach `need` tokens/s even at the GPUs' peak: every plan
    does at least `flop_per_token` FLOPs per token at no more than `peak_flop_per_s`."""
    per_token, peak = flop_per_token(job.model), peak_flop_per_s(job.cluster.gpu, job.precision)
    return max(1, math.ceil(need * per_token / (peak * gpus_per_node) * (1 - 1e-9)))


def probe(job: JobSpec, need: float, clock: Clock, cache: ResultCache) -> tuple[Probe, SolveResult | None]:
    """Does `job`'s best plan reach `need` tokens/s? The incumbent meeting it proves a hit; the
    least time lower bound missing it proves a miss; otherwise a CP-SAT solve decides (None:
    not decided in time)."""
    n = job.cluster.num_gpus
    tokens = job.tokens_per_step
    try:
        cands = candidates(job, clock, cache)
    except Busy:
        return Probe(num_gpus=n, meets=None, how="busy"), None
    if cands is None:
        return Probe(num_gpus=n, meets=None, how="time limit reached while preparing candidates"), None
    if cands.num_survivors == 0:
        return Probe(num_gpus=n, meets=False, max_tokens_per_s=0.0, how="no shape fits in memory"), None
    ub = tokens / float(cands.time_lb_s.min())
    inc = tokens / cands.incumbent_step_s if math.isfinite(cands.incumbent_step_s) else None
    if inc is not None and inc >= need:
        return Probe(num_gpus=n, meets=True, tokens_per_s=inc, max_tokens_per_s=ub,
                     how="the incumbent meets the target"), None
    if ub < need:
        return Probe(num_gpus=n, meets=False, tokens_per_s=inc, max_tokens_per_s=ub,
                     how="time lower bound: no plan reaches the target"), None
    budget = clock.left() - clock.reserve()
    if budget <= 0.05:
        return Probe(num_gpus=n, meets=None, tokens_per_s=inc, max_tokens_per_s=ub, how="time limit reached"), None
    res = bounded_plan(job, clock.sub(budget), cache)
    return decide(n, need, res, tokens, inc, ub), res


def decide(num_gpus: int, need: float, res: SolveResult, tokens: float, inc: float | None = None,
           ub: float = math.inf) -> Probe:
    """The verdict of a solve on `need` tokens/s: a plan reaching it is a hit; OPTIMAL or
    INFEASIBLE, or a bound (`ub`, tightened by the solver's) below it, is a miss; else not
    decided. `inc`: the rate of a plan known before the solve."""
    rate = res.plan.tokens_per_s if res.plan is not None else inc
    if res.bound_step_time_s:
        ub = min(ub, tokens / res.bound_step_time_s)
    most = ub if math.isfinite(ub) else None  # the bound on the rate, when there is one
    if rate is not None and rate >= need:
        return Probe(num_gpus=num_gpus, meets=True, tokens_per_s=rate, max_tokens_per_s=most, how=f"solver ({res.status})")
    if res.status in (OPTIMAL, INFEASIBLE) or (most is not None and most < need):
        return Probe(num_gpus=num_gpus, meets=False, tokens_per_s=rate, max_tokens_per_s=most, how=f"solver ({res.status})")
    why = "bound above the target" if most is not None else "no bound"
    return Probe(num_gpus=num_gpus, meets=None, tokens_per_s=rate, max_tokens_per_s=most,
                 how=f"solver stopped at the time limit ({res.status}, {why})")


def as_target(target: Target | Mapping[str, Any]) -> Target:
    if isinstance(target, Target):
        return target
    if not isinstance(target, Mapping):
        raise InputError("target", "give tokens_per_s, or deadline_s with token_budget")
    return build(Target, dict(target), "target")


def fewest_gpus(job: JobLike, family_or_cluster: str | ClusterSpec, target: Target | Mapping[str, Any],
                time_limit_s: float | None = None, *, cache: ResultCache | None = None,
                exhaustive: bool = True, cancel=None) -> FewestGpusResult:
    """The smallest allocation (a multiple of the GPUs per node, up to the cluster's size or
    FEWEST_MAX_GPUS for a bare family) whose best plan meets `target`, with that plan.

    Throughput is not monotone in the GPU count: the global batch must divide by dp and the
    heads by tp, so e.g. 127 nodes may fit no plan at all where 126 and 128 do, and
    communication grows with the count. The search therefore does not trust bisection alone:
    1. sizes below `min_nodes_by_peak` cannot meet the target even at peak FLOP/s: skipped;
    2. doubling from there until a size meets the target, then bisection between the last
       miss and the first hit (`diagnose.fewest_nodes`): a verified allocation quickly;
    3. with `exhaustive` (default), every size not yet probed between the peak bound and that
       allocation, in ascending order: the first that meets is the smallest. When the time
       limit stops this scan, the answer is the smallest found so far, status FEASIBLE, and
       the notes say which sizes were not probed.
    Status OPTIMAL: every smaller size on the grid is ruled out (by the peak bound or a probe).
    An undecided probe counts as a miss and the status is then FEASIBLE.

    A cluster of pools is sized per pool by `admission.pools.fewest_gpus` (what `api.fewest_gpus`
    is), which hands every other cluster to this function.
    """
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["fewest_gpus"], cancel)
    cache = DEFAULT_CACHE if cache is None else cache
    target = as_target(target)
    sz = sizer(family_or_cluster)
    need = target.required_tokens_per_s
    search = _SizeSearch(sz, with_cluster(job, sz.cluster(sz.max_nodes)), need, clock, cache)
    per_node = sz.gpus_per_node
    floor = min_nodes_by_peak(search.base, need, per_node)
    notes = [f"below {floor * per_node} GPUs no plan can reach {need:.4g} tokens/s even at peak FLOP/s"]
    if floor > sz.max_nodes:
        return FewestGpusResult(status=INFEASIBLE, required_tokens_per_s=need, reason=(
            f"even at peak FLOP/s, {sz.max_nodes * per_node} {sz.label} GPUs cannot reach {need:.4g} tokens/s "
            f"(at least {floor * per_node} would be needed)"), notes=notes)
    hi, _ = fewest_nodes(search.meets, floor, sz.max_nodes, search.has_time)
    unprobed: list[int] = []
    if hi is not None and exhaustive:
        hi, unprobed = search.scan(floor, hi)
    elif hi is not None:
        unprobed = [m for m in range(floor, hi) if m not in search.probes]
    probes = search.probes
    undecided = any(probes[n].meets is None for n in probes if hi is None or n < hi)
    if hi is None:
        return search.none_meets(undecided, notes)
    return search.first_that_meets(hi, unprobed, undecided, notes)


class _SizeSearch:
    """The probes of one `fewest_gpus` search on a family or a cluster of one GPU type, by
    node count, with the solves that decided them."""

    def __init__(self, sz: Sizer, base: JobSpec, need: float, clock: Clock, cache: ResultCache):
        self.sz, self.base, self.need, self.clock, self.cache = sz, base, need, clock, cache
        self.probes: dict[int, Probe] = {}
        self.results: dict[int, SolveResult] = {}

    def on(self, nodes: int) -> JobSpec:
        return check_limits(self.base.model_copy(update={"cluster": self.sz.cluster(nodes)}))

    def meets(self, nodes: int) -> bool | None:
        if nodes not in self.probes:
            p, res = probe(self.on(nodes), self.need, self.clock, self.cache)
            self.probes[nodes] = p
            if res is not None:
                self.results[nodes] = res
        return self.probes[nodes].meets

    def has_time(self) -> bool:
        return self.clock.left() > self.clock.reserve()

    def scan(self, floor: int, hi: int) -> tuple[int, list[int]]:
        """Every size not yet probed from `floor` up to the allocation `hi` found, ascending:
        the first that meets, and the sizes the clock left unprobed."""
        for n in range(floor, hi):
            if n in self.probes:
                continue
            if not self.has_time():
                return hi, [m for m in range(n, hi) if m not in self.probes]
            if self.meets(n):
                return n, []
        return hi, []

    def none_meets(self, undecided: bool, notes: list[str]) -> FewestGpusResult:
        sz, need, probes, per_node = self.sz, self.need, self.probes, self.sz.gpus_per_node
        ordered = [probes[n] for n in sorted(probes)]
        done = sz.max_nodes in probes
        status = INFEASIBLE if done and not undecided else UNKNOWN
        reason = (f"no allocation of {sz.label} up to {sz.max_nodes * per_node} GPUs reaches {need:.4g} tokens/s "
                  f"(at {sz.max_nodes * per_node} GPUs: {_fmt_rate(probes[sz.max_nodes].tokens_per_s)})"
                  if status == INFEASIBLE else
                  f"time limit {self.clock.limit:g} s reached before an allocation meeting {need:.4g} tokens/s was "
                  f"found (largest probed: {max(probes, default=0) * per_node} GPUs)" if not done else
                  f"no allocation up to {sz.max_nodes * per_node} GPUs was shown to reach {need:.4g} tokens/s, "
                  f"but some probes were not decided in time")
        return FewestGpusResult(status=status, required_tokens_per_s=need, probes=ordered, reason=reason, notes=notes)

    def first_that_meets(self, hi: int, unprobed: list[int], undecided: bool, notes: list[str]) -> FewestGpusResult:
        """`hi` nodes with their best plan (solved again to optimality when time is left)."""
        need, probes, per_node = self.need, self.probes, self.sz.gpus_per_node
        ordered = [probes[n] for n in sorted(probes)]
        j = self.on(hi)
        res = self.results.get(hi)
        if res is None or (res.status != OPTIMAL and self.has_time()):
            better = bounded_plan(j, self.clock, self.cache)
            if better.plan is not None and (res is None or res.plan is None
                                            or better.plan.step_time_s <= res.plan.step_time_s):
                res = better
        proven = not unprobed and not undecided
        if unprobed:
            notes.append(f"not probed in time: {_ranges([n * per_node for n in unprobed])} GPUs")
        if undecided:
            notes.append("some smaller sizes were not decided within the time limit (counted as misses)")
        rate = res.plan.tokens_per_s if res is not None and res.plan is not None else probes[hi].tokens_per_s
        reason = (f"{hi * per_node} GPUs ({j.cluster.name}) reach {_fmt_rate(rate)} >= {need:.4g} tokens/s; "
                  + ("every smaller allocation misses it" if proven else "smaller allocations are not all ruled out"))
        return FewestGpusResult(status=OPTIMAL if proven else FEASIBLE, num_gpus=hi * per_node,
                                cluster=j.cluster.name, required_tokens_per_s=need, result=res, probes=ordered,
                                reason=reason, notes=notes)


def _ranges(xs: list[int]) -> str:
    """[8, 16, 24, 40] -> '8-24, 40' (consecutive multiples of the first step)."""
    if not xs:
        return ""
    step = xs[1] - xs[0] if len(xs) > 1 else 1
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:]:
        if x - prev != step:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = x
        prev = x
    out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ", ".join(out)


def _fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g} tokens/s"
