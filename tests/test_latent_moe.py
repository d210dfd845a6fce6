"""LatentMoE (Nemotron 3 Super / Ultra; Megatron-LM --moe-latent-size): the routed experts work in a
latent width l, with a duplicated h x l projection before the dispatch and l x h after the combine
(Megatron-LM d98e8a6 megatron/core/transformer/moe/moe_layer.py ~266-302, experts.py ~219-242,
token_dispatcher.py ~1535; training.py `moe_layer_flops`, latent branch). Each term is checked
against a hand computation from those sources, and a model without the field is unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from conftest import DATA
from solveplan.catalog import load_model
from solveplan.formulation import flops, moe
from solveplan.specs import ModelSpec

# Nemotron 3 Super 120B-A12B: Megatron-LM's own launch of the checkpoint, NVIDIA/Megatron-LM@d98e8a64ddf3:
# examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh (--hybrid-layer-pattern
# below: 40 M, 40 E, 8 *; hidden 4096, 32 heads / 2 query groups of 128, --mamba-num-heads 128 x 64, Megatron's
# default 8 groups and state 128; --num-experts 512, top-22, --moe-latent-size 1024, shared 5376, the experts
# at --ffn-hidden-size 2688, squared ReLU, untied); vocab 131072 and the checkpoint's BF16 weights,
# 123,611,012,096 of which 2,942,324,736 are its MTP block ("*E", left out here), as public code quoting
# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16's config.json and safetensors headers states them.
SUPER_PATTERN = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
# Nemotron 3 Ultra 550B-A55B: NVIDIA/Megatron-LM@d98e8a64ddf3:
# examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh (108 layers, hidden 8192,
# 64 heads / 2 query groups of 128, --mamba-num-heads 256 x 64, --num-experts 512, top-22, --moe-latent-size
# 2048, shared 10240, experts at --ffn-hidden-size 5120); vocab taken as Nano's and Super's 131072 (the
# launch reads it from the tokenizer).
ULTRA_PATTERN = ("MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*"
                 "EMEMEMEM*EMEMEMEME")
SUPER_BACKBONE_PARAMS = 123_611_012_096 - 2_942_324_736


def super_like(**kw) -> ModelSpec:
    base = dict(name="nemotron3-super-backbone", num_layers=88, hidden_size=4096, num_attention_heads=32,
                num_kv_heads=2, kv_channels=128, ffn_hidden_size=2688, vocab_size=131072,
                activation="squared_relu", normalization="RMSNorm", add_bias_linear=False, tied_embeddings=False,
                position_embedding="none", dropout=0.0, hybrid_layer_pattern=SUPER_PATTERN, mamba_state_dim=128,
                mamba_head_dim=64, mamba_num_heads=128, mamba_num_groups=8, num_experts=512,
                moe_ffn_hidden_size=2688, moe_router_topk=22, moe_shared_expert_intermediate_size=5376,
                moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True, moe_latent_size=1024,
                seq_length=8192)
    return ModelSpec(**{**base, **kw})


def test_super_backbone_parameters_match_the_checkpoint():
    """120.67B in the checkpoint without its MTP block: within 0.01% with the latent experts and the
    projections; the same model with its experts at the hidden width would be about 4x larger.
    Active: the 12B of the name (A12B), without the input embedding as Nemotron 3 Nano's report counts."""
    m = super_like()
    assert SUPER_PATTERN.count("M") == 40 and SUPER_PATTERN.count("E") == 40 and len(SUPER_PATTERN) == 88
    assert abs(m.num_params / SUPER_BACKBONE_PARAMS - 1) < 1e-4, m.num_params  # 24,576 apart
    assert abs((m.num_active_params - m.embedding_params) / 12e9 - 1) < 0.02, m.num_active_params
    assert super_like(moe_latent_size=None).num_params > 3.5 * m.num_params
    # one MoE layer by hand: 512 experts of 2 x 1024 x 2688, shared 2 x 4096 x 5376, router 4096 x 512 + 512
    # expert biases, the projections 2 x 4096 x 1024, the pre-norm 4096
    h, l = 4096, 1024
    assert m.hybrid_kind_params()["moe"] == 512 * 2 * l * 2688 + 2 * h * 5376 + h * 512 + 512 + 2 * h * l + h
    assert m.moe_latent_proj_params == 2 * h * l and m.moe_expert_width == l


