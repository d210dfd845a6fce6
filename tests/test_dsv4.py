"""DeepSeek-V4 (Flash, Pro): the spec's rules, the Hugging Face mapping, the formulation's terms
(formulation/dsv4.py), the space's rules and the launch, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation import dsv4
from solveplan.formulation.flops import attention_core_fwd_flop
from solveplan.formulation.kernels import window_keys
from solveplan.space.enumeration import enumerate_shapes
from solveplan.space.rules import config_violations
from solveplan.specs import JobSpec, ModelSpec

DATA = Path(__file__).parent / "data" / "hf"
FLASH = str(DATA / "DeepSeek-V4-Flash" / "config.json")


def _spec(**kw):
    return ModelSpec(**{**load_model("deepseek-v4-flash").model_dump(), **kw})


def test_the_config_maps_every_layer_kind():
    """Flash: layers 0-1 attend through the window only, then ratio 4 and 128 alternate (21 and 20 layers), the MTP
    layer's ratio last; one 512-wide KV head, Q through a 1024 latent, 8 output groups of rank 1024, mHC with 4
    streams, the first 3 layers hash-routed, sqrt-softplus scores, the experts' clamp 10."""
    m = load_model(FLASH)
    ratios = m.csa_compress_ratios
    assert ratios[:4] == (0, 0, 4, 128) and len(ratios) == 44 and ratios[43] == 0
    assert [ratios[:43].count(r) for r in (0, 4, 128)] == [2, 21, 20]
    assert (m.v_head_dim, m.qk_pos_emb_head_dim, m.qk_head_dim, m.kv_lora_rank, m.kv_channels) == (512, 64, 448, 448, 512)
    assert (m.q_lora_rank, m.o_groups, m.o_lora_rank, m.csa_window_size) == (1024, 8, 1024, 128)
    assert (m.num_residual_streams, m.mhc_sinkhorn_iterations, m.moe_n_hash_layers) == (4, 20, 3)
    assert (m.moe_router_score_function, m.activation_clamp, m.dsa_dims) == ("sqrtsoftplus", 10.0, (64, 128, 512))
    assert not m.is_dsa and m.is_dsv4 and m.sliding_window is None  # its window is its own attention's
    assert m.num_params == pytest.approx(284.33e9, rel=1e-4)
    pro = load_model(str(DATA / "DeepSeek-V4-Pro" / "config.json"))
    assert pro.csa_compress_ratios[:3] == (128, 128, 4) and pro.num_params == pytest.approx(1573.0e9, rel=1e-4)


