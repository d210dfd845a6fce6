"""The software stack as an input (`--framework`, formulation/frameworks.py): megatron changes
nothing; each stack runs only its parallelisms; and the memory estimate is an upper bound of
what the stack keeps, checked against first-principles counts and, where torch and
transformers import, against the tensors PyTorch really saves on CPU (saved_tensors_hooks)
for real transformers models and a replica of torchtitan's Llama 3 block.

Slack allowed: the per-layer activations must equal the measured saved bytes within 2% (the
count is op by op); the last stage is allowed up to the loss's transient peak (12 bytes per
logit against the 4 the log-softmax keeps: formulation/frameworks.py); model state is exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_job
from solveplan.errors import InputError
from solveplan.formulation import frameworks
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.formulation.job import job_coefficients
from solveplan.space.enumeration import enumerate_shapes
from solveplan.space.shapes import Shapes
from solveplan.specs.hf import model_from_hf_config

CODES = {"none": 0, "selective": 1, "full": 2}


def one_gpu_shape(b: int, recompute: str = "none", zero: int = 0) -> Shapes:
    one = np.ones(1, dtype=np.int64)
    return Shapes(tp=one, pp=one, dp=one, cp=one, vp=one, micro_batch_size=one * b,
                  recompute=one * CODES[recompute], sequence_parallel=np.zeros(1, bool), zero=one * zero)


def coefficients(model, framework: str, b: int, s: int, **kw):
    return stage_coefficients(model, load_cluster("h100x8"), one_gpu_shape(b, **kw), global_batch_size=b,
                              seq_length=s, framework=framework)


# ---------------------------------------------------------------- the default changes nothing
def test_megatron_is_the_formulation_unchanged():
    job = load_job({"model": "llama3.1-8b", "cluster": "h100x64", "global_batch_size": 256})
    assert job.framework == "megatron"
    shapes = enumerate_shapes(job).shapes
    a = job_coefficients(job, shapes)
    b = stage_coefficients(job.model, job.cluster, shapes, global_batch_size=256, seq_length=job.seq_length)
    for name, val in vars(a).items():
        assert np.array_equal(val, getattr(b, name)), name


@pytest.mark.parametrize("framework", ["torchtitan", "transformers"])
def test_eager_stacks_keep_and_move_more_than_megatron(framework):
    model = load_job({"model": "llama3.1-8b", "cluster": "h100x8"}).model
    meg, other = coefficients(model, "megatron", 1, 4096), coefficients(model, framework, 1, 4096)
    assert other.layer_act_bytes[0] > meg.layer_act_bytes[0]
    assert other.last_act_bytes[0] > meg.last_act_bytes[0]
    assert other.layer_compute_s[0] > meg.layer_compute_s[0]


# ---------------------------------------------------------------- the parallelisms each stack runs
def test_transformers_plans_data_parallelism_only():
    job = load_job({"model": "llama3.1-8b", "cluster": "h100x64", "global_batch_size": 256,
                    "framework": "transformers"})
    sh = enumerate_shapes(job).shapes
    assert len(sh) and set(sh.tp) == {1} and set(sh.pp) == {1} and set(sh.cp) == {1}
    assert set(sh.recompute) <= {0, 2}


def test_torchtitan_has_no_zero1_but_tp_pp_cp():
    job = load_job({"model": "llama3.1-8b", "cluster": "h100x64", "global_batch_size": 256,
                    "framework": "torchtitan"})
    sh = enumerate_shapes(job).shapes
    assert 1 not in set(sh.zero) and max(sh.tp) > 1 and max(sh.pp) > 1 and max(sh.cp) > 1


@pytest.mark.parametrize("framework,knob,value", [("transformers", "tp", [2]), ("transformers", "pp", [2]),
                                                  ("transformers", "recompute", ["selective"]),
                                                  ("torchtitan", "zero", [1])])
def test_forcing_an_unsupported_knob_is_one_line(framework, knob, value):
    with pytest.raises(InputError) as e:
        load_job({"model": "llama3.1-8b", "cluster": "h100x8", "framework": framework, "constraints": {knob: value}})
    assert e.value.field == f"job.constraints.{knob}" and framework in str(e.value)


def test_cli_names_the_flag_and_exits_2(cli):
    r = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8", "--framework", "transformers", "--tp", "2")
    assert r.code == 2
    assert r.err.strip().count("\n") == 0 and "--tp" in r.err and "transformers" in r.err


def test_optimize_says_which_stack(cli):
    r = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x8", "--framework", "transformers", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["framework"] == "transformers" and d["parallel"]["tp"] == 1 and d["parallel"]["pp"] == 1


# ---------------------------------------------------------------- first-principles memory
def test_transformers_model_state_is_fp32_weights_grads_adamw_and_autocast_copies():
    """Per parameter on one GPU: fp32 weight 4 + its bf16 autocast copy 2 + fp32 gradient 4 +
    AdamW exp_avg and exp_avg_sq 8 (torch.optim.AdamW state); plain DDP adds fp32 buckets 4."""
    fw = frameworks.profile("transformers")
    p, g, o = (float(x) for x in frameworks.model_state_bytes_per_param(fw, 0, 1, "bf16"))
    assert (p, g, o) == (4 + 2, 4, 8)
    p, g, o = (float(x) for x in frameworks.model_state_bytes_per_param(fw, 0, 8, "bf16"))
    assert g == 4 + 4
    p, g, o = (float(x) for x in frameworks.model_state_bytes_per_param(fw, 3, 8, "bf16"))
    assert (p, g, o) == (4 / 8, 4 / 8, 8 / 8)


# ---------------------------------------------------------------- measured with PyTorch on CPU
def _saved_bytes(model, run) -> tuple[int, int]:
    """(activation bytes, autocast weight-copy bytes) that autograd saves while `run()` runs:
    unique storages, parameters themselves left out."""
    import torch
    params = {p.data_ptr() for p in model.parameters()}
    shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape)[::-1] for p in model.parameters()}
    acts, copies = {}, {}

    def pack(t):
        if t.data_ptr() not in params:
            key, nbytes = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
            weight_like = tuple(t.shape) in shapes and t.dtype == torch.bfloat16 and t.dim() == 2
            (copies if weight_like else acts)[key] = nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(acts.values()), sum(copies.values())


# Token counts chosen so that no activation has a weight's shape (the copies are told apart by shape).
HF_CASES = {
    "llama-gqa": ("LlamaConfig", dict(hidden_size=256, intermediate_size=704, num_attention_heads=8,
                                      num_key_value_heads=2)),
    "llama-mha": ("LlamaConfig", dict(hidden_size=256, intermediate_size=704, num_attention_heads=8,
                                      num_key_value_heads=8)),
    "qwen2": ("Qwen2Config", dict(hidden_size=192, intermediate_size=512, num_attention_heads=6,
                                  num_key_value_heads=2)),
}


def _hf(case: str, layers: int, autocast: bool):
    transformers = pytest.importorskip("transformers",
                                       reason="transformers is not installed (pip install transformers)")
    import torch
    cls_name, kw = HF_CASES[case]
    cfg = getattr(transformers, cls_name)(num_hidden_layers=layers, vocab_size=1000, max_position_embeddings=4096,
                                          attn_implementation="sdpa", **kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    if not autocast:
        model = model.to(torch.bfloat16)
    model.train()
    return cfg, model


def _measure(case: str, layers: int, b: int, s: int):
    import torch
    cfg, model = _hf(case, layers, autocast=True)
    ids = torch.randint(0, 1000, (b, s))

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids)
    return cfg, model, _saved_bytes(model, run)


@pytest.mark.parametrize("case", list(HF_CASES))
def test_transformers_layer_activations_equal_the_saved_tensors(case):
    """transformers' own modelling code, fp32 weights under bf16 autocast, SDPA: the bytes one
    layer saves (4 layers minus 2) equal the profile's count for the same shape."""
    b, s = 2, 100
    _, _, (two, _) = _measure(case, 2, b, s)
    cfg, _, (four, _) = _measure(case, 4, b, s)
    per_layer = (four - two) / 2
    model = model_from_hf_config(cfg.to_dict(), name=case)
    est = float(coefficients(model, "transformers", b, s).layer_act_bytes[0])
    assert per_layer <= est <= 1.02 * per_layer, (case, per_layer, est)
    meg = float(coefficients(model, "megatron", b, s).layer_act_bytes[0])
    assert meg < per_layer  # why the profile exists: Megatron's fused count is below what eager keeps


