"""Hybrid Mamba-Transformer models (Nemotron-H, Nemotron 3): the layer pattern and Mamba-2 mixer in
ModelSpec against the published sizes, the Hugging Face nemotron_h mapping, the Mamba terms of the
formulation against hand computations from their sources (Megatron-LM mamba_mixer.py, Dao & Gu
2024 Sec. 6), Megatron's TP rules for Mamba, and the published Nemotron 3 Nano runs read and
predicted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from conftest import DATA
from solveplan.catalog import load_cluster, load_model
from solveplan.specs import Constraints, JobSpec, ModelSpec

NANO_HF = DATA / "hf" / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json"
ULTRA_HF = DATA / "hf" / "NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16" / "config.json"
H56_HF = DATA / "hf" / "Nemotron-H-56B-Base-8K" / "config.json"
LIGHTNING_HF = DATA / "hf" / "NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4" / "config.json"


def tiny_hybrid(pattern="M*MEM-ME", **kw):
    moe = dict(num_experts=8, moe_ffn_hidden_size=256, moe_router_topk=2) if "E" in pattern else {}
    return ModelSpec(**{**dict(name="tiny-hybrid", num_layers=len(pattern), hidden_size=512, num_attention_heads=8,
                               num_kv_heads=2, kv_channels=64, ffn_hidden_size=1024, vocab_size=32000,
                               activation="squared_relu", normalization="RMSNorm", add_bias_linear=False,
                               position_embedding="none", dropout=0.0, hybrid_layer_pattern=pattern,
                               mamba_state_dim=64, mamba_head_dim=32, mamba_num_heads=16, mamba_num_groups=4,
                               seq_length=1024), **moe, **kw})


def job(model, cluster="h100x8", B=64, s=1024, cuda_graph_impl="none", cuda_graph_modules=(), **cons):
    return JobSpec(model=model, cluster=load_cluster(cluster), global_batch_size=B, seq_length=s,
                   cuda_graph_impl=cuda_graph_impl, cuda_graph_modules=list(cuda_graph_modules),
                   constraints=Constraints(**cons))


# ---------------------------------------------------------------- the model spec

def test_nemotron3_nano_parameters_match_the_published_sizes():
    """NVIDIA's model card: 31.6B total, about 3.6B active with the embeddings; the technical report
    (arXiv:2512.20848 Sec. 2.1): 3.2B active without the input embedding. Within 1%."""
    m = load_model("nemotron3-nano")
    assert m.hybrid_layer_counts() == {"mamba": 23, "gdn": 0, "attention": 6, "mlp": 0, "moe": 23}
    assert abs(m.num_params / 31.6e9 - 1) < 0.01
    assert abs(m.num_active_params / 3.6e9 - 1) < 0.01
    assert abs((m.num_active_params - m.embedding_params) / 3.2e9 - 1) < 0.015
    # the Mamba layer by hand (mamba_mixer.py): in_proj h x (2*4096 + 2*8*128 + 64), conv (4096 + 2048) x 5,
    # dt_bias / A_log / D 3 x 64, gated norm 4096, out_proj 4096 x h, pre-norm h
    h = 2688
    assert m.mamba_layer_params == h * 10304 + 6144 * 5 + 192 + 4096 + 4096 * h + h
    assert m.mamba_d_inner == 4096 and m.mamba_in_proj_width == 10304 and m.mamba_conv_channels == 6144


def test_nemotron_h_56b_dense_hybrid_matches_its_size():
    """Nemotron-H-56B-Base (Mamba-2, attention and MLP layers, no MoE): 56B (NVIDIA, Nemotron-H, arXiv:2504.03624)."""
    m = load_model(str(H56_HF))
    assert not m.is_moe and m.hybrid_layer_counts() == {"mamba": 54, "gdn": 0, "attention": 10, "mlp": 54, "moe": 0}
    assert abs(m.num_params / 56e9 - 1) < 0.01 and m.num_active_params == m.num_params


def test_hf_config_maps_to_the_catalog_entry():
    hf, cat = load_model(str(NANO_HF)), load_model("nemotron3-nano")
    fields = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
              "vocab_size", "activation", "normalization", "position_embedding", "tied_embeddings",
              "hybrid_layer_pattern", "mamba_state_dim", "mamba_head_dim", "mamba_num_heads", "mamba_num_groups",
              "mamba_conv_kernel", "mamba_chunk_size", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
              "moe_shared_expert_intermediate_size", "moe_router_score_function", "moe_router_enable_expert_bias")
    assert {f: getattr(hf, f) for f in fields} == {f: getattr(cat, f) for f in fields}
    assert hf.num_params == cat.num_params and hf.num_active_params == cat.num_active_params


def test_nemotron3_ultra_list_form_config_maps_to_the_catalog_entry():
    """Nemotron 3 Ultra's config.json names its layers in transformers' newer list form (layers_block_type,
    mtp_layers_block_type, no num_hidden_layers): it reads as the catalog entry, whose sizes are the name's
    550B total and 55B active without the input embedding (within 1%); the catalog runs the MTP block twice
    (the perf recipes' MTP=2), the config once."""
    hf, cat = load_model(str(ULTRA_HF)), load_model("nemotron3-ultra")
    fields = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
              "vocab_size", "activation", "hybrid_layer_pattern", "mamba_num_heads", "mamba_num_groups",
              "mamba_state_dim", "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_latent_size",
              "moe_shared_expert_intermediate_size", "mtp_hybrid_layer_pattern", "mtp_use_repeated_layer")
    assert {f: getattr(hf, f) for f in fields} == {f: getattr(cat, f) for f in fields}
    assert cat.hybrid_layer_counts() == {"mamba": 48, "gdn": 0, "attention": 12, "mlp": 0, "moe": 48}
    assert (hf.mtp_num_layers, cat.mtp_num_layers) == (1, 2)
    assert abs(cat.num_params / 550e9 - 1) < 0.01
    assert abs((cat.num_active_params - cat.embedding_params) / 55e9 - 1) < 0.01
    from solveplan.errors import InputError
    with pytest.raises(InputError, match="'layers_block_type' must be a list of mamba, attention, mlp, moe"):
        load_model({**json.loads(ULTRA_HF.read_text()), "layers_block_type": ["mamba", "moe", "ssm"]})


