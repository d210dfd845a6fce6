"""FP8 dot-product attention (Megatron-Core fp8_dot_product_attention, Transformer Engine's fp8_dpa): the jobs
Transformer Engine runs it for, its price (the fused kernel's matmuls at the FP8 peak, the exponentials and the
casts beside them), the CLI flag, the launch's note, and the published recipes that state it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import solveplan.catalog_published
from solveplan.calibration.moe_rows import moe_row_job
from solveplan.calibration.rows import row_job
from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.job import job_coefficients
from solveplan.formulation.kernels import flash_attention_s
from solveplan.formulation.layer_terms import attention_core_s, fp8_attention_cast_s
from solveplan.space.shapes import Shapes
from solveplan.specs import JobSpec


def _job(model="qwen3-30b-a3b", cluster="b200x8", **kw):
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=64, seq_length=m.seq_length, **kw)


@pytest.mark.parametrize("model, cluster, kw, why", [
    ("qwen3-30b-a3b", "b200x8", dict(precision="bf16"), "runs no FP8 attention under bf16"),
    ("qwen3-30b-a3b", "b200x8", dict(precision="fp8-blockwise"), "runs no FP8 attention under fp8-blockwise"),
    ("qwen3-30b-a3b", "b200x8", dict(precision="nvfp4"), "runs no FP8 attention under nvfp4"),
    ("qwen3-30b-a3b", "h100x8", dict(precision="fp8-tensorwise"), "needs blackwell GPUs"),
    ("gpt-oss-20b", "h100x8", dict(precision="fp8"), r"softmax learnable \(attention sinks\) needs blackwell"),
    ("mistral-7b", "h100x8", dict(precision="fp8"), "with a sliding window needs blackwell"),
    ("qwen3-30b-a3b", "b200x8", dict(precision="mxfp8", attention_kernel="flash2"), "set attention_kernel cudnn"),
    ("qwen3-30b-a3b", "b200x8", dict(precision="mxfp8", framework="torchtitan"), "needs framework megatron"),
    ("deepseek-v3.2", "b200x64", dict(precision="mxfp8"), "sparse attention runs its own kernels"),
])
def test_refused_where_transformer_engine_runs_no_fp8_attention(model, cluster, kw, why):
    """Transformer Engine d0067d0's backend filters (specs/fp8_attention.py), each refusal one line naming the fix."""
    with pytest.raises(ValueError, match=why) as err:
        _job(model, cluster, fp8_dot_product_attention=True, **kw)
    assert "drop fp8_dot_product_attention" in str(err.value)


@pytest.mark.parametrize("model, cluster, precision", [
    ("qwen3-30b-a3b", "h100x8", "fp8"), ("qwen3-30b-a3b", "b200x8", "fp8-tensorwise"),
    ("qwen3-30b-a3b", "gb200x8", "mxfp8"), ("gpt-oss-120b", "gb200x64", "mxfp8"), ("deepseek-v3", "b200x64", "mxfp8"),
    ("mistral-7b", "b200x8", "fp8"),
])
def test_accepted_where_it_runs(model, cluster, precision):
    assert _job(model, cluster, precision=precision, fp8_dot_product_attention=True).fp8_dot_product_attention


