"""Sweeps as Ray tasks (the `ray` extra: pip install 'solveplan[ray]').

`--ray local` starts a Ray instance on this machine (`ray.init(address="local",
num_cpus=--workers)`) and stops it at the end; `--ray ADDRESS` (`ray://head:10001`, `auto`,
`head:6379`) connects to a running cluster. If this process is already connected to Ray (a
notebook, a test session), that connection is used and left open.

What the tasks get: scenarios already resolved on this machine to JobSpecs (catalog entries,
model and cluster files and prices are inside them), so a worker reads no file. The code goes
with the connection to an existing cluster as a Ray `runtime_env` `py_modules` entry: a copy of
the installed `solveplan` package with its catalogs, staged under the import name (the source
tree's folder is `solver/`, so the package directory itself cannot be shipped as is). The
cluster's Python needs solveplan's dependencies (ortools, numpy, pydantic, pyyaml, click,
rich); `--ray local` ships nothing (the workers import this installation).

Batching: a task plans several scenarios (default: enough tasks for 4 per CPU, at most
`MAX_BATCH` scenarios each; a scenario takes 0.05-1 s, a Ray task costs a few milliseconds).
Scenarios are dealt to the batches in turn, so one model's heavy scenarios spread over tasks.
Rows stream back as tasks finish. A task that fails (its worker died, the node was lost, an
import failed) is retried `MAX_RETRIES` times, then its scenarios become FAILED rows.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from .rows import POLL_S, default_workers, failed_row, one_line, plan_batch

MAX_RETRIES = 2
MAX_BATCH = 16
TASKS_PER_CPU = 4
RAY_EXTRA = "needs Ray: pip install 'solveplan[ray]'"


def import_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise InputError("ray", RAY_EXTRA) from None
    return ray


def default_batch_size(num_items: int, num_cpus: int) -> int:
    return max(1, min(MAX_BATCH, math.ceil(num_items / (TASKS_PER_CPU * max(1, num_cpus)))))


def batches(items: list, size: int) -> list[list]:
    """`items` dealt in turn into ceil(n / size) batches of at most `size`."""
    k = math.ceil(len(items) / size) if items else 0
    return [items[j::k] for j in range(k)]


def stage_package(dest: Path) -> Path:
    """A copy of the installed solveplan package with its catalogs, as `dest/solveplan`."""
    from ..catalog import _catalog_dir

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    pkg = Path(dest) / "solveplan"
    package_dir = Path(__file__).parent.parent  # this module is solveplan/sweep/ray_runner.py
    shutil.copytree(package_dir, pkg, ignore=ignore)
    for kind, name in (("models", "catalog_models"), ("clusters", "catalog_clusters")):
        if not (pkg / name).is_dir():  # an editable install: the catalogs live beside the code
            shutil.copytree(_catalog_dir(kind), pkg / name, ignore=ignore)
    return pkg


@contextmanager
def ray_session(address: str, workers: int | None):
    """This process's Ray connection if it has one (left open), else a new one: `local` starts
    Ray here with `workers` CPUs, an address connects with the staged package as py_modules.
    Shut down (and the staging removed) at the end when this opened it."""
    ray = import_ray()
    if ray.is_initialized():
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if workers is not None and workers != cpus:
            raise InputError("workers", f"{workers}, but this process's Ray session has {cpus} CPUs: leave --workers "
                                          f"out or end that session")
        yield ray
        return
    common = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="solveplan-ray-") as tmp:
        try:
            if address == "local":
                ray.init(address="local", num_cpus=workers or default_workers(), **common)
            else:
                ray.init(address=address, runtime_env={"py_modules": [str(stage_package(Path(tmp)))]}, **common)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            what = "start Ray on this machine" if address == "local" else f"connect to the Ray cluster at {address}"
            raise InputError("ray", f"cannot {what}: {one_line(exc)[:300]}") from None
        try:
            yield ray
        finally:
            ray.shutdown()


def run_ray(items: list, address: str, *, workers: int | None, time_limit_s: float,
            batch_size: int | None, on_row, fault: dict | None = None) -> None:
    """Plan (scenario, JobSpec) items as Ray tasks in `ray_session(address, workers)`."""
    with ray_session(address, workers) as ray:
        run_tasks(ray, items, time_limit_s=time_limit_s, batch_size=batch_size, on_row=on_row, fault=fault)


def run_tasks(ray, items: list, *, time_limit_s: float, batch_size: int | None, on_row,
              check: Callable[[], None] = lambda: None, fault: dict | None = None) -> None:
    """Plan (scenario, JobSpec) items as Ray tasks on a connected `ray`; `on_row` gets each row as
    its task finishes; `check` is called while waiting (it raises to stop). `fault` ({scenario
    id: fault}, tests only) injects a failure into the task holding that scenario."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    size = batch_size or default_batch_size(len(items), cpus)
    task = ray.remote(plan_batch).options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=True)
    pending = {}
    for batch in batches(items, size):
        inject = next((fault[s.id] for s, _ in batch if fault and s.id in fault), None)
        pending[task.remote(batch, time_limit_s, inject)] = batch
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        check()
        for ref in done:
            batch = pending.pop(ref)
            try:
                rows = ray.get(ref)
            except Exception as exc:  # retried MAX_RETRIES times already
                why = one_line(f"{type(exc).__name__}: {exc}")[:300]
                rows = [failed_row(s, job, f"Ray task failed after {MAX_RETRIES} retries: {why}") for s, job in batch]
            for row in rows:
                on_row(row)
