"""`fewest_gpus` on a cluster of pools: the fewest nodes of which pools (a count per pool,
e.g. {h100: 2, a100: 1}) whose best plan meets a throughput (or deadline) target.

Sub-clusters (`sub_cluster`): the first n nodes of each pool, in its listed order, each pool
keeping its own parameters (GPU, NVLink, NICs, racks, node names) and the cluster its
inter-pool link; a pool given no nodes leaves, and one pool left is a cluster of one GPU type
(planned by the single-type model). Measured link overrides between kept nodes are renumbered;
those naming a removed node are dropped, and the answer's notes say how many.

Order of preference among the allocations (count vectors), the first that meets wins:
1. fewest GPUs in all;
2. at equal GPUs, the cheapest per hour, when every pool states `price_per_gpu_hour_usd`;
3. then the least peak FLOP/s held: the faster GPUs stay free for other jobs;
4. then fewer nodes of the pool listed first (only to make the answer deterministic).

Search: totals of nodes in ascending order (the joint model needs the same GPUs per node in
every pool, so nodes order GPUs too). A total is skipped when no allocation of it can reach
the target even at peak FLOP/s, or when no plan fits on that many nodes even if every GPU had
the memory of the pool with the most memory per GPU (`diagnose.job_fits` on that uniform
cluster: exact for it, a relaxation of every allocation of the total). The allocations of the
first total that survives are probed in the order of preference: one pool alone by the
single-type probe (`sizing.probe`), several by the joint model (`bounded_plan`), each verdict
by `sizing.decide`. A joint plan may leave nodes idle, so a plan on fewer nodes is one on more
too; throughput need not grow with nodes, so no allocation is ruled out for being below a miss
except by the two bounds above. The clock bounds the search: when it runs out the answer is
the first allocation found to meet (status FEASIBLE) or none (UNKNOWN), and the notes say what
was not probed. Counts are decided on each pool's first nodes: with link overrides, other
nodes of a pool may be faster; they are not searched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..catalog import resize_cluster
from ..diagnose import job_fits, pooled_shortfall
from ..errors import InputError
from ..plan import SolveResult
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN
from ..specs import ClusterSpec, JobSpec
from ..specs.cluster import FABRIC_FIELDS, LinkOverride, pool_node_names
from ..specs.deadline import DeadlineExpired
from ..specs.request import Target
from .cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Clock, ResultCache
from .limits import JobLike, check_limits, with_cluster
from .planner import bounded_plan
from .sizing import FewestGpusResult, Probe, as_target, decide, flop_per_token, peak_flop_per_s, probe, resolve
from .sizing import fewest_gpus as sizing_fewest_gpus

# Allocations of one node total the search will order; beyond it the search stops and says so.
MAX_VECTORS_PER_TOTAL = 20000


def sub_cluster(cluster: ClusterSpec, counts: tuple[int, ...]) -> tuple[ClusterSpec, int]:
    """`cluster` cut to the first counts[i] nodes of pool i (see the module docstring), and
    how many link overrides were dropped because they name a removed node."""
    pools = cluster.pools
    if len(counts) != len(pools) or any(not 0 <= n <= p.num_nodes for n, p in zip(counts, pools)) or not any(counts):
        raise ValueError(f"counts {counts} do not fit pools {[p.num_nodes for p in pools]}")
    new_index: dict[int, int] = {}
    start = kept_so_far = 0
    kept = []
    for p, n in zip(pools, counts):
        for i in range(n):
            new_index[start + i] = kept_so_far + i
        start += p.num_nodes
        kept_so_far += n
        if n:
            kept.append(p.model_copy(update={"num_nodes": n, "node_names": pool_node_names(p)[:n]}))
    links = tuple(LinkOverride(**{**o.model_dump(), "src": new_index[o.src], "dst": new_index[o.dst]})
                  for o in cluster.link_overrides if o.src in new_index and o.dst in new_index)
    dropped = len(cluster.link_overrides) - len(links)
    name = f"{cluster.name}[{', '.join(f'{p.name}={n}' for p, n in zip(pools, counts) if n)}]"
    if len(kept) == 1:
        fabric = {k: getattr(kept[0], k) for k in FABRIC_FIELDS}
        return ClusterSpec(name=name, source=cluster.source, link_overrides=links, **fabric), dropped
    return ClusterSpec(name=name, source=cluster.source, pools=tuple(kept), link_overrides=links,  # type: ignore[call-arg]  # pools fill gpu etc.: before-validator
                       inter_pool_gbit_per_s=cluster.inter_pool_gbit_per_s,
                       inter_pool_latency_us=cluster.inter_pool_latency_us), dropped


def vectors_at(total: int, sizes: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every count vector with 0 <= counts[i] <= sizes[i] summing to `total`."""
    if len(sizes) == 1:
        if total <= sizes[0]:
            yield (total,)
        return
    rest = sum(sizes[1:])
    for n in range(max(0, total - rest), min(sizes[0], total) + 1):
        for tail in vectors_at(total - n, sizes[1:]):
            yield (n,) + tail