def _measure_step(case: str, b: int, s: int) -> dict:
    """One real AdamW step of a 2-layer `case` under bf16 autocast: the bytes of weights, gradients
    and AdamW state, the autocast copies and saved activations (`_measure`), and the estimate of the
    whole model (every stage term, before the allocator's reserve). Also used by
    benchmarks/framework_memory.py."""
    import torch
    cfg, model, (acts, copies) = _measure(case, 2, b, s)
    opt = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, 1000, (b, s))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    spec = model_from_hf_config(cfg.to_dict(), name=case)
    co = coefficients(spec, "transformers", b, s)
    est = float(spec.num_layers * (co.layer_static_bytes[0] + co.layer_act_bytes[0]) + co.first_static_bytes[0]
                + co.last_static_bytes[0] + co.first_act_bytes[0] + co.last_act_bytes[0] + co.const_bytes[0])
    return dict(spec=spec, acts=acts, copies=copies, estimate=est,
                weights=sum(p.numel() * p.element_size() for p in model.parameters()),
                grads=sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()),
                state=sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values() if v.dim() > 0))


@pytest.mark.parametrize("case", ["llama-gqa", "qwen2"])
def test_transformers_full_memory_is_an_upper_bound_of_the_counted_tensors(case):
    """Weights, gradients and AdamW state of a real step plus the autocast copies and saved
    activations: the estimate (before the allocator's reserve) is at least the peak they make
    together and at most their sum plus the loss's transient."""
    b, s = 2, 100
    m = _measure_step(case, b, s)
    # One micro-batch per step and .grad set to None before it: a layer's gradient appears only
    # once its saved tensors are freed, so the peak is at one end of the backward (layers alike)
    peak = m["weights"] + m["state"] + m["copies"] + max(m["acts"], m["grads"])
    everything = m["weights"] + m["grads"] + m["state"] + m["copies"] + m["acts"]
    logits_transient = (frameworks.profile("transformers").logit_bytes - 4) * b * s * m["spec"].vocab_size
    assert peak <= m["estimate"] <= everything + logits_transient, (peak, everything, m["estimate"])