def test_the_core_runs_its_matmuls_at_the_fp8_peak_beside_the_same_exponentials():
    """With a 128-wide head the matmuls bound the B200's fused kernel: FP8 halves them and the core time
    moves towards, never below, the exponential bound; with a 64-wide head (GPT-OSS) the exponentials
    bound FP8 attention already, so it gains less than its head-128 counterpart."""
    gpu = load_cluster("b200x8").gpu
    shape = dict(batch=4, heads=32, s_q=4096, s_k=4096, flash=True, kernel="cudnn", hbm_bytes_per_s=8e12)
    ratios = {}
    for d in (64, 128):
        bf16 = attention_core_s(gpu, head_dim=d, **shape)
        fp8 = attention_core_s(gpu, head_dim=d, fp8=True, **shape)
        exp_only = flash_attention_s(batch=4, heads=32, s_q=4096, s_k=4096, head_dim=d, causal=True,
                                     flop_per_s=1e30, efficiency=1.0, exp_per_s=gpu.sfu_tops * 1e12, overlap_exp=True)
        for b, f, e in zip(bf16, fp8, exp_only):
            assert e <= f < b
        ratios[d] = bf16[0] / fp8[0]
    assert ratios[64] < ratios[128] <= gpu.peak_fp8_tflops / gpu.peak_bf16_tflops + 1e-9
    assert attention_core_s(gpu, head_dim=128, fp8=True, **{**shape, "kernel": "flash2"}) == \
        attention_core_s(gpu, head_dim=128, **{**shape, "kernel": "flash2"})  # no fused kernel, no FP8


def test_the_layer_pays_the_casts_and_gains_the_core():
    """One shape, with and without FP8 attention: the layer's forward differs by exactly the core's change plus
    the quantisation of Q, K, V and the dequantisation of the output (`fp8_attention_cast_s`)."""
    one = np.ones(1, dtype=np.int64)
    shapes = Shapes(tp=one, pp=one, dp=one * 8, cp=one, vp=one, micro_batch_size=one * 2, recompute=one * 0,
                    sequence_parallel=np.zeros(1, dtype=bool), zero=one, ep=one * 8, etp=one)
    off, on = (job_coefficients(_job(precision="mxfp8", fp8_dot_product_attention=f), shapes) for f in (False, True))
    model, gpu = load_model("qwen3-30b-a3b"), load_cluster("b200x8").gpu
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    tokens = 2 * model.seq_length
    cast_f, cast_b = fp8_attention_cast_s("mxfp8", tokens, model.q_hidden_size, model.kv_hidden_size, hbm)
    kw = dict(batch=2, heads=model.num_attention_heads, s_q=model.seq_length, s_k=model.seq_length,
              head_dim=model.head_dim, flash=True, kernel="cudnn", hbm_bytes_per_s=hbm)
    core_gain = np.subtract(attention_core_s(gpu, **kw), attention_core_s(gpu, fp8=True, **kw))
    assert cast_f > 0 and cast_b > 0
    gained = float(off.layer_compute_s[0] - on.layer_compute_s[0])
    assert gained == pytest.approx(float(core_gain.sum() - cast_f - cast_b), rel=1e-6)


def test_cli_flag_json_and_launch_note(cli):
    args = ("--model", "qwen3-30b-a3b", "--cluster", "gb200x8", "--precision", "mxfp8", "--ep", "8", "--tp", "1",
            "--pp", "1")
    code, out, _ = cli("evaluate", *args, "--fp8-dot-product-attention", "--json")
    assert code == 0 and json.loads(out)["settings"]["fp8_dot_product_attention"] is True
    faster = json.loads(out)["step_time_s"]
    code, out, _ = cli("evaluate", *args, "--json")
    assert code == 0 and json.loads(out)["step_time_s"] > faster
    code, out, _ = cli("optimize", *args, "--fp8-dot-product-attention", "--time-limit", "20")
    assert code == 0 and "cfg.mixed_precision.fp8_dot_product_attention = True" in out  # no Megatron-LM flag
    code, out, err = cli("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "h100x8", "--precision", "bf16",
                         "--fp8-dot-product-attention")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "fp8_dot_product_attention" in err


def _raw(row_id):
    path = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"  # the shipped copy
    rows = json.loads(path.read_text())["measurements"]
    return next(r for r in rows if r["id"] == row_id)