def test_nemotron3_5_lightning_config_maps_to_the_catalog_entry():
    """Nemotron 3.5 Lightning's config.json (list form, one MTP depth of attention + MoE) is Nemotron 3 Nano's
    architecture with an MTP block: it reads as the catalog entry, whose MTP runs twice with one set of weights
    (Megatron-Bridge's perf recipe: mtp_num_layers 2, mtp_use_repeated_layer), the config's once."""
    hf, cat, nano = load_model(str(LIGHTNING_HF)), load_model("nemotron3.5-lightning"), load_model("nemotron3-nano")
    fields = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
              "vocab_size", "activation", "position_embedding", "hybrid_layer_pattern", "mamba_num_heads",
              "mamba_num_groups", "mamba_state_dim", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
              "moe_shared_expert_intermediate_size", "mtp_hybrid_layer_pattern", "mtp_use_repeated_layer")
    assert {f: getattr(hf, f) for f in fields} == {f: getattr(cat, f) for f in fields}
    assert {f: getattr(nano, f) for f in fields[:-2]} == {f: getattr(cat, f) for f in fields[:-2]}
    assert (hf.mtp_num_layers, cat.mtp_num_layers, cat.mtp_hybrid_layer_pattern) == (1, 2, "*E")
    assert hf.num_params == cat.num_params == nano.num_params and round(cat.num_params / 10e9) == 3


@pytest.mark.parametrize("extra, words", [
    ({"num_nextn_predict_layers": 1}, "needs 'mtp_hybrid_override_pattern'"),
    ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*X"}, "mtp_hybrid_layer_pattern has symbol 'X'"),
    ({"hybrid_override_pattern": "MEM"}, "one symbol per layer"),
])
def test_hf_configs_it_cannot_price_are_refused_in_one_line(extra, words):
    from solveplan.errors import InputError
    data = {**json.loads(NANO_HF.read_text()), **extra}
    with pytest.raises(InputError, match=words):
        load_model(data)


