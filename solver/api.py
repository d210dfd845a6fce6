"""Python API for admission control: `plan`, `check`, `fewest_gpus` and `admit`, each with a
time limit it honours and a status it can be acted on.

Every call takes `time_limit_s` and returns within it (measured from the call; work that
cannot be interrupted -- enumerating shapes, building coefficients -- runs in a worker thread
that the caller stops waiting for at the deadline; it finishes in the background and its
result is cached, so the next call is fast). When time runs out the answer says so: `plan`
returns status FEASIBLE with the best plan known so far and its gap to a proven bound (or
UNKNOWN with no plan), `check` returns status UNKNOWN, `fewest_gpus` the smallest allocation
verified so far.

Answers depend on the question, not on the history: a cached result is the same value a cold
call computes (given the time to finish), so a repeated query gets the identical answer.

State: there is none except an explicit, lock-protected LRU cache (`ResultCache`; the module
default is `DEFAULT_CACHE`, every function takes `cache=`). It holds what depends on a job
alone, never on the admission batch: the feasibility screen and the pruned candidates of a
job (its enumerated shapes, coefficients and bounds, keyed by the full JobSpec: model,
cluster, batch, sequence, precision, constraints) and the solver's result per job. Concurrent
requests for the same job share one computation (single flight).

Check (fast path). A job is feasible iff some legal shape fits under some layer split.
`candidates.prepare` (cached per job) decides most jobs without a solver:
- no legal shape at all (divisibility, constraints) -> INFEASIBLE, resource "legal shapes";
- every legal shape's memory lower bound (`pruning.memory_lower_bound_bytes`, valid for every
  split) exceeds the GPU -> INFEASIBLE, resource "memory", with the shortfall of the least
  demanding shape;
- the incumbent (the best shape whose balanced split fits) is a witness -> FEASIBLE, with its
  step time as the best known;
- otherwise (lower bounds admit some shape but no balanced split fits) a short CP-SAT solve
  decides: it finds an uneven split that fits, or proves none does.
"""

from __future__ import annotations

import math
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from .errors import InputError
from .optimize import shape_shortfall
from .plan import ParallelConfig, SearchStats, Shortfall, SolveResult
from .specs import ClusterSpec, JobSpec

GIB = 1024**3

# Default time limits (seconds) of each call, and the cap a service applies.
DEFAULT_TIME_LIMIT_S = {"plan": 10.0, "check": 2.0, "fewest_gpus": 30.0, "admit": 30.0}
# Short CP-SAT solve that decides `check` when no balanced split fits (at most this long).
CHECK_SOLVE_S = 2.0
# Guard rails on job size: the enumeration is polynomial in these, and a service must not let
# one request occupy a worker for minutes (the error names the field and the cap).
MAX_GPUS = 32768
MAX_GLOBAL_BATCH_SIZE = 65536
MAX_SEQ_LENGTH = 1 << 20
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20  # hidden_size, ffn_hidden_size
MAX_VOCAB = 1 << 22
MAX_SPEC_NUMBER = 1e9  # any float of a GPU or cluster spec (bandwidths, latencies, peaks)
# Largest allocation fewest_gpus considers for a family without a size (e.g. "h100").
FEWEST_MAX_GPUS = 16384


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ===================================================================== cache
class Busy(RuntimeError):
    """Too many distinct computations in flight: the caller answers UNKNOWN at once."""


class ResultCache:
    """Lock-protected LRU of finished results plus the computations in flight (single flight:
    concurrent callers of one key share one computation).

    `maxsize` bounds the finished entries; `max_inflight` the distinct keys queued or being
    computed (beyond it `run` raises `Busy`); `workers` how many computations use the CPU at
    once. The workers are daemon threads started on first use and fed by a queue, so
    submitting work costs no thread start and a process can exit with work still queued.
    """

    def __init__(self, maxsize: int = 1024, max_inflight: int = 256, workers: Optional[int] = None):
        self.maxsize = maxsize
        self.max_inflight = max_inflight
        self.workers = workers or max(2, os.cpu_count() or 2)
        self._lock = threading.Lock()
        self._data: OrderedDict = OrderedDict()
        self._inflight: dict = {}
        self._queues: dict[str, queue.SimpleQueue] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.computed = 0

    def get(self, key, default=None):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return default

    def put(self, key, value) -> None:
        with self._lock:
            self._put(key, value)

    def put_if(self, key, value, keep: Callable[[Any], bool]) -> None:
        """Store `value` unless an entry exists and `keep(existing)` says to keep that one."""
        with self._lock:
            prev = self._data.get(key)
            if prev is None or not keep(prev):
                self._put(key, value)

    def _put(self, key, value) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)
            self.evictions += 1

    def run(self, key, fn: Callable[[], Any], store: Callable[[Any], bool] = lambda v: True,
            lane: str = "prepare") -> Future:
        """The future of `fn()` for `key`: the cached value, the computation in flight, or a new
        one queued for the workers (stored in the cache when `store(value)`)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                fut: Future = Future()
                fut.set_result(self._data[key])
                return fut
            fut = self._inflight.get(key)
            if fut is not None:
                return fut
            if len(self._inflight) >= self.max_inflight:
                raise Busy(f"{len(self._inflight)} computations in flight")
            self.misses += 1
            fut = Future()
            self._inflight[key] = fut
            q = self._queues.get(lane)
            if q is None:
                q = self._queues[lane] = queue.SimpleQueue()
                for i in range(self.workers):
                    threading.Thread(target=self._worker, args=(q,), daemon=True, name=f"solveplan-{lane}-{i}").start()
        q.put((key, fn, fut, store))
        return fut

    def _worker(self, q: queue.SimpleQueue) -> None:
        while True:
            key, fn, fut, store = q.get()
            try:
                value = fn()
            except BaseException as exc:  # handed to every waiter
                with self._lock:
                    self._inflight.pop(key, None)
                fut.set_exception(exc)
                continue
            with self._lock:
                self._inflight.pop(key, None)
                self.computed += 1
                if store(value):
                    self._put(key, value)
            fut.set_result(value)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._data), "maxsize": self.maxsize, "inflight": len(self._inflight),
                    "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "computed": self.computed}


DEFAULT_CACHE = ResultCache()


class _Clock:
    """A deadline measured from the call. `left()` is the remaining budget in seconds."""

    def __init__(self, time_limit_s: Optional[float], default: float):
        limit = default if time_limit_s is None else float(time_limit_s)
        if not math.isfinite(limit) or limit < 0:
            raise InputError("time_limit_s", f"must be a non-negative number of seconds (got {time_limit_s!r})")
        self.limit = limit
        self.start = time.monotonic()
        self.deadline = self.start + limit

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def reserve(self) -> float:
        """Time kept back at the end to assemble an answer after a wait times out. The waiting
        thread has to win the GIL back from a worker (5 ms switch interval, longer inside
        numpy calls) and the CPU from other processes: 15 ms + 4% of the limit, at most 0.25 s."""
        return min(0.25, 0.015 + 0.04 * self.limit)


def _wait(fut: Future, clock: _Clock, reserve: bool = True):
    """fut's value, or None when the deadline (less the reserve) comes first."""
    timeout = clock.left() - (clock.reserve() if reserve else 0.0)
    if fut.done():
        return fut.result()
    if timeout <= 0:
        return None
    try:
        return fut.result(timeout=timeout)
    except FutureTimeout:
        return None


