"""Rich tables of an optimize result (pure: returns renderables; the front end prints them).

`render_result(result)` -> a rich Group: status with bound and gap, the parallel degrees,
per-stage layers and memory, the time breakdown, throughput and MFU, the speedups over the
textbook and a user configuration, the other top-k plans, search statistics and notes; for
INFEASIBLE the shortfall and suggestions.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..errors import escape_markup
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL
from ..specs.units import GIB


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.1f}"
    if abs(x) >= 1:
        return f"{x:.3f}"
    if abs(x) >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def _fmt_s_unit(x: float | None) -> str:
    """`_fmt_s` with its unit always written ("7.008 s", "980.21 ms")."""
    text = _fmt_s(x)
    return text if text == "-" or text.endswith("s") else f"{text} s"


def status_line(result) -> Text:
    st = result.status
    style = {OPTIMAL: "bold green", FEASIBLE: "bold yellow", INFEASIBLE: "bold red"}.get(st, "bold magenta")
    t = Text()
    t.append(st, style=style)
    if result.plan is not None:
        t.append(f"  step {_fmt_s_unit(result.plan.step_time_s)}")
        if result.bound_step_time_s is not None:
            t.append(f"  bound {_fmt_s_unit(result.bound_step_time_s)}")
        if result.gap is not None:
            t.append(f"  gap {result.gap:.2e}")
        if result.tolerance_s is not None:
            t.append(f"  (tolerance {_fmt_s(result.tolerance_s)})")
        if getattr(result, "prefer", "fastest") != "fastest":
            t.append(f"  (prefer {result.prefer}: proven best under the tie-break within the tolerance, below)")
    return t


def uncertainty_text(result) -> Text | None:
    """The plan's intervals, its margins over the runner-up / fastest / textbook plan and, with
    prefer simple, the tie-break that chose it."""
    plan = result.plan
    t = interval_text(plan) if plan is not None else None
    if t is None:
        return None
    tb = getattr(result, "tie_break", None)
    if tb is not None:
        deps = ", ".join(tb.departures) if tb.departures else "none: the textbook plan"
        t.append(f"prefer simple: {tb.statement}; tolerance {tb.tolerance_rel:.1%} of the fastest plan "
                 f"({_fmt_s_unit(tb.fastest.step_time_s) if tb.fastest else '-'}); departures: {deps}\n")
    for m in getattr(result, "margins", []):
        t.append(f"vs {m.label}: {m.statement}\n", style="yellow" if m.inside else None)
    return t


def interval_text(plan) -> Text | None:
    """Where the measured step and peak memory lie (`Plan.step_time_interval_s`, ...)."""
    if plan.step_time_interval_s is None:
        return None
    lo, hi = plan.step_time_interval_s
    mlo, mhi = plan.peak_memory_interval_bytes
    return Text(f"{plan.interval_coverage:.0%} interval: step {_fmt_s(lo)} to {_fmt_s_unit(hi)}, peak memory "
                f"{mlo / GIB:.1f} to {mhi / GIB:.1f} GiB  ({plan.interval_basis})\n", style="cyan")


def cost_text(result) -> Text | None:
    c = getattr(result, "cost", None)
    if c is None:
        return None
    t = Text(f"cost: {c.gpu_hours_per_step:.4g} GPU-hours per step, {c.gpu_hours_per_million_tokens:.4g} per million tokens")
    if c.usd_per_step is not None:
        t.append(f"; ${c.usd_per_step:,.4g} per step, ${c.usd_per_million_tokens:,.4g} per million tokens "
                 f"(at ${c.price_per_gpu_hour_usd:g} per GPU-hour)")
    if c.energy_kwh_per_step is not None:
        t.append(f"; energy {c.energy_kwh_per_step:.4g} kWh per step, {c.energy_kwh_per_million_tokens:.4g} kWh per "
                 f"million tokens (every GPU at its {c.tdp_watts:g} W TDP: an upper bound)")
    return t


def degrees_table(plan) -> Table:
    par = plan.parallel
    t = Table(title="parallel plan", title_justify="left")
    moe = "ep_comm_s" in plan.breakdown or par.ep > 1 or par.etp > 1  # a MoE model's plan
    # Megatron's split with the embedding / loss counted as layers (--account-for-*-in-pipeline-split)
    counted = "+".join(n for n, on in (("embedding", par.account_for_embedding), ("loss", par.account_for_loss)) if on)
    cols = ("tp", "pp", "dp", "cp", "vp") + (("ep", "etp") if moe else ()) + (
        "micro-batch", "micro-batches", "recompute", "seq. parallel", "zero") + (("split counts",) if counted else ())
    for c in cols:
        t.add_column(c, justify="right")
    experts = (str(par.ep), str(par.etp)) if moe else ()
    t.add_row(str(par.tp), str(par.pp), str(par.dp), str(par.cp), str(par.vp), *experts, str(par.micro_batch_size),
              str(par.num_microbatches), par.recompute, "on" if par.sequence_parallel else "off", str(par.zero),
              *((counted,) if counted else ()))
    return t


def stages_table(plan) -> Table:
    placed = bool(plan.stages) and hasattr(plan.stages[0], "gpu")  # a joint plan: stages name their GPUs and nodes
    title = "stages (memory in GiB of each stage's GPU)" if placed else \
        f"stages (memory in GiB; {plan.capacity_bytes / GIB:.1f} GiB usable per GPU)"
    t = Table(title=title, title_justify="left")
    lead = ("stage", "pool", "gpu", "nodes", "layers") if placed else ("stage", "layers")
    parts = ["params", "grads", "optimizer", "activations", "other", "total"]
    headers = list(parts)
    if any(s.memory_bytes.host for s in plan.stages):  # activations offloaded to host memory: beside, not in, the total
        parts.append("host")
        headers.append("host (offloaded)")
    for c in (*lead, "time/micro-batch", *headers, "fits"):
        t.add_column(c, justify="left" if c in ("pool", "gpu", "nodes") else "right")
    for s in plan.stages:
        mb = s.memory_bytes
        where = (escape_markup(s.pool), escape_markup(s.gpu), escape_markup(_hosts(s.nodes), 1000)) if placed else ()
        t.add_row(str(s.stage), *where, str(s.layers), _fmt_s(s.time_per_microbatch_s),
                  *(f"{getattr(mb, k) / GIB:.2f}" for k in parts), "yes" if s.fits else Text("NO", style="bold red"))
    return t


def _hosts(hosts: list[str], most: int = 4) -> str:
    return ", ".join(hosts[:most]) + (f" (+{len(hosts) - most})" if len(hosts) > most else "")


def breakdown_table(plan) -> Table:
    t = Table(title="step time breakdown (s)", title_justify="left")
    for k in plan.breakdown:
        t.add_column(k.removesuffix("_s").replace("_", " "), justify="right")
    t.add_column("step", justify="right")
    t.add_row(*(_fmt_s(v) for v in plan.breakdown.values()), _fmt_s(plan.step_time_s))
    return t


def throughput_table(plan) -> Table:
    t = Table(title="throughput", title_justify="left")
    for c in ("tokens/s", "MFU", "model TFLOP/s/GPU", "hardware TFLOP/s/GPU", "peak memory GiB"):
        t.add_column(c, justify="right")
    t.add_row(f"{plan.tokens_per_s:,.0f}", f"{plan.mfu:.1%}", f"{plan.model_tflops_per_gpu:.1f}",
              f"{plan.hardware_tflops_per_gpu:.1f}", f"{plan.peak_memory_bytes / GIB:.1f}")
    return t


def comparisons_table(result) -> Table | None:
    rows = [c for c in (getattr(result, "textbook", None), getattr(result, "compare", None)) if c is not None]
    rows += list(getattr(result, "pools_alone", None) or [])
    if not rows:
        return None
    t = Table(title="compared with", title_justify="left")
    for c in ("", "configuration", "layers", "step (s)", "tokens/s", "MFU", "fits", "plan's speedup"):
        t.add_column(c, justify="right" if c not in ("", "configuration") else "left")
    for c in rows:
        t.add_row(escape_markup(c.label), c.parallel.describe(), ",".join(map(str, c.layers_per_stage)), _fmt_s(c.step_time_s),
                  f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}", "yes" if c.fits else Text("NO", style="red"),
                  f"{c.speedup:.3f}x" if c.speedup is not None else "-")
    return t


def alternatives_table(result) -> Table | None:
    if not result.alternatives:
        return None
    t = Table(title="next best plans (distinct configurations)", title_justify="left")
    for c in ("rank", "configuration", "layers", "step (s)", "vs best"):
        t.add_column(c, justify="right" if c != "configuration" else "left")
    best = result.plan.step_time_s
    for i, p in enumerate(result.alternatives, start=2):
        t.add_row(str(i), p.parallel.describe(), ",".join(map(str, p.layers_per_stage)), _fmt_s(p.step_time_s),
                  f"+{(p.step_time_s / best - 1):.2%}")
    return t


def search_table(result) -> Table:
    s = result.search
    sol: dict[str, Any] = s.solver or {}
    t = Table(title="search", title_justify="left")
    cols = ["method", "wall time", "shapes legal", "dominated", "pruned (memory)", "pruned (time)", "searched"]
    vals = [s.method, f"{s.wall_time_s:.2f} s", f"{s.shapes_legal:,}", f"{s.shapes_dominated:,}",
            f"{s.shapes_pruned_memory:,}", f"{s.shapes_pruned_time:,}", f"{s.shapes_searched:,}"]
    if s.evaluations is not None:
        cols.append("evaluations")
        vals.append(f"{s.evaluations:,}")
    # the CP-SAT solves among the phases (those with a solver status; the phase runner also
    # records the time of phases without a solve: preparation, each pool's own plan)
    phases = [p for p in sol.get("phases") or [] if "status" in p]
    if phases:
        ph = phases[0]
        cols += ["solver status", "branches", "conflicts", "booleans", "constraints", "quantum"]
        vals += [str(ph.get("status")), f"{sum(p.get('branches') or 0 for p in phases):,}",
                 f"{sum(p.get('conflicts') or 0 for p in phases):,}", str(ph.get("num_booleans")),
                 str(ph.get("num_constraints")), _fmt_s(sol.get("time_quantum_s"))]
    for c in cols:
        t.add_column(c, justify="right")
    t.add_row(*vals)
    return t


def shortfall_text(result) -> Text | None:
    sf = result.shortfall
    if sf is None:
        return None
    t = Text()
    t.append(f"{sf.resource}: ", style="bold red")
    t.append(sf.message + "\n")
    for s in sf.suggestions:
        t.append(f"  - {s}\n")
    return t


def _setting_text(value) -> str:
    """A job setting as the title prints it: booleans lower-case, module_precision's rules as glob=precision."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) for v in value):
        return ", ".join(f"{pattern}={precision}" for pattern, precision in value)
    return str(value)