def test_ultra_parameters_match_the_published_sizes():
    """550B total, 55B active (the name; Megatron-Bridge perf_recipes: "550B-A55B LatentMoE"), active without
    the input embedding as Nemotron 3 Nano's report counts; within 1%."""
    m = super_like(num_layers=108, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=5120,
                   moe_ffn_hidden_size=5120, moe_shared_expert_intermediate_size=10240, moe_latent_size=2048,
                   mamba_num_heads=256, hybrid_layer_pattern=ULTRA_PATTERN)
    assert m.hybrid_layer_counts() == {"mamba": 48, "gdn": 0, "attention": 12, "mlp": 0, "moe": 48}
    assert abs(m.num_params / 550e9 - 1) < 0.01, m.num_params
    assert abs((m.num_active_params - m.embedding_params) / 55e9 - 1) < 0.01, m.num_active_params


@pytest.mark.parametrize("change, words", [
    (dict(moe_latent_size=4096), "moe_latent_size (4096) must be below hidden_size (4096)"),
    (dict(num_experts=None, moe_ffn_hidden_size=None, moe_router_topk=None, moe_router_enable_expert_bias=False,
          moe_shared_expert_intermediate_size=None, hybrid_layer_pattern="M*" * 44), "moe_latent_size"),
])
def test_bad_latent_sizes_are_refused_in_one_line(change, words):
    with pytest.raises(ValidationError) as e:
        super_like(**change)
    msg = str(e.value).splitlines()
    assert any(words in ln for ln in msg), msg


def test_flops_follow_megatrons_latent_branch():
    """training.py `moe_layer_flops` (d98e8a6): routed 4*T*l*f_e*k (no swiglu), the up and down
    projections 4*T*h*l, shared 4*T*h*f_s; plus the router's 2*T*h*E this formulation counts."""
    m = super_like()
    h, l, f, k, E, f_s = 4096, 1024, 2688, 22, 512, 5376
    assert flops.moe_block_fwd_flop_per_token(m) == 4 * l * f * k + 4 * h * l + 4 * h * f_s + 2 * h * E
    plain = super_like(moe_latent_size=None)
    assert flops.moe_block_fwd_flop_per_token(plain) == 4 * h * f * k + 4 * h * f_s + 2 * h * E


def test_the_dispatcher_moves_latent_width_tokens(monkeypatch):
    """token_dispatcher.py (~1535): `hidden_dim = config.moe_latent_size or config.hidden_size`: the
    all-to-all bytes of a latent model are l/h of the same model's without."""
    from solveplan.catalog import load_cluster
    sent = []
    monkeypatch.setattr(moe.comm, "all_to_all_s", lambda b, *a, **k: sent.append(float(b)) or 0.0)
    c = load_cluster("h100x64")
    for latent in (1024, None):
        moe.moe_comm_pass_s(super_like(moe_latent_size=latent), c, 8192.0, 1, 8, 1, 1.0)
    assert sent[0] == pytest.approx(sent[1] * 1024 / 4096) and sent[0] == 22 * 8192 * 1024 * 2


