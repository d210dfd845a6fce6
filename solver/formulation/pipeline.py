"""The one composition of stage time and stage memory from the per-shape coefficients
(docs/DESIGN.md section 3): `stage_arrays` for explicit layer splits, `stage_memory_bytes` (the
stage memory sum) and `pipeline_s` (the 1F1B pipeline time). Every consumer -- the float
evaluation below, the linear form and its memory limits, the splits, the Alpa-style DP,
placement pricing -- composes through these three.

Pipeline (1F1B; interleaved with v chunks per rank):
    slot_i = tau_i + v*pi_i
    T_pipe = (m - 1/v) * max_i slot_i + sum_i slot_i / v
For v=1 this is Alpa's stage objective `(m-1)*max + sum` plus the p2p critical path
(Pipette); for an even split it is `(m + (p-1)/v) * tau`, Narayanan et al. Eq. (1) with the
interleaved bubble `(p-1)/(v*m)`.
Step:  T = T_pipe + max_i [ max(0, D_i - W_i) + O_i ]
with D_i the stage's data-parallel reduction (+ all-gather), W_i the computation it hides
behind (`StageCoefficients.*_window_s`: the last micro-batch's backward, and the next first
forward for the sharded optimizer's all-gather), O_i the optimizer step.
Memory of stage i: model state of its layers (+ embedding / LM head) + activations of its
in-flight micro-batches (`inflight_microbatches`) + working sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .coefficients import StageCoefficients


def inflight_microbatches(pp, vp, m, stage):
    """Micro-batches' worth of a stage's layers whose activations are alive at once.

    1F1B: stage i holds min(p - i, m) micro-batches (Narayanan et al. 2021 Sec. 2.2).
    Interleaved (v > 1): Megatron-LM warms up 2(p-i-1) + (v-1)p chunks, +1 in flight, each
    holding l_i/v layers; on stage 0 that is L(1 + (p-1)/(p v)) layers (Korthikanti Sec. 4.2.3).
    """
    pp, vp, m, stage = (np.asarray(x, dtype=np.float64) for x in (pp, vp, m, stage))
    plain = np.minimum(pp - stage, m)
    chunks = np.minimum(2 * (pp - stage - 1) + (vp - 1) * pp + 1, m * vp)
    return np.where(vp > 1, chunks / vp, plain)


def stage_arrays(co: StageCoefficients, layers: np.ndarray) -> dict:
    """Per-stage times and memory for rows of `layers` (R x P, zeros beyond pp); `co` holds
    the coefficients of each row's shape (length R). Keys: tau, slot, exposed_dp, opt (s);
    params, grads, optimizer, activations, other (bytes of GPU memory), host (activations offloaded to host memory);
    on (stage < pp)."""
    R, P = layers.shape
    L = layers.astype(np.float64)
    col = np.arange(P)[None, :]
    pp = co.pp[:, None]
    on = col < pp
    first = (col == 0).astype(np.float64)
    last = (col == pp - 1).astype(np.float64)
    v = co.vp[:, None].astype(np.float64)
    m = co.num_microbatches[:, None].astype(np.float64)
    c = lambda a: np.asarray(a, dtype=np.float64)[:, None]  # noqa: E731

    tau = L * c(co.layer_s) + first * c(co.first_s) + last * c(co.last_s)
    slot = np.where(on, tau + v * c(co.boundary_s), 0.0)
    dp = L * c(co.layer_dp_step_s) + first * c(co.first_dp_step_s) + last * c(co.last_dp_step_s)
    window = L * c(co.layer_window_s) + first * c(co.first_window_s) + last * c(co.last_window_s)
    exposed_dp = np.where(on, np.maximum(0.0, dp - window), 0.0)
    opt = np.where(on, L * c(co.layer_optimizer_step_s) + first * c(co.first_optimizer_step_s) + last * c(co.last_optimizer_step_s), 0.0)

    mu = inflight_microbatches(pp, v, m, col)
    params = L * c(co.layer_params_bytes)
    grads = L * c(co.layer_grads_bytes)
    optim = L * c(co.layer_optimizer_bytes)
    emb_state = first * c(co.first_static_bytes) + last * c(co.last_static_bytes)
    # split the embedding / head state in the same proportions as a layer's
    static_l = c(co.layer_static_bytes)
    frac = lambda x: np.divide(c(x), static_l, out=np.zeros_like(static_l), where=static_l > 0)  # noqa: E731
    params = params + emb_state * frac(co.layer_params_bytes)
    grads = grads + emb_state * frac(co.layer_grads_bytes)
    optim = optim + emb_state * frac(co.layer_optimizer_bytes)
    act = L * c(co.layer_act_bytes) * mu + first * c(co.first_act_bytes) * mu + last * c(co.last_act_bytes)
    host = L * c(co.layer_host_bytes) * mu + first * c(co.first_host_bytes) * mu + last * c(co.last_host_bytes)
    # working sets, then the allocator's fragmentation over everything and the runtime reserve
    allocated = params + grads + optim + act + c(co.const_bytes)
    other = c(co.const_bytes) + co.fragmentation * allocated + c(co.runtime_bytes)
    mask = lambda x: np.where(on, x, 0.0)  # noqa: E731
    return dict(tau=mask(tau), slot=slot, exposed_dp=exposed_dp, opt=opt, params=mask(params), grads=mask(grads),
                optimizer=mask(optim), activations=mask(act), other=mask(other), host=mask(host), on=on)


def stage_memory_bytes(st: dict) -> np.ndarray:
    """Memory per GPU of each stage of `stage_arrays` (bytes): model state + activations + working sets."""
    return st["params"] + st["grads"] + st["optimizer"] + st["activations"] + st["other"]


def pipeline_s(slot_max_s, slot_sum_s, num_microbatches, vp):
    """1F1B pipeline time `(m - 1/v) max_i slot_i + sum_i slot_i / v` (see the module docstring)."""
    return (num_microbatches - 1.0 / vp) * slot_max_s + slot_sum_s / vp


EVAL_CHUNK_CELLS = 1 << 18  # rows x stages composed at once: ~30 float64 temporaries of this size (~64 MiB)


def _step_and_peak(co: StageCoefficients, layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    st = stage_arrays(co, layers)
    v = co.vp.astype(np.float64)
    m = co.num_microbatches.astype(np.float64)
    t_pipe = pipeline_s(st["slot"].max(axis=1), st["slot"].sum(axis=1), m, v)
    return t_pipe + (st["exposed_dp"] + st["opt"]).max(axis=1), stage_memory_bytes(st).max(axis=1)


def pipeline_depths(pp) -> list[int]:
    """The distinct pipeline degrees in `pp`, ascending (np.unique would import numpy.ma, 14 ms
    of a CLI run, on its first call)."""
    pp = np.asarray(pp, dtype=np.int64)
    return np.flatnonzero(np.bincount(pp)).tolist() if len(pp) else []


def step_time_batch(co: StageCoefficients, layers: np.ndarray):
    """Vectorised: (step_time_s, peak_memory_bytes, fits) for each row of `layers` (R x P, zeros
    beyond each row's pp). Rows are composed in blocks of one pipeline depth, at most
    EVAL_CHUNK_CELLS cells each: no row is padded to the deepest pipeline of the batch, memory
    stays bounded whatever R, and each row's numbers are those of the row evaluated alone."""
    R = len(layers)
    pp = np.asarray(co.pp, dtype=np.int64)
    step, peak = np.empty(R), np.empty(R)
    for p in pipeline_depths(pp):
        rows = np.flatnonzero(pp == p)
        n = max(1, EVAL_CHUNK_CELLS // max(1, p))
        for i in range(0, len(rows), n):
            r = rows[i:i + n]
            whole = len(r) == R
            step[r], peak[r] = _step_and_peak(co if whole else co.take(r), layers[:, :p] if whole else layers[r, :p])
    return step, peak, peak <= co.capacity_bytes


def step_time_stages(stage_co: list[StageCoefficients], stage_pi_s, layers: np.ndarray):
    """Vectorised `evaluate_stages` over rows of `layers` (R x p, one shape): (step_time_s,
    fits) per row, stage i on the coefficients `stage_co[i]` with exposed p2p `stage_pi_s[i]`."""
    R, p = layers.shape
    slot, tail = np.zeros((R, p)), np.zeros((R, p))
    fits = np.ones(R, dtype=bool)
    for i in range(p):
        st = stage_arrays(stage_co[i], layers)
        slot[:, i] = st["tau"][:, i] + float(stage_co[i].vp[0]) * float(stage_pi_s[i])
        tail[:, i] = st["exposed_dp"][:, i] + st["opt"][:, i]
        fits &= stage_memory_bytes(st)[:, i] <= stage_co[i].capacity_bytes
    one = stage_co[0]
    t_pipe = pipeline_s(slot.max(axis=1), slot.sum(axis=1), float(one.num_microbatches[0]), float(one.vp[0]))
    return t_pipe + tail.max(axis=1), fits


@dataclass
class Evaluation:
    """One configuration's predicted step and memory (float formulation)."""

    step_time_s: float
    breakdown: dict[str, float]
    stages: list[dict] = field(default_factory=list)
    peak_memory_bytes: float = 0.0
    capacity_bytes: float = 0.0

    @property
    def fits(self) -> bool:
        return all(s["fits"] for s in self.stages)


def evaluate_split(co: StageCoefficients, index: int, layers) -> Evaluation:
    """Evaluate shape `index` of `co` with the layer split `layers` (one count per stage)."""
    layers = np.asarray(layers, dtype=np.int64)
    one = co.take(index)
    p = int(one.pp[0])
    if len(layers) != p:
        raise ValueError(f"layers_per_stage has {len(layers)} entries for pp={p}")
    return evaluate_stages([one] * p, [float(one.boundary_s[0])] * p, layers)


def evaluate_stages(stage_co: list[StageCoefficients], stage_pi_s, layers) -> Evaluation:
    """Evaluate one shape whose stages may run on different GPUs and links: stage i's times
    and memory come from `stage_co[i]` (the shape's coefficients on stage i's GPU type and
    data-parallel links, one row), its exposed p2p per micro-batch is `stage_pi_s[i]` (the
    slower of its boundaries, already chosen), its memory is held against its own GPU's
    capacity. With every stage on the same coefficients this is `evaluate_split`."""
    layers = np.asarray(layers, dtype=np.int64)
    p = len(layers)
    one = stage_co[0]
    v = float(one.vp[0])
    m = float(one.num_microbatches[0])
    cols = [stage_arrays(stage_co[i], layers[None, :]) for i in range(p)]
    st = {key: np.array([cols[i][key][0, i] for i in range(p)]) for key in cols[0] if key != "on"}
    tau = st["tau"]
    slot = tau + v * np.asarray(stage_pi_s, dtype=np.float64)
    t_pipe = pipeline_s(slot.max(), slot.sum(), m, v)
    tail = st["exposed_dp"] + st["opt"]
    k = int(np.argmax(tail))
    step = t_pipe + tail[k]
    b = int(np.argmax(slot))  # bottleneck stage
    cb = stage_co[b]
    lb = float(layers[b])
    per_mb = {
        "compute_s": lb * cb.layer_compute_s[0] + (b == 0) * cb.first_s[0] + (b == p - 1) * cb.last_s[0],
        "tp_comm_s": lb * cb.layer_tp_s[0],
        "cp_comm_s": lb * cb.layer_cp_s[0],
        "zero3_comm_s": lb * cb.layer_zero3_s[0],
        "ep_comm_s": lb * cb.layer_ep_s[0],
        "offload_s": lb * cb.layer_offload_s[0],
        "pp_comm_s": v * float(stage_pi_s[b]),
    }
    breakdown = {key: float(m * val) for key, val in per_mb.items()}
    breakdown["bubble_s"] = float(t_pipe - m * slot[b])
    breakdown["exposed_dp_s"] = float(st["exposed_dp"][k])
    breakdown["optimizer_s"] = float(st["opt"][k])
    total = stage_memory_bytes(st)
    stages: list[dict[str, Any]] = []
    for i in range(p):
        mem = {key: float(st[key][i]) for key in ("params", "grads", "optimizer", "activations", "other")}
        mem["total"] = float(total[i])
        mem["host"] = float(st["host"][i])  # offloaded activations in host memory: not in the GPU's total
        stages.append({
            "stage": i,
            "layers": int(layers[i]),
            "time_per_microbatch_s": float(tau[i]),
            "memory_bytes": mem,
            "fits": bool(mem["total"] <= stage_co[i].capacity_bytes),
        })
    tight = int(np.argmax([total[i] / stage_co[i].capacity_bytes for i in range(p)]))
    return Evaluation(
        step_time_s=float(step),
        breakdown=breakdown,
        stages=stages,
        peak_memory_bytes=max(s["memory_bytes"]["total"] for s in stages),
        capacity_bytes=float(stage_co[tight].capacity_bytes),
    )
