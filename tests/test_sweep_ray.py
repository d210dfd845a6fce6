"""The same rows whatever runs the sweep: in this process, two local processes, Ray local; Ray's
retries and failed tasks. One Ray session (2 CPUs) serves the module; the sweeps find it
already started and use it (that is the documented behaviour of --ray when this process is
connected). Ray start-up costs about 5 s here.

Ray tests are marked `ray`: `python -m pytest -m ray` runs only them, `-m "not ray"` leaves
them out where Ray cannot start (the `test` extra installs Ray, so CI runs them)."""

from __future__ import annotations

import pytest

from solveplan.sweep import TIMING_COLUMNS, expand, load_grid, run, sweep
from solveplan.sweep.ray_runner import MAX_RETRIES, batches, default_batch_size, run_ray
from solveplan.sweep.run import _resolve_all

pytestmark = pytest.mark.ray

# the acceptance grid: 4 models x 5 clusters x 2 batches = 40 scenarios
GRID_40 = {"models": ["gpt3-125m", "gpt3-1.3b", "llama2-7b", "gpt3-13b"],
           "clusters": ["a100x8", "a100-40gbx16", {"family": "h100", "num_gpus": [8, 32], "price_per_gpu_hour_usd": 3.0},
                        "v100x16"],
           "global_batch_sizes": [256, 512]}
MIXED = {"models": ["gpt3-1.3b", "no-such-model", "llama2-70b"], "clusters": ["a100x8", "a100x12"],
         "constraints": [{}, {"tp": [3]}]}


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[test]' (or '.[ray]')")
    import logging
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def reference():
    """The 40 rows planned in this process, one after the other."""
    return sweep(GRID_40, workers=1)


def test_reference_grid_plans(reference):
    assert len(reference) == 40 and {r["status"] for r in reference} == {"OPTIMAL"}
    assert len({r["scenario_id"] for r in reference}) == 40
    assert len({(r["tp"], r["pp"], r["dp"]) for r in reference}) > 3  # not one shape for everything


def test_two_processes_give_the_same_rows(reference, tmp_path):
    out = tmp_path / "two.csv"
    rep = run(GRID_40, out, workers=2)
    assert rep.mode == "2 processes"
    assert strip(rep.rows) == strip(reference)


def test_ray_local_gives_the_same_rows(ray_session, reference, tmp_path):
    out = tmp_path / "ray.jsonl"
    rep = run(GRID_40, out, ray="local", batch_size=3)  # 14 tasks of at most 3 scenarios
    assert rep.mode == "ray local"
    assert strip(rep.rows) == strip(reference)
    from solveplan.sweep.output import read_rows

    assert strip(read_rows(out)) == strip(reference)


def test_ray_rows_for_invalid_and_infeasible_scenarios(ray_session):
    local = sweep(MIXED, workers=1)
    remote = sweep(MIXED, ray="local")
    assert strip(remote) == strip(local)
    assert {r["status"] for r in remote} == {"OPTIMAL", "INFEASIBLE", "INVALID"} and len(remote) == 12


def test_failed_task_is_retried_then_recorded(ray_session, tmp_path):
    scenarios = expand(*load_grid({"models": ["gpt3-125m", "gpt3-1.3b"], "clusters": ["a100x8", "h100x8"]}))
    items, invalid = _resolve_all(scenarios)
    assert not invalid and len(items) == 4
    rows = []
    marker = tmp_path / "crashed"
    # batches of 1: scenario 0's worker process dies once (the retry plans it); scenario 1's
    # task raises every time (FAILED after the retries); the others plan
    fault = {scenarios[0].id: {"exit_once": str(marker)}, scenarios[1].id: {"raise": True}}
    run_ray(items, "local", workers=None, time_limit_s=60, batch_size=1, on_row=rows.append, fault=fault)
    got = {r["scenario_id"]: r for r in rows}
    assert len(rows) == 4 and marker.exists()
    assert got[scenarios[0].id]["status"] == "OPTIMAL"
    failed = got[scenarios[1].id]
    assert failed["status"] == "FAILED" and f"after {MAX_RETRIES} retries" in failed["reason"]
    assert "injected task failure" in failed["reason"] and failed["num_gpus"] == 8
    assert {got[s.id]["status"] for s in scenarios[2:]} == {"OPTIMAL"}


def test_workers_must_match_a_running_session(ray_session):
    from solveplan.errors import InputError

    with pytest.raises(InputError, match="--workers"):
        sweep(MIXED, ray="local", workers=3)


def test_batching():
    assert default_batch_size(40, 2) == 5 and default_batch_size(10_000, 2) == 16 and default_batch_size(3, 8) == 1
    parts = batches(list(range(10)), 4)
    assert parts == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert batches([], 4) == []
