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
