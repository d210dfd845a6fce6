"""torchtitan job configs without torchtitan: field names from its own config classes (0.2.2's
torchtitan/config/job_config.py; 0.3.0's config/configs.py), the plan's split as
module_fqns_per_model_part in looped-schedule stage order, and the ZeRO / recompute / float8
mapping. tests/test_torchtitan_load.py loads the outputs with torchtitan's own ConfigManager."""

from __future__ import annotations

import tomllib

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.torchtitan import (module_fqns_per_model_part, render_torchtitan, torchtitan_config,
                                          torchtitan_flags)
from solveplan.specs import JobSpec

# the fields of torchtitan 0.2.2's Training, Parallelism, ActivationCheckpoint, Model and Float8Linear
# dataclasses (the ones a plan sets, and their neighbours)
TORCHTITAN_FIELDS = {
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size", "context_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "model": {"name", "flavor", "converters"},
    "quantize.linear.float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                               "recipe_name", "filter_fqns", "emulate"},
}


# torchtitan 0.3.0's TrainingConfig and ParallelismConfig (config/configs.py) and Float8LinearConverter.Config
# (components/quantization/float8.py): the fields a plan sets, and their neighbours
TORCHTITAN_03_FIELDS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps", "enable_cpu_offload",
                 "disable_cuda_graphs", "dtype", "mixed_precision_param", "mixed_precision_reduce"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_sequence_parallel", "pipeline_parallel_degree",
                    "module_fqns_per_model_part", "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "context_parallel_degree", "pipeline_parallel_layers_per_stage"},
    "float8": {"recipe_name", "filter_fqns", "emulate", "model_compile_enabled"},
}


