"""Why no plan fits, and how many GPUs would do: each written once, for `optimize`'s
INFEASIBLE verdict and for admission control.

- `shape_shortfall`: no legal shape at all (divisibility, constraints);
- `memory_shortfall`: the shape and split that need the least memory
  (`formulation.splits.least_memory_splits` over the candidates' least-memory shapes), which
  stage is short and by how much, and what would help -- recomputation, a smaller
  micro-batch, Megatron's precision-aware optimizer, fine-grained activation offloading, more GPUs
  (the fewest of the cluster's kind on which a plan fits, when there is time to search for them);
- `fewest_nodes`: the search over node counts that both that suggestion and
  `admission.sizing.fewest_gpus` use: doubling until a size meets the test, then bisection
  between the last miss and the first hit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .catalog import cluster_family, resize_cluster
from .formulation.job import job_coefficients
from .formulation.memory import adam_state_bytes_per_param
from .formulation.pipeline import step_time_batch
from .formulation.splits import least_memory_splits, with_accounted
from .plan import Shortfall, make_plan, parallel_from_row
from .search.candidates import Candidates, prepare
from .space.rules import least_memory_job
from .specs import JobSpec
from .specs.deadline import Deadline, DeadlineExpired
from .specs.frameworks import ALLOWED, users_constraints
from .specs.offloading import fine_offload_problem
from .specs.units import GIB


def _least_memory(job: JobSpec, shapes) -> tuple[np.ndarray, np.ndarray]:
    """`least_memory_splits` of `shapes`, where a shape that counts the embedding / loss as a
    layer has its one split, Megatron's (`formulation.splits.with_accounted`)."""
    co = job_coefficients(job, shapes)
    peak, lay = least_memory_splits(co, job.model.num_pipeline_units)
    if shapes.accounted.any():
        lay = with_accounted(job.model, shapes, lay)
        peak = np.where(shapes.accounted, step_time_batch(co, lay)[1], peak)
    return peak, lay

FEWEST_GPUS_MAX = 65536  # the search for the fewest GPUs that fit stops here
FEWEST_GPUS_BUDGET_S = 20.0
MODEL_STATE_BYTES_PER_PARAM = 18.0  # bf16 weight, fp32 grad, fp32 master and Adam m, v: the floor of any plan's state
# the modules an INFEASIBLE answer tries offloading, by whether the model is MoE, the widest first: the attention's
# (DeepSeek's Megatron-Bridge recipes) and the experts' (DeepSeek-V3's GB200 recipe); per-layer CUDA graphs of
# Megatron's local kind allow the experts' alone (specs/offloading.py)
OFFLOADED: dict[bool, list[tuple[str, ...]]] = {False: [("core_attn", "attn_proj")],
                                                  True: [("core_attn", "attn_proj", "expert_fc1", "moe_act"),
                                                         ("expert_fc1", "moe_act")]}


def fewest_nodes(meets: Callable[[int], bool | None], start: int, max_nodes: int,
                 has_time: Callable[[], bool], miss: int | None = None) -> tuple[int | None, int]:
    """The smallest node count in (miss, max_nodes] that `meets` (None from `meets`: not
    decided, counted as a miss), found by doubling from `start` and then bisection between the
    last miss and the first hit; it assumes sizes above a hit meet too, so callers that cannot
    assume it scan below the answer themselves. Returns (that count or None, the largest miss
    below it). Stops when `has_time()` turns false."""
    lo = start - 1 if miss is None else miss
    hi, n = None, start
    if start > max_nodes:
        return None, lo
    while has_time():
        if meets(n):
            hi = n
            break
        lo = n
        if n >= max_nodes:
            break
        n = min(2 * n, max_nodes)
    while hi is not None and hi - lo > 1 and has_time():
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi, lo


def job_fits(job: JobSpec, deadline: Deadline | None = None) -> bool:
    """Does any plan of `job` fit in memory (exactly: some shape has a fitting split)? Decided
    on the least-memory knobs only (`space.rules.least_memory_job`). Raises DeadlineExpired
    when `deadline` passes first."""
    cands = prepare(least_memory_job(job), prune_time=False, deadline=deadline)
    if cands.incumbent_index is not None:
        return True
    return cands.num_survivors > 0 and bool(cands.feasible.any())