# ===================================================================== jobs
def _check_numbers(obj, path: str) -> None:
    """Every float of a spec (recursively) finite and at most MAX_SPEC_NUMBER in size."""
    for name, value in obj:
        here = f"{path}.{name}"
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= MAX_SPEC_NUMBER):
            raise InputError(here, f"{value!r} is out of range (finite, at most {MAX_SPEC_NUMBER:g})")
        if isinstance(value, BaseModel):
            _check_numbers(value, here)
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    _check_numbers(item, f"{here}[{i}]")


def _check_limits(job: JobSpec, prefix: str = "job.") -> JobSpec:
    """Reject jobs beyond the guard rails (see MAX_*), naming the field."""
    m, c = job.model, job.cluster
    _check_numbers(c, f"{prefix}cluster")
    _check_numbers(m, f"{prefix}model")
    checks = [
        (f"{prefix}cluster", c.num_gpus, MAX_GPUS, f"{c.num_gpus} GPUs"),
        (f"{prefix}global_batch_size", job.global_batch_size, MAX_GLOBAL_BATCH_SIZE, str(job.global_batch_size)),
        (f"{prefix}seq_length", job.seq_length, MAX_SEQ_LENGTH, str(job.seq_length)),
        (f"{prefix}model.num_layers", m.num_layers, MAX_LAYERS, str(m.num_layers)),
        (f"{prefix}model.hidden_size", m.hidden_size, MAX_WIDTH, str(m.hidden_size)),
        (f"{prefix}model.ffn_hidden_size", m.ffn_hidden_size, MAX_WIDTH, str(m.ffn_hidden_size)),
        (f"{prefix}model.vocab_size", m.vocab_size, MAX_VOCAB, str(m.vocab_size)),
    ]
    for field, value, cap, shown in checks:
        if value > cap:
            raise InputError(field, f"{shown} is beyond what the planner accepts (at most {cap})")
    return job


JobLike = Union[JobSpec, Mapping[str, Any]]

_FLAG_FIELDS = {"--model": "model", "--cluster": "cluster", "--global-batch-size": "global_batch_size",
                "--seq-len": "seq_length", "--precision": "precision"}
_PATH_HEAD = re.compile(r"^([A-Za-z_][\w.\[\]-]*): ")


def _refield(exc: InputError, prefix: str) -> InputError:
    """An InputError whose field is a path under `prefix` (catalog lookups name CLI flags such as
    --model; spec validation puts the path at the head of the message)."""
    field, message = exc.field, exc.message
    if field in _FLAG_FIELDS:
        field = prefix + _FLAG_FIELDS[field]
    elif field.startswith("--"):
        field = prefix + field[2:].replace("-", "_")
    elif not field:
        m = _PATH_HEAD.match(message)
        if m:
            field = m.group(1)
            if not field.startswith(prefix.rstrip(".")):
                field = prefix + field
    elif not field.startswith(prefix.rstrip(".").split("[")[0]):
        field = prefix + field
    return InputError(field, message)


def as_job(job: JobLike, prefix: str = "job.") -> JobSpec:
    """A JobSpec from a JobSpec or a job mapping (`cli.jobopts.job_from_mapping` keys: model,
    cluster, global_batch_size, seq_length, precision, flash_attention, constraints, id, name),
    checked against the guard rails. Bad input raises InputError naming the field."""
    if isinstance(job, JobSpec):
        return _check_limits(job, prefix)
    if not isinstance(job, Mapping):
        raise InputError(prefix.rstrip("."), f"give a JobSpec or a mapping of job fields, not {type(job).__name__}")
    from .cli.jobopts import job_from_mapping

    try:
        spec = job_from_mapping(dict(job), field_prefix=prefix)
    except InputError as exc:
        raise _refield(exc, prefix) from None
    return _check_limits(spec, prefix)


def as_cluster_ref(ref: Union[str, ClusterSpec, Mapping[str, Any]], field: str = "cluster") -> Union[str, ClusterSpec]:
    """A family or cluster name as is, a cluster mapping as a ClusterSpec (InputError naming the field)."""
    if isinstance(ref, (str, ClusterSpec)):
        return ref
    if isinstance(ref, Mapping):
        from .catalog import _cluster_from_mapping

        data = dict(ref)
        data.setdefault("name", "custom")
        try:
            return _cluster_from_mapping(data, field)
        except InputError as exc:
            raise _refield(exc, field + ".") from None
    raise InputError(field, "give a cluster family (e.g. h100), a cluster name, <gpu>x<N> or a cluster mapping")


# ===================================================================== screen
@dataclass(frozen=True)
class Screen:
    """What `candidates.prepare` proved about one job, in the terms `check` needs."""

    num_legal: int
    num_shapes: int  # after dominance
    num_memory_ok: int  # shapes whose memory lower bound fits
    witness: Optional[dict]  # shape row of the incumbent (candidates.prepare's best fitting plan)
    witness_layers: Optional[list[int]]  # its layer split
    witness_step_s: float  # inf without a witness
    bound_step_s: float  # least time lower bound over the shapes that may fit (valid for every split)
    min_memory_lb_bytes: float
    min_memory_lb_shape: Optional[dict]
    capacity_bytes: float


def _prepare(job: JobSpec):
    from .candidates import prepare

    return prepare(job)


def _screen(cands) -> Screen:
    """Candidates -> Screen. The bound: pruned shapes have time lower bounds above the
    incumbent, so the least bound over the survivors (and the incumbent) bounds the optimum."""
    job = cands.job
    n_shapes = cands.num_legal - cands.num_dominated
    ok = cands.num_survivors + cands.num_pruned_time
    witness = cands.shapes.row(cands.incumbent_index) if cands.incumbent_index is not None else None
    bound = float(cands.time_lb_s.min()) if cands.num_survivors else math.inf
    return Screen(cands.num_legal, n_shapes, ok, witness, cands.incumbent_layers, float(cands.incumbent_step_s),
                  min(bound, float(cands.incumbent_step_s)), float(cands.min_memory_lb_bytes),
                  cands.min_memory_lb_shape, float(job.cluster.gpu.usable_memory_bytes))


