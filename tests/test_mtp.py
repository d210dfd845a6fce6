"""Multi-token prediction (Megatron-LM d98e8a6 multi_token_prediction.py; formulation/mtp.py): a hybrid
model's MTP block (Nemotron 3 Super: the spec and its checks, the HF nemotron_h keys, the FLOPs,
Megatron's unified pattern, optimize on a 64-GPU cluster and the published Super rows) and one pricing of
a depth for both model kinds (each depth's layers priced as the decoder's own on the last stage, eh_proj
with its TP collectives, weights once when repeated), at the precision Megatron runs it under NVFP4."""

from __future__ import annotations

import json

import numpy as np
import pytest
from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.formulation.flops import model_flop_per_step
from solveplan.space.shapes import Shapes
from solveplan.specs import ModelSpec
from test_hybrid import NANO_HF, job, tiny_hybrid
from test_moe import tiny_moe

# Megatron-LM's own launch of the checkpoint (examples/post_training/modelopt/conf/nvidia/
# NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh at d98e8a6) and its BF16 weights: 123,611,012,096, of
# which 2,942,324,736 are the MTP block (tests/test_latent_moe.py says where these come from)
SUPER_CHECKPOINT, SUPER_MTP_BLOCK = 123_611_012_096, 2_942_324_736


def test_super_catalog_entry_matches_the_checkpoint():
    """The backbone within 0.01% of the checkpoint less its MTP block; the MTP block (one "*E" depth,
    eh_proj 2h x h, three norms) within 1e-6 of the checkpoint's; 12B active without the input
    embedding (the name's A12B) within 2%; one set of MTP weights for the recipe's 2 depths."""
    m = load_model("nemotron3-super")
    assert abs(m.num_params / (SUPER_CHECKPOINT - SUPER_MTP_BLOCK) - 1) < 1e-4
    assert abs(m.mtp_depth_params / SUPER_MTP_BLOCK - 1) < 1e-6, m.mtp_depth_params
    assert abs((m.num_active_params - m.embedding_params) / 12e9 - 1) < 0.02
    assert (m.mtp_num_layers, m.mtp_hybrid_layer_pattern, m.mtp_use_repeated_layer, m.mtp_weight_copies) == (2, "*E", True, 1)
    per, h = m.hybrid_kind_params(), m.hidden_size
    assert m.mtp_depth_params == per["attention"] + per["moe"] + 2 * h * h + 3 * h
    assert m.model_copy(update=dict(mtp_use_repeated_layer=False)).mtp_weight_copies == 2