def fewest_gpus_that_fit(job: JobSpec, deadline: float) -> tuple[int | None, str]:
    """The fewest GPUs of the job's cluster kind (more nodes of the same family) on which some
    plan fits, and how to name that kind; None when none is found by the deadline or up to
    FEWEST_GPUS_MAX."""
    cl = job.cluster
    fam = cluster_family(cl)
    label = f"{fam}x<N>" if fam else f"{cl.name} with more nodes"
    seen: dict[int, bool] = {}
    dl = Deadline.after(deadline - time.perf_counter())

    def fits(nodes: int) -> bool | None:
        if dl.expired():
            return None
        if nodes not in seen:
            try:
                seen[nodes] = job_fits(job.model_copy(update={"cluster": resize_cluster(cl, nodes)}), dl)
            except DeadlineExpired:
                return None
        return seen[nodes]

    hit, _ = fewest_nodes(fits, 2 * cl.num_nodes, FEWEST_GPUS_MAX // cl.gpus_per_node,
                          lambda: time.perf_counter() <= deadline, miss=cl.num_nodes)
    return (hit * cl.gpus_per_node if hit is not None else None), label


def _other_framework(job: JobSpec) -> list[str]:
    """A suggestion where the job's framework narrowed the space (specs/frameworks.py)."""
    narrowed = sorted(ALLOWED[job.framework])
    if not narrowed:
        return []
    return [f"framework megatron runs what framework {job.framework} excludes ({', '.join(narrowed)})"]


def _smaller_optimizer_state(job: JobSpec, par, cap: float) -> list[str]:
    """A suggestion where Megatron's precision-aware optimizer with bf16 moments (less Adam state per parameter,
    formulation/memory.adam_state_bytes_per_param) is not yet the job's: whether the
    least-memory shape, with the distributed optimizer it needs, fits so."""
    if job.framework != "megatron" or job.optimizer_moment_dtype == "bf16" or par.zero >= 2:
        return []
    smaller = job.model_copy(update={"precision_aware_optimizer": True, "optimizer_moment_dtype": "bf16"})
    alt = par.model_copy(update={"zero": 1})
    peak, _ = _least_memory(smaller, alt.shapes())
    verdict = "fits" if peak[0] <= cap else f"still needs {peak[0] / GIB:.1f} GiB"
    allowed = "" if job.constraints.allows("zero", 1) else " (your constraints exclude zero 1)"
    now, then = (adam_state_bytes_per_param(job.precision, aware, moments) for aware, moments in (
        (job.precision_aware_optimizer, job.optimizer_moment_dtype), (True, "bf16")))
    return [f"Megatron's precision-aware optimizer with bf16 moments (--precision-aware-optimizer "
            f"--optimizer-moment-dtype bf16, or the job fields of those names: {then:g} bytes of Adam state per "
            f"parameter, not {now:g}): {verdict} with {alt.describe()}{allowed}"]


def _offloaded_activations(job: JobSpec, need: float, cap: float, budget_s: float) -> list[str]:
    """A suggestion where no activation offloading is yet the job's: whether a plan fits with the modules Megatron-
    Bridge's recipes offload (`OFFLOADED`: the attention's Q, K, V and projection input; a MoE model's expert fc1
    input and output too), Megatron's fine-grained offloading (formulation/fine_offload.py), and a plan that does;
    where none does, the memory it still needs, and nothing when it needs no less than the `need` of the plan
    without it (the model state is what is short). A search of its own within `budget_s` (nothing said past it)."""
    if job.framework != "megatron" or job.offload_modules or job.cpu_offloading_num_layers:
        return []
    for mods in OFFLOADED[job.model.is_moe]:
        offjob = job.model_copy(update={"offload_modules": mods})
        if fine_offload_problem(offjob) is None:
            break
    else:
        return []
    try:
        cands = prepare(offjob, deadline=Deadline().within(budget_s))
    except DeadlineExpired:
        return []
    flag = f"--offload-modules {','.join(mods)}"
    if cands.incumbent_index is None:
        peak, _ = _least_memory(offjob, cands.least_memory_shapes)
        least = float(np.min(peak, initial=np.inf))
        if least >= need:
            return []
        verdict = f"still needs {least / GIB:.1f} GiB of the {cap / GIB:.1f}"
    else:
        par = parallel_from_row(offjob, cands.shapes.row(cands.incumbent_index))
        verdict = f"a plan fits, e.g. {par.describe()} at {cands.incumbent_step_s:.2f} s per step"
    return [f"fine-grained activation offloading ({flag}, or the job field offload_modules: those modules' saved "
            f"inputs in host memory, copied over the GPU's host link): {verdict}"]


