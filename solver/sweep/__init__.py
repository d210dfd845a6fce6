"""Fleet what-ifs: plan every scenario of a grid (models x clusters x batches x sequences x
precisions x constraint sets, and/or explicit scenarios) and write one row per scenario.

    from solveplan.sweep import sweep
    rows = sweep("grid.yaml", "results.csv", workers=2)         # local processes
    rows = sweep({"models": [...], "clusters": [...]}, ray="local")   # Ray tasks

Modules: `grid` (the grid file and its expansion into scenarios with stable ids), `rows` (the
columns; a scenario into its row: what a worker runs), `run` (the driver and the local
runners), `ray_runner` (Ray tasks), `output` (CSV / JSON lines / Parquet, resume), `plot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .grid import MAX_SCENARIOS, Grid, Scenario, expand, load_grid
from .rows import COLUMNS, STATUSES, TIMING_COLUMNS
from .run import DEFAULT_TIME_LIMIT_S, SweepReport, run


def sweep(grid: str | Path | Mapping[str, Any] | Grid, output: str | Path | None = None, *,
          workers: int | None = None, ray: str | None = None, resume: bool = False, overwrite: bool = False,
          time_limit_s: float = DEFAULT_TIME_LIMIT_S, batch_size: int | None = None,
          progress: bool = False, max_scenarios: int = MAX_SCENARIOS) -> list[dict]:
    """One row (a dict of `COLUMNS`) per scenario of `grid`, in scenario order.

    grid: a grid file (YAML/JSON), a mapping of the same keys, or a Grid.
    output: a .csv, .jsonl or .parquet file to write (rows stream to `OUT.partial.jsonl` while
        the sweep runs); it must not exist unless `resume` (keep its rows, plan the rest and
        re-plan FAILED rows) or `overwrite`.
    workers: local processes (default: the CPU count; 1 plans in this process), or the CPUs of
        `ray="local"`.
    ray: None (local), "local" (start Ray here) or the address of a Ray cluster.
    time_limit_s: per scenario. batch_size: scenarios per Ray task (default: automatic).
    progress: a progress bar on stderr. max_scenarios: the most scenarios the grid may span
        (default MAX_SCENARIOS, 10,000; counted before any is built).

    Raises InputError (naming the field) for a bad grid or arguments; a scenario that cannot be
    planned is a row (INVALID, INFEASIBLE, FAILED), never an exception.
    """
    return run(grid, output, workers=workers, ray=ray, resume=resume, overwrite=overwrite, time_limit_s=time_limit_s,
               batch_size=batch_size, progress=progress, max_scenarios=max_scenarios).rows


__all__ = ["sweep", "run", "SweepReport", "Grid", "Scenario", "load_grid", "expand", "COLUMNS", "STATUSES",
           "TIMING_COLUMNS", "DEFAULT_TIME_LIMIT_S"]
