"""`--framework torchtitan` on a mixture-of-experts model (formulation/eager_moe.py, eager_attention.py): the count of
what torchtitan's MoE blocks and its MLA and sink attention save equals what its own modules saved on CPU
(benchmarks/measured/torchtitan-moe-cpu/moe_block.json, re-measured live where torch and torchtitan import), the op
counts are that measurement's, the planner runs only the EP/ETP forms torchtitan runs, its plans load in torchtitan's
ConfigManager, and CP-SAT still equals the exhaustive search on such jobs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from solveplan.catalog import load_job, load_model
from solveplan.errors import InputError
from solveplan.formulation import eager_moe
from solveplan.formulation.job import job_coefficients
from solveplan.space.enumeration import enumerate_shapes
from solveplan.specs import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "benchmarks" / "measured" / "torchtitan-moe-cpu" / "moe_block.json"


def _spec(hidden: int, ffn: int, experts: int, top_k: int, shared: int = 0, score: str = "softmax", norm: bool = True,
          groups: int | None = None, kept: int | None = None, gpt_oss: bool = False) -> ModelSpec:
    """A model of the measured block's dimensions: Qwen3-MoE's router by default, DeepSeek's (shared experts, the score
    function, route_norm as HF's norm_topk_prob, expert groups), or GPT-OSS's block (biased experts)."""
    router = dict(moe_router_score_function=score, moe_router_pre_softmax=score == "softmax" and not norm)
    if groups:
        router.update(moe_router_num_groups=groups, moe_router_group_topk=kept)
    return ModelSpec(name="tt-moe", num_layers=2, hidden_size=hidden, num_attention_heads=4, num_kv_heads=2,
                     ffn_hidden_size=ffn, vocab_size=1000, gated_mlp=True, qk_norm=not gpt_oss, num_experts=experts,
                     moe_ffn_hidden_size=ffn, moe_router_topk=top_k, add_bias_linear=gpt_oss,
                     moe_shared_expert_intermediate_size=shared or None, **router)


def _case_spec(case: dict) -> ModelSpec:
    return _spec(case["hidden"], case["ffn"], case["experts"], case["top_k"], case.get("shared_ffn", 0),
                 case.get("score", "softmax"), case.get("route_norm", True), case.get("expert_groups"),
                 case.get("groups_kept"), case.get("gpt_oss", False))


def _cpu_count(case: dict) -> float:
    """The count for one measured case on CPU: CUDA's count, CPU's autocast difference, the int32 offsets."""
    spec, T = _case_spec(case), case["tokens"]
    cuda = float(eager_moe.saved_bytes(spec, T, 1, 1, 1, 1.0))
    return cuda + eager_moe.cpu_minus_cuda_bytes(spec, T) + 4 * case["experts"]


MEASURED_030 = MEASURED.with_name("moe_block_0.3.0.json")  # the PyPI release, whose block takes (batch, seq, hidden)
CASES = [(f.name, c) for f in (MEASURED, MEASURED_030) for c in json.loads(f.read_text())["cases"]]


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[f"{n}-h{c['hidden']}E{c['experts']}" for n, c in CASES])
def test_saved_bytes_equal_torchtitans_measured_block(case):
    assert _cpu_count(case) == pytest.approx(case["saved_bytes"], abs=0.5), case


def test_op_counts_are_the_measured_ones():
    """The counted ops are b5bcd76's (on CPU: 2 + 2 fewer than CUDA's autocast casts); 0.3.0's qwen3 block dispatches
    a few views more (`eager_moe.RELEASE_030_OPS`)."""
    for case in json.loads(MEASURED.read_text())["cases"]:
        before, after, bwd = eager_moe.block_ops(_case_spec(case))
        assert (before + after - 2, bwd - 2) == (case["ops_forward"], case["ops_backward"]), case
    release = {(c["ops_forward"], c["ops_backward"]) for c in json.loads(MEASURED_030.read_text())["cases"]
               if not c.get("shared_ffn") and not c.get("gpt_oss")}  # qwen3's block
    assert release == {eager_moe.RELEASE_030_OPS}


def test_the_block_measured_live_equals_the_count():
    """Where torch and torchtitan import (not in CI: `PYTHONPATH=<torchtitan checkout>`, CPU torch)."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch, CPU build)")
    try:
        import torchtitan.models.common.moe  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"torchtitan does not import here: {exc}")
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from torchtitan_moe_saved import measure
    for hidden, ffn, experts, top_k in [(128, 48, 8, 2), (160, 64, 16, 4)]:
        case = measure(hidden, ffn, experts, top_k)
        assert _cpu_count(case) == pytest.approx(case["saved_bytes"], abs=0.5), case
        assert (case["ops_forward"], case["ops_backward"]) in {(38, 60), eager_moe.RELEASE_030_OPS}


