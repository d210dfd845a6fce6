"""Gated DeltaNet models (Qwen3.5, Qwen3-Next): the released Qwen3.5 config.json files mapped to hybrid
patterns against the sizes their names state, the Gated DeltaNet's weights, FLOPs and bytes against hand
counts from their sources (Megatron-LM gated_delta_net/, FLA's chunk_gated_delta_rule), the attention output
gate, Megatron's rules for the heads, the search's agreement with the exhaustive one, and the launch as
Megatron-Bridge builds these models (a GPT model with the experimental attention variant)."""

from __future__ import annotations

import pytest
from conftest import DATA
from pydantic import ValidationError
from solveplan.catalog import load_cluster, load_model
from solveplan.specs import Constraints, JobSpec, ModelSpec

QWEN35 = {size: DATA / "hf" / f"Qwen3.5-{size}" / "config.json" for size in ("397B-A17B", "122B-A10B", "35B-A3B", "27B")}
# (total, active) in billions as the model names state them (Qwen/Qwen3.5-<total>B-A<active>B; 27B: dense)
NAMED = {"397B-A17B": (397, 17), "122B-A10B": (122, 10), "35B-A3B": (35, 3), "27B": (27, None)}


def tiny_gdn(pattern="GE*E" * 2, **kw):
    moe = dict(num_experts=8, moe_ffn_hidden_size=256, moe_router_topk=2) if "E" in pattern else {}
    return ModelSpec(**{**dict(name="tiny-gdn", num_layers=len(pattern), hidden_size=512, num_attention_heads=8,
                               num_kv_heads=2, kv_channels=64, ffn_hidden_size=1024, vocab_size=32000,
                               normalization="RMSNorm", add_bias_linear=False, dropout=0.0, qk_norm=True,
                               attention_output_gate=True, hybrid_layer_pattern=pattern, gdn_num_key_heads=4,
                               gdn_num_value_heads=8, gdn_key_head_dim=64, gdn_value_head_dim=64, seq_length=1024),
                        **moe, **kw})


def job(model, cluster="h100x8", B=64, s=1024, **cons):
    return JobSpec(model=model, cluster=load_cluster(cluster), global_batch_size=B, seq_length=s,
                   constraints=Constraints(**cons))


# ---------------------------------------------------------------- the model spec