@pytest.mark.parametrize("change, field", [
    (dict(hybrid_layer_pattern="M*MXM-ME"), "hybrid_layer_pattern has symbol 'X'"),
    (dict(hybrid_layer_pattern="M*MEM-M"), "lists 7 layers but num_layers is 8"),
    (dict(mamba_state_dim=None), "needs mamba_state_dim"),
    (dict(mamba_num_groups=3), "mamba_num_groups (3) must divide mamba_num_heads (16)"),
    (dict(num_experts=None, moe_ffn_hidden_size=None, moe_router_topk=None), "only with num_experts"),
    (dict(mtp_num_layers=1), "mtp_num_layers (1) of a hybrid model needs mtp_hybrid_layer_pattern"),
    (dict(mtp_hybrid_layer_pattern="*E"), "mtp_hybrid_layer_pattern '*E' needs mtp_num_layers"),
    (dict(mtp_num_layers=2, mtp_hybrid_layer_pattern="*|E"), "mtp_hybrid_layer_pattern has symbol '|'"),
    (dict(mtp_num_layers=2, mtp_hybrid_layer_pattern="*E", num_experts=None, moe_ffn_hidden_size=None,
          moe_router_topk=None, hybrid_layer_pattern="M*MMM-MM"), "mtp_hybrid_layer_pattern has MoE layers (E)"),
    (dict(mtp_use_repeated_layer=True), "mtp_use_repeated_layer needs MTP depths"),
])
def test_bad_hybrid_specs_name_the_field(change, field):
    with pytest.raises(ValidationError) as e:
        tiny_hybrid(**change)
    assert field in str(e.value)


def test_mamba_fields_need_a_hybrid_pattern():
    with pytest.raises(ValidationError, match="mamba_state_dim applies to hybrid models only"):
        ModelSpec(name="x", num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512,
                  vocab_size=1000, mamba_state_dim=64)


def test_pipeline_units_are_periods_of_the_pattern():
    assert load_model("nemotron3-nano").pipeline_units == (0, 29, 23, 1)  # no period: one stage
    m = tiny_hybrid("MEM*" * 3)
    assert m.pipeline_units == (0, 3, 1, 3) and m.units_to_layers([1, 2]) == [4, 8]


# ---------------------------------------------------------------- the formulation

def test_mamba_flops_and_bytes_by_hand():
    """Dao & Gu 2024 Sec. 6 per token: groups x 2QN + heads x (2QP + 4NP), the conv 2k(d_inner + 2GN);
    the kernels' bytes as counted from mamba_ssm's ssd_combined.py (mamba.mixer_bytes_per_token), by
    hand for Nano; on tp ranks each 1/tp (heads and groups split); memory-bound at Nano's size."""
    from solveplan.formulation.mamba import mixer_bytes_per_token, mixer_s, ssd_fwd_flop_per_token
    m = load_model("nemotron3-nano")
    Q, N, P, H, G = 128, 128, 64, 64, 8
    scan = G * 2 * Q * N + H * (2 * Q * P + 4 * N * P) + 2 * 4 * 6144
    assert ssd_fwd_flop_per_token(m) == pytest.approx(scan)
    assert ssd_fwd_flop_per_token(m, 4) == pytest.approx(scan / 4)
    X, GN, conv, S, CB = 4096, 1024, 6144, H * P * N / Q, G * Q
    fwd = 2 * (2 * conv + 7 * X + 4 * GN) + 12 * S + 8 * CB
    bwd = 2 * (5 * conv + 20 * X + 15 * GN) + 34 * S + 24 * CB
    assert mixer_bytes_per_token(m) == pytest.approx((fwd, bwd))
    assert mixer_bytes_per_token(m, 2) == pytest.approx((fwd / 2, bwd / 2))
    assert 2.8 < bwd / fwd < 3.2  # the backward recomputes the forward's scan before its own kernels
    gpu = load_cluster("h100x8").gpu
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    f, b = mixer_s(m, 8192, 1, flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency, hbm_bytes_per_s=hbm)
    assert float(f) == pytest.approx(8192 * fwd / hbm) and float(b) == pytest.approx(8192 * bwd / hbm)


def test_reported_flops_count_each_layer_kind():
    from solveplan.formulation.flops import model_flop_per_step
    from solveplan.formulation.mamba import mamba_layer_fwd_flop_per_token
    m = load_model("nemotron3-nano")
    s, h = 8192, 2688
    attn = 2 * (h * (4096 + 2 * 256) + 4096 * h)
    moe = 2 * h * 128 + 2 * h * (6 * 1856 + 3712) * 2
    layers = 23 * mamba_layer_fwd_flop_per_token(m) + 23 * moe + 6 * attn
    core = 6 * 2 * s * s * 32 * 256 * 0.5  # causal, attention layers only
    head = 2 * s * h * 131072
    assert model_flop_per_step(m, 1, s, causal=True) == pytest.approx(3 * (s * layers + core + head))


