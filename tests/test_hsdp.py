"""Megatron-FSDP's hybrid sharding (HSDP: --num-distributed-optimizer-instances r with --outer-dp-sharding-strategy
optim), the job's distributed_optimizer_instances: ZeRO-3 inside each instance, the optimizer state across them."""

import pytest

from solveplan.catalog import load_cluster, load_job, load_model
from solveplan.errors import InputError
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.space.shapes import Shapes


def _co(model, cluster, instances, **shape):
    return stage_coefficients(load_model(model), load_cluster(cluster), Shapes.single(**shape), global_batch_size=256,
                              seq_length=4096, distributed_optimizer_instances=instances)


def test_weights_and_gradients_shard_inside_an_instance_the_optimizer_across_all():
    """Llama 3.1 8B on 64 GPUs, ZeRO-3 over dp 64: with 8 instances the weights and gradients are sharded over 8
    ranks, 8x ZeRO-3's bytes; Adam's state stays sharded over all 64 (outer 'optim')."""
    full, hsdp = (_co("llama3.1-8b", "h100x64", r, dp=64, zero=3) for r in (1, 8))
    assert float(hsdp.layer_params_bytes[0]) == pytest.approx(8 * float(full.layer_params_bytes[0]), rel=1e-12)
    assert float(hsdp.layer_grads_bytes[0]) == pytest.approx(8 * float(full.layer_grads_bytes[0]), rel=1e-12)
    assert float(hsdp.layer_optimizer_bytes[0]) == pytest.approx(float(full.layer_optimizer_bytes[0]), rel=1e-12)


def test_per_layer_gathers_stay_in_the_instance_and_the_instances_sync_once_per_step():
    """An instance of 8 consecutive ranks is one node of h100x64: its per-layer gathers run on NVLink, faster than
    ZeRO-3's over 8 nodes; the instances' gradient reduce-scatter and weight all-gather (once per step, over 8
    ranks a node apart) are step-level traffic that plain ZeRO-3 has none of, hidden behind compute like ZeRO-1's."""
    full, hsdp = (_co("llama3.1-8b", "h100x64", r, dp=64, zero=3) for r in (1, 8))
    assert float(hsdp.layer_zero3_s[0]) < float(full.layer_zero3_s[0])
    assert float(full.layer_dp_step_s[0]) == 0.0 < float(hsdp.layer_dp_step_s[0])
    assert float(full.layer_window_s[0]) == 0.0 < float(hsdp.layer_window_s[0])


def test_moe_experts_shard_inside_an_instance_of_the_expert_data_parallel_group():
    """Qwen3-30B-A3B, dp 64, ep 8 (edp 8) with 4 instances: expert weights sharded over 2 ranks, the rest over 16."""
    model = load_model("qwen3-30b-a3b")
    full, hsdp = (_co("qwen3-30b-a3b", "h100x64", r, dp=64, ep=8, zero=3) for r in (1, 4))
    z1 = _co("qwen3-30b-a3b", "h100x64", 1, dp=64, ep=8, zero=1)
    h, E = 2048, 128
    experts = E / 8 * 3 * h * 768
    rest = model.moe_layer_params - E * 3 * h * 768
    assert float(z1.layer_params_bytes[0]) == pytest.approx(2 * (experts + rest), rel=1e-12)
    assert float(full.layer_params_bytes[0]) == pytest.approx(2 * (experts / 8 + rest / 64), rel=1e-12)
    assert float(hsdp.layer_params_bytes[0]) == pytest.approx(2 * (experts / 2 + rest / 16), rel=1e-12)


def _job(**extra):
    return load_job({"model": "llama3.1-8b", "cluster": "h100x64", "global_batch_size": 256, **extra})


def test_hsdp_rules_name_the_field():
    from solveplan.space.rules import complete_config
    job = _job(distributed_optimizer_instances=8)
    assert job.constraints.zero == (3,)  # Megatron: outer 'optim' sharding only with optim_grads_params
    with pytest.raises(InputError, match="constraints.zero") as e:
        _job(distributed_optimizer_instances=8, constraints={"zero": [1]})
    assert "distributed_optimizer_instances needs zero 3" in e.value.message
    with pytest.raises(InputError) as e:
        complete_config(_job(distributed_optimizer_instances=3), dict(tp=1, pp=1, zero=3))
    assert e.value.field == "distributed_optimizer_instances" and "do not divide dp*cp = 64" in e.value.message
    with pytest.raises(InputError, match="framework torchtitan"):
        _job(distributed_optimizer_instances=8, framework="torchtitan")
    shapes = __import__("solveplan.space.enumeration", fromlist=["x"]).enumerate_shapes(_job(
        distributed_optimizer_instances=8)).shapes
    assert len(shapes) and set(shapes.zero.tolist()) == {3} and not ((shapes.dp * shapes.cp) % 8).any()


def test_megatron_arguments_name_the_instances_and_the_cli_flag_reaches_the_job(cli):
    import json

    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    job = _job(distributed_optimizer_instances=8)
    args = megatron_args(job, plan_config(job, dict(tp=1, pp=1, zero=3))).args
    assert args[args.index("--num-distributed-optimizer-instances") + 1] == "8"
    assert args[args.index("--outer-dp-sharding-strategy") + 1] == "optim" and "--use-megatron-fsdp" in args
    code, out, err = cli("evaluate", "--model", "llama3.1-8b", "--cluster", "h100x64", "--global-batch-size", "256",
                         "--tp", "1", "--pp", "1", "--zero", "3", "--distributed-optimizer-instances", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["settings"]["distributed_optimizer_instances"] == 8


def test_an_infeasible_answer_names_the_instances():
    from solveplan.diagnose import shape_shortfall
    short = shape_shortfall(_job(distributed_optimizer_instances=3, constraints={"tp": [1], "pp": [1]}))
    assert short.resource == "legal shapes"
    assert "distributed_optimizer_instances (3) dividing dp x cp" in short.suggestions[0]
