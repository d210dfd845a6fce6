"""`solveplan validate`: the formulation against published runs (predicted vs measured)."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--data", default=None, help="published_runs.json (default: ../shared/data/published_runs.json).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def validate(data, as_json):
    """Predicted vs measured step time for every published run, the MAPE and the worst rows,
    and the per-GPU memory points."""
    from ..calibration.published import load, memory_points, summary, validate_rows

    d = load(data)
    rows = validate_rows(d)
    summ = summary(rows)
    mem = memory_points(d)
    if as_json:
        click.echo(json.dumps({
            "rows": [{"id": r.id, "gpu": r.gpu, "num_gpus": r.num_gpus, "measured_s": r.measured_s,
                      "predicted_s": r.predicted_s, "error": r.error, "basis": r.measure_basis,
                      "config": r.config, "fits": r.fits, "skipped": r.skipped} for r in rows],
            "summary": summ, "memory": mem}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title="step time: predicted vs published")
    for c in ("row", "GPUs", "measured s", "predicted s", "error", "basis", "config (unstated knobs: best legal)"):
        t.add_column(c)
    for r in rows:
        if r.skipped:
            t.add_row(r.id, str(r.num_gpus), "", "", "skipped", r.skipped, "")
            continue
        c = r.config
        cfg = (f"tp{c['tp']} pp{c['pp']} dp{c['dp']} vp{c['vp']} mbs{c['micro_batch_size']} {c['recompute']}"
               f"{' sp' if c['sequence_parallel'] else ''} z{c['zero']}")
        err = f"{r.error:+.1%}"
        t.add_row(r.id, str(r.num_gpus), f"{r.measured_s:.3f}", f"{r.predicted_s:.3f}",
                  f"[red]{err}[/]" if abs(r.error) > 0.10 else err, r.measure_basis, cfg)
    con.print(t)
    con.print(f"MAPE {summ['mape']:.2%} over {summ['rows']} rows ({summ['skipped']} skipped); "
              f"max |error| {summ['max_abs_error']:.1%}; {summ['within_10pct']} rows within 10%")
    m = Table(title="per-GPU memory, first stage (Korthikanti et al. 2022 Fig. 1)")
    for c in ("model", "mode", "state GiB (pub)", "activations GiB (pub)", "total error"):
        m.add_column(c)
    for p in mem:
        m.add_row(p["model"], p["mode"], f"{p['state_gib']:.1f} ({p['state_published_gib']:.1f})",
                  f"{p['act_gib']:.1f} ({p['act_published_gib']:.1f})", f"{p['total_error']:+.1%}")
    con.print(m)
