"""The rules Megatron-LM's own validation enforces on the launch arguments (found by
benchmarks/megatron_args.py running Megatron's parse_args / validate_args /
core_transformer_config_from_args; megatron/training/arguments.py), encoded without Megatron:
every rule below is one that refused a plan there, or one that builds a different model."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.megatron import MegatronArgs, gpu_arch, megatron_args
from solveplan.specs import JobSpec, ModelSpec


def _flags(args: list[str]) -> dict:
    return MegatronArgs(list(args)).flags()


def _launch(model, cluster, *, tp=1, pp=1, cp=1, vp=1, zero=1, sp=None, layers=None, gbs=None, seq=None, **jobkw):
    m = load_model(model) if isinstance(model, str) else model
    c = load_cluster(cluster)
    job = JobSpec(model=m, cluster=c, global_batch_size=gbs or m.global_batch_size, seq_length=seq or m.seq_length,
                  **jobkw)
    dp = c.num_gpus // (tp * pp * cp)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=1,
                         num_microbatches=job.global_batch_size // dp, recompute="selective",
                         sequence_parallel=tp > 1 if sp is None else sp, zero=zero)
    split = layers or [m.num_layers // pp] * pp
    return megatron_args(job, make_plan(job, par, split))


@pytest.mark.parametrize("zero,strategy", [(2, "optim_grads"), (3, "optim_grads_params")])
def test_zero_2_3_are_megatron_fsdp_with_its_checkpoint_format(zero, strategy):
    ma = _launch("gpt3-13b", "a100x64", tp=2, zero=zero)
    f = _flags(ma.args)
    assert "--use-megatron-fsdp" in f and f["--data-parallel-sharding-strategy"] == strategy
    assert f["--ckpt-format"] == "fsdp_dtensor"  # validate_args: "Megatron-FSDP requires the fsdp_dtensor format"
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in ma.env  # FSDP asserts it is not 1, even with tp > 1
    assert any("unset" in n for n in ma.notes)


@pytest.mark.parametrize("zero", [0, 1])
def test_no_fsdp_flags_below_zero_2(zero):
    f = _flags(_launch("gpt3-13b", "a100x64", tp=2, zero=zero).args)
    assert "--use-megatron-fsdp" not in f and "--ckpt-format" not in f
    assert ("--use-distributed-optimizer" in f) == (zero == 1)


@pytest.mark.parametrize("cluster,tp,cp,needed", [
    ("a100x64", 2, 1, True), ("h100x64", 1, 2, True), ("h100x64", 1, 1, False), ("b200x64", 2, 1, False),
])
def test_cuda_device_max_connections(cluster, tp, cp, needed):
    """validate_args: tp > 1 or cp > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell."""
    ma = _launch("llama3.1-8b", cluster, tp=tp, cp=cp)
    assert (ma.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1") == needed
    launch = next(line for line in ma.command().splitlines() if "torchrun" in line)
    assert launch.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun") == needed
    assert gpu_arch("a100-80gb") == 8 and gpu_arch("h100-sxm") == 9 and gpu_arch("b200") == 10


def test_one_pipeline_layout_flag_at_most():
    """validate_args: at most one of --num-virtual-stages-per-pipeline-rank and
    --pipeline-model-parallel-layout (and the layers-per-virtual-stage flag)."""
    even = _flags(_launch("llama3.1-8b", "h100x64", tp=2, pp=4, vp=2).args)
    assert even["--num-virtual-stages-per-pipeline-rank"] == "2" and "--pipeline-model-parallel-layout" not in even
    odd = _flags(_launch("llama3.1-8b", "h100x64", tp=2, pp=4, vp=2, layers=[7, 9, 9, 7]).args)
    assert "--pipeline-model-parallel-layout" in odd and "--num-virtual-stages-per-pipeline-rank" not in odd
    assert "--num-layers-per-virtual-pipeline-stage" not in odd


def test_tp_comm_overlap_needs_sequence_parallel():
    with_sp = _flags(_launch("gpt3-13b", "h100x64", tp=4, sp=True, tp_comm_overlap=True).args)
    without = _launch("gpt3-13b", "h100x64", tp=4, sp=False, tp_comm_overlap=True)
    assert "--tp-comm-overlap" in with_sp and "--sequence-parallel" in with_sp
    assert "--tp-comm-overlap" not in _flags(without.args) and any("--tp-comm-overlap" in n for n in without.notes)


def test_llama_builds_rope_rmsnorm_swiglu_without_biases():
    f = _flags(_launch("llama3.1-70b", "h100x64", tp=8).args)
    assert f["--position-embedding-type"] == "rope" and f["--rotary-base"] == "500000"
    assert f["--rotary-percent"] == "1" and "--use-rope-scaling" in f and f["--rope-scaling-factor"] == "8"
    assert f["--normalization"] == "RMSNorm" and f["--norm-epsilon"] == "1e-05"
    assert "--disable-bias-linear" in f and "--add-qkv-bias" not in f and "--swiglu" in f
    assert f["--kv-channels"] == "128" and f["--num-query-groups"] == "8" and "--group-query-attention" in f
    assert "--untie-embeddings-and-output-weights" in f


def test_qwen2_keeps_its_qkv_bias():
    """validate_args turns --add-qkv-bias on whenever linear biases are on, so the QKV-only bias
    needs --disable-bias-linear --add-qkv-bias."""
    f = _flags(_launch("qwen2-7b", "h100x64", tp=4).args)
    assert "--disable-bias-linear" in f and "--add-qkv-bias" in f and f["--rotary-base"] == "1000000"
    assert f["--norm-epsilon"] == "1e-06"


def test_nemotron_squared_relu_layernorm1p_half_rotary():
    f = _flags(_launch("nemotron4-15b", "h100x64", tp=4).args)
    assert "--squared-relu" in f and "--swiglu" not in f and "--apply-layernorm-1p" in f
    assert f["--normalization"] == "LayerNorm" and f["--rotary-percent"] == "0.5" and "--disable-bias-linear" in f


def test_gpt3_is_megatron_default_gpt():
    f = _flags(_launch("gpt3-13b", "a100x64", tp=2).args)
    assert f["--position-embedding-type"] == "learned_absolute" and f["--normalization"] == "LayerNorm"
    assert "--disable-bias-linear" not in f and "--swiglu" not in f and "--untie-embeddings-and-output-weights" not in f


def test_head_dimension_set_apart_is_passed():
    nemo = load_model("tests/data/hf/Mistral-Nemo-Base-2407/config.json")
    f = _flags(_launch(nemo, "h100x64", tp=8).args)
    assert f["--kv-channels"] == "128" and f["--hidden-size"] == "5120" and f["--num-attention-heads"] == "32"


def test_what_megatron_cannot_build_is_said():
    bloom = _launch("bloom-176b", "a100x1024", tp=8, pp=8)
    assert any("ALiBi" in n for n in bloom.notes)
    assert any("ReLU" in n for n in _launch("opt-1.3b", "a100x8").notes)
    gemma = load_model("tests/data/hf/gemma-2-9b-it/config.json")
    g = _launch(gemma, "h100x64", tp=2)
    assert "--quick-geglu" in g.args and any("tanh GeLU" in n for n in g.notes)
    bare = ModelSpec(name="mine", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024,
                     vocab_size=1000, gated_mlp=True, nominal_params_b=None)
    assert any("states no architecture" in n for n in _launch(bare, "a100x8").notes)


def test_fp8_and_precision_flags():
    f = _flags(_launch("llama3.1-8b", "h100x64", tp=2, precision="fp8").args)
    assert f["--fp8-format"] == "hybrid" and "--bf16" in f
    v = _launch("gpt3-1.3b", "v100x16")
    assert "--fp16" in v.args and "--bf16" not in v.args


def test_the_megatron_check_says_what_it_needs(capsys):
    """benchmarks/megatron_args.py without a Megatron-LM checkout: a clear message, exit 2."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "megatron_args.py"
    spec = importlib.util.spec_from_file_location("megatron_args_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([]) == 2 and "--megatron-lm PATH" in capsys.readouterr().err
    assert mod.main(["--megatron-lm", str(path.parent)]) == 2
    assert "no megatron/training/arguments.py" in capsys.readouterr().err