def _kinds(job_, shape):
    """(each layer's terms in pattern order, the unit's, the coefficients) of one shape, through
    stage_coefficients' own path: each MoE layer priced after the layer before it."""
    from solveplan.formulation import coefficients, hybrid
    seen: dict = {}
    orig = hybrid.hybrid_unit

    def spy(T):
        kinds = {k: hybrid.KIND_TERMS[k](T) for k in hybrid.KIND_TERMS if T.model.hybrid_layer_counts()[k]}
        pattern = [hybrid.KINDS[c] for c in T.model.hybrid_layer_pattern]
        seen["layers"] = [hybrid.moe_layer(T, kinds[pattern[i - 1]], pattern[i - 1]) if k == "moe" else kinds[k]
                          for i, k in enumerate(pattern)]
        seen.update(kinds)
        seen["unit"] = orig(T)[0]
        return orig(T)
    coefficients.hybrid_unit = spy
    try:
        from solveplan.formulation.job import job_coefficients
        co = job_coefficients(job_, shape)
    finally:
        coefficients.hybrid_unit = orig
    return seen, co


def test_a_unit_is_the_sum_of_its_layers_and_tp_splits_the_mamba_heads():
    from solveplan.space.shapes import Shapes
    m = tiny_hybrid("M*MEM-ME")
    j = job(m)
    kinds, co = _kinds(j, Shapes.single(tp=1, dp=8, ep=8, zero=1))
    for key in ("compute", "params", "act", "ep"):
        assert float(kinds["unit"][key][0]) == pytest.approx(sum(float(np.atleast_1d(layer[key])[0])
                                                                  for layer in kinds["layers"]))
    assert float(co.layer_params_bytes[0]) == pytest.approx(float(kinds["unit"]["params"][0]))
    # weights per GPU of a Mamba layer: its parameters over tp (heads, groups and both GEMMs split)
    k2, _ = _kinds(j, Shapes.single(tp=2, dp=4, ep=4, zero=1, sequence_parallel=True))
    assert float(k2["mamba"]["params"][0]) == pytest.approx(float(kinds["mamba"]["params"][0]) / 2)
    assert float(k2["mamba"]["tp"][0]) > 0 == float(kinds["mamba"]["tp"][0])


def test_megatron_fsdp_shards_every_sublayer_kind():
    """ZeRO-3 (Megatron-FSDP) over dp 8: each kind's weights are 1/8 of ZeRO-1's (the MoE layer's experts over
    edp = 8 / ep 2 = 4 ranks, so not exactly 1/8 there), gathered and reduce-scattered in the layer every
    micro-batch (zero3 > 0, no step-level reduction), with the sharded layers' launch hooks on each sublayer."""
    from solveplan.space.shapes import Shapes
    j = job(tiny_hybrid("M*MEM-ME"))
    z1, _ = _kinds(j, Shapes.single(tp=1, dp=8, ep=2, zero=1))
    z3, _ = _kinds(j, Shapes.single(tp=1, dp=8, ep=2, zero=3))
    for kind in ("mamba", "attention", "mlp"):
        assert float(z3[kind]["params"][0]) == pytest.approx(float(z1[kind]["params"][0]) / 8)
        assert float(z3[kind]["zero3"][0]) > 0.0 == float(z1[kind]["zero3"][0])
        assert float(z3[kind]["dp_step"][0]) == 0.0 < float(z1[kind]["dp_step"][0])
        assert float(z3[kind]["compute"][0]) > float(z1[kind]["compute"][0])  # sharded_layer_overhead_us
    moe3, moe1 = (next(layer for layer, k in zip(z["layers"], "M*MEM-ME") if k == "E") for z in (z3, z1))
    assert float(moe1["params"][0]) / 8 < float(moe3["params"][0]) < float(moe1["params"][0]) / 4
    assert float(moe3["zero3"][0]) > 0.0 == float(moe1["zero3"][0])