def _title(plan) -> Text:
    settings = "".join(f", {k} {_setting_text(v)}" for k, v in (getattr(plan, "settings", None) or {}).items())
    gpus = f"{plan.num_gpus} GPU" + ("" if plan.num_gpus == 1 else "s")
    return Text(f"{plan.model} on {plan.cluster} ({gpus}), global batch "
                f"{plan.global_batch_size} x {plan.seq_length} tokens, {plan.framework} stack{settings}", style="bold")


def assumptions_text(plan) -> Text | None:
    """The plan's assumptions (efficiencies not fitted), said beside its status."""
    lines = getattr(plan, "assumptions", None) or []
    if not lines:
        return None
    return Text("\n".join(f"ASSUMED: {line}" for line in lines), style="bold yellow")


def _plan_tables(plan) -> list:
    return [degrees_table(plan), stages_table(plan), breakdown_table(plan), throughput_table(plan)]


def render_plan(plan) -> Group:
    """One evaluated configuration (`solveplan evaluate`): degrees, stages, breakdown, throughput,
    and its intervals when attached."""
    extra = interval_text(plan)
    said = assumptions_text(plan)
    return Group(_title(plan), *([said] if said is not None else []), *_plan_tables(plan),
                 *([extra] if extra is not None else []))


def render_result(result) -> Group:
    """Everything about an optimize result, as rich renderables."""
    parts: list = []
    plan = result.plan
    if plan is not None:
        parts.append(_title(plan))
    parts.append(status_line(result))
    if plan is not None:
        said = assumptions_text(plan)
        if said is not None:
            parts.append(said)
        parts += _plan_tables(plan)
        for extra in (uncertainty_text(result), cost_text(result), comparisons_table(result), alternatives_table(result)):
            if extra is not None:
                parts.append(extra)
    if getattr(result, "explanation", None):
        parts.append(Text("placement:\n" + "\n".join(f"  - {line}" for line in result.explanation)))
    sf = shortfall_text(result)
    if sf is not None:
        parts.append(sf)
    parts.append(search_table(result))
    if result.notes:
        parts.append(Text("notes:\n" + "\n".join(f"  - {n}" for n in result.notes), style="dim"))
    return Group(*parts)


def to_text(renderable, width: int = 160) -> str:
    """Render to plain text (tests, logs)."""
    import io

    buf = io.StringIO()
    con = Console(width=width, file=buf, color_system=None, force_terminal=False, emoji=False)
    con.print(renderable)
    return buf.getvalue()
