"""Megatron-LM's layer-level CPU activation offloading (`cpu_offloading_num_layers`, formulation/offload.py):
Megatron's legality rules as one-line errors, the memory it frees and the copies it exposes, the published
Megatron-FSDP GB200/GB300 rows read with their stated layer counts, and the launch flag."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solveplan.calibration.rows import published_rows
from solveplan.catalog import load_cluster, load_job, load_model
from solveplan.errors import InputError
from solveplan.formulation.offload import exposed_offload_s, resident_layers
from solveplan.plan import ParallelConfig, make_plan, plan_config
from solveplan.render.megatron import MegatronArgs, megatron_args
from solveplan.render.torchtitan import OFFLOAD_NOTE, torchtitan_config
from solveplan.space.rules import constrained_config
from solveplan.specs import ClusterSpec, JobSpec

BASE = ["--model", "llama3.1-8b", "--cluster", "h100x8", "--global-batch-size", "16", "--seq-len", "8192"]
ROWS = {"mbridge_perf-26.04.01-llama3-70b-gb300-fp8-cs-64": 20, "mbridge_perf-26.04.01-llama3-70b-gb200-fp8-cs-64": 40,
        "mbridge_perf-25.09-llama3-70b-gb200-fp8-64": 40, "mbridge_perf-25.09-llama3.1-405b-gb200-fp8-128": 95}


def _job(n: int, cluster="h100x8", **kw) -> JobSpec:
    return load_job(dict(model="llama3.1-8b", cluster=cluster, global_batch_size=16, seq_length=8192,
                         cpu_offloading_num_layers=n, **kw), field="")


def _plan(job: JobSpec):
    return plan_config(job, constrained_config(job, dict(tp=1, micro_batch_size=1, zero=1, recompute="none")))


# ------------------------------------------------------------------ legality (Megatron's rules), one line, exit 2
@pytest.mark.parametrize("args,flag,words", [
    (["--pp", "2"], "--pp", "Pipeline parallelism with CPU offloading"),
    (["--recompute", "full"], "--recompute", "activation recomputation"),
    (["--recompute", "selective"], "--recompute", "activation recomputation"),
])
def test_evaluate_refuses_what_megatron_refuses(cli, args, flag, words):
    code, out, err = cli("evaluate", *BASE, "--cpu-offloading-num-layers", "8", *args)
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert flag in line and words in line and "cpu_offloading_num_layers" in line


@pytest.mark.parametrize("n", [32, 40])
def test_too_many_layers_is_one_line(cli, n):
    code, out, err = cli("evaluate", *BASE, "--cpu-offloading-num-layers", str(n))
    assert code == 2 and "\n" not in err.strip() and "Traceback" not in err
    assert "less than the model's 32 layers" in err and "use at most 31" in err


@pytest.mark.parametrize("cons,knob", [({"pp": [2, 4]}, "pp"), ({"recompute": ["selective", "full"]}, "recompute")])
def test_constraints_that_exclude_megatrons_rule_name_the_knob(cons, knob):
    with pytest.raises(InputError) as e:
        _job(8, constraints=cons)
    assert e.value.field == f"constraints.{knob}" and "cpu_offloading_num_layers" in e.value.message


def test_offloading_fixes_pp_1_and_no_recompute_for_the_search():
    cons = _job(8).constraints
    assert cons.pp == (1,) and cons.recompute == ("none",)
    assert _job(0).constraints.pp is None


def test_optimize_searches_only_legal_shapes(cli):
    code, out, err = cli("optimize", *BASE, "--cpu-offloading-num-layers", "8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["parallel"]["pp"] == 1 and d["parallel"]["recompute"] == "none"
    assert "offload_s" in d["breakdown"]


@pytest.mark.parametrize("kw,words", [
    (dict(framework="torchtitan"), "framework torchtitan"),
    (dict(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"]), "CUDA graphs not supported"),
])
def test_other_stacks_and_per_layer_graphs_are_refused(kw, words):
    with pytest.raises(InputError) as e:
        _job(8, **kw)
    assert words in e.value.message


def test_a_gpu_without_a_host_link_is_refused_naming_the_field():
    c = load_cluster("h100x8")
    gpu = c.gpu.model_copy(update={"host_link_gbyte_per_s": None})
    cluster = ClusterSpec(**{**c.model_dump(), "gpu": gpu.model_dump()})
    with pytest.raises(ValueError, match="host_link_gbyte_per_s"):
        JobSpec(model=load_model("llama3.1-8b"), cluster=cluster, global_batch_size=16, seq_length=8192,
                cpu_offloading_num_layers=8)


# ------------------------------------------------------------------ formulation
def test_memory_falls_and_exposed_time_rises_with_n():
    """H100 on PCIe Gen5 (64 GB/s): a layer's saved activations take longer to copy than its forward, so
    past the few copies the layers in between hide, each layer offloaded more frees memory and exposes
    more copy time (the same plan otherwise: tp 1, no recomputation)."""
    plans = [_plan(_job(n)) for n in (0, 4, 16, 24, 28, 31)]
    act = [p.stages[0].memory_bytes.activations for p in plans]
    exposed = [p.breakdown.get("offload_s", 0.0) for p in plans]
    steps = [p.step_time_s for p in plans]
    assert all(a > b for a, b in zip(act, act[1:]))
    assert exposed[0] == exposed[1] == 0.0  # 4 copies hide behind the 28 layers between
    assert all(a < b for a, b in zip(exposed[1:], exposed[2:]))
    assert all(a <= b for a, b in zip(steps, steps[1:])) and steps[-1] > steps[0]
    assert steps[-1] - steps[0] == pytest.approx(exposed[-1], rel=1e-6)  # the copies are all it adds

    # the stage keeps L - N + 1 layers' activations (TE's L - N, plus one in flight) beside the embedding's and
    # the logits: 16 layers offloaded free 15 layers' worth, 8 more free 8 more
    assert resident_layers(32, 16) == 17 and resident_layers(32, 0) == 32
    assert (act[0] - act[2]) / (act[2] - act[3]) == pytest.approx(15 / 8)


def test_a_fast_enough_link_hides_every_copy():
    c = load_cluster("h100x8")
    gpu = c.gpu.model_copy(update={"host_link_gbyte_per_s": 1e6})
    cluster = ClusterSpec(**{**c.model_dump(), "gpu": gpu.model_dump()})
    job = JobSpec(model=load_model("llama3.1-8b"), cluster=cluster, global_batch_size=16, seq_length=8192,
                  cpu_offloading_num_layers=24)
    fast, base = _plan(job), _plan(_job(0))
    assert fast.breakdown["offload_s"] == 0.0
    assert fast.step_time_s == pytest.approx(base.step_time_s)
    assert fast.stages[0].memory_bytes.activations < 0.5 * base.stages[0].memory_bytes.activations


def test_schedule_exposes_the_copies_beyond_the_compute_between():
    """Transformer Engine's schedule on one micro-batch: N copies of x seconds queued behind layers of c
    seconds; with N = L - 1 no layer lies between a copy and its wait (TE warns it prevents overlap)."""
    c, x = np.array([1.0]), 3.0
    assert exposed_offload_s(c, 2 * c, 0.5, 1.0, 10, 3)[0] == 0.0  # 0.5 s copies behind 1 s layers
    none_between = exposed_offload_s(c, 2 * c, x, 1.0, 10, 9)[0]
    some_between = exposed_offload_s(c, 2 * c, x, 1.0, 10, 5)[0]
    assert none_between > some_between > 0.0
    # forward: 9 copies of 3 s, each waited for by the next layer -> 9 x (3 - 1) = 18 s ... bounded by all copies
    assert none_between <= 2 * 9 * x
    assert exposed_offload_s(c, 2 * c, x, 1.0, 10, 0)[0] == 0.0


# ------------------------------------------------------------------ the published rows
def test_the_grace_offload_rows_are_read_with_their_layer_counts():
    rows = {r.id: r for r in published_rows() if r.id in ROWS}
    assert set(rows) == set(ROWS)
    for rid, n in ROWS.items():
        r = rows[rid]
        assert r.skipped is None, r.skipped
        assert r.job_spec.cpu_offloading_num_layers == n
        assert r.job_spec.constraints.pp == (1,) and r.job_spec.constraints.recompute == ("none",)
        assert r.job_spec.constraints.zero == (3,)  # Megatron-FSDP
        assert any("cpu_offloading_num_layers" in a for a in r.assumed)
    assert any("v0.1.0rc3" in a for a in rows["mbridge_perf-25.09-llama3.1-405b-gb200-fp8-128"].assumed)


# ------------------------------------------------------------------ launch
def _launch(n: int):
    job = _job(n)
    par = ParallelConfig(tp=1, pp=1, dp=8, cp=1, vp=1, micro_batch_size=1, num_microbatches=2, recompute="none",
                         sequence_parallel=False, zero=1)
    return job, make_plan(job, par, [32])


def test_megatron_args_carry_the_flag():
    job, plan = _launch(12)
    args = megatron_args(job, plan)
    flags = MegatronArgs(args.args).flags()
    assert flags["--cpu-offloading-num-layers"] == "12"
    assert "--recompute-granularity" not in flags and flags["--pipeline-model-parallel-size"] == "1"
    job0, plan0 = _launch(0)
    assert "--cpu-offloading-num-layers" not in MegatronArgs(megatron_args(job0, plan0).args).flags()


def test_torchtitan_says_it_has_no_equivalent():
    job, plan = _launch(12)
    _, notes = torchtitan_config(job, plan)
    assert OFFLOAD_NOTE in notes
