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
from ..specs.writing import PLOT_SUFFIXES, atomic_output, check_output

MAX_DRAWN_MICROBATCHES = 32
# beyond this many operations per stage, bars of single operations are thinner than a pixel
# apart and read as a barcode: each stage is drawn as its phases instead (`phases`)
MAX_OPS_PER_STAGE = 48


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
    done: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, mb) -> end
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


@dataclass
class Segment:
    stage: int
    kind: str  # "F" warm-up forwards, "FB" steady one-forward-one-backward, "B" cool-down backwards
    start_s: float
    end_s: float
    ops: int


def phases(ops: list[Op], min_gap_s: float) -> list[Segment]:
    """Each stage's operations as its schedule's phases -- warm-up forwards, the steady state of
    alternating forwards and backwards, cool-down backwards -- consecutive operations of one
    phase merged unless idle for more than `min_gap_s` between them (a bubble stays visible)."""
    out: list[Segment] = []
    for i in sorted({o.stage for o in ops}):
        mine = sorted((o for o in ops if o.stage == i), key=lambda o: o.start_s)
        first_b = next(k for k, o in enumerate(mine) if o.kind == "B")
        last_f = max(k for k, o in enumerate(mine) if o.kind == "F")
        for k, o in enumerate(mine):
            kind = "F" if k < first_b else "B" if k > last_f else "FB"
            prev = out[-1] if out and out[-1].stage == i else None
            if prev is not None and prev.kind == kind and o.start_s - prev.end_s <= min_gap_s:
                prev.end_s, prev.ops = o.end_s, prev.ops + 1
            else:
                out.append(Segment(i, kind, o.start_s, o.end_s, 1))
    return out


def render_timeline(job: JobSpec, plan: Plan, path: str, max_microbatches: int = MAX_DRAWN_MICROBATCHES,
                    field: str = "timeline") -> dict:
    """Write a picture of the plan's schedule to `path` (PNG, PDF or SVG by its suffix, written
    whole: `specs.writing.atomic_output`); returns what was drawn."""
    check_output(path, field, PLOT_SUFFIXES)
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

    colors = {"F": "#4C72B0", "B": "#55A868", "FB": "#3E9C9C", "comm": "#DD8452", "bubble": "#E5E5E5",
              "tail": "#8172B3"}
    fig_h = min(2.4 + 0.45 * p, 24)  # the stages, a title of up to three lines, the x axis and the legend
    fig, ax = plt.subplots(figsize=(12, fig_h))
    for i in range(p):
        ax.broken_barh([(0, pipe_end)], (i - 0.4, 0.8), facecolors=colors["bubble"])
    dense = len(ops) / p > MAX_OPS_PER_STAGE
    if dense:
        _draw_phases(ax, phases(ops, pipe_end / 400), colors, pipe_end)
    else:
        _draw_ops(ax, ops, p, colors, pipe_end, label=shown <= 16 and p <= 16)
    if tail > 0 and shown == m:
        for i in range(p):
            ax.broken_barh([(pipe_end, tail)], (i - 0.4, 0.8), facecolors=colors["tail"])
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
    if dense:
        chunks = f"{v} chunk{'s' if v > 1 else ''}"
        sub.append(f"{len(ops) // p} operations per stage ({chunks} x {shown} micro-batches x F/B): drawn as phases")
    if sim_total is not None:
        sub.append(f"simulated pipeline {sim_total:.3f} s vs formulation {formula_pipe:.3f} s")
    ax.set_title("\n".join([title] + sub), fontsize=9)
    handles = [Patch(color=colors["F"], label="forward"), Patch(color=colors["B"], label="backward (+recompute)")]
    handles += ([Patch(color=colors["FB"], label="steady 1F1B (forwards and backwards alternate)")] if dense else
                [Patch(color=colors["comm"], label="p2p communication")])
    handles.append(Patch(color=colors["bubble"], label="bubble (idle)"))
    if tail > 0 and shown == m:
        handles.append(Patch(color=colors["tail"], label="exposed DP + optimizer"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.4 / fig_h, 1, 1))  # 0.4 in at the bottom: the legend's row
    try:
        with atomic_output(path, field, PLOT_SUFFIXES) as tmp:
            fig.savefig(tmp, dpi=120, format=tmp.suffix[1:].lower())
    finally:
        plt.close(fig)
    return {"path": str(path), "microbatches_shown": shown, "simulated_pipeline_s": sim_total,
            "formulation_pipeline_s": formula_pipe}


def _draw_ops(ax, ops: list[Op], p: int, colors: dict, pipe_end: float, label: bool) -> None:
    """One bar per operation, the point-to-point waits before them, micro-batch numbers."""
    for kind in ("F", "B"):
        for i in range(p):
            bars = [(o.start_s, o.end_s - o.start_s) for o in ops if o.stage == i and o.kind == kind]
            ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colors[kind], edgecolor="white", linewidth=0.3)
    for i in range(p):
        bars = [(o.start_s - o.wait_comm_s, o.wait_comm_s) for o in ops if o.stage == i and o.wait_comm_s > 0]
        if bars:
            ax.broken_barh(bars, (i - 0.15, 0.3), facecolors=colors["comm"])
    if label:
        for o in ops:
            if o.end_s - o.start_s > pipe_end / 120:
                ax.text((o.start_s + o.end_s) / 2, o.stage, str(o.microbatch + 1), ha="center", va="center",
                        fontsize=6, color="white")


def _draw_phases(ax, segments: list[Segment], colors: dict, pipe_end: float) -> None:
    """One bar per phase, labelled with its operation count where it is wide enough."""
    words = {"F": "fwd", "B": "bwd", "FB": "F+B"}
    for sg in segments:
        ax.broken_barh([(sg.start_s, sg.end_s - sg.start_s)], (sg.stage - 0.4, 0.8), facecolors=colors[sg.kind])
        if sg.end_s - sg.start_s > pipe_end / 12:
            ax.text((sg.start_s + sg.end_s) / 2, sg.stage, f"{sg.ops} {words[sg.kind]}", ha="center", va="center",
                    fontsize=7, color="white")