def _job(framework: str, **kw):
    return load_job({"model": "qwen3-30b-a3b", "cluster": "h100x64", "framework": framework, **kw})


def test_torchtitan_keeps_more_per_layer_than_megatron_on_the_same_shape():
    """The same shape (ep 8, zero 2, no recompute) costs more memory and time under torchtitan's eager MoE block."""
    out = {}
    for fw in ("megatron", "torchtitan"):
        job = _job(fw, constraints={"tp": [1], "pp": [2], "ep": [8], "zero": [2], "recompute": ["none"],
                                    "micro_batch_size": [1], "vp": [1]})
        co = job_coefficients(job, enumerate_shapes(job).shapes)
        out[fw] = (float(co.layer_act_bytes[0]), float(co.layer_fwd_s[0] + co.layer_bwd_s[0]))
    assert out["torchtitan"][0] > 1.5 * out["megatron"][0]
    assert out["torchtitan"][1] > out["megatron"][1]


def test_torchtitan_shapes_take_its_expert_forms_only():
    """etp 1 with EP and tp without; EP divides dp_shard x cp x tp (zero 0 is DDP there: dp_shard 1)."""
    job = _job("torchtitan")
    s = enumerate_shapes(job).shapes
    ep, etp, tp, cp, dp, zero = s.ep, s.etp, s.tp, s.cp, s.dp, s.zero
    assert len(ep) and (ep > 1).any()
    assert np.all(etp == np.where(ep > 1, 1, tp))
    assert np.all((np.where(zero >= 1, dp, 1) * cp * tp) % ep == 0)
    assert set(np.unique(zero)) <= {0, 2, 3}


def test_models_torchtitan_is_not_counted_for_are_refused_naming_the_framework():
    for name in ("mixtral-8x7b", "llama4-scout"):
        with pytest.raises(InputError) as err:
            load_job({"model": name, "cluster": "h100x64", "framework": "torchtitan"})
        assert err.value.field.endswith("framework") and "use framework megatron" in str(err.value)
    with pytest.raises(InputError, match="transformers|Megatron-Core"):
        load_job({"model": "qwen3-30b-a3b", "cluster": "h100x64", "framework": "transformers"})


def test_cli_refuses_ep_under_ddp_and_etp_with_ep(cli):
    r = cli("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--framework", "torchtitan",
            "--tp", "1", "--pp", "4", "--ep", "8", "--zero", "0")
    assert r.code == 2 and "--ep" in r.err and "dp_shard" in r.err, r
    r = cli("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--framework", "torchtitan",
            "--tp", "2", "--pp", "2", "--ep", "4", "--etp", "2", "--zero", "2")
    assert r.code == 2 and "--etp" in r.err and "torchtitan's form" in r.err, r


def test_optimize_is_optimal_and_the_launch_expresses_its_ep(cli):
    r = cli("optimize", "--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--framework", "torchtitan", "--json")
    assert r.code == 0, r
    d = json.loads(r.out)
    assert d["status"] == "OPTIMAL" and d["framework"] == "torchtitan"
    ep = d["parallel"]["ep"]
    assert d["torchtitan"]["parallelism"].get("expert_parallel_degree", 1) == ep
    assert not any("not expressible" in n for n in d["torchtitan_notes"])


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_agreement import _OPT_WHY, MOE_SETTINGS, _close, _exhaustive, _optimize, _quantum, jobs  # noqa: E402