def count_at(total: int, sizes: tuple[int, ...]) -> int:
    """How many vectors `vectors_at` yields (without yielding them)."""
    ways = [1] + [0] * total
    for s in sizes:  # new[t] = ways[t - s] + ... + ways[t], by prefix sums
        prefix = [0]
        for w in ways:
            prefix.append(prefix[-1] + w)
        ways = [prefix[t + 1] - prefix[max(0, t - s)] for t in range(total + 1)]
    return ways[total]


def preference(cluster: ClusterSpec):
    """The sort key of an allocation (see the module docstring)."""
    pools = cluster.pools
    prices = [p.price_per_gpu_hour_usd for p in pools]
    known = [x for x in prices if x is not None]
    priced = len(known) == len(prices)  # then known is prices

    def key(v: tuple[int, ...]):
        gpus = sum(n * p.gpus_per_node for n, p in zip(v, pools))
        cost = sum(n * p.gpus_per_node * x for n, p, x in zip(v, pools, known)) if priced else 0.0
        peak = sum(n * p.gpus_per_node * peak_flop_per_s(p.gpu) for n, p in zip(v, pools))
        return gpus, cost, peak, v

    return key


def describe(cluster: ClusterSpec, v: tuple[int, ...]) -> str:
    return " + ".join(f"{n} {p.name} node{'s' if n > 1 else ''}" for p, n in zip(cluster.pools, v) if n)


def fewest_gpus(job: JobLike, family_or_cluster: str | ClusterSpec | Mapping[str, Any],
                target: Target | Mapping[str, Any], time_limit_s: float | None = None, *,
                cache: ResultCache | None = None, exhaustive: bool = True, cancel=None) -> FewestGpusResult:
    """`api.fewest_gpus`: a cluster of pools by `fewest_pool_nodes` (the fewest nodes of which
    pools, see the module docstring), any other family or cluster by `sizing.fewest_gpus`
    (`exhaustive` applies there)."""
    ref = resolve(family_or_cluster)
    if not (isinstance(ref, ClusterSpec) and ref.is_mixed):
        return sizing_fewest_gpus(job, ref, target, time_limit_s, cache=cache, exhaustive=exhaustive, cancel=cancel)
    clock = Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["fewest_gpus"], cancel)
    cache = DEFAULT_CACHE if cache is None else cache
    return fewest_pool_nodes(job, ref, as_target(target), clock, cache)


def fewest_pool_nodes(job: JobLike, cluster: ClusterSpec, target: Target, clock: Clock,
                      cache: ResultCache) -> FewestGpusResult:
    """The first allocation of `cluster`'s pools, in the order of preference, whose best plan
    meets `target` (see the module docstring), with that plan."""
    search = _PoolSearch(job, cluster, target, clock, cache)
    search.run()
    search.add_notes()
    if search.hit is None:
        return search.none_meets()
    return search.first_that_meets(search.hit)