def _cands(job: JobSpec, clock: "_Clock", cache: "ResultCache"):
    """The job's candidates (cached, computed once), or None at the deadline."""
    return _wait(cache.run(("cands", job), lambda: _prepare(job)), clock)


# ===================================================================== results
class CheckResult(Out):
    """Does the job fit, and why (not)."""

    feasible: Optional[bool] = Field(description="true: some plan fits; false: none does; null: not decided in time")
    status: Literal["FEASIBLE", "INFEASIBLE", "UNKNOWN"]
    reason: str
    shortfall: Optional[Shortfall] = None
    best_known_step_time_s: Optional[float] = Field(None, description="step time of the best plan known to fit")
    witness: Optional[ParallelConfig] = Field(None, description="a configuration that fits")
    witness_layers_per_stage: Optional[list[int]] = Field(None, description="its layer split (balanced unless a solve was needed)")


class Target(BaseModel):
    """A throughput target: exactly one of `tokens_per_s`, or `deadline_s` with `token_budget`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_per_s: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    deadline_s: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="wall-clock seconds to train `token_budget` tokens")
    token_budget: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="tokens to train by the deadline")

    @model_validator(mode="after")
    def _exactly_one(self):
        has_rate = self.tokens_per_s is not None
        has_deadline = self.deadline_s is not None or self.token_budget is not None
        if has_rate and has_deadline:
            raise ValueError("give either tokens_per_s, or deadline_s with token_budget, not both")
        if not has_rate and not has_deadline:
            raise ValueError("give tokens_per_s, or deadline_s with token_budget")
        if has_deadline and (self.deadline_s is None or self.token_budget is None):
            missing = "deadline_s" if self.deadline_s is None else "token_budget"
            raise ValueError(f"{missing} is missing: a deadline needs both deadline_s and token_budget")
        if not math.isfinite(self.required_tokens_per_s):
            raise ValueError("token_budget / deadline_s is not a finite rate")
        return self

    @property
    def required_tokens_per_s(self) -> float:
        return float(self.tokens_per_s) if self.tokens_per_s is not None else float(self.token_budget) / float(self.deadline_s)


class Probe(Out):
    """One allocation fewest_gpus looked at."""

    num_gpus: int
    meets: Optional[bool] = Field(description="null: not decided within the time limit")
    tokens_per_s: Optional[float] = Field(None, description="throughput of the best plan known at this size")
    max_tokens_per_s: Optional[float] = Field(None, description="proven upper bound on throughput at this size")
    how: str


class FewestGpusResult(Out):
    status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"] = Field(
        description="OPTIMAL: the smallest allocation on the searched grid; FEASIBLE: meets the target, "
                    "smaller ones not all ruled out in time; INFEASIBLE: no allocation up to the maximum meets it")
    num_gpus: Optional[int] = None
    cluster: Optional[str] = None
    required_tokens_per_s: float
    result: Optional[SolveResult] = Field(None, description="the plan at num_gpus")
    probes: list[Probe] = []
    reason: str
    notes: list[str] = []


class PlanSummary(Out):
    status: str
    gap: Optional[float] = None
    num_gpus: int
    cluster: str
    parallel: ParallelConfig
    layers_per_stage: list[int]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: float
    capacity_bytes: float


DecisionStatus = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "NO_CAPACITY", "INVALID"]


class Decision(Out):
    id: Optional[Union[int, str]] = None
    admitted: bool
    status: DecisionStatus
    num_gpus: Optional[int] = None
    cluster: Optional[str] = None
    plan: Optional[PlanSummary] = None
    reason: str
    field: Optional[str] = Field(None, description="the offending field when status is INVALID")


class AdmitResult(Out):
    cluster: str
    gpus_free_before: int
    gpus_free_after: int
    decisions: list[Decision]


def summarize(result: SolveResult) -> Optional[PlanSummary]:
    p = result.plan
    if p is None:
        return None
    return PlanSummary(status=result.status, gap=result.gap, num_gpus=p.num_gpus, cluster=p.cluster,
                       parallel=p.parallel, layers_per_stage=p.layers_per_stage, step_time_s=p.step_time_s,
                       tokens_per_s=p.tokens_per_s, mfu=p.mfu, peak_memory_bytes=p.peak_memory_bytes,
                       capacity_bytes=p.capacity_bytes)


# ===================================================================== shortfalls
def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def _memory_shortfall(job: JobSpec, needed: float, capacity: float, shape: Optional[dict]) -> Shortfall:
    gpu, cluster = job.cluster.gpu, job.cluster
    # Model state alone, fully sharded (ZeRO-3 without pipelining): 18 bytes per parameter over N GPUs.
    state = 18.0 * job.model.num_params
    min_gpus = math.ceil(state / max(capacity, 1.0))
    per_node = cluster.gpus_per_node
    min_gpus_nodes = max(per_node, math.ceil(min_gpus / per_node) * per_node)
    suggestions = []
    if min_gpus_nodes > cluster.num_gpus:
        suggestions.append(f"more GPUs: model state alone ({_gib(state)}, 18 B/parameter) needs at least "
                           f"{min_gpus_nodes} {gpu.name} GPUs; find the smallest that works with fewest_gpus")
    else:
        suggestions.append(f"more GPUs than {cluster.num_gpus} (use fewest_gpus to find how many)")
    suggestions.append(f"a GPU with at least {_gib(needed + gpu.runtime_reserve_gib * GIB)} of memory")
    if job.seq_length > 2048:
        suggestions.append(f"a shorter sequence than {job.seq_length} (activations grow with it)")
    cons = job.constraints.model_dump(exclude_defaults=True)
    if cons:
        suggestions.append(f"relax the constraints ({', '.join(sorted(cons))}): they exclude shapes that might fit")
    where = ""
    if shape:
        where = (f" (tp={shape['tp']} pp={shape['pp']} dp={shape['dp']} cp={shape['cp']} "
                 f"mbs={shape['micro_batch_size']} recompute={shape['recompute']} zero={shape['zero']})")
    return Shortfall(
        resource="memory", needed_bytes=needed, available_bytes=capacity, short_bytes=needed - capacity,
        best_shape=shape, suggestions=suggestions,
        message=(f"no legal shape fits in {gpu.name} memory: the least any shape needs is {_gib(needed)} per GPU"
                 f"{where}, a lower bound valid for every layer split; {_gib(capacity)} is usable; short by "
                 f"{_gib(needed - capacity)}"),
    )


# ===================================================================== check
def _check_from_screen(job: JobSpec, sc: Screen) -> Optional[CheckResult]:
    """A verdict from the screen, or None when it cannot decide (needs a solve)."""
    from .plan import parallel_from_row

    if sc.num_shapes == 0:
        sf = shape_shortfall(job)
        return CheckResult(feasible=False, status="INFEASIBLE", reason=sf.message, shortfall=sf)
    if sc.num_memory_ok == 0 and sc.min_memory_lb_bytes > sc.capacity_bytes:
        sf = _memory_shortfall(job, sc.min_memory_lb_bytes, sc.capacity_bytes, sc.min_memory_lb_shape)
        return CheckResult(feasible=False, status="INFEASIBLE", reason=sf.message, shortfall=sf)
    if sc.witness is not None:
        par = parallel_from_row(job, sc.witness)
        return CheckResult(
            feasible=True, status="FEASIBLE", best_known_step_time_s=sc.witness_step_s, witness=par,
            witness_layers_per_stage=sc.witness_layers,
            reason=(f"fits: tp={par.tp} pp={par.pp} dp={par.dp} cp={par.cp} mbs={par.micro_batch_size} "
                    f"recompute={par.recompute} zero={par.zero}, layers {sc.witness_layers} "
                    f"({sc.witness_step_s:.3f} s per step)"))
    return None


def _check_from_result(job: JobSpec, res: SolveResult) -> Optional[CheckResult]:
    if res.plan is not None and res.plan.fits:
        p = res.plan.parallel
        return CheckResult(
            feasible=True, status="FEASIBLE", best_known_step_time_s=res.plan.step_time_s, witness=p,
            witness_layers_per_stage=res.plan.layers_per_stage,
            reason=(f"fits: tp={p.tp} pp={p.pp} dp={p.dp} cp={p.cp} mbs={p.micro_batch_size} recompute={p.recompute} "
                    f"zero={p.zero}, layers {res.plan.layers_per_stage} ({res.plan.step_time_s:.3f} s per step, "
                    f"solver status {res.status})"))
    if res.status == "INFEASIBLE":
        sf = res.shortfall
        return CheckResult(feasible=False, status="INFEASIBLE", shortfall=sf,
                           reason=sf.message if sf else "the solver proved that no plan fits")
    return None


def check(job: JobLike, time_limit_s: Optional[float] = None, *, cache: Optional[ResultCache] = None) -> CheckResult:
    """Does some plan of `job` fit? Fast path: the (cached) candidates (see the module
    docstring); a short CP-SAT solve when they cannot decide. Returns status UNKNOWN
    (feasible=None) when the time limit comes first. The answer depends on the job alone, not
    on what was asked before: `best_known_step_time_s` is the incumbent's (the best balanced
    split), even when `plan` has found the optimum since."""
    clock = _Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["check"])
    cache = DEFAULT_CACHE if cache is None else cache
    job = as_job(job)
    return _check(job, clock, cache)


def _unknown_check(reason: str) -> CheckResult:
    return CheckResult(feasible=None, status="UNKNOWN", reason=reason)


def _check(job: JobSpec, clock: _Clock, cache: ResultCache) -> CheckResult:
    try:
        cands = _cands(job, clock, cache)
    except Busy as exc:
        return _unknown_check(f"busy ({exc}); retry")
    if cands is None:
        return _unknown_check(f"time limit {clock.limit:g} s reached while enumerating shapes; the work "
                              f"continues in the background and a retry will be fast")
    sc = _screen(cands)
    verdict = _check_from_screen(job, sc)
    if verdict is not None:
        return verdict
    # Memory lower bounds admit some shape but no balanced split fits: a short solve decides.
    budget = min(CHECK_SOLVE_S, clock.left() - clock.reserve())
    if budget <= 0:
        return _unknown_check(f"time limit {clock.limit:g} s reached: {sc.num_memory_ok} shapes may fit with an "
                              f"uneven layer split but none fits with a balanced one; a solve is needed")
    res = _plan(job, _Clock(budget, budget), cache)
    verdict = _check_from_result(job, res)
    if verdict is not None:
        return verdict
    return _unknown_check(f"no balanced layer split fits and the solver did not decide within {budget:.2g} s "
                          f"(status {res.status}); retry with a longer time limit")


# ===================================================================== plan
def _solve(job: JobSpec, time_limit_s: float, cands) -> SolveResult:
    """optimize() on the cached candidates. When the memory bounds already exclude every shape
    the answer is INFEASIBLE without a search, and the shortfall (with its fewest-GPUs
    suggestion) gets the budget instead of optimize's fixed 20 s."""
    from .optimize import OptimizeResult, optimize, shortfall_for

    if cands.num_survivors == 0:
        t0 = time.monotonic()
        sf = shortfall_for(job, cands, budget_s=max(0.0, time_limit_s * 0.8))
        stats = SearchStats(method="cpsat", wall_time_s=time.monotonic() - t0, shapes_legal=cands.num_legal,
                            shapes_dominated=cands.num_dominated, shapes_pruned_memory=cands.num_pruned_memory,
                            shapes_pruned_time=cands.num_pruned_time, shapes_searched=0)
        return OptimizeResult(status="INFEASIBLE", shortfall=sf, search=stats,
                              notes=["no legal shape survives the memory lower bound: nothing to search"])
    return optimize(job, method="cpsat", time_limit_s=max(0.01, time_limit_s), workers=1, top_k=1, seed=0,
                    cands=cands)


