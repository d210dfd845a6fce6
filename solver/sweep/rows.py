"""One row per scenario: the columns, and planning a scenario into its row.

This module is what runs inside a worker (a local process or a Ray task): `plan_batch` takes
scenarios already resolved to JobSpecs (the driver reads the catalogs and files, so a worker
needs nothing but the package) and returns their rows. A scenario that raises is a FAILED row,
never an exception out of the batch.

Columns are typed (`COLUMNS`) so every output format writes and reads them back alike.
`wall_time_s` is the only column that depends on the machine and the load: leave it out when
comparing sweeps (`TIMING_COLUMNS`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from ..errors import InputError
from ..plan import gpu_hours_per_million_tokens
from ..search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN
from .grid import Scenario, canonical_json

POLL_S = 0.2  # how often a waiting driver (process pool or Ray) looks for Ctrl-C


def default_workers() -> int:
    return os.cpu_count() or 1

# name -> type (str, int, float or bool); every value may also be None (empty)
COLUMNS: dict[str, type] = {
    "scenario_id": str,
    "model": str, "cluster": str, "global_batch_size": int, "seq_length": int, "precision": str, "constraints": str,
    "framework": str, "gpu": str, "num_gpus": int,
    "status": str, "reason": str,
    "step_time_s": float, "bound_step_time_s": float, "gap": float,
    "tp": int, "pp": int, "dp": int, "cp": int, "vp": int, "micro_batch_size": int, "num_microbatches": int,
    "recompute": str, "sequence_parallel": bool, "zero": int, "ep": int, "etp": int, "layers_per_stage": str,
    "tokens_per_s": float, "mfu": float, "model_tflops_per_gpu": float,
    "peak_memory_bytes": float, "capacity_bytes": float,
    "gpu_hours_per_million_tokens": float, "price_per_gpu_hour_usd": float, "cost_per_million_tokens_usd": float,
    "speedup_over_textbook": float,
    "prefer": str, "step_time_lo_s": float, "step_time_hi_s": float, "interval_coverage": float,
    "fastest_step_time_s": float, "tolerance_rel": float, "departures": str, "energy_kwh_per_million_tokens": float,
    "wall_time_s": float,
}
TIMING_COLUMNS = ("wall_time_s",)
# OPTIMAL/FEASIBLE/INFEASIBLE/UNKNOWN are the solver's; INVALID: the scenario's input does not
# resolve (unknown model, bad cluster size, ...); FAILED: planning crashed or its task was lost.
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, "INVALID", "FAILED")
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "num_microbatches", "recompute",
                 "sequence_parallel", "zero", "ep", "etp")


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def _label(ref: Any) -> str:
    return ref if isinstance(ref, str) else canonical_json(ref)


def resolve(scenario: Scenario):
    """The scenario's JobSpec (with the grid's price on its cluster); InputError when it does not resolve."""
    from ..admission.limits import as_job

    job = as_job(scenario.job_mapping(), field="")
    price = scenario.inputs.get("price_per_gpu_hour_usd")
    if price is not None:
        own = job.cluster.price_per_gpu_hour_usd
        if own is not None and own != price:
            raise InputError("price_per_gpu_hour_usd", f"the grid says {price:g} USD but cluster {job.cluster.name} "
                                                       f"says {own:g}; give the price in one place")
        job = job.model_copy(update={"cluster": job.cluster.model_copy(update={"price_per_gpu_hour_usd": price})})
    return job


def base_row(scenario: Scenario, job=None) -> dict:
    """The input columns (resolved values where the job resolved), everything else empty."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    inp = scenario.inputs
    row.update(scenario_id=scenario.id, model=_label(inp["model"]), cluster=_label(inp["cluster"]),
               global_batch_size=inp.get("global_batch_size"), seq_length=inp.get("seq_length"),
               precision=inp.get("precision"), price_per_gpu_hour_usd=inp.get("price_per_gpu_hour_usd"),
               constraints=canonical_json(inp.get("constraints") or {}), prefer=inp.get("prefer"),
               framework=inp.get("framework"))
    if job is not None:
        row.update(prefer=job.prefer, global_batch_size=job.global_batch_size, seq_length=job.seq_length,
                   precision=job.precision, framework=job.framework, gpu=job.cluster.gpu.name, num_gpus=job.cluster.num_gpus,
                   price_per_gpu_hour_usd=job.cluster.price_per_gpu_hour_usd)
    return row


def invalid_row(scenario: Scenario, exc: InputError) -> dict:
    msg = one_line(exc.message)
    reason = msg if not exc.field or msg.startswith(exc.field) else f"{exc.field}: {msg}"
    return {**base_row(scenario), "status": "INVALID", "reason": reason}


def failed_row(scenario: Scenario, job, reason: str) -> dict:
    return {**base_row(scenario, job), "status": "FAILED", "reason": one_line(reason)}


