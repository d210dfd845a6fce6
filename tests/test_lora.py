"""LoRA (specs/peft.py, formulation/lora.py): the frozen base has no weight-gradient GEMMs, gradients, optimizer
state, optimizer step or data-parallel reduction; the adapters add their own small terms; Megatron-Bridge's
published LoRA runs are read and priced; what cannot be priced is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import solveplan.catalog_published
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import RowCase
from solveplan.catalog import load_job
from solveplan.errors import InputError
from solveplan.formulation import lora
from solveplan.formulation.flops import model_flop_per_step
from solveplan.formulation.job import job_coefficients
from solveplan.formulation.kernels import gemm_s, linear_s
from solveplan.plan import plan_config
from solveplan.render.megatron import megatron_args

CONFIG = dict(tp=2, pp=2, cp=1, vp=1, micro_batch_size=1, recompute="none", sequence_parallel=True, zero=1)


def _job(**settings):
    return load_job({"model": "llama3.1-8b", "cluster": "h100x16", "global_batch_size": 64, "seq_length": 4096,
                     **settings})


def _plan(job):
    return plan_config(job, CONFIG)


def test_a_frozen_linear_computes_no_weight_gradient():
    kw = dict(flop_per_s=989e12, efficiency=0.7, num_sms=132, hbm_bytes_per_s=3.35e12)
    full_f, full_b = linear_s(8192, 4096, 1024, **kw)
    frozen_f, frozen_b = linear_s(8192, 4096, 1024, weight_grad=False, **kw)
    assert frozen_f == full_f and frozen_b == gemm_s(8192, 1024, 4096, **kw) < full_b  # the data gradient alone


def test_lora_prices_the_frozen_base_and_its_adapters():
    full, tuned = _plan(_job()), _plan(_job(peft="lora", lora_target_modules=["linear_qkv"]))
    assert tuned.step_time_s < 0.8 * full.step_time_s  # no weight gradients: about a third of the GEMM time
    assert tuned.breakdown["optimizer_s"] < 0.01 * full.breakdown["optimizer_s"]  # the adapters' step only
    for stage_full, stage_tuned in zip(full.stages, tuned.stages):
        f, t = stage_full.memory_bytes, stage_tuned.memory_bytes
        assert t.params == pytest.approx(f.params, rel=0.01)  # the weights kept, plus the adapters'
        assert t.grads < 0.01 * f.grads and t.optimizer < 0.01 * f.optimizer
        assert t.activations < f.activations  # frozen linears keep no input


def test_more_adapters_cost_more():
    qkv = _plan(_job(peft="lora", lora_target_modules=["linear_qkv"]))
    every = _plan(_job(peft="lora"))
    bigger = _plan(_job(peft="lora", lora_rank=256))
    assert qkv.step_time_s < every.step_time_s < bigger.step_time_s


def test_adapter_params_and_saved_inputs():
    job = _job(peft="lora", lora_rank=16, lora_target_modules=["linear_qkv", "linear_fc2"])
    m = job.model
    attn = [((m.q_hidden_size + 2 * m.kv_hidden_size) / 2, m.hidden_size), (m.hidden_size, m.q_hidden_size / 2)]
    mlp = [(2 * m.ffn_hidden_size / 2, m.hidden_size), (m.hidden_size, m.ffn_hidden_size / 2)]
    linears = lora.adapted_linears(attn, mlp, job.lora_target_modules)
    assert linears == [attn[0], mlp[1]]
    assert lora.adapter_params_per_gpu(linears, 16) == 16 * (sum(attn[0]) + sum(mlp[1]))
    # qkv's and fc1's inputs (h each, / tp under SP) and fc2's (f / tp) leave; qkv's and fc2's adapters keep theirs
    h, f = m.hidden_size, m.ffn_hidden_size
    delta = lora.saved_inputs_delta_bytes(m, 1.0, 2, 2, 2.0, job.lora_target_modules)
    assert delta == pytest.approx(2.0 * (h + f / 2) - 2.0 * (2 * h / 2 + f / 2))


def test_the_reported_flops_of_a_frozen_base():
    m = _job().model
    full = model_flop_per_step(m, 8, 4096, causal=True)
    frozen = model_flop_per_step(m, 8, 4096, causal=True, frozen_weights=True)
    assert 2 / 3 * full < frozen < 0.72 * full  # the GEMMs 2/3, the attention core whole


def test_no_data_parallel_traffic_for_frozen_weights():
    job = _job(peft="lora")
    shapes = _plan(job).parallel.shapes()
    co_full, co_tuned = job_coefficients(_job(), shapes), job_coefficients(job, shapes)
    assert float(co_tuned.first_dp_step_s[0]) == 0.0 and float(co_tuned.last_dp_step_s[0]) == 0.0
    assert float(co_tuned.layer_dp_step_s[0]) < 0.05 * float(co_full.layer_dp_step_s[0])  # the adapters' alone


@pytest.mark.parametrize("settings, words", [
    (dict(model="qwen3-30b-a3b", peft="lora"), "dense transformer models only"),
    (dict(peft="lora", constraints={"zero": [3]}), "zero allows [3] with peft lora"),
    (dict(peft="lora", framework="torchtitan"), "framework torchtitan is not"),
    (dict(lora_rank=8), "apply with peft lora only"),
    (dict(peft="lora", lora_target_modules=[]), "name at least one"),
])
def test_what_lora_cannot_price_is_refused_naming_the_field(settings, words):
    with pytest.raises(InputError) as err:
        _job(**settings)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_lora_plan_searches_zero_0_and_1_only():
    from solveplan.space.enumeration import enumerate_shapes

    assert set(enumerate_shapes(_job(peft="lora")).shapes.zero.tolist()) == {0, 1}
    assert 3 in set(enumerate_shapes(_job()).shapes.zero.tolist())


def test_the_launch_says_lora_is_megatron_bridges():
    job = _job(peft="lora", lora_rank=16, lora_target_modules=["linear_qkv"])
    args = megatron_args(job, _plan(job))
    assert any("LoRA(target_modules=['linear_qkv'], dim=16)" in n for n in args.notes)
    assert args.args == megatron_args(_job(), _plan(_job())).args  # the parallelism and model flags are the same


PUBLISHED = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"


def test_the_published_lora_rows_are_read_with_their_scripts_settings():
    rows = [r for r in published_rows([str(PUBLISHED)]) if r.raw.get("task") == "lora"]
    assert len(rows) == 4 and not any(r.skipped for r in rows)
    for r in rows:
        assert (r.job.peft, r.job.lora_rank, r.job.lora_target_modules) == ("lora", 16, ("linear_qkv",))
        step, _, fits = RowCase(r).predict()
        assert fits and abs(step / r.measured - 1) < 0.10, (r.id, step, r.measured)  # priced, not fitted


def test_a_lora_row_of_a_moe_model_is_skipped_saying_why():
    from solveplan.calibration.rows import row_job

    raw = next(m for m in json.loads(PUBLISHED.read_text())["measurements"] if m.get("category") == "A")
    row = row_job({**raw, "task": "lora"})
    assert row.skipped and "expert adapters are not modelled" in row.skipped


def test_the_service_plans_lora_and_answers_422_naming_the_field():
    import warnings

    from solveplan import api
    from solveplan.service import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    client = TestClient(create_app(api.ResultCache(maxsize=8), max_body_bytes=64 * 1024, max_time_limit_s=30))
    job = {"model": "llama3.1-8b", "cluster": "h100x8", "peft": "lora", "lora_rank": 16,
           "lora_target_modules": ["linear_qkv"]}
    r = client.post("/v1/plan?time_limit_s=20", json={"job": job})
    assert r.status_code == 200 and r.json()["status"] == "OPTIMAL", r.text
    assert r.json()["plan"]["settings"]["peft"] == "lora" and r.json()["plan"]["parallel"]["zero"] in (0, 1)
    r = client.post("/v1/check", json={"job": {**job, "model": "qwen3-30b-a3b", "cluster": "h100x64"}})
    assert r.status_code == 422 and "peft lora" in r.text
    r = client.post("/v1/check", json={"job": {**job, "lora_rank": 0}})
    assert r.status_code == 422 and "lora_rank" in r.text


def test_calibrate_reads_lora_steps(tmp_path):
    from solveplan.calibration.step_fit import build_step_rows, read_steps

    path = tmp_path / "steps.csv"
    path.write_text("model,tp,pp,vp,global_batch_size,num_gpus,peft,lora_rank,lora_target_modules,step_time_s\n"
                    "llama3.1-8b,1,2,4,32,8,lora,16,linear_qkv|linear_fc2,1.0\n"
                    "llama3.1-8b,2,2,4,32,8,none,,,1.2\n")
    rows = build_step_rows(read_steps(path), load_job({"model": "llama3.1-8b", "cluster": "h100x8"}).cluster, "steps")
    assert (rows[0].job.peft, rows[0].job.lora_rank, rows[0].job.lora_target_modules) == (
        "lora", 16, ("linear_qkv", "linear_fc2"))
    assert rows[1].job.peft == "none"
