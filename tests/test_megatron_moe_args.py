"""Megatron-LM arguments of mixture-of-experts plans: the rules Megatron-LM enforces on them
(megatron/training/arguments.py, megatron/core/transformer/transformer_config.py, MoELayer and
parallel_state at d98e8a6; benchmarks/megatron_args.py runs Megatron's own validation on them),
encoded without Megatron. Models are the real Hugging Face configs in tests/data/hf."""

from __future__ import annotations

import re

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.megatron import MegatronArgs, megatron_args, moe_layer_freq_arg
from solveplan.specs import JobSpec

HF = "tests/data/hf/{}/config.json"

_Par = ParallelConfig


def _model(name, **update):
    m = load_model(HF.format(name))
    return m.model_copy(update=update) if update else m


def _launch(model, cluster, *, tp=1, pp=1, cp=1, vp=1, ep=1, etp=1, zero=1, sp=None, layers=None, gbs=256,
            seq=4096, **jobkw) -> MegatronArgs:
    m = _model(model) if isinstance(model, str) else model
    c = load_cluster(cluster)
    job = JobSpec(model=m, cluster=c, global_batch_size=gbs, seq_length=seq, **jobkw)
    dp = c.num_gpus // (tp * pp * cp)
    par = _Par(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=1, num_microbatches=gbs // dp,
               recompute="selective", sequence_parallel=tp > 1 if sp is None else sp, zero=zero, ep=ep, etp=etp)
    split = layers or [m.num_layers // pp] * pp
    return megatron_args(job, make_plan(job, par, split))


def _eval_freq(text: str, n: int) -> list[int]:
    """What Megatron-LM's `moe_freq_type` makes of the value (arguments.py: an int N, or a list
    expression of digits and `[]()+*,` only, evaluated), as the layer pattern of
    `get_gpt_decoder_block_spec`."""
    if "[" not in text:
        return [int(i % int(text) == 0) for i in range(n)]
    assert not re.search(r"[^,\d\[\]\(\)\+\*]", text), text
    return list(eval(text))  # noqa: S307 - the same evaluation Megatron-LM performs on the flag


def test_mixtral_experts_topk_ffn_ep_etp():
    f = _launch("Mixtral-8x7B-v0.1", "h100x64", tp=2, pp=2, ep=8).flags()
    assert f["--num-experts"] == "8" and f["--moe-router-topk"] == "2" and f["--moe-ffn-hidden-size"] == "14336"
    assert f["--expert-model-parallel-size"] == "8" and f["--moe-layer-freq"] == "1"
    # validate_args defaults ETP to TP (2 here): the planner's etp=1 must be said
    assert f["--expert-tensor-parallel-size"] == "1"
    assert f["--moe-token-dispatcher-type"] == "alltoall" and "--moe-grouped-gemm" in f
    assert _launch("Mixtral-8x7B-v0.1", "h100x64", tp=2, ep=1, etp=2).flags()["--moe-token-dispatcher-type"] == "allgather"
    assert f["--moe-router-load-balancing-type"] == "aux_loss"
    assert "--moe-shared-expert-intermediate-size" not in f and "--multi-latent-attention" not in f


def test_dense_plans_get_no_moe_flags():
    from solveplan.catalog import load_model as lm

    m = lm("llama3.1-8b")
    job = JobSpec(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096)
    par = ParallelConfig(tp=2, pp=1, dp=32, cp=1, vp=1, micro_batch_size=1, num_microbatches=8,
                         recompute="selective", sequence_parallel=True, zero=1)
    args = megatron_args(job, make_plan(job, par, [32])).args
    assert not [a for a in args if a.startswith("--moe") or "expert" in a or a == "--num-experts"]


def test_deepseek_v3_mla_mtp_router_and_dense_first_layers():
    ma = _launch("DeepSeek-V3", "h100x1024", tp=2, pp=16, ep=64, layers=[3] + [4] * 14 + [2], gbs=8192)
    f = ma.flags()
    assert _eval_freq(f["--moe-layer-freq"], 61) == [0] * 3 + [1] * 58
    assert f["--moe-shared-expert-intermediate-size"] == "2048"
    assert "--moe-shared-expert-overlap" not in f  # the formulation prices shared experts on the critical path
    assert f["--moe-router-score-function"] == "sigmoid" and "--moe-router-enable-expert-bias" in f
    assert f["--moe-router-num-groups"] == "8" and f["--moe-router-group-topk"] == "4"
    assert f["--moe-router-load-balancing-type"] == "seq_aux_loss"
    assert "--multi-latent-attention" in f and f["--q-lora-rank"] == "1536" and f["--kv-lora-rank"] == "512"
    assert f["--qk-head-dim"] == "128" and f["--qk-pos-emb-head-dim"] == "64" and f["--v-head-dim"] == "128"
    assert "--group-query-attention" not in f  # validate_args: mutually exclusive with MLA
    # the checkpoint's YaRN (config.json rope_scaling: factor 40, mscale = mscale_all_dim = 1), as Megatron-LM's own
    # DeepSeek-V3 launch (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh) sets it
    assert (f["--rope-type"], f["--rotary-scaling-factor"], f["--mscale"], f["--mscale-all-dim"]) == ("yarn", "40", "1", "1")
    assert f["--mtp-num-layers"] == "1"
    assert f["--decoder-first-pipeline-num-layers"] == "3" and f["--decoder-last-pipeline-num-layers"] == "2"


def test_mtp_module_sits_in_the_layout_last_stage():
    ma = _launch("DeepSeek-V3", "h100x1024", pp=8, vp=2, ep=64, layers=[7, 8, 8, 8, 8, 8, 8, 6], gbs=8192)
    layout = ma.flags()["--pipeline-model-parallel-layout"]
    assert layout == ma.layout and layout.endswith("|t*3,m,L") and layout.count("m") == 1
    assert sum(int(n) for n in re.findall(r"t\*(\d+)", layout)) + len(re.findall(r"t(?!\*)", layout)) == 61


def test_v2_lite_without_q_lora_has_no_q_rank():
    f = _launch("DeepSeek-V2-Lite", "h100x32", pp=4, ep=8, layers=[6, 7, 7, 7]).flags()
    assert "--q-lora-rank" not in f and f["--kv-lora-rank"] == "512"
    assert _eval_freq(f["--moe-layer-freq"], 27) == [0] + [1] * 26


def test_llama4_maverick_alternating_layers_and_top1_sigmoid():
    f = _launch("Llama-4-Maverick-17B-128E-Instruct", "h100x512", tp=4, pp=4, ep=32, etp=2, seq=8192).flags()
    m = _model("Llama-4-Maverick-17B-128E-Instruct")
    assert _eval_freq(f["--moe-layer-freq"], 48) == [int(v) for v in m.moe_layer_mask]
    assert f["--moe-router-topk"] == "1" and f["--moe-router-score-function"] == "sigmoid"
    assert "--moe-router-pre-softmax" not in f  # only top-1 *softmax* needs it


def test_top1_softmax_needs_pre_softmax():
    """TransformerConfig: 'Please use --moe-router-pre-softmax when topk is 1' with softmax scores."""
    m = _model("Mixtral-8x7B-v0.1", moe_router_topk=1)
    assert "--moe-router-pre-softmax" in _launch(m, "h100x64", ep=8).flags()


@pytest.mark.parametrize("name", ["Mixtral-8x7B-v0.1", "DeepSeek-V3", "DeepSeek-V2-Lite", "Qwen3-30B-A3B",
                                  "Llama-4-Maverick-17B-128E-Instruct", "Llama-4-Scout-17B-16E-Instruct",
                                  "gpt-oss-20b", "Qwen1.5-MoE-A2.7B", "deepseek-moe-16b"])
def test_layer_freq_round_trips_through_megatrons_parser(name):
    m = _model(name)
    text = moe_layer_freq_arg(m)
    assert _eval_freq(text, m.num_layers) == [int(v) for v in m.moe_layer_mask]
    assert len(text) < 40  # compact: a period, run-length coded


def test_moe_with_tp_forces_sequence_parallel():
    """MoELayer.forward raises in training with TP > 1 and no sequence parallelism."""
    ma = _launch("Qwen3-30B-A3B", "h100x64", tp=2, ep=8, sp=False)
    assert "--sequence-parallel" in ma.flags() and any("sequence-parallel" in n for n in ma.notes)
    assert "--sequence-parallel" not in _launch("Qwen3-30B-A3B", "h100x64", tp=1, ep=8).flags()


def test_biases_with_etp_are_said_to_be_refused():
    """TransformerConfig: 'Bias in Moe is only supported when ETP==1' (GPT-OSS has linear biases)."""
    assert not any("etp" in n for n in _launch("gpt-oss-20b", "h100x32", tp=2, ep=8).notes)
    bad = _launch("gpt-oss-20b", "h100x32", tp=2, ep=8, etp=2)
    assert any("etp=2" in n and "refuse" in n for n in bad.notes)


def test_illegal_expert_grid_is_said():
    ma = _launch("Mixtral-8x7B-v0.1", "h100x64", ep=16)
    assert any("ep=16" in n for n in ma.notes)


def test_capacity_factor_and_shared_expert_gate():
    f = _launch(_model("Mixtral-8x7B-v0.1", moe_expert_capacity_factor=1.25), "h100x64", ep=8).flags()
    assert f["--moe-expert-capacity-factor"] == "1.25" and f["--moe-token-drop-policy"] == "probs"
    assert f["--moe-router-load-balancing-type"] == "aux_loss"  # capacity works with aux_loss only (or seq/none)
    q = _launch("Qwen1.5-MoE-A2.7B", "h100x32", ep=4).flags()
    assert "--moe-shared-expert-gate" in q and q["--moe-shared-expert-intermediate-size"] == "5632"


def test_grouped_gemm_needs_ampere():
    """validate_args: --moe-grouped-gemm asserts compute capability >= 8."""
    v = _launch("Mixtral-8x7B-v0.1", "v100x64", ep=8)
    assert "--moe-grouped-gemm" not in v.flags() and any("grouped GEMM" in n for n in v.notes)


def test_flex_dispatcher_and_a2a_overlap_follow_the_job():
    """The job's dispatcher with EP (flex: DeepEP; HybridEP where an NVLink domain spans nodes, TransformerConfig,
    or where DeepEP has no config for the TP x EP group's size), allgather without EP; the all-to-all overlap as
    Megatron spells it."""
    f = _launch("Qwen3-30B-A3B", "h100x64", ep=16, moe_token_dispatcher="flex").flags()
    assert f["--moe-token-dispatcher-type"] == "flex" and f["--moe-flex-dispatcher-backend"] == "deepep"
    wide = _launch("DeepSeek-V3", "h100x1024", pp=4, ep=256, layers=[16, 15, 15, 15], gbs=8192,
                   moe_token_dispatcher="flex")
    assert wide.flags()["--moe-flex-dispatcher-backend"] == "hybridep"  # DeepEP: "Unsupported number of EP ranks"
    assert any("HYBRID_EP_MULTINODE=1" in n for n in wide.notes)
    assert _launch("Qwen3-30B-A3B", "h100x64", ep=1, moe_token_dispatcher="flex").flags()[
        "--moe-token-dispatcher-type"] == "allgather"
    o = _launch("DeepSeek-V3", "h100x1024", pp=8, vp=2, ep=64, layers=[7, 8, 8, 8, 8, 8, 8, 6], gbs=8192,
                moe_a2a_overlap=True)
    fo = o.flags()
    assert "--overlap-moe-expert-parallel-comm" in fo and "--delay-wgrad-compute" in fo
    assert "--moe-shared-expert-overlap" not in fo  # TransformerConfig: not with the all-to-all overlap


def test_what_the_catalog_does_not_model_is_said_not_launched():
    from solveplan.catalog import load_model as lm

    ma = _launch(lm("llama4-scout"), "h100x128", tp=2, ep=16)
    said = [n for n in ma.notes if n.startswith("not launched")]
    assert len(said) == 1 and "RoPE" in said[0]
    assert not [n for n in _launch(lm("mixtral-8x7b"), "h100x64", ep=8).notes if n.startswith("not launched")]


def test_gpt_oss_is_launched_with_its_sinks_and_clamped_quick_geglu():
    """GPT-OSS's attention sinks and its experts' (up + 1) * gate * sigmoid(1.702 gate) clamped at 7 are
    Megatron-LM flags (TransformerConfig softmax_type, glu_linear_offset, activation_func_clamp_value at
    d98e8a6, and --quick-geglu); with cp > 1 its sinks take the all-to-all exchange."""
    from solveplan.catalog import load_model as lm

    ma = _launch(lm("gpt-oss-120b"), "h100x64", tp=2, ep=8)
    a = ma.args
    assert "--quick-geglu" in a and "--swiglu" not in a
    assert [a[a.index(f) + 1] for f in ("--softmax-type", "--glu-linear-offset", "--activation-func-clamp-value")] \
        == ["learnable", "1", "7"]
    assert not [n for n in ma.notes if n.startswith("not launched")]
    cp = _launch(lm("gpt-oss-20b"), "h100x32", tp=1, cp=2, ep=16).args
    i = cp.index("--cp-comm-type")
    assert cp[i + 1] == "a2a" and cp[i + 2].startswith("--")  # one exchange for every layer, windowed or not


def test_cuda_graph_and_fp8_weight_settings_reach_the_launch():
    """The job's CUDA graphs and FP8 primary weights are Megatron flags (arguments.py at d98e8a6:
    --cuda-graph-impl, --cuda-graph-modules, --fp8-param-gather, --reuse-grad-buf-for-mxfp8-param-ag);
    Megatron's defaults stay unsaid."""
    a = _launch("Qwen3-30B-A3B", "h100x64", ep=8, precision="fp8-tensorwise", fp8_param_gather=True,
                cuda_graph_impl="transformer_engine", cuda_graph_modules=("attn", "moe_router", "moe_preprocess")).args
    i = a.index("--cuda-graph-modules")
    assert a[a.index("--cuda-graph-impl") + 1] == "transformer_engine" and a[i + 1:i + 4] == [
        "attn", "moe_router", "moe_preprocess"]
    assert "--fp8-param-gather" in a and "--reuse-grad-buf-for-mxfp8-param-ag" not in a
    plain = _launch("Qwen3-30B-A3B", "h100x64", ep=8).args
    assert "--cuda-graph-impl" not in plain and "--fp8-param-gather" not in plain
    full = _launch("Qwen3-30B-A3B", "h100x64", ep=8, moe_token_dispatcher="flex", cuda_graph_impl="full_iteration")
    assert full.args[full.args.index("--cuda-graph-impl") + 1] == "full_iteration"
    assert any("--moe-expert-rank-capacity-factor" in n for n in full.notes)