def result_row(scenario: Scenario, job, result, wall_time_s: float) -> dict:
    """The row of a solved scenario (any solver status)."""
    row = base_row(scenario, job)
    row.update(status=result.status, bound_step_time_s=result.bound_step_time_s, gap=result.gap,
               wall_time_s=wall_time_s)
    plan = result.plan
    if plan is None:
        if result.status == INFEASIBLE and result.shortfall is not None:
            row["reason"] = one_line(result.shortfall.message)
        else:
            row["reason"] = one_line("; ".join(result.notes) or f"no plan ({result.status})")
        return finite(row)
    if result.status != OPTIMAL:
        row["reason"] = one_line("; ".join(result.notes) or f"time limit reached (gap {result.gap})")
    par = plan.parallel
    hours = gpu_hours_per_million_tokens(plan.num_gpus, plan.step_time_s, job.tokens_per_step)
    price = job.cluster.price_per_gpu_hour_usd
    row.update({k: getattr(par, k) for k in PARALLEL_KEYS})
    row.update(step_time_s=plan.step_time_s, layers_per_stage=",".join(str(x) for x in plan.layers_per_stage),
               tokens_per_s=plan.tokens_per_s, mfu=plan.mfu, model_tflops_per_gpu=plan.model_tflops_per_gpu,
               peak_memory_bytes=plan.peak_memory_bytes, capacity_bytes=plan.capacity_bytes,
               gpu_hours_per_million_tokens=hours,
               cost_per_million_tokens_usd=price * hours if price is not None else None)
    textbook = getattr(result, "textbook", None)
    if textbook is not None and textbook.speedup is not None:
        row["speedup_over_textbook"] = textbook.speedup
    row.update(_uncertainty(result, job))
    return finite(row)


def _uncertainty(result, job) -> dict:
    """The interval columns, the fastest plan's step and the departures (prefer simple), energy.
    A plan the time limit left without intervals (the planner's incumbent) gets them here."""
    from ..calibration.intervals import with_interval

    plan, tb, cost = result.plan, getattr(result, "tie_break", None), getattr(result, "cost", None)
    if plan.step_time_interval_s is None:
        plan = with_interval(job, plan)
    out: dict[str, Any] = {"step_time_lo_s": plan.step_time_interval_s[0],
                           "step_time_hi_s": plan.step_time_interval_s[1], "interval_coverage": plan.interval_coverage}
    out["fastest_step_time_s"] = tb.fastest.step_time_s if tb is not None and tb.fastest else plan.step_time_s
    if tb is not None:
        out.update(departures="; ".join(tb.departures), tolerance_rel=tb.tolerance_rel)
    if cost is not None:
        out["energy_kwh_per_million_tokens"] = cost.energy_kwh_per_million_tokens
    return out


def finite(row: dict) -> dict:
    """The row with infinite or NaN numbers as None (empty), which every format can hold."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


_CACHE = None


def _cache():
    """The worker process's result cache, emptied: `api.plan` runs its work on the cache's
    threads (that is how it honours the time limit), but no answer is reused from an earlier
    scenario, so a row never depends on what the worker planned before (and a benchmark that
    repeats a grid measures planning, not look-ups)."""
    global _CACHE
    if _CACHE is None:
        from ..admission.cache import ResultCache

        _CACHE = ResultCache(maxsize=4, max_inflight=64, workers=1)
    _CACHE.clear()
    return _CACHE


def plan_one(scenario: Scenario, job, time_limit_s: float) -> dict:
    """The scenario's row: `api.plan` (CP-SAT, one search worker, fixed seed) within the time limit."""
    from ..admission.planner import plan

    t0 = time.perf_counter()
    try:
        result = plan(job, time_limit_s=time_limit_s, cache=_cache())
    except InputError as exc:
        return invalid_row(scenario, exc)
    except Exception as exc:  # a bug or a resource problem in one scenario must not end the sweep
        return {**failed_row(scenario, job, f"{type(exc).__name__}: {exc}"), "wall_time_s": time.perf_counter() - t0}
    return result_row(scenario, job, result, time.perf_counter() - t0)


def plan_batch(items: list[tuple[Scenario, Any]], time_limit_s: float, fault: dict | None = None) -> list[dict]:
    """Rows of (scenario, JobSpec) pairs, in order. `fault` injects failures for the tests of
    the retry path: {"raise": True} raises, {"exit_once": path} ends the worker process once."""
    if fault:
        _inject(fault)
    return [plan_one(s, job, time_limit_s) for s, job in items]


def _inject(fault: dict) -> None:
    import os
    from pathlib import Path

    if fault.get("raise"):
        raise RuntimeError("injected task failure")
    marker = fault.get("exit_once")
    if marker and not Path(marker).exists():
        Path(marker).write_text("crashed once")
        os._exit(1)
