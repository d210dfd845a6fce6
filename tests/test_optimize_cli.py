"""`solveplan optimize` end to end, `optimize()` against the textbook plan, and the renderers."""

from __future__ import annotations

import json

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.optimize import optimize
from solveplan.plan import textbook_plan
from solveplan.render.megatron import MegatronArgs, megatron_args, pipeline_layout, split_flags
from solveplan.render.table import render_result, to_text
from solveplan.render.timeline import simulate
from solveplan.search.candidates import prepare
from solveplan.specs import ClusterSpec, GPUSpec, JobSpec, ModelSpec

BASE = ("optimize", "--model", "gpt3-13b", "--cluster", "a100x64")


def _job(model: str, cluster: str, **kw) -> JobSpec:
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=kw.pop("batch", m.global_batch_size),
                   seq_length=kw.pop("seq", m.seq_length), **kw)


def _tiny_job() -> JobSpec:
    model = ModelSpec(name="tiny", num_layers=6, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
                      vocab_size=32000)
    gpu = GPUSpec(name="g", peak_bf16_tflops=312.0, hbm_gib=16.0, hbm_gbyte_per_s=2039.0)
    cl = ClusterSpec(name="tiny8", gpu=gpu, num_nodes=1, nvlink_gbyte_per_s=300.0, nic_gbit_per_s=200.0)
    return JobSpec(model=model, cluster=cl, global_batch_size=16, seq_length=1024)


def _json(res) -> dict:
    assert res.code == 0, res.err
    return json.loads(res.out)


def test_optimize_json(cli):
    d = _json(cli(*BASE, "--json"))
    assert d["status"] == "OPTIMAL" and d["fits"]
    for key in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "breakdown",
                "stages", "peak_memory_bytes", "bound_step_time_s", "gap", "parallel", "search", "textbook",
                "megatron_args"):
        assert key in d, key
    assert set(d["parallel"]) >= {"tp", "pp", "dp", "cp", "vp", "micro_batch_size", "num_microbatches", "recompute",
                                  "sequence_parallel", "zero"}
    for st in d["stages"]:
        assert set(st["memory_bytes"]) == {"params", "grads", "optimizer", "activations", "other", "total", "host"}
        assert st["fits"] and st["layers"] >= 1
    assert sum(s["layers"] for s in d["stages"]) == 40
    assert 0 <= d["bound_step_time_s"] <= d["step_time_s"]
    assert d["gap"] <= 1e-4
    s = d["search"]
    assert s["shapes_legal"] > s["shapes_searched"] > 0 and s["solver"]["phases"][0]["status"] == "OPTIMAL"
    assert s["wall_time_s"] < 10
    assert d["textbook"]["speedup"] >= 1 - 1e-9
    p = d["parallel"]
    assert p["tp"] * p["pp"] * p["dp"] * p["cp"] == 64


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "search"}


def test_json_identical_across_runs_and_workers(cli):
    args = ("optimize", "--model", "llama3.1-405b", "--cluster", "h100x16384", "--json", "--top-k", "2")
    ref = _strip(_json(cli(*args)))
    for extra in ((), (), ("--workers", "2"), ("--workers", "2", "--seed", "7")):
        assert _strip(_json(cli(*args, *extra))) == ref


def test_infeasible_exit_3_with_shortfall(cli):
    res = cli("optimize", "--model", "gpt3-175b", "--cluster", "a100x8", "--json")
    assert res.code == 3
    assert "memory" in res.err and "GiB" in res.err and "short" in res.err
    assert "Traceback" not in res.err
    first = res.err.strip().splitlines()[0]
    assert first.startswith("infeasible:") and len(first) < 400
    d = json.loads(res.out)
    assert d["status"] == "INFEASIBLE" and d["shortfall"]["resource"] == "memory"
    assert d["shortfall"]["short_bytes"] > 0
    assert any("GPUs" in s for s in d["shortfall"]["suggestions"])


def _flags(args: list[str]) -> dict:
    return MegatronArgs(list(args)).flags()