def test_a_moe_layer_hides_the_host_behind_the_layer_before_it():
    """Outside CUDA graphs the host's calls before the dispatcher's sync (host.py) are the preceding
    layer's and the router's: a MoE layer after a long Mamba layer waits less for the host than one
    after a short MLP; graphing the preceding block (--cuda-graph-modules mamba) removes its calls."""
    from solveplan.formulation import hybrid
    from solveplan.space.shapes import Shapes
    m = tiny_hybrid("M*ME-E")
    seen, _ = _kinds(job(m, "gb200x8"), Shapes.single(tp=1, dp=8, ep=8, zero=1))
    pattern = [hybrid.KINDS[c] for c in m.hybrid_layer_pattern]
    after = {pattern[i - 1]: seen["layers"][i] for i, k in enumerate(pattern) if k == "moe"}
    assert float(after["mamba"]["compute"][0]) <= float(after["mlp"]["compute"][0])
    graphed, _ = _kinds(job(m, "gb200x8", cuda_graph_impl="transformer_engine", cuda_graph_modules=["mamba"]),
                        Shapes.single(tp=1, dp=8, ep=8, zero=1))
    i = next(i for i, k in enumerate(pattern) if k == "moe" and pattern[i - 1] == "mamba")
    assert float(graphed["layers"][i]["compute"][0]) < float(seen["layers"][i]["compute"][0])


def test_mamba_activations_by_hand():
    """What the fused kernel and the GEMMs save per token (mamba.mamba_activation_bytes): 2h + h
    replicated, 2(2 d_inner + 2GN + H) + 2 d_inner + 2 d_inner + 4G + 2 d_inner on the heads (BF16)."""
    from solveplan.formulation.mamba import mamba_activation_bytes
    m = load_model("nemotron3-nano")
    h = 2688
    per_token = 4 * h + 2 * 10304 + 6 * 4096 + 4 * 8
    assert float(mamba_activation_bytes(m, 8192, 1, 1, 2.0)) == pytest.approx(8192 * per_token)
    sharded = 2 * 10304 + 6 * 4096 + 4 * 8
    assert float(mamba_activation_bytes(m, 8192, 2, 2, 2.0)) == pytest.approx(8192 * (4 * h + sharded) / 2)


def test_hybrid_rules_follow_megatron():
    """tp divides the Mamba heads and groups (mamba_mixer.py); no CP, no accounted split; ZeRO-2/3
    (Megatron-FSDP) allowed; framework megatron only; the enumeration and config_violations agree."""
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.space.rules import config_violations
    m = tiny_hybrid("M*MEM-ME", mamba_num_groups=2)
    j = job(m)
    _, errs = config_violations(j, tp=4, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=True, zero=1, ep=2, etp=1)
    assert any("mamba_num_heads / mamba_num_groups" in e for _, e in errs)
    _, errs = config_violations(j, tp=1, pp=1, cp=2, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=False, zero=2, ep=4, etp=1)
    assert {f for f, _ in errs} == {"cp"}
    shapes = enumerate_shapes(j).shapes
    assert set(shapes.tp.tolist()) == {1, 2} and set(shapes.cp.tolist()) == {1}
    assert set(shapes.zero.tolist()) == {0, 1, 2, 3}
    assert set(shapes.pp.tolist()) == {1}  # one unit: the pattern has no period
    with pytest.raises(ValidationError, match="framework megatron only"):
        JobSpec(model=m, cluster=load_cluster("h100x8"), global_batch_size=64, seq_length=1024,
                framework="torchtitan")


def test_a_periodic_pattern_pipelines_by_units():
    from solveplan.space.enumeration import enumerate_shapes
    m = tiny_hybrid("MEM*" * 4)
    shapes = enumerate_shapes(job(m)).shapes
    assert set(shapes.pp.tolist()) == {1, 2, 4}


# ---------------------------------------------------------------- front ends and published runs

def test_show_prints_the_layer_kinds(cli):
    code, out, _ = cli("show", "nemotron3-nano")
    assert code == 0
    assert "23 Mamba-2, 6 attention, 23 MoE" in out and "64 heads of 64 (d_inner 4096)" in out
    assert "31.58B" in out and "3.58B" in out