@pytest.mark.parametrize("change, message", [
    (dict(csa_compress_ratios=(0, 8) * 22), "0, 4 or 128"),
    (dict(csa_compress_ratios=(0,) * 10), "each of the 44 layers"),
    (dict(o_groups=None), "o_groups and o_lora_rank"),
    (dict(qk_head_dim=512), "qk_head_dim and kv_lora_rank must be 448"),
    (dict(o_groups=3), "o_groups (3) must divide"),
    (dict(dsa_indexer_topk=None, dsa_indexer_n_heads=None, dsa_indexer_head_dim=None), "ratio-4 layers"),
])
def test_the_spec_refuses_what_megatron_would(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _spec(**change)


def test_its_fields_need_its_attention():
    base = {k: v for k, v in load_model("deepseek-v3").model_dump().items()}
    with pytest.raises(ValueError, match="describe DeepSeek-V4's layers"):
        ModelSpec(**{**base, "num_residual_streams": 4})


def test_the_average_layer_gathers_the_window_and_its_ratio_s_entries():
    """Keys per query, averaged over the sequence: the window's w (1 - w / 2s), plus s / 256 on ratio-128 layers
    (every 128-token entry so far) and a quarter of window_keys(4k, s) on ratio-4 layers (the top-k of the
    (t + 1) / 4 entries), by the layers' shares; the core's FLOPs are 4 a d per key."""
    m, s = load_model(FLASH), 4096
    share = dict(zip((0, 4, 128), m.csa_shares))
    want = window_keys(128, s) + share[128] * s / 256 + share[4] * window_keys(4 * 512, s) / 4
    assert float(dsv4.mean_keys(m, s)) == pytest.approx(float(want))
    assert float(want) == pytest.approx(126 + 20 / 43 * 16 + 21 / 43 * 384)
    core = attention_core_fwd_flop(m, 1, s, causal=True) - dsv4.indexer_fwd_flop(m, batch=1, s_q=s, s_k=s, heads=64)
    assert float(core) == pytest.approx(4.0 * s * float(want) * 64 * 512)


def test_mhc_is_priced_only_with_several_streams():
    m = load_model(FLASH)
    fwd, bwd = dsv4.mhc_s(m, 4096, 8e12)
    assert fwd == pytest.approx(4 * 2 * 4096 * 4 * 4096 * 2 / 8e12) and bwd == pytest.approx(2 * fwd)
    assert dsv4.mhc_s(_spec(num_residual_streams=1), 4096, 8e12) == (0.0, 0.0)
    assert float(dsv4.saved_bytes_per_token(m, 1, 4096)) - float(
        dsv4.saved_bytes_per_token(_spec(num_residual_streams=1), 1, 4096)) == 2 * 2 * 4 * 4096


def _job(**kw):
    return JobSpec(model=load_model(FLASH), cluster=load_cluster("h100x256"), seq_length=4096, global_batch_size=1024,
                   **kw)


def test_tensor_and_context_parallelism_stay_one():
    """Megatron-LM dev's DeepSeek-V4 attention runs with tp 1, and its CP needs packed sequences (not planned)."""
    shapes = enumerate_shapes(_job()).shapes
    assert len(shapes) and (shapes.tp == 1).all() and (shapes.cp == 1).all()
    _, errs = config_violations(_job(), tp=2, pp=1, cp=2, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=True, zero=1, ep=8)
    assert {"tp", "cp"} <= {f for f, _ in errs}


def test_hash_routed_layers_refuse_the_all_to_all_overlap():
    with pytest.raises(ValueError, match="hash-routed MoE layers"):
        _job(moe_a2a_overlap=True)


def test_the_hash_routed_layers_stay_on_the_embedding_s_stage():
    """The pipeline splits after the 3 hash-routed layers at the earliest (Megatron: "All hash MoE layers must be
    in the same virtual pipeline stage as the embedding"), and with pp > 1 the launch writes the layout Megatron
    requires there, its first virtual stage holding them."""
    m = load_model(FLASH)
    assert m.pipeline_units == (3, 0, 1, 40) and m.pipeline_prefix == (0, 3)
    assert not any(m.stage_boundary_ok(c) for c in (1, 2)) and m.stage_boundary_ok(3)


def test_launch_builds_deepseek_v4(cli):
    code, out, err = cli("optimize", "--model", FLASH, "--cluster", "h100x256", "--global-batch-size", "1024",
                         "--seq-len", "4096", "--pp", "4", "--vp", "2", "--json")
    assert code == 0, err
    res = json.loads(out)
    args = " ".join(res["megatron_args"])
    assert res["status"] == "OPTIMAL" and res["parallel"]["tp"] == 1
    for flag in ("--experimental-attention-variant dsv4_hybrid", "--csa-compress-ratios [0,0,4,128,4,128",
                 "--csa-window-size 128", "--o-groups 8 --o-lora-rank 1024", "--enable-hyper-connections",
                 "--num-residual-streams 4", "--mhc-sinkhorn-iterations 20", "--moe-n-hash-layers 3",
                 "--moe-router-score-function sqrtsoftplus", "--kv-channels 512", "--dsa-indexer-topk 512"):
        assert flag in args, flag
    layout = res["megatron_args"][res["megatron_args"].index("--pipeline-model-parallel-layout") + 1]
    first = layout.split("|")[0]
    assert first.startswith("E,t*") and int(first.split("*")[1].split(",")[0]) >= 3


def test_show_describes_the_layer_kinds(cli):
    code, out, err = cli("show", "deepseek-v4-flash", "--json")
    assert code == 0, err
    v4 = json.loads(out)["derived"]["moe"]["deepseek_v4"]
    assert v4 == {"layers_by_ratio": {"0": 2, "4": 21, "128": 20}, "window": 128, "topk": 512, "o_groups": 8,
                  "o_lora_rank": 1024, "residual_streams": 4, "hash_layers": 3}
    code, out, err = cli("show", "deepseek-v4-flash")
    assert code == 0 and "DeepSeek-V4 attention" in out and "21 layers add the top 512" in out
