"""Megatron's fine-grained activation offloading (`--offload-modules`, the job's offload_modules): the bytes each
module takes off the GPU, the copies' stall against the layer's own compute (formulation/fine_offload.py), the
rules Megatron enforces (specs/offloading.py) and the launch flags."""

from __future__ import annotations

import pytest

from solveplan.catalog import load_cluster, load_job, load_model
from solveplan.errors import InputError
from solveplan.formulation.job import job_coefficients
from solveplan.plan import ParallelConfig, make_plan, plan_config
from solveplan.render.megatron import megatron_args
from solveplan.render.torchtitan import torchtitan_config
from solveplan.space.shapes import Shapes
from solveplan.specs import JobSpec

BF16 = 2.0


def _job(model="llama3.1-8b", cluster="h100x8", **kw):
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=kw.pop("global_batch_size", 64),
                   seq_length=kw.pop("seq_length", 4096), **kw)


def _co(job, **shape):
    return job_coefficients(job, Shapes.single(**{"dp": job.cluster.num_gpus, **shape}))


def test_attention_modules_free_q_k_v_and_the_projection_input():
    """Llama 3.1 8B in BF16, tp 1, one micro-batch of 4096 tokens: core_attn frees Q, K, V (2 bytes x (h_q + 2 h_kv)
    per token), attn_proj the projection's input (2 h_q); the working set gains two layers' worth."""
    base, off = _job(), _job(offload_modules=("core_attn", "attn_proj"))
    m, tokens = base.model, 4096
    hq, hkv = m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim
    freed = BF16 * tokens * (hq + 2 * hkv) + BF16 * tokens * hq
    c0, c1 = _co(base), _co(off)
    assert c0.layer_act_bytes[0] - c1.layer_act_bytes[0] == pytest.approx(freed, rel=1e-12)
    assert c1.const_bytes[0] - c0.const_bytes[0] == pytest.approx(2 * freed, rel=1e-12)
    # at the H100's PCIe Gen5 x16 (64 GB/s) a layer's 167.8 MB copy (Q, K, V, the core's output, the projection's
    # input) takes 2.6 ms, longer than its forward: the stall is the copy less the layer's forward, and less its backward
    copy_s = (freed + BF16 * tokens * hq) / (base.cluster.gpu.host_link_gbyte_per_s * 1e9)
    fwd, bwd = c1.layer_fwd_s[0], c1.layer_bwd_s[0]
    assert c1.layer_offload_s[0] == pytest.approx(max(0.0, copy_s - fwd) + max(0.0, copy_s - bwd), rel=1e-9)
    assert c0.layer_offload_s[0] == 0.0


def test_a_fast_host_link_hides_the_copies():
    """GB200's NVLink-C2C (225 GB/s per direction) carries the same copies behind the layer: no stall."""
    job = _job(cluster="gb200x8", offload_modules=("core_attn", "attn_proj"))
    assert _co(job).layer_offload_s[0] == 0.0
    assert _co(job).layer_act_bytes[0] < _co(_job(cluster="gb200x8")).layer_act_bytes[0]


def test_full_recomputation_leaves_nothing_to_offload():
    base, off = _job(), _job(offload_modules=("core_attn", "attn_proj"))
    c0, c1 = _co(base, recompute="full"), _co(off, recompute="full")
    assert c1.layer_act_bytes[0] == c0.layer_act_bytes[0] and c1.layer_offload_s[0] == 0.0


def test_expert_fc1_under_delayed_fp8_copies_the_bf16_input():
    """Megatron saves expert fc1's original BF16 input when it is offloaded under an FP8 recipe without hardware block
    scales (experts.py set_save_original_input): the GPU frees the FP8 input it would keep (1 byte per element) and
    the link carries 2 bytes per element."""
    from solveplan.formulation.coefficients import _StageTerms
    from solveplan.formulation.fine_offload import expert_offloaded

    job = _job(model="qwen3-30b-a3b", cluster="h100x8", precision="fp8", offload_modules=("expert_fc1",))
    shapes = Shapes.single(dp=8, ep=8)
    T = _StageTerms(job.model, job.cluster, shapes, {
        "global_batch_size": 64, "seq_length": 4096, "precision": "fp8", "flash_attention": True,
        "attention_kernel": "cudnn", "grad_reduce_dtype": "fp32", "overlap_grad_reduce": True, "tp_comm_overlap": False,
        "moe_load_imbalance": 1.0, "moe_a2a_overlap": False, "moe_token_dispatcher": "alltoall", "framework": "megatron",
        "recompute_modules": None, "fp8_param_gather": False, "cuda_graph": ("none", ()),
        "adam_state_bytes": 12.0, "offload_modules": ("expert_fc1",)}).run_sections()
    off = expert_offloaded(T, shapes.ep, shapes.etp)
    E, k, _ = job.model.moe_dims
    copies = k * 4096  # balanced routing: every rank computes its own tokens' k copies (ep = dp)
    assert off.freed[0] == pytest.approx(1.0 * copies * job.model.hidden_size, rel=1e-12)
    assert off.copied[0] == pytest.approx(2.0 * off.freed[0], rel=1e-12)


