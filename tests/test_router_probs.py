"""A router's top-k probabilities as the checkpoint computes them (specs/hf_router.py): renormalised or not
(HF norm_topk_prob -> Megatron --moe-router-pre-softmax for softmax scores) and scaled (routed_scaling_factor ->
--moe-router-topk-scaling-factor), read from real config.json files and launched; no priced term depends on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from solveplan.catalog import load_model
from solveplan.errors import InputError
from solveplan.specs import ModelSpec
from solveplan.specs.hf import model_from_hf_config

HF = Path(__file__).parent / "data" / "hf"


def _hf(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


@pytest.mark.parametrize("name, pre_softmax, scale", [
    ("DeepSeek-V2-Lite", True, None),  # softmax, norm_topk_prob false, routed_scaling_factor 1.0
    ("deepseek-moe-16b", True, None),
    ("Qwen2-57B-A14B", True, None),  # Qwen2-MoE: norm_topk_prob false
    ("Qwen3-30B-A3B", False, None),  # norm_topk_prob true: Megatron's default softmax over the k
    ("Mixtral-8x7B-v0.1", False, None),  # its code always renormalises
    ("DeepSeek-V3", False, 2.5), ("Kimi-K2-Instruct", False, 2.827), ("GLM-4.5", False, 2.5),
    ("DeepSeek-V4-Flash", False, 1.5), ("NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", False, 5.0),
    ("Llama-4-Scout-17B-16E-Instruct", False, None),  # top-1 sigmoid
])
def test_configs_state_their_router_probabilities(name, pre_softmax, scale):
    m = load_model(str(HF / name / "config.json"))
    assert (m.moe_router_pre_softmax, m.moe_router_topk_scaling_factor) == (pre_softmax, scale)


def test_a_family_default_applies_when_the_key_is_absent():
    """DeepseekV3Config's routed_scaling_factor is 2.5 and Qwen3MoeConfig's norm_topk_prob false when a file
    omits them."""
    v3 = {k: v for k, v in _hf("DeepSeek-V3").items() if k != "routed_scaling_factor"}
    assert model_from_hf_config(v3, "x").moe_router_topk_scaling_factor == 2.5
    qwen = {k: v for k, v in _hf("Qwen3-30B-A3B").items() if k != "norm_topk_prob"}
    assert model_from_hf_config(qwen, "x").moe_router_pre_softmax is True


def test_sigmoid_scores_not_renormalised_are_said_not_launched():
    data = {**_hf("DeepSeek-V3"), "norm_topk_prob": False}
    m = model_from_hf_config(data, "x")
    assert m.moe_router_pre_softmax is False
    assert "norm_topk_prob false with sigmoid scores: Megatron-LM renormalises" in m.notes


@pytest.mark.parametrize("key, value", [("norm_topk_prob", "yes"), ("routed_scaling_factor", -1),
                                        ("routed_scaling_factor", True)])
def test_malformed_router_keys_are_refused_naming_the_key(key, value):
    with pytest.raises(InputError, match=key):
        model_from_hf_config({**_hf("DeepSeek-V3"), key: value}, "x")


def test_pre_softmax_needs_softmax_scores_and_experts():
    v3 = load_model("deepseek-v3").model_dump()
    with pytest.raises(ValueError, match="moe_router_pre_softmax applies to softmax scores"):
        ModelSpec(**{**v3, "moe_router_pre_softmax": True})
    dense = load_model("llama3.1-8b").model_dump()
    for field, value in (("moe_router_pre_softmax", True), ("moe_router_topk_scaling_factor", 2.5)):
        with pytest.raises(ValueError, match=f"{field} applies to mixture-of-experts models only"):
            ModelSpec(**{**dense, field: value})


def test_the_launch_builds_the_router_the_checkpoint_has():
    from tests.test_megatron_moe_args import _launch
    f = _launch("DeepSeek-V2-Lite", "h100x32", pp=4, ep=8, layers=[6, 7, 7, 7]).flags()
    assert "--moe-router-pre-softmax" in f and "--moe-router-topk-scaling-factor" not in f
    f = _launch("DeepSeek-V3", "h100x1024", tp=2, pp=16, ep=64, layers=[3] + [4] * 14 + [2], gbs=8192).flags()
    assert f["--moe-router-topk-scaling-factor"] == "2.5" and "--moe-router-pre-softmax" not in f
    f = _launch("Qwen3-30B-A3B", "h100x64", ep=16).flags()
    assert "--moe-router-pre-softmax" not in f and "--moe-router-topk-scaling-factor" not in f


def test_the_router_probabilities_cost_nothing(cli, tmp_path):
    """Step time and memory are the same with and without the scaling and the pre-softmax."""
    plain = tmp_path / "v2-lite-plain-router.yaml"
    plain.write_text(yaml.safe_dump(load_model("deepseek-v2-lite").model_dump(
        exclude={"name", "moe_router_pre_softmax", "moe_router_topk_scaling_factor"}), sort_keys=False))
    runs = [cli("evaluate", "--model", m, "--cluster", "h100x8", "--tp", "1", "--pp", "1", "--ep", "8", "--json")
            for m in ("deepseek-v2-lite", str(plain))]
    assert [r.code for r in runs] == [0, 0], runs[1].err
    a, b = (json.loads(r.out) for r in runs)
    assert (a["step_time_s"], a["peak_memory_bytes"]) == (b["step_time_s"], b["peak_memory_bytes"])
