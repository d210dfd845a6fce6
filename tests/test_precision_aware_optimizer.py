"""Megatron's precision-aware optimizer (`--use-precision-aware-optimizer`, Transformer Engine's FusedAdam):
the Adam state it keeps per parameter (formulation/memory.adam_state_bytes_per_param), its place in a
plan's memory and optimizer step, the rules Megatron enforces (distributed optimizer only; moments other
than fp32 only with it; Megatron's alone) and its launch flags."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.memory import adam_state_bytes_per_param, adam_step_bytes_per_param
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.megatron import MegatronArgs, megatron_args
from solveplan.specs import JobSpec


def _job(**kw):
    m = load_model(kw.pop("model", "llama3.1-8b"))
    return JobSpec(model=m, cluster=load_cluster(kw.pop("cluster", "h100x16")), global_batch_size=64,
                   seq_length=m.seq_length, **kw)


def _plan(job, tp=2, pp=2):
    dp = job.cluster.num_gpus // (tp * pp)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=1, vp=1, micro_batch_size=1, num_microbatches=job.global_batch_size // dp,
                         recompute="selective", sequence_parallel=True, zero=1)
    return make_plan(job, par, [job.model.num_layers // pp] * pp)


@pytest.mark.parametrize("precision, aware, moments, expected", [
    ("bf16", False, "fp32", 12.0),  # fp32 master, m, v
    ("bf16", True, "fp32", 10.0),  # the master's 16-bit remainder beside the BF16 weight
    ("bf16", True, "bf16", 6.0),  # DeepSeek-V3's recipes
    ("fp8", True, "fp32", 10.0),  # delayed scaling: TE's FusedAdam still keeps the master
    ("mxfp8", True, "bf16", 8.0),  # other FP8 recipes: Megatron keeps an fp32 master
    ("fp16", True, "fp8", 6.0),  # no remainders without BF16 weights
])
def test_adam_state_per_parameter(precision, aware, moments, expected):
    assert adam_state_bytes_per_param(precision, aware, moments) == expected
    assert adam_step_bytes_per_param(expected) == 2 * expected + 14  # 38 with the default state


def test_plan_memory_and_optimizer_step_shrink_by_the_state():
    base, aware = _job(), _job(precision_aware_optimizer=True, optimizer_moment_dtype="bf16")
    pb, pa = _plan(base), _plan(aware)
    for sb, sa in zip(pb.stages, pa.stages):
        assert sa.memory_bytes.optimizer == pytest.approx(sb.memory_bytes.optimizer * 6 / 12, rel=1e-9)
        assert sa.memory_bytes.params == pytest.approx(sb.memory_bytes.params, rel=1e-12)
        assert sa.memory_bytes.grads == pytest.approx(sb.memory_bytes.grads, rel=1e-12)
    assert pa.breakdown["optimizer_s"] < pb.breakdown["optimizer_s"]
    moe = _job(model="mixtral-8x7b", cluster="h100x64", precision_aware_optimizer=True, optimizer_moment_dtype="bf16")
    plain = _job(model="mixtral-8x7b", cluster="h100x64")
    par = ParallelConfig(tp=2, pp=2, dp=16, cp=1, vp=1, micro_batch_size=1, num_microbatches=4, recompute="selective",
                         sequence_parallel=True, zero=1, ep=8, etp=1)
    ma, mp = (make_plan(j, par, [16, 16]) for j in (moe, plain))
    for sa, sp in zip(ma.stages, mp.stages):  # experts sharded over expert-DP: the state halves (the embedding's
        # share of the column is split in a layer's proportions, pipeline.stage_arrays: within 1%)
        assert sa.memory_bytes.optimizer == pytest.approx(sp.memory_bytes.optimizer / 2, rel=0.01)
        assert sa.memory_bytes.total < sp.memory_bytes.total


@pytest.mark.parametrize("kw, words", [
    (dict(optimizer_moment_dtype="bf16"), "needs precision_aware_optimizer true"),
    (dict(precision_aware_optimizer=True, constraints={"zero": [0]}), "needs zero 1"),
    (dict(precision_aware_optimizer=True, framework="torchtitan"), "Megatron-LM's"),
])
def test_megatrons_rules(kw, words):
    with pytest.raises(ValueError, match=words):
        _job(**kw)


def test_the_search_keeps_the_distributed_optimizer():
    from solveplan.catalog import load_job
    from solveplan.errors import InputError

    job = _job(precision_aware_optimizer=True, constraints={"zero": [0, 1, 3]})
    assert job.constraints.zero == (1,)
    with pytest.raises(InputError) as e:  # a job mapping: the error names the constraint, as offloading's does
        load_job({"model": "llama3.1-8b", "cluster": "h100x8", "precision_aware_optimizer": True,
                  "constraints": {"zero": [0]}}, field="job")
    assert e.value.field == "job.constraints.zero"


def test_evaluate_refuses_zero_0_in_one_line(cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("model: llama3.1-8b\ncluster: h100x8\nprecision_aware_optimizer: true\n")
    res = cli("evaluate", "--job", str(path), "--tp", "1", "--pp", "1", "--zero", "0")
    assert res.code == 2 and "--zero" in res.err and len(res.err.strip().splitlines()) == 1, res.err


def test_launch_flags():
    aware = _job(precision_aware_optimizer=True, optimizer_moment_dtype="bf16")
    f = MegatronArgs(list(megatron_args(aware, _plan(aware)).args)).flags()
    assert "--use-precision-aware-optimizer" in f and "--use-distributed-optimizer" in f
    assert (f["--exp-avg-dtype"], f["--exp-avg-sq-dtype"]) == ("bf16", "bf16")
    fp32 = _job(precision_aware_optimizer=True)
    f = MegatronArgs(list(megatron_args(fp32, _plan(fp32)).args)).flags()
    assert "--use-precision-aware-optimizer" in f and "--exp-avg-dtype" not in f
    plain = _job()
    assert "--use-precision-aware-optimizer" not in MegatronArgs(list(megatron_args(plain, _plan(plain)).args)).flags()


def test_the_library_and_service_take_it_from_a_job_mapping():
    from solveplan import api
    from solveplan.errors import InputError

    job = {"model": "llama3.1-8b", "cluster": "h100x8", "precision_aware_optimizer": True,
           "optimizer_moment_dtype": "bf16"}
    assert api.check(job, time_limit_s=20).feasible
    with pytest.raises(InputError, match="optimizer_moment_dtype bf16 .* needs precision_aware_optimizer"):
        api.check({**job, "precision_aware_optimizer": False}, time_limit_s=20)


def test_rules_apply_to_values_pydantic_coerces():
    """A JobSpec built in Python with "true" or "8" (which pydantic reads as True and 8) gets the same narrowed
    constraints as the typed values: the rule is applied before validation, on the raw value."""
    assert _job(precision_aware_optimizer="true").constraints.zero == (1,)
    offload = _job(cpu_offloading_num_layers="8")
    assert offload.cpu_offloading_num_layers == 8
    assert (offload.constraints.pp, offload.constraints.recompute) == ((1,), ("none",))
    assert _job(precision_aware_optimizer="false").constraints.zero is None


def test_an_infeasible_job_is_told_what_the_smaller_optimizer_state_would_do(cli):
    from solveplan.diagnose import _least_memory, _smaller_optimizer_state

    job = _job(model="gpt3-13b", cluster="a100-40gbx8", constraints={"tp": [1], "pp": [1], "zero": [0, 1]})
    par = ParallelConfig(tp=1, pp=1, dp=8, cp=1, vp=1, micro_batch_size=1, num_microbatches=8, recompute="full",
                         sequence_parallel=False, zero=0)
    base, _ = _least_memory(job, par.shapes())
    aware, _ = _least_memory(job.model_copy(update={"precision_aware_optimizer": True, "optimizer_moment_dtype": "bf16"}),
                             par.model_copy(update={"zero": 1}).shapes())
    assert aware[0] < base[0]
    (fits,) = _smaller_optimizer_state(job, par, cap=(aware[0] + base[0]) / 2)
    assert "fits with" in fits and "zero=1" in fits
    (short,) = _smaller_optimizer_state(job, par, cap=aware[0] / 2)
    assert f"still needs {aware[0] / 1024**3:.1f} GiB" in short
    assert _smaller_optimizer_state(_job(precision_aware_optimizer=True, optimizer_moment_dtype="bf16"), par, 1.0) == []
    res = cli("optimize", "--model", "gpt3-13b", "--cluster", "a100-40gbx8", "--tp", "1", "--pp", "1", "--zero", "0,1",
              "--global-batch-size", "64")
    assert res.code != 0 and "precision-aware optimizer with bf16 moments" in res.err, res.err


def test_torchtitan_section_says_the_optimizer_is_not_expressed():
    from solveplan.render.torchtitan import torchtitan_config

    aware = _job(precision_aware_optimizer=True, optimizer_moment_dtype="bf16")
    _, notes = torchtitan_config(aware, _plan(aware))
    assert any("precision-aware optimizer" in n and "6 bytes of Adam state" in n for n in notes), notes
    plain = _job()
    _, notes = torchtitan_config(plain, _plan(plain))
    assert not any("precision-aware optimizer" in n for n in notes)


def test_cli_flags(cli):
    base = ("--model", "llama3.1-8b", "--cluster", "h100x8", "--tp", "1", "--pp", "1", "--micro-batch-size", "1",
            "--recompute", "full", "--json")
    plain = cli("evaluate", *base)
    aware = cli("evaluate", *base, "--precision-aware-optimizer", "--optimizer-moment-dtype", "bf16")
    assert plain.code == 0 and aware.code == 0, (plain.err, aware.err)
    import json

    opt = [json.loads(r.out)["stages"][0]["memory_bytes"]["optimizer"] for r in (plain, aware)]
    assert opt[1] == pytest.approx(opt[0] * 6 / 12, rel=1e-9)
    bad = cli("evaluate", *base, "--optimizer-moment-dtype", "bf16")
    assert bad.code == 2 and "--precision-aware-optimizer" in bad.err and len(bad.err.strip().splitlines()) == 1


def test_a_plan_says_the_settings_it_was_priced_with():
    from solveplan.render.table import _title

    aware = _job(precision="fp8", precision_aware_optimizer=True, optimizer_moment_dtype="bf16")
    plan = _plan(aware)
    assert plan.settings == {"precision": "fp8", "precision_aware_optimizer": True, "optimizer_moment_dtype": "bf16"}
    assert "megatron stack, precision fp8, precision_aware_optimizer true, optimizer_moment_dtype bf16" in str(_title(plan))
    plain = _plan(_job())
    assert plain.settings == {} and str(_title(plain)).endswith("megatron stack")


def test_the_suggestion_states_the_bytes_of_the_job_s_recipe():
    """Under MXFP8 Megatron keeps an fp32 master (8 bytes with bf16 moments), under BF16 a remainder (6)."""
    from solveplan.diagnose import _smaller_optimizer_state

    par = ParallelConfig(tp=2, pp=2, dp=4, cp=1, vp=1, micro_batch_size=1, num_microbatches=16, recompute="full",
                         sequence_parallel=True, zero=1)
    (bf16,) = _smaller_optimizer_state(_job(), par, cap=1.0)
    (mx,) = _smaller_optimizer_state(_job(model="llama3.1-8b", cluster="b200x16", precision="mxfp8"), par, cap=1.0)
    assert "6 bytes of Adam state per parameter, not 12" in bf16 and "8 bytes of Adam state per parameter, not 12" in mx
