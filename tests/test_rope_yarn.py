"""YaRN RoPE as a checkpoint states it (specs/rope.py): read from real config.json files, refused where malformed,
and launched with the Megatron-LM flags that build it (render/megatron_rope.py), on GPT layers (GPT-OSS), under
multi-latent attention (DeepSeek) and on DeepSeek-V4's compressed layers; the cost is the same with or without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from solveplan.catalog import load_model
from solveplan.errors import InputError
from solveplan.render.megatron import model_flags
from solveplan.specs import ModelSpec
from solveplan.specs.hf import model_from_hf_config as spec_from_hf

HF = Path(__file__).parent / "data" / "hf"


def _hf(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


def _flags(model) -> dict:
    args, _ = model_flags(model, 4096)
    return {a: (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True)
            for i, a in enumerate(args) if a.startswith("--")}


def test_configs_state_their_yarn():
    """The fixtures' rope_scaling, field by field (DeepSeek-V3: mscale and mscale_all_dim 1; V2-Lite: 0.707 both;
    gpt-oss: truncate false and neither mscale, the 0.1 ln s + 1 scale); a config without YaRN keeps none."""
    v3, lite, oss = (load_model(str(HF / n / "config.json")) for n in ("DeepSeek-V3", "DeepSeek-V2-Lite", "gpt-oss-120b"))
    assert v3.rope_yarn.model_dump() == dict(factor=40.0, original_max_position_embeddings=4096, beta_fast=32.0,
                                             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, truncate=True)
    assert (lite.rope_yarn.mscale, lite.rope_yarn.mscale_all_dim) == (0.707, 0.707)
    assert (oss.rope_yarn.factor, oss.rope_yarn.truncate, oss.rope_yarn.mscale, oss.rope_yarn.mscale_all_dim) == (
        32.0, False, 1.0, 0.0)
    assert load_model(str(HF / "Qwen3-30B-A3B" / "config.json")).rope_yarn is None
    assert load_model("llama3.1-8b").rope_yarn is None


def test_only_one_mscale_is_the_default_scale():
    """transformers uses mscale / mscale_all_dim only when both are non-zero: one alone is the 0.1 ln s + 1 scale."""
    data = _hf("DeepSeek-V3")
    data["rope_scaling"] = {**data["rope_scaling"], "mscale_all_dim": 0}
    y = spec_from_hf(data, "x").rope_yarn
    assert (y.mscale, y.mscale_all_dim) == (1.0, 0.0)


@pytest.mark.parametrize("bad, field", [({"factor": "40"}, "factor"), ({"factor": None}, "factor"),
                                        ({"truncate": "no"}, "truncate"), ({"beta_fast": -1}, "beta_fast")])
def test_malformed_yarn_is_refused_naming_the_key(bad, field):
    data = _hf("gpt-oss-20b")
    data["rope_scaling"] = {**data["rope_scaling"], **bad}
    with pytest.raises(InputError, match=field):
        spec_from_hf(data, "x")


def test_yarn_needs_rope_and_is_not_llama3_scaling():
    base = load_model("gpt-oss-20b").model_dump()
    with pytest.raises(ValueError, match="rope_yarn applies to rotary embeddings only"):
        ModelSpec(**{**base, "position_embedding": "learned_absolute", "rotary_base": None, "rotary_percent": None})
    with pytest.raises(ValueError, match="give one"):
        ModelSpec(**{**base, "rope_scaling_factor": 8.0})


def test_gpt_layers_launch_yarn_with_every_knob():
    """gpt-oss: GPTModel's YarnRotaryEmbedding through --position-embedding-type yarn and its config.yarn_* flags,
    the correction range not rounded (truncate false)."""
    f = _flags(load_model("gpt-oss-120b"))
    assert f["--position-embedding-type"] == "yarn" and f["--rotary-base"] == "150000"
    assert (f["--rotary-scaling-factor"], f["--yarn-original-max-position-embeddings"], f["--yarn-beta-fast"],
            f["--yarn-beta-slow"], f["--mscale"], f["--mscale-all-dim"]) == ("32", "4096", "32", "1", "1", "0")
    assert "--no-yarn-correction-range-round-to-int" in f and "--rope-type" not in f


def test_plain_rope_model_launches_no_yarn_flag():
    f = _flags(load_model("llama3.1-8b"))
    assert f["--position-embedding-type"] == "rope" and not any("yarn" in k or "mscale" in k for k in f)


def test_mla_launches_its_yarn_and_says_what_the_command_line_cannot_set():
    """Multi-latent attention keeps --position-embedding-type rope and takes --rope-type yarn with the factor and
    both scales; Megatron-LM main has no flag for MLA's beta_fast, so a model whose beta_fast is not 32 is said."""
    from tests.test_megatron_moe_args import _launch
    lite = load_model(str(HF / "DeepSeek-V2-Lite" / "config.json"))
    ma = _launch(lite, "h100x32", ep=8)
    f = ma.flags()
    assert f["--position-embedding-type"] == "rope" and f["--rope-type"] == "yarn"
    assert (f["--rotary-scaling-factor"], f["--mscale"], f["--mscale-all-dim"]) == ("40", "0.707", "0.707")
    assert "--original-max-position-embeddings" not in f  # main has no flag: MLA's 4096 default is the model's
    assert not [n for n in ma.notes if "cannot set" in n]
    kimi = ModelSpec(**{**lite.model_dump(), "rope_yarn": {**lite.rope_yarn.model_dump(), "beta_fast": 1.0}})
    notes = _launch(kimi, "h100x32", ep=8).notes
    assert [n for n in notes if "cannot set multi-latent attention's YaRN beta_fast (the model's 1.0, built as 32" in n]