def test_megatron_flags_match_plan(cli):
    d = _json(cli("optimize", "--model", "llama3.1-405b", "--cluster", "h100x16384", "--json"))
    f = _flags(d["megatron_args"])
    p = d["parallel"]
    assert f["--tensor-model-parallel-size"] == str(p["tp"])
    assert f["--pipeline-model-parallel-size"] == str(p["pp"])
    assert f["--context-parallel-size"] == str(p["cp"])
    assert f["--micro-batch-size"] == str(p["micro_batch_size"])
    assert f["--global-batch-size"] == "2048" and f["--seq-length"] == "8192"
    assert f["--num-layers"] == "126" and f["--num-query-groups"] == "8" and "--swiglu" in f
    assert ("--sequence-parallel" in f) == p["sequence_parallel"]
    assert ("--use-distributed-optimizer" in f) == (p["zero"] >= 1)
    if p["vp"] > 1 and "--pipeline-model-parallel-layout" not in f:
        assert f["--num-virtual-stages-per-pipeline-rank"] == str(p["vp"])
    text = cli("optimize", "--model", "llama3.1-405b", "--cluster", "h100x16384", "--format", "megatron")
    assert text.code == 0 and f"--tensor-model-parallel-size {p['tp']}" in text.out


def test_split_flags_and_layout():
    assert split_flags([8, 8, 8, 8], 1) == ([], [], None)
    flags, _, layout = split_flags([7, 9, 9, 7], 1)
    assert flags == ["--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7"] and layout is None
    flags, _, _ = split_flags([9, 9, 9, 5], 1)
    assert flags == ["--decoder-last-pipeline-num-layers", "5"]
    flags, notes, layout = split_flags([7, 8, 9, 8], 1)
    assert flags[0] == "--pipeline-model-parallel-layout" and notes
    assert layout == "E,t*7|t*8|t*9|t*8,L"
    lay = pipeline_layout([3, 4, 4, 3], 2)  # virtual stage 0 of every rank, then virtual stage 1
    assert lay == "E,t*2|t*2|t*2|t*2|t|t*2|t*2|t,L"
    assert lay.count("|") == 4 * 2 - 1
    flags, _, layout = split_flags([4, 4, 4, 4], 2)
    assert flags == [] and layout is None
    flags, _, layout = split_flags([3, 3, 3, 3], 2)  # 3 layers do not split over 2 chunks evenly
    assert layout is not None


def test_timeline_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "schedule.png"
    res = cli("optimize", "--model", "gpt3-175b", "--cluster", "a100x64", "--timeline", str(png), "--json")
    d = _json(res)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert d["timeline"]["simulated_pipeline_s"] == pytest.approx(d["step_time_s"] - d["breakdown"]["exposed_dp_s"]
                                                                  - d["breakdown"]["optimizer_s"], rel=0.05)


def test_schedule_simulation_matches_closed_form():
    # uniform stages, no p2p: 1F1B = (m + p - 1) * (f + b); interleaved: (m - 1/v) * tau + p * tau / v
    ops = simulate([1.0] * 4, [2.0] * 4, 0.0, 8, 1)
    assert max(o.end_s for o in ops) == pytest.approx(11 * 3.0)
    ops = simulate([1.0] * 4, [2.0] * 4, 0.0, 8, 2)
    assert max(o.end_s for o in ops) == pytest.approx((8 - 0.5) * 3.0 + 4 * 3.0 / 2)
    assert len(ops) == 4 * 8 * 2 * 2


@pytest.mark.parametrize("model,cluster", [
    ("gpt3-13b", "a100x64"), ("gpt3-175b", "a100x64"), ("llama2-70b", "a100x512"), ("llama3.1-8b", "h100x64"),
    ("gpt3-1.3b", "a100x8"), ("llama2-7b", "a100x16"),
])
def test_never_slower_than_textbook(model, cluster):
    job = _job(model, cluster)
    res = optimize(job, time_limit_s=30)
    assert res.status == "OPTIMAL" and res.plan.fits
    tb = textbook_plan(job)
    assert tb is not None and tb.fits
    assert res.plan.step_time_s <= tb.step_time_s + res.tolerance_s
    assert res.textbook.speedup == pytest.approx(tb.step_time_s / res.plan.step_time_s)
    assert tb.parallel.vp == 1 and tb.parallel.cp == 1 and tb.parallel.tp <= job.cluster.gpus_per_node
    assert tb.parallel.recompute == "selective" and tb.parallel.sequence_parallel == (tb.parallel.tp > 1)


