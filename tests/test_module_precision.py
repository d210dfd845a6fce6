"""Per-module precision (specs/module_precision.py, formulation/module_rates.py): Megatron-Core's TE precision
config read as Megatron reads it (Megatron-Bridge's own te_quant.cfg as the fixture), the roles it moves priced at
their precision, what cannot be priced refused in one line, and the Megatron launch that names the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solveplan.catalog import load_cluster, load_model
from solveplan.formulation.job import job_coefficients
from solveplan.formulation.pipeline import step_time_batch
from solveplan.formulation.splits import default_splits
from solveplan.space.shapes import Shapes
from solveplan.specs import JobSpec
from solveplan.specs.module_precision import role_precisions, rules_from_te_config, te_config_of_rules

TE_QUANT = Path(__file__).parent / "data" / "megatron_bridge" / "te_quant.cfg"
NEMOTRON_RULES = (("*.linear_qkv", "bf16"), ("*.linear_proj", "bf16"), ("*mlp.fc[12]_latent_proj", "bf16"),
                  ("mtp.*", "bf16"), ("*mixer.out_proj", "mxfp8"))
TE = "transformer_engine_config_type: TEQuantizationParams"


def _config(recipe: str, pattern: str, enabled: str = "true") -> str:
    return (f"configs:\n  c:\n    {TE}\n    training_recipe: {recipe}\n"
            f"matchers:\n  m:\n    config: c\n    type: glob\n    pattern: '{pattern}'\n    enabled: {enabled}\n")


def _job(model="nemotron3-super", cluster="gb200x64", precision="nvfp4", rules=(), **kw):
    m = load_model(model)
    return JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=kw.pop("global_batch_size", 512),
                   seq_length=kw.pop("seq_length", 8192), precision=precision, module_precision=rules, **kw)


def _step_and_memory(job, **knobs):
    """(step s, peak memory bytes) of the job's one shape `knobs` (Shapes.single), balanced split."""
    one = Shapes.single(**knobs)
    step, memory = step_time_batch(job_coefficients(job, one), default_splits(job.model, one))[:2]
    return float(step[0]), float(memory[0])


def test_megatron_bridge_te_quant_cfg_reads_as_megatron_orders_it():
    """The real file: its five enabled matchers in file order, each with its config's precision."""
    assert rules_from_te_config(TE_QUANT.read_text()) == NEMOTRON_RULES
    # and the config this project writes for the launch reads back to the same rules
    assert rules_from_te_config(json.dumps(te_config_of_rules(NEMOTRON_RULES))) == NEMOTRON_RULES


@pytest.mark.parametrize("text, message", [
    (_config("{fp8_quantization_recipe: delayed}", "*"), "delayed"),
    (_config("{fp8_quantization_recipe: mxfp8, fp4_quantization_recipe: nvfp4}", "*"), "mutually exclusive"),
    (_config("{fp8_param: true, fp8_quantization_recipe: mxfp8}", "*"), "fp8_param"),
    (_config("{fp8_quantization_recipe: mxfp8, colour: red}", "*"), "colour"),
    ("configs: {}\nmatchers: {m: {config: x, type: glob, pattern: '*', enabled: true}}\n", "configs does not hold"),
    ("configs: {}\nmatchers: {m: {config: x, type: regex, pattern: '*', enabled: true}}\n", "type glob"),
    ("[1, 2]", "'configs' mapping"),
])
def test_what_megatron_refuses_or_is_not_priced_is_one_line(text, message):
    with pytest.raises(ValueError, match=message):
        rules_from_te_config(text)


def test_a_matcher_not_enabled_is_skipped():
    """RecipeConfig._build_matchers: `enabled` defaults to false."""
    assert rules_from_te_config(_config("{}", "*.linear_qkv", enabled="false")) == ()


def test_nemotron_3_super_roles():
    roles = role_precisions(NEMOTRON_RULES, load_model("nemotron3-super"), "nvfp4")
    assert roles == {"attention": "bf16", "experts": "nvfp4", "shared_experts": "nvfp4", "latent_proj": "bf16",
                     "mamba_in_proj": "nvfp4", "mamba_out_proj": "mxfp8", "mtp": "bf16"}