@st.composite
def torchtitan_moe_jobs(draw):
    """A drawn job made a Qwen3-style MoE (QK norm, softmax router, SiLU-gated experts, every layer routed) or a
    DeepSeek-style one (multi-latent attention, shared experts, a dense first layer sometimes), run by torchtitan."""
    job = draw(jobs())
    m = job.model
    L = m.num_layers
    deepseek = {}
    if draw(st.booleans()):  # deepseek_v3's decoder: MLA (with or without q_lora), shared experts, a dense first layer
        deepseek = dict(qk_norm=False, multi_latent_attention=True, q_lora_rank=draw(st.sampled_from([None, 64])),
                        kv_lora_rank=m.hidden_size // 4, qk_head_dim=64, qk_pos_emb_head_dim=32, v_head_dim=64,
                        moe_shared_expert_intermediate_size=m.hidden_size,
                        moe_layer_pattern=(0,) + (1,) * (L - 1) if draw(st.booleans()) else None)
    model = ModelSpec(**{**m.model_dump(exclude={"activation"}), "gated_mlp": True, "qk_norm": True,
                         "num_experts": draw(st.sampled_from([4, 8])), "moe_ffn_hidden_size": m.hidden_size // 2,
                         "moe_router_topk": draw(st.sampled_from([1, 2])), **deepseek})
    cons = {k: v for k, v in job.constraints.model_dump(exclude_none=True).items() if k != "zero"}
    return job.model_copy(update={"model": model, "framework": "torchtitan",
                                  "constraints": type(job.constraints)(**cons, zero=(0, 2, 3))})


@pytest.mark.skipif(_optimize is None, reason=_OPT_WHY)
@MOE_SETTINGS
@given(torchtitan_moe_jobs())
def test_torchtitan_moe_optimize_equals_exhaustive(job):
    _, ex = _exhaustive(job)
    sol = _optimize(job, method="cpsat", time_limit_s=60)
    if ex.status == "INFEASIBLE":
        assert sol.status == "INFEASIBLE" and sol.plan is None
        return
    assert sol.status == "OPTIMAL"
    assert _close(sol.plan.step_time_s, ex.best.objective_s, _quantum(sol)), (sol.plan.step_time_s, ex.best.objective_s)


def test_qk_norms_add_torch_rmsnorms_saved_bytes_to_torchtitans_layer():
    """torchtitan's attention norms q and k per head (common/attention.py `q_norm`, `k_norm`) when the model has q/k
    norms: 8 bytes per element of q and kv plus 4 per head row, what torch's nn.RMSNorm saves."""
    from solveplan.formulation import eager_attention
    from solveplan.formulation.frameworks import TORCHTITAN, layer_activation_bytes
    kw = dict(tokens=100.0, hidden=256, q_width=512, kv_width=128, ffn=0, mlp_matrices=3, heads=8, seq_k=100, tp=1,
              sp_degree=1, recompute=np.array([0]), flash=True, dropout=False, linear_input_bytes=2.0, gate_width=0)
    spec = ModelSpec(name="tt-qk", num_layers=2, hidden_size=256, num_attention_heads=8, num_kv_heads=2, kv_channels=64,
                     ffn_hidden_size=512, vocab_size=1000, qk_norm=True)
    plain = layer_activation_bytes(TORCHTITAN, gated=True, **kw)[0][0]
    normed = layer_activation_bytes(TORCHTITAN, gated=True, attention_extra=eager_attention.saved_extra_bytes(spec, 1),
                                    **kw)[0][0]
    assert normed - plain == pytest.approx(100 * (8 * (512 + 128) + 4 * (8 + 2)))
    torch = pytest.importorskip("torch", reason="torch is not installed")
    norm = torch.nn.RMSNorm(64).to(torch.bfloat16)
    x = torch.randn(100, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    kept = {}

    def pack(t):
        if t.untyped_storage().data_ptr() != norm.weight.untyped_storage().data_ptr():
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        norm(x)
    assert sum(kept.values()) == 100 * 8 * (8 * 64 + 4)


def test_tp_sharded_experts_route_every_token_on_every_tp_rank():
    """Without EP torchtitan shards the experts over TP (etp = tp) and each TP rank routes and combines all the
    tokens, computing every copy at f / tp: only the experts' f-wide tensors shrink (2 bytes x 4 per copy and f)."""
    spec, T = _spec(256, 128, 16, 4), 1000.0
    one = float(eager_moe.saved_bytes(spec, T, 1, 1, 1, 1.0))
    two = float(eager_moe.saved_bytes(spec, T, 2, 1, 2, 1.0))
    assert one - two == pytest.approx(4 * T * 2 * 4 * (128 - 64))
    with_ep = float(eager_moe.saved_bytes(spec, T, 2, 2, 1, 1.0))  # EP splits the sequence over TP instead
    assert with_ep < two


def test_tp_sharded_experts_gather_the_tokens_not_their_copies():
    """torchtitan without EP all-gathers the block's tokens over TP and routes them after (the dense MLP's
    sequence-parallel pair); Megatron's ETP all-gathers the k dispatched copies: 8x the bytes for Qwen3's top-8."""
    tp_s = {}
    for fw in ("megatron", "torchtitan"):
        job = _job(fw, constraints={"tp": [2], "pp": [2], "ep": [1], "etp": [2], "zero": [2], "recompute": ["none"],
                                    "micro_batch_size": [1], "vp": [1]})
        tp_s[fw] = float(job_coefficients(job, enumerate_shapes(job).shapes).layer_tp_s[0])
    assert 0 < tp_s["torchtitan"] < tp_s["megatron"] / 3, tp_s


@pytest.mark.parametrize("model,cluster", [("qwen3-30b-a3b", "h100x64"), ("qwen3-235b-a22b", "h100x256")])
def test_torchtitan_03_loads_the_plan_torchtitan_was_priced_for(model, cluster, tmp_path, monkeypatch):
    """The plan `optimize --framework torchtitan` chooses, written as torchtitan 0.3's config module, loads in
    torchtitan's own ConfigManager with the plan's degrees (skipped without torchtitan 0.3, as
    tests/test_torchtitan_load.py)."""
    import importlib
    import sys

    from test_torchtitan_load import _torchtitan

    from solveplan.optimize import optimize
    from solveplan.render.torchtitan import MODULE_NAME, render_torchtitan

    ConfigManager = _torchtitan()
    job = load_job({"model": model, "cluster": cluster, "framework": "torchtitan"})
    plan = optimize(job).plan
    (tmp_path / f"{MODULE_NAME}.py").write_text(render_torchtitan(job, plan))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
    importlib.invalidate_caches()
    cfg = ConfigManager().parse_args(["--module", MODULE_NAME, "--config", MODULE_NAME])
    par = cfg.parallelism
    p = plan.parallel
    assert (par.expert_parallel_degree, par.pipeline_parallel_degree, par.tensor_parallel_degree) == (p.ep, p.pp, p.tp)
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == p.dp
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)