def _plan(model="llama3.1-70b", cluster="h100x512", *, tp=2, pp=4, cp=1, vp=1, zero=1, recompute="selective",
          layers=None, precision="bf16"):
    m, c = load_model(model), load_cluster(cluster)
    job = JobSpec(model=m, cluster=c, global_batch_size=m.global_batch_size, seq_length=m.seq_length,
                  precision=precision)
    dp = c.num_gpus // (tp * pp * cp)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=1,
                         num_microbatches=job.global_batch_size // dp, recompute=recompute, sequence_parallel=tp > 1,
                         zero=zero)
    return job, make_plan(job, par, layers or [m.num_layers // pp] * pp)


def test_fields_are_torchtitans():
    job, plan = _plan(vp=2, precision="fp8", zero=3)
    sections, _ = torchtitan_config(job, plan, "0.2")
    for name, fields in sections.items():
        assert set(fields) <= TORCHTITAN_FIELDS[name], set(fields) - TORCHTITAN_FIELDS[name]
    parsed = tomllib.loads("\n".join(l for l in render_torchtitan(job, plan, "0.2").splitlines()
                                      if not l.startswith("#")))
    assert parsed["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert parsed["quantize"]["linear"]["float8"]["recipe_name"] == "tensorwise"
    assert parsed["model"]["converters"] == ["quantize.linear.float8"]
    assert parsed["parallelism"]["module_fqns_per_model_part"][-1][-1] == "output"


def test_fields_are_torchtitan_03s():
    job, plan = _plan(vp=2, precision="fp8", zero=3)
    sections, notes = torchtitan_config(job, plan)  # the default: the current release
    assert sections["base"] == {"module": "llama3", "config": "llama3_70b", "flavor": "70B"}
    for name in ("training", "parallelism", "float8"):
        assert set(sections[name]) <= TORCHTITAN_03_FIELDS[name], set(sections[name]) - TORCHTITAN_03_FIELDS[name]
    assert sections["float8"]["recipe_name"] in ("rowwise", "rowwise_with_gw_hp")  # 0.3 has no tensorwise
    assert sections["parallelism"]["module_fqns_per_model_part"][-1][-1] == "lm_head"
    assert any("float8" in n for n in notes)
    text = render_torchtitan(job, plan)
    compile(text, "solveplan_job.py", "exec")  # a Python module
    assert "def solveplan_job():" in text and "Float8LinearConverter.Config(" in text and "[[" in text
    flags = torchtitan_flags(job, plan)
    assert flags[:4] == ["--module", "llama3", "--config", "llama3_70b"]
    assert flags[-1] == "activation_checkpoint:selective"  # a subcommand, after every other flag
    i = flags.index("--parallelism.module_fqns_per_model_part")
    assert flags[i + 1] == "tok_embeddings,layers.0,layers.1,layers.2,layers.3,layers.4,layers.5,layers.6,layers.7,layers.8,layers.9"
    assert not any(f.startswith("--quantize") or f.startswith("--model.") for f in flags)
    # Trainer.Config._validate_cuda_graphs refuses pipeline parallelism with CUDA graphs on
    assert sections["training"]["disable_cuda_graphs"] is True and "--training.disable_cuda_graphs" in flags


def test_sequence_parallel_off_is_kept_in_03():
    job, plan = _plan(model="llama3.1-8b", cluster="h100x64", tp=2, pp=1)
    plan = plan.model_copy(update={"parallel": plan.parallel.model_copy(update={"sequence_parallel": False})})
    assert torchtitan_config(job, plan)[0]["parallelism"]["enable_sequence_parallel"] is False
    assert "--parallelism.no_enable_sequence_parallel" in torchtitan_flags(job, plan)
    assert any("always shards" in n for n in torchtitan_config(job, plan, "0.2")[1])


def test_split_in_looped_stage_order():
    parts = module_fqns_per_model_part([3, 4, 4, 3], 2, 14, "output")
    assert len(parts) == 8 and parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    # stage k is chunk k // 4 of rank k % 4: rank 0 holds stages 0 and 4 -> 2 + 1 = 3 layers
    count = [sum(1 for f in p if f.startswith("layers.")) for p in parts]
    assert [count[r] + count[r + 4] for r in range(4)] == [3, 4, 4, 3]
    flat = [f for p in parts for f in p if f.startswith("layers.")]
    assert flat == [f"layers.{i}" for i in range(14)]  # contiguous, in order
    job, plan = _plan(layers=[18, 21, 21, 20])
    got = torchtitan_config(job, plan)[0]["parallelism"]["module_fqns_per_model_part"]
    assert [sum(1 for f in p if f.startswith("layers.")) for p in got] == [18, 21, 21, 20]


@pytest.mark.parametrize("zero,replicate,reshard", [(0, True, None), (1, False, "never"), (2, False, "never"),
                                                    (3, False, "always")])
def test_zero_mapping(zero, replicate, reshard):
    job, plan = _plan(zero=zero)
    p = torchtitan_config(job, plan)[0]["parallelism"]
    dp = plan.parallel.dp
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == ((dp, 1) if replicate else (1, dp))
    assert p.get("fsdp_reshard_after_forward") == reshard


@pytest.mark.parametrize("recompute,mode", [("none", "none"), ("selective", "selective"), ("full", "full")])
def test_activation_checkpoint(recompute, mode):
    job, plan = _plan(recompute=recompute)
    assert torchtitan_config(job, plan, "0.2")[0]["activation_checkpoint"]["mode"] == mode
    assert torchtitan_flags(job, plan)[-1] == f"activation_checkpoint:{mode}"


def test_batch_without_pipeline_is_gradient_accumulation():
    job, plan = _plan(model="llama3.1-8b", cluster="h100x64", tp=2, pp=1)
    t = torchtitan_config(job, plan)[0]["training"]
    assert t["local_batch_size"] == 1 and t["global_batch_size"] == 512 and t["seq_len"] == 8192


def test_cli_format_torchtitan(cli):
    r = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x64", "--format", "torchtitan")
    assert r.code == 0 and "def solveplan_job():" in r.out and "config.parallelism.tensor_parallel_degree" in r.out
    compile(r.out, "solveplan_job.py", "exec")
    r = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x64", "--format", "torchtitan",
            "--torchtitan-version", "0.2")
    assert r.code == 0 and "[parallelism]" in r.out and "tensor_parallel_degree" in r.out
    r = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x64", "--format", "torchtitan",
            "--torchtitan-version", "0.1")
    assert r.code == 2 and "--torchtitan-version" in r.err
