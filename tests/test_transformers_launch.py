"""The launch of a plan priced for the transformers stack (render/transformers.py): run_clm.py's
TrainingArguments flags and DeepSpeed config as the plan means them, parsed by transformers' own
HfArgumentParser (and DeepSpeed's config filled by the Trainer) where transformers, accelerate and
deepspeed are installed; and the table and JSON printing the launch of the job's own stack."""

from __future__ import annotations

import json

import pytest

from solveplan.catalog import load_job
from solveplan.plan import make_plan, parallel_from_row
from solveplan.render.transformers import (DS_CONFIG, TRANSFORMERS_BEFORE_5_23, deepspeed_config, launcher,
                                           render_transformers, trainer_flags)
from solveplan.space.rules import complete_config

MISTRAL = "tests/data/hf/mistral-7b/config.json"


def _plan(cluster: str, gbs: int, **knobs):
    job = load_job({"model": "llama3.1-8b", "cluster": cluster, "global_batch_size": gbs, "seq_length": 4096,
                    "framework": "transformers"})
    row, _ = complete_config(job, knobs)
    return job, make_plan(job, parallel_from_row(job, row), [job.model.num_layers])


def test_ddp_with_checkpointing_is_torchrun_on_one_node_without_deepspeed():
    job, plan = _plan("h200x8", 64, micro_batch_size=2, zero=0, recompute="full")
    flags = trainer_flags(job, plan)
    assert plan.parallel.dp == 8 and plan.parallel.num_microbatches == 4
    assert flags[flags.index("--per_device_train_batch_size") + 1] == "2"
    assert flags[flags.index("--gradient_accumulation_steps") + 1] == "4"
    assert flags[flags.index("--activation_checkpointing_kwargs") + 1] == '{"use_reentrant": false}'
    assert "--deepspeed" not in flags and deepspeed_config(job, plan) is None
    assert launcher(job, plan) == ["torchrun", "--nnodes", "1", "--nproc-per-node", "8"]
    assert flags[flags.index("--block_size") + 1] == "4096" and "--bf16" in flags


def test_zero3_is_deepspeed_stage_3_over_two_nodes():
    job, plan = _plan("h200x16", 64, micro_batch_size=1, zero=3, recompute="none")
    config = deepspeed_config(job, plan)
    assert config["zero_optimization"]["stage"] == 3 and config["bf16"] == {"enabled": "auto"}
    assert launcher(job, plan)[:5] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "8"]
    text = render_transformers(job, plan)
    assert f"cat > {DS_CONFIG} <<'EOF'" in text and "--deepspeed ds_config.json" in text
    assert "--activation_checkpointing" not in text and "--config_name llama3.1-8b-config.json" in text
    assert json.loads(text.split(f"cat > {DS_CONFIG} <<'EOF'\n")[1].split("\nEOF")[0]) == config
    written = json.loads(text.split("cat > llama3.1-8b-config.json <<'EOF'\n")[1].split("\nEOF")[0])
    assert written["architectures"] == ["LlamaForCausalLM"] and written["num_hidden_layers"] == 32


@pytest.mark.parametrize("zero,recompute", [(0, "full"), (2, "none"), (3, "full")])
def test_transformers_own_parser_reads_the_plan(zero, recompute, tmp_path, monkeypatch):
    """TrainingArguments parses every flag but run_clm.py's own two, and the Trainer fills the DeepSpeed
    config's "auto" fields with the plan's micro-batch and accumulation."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    if zero:
        pytest.importorskip("deepspeed")
    import transformers.training_args as training_args
    from packaging.version import Version

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)  # this machine has no GPU
    job, plan = _plan("h200x16", 128, micro_batch_size=2, zero=zero, recompute=recompute)
    flags = trainer_flags(job, plan)
    if zero:
        (tmp_path / DS_CONFIG).write_text(json.dumps(deepspeed_config(job, plan)))
        flags[flags.index("--deepspeed") + 1] = str(tmp_path / DS_CONFIG)
    if Version(transformers.__version__) < Version("5.23"):
        flags = [TRANSFORMERS_BEFORE_5_23.get(arg, arg) for arg in flags]
    flags[flags.index("--output_dir") + 1] = str(tmp_path / "out")
    parser = transformers.HfArgumentParser((transformers.TrainingArguments,))
    args, rest = parser.parse_args_into_dataclasses(flags, return_remaining_strings=True)
    assert rest == ["--config_name", "llama3.1-8b-config.json", "--block_size", "4096"]
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (2, plan.parallel.num_microbatches)
    assert args.bf16 and args.optim.value == "adamw_torch_fused"
    checkpointing = getattr(args, "activation_checkpointing", None) or args.gradient_checkpointing
    assert bool(checkpointing) == (recompute == "full")
    if zero:
        filled = args.hf_deepspeed_config.config
        assert filled["zero_optimization"]["stage"] == zero and filled["train_micro_batch_size_per_gpu"] == 2
        assert filled["gradient_accumulation_steps"] == plan.parallel.num_microbatches
    else:
        assert not args.deepspeed


def test_the_table_ends_with_the_launch_of_the_jobs_own_stack(cli):
    res = cli("optimize", "--model", MISTRAL, "--cluster", "h200x8", "--framework", "transformers",
              "--global-batch-size", "32", "--seq-len", "4096")
    assert res.code == 0, res.err
    assert "transformers Trainer launch" in res.out and "run_clm.py" in res.out and "pretrain_gpt.py" not in res.out
    assert f"--config_name {MISTRAL}" in res.out
    res = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8", "--framework", "torchtitan")
    assert res.code == 0 and "torchtitan 0.3 job config" in res.out and "pretrain_gpt.py" not in res.out
    res = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8")
    assert res.code == 0 and "Megatron-LM launch arguments" in res.out and "run_clm.py" not in res.out


def test_format_and_json_carry_the_transformers_launch(cli):
    res = cli("optimize", "--model", MISTRAL, "--cluster", "h200x8", "--framework", "transformers",
              "--global-batch-size", "32", "--seq-len", "4096", "--format", "transformers")
    assert res.code == 0 and res.out.startswith("# transformers") and "torchrun" in res.out
    res = cli("optimize", "--model", MISTRAL, "--cluster", "h200x8", "--framework", "transformers",
              "--global-batch-size", "32", "--seq-len", "4096", "--json")
    block = json.loads(res.out)["transformers"]
    assert block["launcher"][0] == "torchrun" and "--per_device_train_batch_size" in block["args"]
    res = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8", "--json")
    assert json.loads(res.out)["transformers"] is None
    res = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8", "--format", "transformers")
    assert res.code == 2 and "--framework transformers" in res.err and len(res.err.strip().splitlines()) == 1