def test_mla_up_projection_recompute_already_frees_q_k_v():
    """DeepSeek's recipes offload core_attn beside recomputing mla_up_proj: Q, K, V are freed once, not twice."""
    kw = dict(model="deepseek-v2-lite", cluster="h100x8", recompute_modules=("mla_up_proj",))
    shape = dict(recompute="selective", ep=8)
    plain, with_core = _co(_job(**kw), **shape), _co(_job(offload_modules=("core_attn",), **kw), **shape)
    assert with_core.layer_act_bytes[0] == pytest.approx(plain.layer_act_bytes[0], rel=1e-12)
    no_recompute = dict(model="deepseek-v2-lite", cluster="h100x8")
    assert (_co(_job(offload_modules=("core_attn",), **no_recompute), ep=8).layer_act_bytes[0]
            < _co(_job(**no_recompute), ep=8).layer_act_bytes[0])


def test_hybrid_fused_group_mlp_offload_and_plan_fields():
    """Nemotron 3 Nano's MoE layers (Megatron-Bridge's GB200 recipe): the fused grouped MLP's activations leave the
    GPU; the plan says what it was priced with and shows the stall."""
    cfg = dict(tp=1, pp=1, ep=8, etp=1, micro_batch_size=2, recompute="none")
    base = _job(model="nemotron3-nano", cluster="gb200x8", seq_length=8192)
    off = _job(model="nemotron3-nano", cluster="gb200x8", seq_length=8192, offload_modules=("fused_group_mlp",))
    p0, p1 = plan_config(base, cfg), plan_config(off, cfg)
    assert p1.stages[0].memory_bytes.activations < 0.8 * p0.stages[0].memory_bytes.activations
    assert "offload_s" in p1.breakdown and "offload_s" not in p0.breakdown
    assert p1.step_time_s >= p0.step_time_s
    assert p1.settings["offload_modules"] == ["fused_group_mlp"]


def test_min_offloaded_tensor_size_keeps_smaller_tensors_and_a_recomputed_output_is_never_copied():
    """Nemotron 3 Nano's fused grouped MLP in BF16, one micro-batch of 8192 tokens, EP 8, moe_act recomputed: the
    saved tensors are fc1's input (tokens x 6 copies x 2688) and the activation's input, fc1's output (x 1856);
    the activation's output is rebuilt, so neither kept nor copied. A min_offloaded_tensor_size between the two
    sizes (Megatron: `tensor.numel() < self.min_offloaded_tensor_size` stays) keeps fc1's output on the GPU."""
    cfg = dict(tp=1, pp=1, ep=8, etp=1, micro_batch_size=1, recompute="selective")
    kw = dict(model="nemotron3-nano", cluster="gb200x8", seq_length=8192, precision="bf16",
              offload_modules=("fused_group_mlp",), recompute_modules=("moe_act",))
    copies = 8192 * 6
    fc1_in, act_in = copies * 2688, copies * 1856
    moe_layers = 23
    host = [plan_config(_job(**kw, **extra), cfg).stages[0].memory_bytes.host
            for extra in ({}, {"min_offloaded_tensor_size": act_in + 1})]
    assert host[0] == pytest.approx(moe_layers * BF16 * (fc1_in + act_in), rel=1e-9)
    assert host[1] == pytest.approx(moe_layers * BF16 * fc1_in, rel=1e-9)
    job = _job(**kw, min_offloaded_tensor_size=act_in + 1)
    args = megatron_args(job, plan_config(job, cfg)).args
    assert args[args.index("--min-offloaded-tensor-size") + 1] == str(act_in + 1)
    with pytest.raises(ValueError, match="min_offloaded_tensor_size applies to fine-grained offloading"):
        _job(min_offloaded_tensor_size=10)