def test_the_recipes_that_state_it_reach_the_job():
    """Megatron-Bridge's 26.08 Qwen3 recipe turns FP8 attention on; DeepSeek-V3's 26.08 recipes pass it to their
    helper as an argument, which the reader takes from the recipe function (`moe_recipes.RECIPE_ARGUMENTS`: on for
    GB300, the helper's default off for GB200); an argument no table gives stays at Megatron-Core's default, said so."""
    on = moe_row_job(_raw("mbridge_perf-26.08-qwen3-30b-a3b-gb200-mxfp8-8"))
    assert on.job.fp8_dot_product_attention
    gb300 = moe_row_job(_raw("mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256"))
    assert gb300.job.fp8_dot_product_attention and not any("not settled" in a for a in gb300.assumed)
    gb200 = moe_row_job(_raw("mbridge_perf-26.08-deepseek-v3-gb200-mxfp8-256"))
    assert not gb200.job.fp8_dot_product_attention and not any("not settled" in a for a in gb200.assumed)
    unknown = _raw("mbridge_perf-26.08-deepseek-v3-gb200-mxfp8-256")
    unknown["parallel"]["other"]["recipe"]["recipe_name"] = "another_recipe"
    unsettled = moe_row_job(unknown)
    assert not unsettled.job.fp8_dot_product_attention
    assert any("FP8 attention" in a and "not settled" in a for a in unsettled.assumed)
    off = moe_row_job(_raw("mbridge_perf-26.04.01-qwen3-30b-a3b-gb200-mxfp8-8"))
    assert not off.job.fp8_dot_product_attention


def test_a_measured_fp8_attention_efficiency_replaces_the_prior():
    """A GPU file may state what its FP8 attention kernel reaches (`fp8_attention_efficiency`); unset, the BF16
    kernel's fraction is used, and the BF16 attention never reads it."""
    gpu = load_cluster("b200x8").gpu
    shape = dict(batch=4, heads=32, s_q=4096, s_k=4096, head_dim=128, flash=True, kernel="cudnn", hbm_bytes_per_s=8e12)
    slower = gpu.model_copy(update={"fp8_attention_efficiency": gpu.fused_attention_efficiency / 2})
    prior, measured = attention_core_s(gpu, fp8=True, **shape), attention_core_s(slower, fp8=True, **shape)
    assert measured[0] > prior[0] and measured[1] > prior[1]
    assert attention_core_s(slower, **shape) == attention_core_s(gpu, **shape)


def test_a_recipe_whose_fp8_attention_transformer_engine_refuses_is_priced_in_bf16_not_refused():
    """A row that ran FP8 attention where today's rule does not (the 26.08 Qwen3 recipe moved to H100 under FP8
    current scaling, which Transformer Engine d0067d0 runs in FP8 attention on sm100+ only) is still read:
    its attention priced in BF16, and said."""
    raw = json.loads(json.dumps(_raw("mbridge_perf-26.08-qwen3-30b-a3b-gb200-mxfp8-8")))
    h100 = _raw("mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16")
    raw.update(hardware=h100["hardware"], precision=h100["precision"])
    row = moe_row_job(raw)
    assert row.job is not None and not row.skipped, row.skipped
    assert row.job.cluster.gpu.architecture == "hopper" and not row.job.fp8_dot_product_attention
    assert any("FP8 attention priced in BF16" in a and "needs blackwell" in a for a in row.assumed), row.assumed


def test_a_dense_rows_recipe_reaches_its_job_too():
    """The precision config is read alike for dense and MoE rows (`precision_rows`): a dense Blackwell row whose
    recipe turns FP8 attention on is priced with it, and the same row on H100 under FP8 current scaling in BF16."""
    raw = json.loads(json.dumps(_raw("mbridge_perf-26.04.01-llama3-70b-gb200-fp8-cs-64")))
    raw["parallel"].setdefault("other", {}).setdefault("recipe", {})["fp8_dot_product_attention"] = True
    on = row_job(raw)
    assert on.job is not None and on.job.fp8_dot_product_attention, on.skipped
    h100 = _raw("mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16")
    raw["hardware"] = h100["hardware"]
    moved = row_job(raw)
    assert moved.job is not None and not moved.job.fp8_dot_product_attention, moved.skipped
    assert any("FP8 attention priced in BF16" in a for a in moved.assumed)
