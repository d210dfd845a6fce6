"""`solveplan calibrate`: fit the formulation to your own cluster from nccl-tests logs
(latency and bandwidth efficiency of NVLink and the network) and measured step times (GPU
efficiencies), and write a cluster YAML that --cluster accepts."""

from __future__ import annotations

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
    from ..calibrate import calibrate as run_calibration
    from ..catalog import load_cluster

    for path, flag in ((output, "-o"), (report, "--report"), (plot, "--plot")):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(flag, f"directory of {path!r} does not exist")
    if output and Path(output).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise InputError("-o", f"{output!r}: give a .yaml file name (the catalog loader reads .yaml/.yml/.json)")
    cluster = load_cluster(cluster_ref)
    logs = list(nccl_logs) + list(more_logs)
    cal = run_calibration(cluster, logs, steps, name=name or Path(output).stem)
    if Path(output).suffix.lower() == ".json":
        import json

        Path(output).write_text(json.dumps(cal.cluster_mapping(), indent=2) + "\n")
    else:
        cal.write_yaml(output)
    # what we wrote must load back as a cluster
    load_cluster(str(output))
    if report:
        Path(report).write_text(cal.report_markdown())
    if plot:
        cal.plot(plot)

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