def test_deepseek_v4_compressed_layers_get_their_base_and_yarn():
    """DeepSeek-V4 (Megatron-LM dev): the compressed layers' theta (compress_rope_theta 160000) and their YaRN with
    the original context by dev's own flag; mscale 1 / 1 as Megatron-Bridge's deepseek_v4_bridge.py sets them."""
    from tests.test_megatron_moe_args import _launch
    m = load_model(str(HF / "DeepSeek-V4-Flash" / "config.json"))
    assert m.csa_compress_rotary_base == 160000.0 and m.rotary_base == 10000.0
    assert (m.rope_yarn.factor, m.rope_yarn.original_max_position_embeddings) == (16.0, 65536)
    assert (m.rope_yarn.mscale, m.rope_yarn.mscale_all_dim) == (1.0, 1.0)
    f = _launch(m, "gb200x128", ep=64).flags()
    assert (f["--csa-compress-rotary-base"], f["--rope-type"], f["--rotary-scaling-factor"],
            f["--original-max-position-embeddings"]) == ("160000", "yarn", "16", "65536")
    with pytest.raises(ValueError, match="csa_compress_rotary_base describe DeepSeek-V4"):
        ModelSpec(**{**load_model("deepseek-v3").model_dump(), "csa_compress_rotary_base": 40000.0})


def test_yarn_costs_nothing(cli, tmp_path):
    """The positions change no priced term: the same step time and memory with and without YaRN."""
    plain = tmp_path / "gpt-oss-20b-plain-rope.yaml"
    plain.write_text(yaml.safe_dump(load_model("gpt-oss-20b").model_dump(exclude={"name", "rope_yarn"})))
    runs = [cli("evaluate", "--model", m, "--cluster", "h100x8", "--tp", "1", "--pp", "1", "--ep", "8", "--json")
            for m in ("gpt-oss-20b", str(plain))]
    assert [r.code for r in runs] == [0, 0]
    a, b = (json.loads(r.out) for r in runs)
    assert (a["step_time_s"], a["peak_memory_bytes"]) == (b["step_time_s"], b["peak_memory_bytes"])


