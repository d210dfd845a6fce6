"""Timeline of a plan's pipeline schedule (1F1B, or Megatron's interleaved 1F1B when vp > 1):
pipeline stages x time, forward / backward / point-to-point communication / bubble, then the
step's tail (exposed data-parallel reduction and optimizer step).

The schedule is simulated, not drawn from the closed form: each stage runs its operations in
Megatron-LM's order (warm-up forwards, one-forward-one-backward steady state, cool-down
backwards; for interleaving, groups of pp micro-batches per model chunk and
2*(pp-i-1) + (vp-1)*pp warm-up forwards on stage i), an operation starts when its stage is free
and its input has arrived (the previous stage's forward, or the next stage's backward, plus one
point-to-point transfer). Per-stage forward and backward times come from the formulation's
coefficients for the plan's own split, so the simulated makespan can be set against the
formulation's pipeline time (the title shows both).

matplotlib is imported lazily (the `plot` extra); `simulate` needs only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan import Plan
from ..specs import JobSpec

MAX_DRAWN_MICROBATCHES = 32


class MissingMatplotlib(RuntimeError):
    pass


@dataclass
class Op:
    stage: int
    kind: str  # "F" | "B"
    microbatch: int
    chunk: int
    start_s: float
    end_s: float
    wait_comm_s: float  # point-to-point transfer it waited for (drawn before it)


def stage_times(job: JobSpec, plan: Plan) -> tuple[list[float], list[float], float]:
    """(forward_s, backward_s) per stage per micro-batch (all chunks together) and the p2p time
    of one transfer (one direction, one micro-batch), from the formulation's coefficients."""
    from ..formulation.job import job_coefficients

    co = job_coefficients(job, plan.parallel.shapes())
    p = plan.parallel.pp
    fwd, bwd = [], []
    units = job.model.layers_to_units(plan.layers_per_stage) or [s.layers for s in plan.stages]
    for i, s in enumerate(plan.stages):
        f = units[i] * float(co.layer_fwd_s[0]) + (float(co.first_fwd_s[0]) if i == 0 else 0.0)
        tau = s.time_per_microbatch_s
        f = min(f, tau)
        fwd.append(f)
        bwd.append(tau - f)
    comm = float(co.boundary_s[0]) / 2.0 if p > 1 else 0.0
    return fwd, bwd, comm


