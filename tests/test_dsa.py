"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the spec's rules, the Hugging Face mapping, the
formulation's terms (formulation/dsa.py) and the launch, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation import dsa
from solveplan.formulation.flops import attention_core_fwd_flop
from solveplan.formulation.kernels import window_keys
from solveplan.specs import ModelSpec

DATA = Path(__file__).parent / "data" / "hf"
DSA_KEYS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk", "dsa_indexer_rope_interleaved",
            "dsa_indexer_rotate_activation")


def _dense(model: ModelSpec) -> ModelSpec:
    """The same model attending densely (MLA without the indexer)."""
    data = {k: v for k, v in model.model_dump().items() if k not in DSA_KEYS}
    return ModelSpec(**data)


def _spec(**kw):
    base = load_model("deepseek-v3.2").model_dump()
    return ModelSpec(**{**base, **kw})


def test_the_indexer_fields_go_together_on_mla_without_biases():
    with pytest.raises(ValueError, match="dsa_indexer_topk is missing"):
        _spec(dsa_indexer_topk=None)
    with pytest.raises(ValueError, match="multi-latent attention only"):
        _spec(multi_latent_attention=False, q_lora_rank=None, kv_lora_rank=None, qk_head_dim=None,
              qk_pos_emb_head_dim=None, v_head_dim=None)
    with pytest.raises(ValueError, match="add_bias_linear: false"):
        _spec(add_bias_linear=True, add_qkv_bias=True)


def test_the_indexer_adds_its_weights_to_every_layer():
    """DeepSeek-V3.2 is DeepSeek-V3 and 61 indexers of q_lora 1536 x 64 x 128 + 7168 x 128 + 2 x 128 + 7168 x 64
    weights (dsa.py `DSAIndexer`)."""
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32.dsa_indexer_params == per_layer == 13_959_424
    assert v32.num_params - v3.num_params == 61 * per_layer
    assert _dense(v32).num_params == v3.num_params


def test_hf_configs_map_the_indexer():
    v32 = load_model(str(DATA / "DeepSeek-V3.2" / "config.json"))
    glm = load_model(str(DATA / "GLM-5" / "config.json"))
    assert v32.dsa_dims == (64, 128, 2048) and v32.dsa_indexer_rotate_activation and not v32.dsa_indexer_rope_interleaved
    assert glm.dsa_dims == (32, 128, 2048) and glm.dsa_indexer_rope_interleaved and not glm.dsa_indexer_rotate_activation
    assert (glm.qk_head_dim, glm.qk_pos_emb_head_dim, glm.v_head_dim, glm.kv_channels) == (192, 64, 256, None)
    assert glm.moe_router_enable_expert_bias and glm.moe_router_num_groups is None  # n_group 1


def test_index_sharing_maps_megatrons_rule_and_splits_on_whole_groups():
    """GLM-5.2 reuses a layer's top-k on the next three (index_topk_freq 4, offset 3: layers 1-3, 7, 11, ... run
    the indexer, transformers' indexer_types say the same): 21 of 78 layers hold an indexer, and the pipeline
    splits after its first 6 layers (3 dense, 3 MoE) in groups of 4, so every stage starts on a computing layer."""
    glm52, glm5 = load_model(str(DATA / "GLM-5.2" / "config.json")), load_model(str(DATA / "GLM-5" / "config.json"))
    assert (glm52.dsa_indexer_topk_freq, glm52.dsa_indexer_skip_topk_offset) == (4, 3)
    computing = [n + 1 for n, v in enumerate(glm52.dsa_index_mask) if v]
    assert computing[:6] == [1, 2, 3, 7, 11, 15] and len(computing) == 21
    assert glm52.pipeline_units == (6, 0, 4, 18) and glm52.pipeline_prefix == (3, 3)
    assert glm5.pipeline_units == (3, 0, 1, 75)  # no sharing: any MoE layer may start a stage
    for units in ([18], [5, 13], [1, 1, 16], [4, 5, 5, 4]):
        starts = [sum(glm52.units_to_layers(units)[:i]) for i in range(len(units))]
        assert all(glm52.stage_boundary_ok(c) for c in starts)
    assert glm52.num_params == pytest.approx(glm5.num_params - 57 * glm5.dsa_indexer_params, abs=78)
    assert dsa.indexer_fwd_flop(glm52, batch=1, s_q=4096, s_k=4096, heads=64) == pytest.approx(
        21 / 78 * dsa.indexer_fwd_flop(glm5, batch=1, s_q=4096, s_k=4096, heads=64))


