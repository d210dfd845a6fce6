"""How a published row's job is predicted (the one rule, for `runs_fit.RowCase` and the readers'
`unread_sources.best_of`): its candidate shapes with their layer splits -- the pipeline layout the row
states, else the default splits -- and the fastest of them that fits in memory, or the fastest when none
fits (the run ran: it is predicted by a configuration it could have run)."""

from __future__ import annotations

import numpy as np

from ..formulation.job import job_coefficients
from ..formulation.pipeline import step_time_batch
from ..formulation.splits import default_splits, layout_splits
from ..space.enumeration import enumerate_shapes


def candidate_shapes(job, layout: str | None):
    """(the job's legal shapes, their layer splits)."""
    shapes = enumerate_shapes(job).shapes
    layers = default_splits(job.model, shapes) if layout is None else layout_splits(job.model, layout, shapes)
    return shapes, layers


def fastest_fitting(job, shapes, layers) -> tuple[float, int, bool]:
    """(step time s, index of the shape chosen, whether it fits): the fastest shape that fits, else the fastest."""
    step, _, fits = step_time_batch(job_coefficients(job, shapes), layers)
    pool = np.where(fits, step, np.inf) if fits.any() else step
    k = int(np.argmin(pool))
    return float(step[k]), k, bool(fits[k])


def best_settings(base, choices: list[list[dict]], layout: str | None):
    """`base` with one value of each list of `choices` (settings a row leaves unstated): the combination whose
    best configuration fits in memory when any does (the run ran) and is predicted fastest; a combination the
    job's own rules refuse is not tried. `base` itself when nothing is to choose and some configuration is legal;
    None when no combination has a legal configuration (the two row readers: moe_rows, unread_sources)."""
    from itertools import product

    from ..specs import JobSpec

    if not choices:
        return base if len(candidate_shapes(base, layout)[0]) else None
    best, best_key, fields = None, (2, float("inf")), base.model_dump()
    for values in product(*choices):
        try:
            trial = JobSpec.model_validate({**fields, **{k: v for u in values for k, v in u.items()}})
        except ValueError:
            continue
        shapes, layers = candidate_shapes(trial, layout)
        if not len(shapes):
            continue
        step, _, fits = fastest_fitting(trial, shapes, layers)
        if (0 if fits else 1, step) < best_key:
            best, best_key = trial, (0 if fits else 1, step)
    return best