@pytest.mark.parametrize("kw, words", [
    (dict(offload_modules=("attn_proj",)), "needs core_attn too"),
    (dict(offload_modules=("expert_fc1",)), "need a mixture-of-experts model"),
    (dict(offload_modules=("mlp_norm",)), "fused into fc1"),
    (dict(offload_modules=("attn_norm",)), "fused into the QKV linear"),
    (dict(offload_modules=("core_attn",), cpu_offloading_num_layers=2), "cannot be enabled with cpu_offloading"),
    (dict(offload_modules=("core_attn",), framework="torchtitan"), "framework torchtitan has none"),
    (dict(offload_modules=("core_attn",), cuda_graph_impl="full_iteration"), "max-inflight-offloads"),
    (dict(model="qwen3-30b-a3b", offload_modules=("fused_group_mlp", "moe_act")), "cannot be combined"),
    (dict(model="qwen3-30b-a3b", offload_modules=("moe_act",), recompute_modules=("moe",)),
     "recomputing the entire MoE layer"),
    (dict(model="qwen3-30b-a3b", offload_modules=("core_attn",), cuda_graph_impl="local",
          cuda_graph_modules=("attn", "moe_router")), "only expert_fc1, moe_act and fused_group_mlp"),
    (dict(model="deepseek-v2-lite", offload_modules=("attn_norm",), cuda_graph_impl="transformer_engine",
          cuda_graph_modules=("attn", "moe_router")), "cross the graphs' boundaries"),
    (dict(model="mixtral-8x7b", offload_modules=("fused_group_mlp",), precision="bf16"), None),  # SwiGLU: runs
])
def test_megatrons_rules(kw, words):
    if words is None:
        assert _job(**kw).offload_modules == ("fused_group_mlp",)
        return
    with pytest.raises(ValueError, match=words):
        _job(**kw)


def test_fused_group_mlp_needs_etp_1():
    """The op fuser's grouped MLP runs without expert tensor parallelism: the search narrows etp to 1, a job file that
    allows only etp 2 is refused at that constraint, and an explicit etp 2 names Megatron's words."""
    job = _job(model="qwen3-30b-a3b", cluster="h100x16", offload_modules=("fused_group_mlp",))
    assert job.constraints.etp == (1,)
    with pytest.raises(InputError) as e:
        load_job({"model": "qwen3-30b-a3b", "cluster": "h100x16", "offload_modules": ["fused_group_mlp"],
                  "constraints": {"etp": [2]}}, field="job")
    assert e.value.field == "job.constraints.etp"
    with pytest.raises(ValueError, match="Fused GroupedMLP"):
        plan_config(_job(model="qwen3-30b-a3b", cluster="h100x16", offload_modules=("fused_group_mlp",),
                         constraints={"etp": None}), dict(tp=1, pp=1, ep=8, etp=2))


def test_launch_flags_and_environment():
    off = _job(cluster="h100x16", offload_modules=("core_attn", "attn_proj"))
    par = ParallelConfig(tp=2, pp=2, dp=4, cp=1, vp=1, micro_batch_size=1, num_microbatches=16,
                         recompute="none", sequence_parallel=True, zero=1)
    ma = megatron_args(off, make_plan(off, par, [16, 16]))
    assert ma.args[ma.args.index("--offload-modules") + 1:][:2] == ["core_attn", "attn_proj"]
    assert "--fine-grained-activation-offloading" in ma.args and ma.env["NVTE_CPU_OFFLOAD_V1"] == "1"
    assert "--use-transformer-engine-op-fuser" not in ma.args
    _, notes = torchtitan_config(off, make_plan(off, par, [16, 16]))
    assert any("offload_modules (core_attn, attn_proj) are not expressed" in n for n in notes)
    nano = _job(model="nemotron3-nano", cluster="gb200x8", seq_length=8192, offload_modules=("fused_group_mlp",))
    args = megatron_args(nano, plan_config(nano, dict(tp=1, pp=1, ep=8, etp=1))).args
    assert "--use-transformer-engine-op-fuser" in args and "--use-fused-weighted-squared-relu" in args