def test_hf_nemotron_h_mtp_keys_are_read():
    """NemotronHBridge `_hf_mtp_config` and provider_bridge: num_nextn_predict_layers depths of
    mtp_hybrid_override_pattern, repeated unless the config says false."""
    data = json.loads(NANO_HF.read_text())
    m = load_model({**data, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"})
    assert (m.mtp_num_layers, m.mtp_hybrid_layer_pattern, m.mtp_use_repeated_layer) == (1, "*E", True)
    m = load_model({**data, "num_nextn_predict_layers": 2, "mtp_hybrid_override_pattern": "M*",
                    "mtp_use_repeated_layer": False})
    assert (m.mtp_num_layers, m.mtp_hybrid_layer_pattern, m.mtp_use_repeated_layer) == (2, "M*", False)
    assert load_model(data).mtp_num_layers == 0


def test_non_hybrid_models_refuse_the_hybrid_mtp_fields():
    from pydantic import ValidationError
    plain = load_model("mixtral-8x7b")
    with pytest.raises(ValidationError, match="apply to hybrid models only"):
        type(plain)(**{**plain.model_dump(), "mtp_num_layers": 1, "mtp_hybrid_layer_pattern": "*E"})


def _co(model, cluster="h100x8", precision="bf16", **shape):
    bf16_layers = shape.pop("bf16_layers", (0, 0))
    fp4_param_gather = shape.pop("fp8_param_gather", False)
    shapes = Shapes.single(**{"tp": 1, "dp": 8, "ep": 4 if model.is_moe else 1, **shape})
    return stage_coefficients(model, load_cluster(cluster), shapes, global_batch_size=64, seq_length=1024,
                              precision=precision, bf16_layers=bf16_layers, fp8_param_gather=fp4_param_gather)


def _with_mtp(base, n, **kw):
    """`base` with n MTP depths: a hybrid model's of "*E" (one period of its decoder), repeated unless
    told; a Transformer model's of its last layer's kind."""
    extra = dict(mtp_hybrid_layer_pattern="*E", mtp_use_repeated_layer=True) if base.is_hybrid else {}
    return type(base)(**{**base.model_dump(), "mtp_num_layers": n, **extra, **kw})


# three model kinds of the same width, vocabulary and norm: a depth's layers are one decoder unit each
KINDS = {"hybrid": lambda: tiny_hybrid("*E" * 4),
         "moe": lambda: tiny_moe(L=4, normalization="RMSNorm"),
         "dense": lambda: ModelSpec(**{**tiny_moe(L=4, normalization="RMSNorm").model_dump(), "num_experts": None,
                                       "moe_ffn_hidden_size": None, "moe_router_topk": None})}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("shape", [dict(), dict(tp=2, dp=4, sequence_parallel=True)])
def test_mtp_adds_its_layers_to_the_last_stage_only(kind, shape):
    """Each depth costs the last stage exactly one decoder unit (the same layers, priced by the same
    terms: a hybrid model's "*E" period, a Transformer model's last layer) plus its eh_proj, norms, TP
    gathers and a second head pass; nothing else changes but the last stage's terms. Depths that share
    weights (a hybrid model's repeated layer) cost the same time and one depth's weights, not n; a
    Transformer model's depths own theirs (gpt_layer_specs.py ~778-782)."""
    base = KINDS[kind]()
    n = 3
    rep = _with_mtp(base, n)
    sep = _with_mtp(base, n, mtp_use_repeated_layer=False) if base.is_hybrid else rep
    a, r, s = _co(base, **shape), _co(rep, **shape), _co(sep, **shape)
    for f in ("layer_s", "layer_static_bytes", "layer_act_bytes", "first_s", "first_static_bytes", "layer_dp_step_s"):
        assert np.allclose(getattr(a, f), getattr(r, f)), f
    head = a.last_s  # the last stage's head and loss alone
    extra = (r.last_s - a.last_s) / n - a.layer_s - head  # one depth beyond its layers and head: eh_proj, norms, TP
    assert np.all(extra > 0) and np.all(extra < 0.1 * a.layer_s), (extra, a.layer_s)
    assert np.allclose(s.last_s, r.last_s) and np.allclose(s.last_act_bytes, r.last_act_bytes)
    assert np.all(r.last_act_bytes - a.last_act_bytes >= n * a.layer_act_bytes)
    # weights: one depth with the repeated layer, n without
    one = (r.last_static_bytes - a.last_static_bytes) / rep.mtp_weight_copies
    t, h = shape.get("tp", 1), base.hidden_size
    per_param = a.first_static_bytes / (base.vocab_size * h / t)  # the embedding's state bytes per weight
    assert np.allclose(one, a.layer_static_bytes + (2 * h * h / t + 3 * base.norm_params) * per_param, rtol=1e-9)
    assert np.allclose(s.last_static_bytes - a.last_static_bytes, n * one)
    assert np.allclose(s.last_dp_step_s - a.last_dp_step_s, n * (r.last_dp_step_s - a.last_dp_step_s) / rep.mtp_weight_copies)
    assert np.all(r.last_dp_step_s - a.last_dp_step_s >= a.layer_dp_step_s)


@pytest.mark.parametrize("shape", [dict(), dict(tp=2, dp=4), dict(tp=2, dp=4, sequence_parallel=True)])
def test_one_pricing_of_a_depth_for_both_model_kinds(shape, monkeypatch):
    """Both model kinds price a depth's rest (eh_proj, norms, TP collectives, head) through the same
    function (`mtp.depth_rest`, called once per model kind), so models of the same width, vocabulary and
    norm pay the same for it beyond their layers."""
    from solveplan.formulation import mtp
    seen = []
    priced = mtp.depth_rest

    def spy(T):
        seen.append("hybrid" if T.model.is_hybrid else "moe" if T.model.is_moe else "dense")
        return priced(T)

    monkeypatch.setattr(mtp, "depth_rest", spy)
    extra = {}
    for kind, make in KINDS.items():
        base = make()
        a, r = _co(base, **shape), _co(_with_mtp(base, 2), **shape)
        extra[kind] = (r.last_s - a.last_s) / 2 - a.layer_s
    assert sorted(seen) == sorted(KINDS)
    assert np.allclose(extra["hybrid"], extra["moe"], rtol=1e-12) and np.allclose(extra["moe"], extra["dense"], rtol=1e-12)


@pytest.mark.parametrize("kind", ["moe", "dense"])
@pytest.mark.parametrize("sp", [False, True])
def test_transformer_mtp_pays_eh_proj_tp_collectives(kind, sp, monkeypatch):
    """A Transformer model's depth at tp 2 pays eh_proj's TP collectives (multi_token_prediction.py ~1342-1358,
    tensor_parallel/layers.py ~637-720): forward the output's all-gather of h, with SP the input's all-gather
    of 2h; backward with SP the input gradient's reduce-scatter of 2h and the scatter's all-gather of h,
    without SP the input gradient's all-reduce of 2h. The last stage costs that much more than with them
    taken out, per depth; nothing at tp 1."""
    from solveplan.formulation import comm, mtp
    model, n = _with_mtp(KINDS[kind](), 2), 2
    shape = dict(tp=2, dp=4, sequence_parallel=sp)
    full = _co(model, **shape)
    monkeypatch.setattr(mtp, "eh_proj_tp_s", lambda T: (0.0, 0.0))
    bare = _co(model, **shape)
    cluster, msg = load_cluster("h100x8"), 1 * 1024 * model.hidden_size * 2  # b x s x h in BF16
    ag, rs, ar = (comm.collective_s(k, x, cluster, 2, 1) for k, x in
                  (("all_gather", msg), ("reduce_scatter", 2 * msg), ("all_reduce", 2 * msg)))
    fwd = ag + (comm.collective_s("all_gather", 2 * msg, cluster, 2, 1) if sp else 0.0)
    bwd = rs + ag if sp else ar
    assert fwd > 0 and bwd > 0
    assert np.allclose(full.last_s - bare.last_s, n * (fwd + bwd), rtol=1e-12)
    assert np.allclose(full.last_bwd_s - bare.last_bwd_s, n * bwd, rtol=1e-12)
    monkeypatch.undo()
    one = _co(model, tp=1, dp=8)
    monkeypatch.setattr(mtp, "eh_proj_tp_s", lambda T: (0.0, 0.0))
    assert np.allclose(one.last_s, _co(model, tp=1, dp=8).last_s, rtol=1e-15)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("tied", [False, True])
def test_last_stage_keeps_its_own_embedding_copy_with_pipeline_stages(kind, tied):
    """With pp > 1 the last stage keeps a copy of the word embedding for the MTP block (language_module.py
    ~253-290 at d98e8a6) whose gradient is all-reduced with the first stage's (finalize_model_grads.py
    ~146-250): beyond what the block costs at pp 1, the last stage holds the first stage's embedding state
    and pays its DP reduction, and both stages the embedding group's all-reduce. A model with tied
    embeddings already keeps that copy as its output weight: nothing more."""
    base = KINDS[kind]()
    base = type(base)(**{**base.model_dump(), "tied_embeddings": tied})
    model = _with_mtp(base, 2)
    (a1, r1), (a2, r2) = [[_co(m, pp=p) for m in (base, model)] for p in (1, 2)]
    d1, d2 = ({k: getattr(r, k) - getattr(a, k) for k in ("last_static_bytes", "last_dp_step_s", "first_dp_step_s")}
              for a, r in ((a1, r1), (a2, r2)))
    assert np.allclose(d1["first_dp_step_s"], 0.0)
    if tied:
        for key in d1:
            assert np.allclose(d2[key], d1[key], rtol=1e-12), key
        return
    ar = d2["first_dp_step_s"]
    assert np.all(ar > 0)
    assert np.allclose(d2["last_static_bytes"] - d1["last_static_bytes"], a1.first_static_bytes, rtol=1e-12)
    assert np.allclose(d2["last_dp_step_s"] - d1["last_dp_step_s"], a2.first_dp_step_s + ar, rtol=1e-12)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_full_recomputation_keeps_the_region_inputs_and_runs_its_forward_again(kind):
    """Under full recomputation Megatron checkpoints each depth's norms, eh_proj, layers and final norm
    (multi_token_prediction.py ~1492-1716): beyond its layers the depth keeps the region's two inputs and
    the head's input (3h in BF16 per token) and its logits, and costs more time than without recomputation
    (its eh_proj, norms and TP gathers run forward again)."""
    from solveplan.formulation.memory import LOGIT_BYTES
    base, n = KINDS[kind](), 2
    model = _with_mtp(base, n)
    full, none = ([_co(m, tp=2, dp=4, sequence_parallel=True, recompute=rc) for m in (base, model)]
                  for rc in ("full", "none"))
    a, r = full
    a0, r0 = none
    M, h, V = 1024, base.hidden_size, base.vocab_size
    kept = 3 * 2 * M * h / 2 + LOGIT_BYTES * M * V / 2
    assert np.allclose(r.last_act_bytes - a.last_act_bytes, n * (a.layer_act_bytes + kept), rtol=1e-12)
    rest_full = (r.last_s - a.last_s) / n - a.layer_s
    rest_none = (r0.last_s - a0.last_s) / n - a0.layer_s
    assert np.all(rest_full > rest_none)


def _mtp_delta(model, n, precision, **shape):
    """(the last stage's MTP terms beyond the model without MTP, the decoder unit's terms) at `precision` on B200."""
    a, r = (_co(m, "b200x8", precision, **shape) for m in (model, _with_mtp(model, n)))
    keys = ("last_s", "last_bwd_s", "last_act_bytes", "last_static_bytes", "last_dp_step_s", "last_optimizer_step_s")
    return {k: getattr(r, k) - getattr(a, k) for k in keys}, a


@pytest.mark.parametrize("kind", ["moe", "dense"])
@pytest.mark.parametrize("fp4_param_gather", [False, True])
def test_transformer_mtp_under_nvfp4_costs_its_bf16_price(kind, fp4_param_gather):
    """Megatron runs a Transformer model's MTP depth without FP4 (multi_token_prediction.py:1384-1402: only
    config.fp8 enters a quantised autocast; an NVFP4 job has none): under nvfp4 the depth costs the last
    stage exactly what it costs at BF16 (GEMMs, casts, saved inputs, BF16 weights gathered in BF16) while
    the decoder's layers are priced at nvfp4; an FP8 recipe's depth runs at that recipe."""
    model, n = KINDS[kind](), 2
    shape = dict(tp=2, dp=4, sequence_parallel=True, fp8_param_gather=fp4_param_gather)
    fp4, a4 = _mtp_delta(model, n, "nvfp4", **shape)
    bf16, a16 = _mtp_delta(model, n, "bf16", tp=2, dp=4, sequence_parallel=True)
    assert not np.allclose(a4.layer_s, a16.layer_s, rtol=1e-3)  # the decoder's change
    for key in fp4:
        assert np.allclose(fp4[key], bf16[key], rtol=1e-12), key
    fp8, _ = _mtp_delta(model, n, "mxfp8", tp=2, dp=4, sequence_parallel=True)
    assert not np.allclose(fp8["last_s"], bf16["last_s"], rtol=1e-3)


def test_hybrid_mtp_under_nvfp4_runs_its_layers_at_fp4_and_eh_proj_at_bf16():
    """A hybrid model's MTP layers run NVFP4 as the decoder's do (hybrid_block.py:339-402 enters
    get_fp4_context per layer) while eh_proj runs BF16 (multi_token_prediction.py:1384-1402): the depth's
    nvfp4 price differs from its BF16 price by exactly the decoder unit's change (time and weights); with
    --first-last-layers-bf16 keeping the depth's two layer indices in BF16 (fp4_utils.py:247-263) by
    exactly nothing, and with one kept, by neither."""
    model, n = KINDS["hybrid"](), 2
    fp4, a4 = _mtp_delta(model, n, "nvfp4")
    bf16, a16 = _mtp_delta(model, n, "bf16")
    assert not np.allclose(a4.layer_s, a16.layer_s, rtol=1e-3)
    assert np.allclose(fp4["last_s"] - bf16["last_s"], n * (a4.layer_s - a16.layer_s), rtol=1e-9)
    assert np.allclose(fp4["last_static_bytes"] - bf16["last_static_bytes"],
                       a4.layer_static_bytes - a16.layer_static_bytes, rtol=1e-9)  # one repeated depth's weights
    kept, _ = _mtp_delta(model, n, "nvfp4", bf16_layers=(2, 0))
    one, _ = _mtp_delta(model, n, "nvfp4", bf16_layers=(1, 0))
    assert np.allclose(kept["last_s"], bf16["last_s"], rtol=1e-12)
    assert not np.allclose(one["last_s"], fp4["last_s"], rtol=1e-4) and not np.allclose(one["last_s"], kept["last_s"], rtol=1e-4)


def test_mtp_flops_count_each_depth():
    """Megatron-LM's hybrid FLOPs count the MTP layers once per depth (hybrid_layer_allocation.py
    `get_hybrid_layer_counts`) and one more logits pass per depth (training.py `hybrid_flops`); the
    formulation adds each depth's 2h -> h eh_proj as well."""
    base = tiny_hybrid("*E" * 4)
    m = type(base)(**{**base.model_dump(), "mtp_num_layers": 2, "mtp_hybrid_layer_pattern": "*E"})
    B, s, h = 8, 1024, base.hidden_size
    deeper = tiny_hybrid("*E" * 6)  # the same decoder with two more "*E" periods
    step = model_flop_per_step(m, B, s) - model_flop_per_step(base, B, s)
    layers = model_flop_per_step(deeper, B, s) - model_flop_per_step(base, B, s)
    head = 3 * 2.0 * B * s * h * base.vocab_size
    assert step == pytest.approx(layers + 2 * (head + 3 * 2.0 * B * s * 2 * h * h), rel=1e-12)


def test_megatron_builds_the_unified_mtp_pattern():
    """arguments.py ~757-879 (d98e8a6): --mtp-hybrid-override-pattern is deprecated for the unified
    "main/mtp/mtp" pattern, one part per depth; --mtp-use-repeated-layer for one shared depth.
    Checked against Megatron-LM itself by benchmarks/megatron_hybrid_args.py."""
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    sup = load_model("nemotron3-super")
    j = job(sup, "b200x64", B=512, s=8192)
    ma = megatron_args(j, plan_config(j, dict(tp=1, pp=1, ep=64, etp=1)))
    f = ma.flags()
    assert f["--hybrid-layer-pattern"] == sup.hybrid_layer_pattern + "/*E/*E"
    assert f["--mtp-num-layers"] == "2" and "--mtp-use-repeated-layer" in ma.args
    assert "--mtp-hybrid-override-pattern" not in f
    m = tiny_hybrid("M*M-" * 6, mtp_num_layers=3, mtp_hybrid_layer_pattern="M-")
    j = job(m, "h100x8", B=64)
    ma = megatron_args(j, plan_config(j, dict(tp=1, pp=2, vp=2)))
    assert ma.flags()["--hybrid-layer-pattern"] == "M*M-M*|M-M*M-|M*M-M*|M-M*M-/M-/M-/M-"
    assert "--mtp-use-repeated-layer" not in ma.args


def test_optimize_super_on_64_b200_is_optimal_with_experts_parallel():
    from solveplan.optimize import optimize
    res = optimize(job(load_model("nemotron3-super"), "b200x64", B=512, s=8192), time_limit_s=60)
    assert str(res.status).endswith("OPTIMAL") and res.plan is not None
    assert res.plan.parallel.ep > 1 and res.plan.parallel.pp == 1


def test_super_rows_are_read_and_predicted():
    """The 14 published Nemotron 3 Super runs (Megatron-Bridge performance summaries): each is read
    with the catalog's MTP block, or skipped for its NVFP4 precision only; every read row fits in
    memory (they ran) and gets a finite step time."""
    from solveplan.calibration.rows import published_rows
    from solveplan.calibration.runs_fit import row_cases
    rows = [r for r in published_rows(None) if r.raw.get("model", {}).get("key") == "nemotron3-super"]
    assert len(rows) == 14
    read = [r for r in rows if r.skipped is None]
    assert all("nvfp4" in r.raw["precision"] and "NVFP4" in r.skipped for r in rows if r.skipped)
    assert len(read) >= 7 and all(r.job.model.mtp_num_layers == 2 for r in read)
    for case in row_cases(read):
        step, _, fits = case.predict()
        assert np.isfinite(step) and step > 0 and fits


def test_nvfp4_mtp_is_priced_as_megatron_runs_it_and_not_said_otherwise():
    """The MTP block is now priced at the precision Megatron runs it (mtp.py): no plan says its MTP GEMMs
    are priced at nvfp4."""
    from solveplan.catalog import load_job
    from solveplan.formulation.job import job_assumptions

    said = lambda **kw: any("MTP" in a for a in job_assumptions(load_job(kw)))  # noqa: E731
    assert not said(model="nemotron3-super", cluster="b200x64", precision="nvfp4")
    assert not said(model="deepseek-v3", cluster="b200x64", precision="nvfp4")