def test_transformers_op_count_matches_dispatch_profile():
    """Aten ops one eager layer dispatches (forward, backward), counted with TorchDispatchMode:
    the profile's `ops_per_layer` (within 15%: other torch/transformers versions)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    counts = {}
    for layers in (2, 4):
        _, model = _hf("llama-gqa", layers, autocast=True)
        ids = torch.randint(0, 1000, (2, 100))
        f, b = Count(), Count()
        with torch.autocast("cpu", dtype=torch.bfloat16), f:
            loss = model(input_ids=ids, labels=ids).loss
        with b:
            loss.backward()
        counts[layers] = (f.n, b.n)
    fwd = (counts[4][0] - counts[2][0]) / 2
    bwd = (counts[4][1] - counts[2][1]) / 2
    want_f, want_b = frameworks.profile("transformers").ops_per_layer
    assert fwd == pytest.approx(want_f, rel=0.15) and bwd == pytest.approx(want_b, rel=0.15)


def _torchtitan_block(dim: int, heads: int, kv_heads: int, ffn: int):
    """torchtitan's Llama3TransformerBlock as its source writes it (models/llama3/model.py
    forward; common/attention.py GQAttention.forward: wq/wk/wv, rope in fp32 complex,
    F.scaled_dot_product_attention with enable_gqa, .contiguous(), wo; common/feed_forward.py
    w2(silu(w1(x)) * w3(x)); torch.nn.RMSNorm), in bf16 as FSDP2's param_dtype runs it."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    hd = dim // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
            self.wq, self.wk = nn.Linear(dim, heads * hd, bias=False), nn.Linear(dim, kv_heads * hd, bias=False)
            self.wv, self.wo = nn.Linear(dim, kv_heads * hd, bias=False), nn.Linear(heads * hd, dim, bias=False)
            self.w1, self.w3 = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
            self.w2 = nn.Linear(ffn, dim, bias=False)

        def attention(self, x, freqs):
            T = x.shape[:-1]
            q = self.wq(x).view(*T, heads, hd)
            k, v = self.wk(x).view(*T, kv_heads, hd), self.wv(x).view(*T, kv_heads, hd)
            q = torch.view_as_real(torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2)) * freqs)
            k = torch.view_as_real(torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2)) * freqs)
            q, k = q.flatten(3).type_as(v), k.flatten(3).type_as(v)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True, enable_gqa=True)
            return self.wo(out.transpose(1, 2).contiguous().view(*T, -1))

        def forward(self, x, freqs):
            h = x + self.attention(self.attention_norm(x), freqs)
            n = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(n)) * self.w3(n))

    return Block().to(torch.bfloat16)