def simulate(fwd: list[float], bwd: list[float], comm: float, m: int, vp: int = 1) -> list[Op]:
    """Event simulation of Megatron-LM's (interleaved) 1F1B schedule."""
    p = len(fwd)
    v = max(1, vp)
    order: list[list[tuple[str, int, int]]] = []
    for i in range(p):
        seq: list[tuple[str, int, int]] = []
        total = m * v
        if v == 1:
            warm = min(p - i - 1, m)
            fw = [(j, 0) for j in range(m)]
            bw = [(j, 0) for j in range(m)]
        else:
            warm = min((p - i - 1) * 2 + (v - 1) * p, total)
            fw = [((k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
            bw = [((k // (p * v)) * p + k % p, v - 1 - (k // p) % v) for k in range(total)]
        nf = nb = 0
        for _ in range(warm):
            seq.append(("F",) + fw[nf]); nf += 1  # noqa: E702
        while nf < total:
            seq.append(("F",) + fw[nf]); nf += 1  # noqa: E702
            seq.append(("B",) + bw[nb]); nb += 1  # noqa: E702
        while nb < total:
            seq.append(("B",) + bw[nb]); nb += 1  # noqa: E702
        order.append(seq)
    done: dict[tuple[str, int, int, int], float] = {}  # (kind, virtual stage, mb) -> end
    ops: list[Op] = []
    free = [0.0] * p
    pos = [0] * p
    nvs = p * v
    remaining = sum(len(s) for s in order)
    while remaining:
        progressed = False
        for i in range(p):
            while pos[i] < len(order[i]):
                kind, j, c = order[i][pos[i]]
                vs = c * p + i
                if kind == "F":
                    dep = None if vs == 0 else ("F", vs - 1, j)
                    dur = fwd[i] / v
                else:
                    dep = ("F", nvs - 1, j) if vs == nvs - 1 else ("B", vs + 1, j)
                    dur = bwd[i] / v
                if dep is not None and dep not in done:
                    break
                ready = 0.0
                wait = 0.0
                if dep is not None:
                    cross = dep[1] % p != i  # the input comes from another pipeline rank
                    ready = done[dep] + (comm if cross else 0.0)
                    wait = comm if cross else 0.0
                if kind == "B" and vs == nvs - 1:
                    wait = 0.0
                start = max(free[i], ready)
                end = start + dur
                done[(kind, vs, j)] = end
                ops.append(Op(i, kind, j, c, start, end, min(wait, max(0.0, start - free[i]))))
                free[i] = end
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlock (inconsistent order)")
    return ops


def render_timeline(job: JobSpec, plan: Plan, path: str, max_microbatches: int = MAX_DRAWN_MICROBATCHES) -> dict:
    """Write a PNG of the plan's schedule to `path`; returns what was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:  # the `plot` extra
        raise MissingMatplotlib("the timeline needs matplotlib: pip install 'solveplan[plot]'") from exc
    par = plan.parallel
    p, v, m = par.pp, par.vp, par.num_microbatches
    fwd, bwd, comm = stage_times(job, plan)
    shown = m
    if m > max_microbatches:
        shown = max(p, (max_microbatches // p) * p) if v > 1 else max_microbatches
        shown = min(shown, m)
    ops = simulate(fwd, bwd, comm, shown, v)
    pipe_end = max(o.end_s for o in ops)
    full_ops = simulate(fwd, bwd, comm, m, v) if m * v * p <= 400_000 else None
    sim_total = max(o.end_s for o in full_ops) if full_ops else None
    tail = plan.breakdown.get("exposed_dp_s", 0.0) + plan.breakdown.get("optimizer_s", 0.0)
    formula_pipe = plan.step_time_s - tail

    colors = {"F": "#4C72B0", "B": "#55A868", "comm": "#DD8452", "bubble": "#E5E5E5", "tail": "#8172B3"}
    fig_h = 1.2 + 0.45 * p
    fig, ax = plt.subplots(figsize=(12, min(fig_h, 24)))
    for i in range(p):
        ax.broken_barh([(0, pipe_end)], (i - 0.4, 0.8), facecolors=colors["bubble"])
    for kind in ("F", "B"):
        for i in range(p):
            bars = [(o.start_s, o.end_s - o.start_s) for o in ops if o.stage == i and o.kind == kind]
            ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colors[kind], edgecolor="white", linewidth=0.3)
    for i in range(p):
        bars = [(o.start_s - o.wait_comm_s, o.wait_comm_s) for o in ops if o.stage == i and o.wait_comm_s > 0]
        if bars:
            ax.broken_barh(bars, (i - 0.15, 0.3), facecolors=colors["comm"])
    if tail > 0 and shown == m:
        for i in range(p):
            ax.broken_barh([(pipe_end, tail)], (i - 0.4, 0.8), facecolors=colors["tail"])
    if shown <= 16 and p <= 16:
        for o in ops:
            if o.end_s - o.start_s > pipe_end / 120:
                ax.text((o.start_s + o.end_s) / 2, o.stage, str(o.microbatch + 1), ha="center", va="center",
                        fontsize=6, color="white")
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {i} ({s.layers} layers)" for i, s in enumerate(plan.stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    kind = "interleaved 1F1B" if v > 1 else "1F1B"
    title = (f"{plan.model} on {plan.cluster}: tp={par.tp} pp={p} dp={par.dp} cp={par.cp} vp={v} "
             f"mbs={par.micro_batch_size}, {kind}, {m} micro-batches")
    sub = []
    if shown < m:
        sub.append(f"first {shown} of {m} micro-batches shown (the steady state repeats)")
    if sim_total is not None:
        sub.append(f"simulated pipeline {sim_total:.3f} s vs formulation {formula_pipe:.3f} s")
    ax.set_title(title + ("\n" + "; ".join(sub) if sub else ""), fontsize=9)
    handles = [Patch(color=colors["F"], label="forward"), Patch(color=colors["B"], label="backward (+recompute)"),
               Patch(color=colors["comm"], label="p2p communication"), Patch(color=colors["bubble"], label="bubble (idle)")]
    if tail > 0 and shown == m:
        handles.append(Patch(color=colors["tail"], label="exposed DP + optimizer"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(handles), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {"path": str(path), "microbatches_shown": shown, "simulated_pipeline_s": sim_total,
            "formulation_pipeline_s": formula_pipe}
