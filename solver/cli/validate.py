"""`solveplan validate`: the formulation against published runs, in sample or cross-validated."""

from __future__ import annotations

import json

import click


def _row_json(p) -> dict:
    r = p.row
    return {"id": r.id, "source": r.source, "gpu": r.gpu, "model_family": r.model_family, "num_gpus": r.num_gpus,
            "measured_s": r.measured_s, "predicted_s": p.predicted_s, "error": p.error, "basis": r.basis,
            "config": p.config, "fits": p.fits, "held_out": p.held_out, "assumed": r.assumed}


@click.command()
@click.option("--data", multiple=True, help="Published-runs JSON file (repeatable; default: both files in ../shared/data).")
@click.option("--cross-validate", "by", type=click.Choice(["source", "model", "gpu"]), default=None,
              help="Fit on every group but one and predict the one left out (minutes: one fit per group).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def validate(data, by, as_json):
    """Predicted vs measured step time of every published run: MAPE per source, GPU and model
    family, the worst rows, the pick inside measured sweeps, and the memory points."""
    from ..calibration.crossval import cross_validate, in_sample, memory_points, ranking, summary, worst
    from ..calibration.rows import load_rows, published_rows
    from ..calibration.runs_fit import row_cases

    rows = published_rows(list(data) or None)
    skipped = [r for r in rows if r.skipped]
    cases = row_cases(rows, max_shapes=None if by is None else 300)
    if by is None:
        preds, fits = in_sample(cases), {}
    else:
        def note(group, n_train, n_test):
            if not as_json:
                click.echo(f"fold {group}: fitted on {n_train} rows, predicting {n_test}", err=True)
        preds, fits = cross_validate(cases, by, progress=note)
    _, mem_data = load_rows(list(data) or None)
    mem = memory_points(mem_data, rows)
    groupings = [by] if by else ["source", "gpu", "model"]
    result = {
        "mode": f"cross-validated by {by}" if by else "in sample (shipped GPU parameters)",
        "summary": {g: summary(preds, g) for g in groupings},
        "ranking": ranking(preds),
        "rows": [_row_json(p) for p in preds],
        "skipped": [{"id": r.id, "reason": r.skipped} for r in skipped],
        "folds": {g: {"values": f.values, "sd": f.sd, "rms": f.rms, "notes": f.notes} for g, f in fits.items()},
        "memory": mem,
    }
    if as_json:
        click.echo(json.dumps(result, indent=2, default=float))
        return
    from ..render.validation import memory_table, ranking_table, summary_table, worst_table

    click.echo(f"# Step time, {result['mode']}: {len(preds)} rows ({len(skipped)} skipped)\n")
    for g in groupings:
        click.echo(summary_table(result["summary"][g], g) + "\n")
    click.echo("## Worst rows\n\n" + worst_table(worst(preds, 12)) + "\n")
    click.echo("## The formulation's pick inside measured sweeps\n\n" + ranking_table(result["ranking"]) + "\n")
    click.echo("## Memory per GPU, first stage (Korthikanti et al. 2022 Fig. 1)\n\n" + memory_table(mem))
    for r in skipped:
        click.echo(f"skipped {r.id}: {r.skipped}")
