"""torchtitan job configs of mixture-of-experts plans: the model family, flavor and config
function torchtitan builds (torchtitan 0.3.0, models/{qwen3,deepseek_v3,gpt_oss}), 
`expert_parallel_degree` under ParallelDims' rule (it divides dp_shard x cp x tp), and one line
where torchtitan cannot run the model or the plan's EP/ETP form; for 0.3 (config module) and 0.2
(TOML)."""

from __future__ import annotations

import tomllib

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.torchtitan import render_torchtitan, torchtitan_config
from solveplan.specs import JobSpec

_Par = ParallelConfig


def _tt(name, cluster, *, tp=1, pp=1, cp=1, ep=1, etp=1, zero=1):
    m, c = load_model(f"tests/data/hf/{name}/config.json"), load_cluster(cluster)
    job = JobSpec(model=m, cluster=c, global_batch_size=256, seq_length=4096)
    dp = c.num_gpus // (tp * pp * cp)
    par = _Par(tp=tp, pp=pp, dp=dp, cp=cp, vp=1, micro_batch_size=1, num_microbatches=256 // dp,
               recompute="selective", sequence_parallel=tp > 1, zero=zero, ep=ep, etp=etp)
    plan = make_plan(job, par, [m.num_layers // pp + (1 if i < m.num_layers % pp else 0) for i in range(pp)])
    return job, plan


@pytest.mark.parametrize("name,family,flavor", [
    ("Qwen3-30B-A3B", "qwen3", "30B-A3B"), ("Qwen3-235B-A22B", "qwen3", "235B-A22B"),
    ("DeepSeek-V3", "deepseek_v3", "671B"), ("DeepSeek-V2-Lite", "deepseek_v3", "16B"),
    ("gpt-oss-20b", "gpt_oss", "20b"), ("gpt-oss-120b", "gpt_oss", "120b"),
])
def test_supported_models_get_family_flavor_and_ep(name, family, flavor):
    job, plan = _tt(name, "h100x64", ep=8)
    sections, notes = torchtitan_config(job, plan)  # 0.3: a config module on the family's own config
    assert sections["base"]["module"] == family and sections["base"]["flavor"] == flavor
    assert sections["base"]["config"].startswith(family)
    assert sections["parallelism"]["expert_parallel_degree"] == 8
    assert not [n for n in notes if "expert" in n or "flavor" in n or "llama3_8b" in n]
    text = render_torchtitan(job, plan)
    assert f"from torchtitan.models.{family} import model_registry" in text
    assert f"config.model_spec = model_registry({flavor!r})" in text
    assert "config.parallelism.expert_parallel_degree = 8" in text and "--parallelism.expert_parallel_degree 8" in text
    sections2, _ = torchtitan_config(job, plan, "0.2")
    assert sections2["model"] == {"name": family, "flavor": flavor}
    parsed = tomllib.loads("\n".join(l for l in render_torchtitan(job, plan, "0.2").splitlines()
                                      if not l.startswith("#")))
    assert parsed["parallelism"]["expert_parallel_degree"] == 8


@pytest.mark.parametrize("name", ["Mixtral-8x7B-v0.1", "Llama-4-Scout-17B-16E-Instruct", "Qwen1.5-MoE-A2.7B",
                                  "deepseek-moe-16b", "DeepSeek-V4-Flash"])  # V4: not deepseek_v3's decoder
def test_unsupported_models_are_one_line(name):
    job, plan = _tt(name, "h100x64", ep=8)
    sections, notes = torchtitan_config(job, plan)
    assert "expert_parallel_degree" not in sections["parallelism"]
    said = [n for n in notes if "torchtitan has no mixture-of-experts model" in n]
    assert len(said) == 1 and "\n" not in said[0]


def test_etp_with_ep_is_not_torchtitans_form():
    job, plan = _tt("Qwen3-30B-A3B", "h100x64", tp=2, ep=8, etp=2)
    sections, notes = torchtitan_config(job, plan)
    assert "expert_parallel_degree" not in sections["parallelism"] and any("etp=2" in n for n in notes)
    # without EP torchtitan TP-shards the experts: etp = tp is its form, etp = 1 is not
    ok = torchtitan_config(*_tt("Qwen3-30B-A3B", "h100x64", tp=2, ep=1, etp=2))
    assert ok[0]["parallelism"]["expert_parallel_degree"] == 1
    bad = torchtitan_config(*_tt("Qwen3-30B-A3B", "h100x64", tp=2, ep=1, etp=1))
    assert any("etp=1 with tp=2" in n for n in bad[1])


def test_ep_must_divide_the_dense_region():
    """ParallelDims._validate: expert_parallel_degree divides dp_shard * cp * tp; DDP (zero 0)
    replicates, so dp_shard is 1 there."""
    sections, notes = torchtitan_config(*_tt("Qwen3-30B-A3B", "h100x64", pp=8, ep=8, zero=0))
    assert "expert_parallel_degree" not in sections["parallelism"] and any("divide" in n for n in notes)
    sections, _ = torchtitan_config(*_tt("Qwen3-30B-A3B", "h100x64", pp=8, ep=8, zero=1))
    assert sections["parallelism"]["expert_parallel_degree"] == 8


def test_an_unflavoured_size_is_said():
    m = load_model("tests/data/hf/Qwen3-30B-A3B/config.json").model_copy(update={"num_layers": 24})
    job = JobSpec(model=m, cluster=load_cluster("h100x64"), global_batch_size=256, seq_length=4096)
    par = _Par(tp=1, pp=1, dp=64, cp=1, vp=1, micro_batch_size=1, num_microbatches=4, recompute="selective",
               sequence_parallel=False, zero=1, ep=8, etp=1)
    sections, notes = torchtitan_config(job, make_plan(job, par, [24]), "0.2")
    assert sections["model"] == {"name": "qwen3"} and any("no flavor" in n for n in notes)
    assert sections["parallelism"]["expert_parallel_degree"] == 8


def test_flex_and_overlap_are_said_not_set():
    m, c = load_model("tests/data/hf/Qwen3-30B-A3B/config.json"), load_cluster("h100x64")
    job = JobSpec(model=m, cluster=c, global_batch_size=256, seq_length=4096, moe_token_dispatcher="flex",
                  moe_a2a_overlap=True)
    par = _Par(tp=1, pp=1, dp=64, cp=1, vp=1, micro_batch_size=1, num_microbatches=4, recompute="selective",
               sequence_parallel=False, zero=1, ep=8, etp=1)
    sections, notes = torchtitan_config(job, make_plan(job, par, [48]))
    assert sections["parallelism"]["expert_parallel_degree"] == 8
    assert any("moe_comm_backend" in n for n in notes) and any("overlap" in n for n in notes)


@pytest.mark.parametrize("name,ep,pp", [("Qwen3-30B-A3B", 8, 1), ("DeepSeek-V2-Lite", 8, 3), ("gpt-oss-20b", 16, 1)])
def test_torchtitan_03_loads_the_moe_plan(name, ep, pp, tmp_path, monkeypatch):
    """torchtitan 0.3.0's ConfigManager loads the config module and the flags: the family's
    config, the flavor's model_spec (its experts), expert_parallel_degree (skipped without
    torchtitan 0.3, as tests/test_torchtitan_load.py)."""
    import importlib
    import sys

    from test_torchtitan_load import _torchtitan

    from solveplan.render.torchtitan import MODULE_NAME, torchtitan_flags

    ConfigManager = _torchtitan()
    job, plan = _tt(name, "h100x64", pp=pp, ep=ep)
    flags = torchtitan_flags(job, plan)
    stock = ConfigManager().parse_args(flags)
    assert stock.parallelism.expert_parallel_degree == ep and stock.parallelism.pipeline_parallel_degree == pp
    (tmp_path / f"{MODULE_NAME}.py").write_text(render_torchtitan(job, plan))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
    importlib.invalidate_caches()
    cfg = ConfigManager().parse_args(["--module", MODULE_NAME, "--config", MODULE_NAME])
    assert cfg.parallelism.expert_parallel_degree == ep
    assert cfg.model_spec.flavor == torchtitan_config(job, plan)[0]["base"]["flavor"]
    layers = cfg.model_spec.model.layers  # the flavor's decoder: its routed experts and MoE layers
    assert {layer.moe.num_experts for layer in layers if layer.moe is not None} == {job.model.num_experts}
    assert [layer.moe is not None for layer in layers] == list(job.model.moe_layer_mask)
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