def test_expert_gemms_at_the_latent_width_and_the_projections_as_gemms(monkeypatch):
    """The grouped expert GEMMs read/write l (experts.py builds fc1 l -> f_e, fc2 f_e -> l); the two
    projections are full (duplicated) linears over the rank's T/tp tokens: h -> l and l -> h."""
    grouped, dense = [], []
    real_g, real_l = moe.grouped_linear_s, moe.linear_s
    monkeypatch.setattr(moe, "grouped_linear_s", lambda g, M, N, K, **kw: grouped.append((N, K)) or real_g(g, M, N, K, **kw))
    monkeypatch.setattr(moe, "linear_s", lambda M, N, K, **kw: dense.append((float(M), N, K)) or real_l(M, N, K, **kw))
    mm = dict(flop_per_s=1e15, efficiency=0.7, num_sms=132, hbm_bytes_per_s=3e12)
    moe.moe_mlp_compute_s(super_like(), 8192.0, 2, 8, 1, 1.0, mm=mm, bf16=mm, hbm_bytes_per_s=3e12)
    assert [K for _, K in grouped] == [1024, 2688] and [N for N, _ in grouped] == [2688, 1024]
    assert (4096.0, 1024, 4096) in dense and (4096.0, 4096, 1024) in dense  # T_r = 8192 / tp 2


def test_projection_weights_are_replicated_over_tp_and_saved_inputs_at_l():
    m, plain = super_like(), super_like(moe_latent_size=None)
    rest1, experts1 = moe.moe_layer_params_per_gpu(m, 1, 8, 1)
    rest2, _ = moe.moe_layer_params_per_gpu(m, 2, 8, 1)
    router_and_proj = 4096 * 512 + 512 + 2 * 4096 * 1024
    assert rest2 == pytest.approx((rest1 - router_and_proj) / 2 + router_and_proj)
    assert experts1 == 512 * 2 * 1024 * 2688 / 8
    a_lat = moe.moe_mlp_activation_bytes(m, 8192.0, 1, 8, 1, 1.0)
    a_plain = moe.moe_mlp_activation_bytes(plain, 8192.0, 1, 8, 1, 1.0)
    _, copies = moe.routed_tokens(m, 8192.0, 8, 1, 1.0)
    # each copy's saved expert input shrinks from h to l (2 bytes); fc2_latent_proj keeps its l-wide input
    assert a_plain - a_lat == pytest.approx(float(copies) * 2 * (4096 - 1024) - 2 * 8192 * 1024)


def test_models_without_a_latent_size_are_unchanged():
    """The expert width is the hidden width, no projection weights: the existing catalog's numbers."""
    for name in ("nemotron3-nano", "deepseek-v3", "mixtral-8x7b", "gpt-oss-120b"):
        m = load_model(name)
        assert m.moe_latent_size is None and m.moe_expert_width == m.hidden_size and m.moe_latent_proj_params == 0


def test_hf_nemotron_h_config_reads_the_latent_size():
    nano = json.loads((DATA / "hf" / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json").read_text())
    m = load_model({**nano, "moe_latent_size": 1024})
    base = load_model(nano)
    assert m.moe_latent_size == 1024
    h, f, E = 2688, 1856, 128
    per_layer = E * 2 * (h - 1024) * f - 2 * h * 1024
    assert base.num_params - m.num_params == 23 * per_layer


def test_megatron_launch_says_the_latent_size():
    from solveplan.catalog import load_cluster
    from solveplan.plan import plan_config
    from solveplan.render.megatron import megatron_args
    from solveplan.specs import JobSpec
    j = JobSpec(model=super_like(), cluster=load_cluster("h100x64"), global_batch_size=512, seq_length=8192)
    f = megatron_args(j, plan_config(j, dict(tp=1, pp=1, ep=64, etp=1))).flags()
    assert f["--moe-latent-size"] == "1024" and f["--num-experts"] == "512"
    nano = JobSpec(model=load_model("nemotron3-nano"), cluster=load_cluster("h100x16"), global_batch_size=1024,
                   seq_length=8192)
    assert "--moe-latent-size" not in megatron_args(nano, plan_config(nano, dict(tp=1, pp=1, ep=8, etp=1))).flags()