def _final(res: SolveResult) -> bool:
    return res.status in ("OPTIMAL", "INFEASIBLE")


def plan(job: JobLike, time_limit_s: Optional[float] = None, *, cache: Optional[ResultCache] = None) -> SolveResult:
    """The fastest plan that fits (`optimize`, CP-SAT, with its textbook comparison), within
    `time_limit_s`. When time runs out: status FEASIBLE with the best plan known (the
    balanced-split incumbent) and its gap to a proven lower bound, or UNKNOWN with no plan."""
    clock = _Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["plan"])
    cache = DEFAULT_CACHE if cache is None else cache
    return _plan(as_job(job), clock, cache)


# Share of the time limit given to the solver; the rest covers candidates already in flight,
# the textbook comparison and assembling the answer.
SOLVER_SHARE = 0.85


def _plan(job: JobSpec, clock: _Clock, cache: ResultCache) -> SolveResult:
    key = ("plan", job)
    cached = cache.get(key)
    solver_deadline = clock.start + clock.limit * SOLVER_SHARE - clock.reserve()
    budget = solver_deadline - time.monotonic()
    # A final answer is reused whatever the limit; a time-limited one for budgets up to its own.
    if cached is not None and (_final(cached[0]) or budget <= cached[1] * 1.05 + 0.01):
        return cached[0]
    if budget <= 0.02:
        return _fallback(job, clock, cache, f"time limit {clock.limit:g} s too short to start the solver")

    def compute():
        cands = cache.run(("cands", job), lambda: _prepare(job)).result()  # the prepare lane never waits on this one
        left = solver_deadline - time.monotonic()
        if left <= 0.02:
            return None
        res = _solve(job, left, cands)
        _store_plan(cache, key, res, budget)
        return res

    try:  # single flight per (job, budget to 0.1 s)
        fut = cache.run(("solve", job, round(budget, 1)), compute, store=lambda v: False, lane="solve")
    except Busy as exc:
        return _fallback(job, clock, cache, f"busy ({exc})")
    res = _wait(fut, clock)
    if res is not None:
        return res
    return _fallback(job, clock, cache, f"time limit {clock.limit:g} s reached before the solver returned")