@pytest.mark.parametrize("case", json.loads(MEASURED.read_text())["mla_cases"], ids=lambda c: f"q_lora{c['q_lora_rank']}")
def test_multi_latent_attention_keeps_what_torchtitans_module_kept(case):
    """torchtitan's deepseek_v3 attention, measured on CPU with a flash-style core (q, k, v, output, log-sum-exp kept):
    the GQA count at MLA's widths, the latents coefficients.py keeps and `eager_attention.saved_extra_bytes` sum to it plus
    k_pe's rotary view, d_rope bytes counted twice (an upper bound by d_rope per token); the MLA and GQA modules' op
    counts are eager_attention's."""
    from solveplan.formulation import eager_attention, frameworks
    from solveplan.formulation.moe import attention_geometry
    a, r_q, r_kv = case["heads"], case["q_lora_rank"], case["kv_lora_rank"]
    spec = ModelSpec(name="tt-mla", num_layers=2, hidden_size=case["hidden"], num_attention_heads=a,
                     ffn_hidden_size=512, vocab_size=1000, gated_mlp=True, multi_latent_attention=True,
                     q_lora_rank=r_q or None, kv_lora_rank=r_kv, qk_head_dim=case["d_nope"],
                     qk_pos_emb_head_dim=case["d_rope"], v_head_dim=case["d_v"])
    _, width, kv_width, _, latent = attention_geometry(spec, 1)
    s = frameworks.TORCHTITAN_SAVED
    gqa = s.per_q * width + s.per_kv * kv_width + s.per_head * a  # q, k, v, the output, the log-sum-exp
    ours = gqa + latent + float(eager_attention.saved_extra_bytes(spec, 1))
    assert ours - case["d_rope"] == pytest.approx(case["mla_saved_bytes"] / case["tokens"]), (ours, case)
    mla_ops = eager_attention.MLA_OPS[bool(r_q)]
    assert (case["mla_ops_forward"], case["mla_ops_backward"]) == mla_ops
    assert (case["gqa_ops_forward"], case["gqa_ops_backward"]) == eager_attention.GQA_OPS