def shape_shortfall(job: JobSpec) -> Shortfall:
    """No legal shape at all: divisibility (heads, batch, layers) or the constraints."""
    N = job.cluster.num_gpus
    cons = users_constraints(job.framework, job.constraints.model_dump(exclude_defaults=True))
    suggestions = [f"a global batch size divisible by a data-parallel degree that divides {N} GPUs"]
    if cons:
        suggestions.insert(0, f"relax the constraints ({', '.join(sorted(cons))})")
    if job.distributed_optimizer_instances > 1:
        suggestions.insert(0, f"distributed_optimizer_instances ({job.distributed_optimizer_instances}) dividing dp x cp "
                              f"(and a MoE model's expert data parallelism): Megatron's HSDP instances split them evenly")
    suggestions += _other_framework(job)
    return Shortfall(resource="legal shapes", suggestions=suggestions,
                     message=(f"no legal parallel shape for {job.model.name} on {N} GPUs with global batch "
                              f"{job.global_batch_size}, sequence {job.seq_length}: divisibility (heads, batch, "
                              f"layers) and the constraints exclude every (tp, cp, pp, dp, micro-batch) combination"))


def _more_gpus(job: JobSpec, budget_s: float) -> str:
    """What to say about more GPUs: the fewest that fit when there is time to search, else
    the floor that the model state alone sets."""
    if budget_s > 0:
        gpus, label = fewest_gpus_that_fit(job, time.perf_counter() + budget_s)
        if gpus is not None:
            return f"at least {gpus} GPUs ({label}): the fewest of this kind on which a plan fits"
        return f"more GPUs ({label}): none up to {FEWEST_GPUS_MAX} GPUs found within {budget_s:.0f} s"
    cl = job.cluster
    state = MODEL_STATE_BYTES_PER_PARAM * job.model.num_params
    per_node = cl.gpus_per_node
    floor = max(per_node, math.ceil(math.ceil(state / max(cl.gpu.usable_memory_bytes, 1.0)) / per_node) * per_node)
    if floor > cl.num_gpus:
        return (f"more GPUs: model state alone ({state / GIB:.1f} GiB, 18 B/parameter) needs at least {floor} "
                f"{cl.gpu.name} GPUs; the fewest-GPUs search finds how many a plan needs")
    return f"more GPUs than {cl.num_gpus} (the fewest-GPUs search finds how many)"