def _store_plan(cache: ResultCache, key, res: SolveResult, budget: float) -> None:
    """Keep a final answer; a time-limited one only over an earlier time-limited one with less budget."""
    cache.put_if(key, (res, budget), keep=lambda prev: not _final(res) and (_final(prev[0]) or prev[1] > budget))


def _fallback(job: JobSpec, clock: _Clock, cache: ResultCache, why: str) -> SolveResult:
    """Best plan known without the solver: the balanced-split incumbent of the cached
    candidates or screen, with a bound valid for every split; UNKNOWN when neither exists."""
    from .formulation.evaluate import balanced_split
    from .optimize import OptimizeResult as Result
    from .plan import make_plan, parallel_from_row

    prev = cache.get(("plan", job))
    if prev is not None and prev[0].plan is not None:
        res = prev[0]
        return res.model_copy(update={"notes": [*res.notes, f"{why}; this is an earlier answer computed with a "
                                                              f"{prev[1]:.3g} s limit"]})
    cands = cache.get(("cands", job))
    sc = _screen(cands) if cands is not None else None
    row, bound = None, None
    counts = dict(shapes_legal=0, shapes_dominated=0, shapes_pruned_memory=0, shapes_pruned_time=0, shapes_searched=0)
    if cands is not None:
        counts = dict(shapes_legal=cands.num_legal, shapes_dominated=cands.num_dominated,
                      shapes_pruned_memory=cands.num_pruned_memory, shapes_pruned_time=cands.num_pruned_time,
                      shapes_searched=0)
        if sc.witness is not None:
            row, bound = sc.witness, sc.bound_step_s
    stats = SearchStats(method="cpsat", wall_time_s=clock.elapsed(), finished=False, **counts)
    if sc is not None and sc.num_shapes > 0 and sc.num_memory_ok == 0:
        check_ = _check_from_screen(job, sc)
        return Result(status="INFEASIBLE", shortfall=check_.shortfall, search=stats,
                           notes=[f"{why}; the memory lower bounds exclude every shape"])
    if sc is not None and sc.num_shapes == 0:
        return Result(status="INFEASIBLE", shortfall=shape_shortfall(job), search=stats, notes=[why])
    if row is None:
        return Result(status="UNKNOWN", search=stats,
                           notes=[f"{why}; no plan known yet (the work continues in the background: retry)"])
    plan_ = make_plan(job, parallel_from_row(job, row), balanced_split(job.model.num_layers, row["pp"]))
    gap = (plan_.step_time_s - bound) / plan_.step_time_s if plan_.step_time_s > 0 else None
    return Result(status="FEASIBLE", plan=plan_, bound_step_time_s=bound, gap=gap, search=stats,
                       notes=[f"{why}; the plan is the balanced-split incumbent, the bound the least time lower "
                              f"bound over the shapes that may fit"])


# ===================================================================== fewest GPUs
_FAMILY_RE = re.compile(r"^(?P<family>[a-z0-9][a-z0-9.\-]*?)x(?P<n>\d+)$")


@dataclass(frozen=True)
class _Sizer:
    """Clusters of one kind at any node count: a catalog family, or a given cluster's nodes."""

    family: Optional[str]
    base: Optional[ClusterSpec]
    gpus_per_node: int
    max_nodes: int

    def cluster(self, nodes: int) -> ClusterSpec:
        from .catalog import family_cluster

        if self.family is not None:
            return family_cluster(self.family, nodes * self.gpus_per_node)
        base = self.base
        if nodes == base.num_nodes:
            return base
        links = tuple(x for x in base.link_overrides if x.src < nodes and x.dst < nodes)
        return base.model_copy(update={"num_nodes": nodes, "name": f"{base.name}[{nodes} nodes]", "link_overrides": links})

    @property
    def label(self) -> str:
        return self.family or self.base.name