def test_deepseek_is_priced_for_torchtitan_with_its_mla_and_shared_experts():
    """DeepSeek-V2-Lite (MLA without q_lora, a dense first layer, two shared experts, softmax without route_norm)
    plans under torchtitan, its MoE layers keeping more than Megatron's on the same shape; Mixtral stays refused."""
    out = {}
    for fw in STACKS_:
        job = load_job({"model": "deepseek-v2-lite", "cluster": "h100x16", "framework": fw,
                        "constraints": {"tp": [1], "pp": [1], "ep": [8], "zero": [2], "recompute": ["none"],
                                        "micro_batch_size": [1]}})
        out[fw] = float(job_coefficients(job, enumerate_shapes(job).shapes).layer_act_bytes[0])
    assert out["torchtitan"] > 1.5 * out["megatron"]
    assert eager_moe.route_norm(load_model("deepseek-v2-lite")) is False
    assert eager_moe.route_norm(load_model("deepseek-v3")) is True


STACKS_ = ("megatron", "torchtitan")


def test_the_launch_says_how_to_build_the_mtp_layers_the_plan_prices():
    from solveplan.plan import ParallelConfig, make_plan
    from solveplan.render.torchtitan import torchtitan_config
    job = load_job({"model": "deepseek-v3", "cluster": "h100x256", "framework": "torchtitan"})
    par = ParallelConfig(tp=1, pp=16, dp=16, cp=1, vp=1, micro_batch_size=1, num_microbatches=job.global_batch_size // 16,
                         recompute="full", sequence_parallel=False, zero=2, ep=8, etp=1)
    base = job.model.num_layers // 16
    layers = [base + (i < job.model.num_layers % 16) for i in range(16)]
    _, notes = torchtitan_config(job, make_plan(job, par, layers))
    assert any("num_mtp_layers=1" in n for n in notes), notes


@pytest.mark.parametrize("case", json.loads(MEASURED.read_text())["sink_cases"], ids=lambda c: f"h{c['hidden']}a{c['heads']}")
def test_attention_sinks_keep_what_torchtitans_gpt_oss_attention_kept(case):
    """torchtitan's gpt_oss attention against its fused-QKV GQA module of the same widths, measured on CPU with the
    same flash-style core: the sinks' rescale keeps 2 q + 6 heads bytes per token more, and 9 / 19 more ops."""
    from solveplan.formulation import eager_attention
    a, kv, d = case["heads"], case["kv_heads"], case["head_dim"]
    spec = ModelSpec(name="tt-oss", num_layers=2, hidden_size=case["hidden"], num_attention_heads=a, num_kv_heads=kv,
                     kv_channels=d, ffn_hidden_size=512, vocab_size=1000, softmax_type="learnable")
    extra = float(eager_attention.saved_extra_bytes(spec, 1)) * case["tokens"]
    assert case["gqa_saved_bytes"] + extra == pytest.approx(case["sinks_saved_bytes"]), case
    assert (case["sinks_ops_forward"] - case["gqa_ops_forward"],
            case["sinks_ops_backward"] - case["gqa_ops_backward"]) == eager_attention.SINK_OPS


def test_gpt_oss_is_priced_for_torchtitan_with_its_window_skipped():
    """GPT-OSS plans under torchtitan: its sliding windows are built (the kernel skips what they mask, so no note
    says otherwise), and its MoE layer keeps more than Megatron's on the same shape."""
    from solveplan.specs.frameworks import windows_skipped
    model = load_model("gpt-oss-120b")
    assert windows_skipped("torchtitan", model) and not windows_skipped("torchtitan", load_model("mistral-7b"))
    out = {}
    for fw in STACKS_:
        job = load_job({"model": "gpt-oss-120b", "cluster": "h100x64", "framework": fw,
                        "constraints": {"tp": [1], "pp": [4], "ep": [8], "zero": [2], "recompute": ["none"],
                                        "micro_batch_size": [1], "vp": [1]}})
        out[fw] = float(job_coefficients(job, enumerate_shapes(job).shapes).layer_act_bytes[0])
    assert out["torchtitan"] > 1.5 * out["megatron"]
