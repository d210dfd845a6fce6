"""`solveplan calibrate`: fit the formulation to your own cluster from nccl-tests logs
(latency and bandwidth efficiency of NVLink and the network) and measured step times (GPU
efficiencies), and write a cluster YAML that --cluster accepts. `solveplan validate`: the
formulation against published runs (predicted vs measured)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import InputError


@click.command()
@click.option("--cluster", "cluster_ref", required=True,
              help="The cluster to calibrate: catalog name, <gpu>x<N> (e.g. h100x16) or a cluster YAML/JSON.")
@click.option("--nccl-tests", "nccl_logs", multiple=True, metavar="LOG[:nvlink|:network][:OP]",
              help="nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf); repeat "
                   "the flag or list more logs as arguments. The link class comes from the log's hosts or rank count "
                   "unless a :nvlink / :network hint says.")
@click.argument("more_logs", nargs=-1, metavar="[LOG]...")
@click.option("--steps", "steps", default=None, type=click.Path(dir_okay=False),
              help="Measured step times (CSV or JSON): model, tp, pp, dp, cp, vp, micro_batch_size, recompute, "
                   "sequence_parallel, zero, global_batch_size, seq_length, step_time_s.")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Calibrated cluster YAML to write.")
@click.option("--report", "report", default=None, type=click.Path(dir_okay=False), help="Markdown report to write.")
@click.option("--plot", "plot", default=None, type=click.Path(dir_okay=False), help="PNG of the fits to write.")
@click.option("--name", "name", default=None, help="Name of the calibrated cluster (default: the output file's stem).")
def calibrate(cluster_ref, nccl_logs, more_logs, steps, output, report, plot, name):
    """Fit link latencies/bandwidths and GPU efficiencies to your measurements; write a cluster YAML."""
    from ..calibration.calibrate import calibrate as fit_cluster
    from ..catalog import load_cluster
    from ..render.calibration_report import plot as plot_fits, report_markdown, write_yaml

    for path, flag in ((output, "-o"), (report, "--report"), (plot, "--plot")):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(flag, f"directory of {path!r} does not exist")
    if output and Path(output).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise InputError("-o", f"{output!r}: give a .yaml file name (the catalog loader reads .yaml/.yml/.json)")
    cluster = load_cluster(cluster_ref)
    logs = list(nccl_logs) + list(more_logs)
    cal = fit_cluster(cluster, logs, steps, name=name or Path(output).stem)
    if Path(output).suffix.lower() == ".json":
        Path(output).write_text(json.dumps(cal.cluster_mapping(), indent=2) + "\n")
    else:
        write_yaml(cal, output)
    # what we wrote must load back as a cluster
    load_cluster(str(output))
    if report:
        Path(report).write_text(report_markdown(cal))
    if plot:
        plot_fits(cal, plot)

    c = cal.cluster
    for cls, lf in cal.links.items():
        lat, eff = lf.latency, lf.efficiency
        sd = f" +- {lat.sd:.2g}" if lat.sd == lat.sd and not lat.fixed else (" (kept)" if lat.fixed else "")
        click.echo(f"{cls}: latency {lat.before:g} -> {getattr(c, lat.name):.3g}{sd} us, efficiency {eff.before:g} -> "
                   f"{getattr(c, eff.name):.3g}, rms error {lf.rms:.1%} over {len(lf.points)} points")
    if cal.steps:
        sf = cal.steps
        vals = ", ".join(f"{p.name} {p.before:g} -> {p.value:.4g}" for p in sf.params)
        click.echo(f"gpu: {vals}; step-time rms error {sf.rms_before:.1%} -> {sf.rms_after:.1%} over {len(sf.rows)} measurements")
    for note in cal.notes:
        click.echo(f"note: {note}")
    click.echo(f"wrote {output}" + (f", {report}" if report else "") + (f", {plot}" if plot else "")
               + f"; use it with --cluster {output}")


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