def _sizer(ref: Union[str, ClusterSpec, Mapping[str, Any]], field: str = "cluster",
           max_gpus: Optional[int] = None) -> _Sizer:
    from .catalog import catalog_families, load_cluster

    ref = as_cluster_ref(ref, field)
    if isinstance(ref, ClusterSpec):
        cl = ref
    elif isinstance(ref, str):
        key = ref.strip().lower()
        fams = catalog_families()
        if key in fams:
            per_node = int(fams[key].get("gpus_per_node", 8))
            cap = max_gpus or FEWEST_MAX_GPUS
            return _Sizer(key, None, per_node, max(1, cap // per_node))
        try:
            cl = load_cluster(ref)
        except InputError as exc:
            raise InputError(field, exc.message) from None
    if cl.num_gpus > MAX_GPUS:
        raise InputError(field, f"{cl.num_gpus} GPUs is beyond what the planner accepts (at most {MAX_GPUS})")
    m = _FAMILY_RE.match(cl.name.lower())
    if m and m.group("family") in catalog_families():
        return _Sizer(m.group("family"), None, cl.gpus_per_node, cl.num_nodes)
    return _Sizer(None, cl, cl.gpus_per_node, cl.num_nodes)


def _with_cluster(job: JobLike, cluster: ClusterSpec, prefix: str = "job.") -> JobSpec:
    """`job` (a JobSpec, or a mapping whose cluster may be missing) on `cluster`."""
    if isinstance(job, JobSpec):
        return _check_limits(job.model_copy(update={"cluster": cluster}), prefix)
    if not isinstance(job, Mapping):
        raise InputError(prefix.rstrip("."), f"give a JobSpec or a mapping of job fields, not {type(job).__name__}")
    return as_job({**job, "cluster": cluster.model_dump()}, prefix)


def _min_nodes_by_peak(job: JobSpec, need: float, gpus_per_node: int) -> int:
    """Nodes below which no plan can reach `need` tokens/s even at the GPUs' peak: every plan
    does at least the GEMM FLOPs of a step (3 x (layers x GEMMs + LM head) per token; the
    attention core is left out so causal savings cannot break the bound) at no more than the
    peak rate (the formulation's efficiencies are <= 1)."""
    from .formulation.flops import layer_gemm_fwd_flop, lm_head_fwd_flop

    m, gpu = job.model, job.cluster.gpu
    per_token = 3.0 * (m.num_layers * float(layer_gemm_fwd_flop(m, 1)) + float(lm_head_fwd_flop(m, 1)))
    peak = max(gpu.peak_flop_per_s, (gpu.peak_fp8_tflops or 0.0) * 1e12)
    return max(1, math.ceil(need * per_token / (peak * gpus_per_node) * (1 - 1e-9)))


def fewest_gpus(job: JobLike, family_or_cluster: Union[str, ClusterSpec], target: Union[Target, Mapping[str, Any]],
                time_limit_s: Optional[float] = None, *, cache: Optional[ResultCache] = None,
                exhaustive: bool = True) -> FewestGpusResult:
    """The smallest allocation (a multiple of the GPUs per node, up to the cluster's size or
    FEWEST_MAX_GPUS for a bare family) whose best plan meets `target`, with that plan.

    Throughput is not monotone in the GPU count: the global batch must divide by dp and the
    heads by tp, so e.g. 127 nodes may fit no plan at all where 126 and 128 do, and
    communication grows with the count. The search therefore does not trust bisection alone:
    1. sizes below `_min_nodes_by_peak` cannot meet the target even at peak FLOP/s: skipped;
    2. doubling from there until a size meets the target, then bisection between the last
       miss and the first hit: a verified allocation quickly;
    3. with `exhaustive` (default), every size not yet probed between the peak bound and that
       allocation, in ascending order: the first that meets is the smallest. When the time
       limit stops this scan, the answer is the smallest found so far, status FEASIBLE, and
       the notes say which sizes were not probed.
    Status OPTIMAL: every smaller size on the grid is ruled out (by the peak bound or a probe).

    A probe is decided as cheaply as it can be: the balanced-split incumbent meeting the
    target proves a hit; the least time lower bound over the shapes that may fit missing it
    proves a miss; otherwise a CP-SAT solve decides (an undecided probe counts as a miss and
    the status is then FEASIBLE).
    """
    clock = _Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["fewest_gpus"])
    cache = DEFAULT_CACHE if cache is None else cache
    if not isinstance(target, Target):
        if not isinstance(target, Mapping):
            raise InputError("target", "give tokens_per_s, or deadline_s with token_budget")
        from pydantic import ValidationError

        try:
            target = Target(**target)
        except ValidationError as exc:
            from .errors import pydantic_error_line

            raise InputError("target", pydantic_error_line(exc, prefix="target.")) from None
        except TypeError as exc:
            raise InputError("target", str(exc)) from None
    sizer = _sizer(family_or_cluster)
    need = target.required_tokens_per_s
    base = _with_cluster(job, sizer.cluster(sizer.max_nodes))
    per_node = sizer.gpus_per_node

    def on(nodes: int) -> JobSpec:
        return _check_limits(base.model_copy(update={"cluster": sizer.cluster(nodes)}))

    probes: dict[int, Probe] = {}
    results: dict[int, SolveResult] = {}

    def probe(nodes: int) -> Optional[bool]:
        if nodes not in probes:
            p, res = _probe(on(nodes), need, clock, cache)
            probes[nodes] = p
            if res is not None:
                results[nodes] = res
        return probes[nodes].meets

    def has_time() -> bool:
        return clock.left() > clock.reserve()

    floor = _min_nodes_by_peak(base, need, per_node)
    notes = [f"below {floor * per_node} GPUs no plan can reach {need:.4g} tokens/s even at peak FLOP/s"]
    if floor > sizer.max_nodes:
        return FewestGpusResult(status="INFEASIBLE", required_tokens_per_s=need, reason=(
            f"even at peak FLOP/s, {sizer.max_nodes * per_node} {sizer.label} GPUs cannot reach {need:.4g} tokens/s "
            f"(at least {floor * per_node} would be needed)"), notes=notes)
    lo, hi = floor - 1, None  # nodes: lo misses (or is below the peak bound), hi meets
    k = floor
    while has_time():
        if probe(k):
            hi = k
            break
        lo = k
        if k == sizer.max_nodes:
            break
        k = min(2 * k, sizer.max_nodes)
    while hi is not None and hi - lo > 1 and has_time():
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    unprobed = []
    if hi is not None and exhaustive:
        for n in range(floor, hi):
            if n in probes:
                continue
            if not has_time():
                unprobed = [m for m in range(n, hi) if m not in probes]
                break
            if probe(n):
                hi = n
                break
    elif hi is not None:
        unprobed = [m for m in range(floor, hi) if m not in probes]
    undecided = any(probes[n].meets is None for n in probes if hi is None or n < hi)
    ordered = [probes[n] for n in sorted(probes)]
    if hi is None:
        done = sizer.max_nodes in probes
        status = "INFEASIBLE" if done and not undecided else "UNKNOWN"
        reason = (f"no allocation of {sizer.label} up to {sizer.max_nodes * per_node} GPUs reaches {need:.4g} tokens/s "
                  f"(at {sizer.max_nodes * per_node} GPUs: {_fmt_rate(probes[sizer.max_nodes].tokens_per_s)})"
                  if status == "INFEASIBLE" else
                  f"time limit {clock.limit:g} s reached before an allocation meeting {need:.4g} tokens/s was found "
                  f"(largest probed: {max(probes, default=0) * per_node} GPUs)" if not done else
                  f"no allocation up to {sizer.max_nodes * per_node} GPUs was shown to reach {need:.4g} tokens/s, "
                  f"but some probes were not decided in time")
        return FewestGpusResult(status=status, required_tokens_per_s=need, probes=ordered, reason=reason, notes=notes)
    j = on(hi)
    res = results.get(hi)
    if res is None or (res.status != "OPTIMAL" and has_time()):
        better = _plan(j, clock, cache)
        if better.plan is not None and (res is None or res.plan is None or better.plan.step_time_s <= res.plan.step_time_s):
            res = better
    proven = not unprobed and not undecided
    status = "OPTIMAL" if proven else "FEASIBLE"
    if unprobed:
        notes.append(f"not probed in time: {_ranges([n * per_node for n in unprobed])} GPUs")
    if undecided:
        notes.append("some smaller sizes were not decided within the time limit (counted as misses)")
    rate = res.plan.tokens_per_s if res is not None and res.plan is not None else probes[hi].tokens_per_s
    reason = (f"{hi * per_node} GPUs ({j.cluster.name}) reach {_fmt_rate(rate)} >= {need:.4g} tokens/s; "
              + ("every smaller allocation misses it" if proven else "smaller allocations are not all ruled out"))
    return FewestGpusResult(status=status, num_gpus=hi * per_node, cluster=j.cluster.name, required_tokens_per_s=need,
                            result=res, probes=ordered, reason=reason, notes=notes)


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


def _fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.4g} tokens/s"


