"""`solveplan sweep GRID.yaml -o results.csv`: plan every scenario of a grid (models x
clusters x batches x sequences x precisions x constraint sets, and/or explicit scenarios), one
row per scenario, locally over processes or as Ray tasks; `solveplan sweep-plot results.csv
-o plot.png`: tokens/s and cost per million tokens against the GPU count.

Exit codes: 0 when the sweep finished (INVALID, INFEASIBLE and FAILED scenarios are rows, not
errors), 2 on a bad grid or bad options, 130 when interrupted (the rows done so far are in the
output; --resume goes on from there).
"""

from __future__ import annotations

import sys

import click

from ..specs.writing import PLOT_SUFFIXES, check_output
from .options import OUTPUT, SECONDS


@click.command()
@click.argument("grid_file", metavar="GRID.yaml", type=str)
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="Results file: .csv, .jsonl or .parquet (the suffix picks the format).")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Local processes, or the CPUs of --ray local (default: the CPU count; 1 plans in this process).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run as Ray tasks: 'local' starts Ray on this machine; an address (ray://head:10001, auto) "
                   "uses a running cluster. Needs pip install 'solveplan[ray]'.")
@click.option("--resume", is_flag=True, default=False,
              help="Keep the rows already in the output and plan the rest (FAILED rows are planned again).")
@click.option("--overwrite", is_flag=True, default=False, help="Replace an existing output.")
@click.option("--time-limit", "time_limit_s", type=SECONDS, default=None,
              help="Seconds per scenario (default 60).")
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=None,
              help="Scenarios per Ray task (default: automatic, at most 16).")
@click.option("--plot", "plot_path", default=None, type=OUTPUT, help="Also write the plot (.png/.pdf/.svg; needs the plot extra).")
@click.option("--prefer", type=click.Choice(["fastest", "simple"]), default=None,
              help="Every scenario's preference (as `optimize --prefer`), over the grid's `prefer`.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="The progress bar on stderr (default: when stderr is a terminal).")
@click.option("-q", "--quiet", is_flag=True, default=False, help="No progress bar and no summary.")
@click.option("--max-scenarios", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True,
              help="The most scenarios the grid may span (counted before any is built).")
def sweep(grid_file, output, workers, ray_address, resume, overwrite, time_limit_s, batch_size, plot_path, prefer,
          show_progress, quiet, max_scenarios):
    """Plan every scenario of GRID.yaml; write one row per scenario to -o.

    \b
    GRID.yaml (see the README):
      models: [gpt3-13b, llama2-70b]
      clusters: [a100x64, {family: h100, num_gpus: [64, 256], price_per_gpu_hour_usd: 2.5}]
      global_batch_sizes: [512, 1024]
    """
    from ..sweep import DEFAULT_TIME_LIMIT_S, run
    from ..sweep.plot import plot_rows

    if plot_path is not None:
        check_output(plot_path, "--plot", PLOT_SUFFIXES)
    try:
        report = run(grid_file, output, workers=workers, ray=ray_address, resume=resume, overwrite=overwrite,
                     time_limit_s=DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s,
                     batch_size=batch_size, prefer=prefer,
                     progress=not quiet and (sys.stderr.isatty() if show_progress is None else show_progress),
                     max_scenarios=max_scenarios)
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None
    if plot_path is not None:
        plot_rows(report.rows, plot_path)
    if not quiet:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(report.counts.items(), key=lambda kv: -kv[1]))
        rate = report.planned / report.wall_time_s if report.wall_time_s > 0 else 0.0
        kept = len(report.rows) - report.planned
        lines = [f"{len(report.rows)} scenarios: {counts}",
                 f"planned {report.planned} ({report.mode}) in {report.wall_time_s:.1f} s, {rate:.2f} scenarios/s"
                 + (f"; {kept} kept from the output" if kept else ""),
                 f"wrote {output}" + (f" and {plot_path}" if plot_path else "")]
        if report.kept_other:
            lines.append(f"note: {report.kept_other} rows of {output} are scenarios not in this grid; kept after its rows")
        click.echo("\n".join(lines), err=True)


@click.command("sweep-plot")
@click.argument("results", metavar="RESULTS", type=str)
@click.option("-o", "--output", required=True, type=OUTPUT, help="Plot file (.png, .pdf or .svg).")
def sweep_plot(results, output):
    """Plot a sweep's RESULTS (.csv/.jsonl/.parquet): tokens/s and cost per million tokens
    against GPUs, per model and GPU type, with the chosen degrees marked."""
    from ..sweep.output import read_rows
    from ..sweep.plot import plot_rows

    plot_rows(read_rows(results), output, field="--output")
    click.echo(f"wrote {output}", err=True)
