"""`solveplan sweep`: the grid schema, rows for every scenario (invalid and infeasible ones
included), cost columns, resume, output formats, the CLI and the plot. Local runs only; the
worker-count and Ray comparisons are in test_sweep_ray.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from solveplan import api
from solveplan.errors import InputError
from solveplan.sweep import COLUMNS, TIMING_COLUMNS, expand, load_grid, run, sweep
from solveplan.sweep.output import read_rows, write_rows
from solveplan.sweep.rows import gpu_hours_per_million_tokens

# unknown model, a cluster size that is not a multiple of the node, a model too large for its
# GPUs, constraints no shape meets -- and scenarios that plan
MIXED = {
    "models": ["gpt3-1.3b", "no-such-model", "llama2-70b"],
    "clusters": ["a100x8", "a100x12"],
    "global_batch_sizes": [512],
    "constraints": [{}, {"tp": [3]}],
}


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def by(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


@pytest.fixture(scope="module")
def mixed_rows():
    return sweep(MIXED, workers=1)


# ------------------------------------------------------------------ grid
def test_product_order_ids_and_pools():
    grid = {"models": ["gpt3-13b", "llama2-7b"],
            "clusters": ["a100x64", {"family": "h100", "num_gpus": [64, 128], "price_per_gpu_hour_usd": 2.5}],
            "global_batch_sizes": [512, 1024]}
    scenarios = expand(*load_grid(grid))
    assert len(scenarios) == 2 * 3 * 2
    assert [s.index for s in scenarios] == list(range(12))
    assert [(s.inputs["model"], s.inputs["cluster"], s.inputs["global_batch_size"]) for s in scenarios[:4]] == [
        ("gpt3-13b", "a100x64", 512), ("gpt3-13b", "a100x64", 1024), ("gpt3-13b", "h100x64", 512),
        ("gpt3-13b", "h100x64", 1024)]
    assert scenarios[2].inputs["price_per_gpu_hour_usd"] == 2.5 and "price_per_gpu_hour_usd" not in scenarios[0].inputs
    assert len({s.id for s in scenarios}) == 12
    # ids hash the inputs, not the position: reordering the grid keeps them
    again = expand(*load_grid({**grid, "models": ["llama2-7b", "gpt3-13b"]}))
    assert {s.id for s in again} == {s.id for s in scenarios}
    # an explicit scenario equal to a product one is its id; {} constraints mean none
    explicit = expand(*load_grid({"scenarios": [{"model": "gpt3-13b", "cluster": "a100x64",
                                                 "global_batch_size": 512, "constraints": {}}]}))
    assert explicit[0].id == scenarios[0].id


@pytest.mark.parametrize("grid, field, words", [
    ({"models": [], "clusters": ["a100x8"]}, "models", "empty list"),
    ({"models": ["a"], "clusters": ["a100x8"], "constraints": [{"tp": []}]}, "constraints[0].tp", "empty list"),
    ({"models": ["a"], "clusters": ["a100x8"], "batch": [1]}, "batch", "unknown key"),
    ({"models": ["a"], "clusters": [{"family": "h100", "num_gpus": [8], "price": 2}]}, "clusters[0].price", "unknown key"),
    ({"models": ["a"], "clusters": [{"family": "h100", "num_gpus": [8], "price_per_gpu_hour_usd": -1}]},
     "clusters[0].price_per_gpu_hour_usd", "greater than 0"),
    ({"models": ["a"]}, "clusters", "needs both"),
    ({"global_batch_sizes": [8]}, "models", "needs both"),
    ({}, "grid", "nothing to plan"),
    ({"models": ["a", "a"], "clusters": ["a100x8"]}, "models[1]", "repeats models[0]"),
    ({"models": ["a"], "clusters": ["h100x8", {"family": "h100", "num_gpus": [8]}]},
     "clusters (after pools are expanded)[1]", "repeats"),
    ({"models": [3], "clusters": ["a100x8"]}, "models[0]", "model name"),
    ({"models": ["a"], "clusters": ["a100x8"], "constraints": [{"tpp": [1]}]}, "constraints[0].tpp", "unknown key"),
    ({"models": ["a"], "clusters": ["a100x8"], "precisions": ["fp32"]}, "precisions[0]", "bf16"),
    ({"scenarios": [{"model": "a"}]}, "scenarios[0].cluster", "missing"),
    ({"scenarios": [{"model": "a", "cluster": "a100x8", "tp": 8}]}, "scenarios[0].tp", "unknown key"),
    ({"models": ["a"], "clusters": ["a100x8"], "scenarios": [{"model": "a", "cluster": "a100x8"}]},
     "scenarios[0]", "same scenario"),
])
def test_bad_grids_name_the_field(grid, field, words):
    with pytest.raises(InputError) as exc:
        expand(*load_grid(grid))
    assert exc.value.field == field and words in str(exc.value)


# ------------------------------------------------------------------ rows
def test_every_scenario_is_a_row_with_its_status(mixed_rows):
    rows = mixed_rows
    assert len(rows) == 3 * 2 * 2 and list(rows[0]) == list(COLUMNS)
    invalid_model = by(rows, model="no-such-model")
    assert len(invalid_model) == 4 and all(r["status"] == "INVALID" for r in invalid_model)
    assert "unknown model 'no-such-model'" in invalid_model[0]["reason"]
    bad_size = by(rows, model="gpt3-1.3b", cluster="a100x12")
    assert {r["status"] for r in bad_size} == {"INVALID"} and "multiple of 8" in bad_size[0]["reason"]
    no_shape = by(rows, model="gpt3-1.3b", cluster="a100x8", constraints='{"tp":[3]}')[0]
    assert no_shape["status"] == "INFEASIBLE" and "no legal parallel shape" in no_shape["reason"]
    too_big = by(rows, model="llama2-70b", cluster="a100x8", constraints="{}")[0]
    assert too_big["status"] == "INFEASIBLE" and "memory is short" in too_big["reason"]
    assert too_big["num_gpus"] == 8 and too_big["tp"] is None
    ok = by(rows, model="gpt3-1.3b", cluster="a100x8", constraints="{}")[0]
    assert ok["status"] == "OPTIMAL" and ok["reason"] is None
    assert ok["tp"] * ok["pp"] * ok["dp"] * ok["cp"] == ok["num_gpus"] == 8
    assert sum(int(x) for x in ok["layers_per_stage"].split(",")) == 24
    assert ok["peak_memory_bytes"] <= ok["capacity_bytes"]


def test_row_matches_api_plan_and_costs():
    grid = {"scenarios": [{"model": "gpt3-13b", "cluster": "a100x64", "global_batch_size": 512,
                           "price_per_gpu_hour_usd": 2.0},
                          {"model": "gpt3-13b", "cluster": "h100x64", "global_batch_size": 512}]}
    priced, unpriced = sweep(grid, workers=1)
    res = api.plan({"model": "gpt3-13b", "cluster": "a100x64", "global_batch_size": 512}, time_limit_s=60)
    p = res.plan
    assert priced["status"] == res.status == "OPTIMAL"
    assert priced["step_time_s"] == p.step_time_s and priced["tokens_per_s"] == p.tokens_per_s
    assert (priced["tp"], priced["pp"], priced["dp"]) == (p.parallel.tp, p.parallel.pp, p.parallel.dp)
    hours = 64 * p.step_time_s / 3600 / (512 * 2048 / 1e6)
    assert priced["gpu_hours_per_million_tokens"] == pytest.approx(hours, rel=1e-12)
    assert priced["cost_per_million_tokens_usd"] == pytest.approx(2.0 * hours, rel=1e-12)
    assert unpriced["price_per_gpu_hour_usd"] is None and unpriced["cost_per_million_tokens_usd"] is None
    assert unpriced["gpu_hours_per_million_tokens"] == pytest.approx(
        gpu_hours_per_million_tokens(64, unpriced["step_time_s"], 512 * 2048))


def test_price_from_a_cluster_file_and_conflicting_prices(tmp_path):
    (tmp_path / "priced.yaml").write_text(yaml.safe_dump({
        "gpu": "h100-sxm", "num_nodes": 8, "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400,
        "price_per_gpu_hour_usd": 3.5}))
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"model": "gpt3-13b", "cluster": "priced.yaml", "global_batch_size": 512},
        {"model": "gpt3-13b", "cluster": "priced.yaml", "global_batch_size": 512, "price_per_gpu_hour_usd": 2.0},
    ]}))
    own, conflict = sweep(tmp_path / "grid.yaml", workers=1)  # the file is found beside the grid
    assert own["status"] == "OPTIMAL" and own["price_per_gpu_hour_usd"] == 3.5
    assert own["cost_per_million_tokens_usd"] == pytest.approx(3.5 * own["gpu_hours_per_million_tokens"])
    assert conflict["status"] == "INVALID" and "price in one place" in conflict["reason"]


# ------------------------------------------------------------------ output and resume
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_output_round_trips(tmp_path, mixed_rows, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"out{suffix}"
    write_rows(path, mixed_rows)
    assert read_rows(path) == mixed_rows


def test_resume_skips_done_scenarios_and_appends_the_rest(tmp_path, mixed_rows):
    first = {**MIXED, "models": ["gpt3-1.3b"]}
    out = tmp_path / "r.csv"
    rows1 = sweep(first, out, workers=1)
    assert len(rows1) == 4 and not (tmp_path / "r.csv.partial.jsonl").exists()
    with pytest.raises(InputError, match="--resume"):
        sweep(first, out, workers=1)
    # mark one row FAILED as a lost task would leave it: resume plans it again
    done = read_rows(out)
    done[1] = {**done[1], "status": "FAILED", "reason": "lost", "tp": None}
    write_rows(out, done)
    rep = run(MIXED, out, workers=1, resume=True)
    assert rep.planned == 12 - 3  # 3 kept, the FAILED one and the 8 new ones planned
    assert strip(rep.rows) == strip(mixed_rows)
    on_disk = read_rows(out)
    assert strip(on_disk) == strip(mixed_rows)  # scenario order, not finishing order
    # kept rows are the old ones, untouched (their wall times included)
    assert on_disk[0] == rows1[0] and on_disk[2] == rows1[2]
    # a resumed run with nothing left to do plans nothing
    assert run(MIXED, out, workers=1, resume=True).planned == 0


def test_interrupted_sweep_leaves_a_sidecar_that_resume_reads(tmp_path, mixed_rows):
    out = tmp_path / "r.jsonl"
    partial = tmp_path / "r.jsonl.partial.jsonl"
    with partial.open("w") as fh:  # two rows streamed, then a line cut short by the crash
        for r in mixed_rows[:2]:
            fh.write(json.dumps(r) + "\n")
        fh.write('{"scenario_id": "abc')
    with pytest.raises(InputError, match="exists"):
        sweep(MIXED, out, workers=1)
    rep = run(MIXED, out, workers=1, resume=True)
    assert rep.planned == len(mixed_rows) - 2 and not partial.exists()
    assert strip(read_rows(out)) == strip(mixed_rows)


def test_rows_of_other_scenarios_are_kept(tmp_path):
    out = tmp_path / "r.csv"
    sweep({"scenarios": [{"model": "gpt3-1.3b", "cluster": "a100x8"}]}, out, workers=1)
    rep = run({"scenarios": [{"model": "gpt3-125m", "cluster": "a100x8"}]}, out, workers=1, resume=True)
    assert rep.kept_other == 1 and [r["model"] for r in read_rows(out)] == ["gpt3-125m", "gpt3-1.3b"]


def test_overwrite_and_bad_outputs(tmp_path):
    grid = {"scenarios": [{"model": "gpt3-125m", "cluster": "a100x8"}]}
    out = tmp_path / "r.csv"
    out.write_text("not a sweep\n")
    with pytest.raises(InputError, match="columns"):
        sweep(grid, out, workers=1, resume=True)
    assert len(sweep(grid, out, workers=1, overwrite=True)) == 1 and len(read_rows(out)) == 1
    with pytest.raises(InputError, match=r"\.csv, \.jsonl or \.parquet"):
        sweep(grid, tmp_path / "r.xlsx", workers=1)
    with pytest.raises(InputError, match="workers"):
        sweep(grid, workers=0)
    with pytest.raises(InputError, match="time_limit_s"):
        sweep(grid, time_limit_s=0)


def test_api_sweep_delegates(mixed_rows):
    assert strip(api.sweep(MIXED, workers=1)) == strip(mixed_rows)


# ------------------------------------------------------------------ CLI
def test_cli_sweep_writes_rows_and_a_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"models": ["gpt3-125m", "no-such-model"], "clusters": [
        "a100x8", {"family": "h100", "num_gpus": [8, 16], "price_per_gpu_hour_usd": 2.5}]}))
    out, png = tmp_path / "r.csv", tmp_path / "r.png"
    code, _, err = cli("sweep", str(grid), "-o", str(out), "--workers", "1", "--plot", str(png))
    assert code == 0, err
    assert "6 scenarios: 3 OPTIMAL, 3 INVALID" in err and png.stat().st_size > 10_000
    rows = read_rows(out)
    assert [r["status"] for r in rows] == ["OPTIMAL"] * 3 + ["INVALID"] * 3
    assert rows[1]["cost_per_million_tokens_usd"] > 0
    code, _, err = cli("sweep", str(grid), "-o", str(out))
    assert code == 2 and "--resume" in err
    png2 = tmp_path / "again.svg"
    code, _, err = cli("sweep-plot", str(out), "-o", str(png2))
    assert code == 0 and png2.stat().st_size > 1000


def test_cli_bad_grid_is_one_line_exit_2(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("models: [gpt3-125m]\nclusters: [a100x8]\nconstraints: [{tp: []}]\n")
    proc = subprocess.run([sys.executable, "-m", "solveplan.cli", "sweep", str(grid), "-o", str(tmp_path / "r.csv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: constraints[0].tp: empty list: give at least one value, or leave the key out for the default"


def test_missing_extras_name_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_extras(name, *args, **kwargs):
        if name.split(".")[0] in ("pyarrow", "ray", "matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_extras)
    grid = {"scenarios": [{"model": "gpt3-125m", "cluster": "a100x8"}]}
    with pytest.raises(InputError, match=r"solveplan\[sweep\]"):
        sweep(grid, tmp_path / "r.parquet", workers=1)
    with pytest.raises(InputError, match=r"solveplan\[ray\]"):
        sweep(grid, ray="local")
    from solveplan.sweep.plot import plot_rows

    with pytest.raises(InputError, match=r"solveplan\[plot\]"):
        plot_rows([], tmp_path / "p.png")


def test_staged_package_imports_with_its_catalogs(tmp_path):
    """What `--ray ADDRESS` ships as py_modules: the package under its import name, with catalogs."""
    from solveplan.sweep.ray_runner import stage_package

    pkg = stage_package(tmp_path)
    assert pkg.name == "solveplan" and (pkg / "catalog_models" / "gpt3-13b.yaml").is_file()
    code = ("import solveplan, solveplan.catalog as c, solveplan.sweep.rows; "
            "print(solveplan.__file__); print(len(c.catalog_models()), len(c.catalog_families()))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    where, counts = proc.stdout.split("\n")[:2]
    assert Path(where).is_relative_to(tmp_path) and int(counts.split()[0]) >= 30


def test_ctrl_c_stops_between_rows_and_keeps_them(tmp_path):
    """SIGINT once the first rows are streamed: exit 130, one line, the rows done written in order."""
    import signal
    import time

    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"models": ["gpt3-125m", "gpt3-350m", "gpt3-1.3b", "gpt3-2.7b"],
                                    "clusters": ["a100x8", "a100x16", "h100x8", "h100x16", "h100x32"],
                                    "global_batch_sizes": [128, 256, 512]}))
    out = tmp_path / "r.csv"
    partial = tmp_path / "r.csv.partial.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "solveplan.cli", "sweep", str(grid), "-o", str(out), "--workers", "1",
                             "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (partial.exists() and partial.read_text().count("\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "error: aborted", err
    rows = read_rows(out)
    assert 2 <= len(rows) < 60 and not partial.exists()
    ids = [s.id for s in expand(*load_grid(grid))]
    assert [r["scenario_id"] for r in rows] == ids[:len(rows)]  # one process: the first scenarios, in order