def test_nemotron3_nano_runs_are_read_and_predicted():
    """The nine published Nemotron 3 Nano runs (Megatron-Bridge performance summary) are predicted, not skipped;
    so are the two Ultra runs, with what every Ultra perf recipe sets (moe_recipes.MODEL_RECIPES): Megatron-FSDP's
    HSDP with one instance per 64-GPU NVLink domain, the fused grouped MLP offloaded, moe_act recomputed."""
    from solveplan.calibration.rows import published_rows
    from solveplan.calibration.runs_fit import row_cases
    rows = [r for r in published_rows(None) if str(r.raw.get("model", {}).get("key", "")).startswith("nemotron3-")]
    nano = [r for r in rows if r.raw["model"]["key"] == "nemotron3-nano"]
    assert len(nano) == 9 and all(r.skipped is None for r in nano)
    ultra = [r for r in rows if r.raw["model"]["key"] == "nemotron3-ultra"]
    assert len(ultra) == 2 and all(r.skipped is None for r in ultra)
    # Nemotron 3.5 Lightning's run, with the two MTP depths its matched recipe states
    lightning = [r for r in published_rows(None) if r.raw.get("model", {}).get("key") == "nemotron3.5-lightning"]
    assert len(lightning) == 1 and lightning[0].skipped is None and lightning[0].job.model.mtp_num_layers == 2
    from solveplan.calibration.moe_rows import moe_row_job
    raw = lightning[0].raw
    other = {**raw["parallel"]["other"], "recipe": {**raw["parallel"]["other"]["recipe"], "mtp_num_layers": 1}}
    one = moe_row_job({**raw, "parallel": {**raw["parallel"], "other": other}})
    assert one.skipped is None and one.job.model.mtp_num_layers == 1  # the recipe's count, not the catalog's
    for r in ultra:
        job = r.job_spec
        assert (job.distributed_optimizer_instances, job.constraints.zero, job.offload_modules) == (
            4, (3,), ("fused_group_mlp",)) and job.recompute_modules == ("moe_act",)
    for case in row_cases(nano + ultra):
        step, _, fits = case.predict()
        assert np.isfinite(step) and step > 0 and fits
    # the recipes' CUDA-graph scope reaches the job, mamba included (Megatron's --cuda-graph-modules mamba)
    h100 = next(r for r in nano if r.id == "mbridge_perf-26.06-nemotron3-nano-h100-sxm5-80gb-fp8-cs-16")
    assert h100.job.cuda_graph_impl == "transformer_engine" and h100.job.cuda_graph_modules == ("mamba",)
    gb200 = next(r for r in nano if r.id == "mbridge_perf-26.04.01-nemotron3-nano-gb200-mxfp8-8")
    assert set(gb200.job.cuda_graph_modules) == {"attn", "mamba", "moe_router", "moe_preprocess"}


def test_megatron_arguments_build_the_hybrid_model():
    """Megatron-LM's HybridModel launch (docs/user-guide/hybrid-model-migration.md): pretrain_hybrid.py,
    --hybrid-layer-pattern instead of --num-layers, the hybrid stack spec, the Mamba-2 dimensions; the
    plan's pipeline split as | segments (virtual stages derived from them), no GPT split flags.
    Checked against Megatron-LM itself by benchmarks/megatron_hybrid_args.py."""
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    nano = job(load_model("nemotron3-nano"), "h100x16", B=1024, s=8192)
    ma = megatron_args(nano, plan_config(nano, dict(tp=1, pp=1, ep=8, etp=1)))
    f = ma.flags()
    assert ma.entry == "pretrain_hybrid.py"
    assert next(ln for ln in ma.command().splitlines() if "torchrun" in ln).endswith("pretrain_hybrid.py \\")
    assert f["--hybrid-layer-pattern"] == load_model("nemotron3-nano").hybrid_layer_pattern
    assert (f["--mamba-num-heads"], f["--mamba-head-dim"], f["--mamba-num-groups"], f["--mamba-state-dim"]) == \
        ("64", "64", "8", "128")
    assert f["--spec"] == "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec"
    assert "--num-layers" not in f and "--moe-layer-freq" not in f and f["--position-embedding-type"] == "none"
    assert f["--num-experts"] == "128" and f["--expert-model-parallel-size"] == "8"
    m = tiny_hybrid("M*M-" * 6)
    j = job(m, "h100x8", B=64)
    ma = megatron_args(j, plan_config(j, dict(tp=1, pp=2, vp=2)))
    f = ma.flags()
    assert f["--hybrid-layer-pattern"] == "M*M-M*|M-M*M-|M*M-M*|M-M*M-"
    assert "--num-virtual-stages-per-pipeline-rank" not in f and "--pipeline-model-parallel-layout" not in f
    ma = megatron_args(j, plan_config(j, dict(tp=1, pp=4, layers=[4, 8, 8, 4])))
    assert ma.flags()["--hybrid-layer-pattern"].split("|") == ["M*M-", "M*M-M*M-", "M*M-M*M-", "M*M-"]
    assert "--decoder-first-pipeline-num-layers" not in ma.flags()