@pytest.mark.parametrize("rules, message", [
    ((("*layers.0.*", "bf16"),), "different layers or modules"),  # a layer number changes meaning with pp
    ((("*.linear_qkv", "bf16"),), "different layers or modules"),  # attention's projection left quantised
    ((("*experts*", "bf16"),), "moves the experts modules"),  # not priced per module
])
def test_rules_the_formulation_cannot_price_are_refused(rules, message):
    with pytest.raises(ValueError, match=message):
        _job(model="qwen3-30b-a3b", cluster="b200x16", precision="mxfp8", rules=rules)


def test_precision_and_gpu_checks():
    with pytest.raises(ValueError, match="precision bf16 under framework megatron has none to override"):
        _job(model="llama3.1-8b", cluster="h100x8", precision="bf16", rules=(("*", "bf16"),))
    with pytest.raises(ValueError, match="module_precision: precision mxfp8 needs"):
        _job(model="llama3.1-8b", cluster="h100x8", precision="fp8-tensorwise", rules=(("*", "mxfp8"),))


def test_moved_roles_are_priced_and_an_unmoved_rule_changes_nothing():
    """te_quant.cfg's BF16 attention, LatentMoE and MTP and MXFP8 out_proj cost more time and keep more activations
    than all-NVFP4; a rule that names the job's own precision prices exactly as no rule."""
    knobs = dict(tp=2, pp=1, dp=32, ep=64, micro_batch_size=1, sequence_parallel=True)
    base_s, base_bytes = _step_and_memory(_job(), **knobs)
    moved_s, moved_bytes = _step_and_memory(_job(rules=NEMOTRON_RULES), **knobs)
    same_s, same_bytes = _step_and_memory(_job(rules=(("*.linear_qkv", "nvfp4"),)), **knobs)
    assert moved_s > base_s * 1.01 and moved_bytes > base_bytes
    assert (same_s, same_bytes) == (base_s, base_bytes)


def test_dense_attention_in_bf16_sits_between_the_two_recipes():
    knobs = dict(tp=1, pp=1, dp=8, micro_batch_size=1)
    kw = dict(model="llama3.1-8b", cluster="b200x8", global_batch_size=64, seq_length=8192)
    mx, _ = _step_and_memory(_job(precision="mxfp8", **kw), **knobs)
    attn, _ = _step_and_memory(_job(precision="mxfp8", rules=(("*self_attention.*", "bf16"),), **kw), **knobs)
    bf16, _ = _step_and_memory(_job(precision="bf16", **kw), **knobs)
    assert mx < attn < bf16


def test_cli_reads_the_file_and_the_launch_names_it(tmp_path, cli):
    args = ["optimize", "--model", "nemotron3-super", "--cluster", "gb200x64", "--precision", "nvfp4",
            "--global-batch-size", "512", "--seq-len", "8192", "--tp", "2", "--pp", "1", "--ep", "64", "--etp", "1",
            "--micro-batch-size", "1", "--te-precision-config", str(TE_QUANT), "--json"]
    out = cli(*args)
    assert out.code == 0, out.err
    plan = json.loads(out.out)
    assert plan["settings"]["module_precision"] == [list(r) for r in NEMOTRON_RULES]
    assert "--te-precision-config-file" in plan["megatron_args"]
    missing = cli(*args[:-3], "--te-precision-config", str(tmp_path / "none.cfg"))
    assert missing.code == 2 and "--te-precision-config" in missing.err and "Traceback" not in missing.err


def test_a_job_mapping_gives_the_rules_as_lists():
    """A job file or HTTP request (never a file name) gives [glob, precision] pairs; a malformed pair is one line."""
    from solveplan.catalog import load_job
    from solveplan.errors import InputError
    base = {"model": "nemotron3-super", "cluster": "gb200x64", "precision": "nvfp4"}
    job = load_job({**base, "module_precision": [list(r) for r in NEMOTRON_RULES]}, field="")
    assert job.module_precision == NEMOTRON_RULES
    with pytest.raises(InputError, match="module_precision.0"):
        load_job({**base, "module_precision": [["*.linear_qkv"]]}, field="")
    with pytest.raises(InputError, match="cover the role's other modules"):
        load_job({**base, "module_precision": [["*.linear_qkv", "bf16"], ["*.linear_proj", "bf16"]]}, field="")