def test_torchtitan_layer_activations_bound_the_saved_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    dim, heads, kv, ffn, b, s = 256, 8, 2, 704, 2, 100
    block = _torchtitan_block(dim, heads, kv, ffn)
    hd = dim // heads
    freqs = torch.polar(torch.ones(s, hd // 2), torch.rand(s, hd // 2))[None, :, None, :]
    x = torch.randn(b, s, dim, dtype=torch.bfloat16, requires_grad=True)
    acts, _ = _saved_bytes(block, lambda: block(x, freqs))
    from solveplan.specs import ModelSpec
    spec = ModelSpec(name="tt", num_layers=2, hidden_size=dim, num_attention_heads=heads, num_kv_heads=kv,
                     ffn_hidden_size=ffn, vocab_size=1000, seq_length=s, gated_mlp=True, normalization="RMSNorm",
                     position_embedding="rope")
    est = float(coefficients(spec, "torchtitan", b, s).layer_act_bytes[0])
    # the profile counts torch's composite RMSNorm (fp32 upcast and fp32 output kept): an upper bound
    assert acts <= est <= 1.3 * acts, (acts, est)


def test_api_and_sweep_take_the_framework():
    from solveplan import api
    plan = api.plan({"model": "gpt3-1.3b", "cluster": "a100x8", "framework": "transformers"})
    assert plan.plan.framework == "transformers" and plan.plan.parallel.tp == 1
    rows = api.sweep({"models": ["gpt3-1.3b"], "clusters": ["a100x8"], "frameworks": ["megatron", "transformers"]},
                     workers=1)
    assert [r["framework"] for r in rows] == ["megatron", "transformers"]
    assert rows[1]["tp"] == 1 and rows[1]["pp"] == 1 and rows[1]["peak_memory_bytes"] > 0


def test_service_answers_422_naming_the_knob():
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    import warnings
    from solveplan import api
    from solveplan.service import create_app
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    client = TestClient(create_app(api.ResultCache(maxsize=8), max_body_bytes=64 * 1024, max_time_limit_s=30))
    body = {"job": {"model": "gpt3-1.3b", "cluster": "a100x8", "framework": "transformers", "constraints": {"pp": [2]}}}
    r = client.post("/v1/check", json=body)
    assert r.status_code == 422
    assert any(d["loc"][:4] == ["body", "job", "constraints", "pp"] for d in r.json()["detail"]), r.text
    ok = client.post("/v1/plan", json={"job": {"model": "gpt3-1.3b", "cluster": "a100x8", "framework": "torchtitan"}})
    assert ok.status_code == 200, ok.text


def test_calibrate_steps_take_the_stack_they_were_measured_on():
    from solveplan.calibration.step_fit import build_step_rows
    rows = [{"model": "gpt3-1.3b", "tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 4, "recompute": "none", "zero": 0,
             "global_batch_size": 4, "seq_length": 2048, "step_time_s": 0.3, "framework": fw}
            for fw in ("megatron", "transformers")]
    meg, tf = build_step_rows(rows, load_cluster("h100x8"), "steps.csv")
    assert (meg.job.framework, tf.job.framework) == ("megatron", "transformers")
    assert tf.before_s > meg.before_s  # the same configuration, priced for each stack


def test_a_stack_without_published_rows_gets_the_widest_band():
    from solveplan.calibration.intervals import plan_band
    meg = load_job({"model": "gpt3-1.3b", "cluster": "a100x8"})
    tf = load_job({"model": "gpt3-1.3b", "cluster": "a100x8", "framework": "transformers"})
    a, b = plan_band(meg, 0), plan_band(tf, 0)
    assert b.hi - b.lo > a.hi - a.lo and "transformers" in b.basis


def test_fsdp2_without_resharding_gathers_every_micro_batch():
    """torchtitan's FSDP2 reshards after backward: with 8 micro-batches its zero 2 gathers the
    weights in every forward (per micro-batch cost), none once per step; Megatron-FSDP's zero 2
    gathers once per step after the optimizer."""
    job = load_job({"model": "llama3.1-8b", "cluster": "h100x64", "global_batch_size": 512})
    one = np.ones(1, dtype=np.int64)
    sh = Shapes(tp=one, pp=one, dp=one * 64, cp=one, vp=one, micro_batch_size=one, recompute=one * 0,
                sequence_parallel=np.zeros(1, bool), zero=one * 2)
    kw = dict(global_batch_size=512, seq_length=4096)
    meg = stage_coefficients(job.model, job.cluster, sh, **kw)
    tt = stage_coefficients(job.model, job.cluster, sh, framework="torchtitan", **kw)
    assert tt.layer_dp_step_s[0] == 0.0 < meg.layer_dp_step_s[0]
    assert tt.layer_zero3_s[0] > meg.layer_zero3_s[0]


def test_an_explicit_configuration_is_checked_against_the_stack(cli):
    r = cli("evaluate", "--model", "gpt3-1.3b", "--cluster", "a100x8", "--framework", "transformers", "--pp", "2")
    assert r.code == 2 and "--pp" in r.err and "transformers" in r.err
    r = cli("evaluate", "--model", "gpt3-1.3b", "--cluster", "a100x8", "--framework", "torchtitan", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["framework"] == "torchtitan" and d["parallel"]["zero"] == 2  # its fallback for the distributed optimizer


def test_transformers_refuses_fp8_in_one_line(cli):
    r = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "h100x8", "--framework", "transformers",
            "--precision", "fp8")
    assert r.code == 2 and r.err.strip().count("\n") == 0 and "fp8" in r.err and "transformers" in r.err


def test_fsdp2_shards_fp32_weights_and_keeps_bf16_ones_without_resharding():
    """torchtitan zero 2 (FSDP2, reshard_after_forward False): fp32 weights, gradients and AdamW
    sharded over the 8 ranks, the gathered bf16 weights (2 per parameter) kept whole from
    forward to backward; zero 3 keeps only the live layers' (const working set)."""
    fw = frameworks.profile("torchtitan")
    assert tuple(float(x) for x in frameworks.model_state_bytes_per_param(fw, 2, 8, "bf16")) == (4 / 8 + 2, 4 / 8, 1)
    assert tuple(float(x) for x in frameworks.model_state_bytes_per_param(fw, 3, 8, "bf16")) == (4 / 8, 4 / 8, 1)
    assert tuple(float(x) for x in frameworks.model_state_bytes_per_param(fw, 0, 1, "bf16")) == (4 + 2, 4, 8)


def test_pooled_plans_name_the_stack(cli):
    r = cli("optimize", "--model", "gpt3-6.7b", "--cluster", "mixed-h100-a100", "--global-batch-size", "256",
            "--framework", "transformers", "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["framework"] == "transformers" and d["parallel"]["tp"] == d["parallel"]["pp"] == 1


def test_infeasible_points_at_the_stack_not_at_constraints_the_user_never_set(cli):
    r = cli("optimize", "--model", "llama2-70b", "--cluster", "a100x8", "--framework", "transformers")
    assert r.code == 3
    assert "relax the constraints" not in r.err and "framework megatron runs what framework transformers excludes" in r.err