@pytest.mark.parametrize("size", list(QWEN35))
def test_qwen35_configs_match_their_named_sizes(size):
    """Total within 1% of the name's (the name counts the vision encoder, ~0.4B, which is not planned); the
    active parameters round to the name's; each decoder layer is a token mixer (G or *) and its MLP."""
    m = load_model(str(QWEN35[size]))
    total, active = NAMED[size]
    assert abs(m.num_params / (total * 1e9) - 1) < 0.01, m.num_params
    if active is not None:
        assert round(m.num_active_params / 1e9) == active, m.num_active_params
    p = m.hybrid_layer_pattern
    assert m.num_layers == len(p) and p[0::2] == "GGG*" * (len(p) // 8)
    assert set(p[1::2]) == ({"E"} if active else {"-"})
    assert m.attention_output_gate and m.qk_norm and m.norm_zero_centered_gamma and m.rotary_percent == 0.25
    assert m.mtp_num_layers == 1 and m.mtp_hybrid_layer_pattern == "*" + p[1]


def test_gdn_layer_weights_by_hand():
    """Qwen3.5-35B-A3B's linear-attention layer as transformers' Qwen3_5MoeGatedDeltaNet builds it: in_proj_qkv
    h x (2 x 16 x 128 + 32 x 128), in_proj_z h x 32 x 128, in_proj_b and in_proj_a h x 32 each, the depthwise conv
    (2 x 2048 + 4096) x 4 without bias, dt_bias and A_log 32 each, the gated norm over one value head (128),
    out_proj 4096 x h; plus the layer's pre-norm (h). Its gated attention: q_proj h x 2 x 16 x 256 (queries and
    the gate), k_proj and v_proj h x 2 x 256, o_proj 16 x 256 x h, the QK norms (not counted: below 0.01%)."""
    m = load_model(str(QWEN35["35B-A3B"]))
    h = 2048
    gdn = h * 8192 + h * 4096 + 2 * h * 32 + 8192 * 4 + 2 * 32 + 128 + 4096 * h
    assert m.gdn_layer_params == gdn + h
    assert m.attention_params == h * 2 * 4096 + 2 * h * 512 + 4096 * h


@pytest.mark.parametrize("change, message", [
    (dict(gdn_num_key_heads=None), "needs gdn_num_key_heads"),
    (dict(gdn_num_value_heads=6), "must be a multiple of gdn_num_key_heads"),
    (dict(hybrid_layer_pattern="*E*E*E*E"), "applies to Gated DeltaNet layers"),
    (dict(hybrid_layer_pattern="GX*E" * 2), r"G \(Gated DeltaNet\)"),
])
def test_bad_gdn_specs_name_the_field(change, message):
    with pytest.raises(ValidationError, match=message):
        tiny_gdn(**change) if "hybrid_layer_pattern" not in change else tiny_gdn(change["hybrid_layer_pattern"])


def test_gdn_fields_need_a_hybrid_pattern_and_mla_has_no_output_gate():
    base = dict(name="x", num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512, vocab_size=1000)
    with pytest.raises(ValidationError, match="gdn_num_key_heads applies to hybrid models only"):
        ModelSpec(**base, gdn_num_key_heads=4)
    with pytest.raises(ValidationError, match="attention_output_gate applies to standard"):
        ModelSpec(**base, attention_output_gate=True, multi_latent_attention=True, kv_lora_rank=64, qk_head_dim=32,
                  qk_pos_emb_head_dim=16, v_head_dim=32)


# ---------------------------------------------------------------- the formulation

def test_gdn_flops_and_bytes_by_hand():
    """The chunked rule per token and value head (C = 64): 6 dk dv + 2 C dk + 4 C (dk + dv) + C^2/3, the conv
    2 x 4 x channels; the kernels' bytes as `gdn.mixer_bytes_per_token` counts them from FLA's chunk.py, by hand
    for Qwen3.5-35B-A3B (q and k repeated to the 32 value heads); split by tp; memory-bound on an H100."""
    from solveplan.formulation.gdn import (
        RULE_HBM_EFFICIENCY,
        gdn_layer_fwd_flop_per_token,
        mixer_bytes_per_token,
        mixer_s,
        rule_fwd_flop_per_token,
    )
    m = load_model(str(QWEN35["35B-A3B"]))
    C, dk, dv, H = 64, 128, 128, 32
    conv = 2 * 16 * 128 + 32 * 128
    flop = H * (6 * dk * dv + 2 * C * dk + 4 * C * (dk + dv) + C * C / 3) + 2 * 4 * conv
    assert rule_fwd_flop_per_token(m) == pytest.approx(flop)
    assert rule_fwd_flop_per_token(m, 2) == pytest.approx(flop / 2)
    QK, V, S, A = H * dk, H * dv, H * dk * dv / C, H * C
    fwd = 2 * (3 * conv + 8 * QK + 10 * V + 2 * S) + 4 * A
    bwd = 2 * (4 * conv + 25 * QK + 20 * V + 4 * S) + 8 * A
    assert mixer_bytes_per_token(m) == pytest.approx((fwd, bwd))
    assert mixer_bytes_per_token(m, 4) == pytest.approx((fwd / 4, bwd / 4))
    gpu = load_cluster("h100x8").gpu
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    f, b = mixer_s(m, 8192, 1, flop_per_s=gpu.peak_flop_per_s, efficiency=gpu.matmul_efficiency, hbm_bytes_per_s=hbm)
    # the rule's own bytes (6 QK + 6 V + 2 S and A forward; 21 QK + 15 V + 4 S and 2 A backward) at the fitted
    # fraction of the HBM rate, the streaming kernels around it at the HBM rate
    rule_f, rule_b = 2 * (6 * QK + 6 * V + 2 * S) + 4 * A, 2 * (21 * QK + 15 * V + 4 * S) + 8 * A
    e = RULE_HBM_EFFICIENCY
    assert float(f) == pytest.approx(8192 * (rule_f / (hbm * e) + (fwd - rule_f) / hbm))
    assert float(b) == pytest.approx(8192 * (rule_b / (hbm * e) + (bwd - rule_b) / hbm))
    # Megatron's count (training.py gdn_layer_flops): 2 (h in_proj + 4 conv + 4 Hv dv^2 + h v_dim)
    h = 2048
    in_proj = 2 * 16 * 128 + 2 * 32 * 128 + 2 * 32  # q, k, v, z, beta, alpha
    assert gdn_layer_fwd_flop_per_token(m) == 2 * (h * in_proj + 4 * conv + 4 * 32 * 128 ** 2 + h * 4096)


def test_the_rule_efficiency_is_fitted_on_fla_s_published_timings():
    """RULE_HBM_EFFICIENCY is what calibration/gdn_fit.py finds on the chunk_gdn timings FLA publishes for a GB200
    (benchmarks/measured/fla-gdn-gb200): every call within 10% but the one of head dimension 256 forward + backward
    (26% short); the floor the small calls show is about half a millisecond forward."""
    import json
    from pathlib import Path

    from solveplan.calibration.gdn_fit import fit_rule
    from solveplan.formulation.gdn import RULE_HBM_EFFICIENCY
    data = Path(__file__).resolve().parent.parent / "benchmarks" / "measured" / "fla-gdn-gb200" / "chunk_gdn.json"
    fit = fit_rule(json.loads(data.read_text())["measurements"], load_cluster("gb200x4").gpu)
    assert round(fit.efficiency, 2) == RULE_HBM_EFFICIENCY
    assert sorted(abs(fit.errors))[-2] < 0.10 and 0.2 < max(abs(fit.errors)) < 0.3
    assert 0.3e-3 < fit.floor_fwd_s < 1e-3 < fit.floor_fwdbwd_s < 3e-3


def test_the_output_gate_widens_qkv_and_costs_its_elementwise_pass():
    """Megatron's linear_qkv_out_dim gains heads x kv_channels with --attention-output-gate; the fused
    x * sigmoid(gate) reads two and writes one h_q/t tensor forward, five passes backward; its logits stay
    for backward (2 bytes x h_q/t per token)."""
    from solveplan.formulation.layer_terms import output_gate_s
    from solveplan.formulation.memory import layer_activation_bytes
    from solveplan.formulation.moe import attention_geometry
    gated, plain = tiny_gdn(), tiny_gdn(attention_output_gate=False)
    (qkv, _), hq = attention_geometry(gated, 2)[0], gated.q_hidden_size
    assert qkv == ((2 * hq + 2 * gated.kv_hidden_size) / 2, 512)
    assert attention_geometry(plain, 2)[0][0] == ((hq + 2 * plain.kv_hidden_size) / 2, 512)
    f, b = output_gate_s(gated, 1000, 2, 1e12)
    assert (f, b) == pytest.approx((3 * 2 * 1000 * hq / 2 / 1e12, 5 * 2 * 1000 * hq / 2 / 1e12))
    assert output_gate_s(plain, 1000, 2, 1e12) == (0.0, 0.0)
    kw = dict(tokens=1000, hidden=512, q_width=hq, kv_width=128, ffn=1024, mlp_matrices=3, heads=8, seq_k=1024,
              tp=2, sp_degree=2, recompute=0, flash=True, dropout=False)
    extra = layer_activation_bytes(**kw, gate_width=hq)[0] - layer_activation_bytes(**kw)[0]
    assert float(extra) == pytest.approx(1000 * 2 * hq / 2)


def test_a_gdn_unit_prices_its_layers_and_tp_splits_the_heads():
    """A pipeline unit is one period of the pattern (G E * E); a Gated DeltaNet layer's weights and TP traffic
    split over tp; the search finds an optimal plan."""
    from solveplan.formulation.job import job_coefficients
    from solveplan.optimize import optimize
    from solveplan.space.shapes import Shapes
    m = tiny_gdn("GE*E" * 4)
    assert m.pipeline_units == (0, 2, 2, 4)
    j = job(m)
    one = job_coefficients(j, Shapes.single(tp=1, dp=8, ep=8, zero=1))
    two = job_coefficients(j, Shapes.single(tp=2, dp=4, ep=4, zero=1, sequence_parallel=True))
    assert float(two.layer_params_bytes[0]) < float(one.layer_params_bytes[0])
    res = optimize(j, time_limit_s=30)
    assert str(res.status).endswith("OPTIMAL") and res.plan.fits


def test_gdn_rules_follow_megatron():
    """tp divides the key and value heads, and with CP tp x cp does (transformer_config.py: a multiple of
    tp x cp); CP is legal without Mamba layers; framework megatron only, for the gated attention too."""
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.space.rules import config_violations
    j = job(tiny_gdn())
    _, errs = config_violations(j, tp=8, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=True, zero=1, ep=1, etp=1)
    assert any("gdn_num_key_heads / gdn_num_value_heads" in e for _, e in errs)
    _, errs = config_violations(j, tp=1, pp=1, cp=2, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=False, zero=1, ep=4, etp=1)
    assert errs == []
    _, errs = config_violations(j, tp=2, pp=1, cp=4, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=True, zero=1, ep=1, etp=1)
    assert [f for f, _ in errs] == ["cp"] and "multiple of tp x cp = 2 x 4" in errs[0][1]
    assert set(enumerate_shapes(j).shapes.cp.tolist()) == {1, 2, 4}  # 4 key heads: tp x cp at most 4
    mamba = job(tiny_gdn("GM*E" * 2, mamba_state_dim=64, mamba_head_dim=32, mamba_num_heads=16, mamba_num_groups=4))
    _, errs = config_violations(mamba, tp=1, pp=1, cp=2, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=False, zero=1, ep=4, etp=1)
    assert [f for f, _ in errs] == ["cp"] and "Mamba" in errs[0][1]
    for model in (tiny_gdn(), load_model("llama3.1-8b").model_copy(update={"attention_output_gate": True})):
        with pytest.raises(ValidationError, match="use framework megatron"):
            JobSpec(model=model, cluster=load_cluster("h100x8"), global_batch_size=64, seq_length=1024,
                    framework="torchtitan")


def test_context_parallelism_exchanges_the_gdn_heads():
    """Under cp the layer's heads go by two all-to-alls per pass (in_proj's output, the norm's), the forward's
    again under full recomputation, on the links the CP group spans; none at cp 1. A long sequence that does
    not fit without CP is planned with it."""
    from solveplan.formulation import comm
    from solveplan.formulation.gdn import gdn_cp_a2a_s
    from solveplan.optimize import optimize
    m, cluster = load_model("qwen3.5-35b-a3b"), load_cluster("h100x16")
    tokens, tp = 8192.0, 2
    one = comm.all_to_all_s(2 * tokens * (12352 + 4096) / tp, cluster, 4, tp)  # in_proj width + v width, BF16
    assert float(gdn_cp_a2a_s(m, cluster, tokens, tp, 4, 0)) == pytest.approx(2 * float(one))
    assert float(gdn_cp_a2a_s(m, cluster, tokens, tp, 4, 2)) == pytest.approx(3 * float(one))
    assert float(gdn_cp_a2a_s(m, cluster, tokens, tp, 1, 0)) == 0.0
    res = optimize(JobSpec(model=m, cluster=cluster, global_batch_size=64, seq_length=32768), time_limit_s=60)
    assert str(res.status).endswith("OPTIMAL") and res.plan.parallel.cp > 1


def test_reported_flops_count_the_gdn_layers():
    from solveplan.formulation.flops import model_flop_per_step, moe_block_fwd_flop_per_token
    from solveplan.formulation.gdn import gdn_layer_fwd_flop_per_token
    one, two = tiny_gdn("GE*E"), tiny_gdn("GEGE*E")  # one more Gated DeltaNet layer and its MoE block
    s = 1024
    gap = model_flop_per_step(two, 1, s, causal=True) - model_flop_per_step(one, 1, s, causal=True)
    assert gap == pytest.approx(3 * s * (gdn_layer_fwd_flop_per_token(one) + moe_block_fwd_flop_per_token(one)))


# ---------------------------------------------------------------- the launch

def test_qwen35_launches_as_megatron_bridge_builds_it():
    """A GPT model (pretrain_gpt.py) of 40 layers with the experimental attention variant: every 4th layer
    softmax attention, the Gated DeltaNet's dimensions, the output gate, the QK norm; the split in GPT layers."""
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    j = JobSpec(model=load_model(str(QWEN35["35B-A3B"])), cluster=load_cluster("h100x64"), global_batch_size=512,
                seq_length=8192)
    ma = megatron_args(j, plan_config(j, dict(tp=2, pp=2, ep=8, etp=1, sequence_parallel=True)))
    f = ma.flags()
    assert ma.entry == "pretrain_gpt.py" and f["--num-layers"] == "40" and "--hybrid-layer-pattern" not in f
    assert f["--experimental-attention-variant"] == "gdn" and f["--linear-attention-freq"] == "4"
    assert (f["--linear-num-key-heads"], f["--linear-num-value-heads"], f["--linear-key-head-dim"]) == ("16", "32", "128")
    assert f["--attention-output-gate"] is True and f["--qk-layernorm"] is True and f["--mtp-num-layers"] == "1"
    assert f["--moe-shared-expert-gate"] is True and f["--rotary-percent"] == "0.25"
    dense = JobSpec(model=load_model(str(QWEN35["27B"])), cluster=load_cluster("h100x64"), global_batch_size=512,
                    seq_length=8192)
    fd = megatron_args(dense, plan_config(dense, dict(tp=4, pp=1))).flags()
    assert fd["--num-layers"] == "64" and fd["--mtp-num-layers"] == "1" and "--num-experts" not in fd


def test_a_gdn_pattern_of_no_gpt_layers_launches_as_a_hybrid_model():
    """Two mixers in a row is not a GPT model's layers: pretrain_hybrid.py with its 'G' symbols and the
    Gated DeltaNet's dimensions; the missing QK norm of the hybrid stack spec is said."""
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    from solveplan.render.megatron_hybrid import gdn_as_gpt
    m = tiny_gdn("GG*E" * 2)
    assert not gdn_as_gpt(m) and gdn_as_gpt(tiny_gdn())
    j = job(m)
    ma = megatron_args(j, plan_config(j, dict(tp=1, pp=1, ep=8, etp=1)))
    f = ma.flags()
    assert ma.entry == "pretrain_hybrid.py" and f["--hybrid-layer-pattern"] == "GG*EGG*E"
    assert f["--linear-num-value-heads"] == "8" and any("without a QK norm" in n for n in ma.notes)


def test_show_prints_the_gdn(cli):
    code, out, _ = cli("show", str(QWEN35["35B-A3B"]))
    assert code == 0
    assert "30 Gated DeltaNet, 10 attention, 40 MoE" in out and "16 key heads of 128, 32 value heads of 128" in out
    assert "(34.66B)" in out and "(3.45B;" in out


@pytest.mark.parametrize("name, size", [("qwen3.5-397b-a17b", "397B-A17B"), ("qwen3.5-35b-a3b", "35B-A3B"),
                                        ("qwen3.5-27b", "27B")])
def test_catalog_entries_are_their_config_json(name, size):
    """The catalog entries state what the released config.json maps to, field by field (the recipe aside)."""
    recipe = {"name", "source", "notes", "seq_length", "global_batch_size", "nominal_params_b", "hf_model_type",
              "hidden_act"}
    cat, hf = load_model(name).model_dump(exclude=recipe), load_model(str(QWEN35[size])).model_dump(exclude=recipe)
    assert cat == hf


def test_qwen3_next_maps_from_its_configuration_class():
    """transformers 5.17's Qwen3NextConfig with its defaults, which its docstring ties to (auto_docstring checkpoint
    Qwen/Qwen3-Next-80B-A3B-Instruct; "the Qwen3-Next-80B-A3B style configuration"; no released config.json is vendored
    where this project can copy it): 48
    decoder layers, every 4th gated attention (the class's full_attention_interval 4, no layer_types), all MoE;
    80B total within 1%, 3B active without the embeddings (the card's convention for it)."""
    cfg = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "vocab_size": 151936,
           "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 48, "num_attention_heads": 16,
           "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
           "tie_word_embeddings": False, "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                                            "rope_type": "default"},
           "attention_bias": False, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
           "decoder_sparse_step": 1, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
           "num_experts_per_tok": 10, "num_experts": 512, "norm_topk_prob": True, "mlp_only_layers": []}
    m = load_model(cfg)
    assert m.hybrid_layer_pattern == "GEGEGE*E" * 12 and m.attention_output_gate and m.mtp_num_layers == 0
    assert abs(m.num_params / 80e9 - 1) < 0.01
    assert round((m.num_active_params - 2 * m.embedding_params) / 1e9) == 3