def _megatron_check():
    import importlib.util
    import sys
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(bench))
    spec = importlib.util.spec_from_file_location("megatron_args_bench", bench / "megatron_args.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_megatron_check_excuses_only_what_the_notes_say_the_command_line_cannot_set():
    """Kimi K2's YaRN beta_fast 1 is built at Megatron's 32 (no flag sets MLA's), said in the launch notes: the check
    reports it beside 'accepted'. A factor that differs, or any difference without that note, is not excused."""
    noted_diff = _megatron_check().noted_diff
    want = dict(factor=32.0, original_max_position_embeddings=4096.0, beta_fast=1.0, beta_slow=1.0, mscale=1.0,
                mscale_all_dim=1.0, truncate=True)
    note = ["Megatron-LM's command line cannot set multi-latent attention's YaRN beta_fast (the model's 1.0, ...)"]
    assert noted_diff({"rope_yarn": (want, {**want, "beta_fast": 32.0})}, note) == {
        "rope_yarn": {"beta_fast": (1.0, 32.0)}}
    assert noted_diff({"rope_yarn": (want, {**want, "beta_fast": 32.0})}, []) == {}
    assert noted_diff({"rope_yarn": (want, {**want, "beta_fast": 32.0, "factor": 40.0})}, note) == {}
    assert noted_diff({"rope_yarn": (want, None)}, note) == {}
    assert noted_diff({"moe_router_topk_scaling_factor": (2.5, None)}, note) == {}


def test_llama4_rotates_adjacent_pairs():
    """Llama 4's modelling code rotates the query and key as complex pairs (interleaved): read from its config,
    launched as --rotary-interleaved; refused beside multi-latent attention, as Megatron refuses it."""
    scout = load_model(str(HF / "Llama-4-Scout-17B-16E-Instruct" / "config.json"))
    assert scout.rotary_interleaved and "--rotary-interleaved" in _flags(scout)
    assert not load_model("llama3.1-8b").rotary_interleaved and "--rotary-interleaved" not in _flags(
        load_model("llama3.1-8b"))
    with pytest.raises(ValueError, match="rotary_interleaved applies to RoPE without multi-latent attention"):
        ModelSpec(**{**load_model("deepseek-v3").model_dump(), "rotary_interleaved": True})


def test_llama4_skips_rope_on_every_fourth_layer():
    """Llama4TextConfig's no_rope_layer_interval 4 (its default): --no-rope-freq 4 (Megatron skips RoPE on layers
    4, 8, ...); a no_rope_layers list of another shape, or an interval not dividing the layers, is refused."""
    scout = load_model(str(HF / "Llama-4-Scout-17B-16E-Instruct" / "config.json"))
    assert scout.no_rope_freq == 4 and _flags(scout)["--no-rope-freq"] == "4"
    data = _hf("Llama-4-Scout-17B-16E-Instruct")
    text = data["text_config"]
    ok = {**data, "text_config": {**text, "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)]}}
    assert spec_from_hf(ok, "x").no_rope_freq == 4
    for bad in ({"no_rope_layers": [1] * 47 + [0]}, {"no_rope_layer_interval": 5}):
        with pytest.raises(InputError, match="the layers without RoPE must be every n-th"):
            spec_from_hf({**data, "text_config": {**text, **bad}}, "x")
    with pytest.raises(ValueError, match="no_rope_freq \\(5\\) needs RoPE and must divide num_layers"):
        ModelSpec(**{**scout.model_dump(), "no_rope_freq": 5})


@pytest.mark.parametrize("name, said", [
    ("deepseek-v3", "RoPE theta 10000, YaRN x40 over 4096"),
    ("llama4-scout", "RoPE theta 500000, adjacent pairs rotated, none on every 4th layer, Llama 3 scaling x16"),
    ("deepseek-v4-flash", "RoPE theta 10000, compressed layers theta 160000 with YaRN x16 over 65536"),
    ("glm4.5", "RoPE theta 1000000 on 0.5 of each head"), ("gpt3-13b", "learned_absolute"),
])
def test_show_says_the_positions_the_launch_builds(cli, name, said):
    code, out, _ = cli("show", name)
    assert code == 0 and [line for line in out.splitlines() if "positions" in line and said in line]