def test_an_index_layout_other_than_megatrons_rule_is_refused(cli, tmp_path):
    """transformers' per-layer indexer_types must be Megatron's every-n-th rule (the only one Megatron-LM builds)."""
    cfg = json.loads((DATA / "GLM-5.2" / "config.json").read_text())
    cfg["indexer_types"][7] = "full"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, err = cli("show", str(path))
    assert code == 2 and out == "" and "other than Megatron-LM's every-n-th rule" in err


def test_index_sharing_launches_whole_groups_per_virtual_stage(cli):
    """The launch states the sharing and, interleaved, a layout whose virtual stages hold whole groups after the
    6-layer prefix (Megatron's own halving of a rank's 22 layers would start one on layer 12, which it refuses)."""
    code, out, err = cli("optimize", "--model", str(DATA / "GLM-5.2" / "config.json"), "--cluster", "h100x512",
                         "--global-batch-size", "1024", "--seq-len", "4096", "--tp", "1", "--pp", "4", "--vp", "2",
                         "--ep", "32", "--etp", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    args = res["megatron_args"]
    assert "--dsa-indexer-topk-freq 4 --dsa-indexer-skip-topk-offset 3" in " ".join(args)
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    chunks = [int(part.split("*")[1]) if "*" in part else 1 for stage in layout.split("|")
              for part in stage.split(",") if part.startswith("t")]
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    assert sum(chunks) == 78 and all(load_model(str(DATA / "GLM-5.2" / "config.json")).stage_boundary_ok(c)
                                     for c in starts)


def test_sparse_core_counts_the_top_k_keys_in_the_latent_space():
    """The core's FLOPs: 2 b s keys a (2 d_c + d_r), keys = min(K, t + 1) averaged (the causal s/2 up to K), plus the
    indexer's scoring over half of s x s and its sparse loss; at s <= K the core sees every causal key."""
    m = load_model("deepseek-v3.2")
    for s in (2048, 131072):
        total = attention_core_fwd_flop(m, 1, s, causal=True)
        core = 2.0 * s * float(window_keys(2048, s)) * 128 * (2 * 512 + 64)
        assert total == pytest.approx(core + float(dsa.indexer_fwd_flop(m, batch=1, s_q=s, s_k=s, heads=128)))
    assert float(window_keys(2048, 2048)) == pytest.approx(1024.0)  # causal: half of 2048 keys


def test_sparse_attention_is_cheaper_only_at_long_context():
    """Against the same model attending densely (MLA, one H100's attention per layer and micro-batch): at 128k
    tokens the top-2048 core and the indexer cost a fraction of dense attention; at 4k the latent-space core
    (576 + 512 wide per head against MLA's 192 + 128) costs more than dense MLA, as DeepSeek's report says of
    short prefill (it runs a masked MHA mode there)."""
    m = load_model("deepseek-v3.2")
    gpu = load_cluster("h100x64").gpu

    def attn(model, s):
        from solveplan.formulation.layer_terms import attention_core_s
        if model.is_dsa:
            return sum(dsa.attention_s(gpu, model, batch=1, heads=128, s_q=s, s_k=s, hbm=3e12))
        return sum(attention_core_s(gpu, batch=1, heads=128, s_q=s, s_k=s, head_dim=160, flash=True, kernel="cudnn",
                                    hbm_bytes_per_s=3e12))
    assert attn(m, 131072) < 0.2 * attn(_dense(m), 131072)
    assert attn(m, 4096) > attn(_dense(m), 4096)


def test_the_indexer_does_not_shrink_with_tensor_parallelism():
    """The indexer is replicated on every TP rank (`parallel_mode="duplicated"`): splitting the heads over 8 ranks
    divides the core, not the indexer's scoring."""
    m, gpu, s = load_model("deepseek-v3.2"), load_cluster("h100x64").gpu, 65536
    one = dsa.indexer_s(gpu, m, batch=1, heads=128, s_q=s, s_k=s, hbm_bytes_per_s=3e12)[0]
    eight = dsa.indexer_s(gpu, m, batch=1, heads=16, s_q=s, s_k=s, hbm_bytes_per_s=3e12)[0]
    rate = gpu.peak_flop_per_s * gpu.fused_attention_efficiency
    scoring = 2.0 * 64 * 128 * s * s / 2 / rate
    loss_heads = 2.0 * (128 - 16) * (512 + 64) * s * float(window_keys(2048, s)) / rate  # the loss's per-head pass
    assert eight > scoring and one - eight == pytest.approx(loss_heads)


def test_memory_keeps_the_top_k_and_the_absorbed_core():
    """Per token and layer: K int32 indices, the indexer's gradients, the absorbed query and latent output, less
    MLA's per-head K and V (`dsa.saved_bytes_per_token`); 221 kB at tp 1 for DeepSeek-V3.2."""
    m = load_model("deepseek-v3.2")
    extra = float(dsa.saved_bytes_per_token(m, 1))
    assert extra == 2 * 128 * (2 * 512 + 64) + 4 * 2048 + 2 * (64 * 128 + 128 + 64) - 2 * 128 * (128 + 64 + 128)
    assert float(dsa.saved_bytes_per_token(m, 8)) < extra


def test_context_parallelism_gathers_the_latent_and_indexer_keys(cli):
    """With cp > 1 the launch asks for the all-gather exchange Megatron requires, and the plan prices it."""
    code, out, err = cli("optimize", "--model", "glm-5", "--cluster", "gb200x192", "--seq-len", "131072",
                         "--global-batch-size", "56", "--tp", "1", "--pp", "6", "--cp", "32", "--ep", "32", "--etp", "1",
                         "--micro-batch-size", "1", "--recompute", "full", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["breakdown"]["cp_comm_s"] > 0
    assert "--cp-comm-type all_gather" in " ".join(res["megatron_args"])


def test_optimize_plans_deepseek_v32_with_the_indexer_flags(cli):
    code, out, err = cli("optimize", "--model", str(DATA / "DeepSeek-V3.2" / "config.json"), "--cluster", "h100x1024",
                         "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["status"] == "OPTIMAL" and res["parallel"]["ep"] > 1
    args = " ".join(res["megatron_args"])
    for flag in ("--experimental-attention-variant dsa", "--dsa-indexer-n-heads 64", "--dsa-indexer-head-dim 128",
                 "--dsa-indexer-topk 2048", "--dsa-kernel-backend cudnn", "--dsa-indexer-use-sparse-loss",
                 "--no-rope-fusion", "--multi-latent-attention"):
        assert flag in args
    assert "--dsa-indexer-rope-interleaved" not in args and "--no-dsa-indexer-rotate-activation" not in args
    assert "torchtitan has no mixture-of-experts model" in " ".join(res["torchtitan_notes"])


def test_tensor_parallelism_needs_sequence_parallelism_under_sparse_attention():
    """Megatron's absorbed MLA refuses tp > 1 without SP: a dense model with DSA (no MoE rule to say it) is never
    enumerated so, and an explicit configuration so is refused naming the field."""
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.specs import JobSpec
    dense = {k: v for k, v in load_model("deepseek-v3.2").model_dump().items()
             if not k.startswith("moe_") and k != "num_experts"}
    model = ModelSpec(**{**dense, "num_layers": 4, "mtp_num_layers": 0})
    job = JobSpec(model=model, cluster=load_cluster("h100x64"), seq_length=4096, global_batch_size=64)
    shapes = enumerate_shapes(job).shapes
    assert len(shapes) and (shapes.tp > 1).any()
    assert not ((shapes.tp > 1) & ~shapes.sequence_parallel.astype(bool)).any()
    from solveplan.space.rules import config_violations
    _, errs = config_violations(job, tp=2, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=False, zero=1)
    assert [f for f, _ in errs] == ["sequence_parallel"] and "DeepSeek Sparse Attention" in errs[0][1]
    plain = ModelSpec(**{k: v for k, v in model.model_dump().items() if k not in DSA_KEYS})
    legal = enumerate_shapes(job.model_copy(update={"model": plain})).shapes
    assert ((legal.tp > 1) & ~legal.sequence_parallel.astype(bool)).any()  # dense MLA alone allows it


def test_other_frameworks_are_refused_for_sparse_attention(cli, tmp_path):
    """Megatron-Core's DSA is what is priced: a dense model with sparse attention under torchtitan is refused."""
    dense = {k: v for k, v in load_model("deepseek-v3.2").model_dump().items()
             if not k.startswith("moe_") and k != "num_experts"}
    spec = tmp_path / "dense-dsa.json"
    spec.write_text(json.dumps({**dense, "name": "dense-dsa", "num_layers": 4, "mtp_num_layers": 0}))
    code, out, err = cli("optimize", "--model", str(spec), "--cluster", "h100x64", "--framework", "torchtitan")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "sparse-attention (DSA) model; its indexer and sparse core are priced as Megatron-Core" in err


def test_index_sharing_scales_the_whole_indexer():
    """Every part of the indexer -- scoring, loss, its FP32 scores' traffic -- runs on the share of layers that
    compute a top-k: GLM-5.2's indexer time is 21/78 of GLM-5's on the same job."""
    glm52, glm5 = load_model(str(DATA / "GLM-5.2" / "config.json")), load_model(str(DATA / "GLM-5" / "config.json"))
    gpu = load_cluster("h100x64").gpu
    shared, full = (dsa.indexer_s(gpu, m, batch=1, heads=64, s_q=8192, s_k=8192, hbm_bytes_per_s=3e12)[0]
                    for m in (glm52, glm5))
    assert float(shared) == pytest.approx(21 / 78 * float(full))