@pytest.mark.parametrize("layers, priced", [(60, True), (120, True), (59, False)])
def test_a_published_row_counts_qwen35_layers_as_its_config_does(layers, priced):
    """A run of Qwen3.5-397B-A17B (a real MoE row of the published file, its model replaced) states 60 layers, as
    the config counts them, or the 120 Megatron layers: both read as the catalog entry; 59 names the field."""
    import copy
    import json
    from pathlib import Path

    import solveplan.catalog_published
    from solveplan.calibration.moe_rows import MOE_FILE, moe_row_job
    rows = json.loads((Path(solveplan.catalog_published.__file__).parent / MOE_FILE).read_text())["measurements"]
    raw = copy.deepcopy(next(r for r in rows if r["id"] == "mbridge_perf-26.04.01-qwen3-235b-a22b-gb300-mxfp8-256"))
    raw["model"].update(key="qwen3.5-397b-a17b", name="Qwen3.5-397B-A17B", layers=layers, hidden=4096, heads=32,
                        kv_heads=2, num_experts=512, top_k=10, moe_ffn_hidden=1024)
    raw["parallel"].update(pp=4, vp=None, ep=32)
    row = moe_row_job(raw)
    assert (row.skipped is None) == priced, row.skipped
    if not priced:
        assert "layers 59" in row.skipped


