"""A hybrid model's MTP block (Nemotron 3 Super; Megatron-LM d98e8a6 multi_token_prediction.py and
models/hybrid/hybrid_model.py): the spec and its checks, the HF nemotron_h keys, the stage terms
(each depth's layers priced as the decoder's own on the last stage, weights once when repeated),
the FLOPs, Megatron's unified pattern, optimize on a 64-GPU cluster and the published Super rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.formulation.flops import model_flop_per_step
from solveplan.space.shapes import Shapes
from test_hybrid import NANO_HF, job, tiny_hybrid

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


def _co(model, **shape):
    shapes = Shapes.single(**{"tp": 1, "dp": 8, "ep": 4, **shape})
    return stage_coefficients(model, load_cluster("h100x8"), shapes, global_batch_size=64, seq_length=1024)


@pytest.mark.parametrize("shape", [dict(), dict(tp=2, dp=4, sequence_parallel=True)])
def test_mtp_adds_its_layers_to_the_last_stage_only(shape):
    """A decoder of "*E" periods and an MTP depth "*E": each depth costs the last stage exactly one
    period of the decoder (the same layers, priced by the same terms) plus its eh_proj, two norms,
    TP gathers and a second head pass; nothing else changes but the last stage's terms. Depths that
    share weights (the repeated layer) cost the same time and one depth's weights, not n."""
    base = tiny_hybrid("*E" * 4)
    n = 3
    rep = base.model_copy(update=dict(mtp_num_layers=n, mtp_hybrid_layer_pattern="*E", mtp_use_repeated_layer=True))
    rep = type(base)(**rep.model_dump())
    sep = type(base)(**{**rep.model_dump(), "mtp_use_repeated_layer": False})
    a, r, s = _co(base, **shape), _co(rep, **shape), _co(sep, **shape)
    for f in ("layer_s", "layer_static_bytes", "layer_act_bytes", "first_s", "first_static_bytes", "layer_dp_step_s"):
        assert np.allclose(getattr(a, f), getattr(r, f)), f
    head = a.last_s  # the last stage's head and loss alone
    extra = (r.last_s - a.last_s) / n - a.layer_s - head  # one depth beyond its layers and head: eh_proj, norms, TP
    assert np.all(extra > 0) and np.all(extra < 0.1 * a.layer_s), (extra, a.layer_s)
    assert np.allclose(s.last_s, r.last_s) and np.allclose(s.last_act_bytes, r.last_act_bytes)
    assert np.all(r.last_act_bytes - a.last_act_bytes >= n * a.layer_act_bytes)
    # weights: one depth with the repeated layer, n without
    one = r.last_static_bytes - a.last_static_bytes
    t, h = shape.get("tp", 1), base.hidden_size
    per_param = a.first_static_bytes / (base.vocab_size * h / t)  # the embedding's state bytes per weight
    assert np.allclose(one, a.layer_static_bytes + (2 * h * h / t + 3 * h) * per_param, rtol=1e-9)
    assert np.allclose(s.last_static_bytes - a.last_static_bytes, n * one)
    assert np.allclose(s.last_dp_step_s - a.last_dp_step_s, n * (r.last_dp_step_s - a.last_dp_step_s))
    assert np.all(r.last_dp_step_s - a.last_dp_step_s >= a.layer_dp_step_s)


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


def test_nvfp4_mtp_says_megatron_runs_it_without_fp4():
    """Megatron-LM's MTP layers ignore FP4 (multi_token_prediction.py): an nvfp4 plan of a model with
    MTP says its MTP GEMMs are priced at nvfp4; without MTP or FP4 it says nothing of the kind."""
    from solveplan.catalog import load_job
    from solveplan.formulation.job import job_assumptions

    said = lambda **kw: any("MTP layer" in a for a in job_assumptions(load_job(kw)))  # noqa: E731
    assert said(model="nemotron3-super", cluster="b200x64", precision="nvfp4")
    assert not said(model="nemotron3-super", cluster="b200x64", precision="mxfp8")
    assert not said(model="llama3.1-8b", cluster="b200x64", precision="nvfp4")