def test_cli_flag(cli):
    import json

    base = ["evaluate", "--model", "llama3.1-8b", "--cluster", "h100x8", "--global-batch-size", "64", "--tp", "1",
            "--pp", "1", "--micro-batch-size", "1", "--recompute", "none"]
    code, out, err = cli(*base, "--offload-modules", "core_attn,attn_proj", "--json")
    assert code == 0, err
    assert json.loads(out)["settings"]["offload_modules"] == ["core_attn", "attn_proj"]
    code, out, err = cli(*base, "--offload-modules", "attn_proj")
    assert code == 2 and out == "" and "\n" not in err.strip() and "Traceback" not in err
    assert "needs core_attn too" in err


def _shortfall(job):
    from solveplan.diagnose import memory_shortfall
    from solveplan.search.candidates import prepare

    return memory_shortfall(job, prepare(job, prune_time=False), budget_s=1.0)


def test_an_infeasible_answer_names_offloading_where_it_makes_a_plan_fit():
    """Qwen3-30B-A3B at 12k tokens without recomputation does not fit 8 H100s; offloading the attention's and the
    experts' saved inputs does, and a job that asks for it gets a plan."""
    from solveplan.optimize import optimize

    kw = dict(model="qwen3-30b-a3b", seq_length=12288, constraints={"recompute": ["none"], "cp": [1]})
    sf = _shortfall(_job(**kw))
    said = [s for s in sf.suggestions if s.startswith("fine-grained activation offloading")]
    assert len(said) == 1 and "--offload-modules core_attn,attn_proj,expert_fc1,moe_act" in said[0]
    assert "a plan fits" in said[0]
    res = optimize(_job(offload_modules=("core_attn", "attn_proj", "expert_fc1", "moe_act"), **kw), time_limit_s=30)
    assert res.plan is not None and res.plan.fits


def test_no_offloading_suggestion_when_the_model_state_is_short():
    """DeepSeek-V3's weights, gradients and Adam state alone exceed 64 GB200s: offloading activations cannot help, and
    the answer does not suggest it."""
    sf = _shortfall(_job(model="deepseek-v3", cluster="gb200x64", global_batch_size=1024, precision="mxfp8"))
    assert sf.resource == "memory"
    assert not any("offload" in s for s in sf.suggestions)


def test_host_memory_is_reported_beside_the_gpu_total():
    """The offloaded activations are held in pinned host memory: each stage reports them (every in-flight
    micro-batch's), outside the GPU total; layer-level CPU offloading reports its N layers'."""
    job = _job(cluster="gb200x8", offload_modules=("core_attn", "attn_proj"))
    m, tokens = job.model, 4096
    hq, hkv = m.num_attention_heads * m.head_dim, m.num_kv_heads * m.head_dim
    copied = BF16 * tokens * (hq + 2 * hkv) + 2 * BF16 * tokens * hq  # Q, K, V, the core's output, the proj input
    par = ParallelConfig(tp=1, pp=2, dp=4, cp=1, vp=1, micro_batch_size=1, num_microbatches=16, recompute="none",
                         sequence_parallel=False, zero=1)
    plan = make_plan(job, par, [16, 16])
    assert plan.stages[0].memory_bytes.host == pytest.approx(2 * 16 * copied, rel=1e-12)  # 1F1B: 2 in flight on stage 0
    assert plan.stages[1].memory_bytes.host == pytest.approx(16 * copied, rel=1e-12)
    base = make_plan(_job(cluster="gb200x8"), par, [16, 16])
    assert base.stages[0].memory_bytes.host == 0.0
    for s in plan.stages:  # not GPU memory: the total is the parts' sum without it
        mb = s.memory_bytes
        assert mb.total == pytest.approx(mb.params + mb.grads + mb.optimizer + mb.activations + mb.other, rel=1e-12)
    cpu = _job(cluster="gb200x8", cpu_offloading_num_layers=8)
    one = ParallelConfig(tp=1, pp=1, dp=8, cp=1, vp=1, micro_batch_size=1, num_microbatches=8, recompute="none",
                         sequence_parallel=False, zero=1)
    full = make_plan(_job(cluster="gb200x8"), one, [32]).stages[0].memory_bytes.activations
    held = make_plan(cpu, one, [32]).stages[0].memory_bytes.host
    assert 0 < held < full * 8 / 32  # 8 of 32 layers' saved activations (the stage's total counts the head's too)