def test_the_qwen3_next_catalog_entry_is_its_configuration_mapped():
    """models/qwen3-next-80b-a3b.yaml is what the mapping makes of Qwen3NextConfig's defaults with the released
    config's intermediate_size and rope_theta (Megatron-Bridge's conversion test copies them), the recipe aside
    (one MTP depth, Megatron-Bridge's recipe; 1024 x 4096, its performance recipes): a row or a plan naming
    Qwen3-Next reads it, 80B total and 3.25B active without the embeddings."""
    cfg = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "vocab_size": 151936,
           "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 16,
           "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
           "tie_word_embeddings": False, "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
           "attention_bias": False, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
           "decoder_sparse_step": 1, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
           "num_experts_per_tok": 10, "num_experts": 512, "norm_topk_prob": True, "full_attention_interval": 4,
           "mlp_only_layers": []}
    recipe = {"name", "source", "notes", "seq_length", "global_batch_size", "nominal_params_b", "hf_model_type",
              "hidden_act", "mtp_num_layers", "mtp_hybrid_layer_pattern"}
    cat = load_model("qwen3-next-80b-a3b")
    assert cat.model_dump(exclude=recipe) == load_model(cfg).model_dump(exclude=recipe)
    assert cat.mtp_num_layers == 1 and cat.mtp_hybrid_layer_pattern == "*E"
    assert abs(cat.num_params / 80e9 - 1) < 0.01
    assert abs((cat.num_active_params - 2 * 151936 * 2048) / 3.25e9 - 1) < 0.01