class _PoolSearch:
    """One search over the allocations of a cluster's pools: what it probed, what it ruled out
    and why, where it stopped."""

    def __init__(self, job: JobLike, cluster: ClusterSpec, target: Target, clock: Clock, cache: ResultCache):
        pools = cluster.pools
        per_node = {p.gpus_per_node for p in pools}
        if len(per_node) != 1:
            raise InputError("cluster.pools", "sizing a cluster of pools needs the same gpus_per_node in every pool "
                                              f"(got {sorted(per_node)}), as the joint model does")
        self.cluster, self.pools, self.clock, self.cache = cluster, pools, clock, cache
        self.g = per_node.pop()
        self.base = with_cluster(job, cluster)
        self.need = target.required_tokens_per_s
        self.tokens = self.base.tokens_per_step
        self.per_token = flop_per_token(self.base.model)
        self.sizes = tuple(p.num_nodes for p in pools)
        self.roomiest = max(cluster.pool_views(), key=lambda v: v.gpu.usable_memory_bytes)
        self.fastest_first = sorted(range(len(pools)), key=lambda i: -peak_flop_per_s(pools[i].gpu))
        self.key = preference(cluster)
        self.notes = ["allocations are tried by fewest GPUs, then the lowest price per hour (when every pool has one), "
                      "then the least peak FLOP/s (the faster GPUs stay free), each pool's first nodes"]
        self.probes: list[Probe] = []
        self.results: dict[tuple[int, ...], SolveResult] = {}
        self.dropped_links: dict[tuple[int, ...], int] = {}
        self.undecided = False
        self.hit: tuple[int, ...] | None = None
        self.cut: str | None = None
        self.peak_skipped: list[int] = []
        self.memory_skipped: list[int] = []

    def reaches(self, v: tuple[int, ...]) -> bool:  # peak FLOP/s can reach the target
        return (sum(n * self.g * peak_flop_per_s(p.gpu, self.base.precision) for n, p in zip(v, self.pools)) * (1 + 1e-9)
                >= self.need * self.per_token)

    def max_peak_at(self, total: int) -> tuple[int, ...]:  # the allocation of `total` nodes with the most peak FLOP/s
        v, left = [0] * len(self.pools), total
        for i in self.fastest_first:
            v[i] = min(self.sizes[i], left)
            left -= v[i]
        return tuple(v)

    def on(self, v: tuple[int, ...]) -> JobSpec:
        sub, self.dropped_links[v] = sub_cluster(self.cluster, v)
        return check_limits(self.base.model_copy(update={"cluster": sub}))

    def try_one(self, v: tuple[int, ...]) -> Probe:
        clock = self.clock
        j = self.on(v)
        res: SolveResult | None
        if not j.cluster.is_mixed:
            p, res = probe(j, self.need, clock, self.cache)
        else:
            budget = clock.left() - clock.reserve()
            if budget <= 0.05:
                p, res = Probe(num_gpus=j.cluster.num_gpus, meets=None, how="time limit reached"), None
            else:
                res = bounded_plan(j, clock.sub(budget), self.cache)
                p = decide(j.cluster.num_gpus, self.need, res, self.tokens)
                p.how = p.how.replace("solver", "joint model", 1)
        if res is not None:
            self.results[v] = res
        return p.model_copy(update={"nodes_per_pool": {q.name: n for q, n in zip(self.pools, v)}})

    def run(self) -> None:
        """Totals of nodes in ascending order, each skipped by the bounds or probed, until an
        allocation meets the target or the search is cut short."""
        clock, g = self.clock, self.g
        for total in range(1, sum(self.sizes) + 1):
            if not self.reaches(self.max_peak_at(total)):
                self.peak_skipped.append(total)
                continue
            if clock.left() <= clock.reserve():
                self.cut = f"time limit {clock.limit:g} s reached at {total * g} GPUs; larger allocations were not probed"
                break
            try:
                fits = job_fits(self.base.model_copy(update={"cluster": resize_cluster(self.roomiest, total)}),
                                clock.work())
            except DeadlineExpired:
                self.cut = f"time limit {clock.limit:g} s reached at {total * g} GPUs; larger allocations were not probed"
                break
            if not fits:
                self.memory_skipped.append(total)
                continue
            if (many := count_at(total, self.sizes)) > MAX_VECTORS_PER_TOTAL:
                self.cut = (f"{many} allocations of {total * g} GPUs are more than the search orders "
                            f"(at most {MAX_VECTORS_PER_TOTAL}); larger allocations were not probed")
                break
            self.probe_total(total)
            if self.hit is not None or self.cut is not None:
                break

    def probe_total(self, total: int) -> None:
        """The allocations of `total` nodes that peak FLOP/s does not rule out, in the order of
        preference, until one meets the target or the clock runs out."""
        clock = self.clock
        ordered = sorted((v for v in vectors_at(total, self.sizes) if self.reaches(v)), key=self.key)
        for i, v in enumerate(ordered):
            if clock.left() <= clock.reserve():
                self.cut = (f"time limit {clock.limit:g} s reached: {len(ordered) - i} allocations of "
                            f"{total * self.g} GPUs and all larger ones were not probed")
                break
            p = self.try_one(v)
            self.probes.append(p)
            self.undecided = self.undecided or p.meets is None
            if p.meets:
                self.hit = v
                break

    def add_notes(self) -> None:
        g, notes = self.g, self.notes
        if self.peak_skipped:
            notes.append(f"ruled out by peak FLOP/s (no plan reaches {self.need:.4g} tokens/s): "
                         f"every allocation of {_span(self.peak_skipped, g)} GPUs")
        if self.memory_skipped:
            notes.append(f"ruled out by memory (no plan fits even with {self.roomiest.gpu.name}'s memory on every "
                         f"GPU): every allocation of {_span(self.memory_skipped, g)} GPUs")
        if self.cut:
            notes.append(self.cut)
        if self.undecided:
            notes.append("some allocations were not decided within the time limit (counted as misses)")

    def none_meets(self) -> FewestGpusResult:
        cluster, need = self.cluster, self.need
        status = UNKNOWN if (self.cut or self.undecided) else INFEASIBLE
        reason = (f"no allocation fits, {pooled_shortfall(self.base, 0.0).message}"
                  if self.memory_skipped and self.memory_skipped[-1] == sum(self.sizes) else
                  f"no allocation of {cluster.name}'s pools up to {cluster.num_gpus} GPUs reaches {need:.4g} tokens/s"
                  if status == INFEASIBLE else
                  f"no allocation was shown to reach {need:.4g} tokens/s within {self.clock.limit:g} s")
        return FewestGpusResult(status=status, required_tokens_per_s=need, probes=self.probes, reason=reason,
                                notes=self.notes)

    def first_that_meets(self, hit: tuple[int, ...]) -> FewestGpusResult:
        """The allocation `hit` with its best plan (solved again to optimality when time is left)."""
        clock, need, notes = self.clock, self.need, self.notes
        j = self.on(hit)
        res = self.results.get(hit)
        if res is None or (res.status != OPTIMAL and clock.left() > clock.reserve()):
            better = bounded_plan(j, clock, self.cache)
            if better.plan is not None and (res is None or res.plan is None
                                            or better.plan.step_time_s <= res.plan.step_time_s):
                res = better
        if self.dropped_links[hit]:
            notes.append(f"{self.dropped_links[hit]} link override(s) naming nodes outside the allocation were dropped")
        proven = not self.undecided
        rate = res.plan.tokens_per_s if res is not None and res.plan is not None else self.probes[-1].tokens_per_s
        reason = (f"{j.cluster.num_gpus} GPUs ({describe(self.cluster, hit)}) reach "
                  f"{'n/a' if rate is None else f'{rate:.4g} tokens/s'} >= {need:.4g} tokens/s; "
                  + ("every allocation before it in the order of preference misses it" if proven
                     else "allocations before it are not all ruled out"))
        return FewestGpusResult(status=OPTIMAL if proven else FEASIBLE, num_gpus=j.cluster.num_gpus,
                                cluster=j.cluster.name, nodes_per_pool={p.name: n for p, n in zip(self.pools, hit)},
                                required_tokens_per_s=need, result=res, probes=self.probes, reason=reason, notes=notes)


def _span(totals: list[int], g: int) -> str:
    lo, hi = totals[0] * g, totals[-1] * g
    return f"{lo}" if lo == hi else f"{lo} to {hi}" if len(totals) == totals[-1] - totals[0] + 1 else \
        ", ".join(str(t * g) for t in totals)