def _probe(job: JobSpec, need: float, clock: _Clock, cache: ResultCache) -> tuple[Probe, Optional[SolveResult]]:
    n = job.cluster.num_gpus
    tokens = job.tokens_per_step
    try:
        cands = _cands(job, clock, cache)
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
                     how="balanced-split incumbent meets the target"), None
    if ub < need:
        return Probe(num_gpus=n, meets=False, tokens_per_s=inc, max_tokens_per_s=ub,
                     how="time lower bound: no plan reaches the target"), None
    budget = clock.left() - clock.reserve()
    if budget <= 0.05:
        return Probe(num_gpus=n, meets=None, tokens_per_s=inc, max_tokens_per_s=ub, how="time limit reached"), None
    res = _plan(job, _Clock(budget, budget), cache)
    rate = res.plan.tokens_per_s if res.plan is not None else inc
    if res.bound_step_time_s:
        ub = min(ub, tokens / res.bound_step_time_s)
    if rate is not None and rate >= need:
        return Probe(num_gpus=n, meets=True, tokens_per_s=rate, max_tokens_per_s=ub, how=f"solver ({res.status})"), res
    if res.status in ("OPTIMAL", "INFEASIBLE") or ub < need:
        return Probe(num_gpus=n, meets=False, tokens_per_s=rate, max_tokens_per_s=ub, how=f"solver ({res.status})"), res
    return Probe(num_gpus=n, meets=None, tokens_per_s=rate, max_tokens_per_s=ub,
                 how=f"solver stopped at the time limit ({res.status}, bound above the target)"), res


# ===================================================================== admission
class AdmitJob(BaseModel):
    """One job of an admission batch: the job fields, and the allocation it asks for --
    `num_gpus`, or a `cluster` of the free cluster's GPU type, or a throughput `target`
    (then the fewest GPUs that meet it)."""

    model_config = ConfigDict(extra="forbid")

    id: Optional[Union[int, str]] = None
    name: Optional[str] = None
    model: Union[str, dict]
    cluster: Optional[Union[str, dict]] = None
    num_gpus: Optional[PositiveInt] = None
    target: Optional[Target] = None
    global_batch_size: Optional[PositiveInt] = None
    seq_length: Optional[PositiveInt] = None
    precision: Optional[Literal["bf16", "fp8"]] = None
    flash_attention: Optional[bool] = None
    constraints: Optional[dict] = None

    def job_fields(self) -> dict:
        return self.model_dump(exclude_none=True, exclude={"num_gpus", "target", "id", "name"})


def _decide_size(aj: AdmitJob, sizer: _Sizer, free_nodes: int, prefix: str) -> Optional[int]:
    """Nodes asked for (None for a target: decided by fewest_gpus)."""
    given = [k for k in ("num_gpus", "cluster", "target") if getattr(aj, k) is not None]
    if len(given) != 1:
        raise InputError(prefix.rstrip(".") if not given else f"{prefix}{given[1]}",
                         "give exactly one of num_gpus, cluster or target (the allocation the job asks for)")
    per_node = sizer.gpus_per_node
    if aj.num_gpus is not None:
        if aj.num_gpus % per_node:
            raise InputError(f"{prefix}num_gpus", f"{aj.num_gpus} is not a multiple of {per_node} GPUs per node")
        return aj.num_gpus // per_node
    if aj.cluster is not None:
        spec = _with_cluster_ref(aj, prefix)
        base_gpu = sizer.base.gpu if sizer.base is not None else sizer.cluster(1).gpu
        if spec.cluster.gpu.name != base_gpu.name:
            raise InputError(f"{prefix}cluster", f"asks for {spec.cluster.gpu.name} GPUs; the free cluster has {base_gpu.name}")
        if spec.cluster.gpus_per_node != per_node:
            raise InputError(f"{prefix}cluster", f"{spec.cluster.gpus_per_node} GPUs per node; the free cluster has {per_node}")
        return spec.cluster.num_nodes
    return None


def _with_cluster_ref(aj: AdmitJob, prefix: str) -> JobSpec:
    return as_job(aj.job_fields(), prefix)


def parse_admit_job(data: Any, prefix: str = "") -> AdmitJob:
    """An AdmitJob from a mapping; InputError naming the first offending field."""
    from pydantic import ValidationError

    if isinstance(data, AdmitJob):
        return data
    if not isinstance(data, Mapping):
        raise InputError(prefix.rstrip("."), f"a job must be a JSON object, not {type(data).__name__}")
    try:
        return AdmitJob(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()))
        if err.get("type") == "extra_forbidden":
            msg = f"unknown key; allowed keys: {', '.join(AdmitJob.model_fields)}"
        else:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(f"{prefix}{loc}" if loc else prefix.rstrip("."), msg) from None
    except TypeError as exc:
        raise InputError(prefix.rstrip("."), str(exc)) from None