def memory_shortfall(job: JobSpec, cands: Candidates, budget_s: float = FEWEST_GPUS_BUDGET_S) -> Shortfall:
    """Why no plan fits: the stage and resource that are short and by how much (the split of
    the shape that needs the least memory), and what would help: recomputation, a smaller
    micro-batch, more GPUs (searched for within `budget_s`)."""
    if cands.num_legal - cands.num_dominated <= 0:
        return shape_shortfall(job)
    gpu = job.cluster.gpu
    shapes = cands.least_memory_shapes
    rows = [shapes.row(i) for i in range(len(shapes))]
    peak, lay = _least_memory(job, shapes)
    k = int(np.argmin(peak))
    par = parallel_from_row(job, rows[k])
    split = job.model.units_to_layers([int(x) for x in lay[k, :par.pp]])
    plan = make_plan(job, par, split)
    stage = max(plan.stages, key=lambda s: s.memory_bytes.total)
    need, cap = stage.memory_bytes.total, plan.capacity_bytes
    mb = stage.memory_bytes
    where = ("the only stage" if par.pp == 1 else "the first stage" if stage.stage == 0
             else "the last stage" if stage.stage == par.pp - 1 else f"stage {stage.stage}")
    parts = ", ".join(f"{name} {getattr(mb, name) / GIB:.1f}" for name in ("params", "grads", "optimizer", "activations", "other"))
    suggestions: list[str] = []
    # recomputation and micro-batch: the same shape with the knob changed, its best split
    tries: list[tuple[str, Any, str]] = []  # (knob, value, what it says)
    if par.recompute != "full":
        tries.append(("recompute", "full", "full activation recomputation (recompute=full)"))
    if par.micro_batch_size > 1:
        tries.append(("micro_batch_size", 1, "micro-batch size 1 (micro_batch_size=1)"))
    for knob, val, text in tries:
        mbs = val if knob == "micro_batch_size" else par.micro_batch_size
        alt = par.model_copy(update={knob: val, "num_microbatches": job.global_batch_size // (par.dp * mbs)})
        pk, _ = _least_memory(job, alt.shapes())
        allowed = job.constraints.allows(knob, val)
        verdict = "fits" if pk[0] <= cap else f"still needs {pk[0] / GIB:.1f} GiB"
        suggestions.append(f"{text}: {verdict} with {alt.describe()}" + ("" if allowed else " (your constraints exclude it)"))
    done = [t for c, t in ((par.recompute == "full", "full recomputation"), (par.micro_batch_size == 1, "micro-batch size 1")) if c]
    if done:
        suggestions.append(f"the least-memory plan already uses {' and '.join(done)}")
    suggestions += _smaller_optimizer_state(job, par, cap)
    if budget_s > 0:  # a search of its own: only where the caller gives time (as for the fewest GPUs)
        t0 = time.perf_counter()
        suggestions += _offloaded_activations(job, need, cap, budget_s)
        budget_s = max(0.0, budget_s - (time.perf_counter() - t0))
    suggestions.append(_more_gpus(job, budget_s))
    cons = users_constraints(job.framework, job.constraints.model_dump(exclude_defaults=True))
    if cons:
        suggestions.append(f"relax the constraints ({', '.join(sorted(cons))}): they exclude shapes that might fit")
    suggestions += _other_framework(job)
    message = (f"GPU memory is short on {where} by {(need - cap) / GIB:.1f} GiB: it needs {need / GIB:.1f} GiB "
               f"({parts}) with the least-memory plan ({par.describe()}, layers {split}) but {gpu.name} has "
               f"{cap / GIB:.1f} GiB usable")
    return Shortfall(resource="memory", stage=stage.stage, needed_bytes=need, available_bytes=cap,
                     short_bytes=need - cap, best_shape=rows[k], suggestions=suggestions, message=message)


def pooled_shortfall(job: JobSpec, budget_s: float = FEWEST_GPUS_BUDGET_S) -> Shortfall:
    """Why no plan fits on a cluster of pools (or on measured links) when the joint model has
    proved it. Every plan there is a plan of the same GPU count with each stage on its pool's
    GPUs, so the uniform cluster of that many GPUs of the pool with the most memory per GPU is
    a relaxation: when no plan fits on it either, its `memory_shortfall` (the stage, the bytes,
    what would help) holds for the pools too, and says so; when one fits, what is short is the
    placement (whole-node stages of one pool each), and the shortfall says that instead."""
    cl = job.cluster
    roomiest = max(cl.pool_views(), key=lambda v: v.gpu.usable_memory_bytes)
    pool = roomiest.name.rsplit("/", 1)[-1] if cl.is_mixed else cl.name
    uniform = resize_cluster(roomiest, max(1, cl.num_gpus // roomiest.gpus_per_node)).model_copy(
        update={"name": f"pool {pool}" if cl.is_mixed else cl.name})
    ujob = job.model_copy(update={"cluster": uniform})
    if not job_fits(ujob):
        sf = memory_shortfall(ujob, prepare(ujob, prune_time=False), budget_s)
        if not cl.is_mixed:
            return sf
        return sf.model_copy(update={"message": (
            f"on {cl.name}'s {cl.num_gpus} GPUs, even with every GPU a {roomiest.gpu.name} (pool {pool}, the most "
            f"memory per GPU): {sf.message}")})
    pools = ", ".join(f"{p.name} {p.num_nodes} nodes" for p in cl.pool_specs())
    return Shortfall(resource="placement", suggestions=[
        "plan one pool alone (its cluster of one GPU type)", f"more nodes of pool {pool}",
        "relax the constraints" if job.constraints.model_dump(exclude_defaults=True) else "a smaller global batch"],
        message=(f"no plan places on {cl.name}'s pools ({pools}): some plan fits on {cl.num_gpus} GPUs if every "
                 f"GPU had {roomiest.gpu.name}'s memory, but none fits with whole-node stages of one pool each on "
                 f"each pool's own GPUs"))
