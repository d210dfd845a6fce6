"""`solveplan calibrate`: fit the formulation to your own cluster from nccl-tests logs
(latency and bandwidth efficiency of NVLink and the network) and measured step times (GPU
efficiencies), and write a cluster YAML that --cluster accepts. `solveplan validate`: the
formulation against published runs (predicted vs measured)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import InputError
from ..specs.writing import PLOT_SUFFIXES, check_output, write_text
from .options import OUTPUT
from .plan_cmds import _StderrProgress


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
                   "sequence_parallel, zero, global_batch_size, seq_length, step_time_s (+ precision, "
                   "attention_kernel cudnn|flash2|flash1; for a MoE run ep, etp, moe_token_dispatcher, "
                   "moe_a2a_overlap). 2 or more: the stack's time scale, then only what they identify.")
@click.option("-o", "--output", "output", required=True, type=OUTPUT,
              help="Calibrated cluster YAML to write.")
@click.option("--report", "report", default=None, type=OUTPUT, help="Markdown report to write.")
@click.option("--plot", "plot", default=None, type=OUTPUT, help="PNG of the fits to write.")
@click.option("--name", "name", default=None, help="Name of the calibrated cluster (default: the output file's stem).")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Each phase on stderr as it starts (default: when stderr is a terminal).")
def calibrate(cluster_ref, nccl_logs, more_logs, steps, output, report, plot, name, show_progress):
    """Fit link latencies/bandwidths and GPU efficiencies to your measurements; write a cluster YAML."""
    try:  # the fitter (calibration/fit.py) is scipy's least_squares: the fit extra
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise InputError("calibrate", "needs scipy: pip install 'solveplan[fit]'") from None
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot", "needs matplotlib: pip install 'solveplan[plot]'") from None
    from ..calibration.calibrate import calibrate as fit_cluster
    from ..catalog import load_cluster
    from ..render.calibration_report import plot as plot_fits
    from ..render.calibration_report import report_markdown, write_yaml

    for path, flag in ((output, "-o"), (report, "--report"), (plot, "--plot")):
        if path:
            check_output(path, flag, PLOT_SUFFIXES if flag == "--plot" else None)
    if output and Path(output).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise InputError("-o", f"{output!r}: give a .yaml file name (the catalog loader reads .yaml/.yml/.json)")
    cluster = load_cluster(cluster_ref)
    logs = list(nccl_logs) + list(more_logs)
    if show_progress is None:
        show_progress = sys.stderr.isatty()
    cal = fit_cluster(cluster, logs, steps, name=name or Path(output).stem,
                      progress=_StderrProgress() if show_progress else None)
    if Path(output).suffix.lower() == ".json":
        write_text(output, json.dumps(cal.cluster_mapping(), indent=2) + "\n", "-o")
    else:
        write_yaml(cal, output, "-o")
    # what we wrote must load back as a cluster
    load_cluster(str(output))
    if report:
        write_text(report, report_markdown(cal), "--report")
    if plot:
        plot_fits(cal, plot, "--plot")

    c = cal.cluster
    for cls, lf in cal.links.items():
        lat, eff = lf.latency, lf.efficiency
        sd = f" +- {lat.sd:.2g}" if lat.sd == lat.sd and not lat.fixed else (" (kept)" if lat.fixed else "")
        click.echo(f"{cls}: latency {lat.before:g} -> {getattr(c, lat.name):.3g}{sd} us, efficiency {eff.before:g} -> "
                   f"{getattr(c, eff.name):.3g}, rms error {lf.rms:.1%} over {len(lf.points)} points")
    if cal.steps:
        sf = cal.steps
        vals = ", ".join(f"{p.name} {p.before:g} -> {p.value:.4g}" for p in sf.params) or "unchanged (no knob moved)"
        click.echo(f"gpu: {vals}; step-time rms error {sf.rms_before:.1%} -> {sf.rms_after:.1%} over {len(sf.rows)} measurements")
    for note in cal.notes:
        click.echo(f"note: {note}")
    click.echo(f"wrote {output}" + (f", {report}" if report else "") + (f", {plot}" if plot else "")
               + f"; use it with --cluster {output}")


@click.command()
@click.option("--data", multiple=True, help="Published-runs JSON file, or a folder holding them such as ../shared/data "
                                           "(repeatable; default: the copies shipped in the package).")
@click.option("--cross-validate", "by", type=click.Choice(["source", "model", "gpu"]), default=None,
              help="Fit on every group but one and predict the one left out (minutes: one fit per group).")
@click.option("--few-shot", "few_shot", type=int, default=None, metavar="K",
              help="Calibrate on K rows of each source, GPU and stack (as calibrate --steps does), predict the "
                   "group's other rows: MAPE per source and group, median and worst over draws.")
@click.option("--base", "base", type=click.Choice(["left-out", "shipped"]), default="left-out",
              help="With --few-shot: start from GPU parameters fitted without the group's source (left-out, "
                   "minutes: one fit per source) or from the shipped ones.")
@click.option("--draws", "draws", type=int, default=5, help="With --few-shot: draws of K rows per group (seed 0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def validate(data, by, few_shot, base, draws, as_json):
    """Predicted vs measured step time of every published run: MAPE per source, GPU and model
    family, the worst rows, the pick inside measured sweeps, and the memory points."""
    from ..calibration.crossval import validation

    if few_shot is not None:
        _validate_few_shot(list(data) or None, few_shot, base, draws, by, as_json)
        return

    def note(group, n_train, n_test):
        if not as_json:
            click.echo(f"fold {group}: fitted on {n_train} rows, predicting {n_test}", err=True)

    result = validation(list(data) or None, by, progress=note)
    if as_json:
        click.echo(json.dumps(result, indent=2, default=float))
        return
    from ..render.validation import memory_table, summary_table, sweeps_table, worst_rows_table

    click.echo(f"# Step time, {result['mode']}: {len(result['rows'])} rows ({len(result['skipped'])} skipped)\n")
    for g in result["groupings"]:
        click.echo(summary_table(result["summary"][g], g) + "\n")
    click.echo("## Worst rows\n\n" + worst_rows_table(result["worst"]) + "\n")
    click.echo("## The formulation's pick inside each published sweep\n\n" + sweeps_table(result["ranking"]) + "\n")
    click.echo("## Memory per GPU, first stage (Korthikanti et al. 2022 Fig. 1)\n\n" + memory_table(result["memory"]))
    for r in result["skipped"]:
        click.echo(f"skipped {r['id']}: {r['reason']}")


def _validate_few_shot(data, k, base, draws, by, as_json):
    """`validate --few-shot K` (calibration/fewshot_eval.py)."""
    from ..calibration.fewshot_eval import few_shot, few_shot_sweeps
    from ..calibration.rows import published_rows
    from ..calibration.runs_fit import row_cases

    if by:
        raise InputError("--few-shot", "give either --few-shot K or --cross-validate, not both")
    if k < 2:
        raise InputError("--few-shot", f"K = {k}: calibrate needs at least 2 measured steps; give --few-shot 2 or more")
    if draws < 1:
        raise InputError("--draws", f"{draws}: give at least 1 draw")
    note = (lambda g, n: None) if as_json else (lambda g, n: click.echo(f"calibrated {' '.join(g)} ({n} rows)", err=True))
    result = few_shot(row_cases(published_rows(data)), k, base, draws, progress=note)
    result["sweeps"] = few_shot_sweeps(result)
    result.pop("_runs")
    if as_json:
        click.echo(json.dumps(result, indent=2, default=float))
        return
    from ..render.validation import few_shot_table

    click.echo(f"# Few-shot calibration, K = {k}, base {base}, {draws} draws: MAPE of the rows not drawn\n")
    click.echo(few_shot_table(result) + "\n")
    click.echo("## The pick inside each published sweep after calibration (median (worst) regret over draws)\n")
    for s in result["sweeps"]:
        click.echo(f"- {s['source']} {s['model']}, {s['num_gpus']} x {s['gpu']}: {s['regret_median']:.1%} "
                   f"({s['regret_worst']:.1%})")
