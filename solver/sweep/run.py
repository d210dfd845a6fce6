"""Running a sweep: expand the grid, skip what a resumed output already has, resolve each
scenario to a JobSpec on this machine (catalogs and spec files are read here; a scenario that
does not resolve is an INVALID row), plan the rest in this process, in a pool of local
processes or as Ray tasks, and write the rows in scenario order.

Determinism: each scenario is planned by `api.plan` with one CP-SAT worker and a fixed seed
(its two-phase canonical solve gives the same plan whatever ran before), and the rows are
written in scenario order, so the output is the same for any number of workers and with Ray
-- apart from `wall_time_s`, and from scenarios that reach the time limit (FEASIBLE or UNKNOWN:
how far the solver got depends on the load).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .grid import MAX_SCENARIOS, Grid, Scenario, expand, load_grid
from .output import Output
from .rows import POLL_S, default_workers, failed_row, invalid_row, plan_one, resolve

DEFAULT_TIME_LIMIT_S = 60.0

Item = tuple[Scenario, Any]  # (scenario, its JobSpec)
OnRow = Callable[[dict], None]


@dataclass
class SweepReport:
    rows: list[dict]  # one per scenario of the grid, in scenario order
    planned: int = 0  # rows produced by this run (the others were kept from the output)
    kept_other: int = 0  # rows of the output whose scenarios are not in this grid (kept after the grid's rows)
    wall_time_s: float = 0.0
    mode: str = ""
    counts: dict[str, int] = field(default_factory=dict)


def _check_args(workers: int | None, time_limit_s: float, batch_size: int | None) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError("workers", f"must be a positive number of processes (got {workers!r})")
    if not isinstance(time_limit_s, (int, float)) or not math.isfinite(time_limit_s) or time_limit_s <= 0:
        raise InputError("time_limit_s", f"must be a positive number of seconds per scenario (got {time_limit_s!r})")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InputError("batch_size", f"must be a positive number of scenarios per Ray task (got {batch_size!r})")


def run(grid: str | Path | Mapping[str, Any] | Grid, output: str | Path | None = None, *,
        workers: int | None = None, ray: str | None = None, resume: bool = False, overwrite: bool = False,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S, batch_size: int | None = None,
        progress: bool = False, prefer: str | None = None, max_scenarios: int = MAX_SCENARIOS) -> SweepReport:
    """Plan every scenario of `grid` (a grid file, a mapping or a Grid); see `solveplan.sweep.sweep`.
    `prefer`: the grid's `prefer` for every scenario (fastest or simple), overriding the file's."""
    t0 = time.perf_counter()
    _check_args(workers, time_limit_s, batch_size)
    if ray is not None and ray != "local" and workers is not None:
        raise InputError("workers", f"sets the processes of a local pool or of --ray local; the Ray cluster at "
                                      f"{ray} runs tasks on its own CPUs (leave --workers out)")
    if batch_size is not None and ray is None:
        raise InputError("batch_size", "sets the scenarios per Ray task; give it with --ray")
    if ray is not None:
        from .ray_runner import import_ray, ray_session, run_tasks

        import_ray()  # the missing extra is named before any work
    loaded, base = load_grid(grid)
    if prefer is not None:
        if prefer not in ("fastest", "simple"):
            raise InputError("prefer", f"{prefer!r}: choose fastest or simple")
        loaded = loaded.model_copy(update={"prefer": prefer})
    scenarios = expand(loaded, base, max_scenarios=max_scenarios)
    out = Output(output, resume=resume, overwrite=overwrite) if output is not None else None
    rows: dict[str, dict] = dict(out.done()) if out is not None else {}
    rows = {s.id: rows[s.id] for s in scenarios if s.id in rows}
    todo = [s for s in scenarios if s.id not in rows]
    items, invalid = _resolve_all(todo)
    n_workers = workers or default_workers()
    mode = (f"ray {ray}" if ray is not None else
            "in-process" if n_workers == 1 or len(items) <= 1 else f"{min(n_workers, len(items))} processes")
    bar = _Progress(len(todo), enabled=progress)

    def on_row(row: dict) -> None:
        rows[row["scenario_id"]] = row
        if out is not None:
            out.append(row)
        bar.advance(row["status"], row)

    kept_other = 0
    with ExitStack() as stack:
        # Ray is started (or connected) before the first row, so a failure to connect leaves no output
        session = stack.enter_context(ray_session(ray, workers)) if ray is not None and items else None
        try:
            with bar, _Interrupt() as interrupt:
                for row in invalid:
                    on_row(row)
                if session is not None:
                    run_tasks(session, items, time_limit_s=time_limit_s, batch_size=batch_size, on_row=on_row,
                              check=interrupt.check)
                elif items:
                    run_local(items, n_workers, time_limit_s, on_row, check=interrupt.check)
        finally:
            if out is not None:
                kept_other = out.finish([s.id for s in scenarios], rows)
    ordered = [rows[s.id] for s in scenarios if s.id in rows]
    counts: dict[str, int] = {}
    for r in ordered:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return SweepReport(rows=ordered, planned=len(todo), kept_other=kept_other, wall_time_s=time.perf_counter() - t0,
                       mode=mode, counts=counts)


def _resolve_all(scenarios: list[Scenario]) -> tuple[list[Item], list[dict]]:
    """(scenario, JobSpec) for the scenarios that resolve; an INVALID row for each that does not."""
    items, invalid = [], []
    for s in scenarios:
        try:
            items.append((s, resolve(s)))
        except InputError as exc:
            invalid.append(invalid_row(s, exc))
    return items, invalid


def run_local(items: list[Item], workers: int, time_limit_s: float, on_row: OnRow,
              check: Callable[[], None] = lambda: None) -> None:
    """Plan in this process (one worker) or in a pool of fresh processes, one scenario per task
    (a scenario takes 0.05-1 s; the pool's per-task cost is about a millisecond). `check` is
    called between rows and while waiting (it raises to stop)."""
    if workers <= 1 or len(items) <= 1:
        for s, job in items:
            on_row(plan_one(s, job, time_limit_s))
            check()
        return
    # spawn, not fork: this process may hold threads (the progress bar, the API's cache workers)
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=ctx, initializer=_init_worker,
                               initargs=(os.getpid(),))
    try:
        futures = {pool.submit(plan_one, s, job, time_limit_s): (s, job) for s, job in items}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for fut in done:
                s, job = futures[fut]
                try:
                    row = fut.result()
                except Exception as exc:  # the worker process died (killed, out of memory)
                    row = failed_row(s, job, f"worker process failed: {type(exc).__name__}: {exc}")
                on_row(row)
            check()
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop the pool now (Ctrl-C, SIGTERM, an error): queued scenarios are cancelled and the
    workers planning one are terminated, not waited for (a plan may take its whole time
    limit), so nothing outlives the sweep."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            p.terminate()
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            p.join(5)


def _init_worker(parent_pid: int) -> None:
    """Pool workers leave Ctrl-C to the driver, which stops the sweep and writes the rows done;
    and they die with the driver even when it is killed with SIGKILL (Linux: the parent-death
    signal), so no worker -- nor the resource tracker they keep alive -- outlives it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the driver died before the signal was armed
        os._exit(1)


class _Interrupt:
    """Ctrl-C or SIGTERM sets a flag that `check()` turns into KeyboardInterrupt between rows,
    so it never lands inside a lock of the pool's machinery (the sweep then stops its workers
    and writes the rows done); a second signal interrupts at once."""

    def __init__(self):
        self.flag = threading.Event()
        self.previous: dict = {}

    def _handler(self, signum, frame):
        if self.flag.is_set():
            raise KeyboardInterrupt
        self.flag.set()

    def check(self) -> None:
        if self.flag.is_set():
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


class _Progress:
    """A rich progress bar on stderr (or nothing)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled and total > 0
        self.counts: dict[str, int] = {}
        self._progress: Any = None  # a rich Progress (imported only when enabled) and its task
        self._task: Any = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                      console=Console(stderr=True))
            self._progress.__enter__()
            self._task = self._progress.add_task("", total=self.total)
        return self

    def advance(self, status: str, row: dict | None = None) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        if self._progress is not None:
            desc = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            if row is not None and row.get("step_time_s") is not None:  # what the last scenario found
                desc += f" | last: {row['model']} on {row['cluster']} {row['step_time_s']:.4g} s/step"
            self._progress.update(self._task, advance=1, description=desc)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False