def admit(jobs: Sequence[Union[JobSpec, AdmitJob, Mapping[str, Any]]], free_cluster: Union[str, ClusterSpec],
          time_limit_s: Optional[float] = None, *, cache: Optional[ResultCache] = None,
          on_decision: Optional[Callable[[int, "Decision"], None]] = None) -> AdmitResult:
    """One decision per job, in order (first come, first served): a job is admitted when its
    allocation fits in what is still free and a plan fits on it; an admitted job's GPUs are no
    longer free for the jobs after it. The time limit covers the batch: each job gets an equal
    share of what is left (time a job does not use flows to the next ones).

    Jobs are JobSpecs (their cluster is the allocation asked for), AdmitJobs or mappings with
    an allocation (`num_gpus`, `cluster` or `target`). A job that cannot be read is decided
    INVALID with the offending field; the others go on. `on_decision(i, decision)` is called as
    each job is decided (to stream them). An allocation of k nodes is the first k
    nodes' worth of the free cluster's kind (racks and link overrides are kept for those nodes):
    which physical nodes is the scheduler's choice.
    """
    clock = _Clock(time_limit_s, DEFAULT_TIME_LIMIT_S["admit"])
    cache = DEFAULT_CACHE if cache is None else cache
    sizer = _sizer(free_cluster, field="cluster")
    per_node = sizer.gpus_per_node
    free_nodes = sizer.max_nodes
    free_before = free_nodes * per_node
    decisions: list[Decision] = []
    for i, item in enumerate(jobs):
        left = len(jobs) - i
        share = max(0.0, (clock.left() - clock.reserve()) / left)
        decisions.append(_admit_one(item, i, sizer, free_nodes, share, cache))
        d = decisions[-1]
        if on_decision is not None:
            on_decision(i, d)
        if d.admitted and d.num_gpus:
            free_nodes -= d.num_gpus // per_node
    return AdmitResult(cluster=sizer.label if sizer.family is None else f"{sizer.family}x{free_before}",
                       gpus_free_before=free_before, gpus_free_after=free_nodes * per_node, decisions=decisions)


def _admit_one(item, i: int, sizer: _Sizer, free_nodes: int, share: float, cache: ResultCache) -> Decision:
    prefix = f"jobs[{i}]."
    per_node = sizer.gpus_per_node
    ident = item.get("id", item.get("name")) if isinstance(item, Mapping) else None
    if not isinstance(ident, (int, str)) or isinstance(ident, bool):
        ident = None
    try:
        if isinstance(item, JobSpec):
            if item.cluster.gpu.name != (sizer.base.gpu.name if sizer.base is not None else sizer.cluster(1).gpu.name):
                raise InputError(f"{prefix}cluster", f"asks for {item.cluster.gpu.name} GPUs; the free cluster has another type")
            nodes, fields = item.cluster.num_nodes, item
        else:
            aj = parse_admit_job(item, prefix)
            ident = aj.id if aj.id is not None else aj.name
            nodes = _decide_size(aj, sizer, free_nodes, prefix)
            fields = aj.job_fields()
        # the job on its allocation (or, for a target, on what is free): validated before capacity
        job = _with_cluster(fields, sizer.cluster(nodes if nodes is not None else max(1, free_nodes)), prefix)
        if nodes is not None:
            if nodes > free_nodes:
                return Decision(id=ident, admitted=False, status="NO_CAPACITY", num_gpus=nodes * per_node,
                                reason=f"asks for {nodes * per_node} GPUs; {free_nodes * per_node} are free")
            return _decide_job(ident, job, _Clock(share, share), cache)
        if free_nodes == 0:
            return Decision(id=ident, admitted=False, status="NO_CAPACITY", reason="no GPUs are free")
        fg = fewest_gpus(job, sizer.cluster(free_nodes), aj.target, time_limit_s=share, cache=cache)
        if fg.num_gpus is None:
            status = "NO_CAPACITY" if fg.status == "INFEASIBLE" else "UNKNOWN"
            return Decision(id=ident, admitted=False, status=status, reason=fg.reason)
        res = fg.result
        return Decision(id=ident, admitted=True, status=res.status if res is not None else "FEASIBLE",
                        num_gpus=fg.num_gpus, cluster=fg.cluster, plan=summarize(res) if res is not None else None,
                        reason=fg.reason)
    except InputError as exc:
        return Decision(id=ident, admitted=False, status="INVALID", reason=exc.message, field=exc.field or None)


def _decide_job(ident, job: JobSpec, clock: _Clock, cache: ResultCache) -> Decision:
    n, name = job.cluster.num_gpus, job.cluster.name
    verdict = _check(job, clock, cache)
    if verdict.status == "INFEASIBLE":
        return Decision(id=ident, admitted=False, status="INFEASIBLE", num_gpus=n, cluster=name, reason=verdict.reason)
    if verdict.status == "UNKNOWN":
        return Decision(id=ident, admitted=False, status="UNKNOWN", num_gpus=n, cluster=name,
                        reason=f"not decided in time: {verdict.reason}")
    res = _plan(job, clock, cache) if clock.left() > clock.reserve() else None
    if res is not None and res.plan is not None:
        return Decision(id=ident, admitted=True, status=res.status, num_gpus=n, cluster=name, plan=summarize(res),
                        reason=verdict.reason if res.status != "OPTIMAL" else
                        f"fits; optimal plan {res.plan.step_time_s:.3f} s per step")
    # feasible by the witness, no solver plan in time: summarise the witness
    from .formulation.evaluate import balanced_split
    from .plan import make_plan

    w = verdict.witness
    p = make_plan(job, w, verdict.witness_layers_per_stage or balanced_split(job.model.num_layers, w.pp))
    summ = PlanSummary(status="FEASIBLE", gap=None, num_gpus=n, cluster=name, parallel=w, layers_per_stage=p.layers_per_stage,
                       step_time_s=p.step_time_s, tokens_per_s=p.tokens_per_s, mfu=p.mfu,
                       peak_memory_bytes=p.peak_memory_bytes, capacity_bytes=p.capacity_bytes)
    return Decision(id=ident, admitted=True, status="FEASIBLE", num_gpus=n, cluster=name, plan=summ, reason=verdict.reason)


__all__ = [
    "plan", "check", "fewest_gpus", "admit", "as_job", "summarize", "parse_admit_job",
    "CheckResult", "Target", "Probe", "FewestGpusResult", "PlanSummary", "Decision", "AdmitResult", "AdmitJob",
    "ResultCache", "DEFAULT_CACHE", "DEFAULT_TIME_LIMIT_S",
]


# ===================================================================== sweeps
def sweep(grid, output=None, **options) -> list[dict]:
    """Plan every scenario of a grid (a grid file, or a mapping with models, clusters,
    global_batch_sizes, seq_lengths, precisions, constraints and/or scenarios): one row (a dict
    of `solveplan.sweep.COLUMNS`) per scenario, in scenario order. `options`: workers, ray
    ("local" or an address), resume, overwrite, time_limit_s, batch_size, progress -- see
    `solveplan.sweep.sweep`, which this calls."""
    from .sweep import sweep as run_sweep

    return run_sweep(grid, output, **options)


__all__.append("sweep")