def test_compare_config(cli):
    d = _json(cli(*BASE, "--json", "--compare", "tp=8,pp=2,mbs=1,recompute=full,layers=20:20"))
    c = d["compare"]
    assert c["parallel"]["tp"] == 8 and c["parallel"]["pp"] == 2 and c["layers_per_stage"] == [20, 20]
    assert c["speedup"] == pytest.approx(c["step_time_s"] / d["step_time_s"])
    bad = cli(*BASE, "--compare", "tp=3")
    assert bad.code == 2 and "--compare" in bad.err and "Traceback" not in bad.err
    bad = cli(*BASE, "--compare", "foo")
    assert bad.code == 2 and "key=value" in bad.err


def test_top_k_and_table(cli):
    res = cli(*BASE, "--top-k", "3")
    assert res.code == 0
    for word in ("OPTIMAL", "parallel plan", "stages", "breakdown", "textbook", "next best plans", "search",
                 "--tensor-model-parallel-size"):
        assert word in res.out, word
    d = _json(cli(*BASE, "--top-k", "3", "--json"))
    assert len(d["alternatives"]) == 2
    steps = [d["step_time_s"]] + [a["step_time_s"] for a in d["alternatives"]]
    assert steps == sorted(steps)


def test_top_k_cut_short_exits_4(cli):
    """A top-k the time limit stops before K plans: the plans found, FEASIBLE; and a limit spent
    before the candidates are prepared (1 ms: the deadline is kept) is UNKNOWN, exit code 4."""
    job = _job("gpt3-13b", "a100x64")
    cut = optimize(job, top_k=50, time_limit_s=0.001, cands=prepare(job, top_k=50))
    found = cut.top_k_found
    assert cut.status == "FEASIBLE" and 1 <= found < 50 and found == 1 + len(cut.alternatives)
    assert cut.top_k_asked == 50 and cut.top_k_cut_short and not cut.search.finished
    assert cut.search.solver["top_k_asked"] == 50 and cut.search.solver["top_k_found"] == found
    assert f"{found} of 50 plans within the time limit" in cut.notes  # the result says it, not a copy of its notes
    res = cli(*BASE, "--top-k", "50", "--time-limit", "0.001", "--json")
    assert res.code == 4, res.err
    d = json.loads(res.out)
    assert d["status"] in ("UNKNOWN", "FEASIBLE") and not d["search"]["finished"]
    full = optimize(_job("gpt3-13b", "a100x64"), top_k=3)
    assert full.status == "OPTIMAL" and full.top_k_asked == 3 and full.top_k_found == 3


def test_baseline_methods_agree():
    job = _tiny_job()
    ref = optimize(job, time_limit_s=30)
    for method in ("alpa-dp", "exhaustive"):
        try:
            res = optimize(job, method=method, time_limit_s=60)
        except Exception as exc:  # the baselines are built separately
            pytest.skip(f"{method} unavailable: {exc}")
        assert res.status == "OPTIMAL"
        assert res.plan.step_time_s == pytest.approx(ref.plan.step_time_s, abs=ref.tolerance_s)


def test_render_result_infeasible_text():
    job = _job("gpt3-175b", "a100x8")
    res = optimize(job, time_limit_s=30)
    text = to_text(render_result(res))
    assert "INFEASIBLE" in text and "memory" in text
    assert res.shortfall.stage == 0 and res.shortfall.short_bytes > 0


def test_megatron_args_zero_and_recompute():
    job = _job("gpt3-13b", "a100x64")
    from solveplan.plan import ParallelConfig, make_plan

    par = ParallelConfig(tp=4, pp=2, dp=8, cp=1, vp=1, micro_batch_size=1, num_microbatches=128, recompute="full",
                         sequence_parallel=True, zero=3)
    plan = make_plan(job, par, [20, 20])
    f = _flags(megatron_args(job, plan).args)
    assert f["--recompute-granularity"] == "full" and f["--recompute-method"] == "uniform"
    assert f["--data-parallel-sharding-strategy"] == "optim_grads_params" and "--use-megatron-fsdp" in f


def test_status_line_writes_each_time_with_one_unit():
    from types import SimpleNamespace

    from solveplan.render.table import status_line

    def line(step_s, bound_s):
        plan = SimpleNamespace(step_time_s=step_s)
        return status_line(SimpleNamespace(status="OPTIMAL", plan=plan, bound_step_time_s=bound_s,
                                           gap=0.0, tolerance_s=None)).plain

    assert "step 980.21 ms  bound 979.00 ms" in line(0.98021, 0.979)
    assert "step 7.008 s  bound 7.000 s" in line(7.008, 7.0)
    assert "ms s" not in line(0.5, 0.5)
