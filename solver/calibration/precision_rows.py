"""The precision settings of a published row (read by `rows.row_job` and `moe_rows.moe_row_job`): what its
source's precision config and its recipe block state about FP8 / NVFP4 primary weights and layers kept in
BF16 (formulation/precision.py prices them), for dense and MoE rows alike."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import SimpleNamespace

from ..specs.fp8_attention import fp8_attention_problem
from ..specs.job import Precision
from ..specs.module_precision import rules_from_te_config
from .eras import NEMO_DOCS, recipe_block

# The FP8 recipe of a row whose page names none (the 25.09 tables): Megatron-Bridge's 25.09 performance
# scripts (scripts/performance/configs/*/*.yaml at v0.1.0rc3, `perf_matrix`) list fp8_cs -- per-tensor
# current scaling -- beside fp8_mx (Blackwell) and fp8_ss (blockwise, H100), the two the page prints in
# parentheses ("different quantization granularity"); the Qwen3-30B-A3B H100 row's micro-batch 2 is the
# fp8_cs entry's (bf16's is 1)
UNNAMED_FP8: dict[str, Precision] = {"mbridge_perf": "fp8-tensorwise"}
# Words of a precision text that name BF16 training (or nothing): read as bf16 without a note
BF16_WORDS = ("bf16", "bfloat16", "16-bit", "not stated", "mixed precision")


def precision_of(text) -> Precision:
    """The recipe of a row's precision text: mxfp8, fp8-blockwise, fp8-tensorwise ('fp8-cs': per-tensor
    current scaling), fp8 (per-tensor delayed scaling, also when the recipe is not stated: Megatron's
    default), fp16 ('fp16 mixed precision': Megatron's fp16 optimizer), nvfp4 (Transformer Engine's
    NVFP4BlockScaling, also a bare 'fp4': the one FP4 training recipe it has) or bf16 (anything else, including
    '16-bit' and 'not stated': the same tensor-core peak). MXFP4 rows are skipped before (`rows.skip_reason`)."""
    t = str(text).lower()
    recipes: tuple[tuple[tuple[str, ...], Precision], ...] = (
        (("nvfp4",), "nvfp4"), (("mxfp8",), "mxfp8"), (("blockwise", "block-wise", "subchannel"), "fp8-blockwise"),
        (("fp8-cs", "current scaling", "current-scaling", "tensorwise"), "fp8-tensorwise"))
    for keys, recipe in recipes:
        if any(k in t for k in keys):
            return recipe
    if "fp4" in t and "mxfp4" not in t:
        return "nvfp4"
    return "fp8" if "fp8" in t else "fp16" if "fp16" in t else "bf16"


def row_precision(text, assumed: list, source: str = "") -> Precision:
    """`precision_of` for a row of `source`, with what it assumes said: an FP8 recipe the page leaves unnamed is its
    source's (`UNNAMED_FP8`) or Megatron's default, delayed scaling; a text naming no recipe is costed as bf16."""
    out, t = precision_of(text), str(text).lower()
    if out == "fp8" and "not stated" in t and source in UNNAMED_FP8:
        assumed.append(f"{text}: the source's unnamed FP8 recipe is {UNNAMED_FP8[source]} (its perf matrix)")
        return UNNAMED_FP8[source]
    if out == "fp8" and "not stated" in t:
        assumed.append("FP8 recipe not stated: per-tensor delayed scaling (Megatron's default)")
    if out == "nvfp4" and "nvfp4" not in t:
        assumed.append(f"precision {text!r}: NVFP4, Transformer Engine's FP4 training recipe")
    if out == "bf16" and text is not None and not any(w in t for w in BF16_WORDS):
        assumed.append(f"precision {text!r} names no recipe the formulation prices: costed as bf16")
    return out


# Megatron-Bridge's FP8 precision configs keep FP8 primary weights (src/megatron/bridge/training/
# mixed_precision.py, v0.1.0rc3 to v0.6.0: bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_current_
# scaling_mixed and bf16_with_mxfp8_mixed set `fp8_param_gather = True`; the blockwise recipe,
# bf16_with_fp8_subchannel_scaling_mixed, sets False), which its performance scripts use unchanged for
# every model, dense or MoE (scripts/performance/utils/precision.py get_precision_config; perf_recipes/
# _common.py _perf_precision, which changes only grad_reduce_in_fp32 and, for fp8_cs,
# first_last_layers_bf16). NeMo 2.0's performance scripts, whose tables the nemo_docs sources are, do the
# same for delayed and current scaling (scripts/llm/performance/*.py at v2.2.0: bf16_with_fp8_mixed, whose
# fp8_params = True sets the plugin's fp8_param_gather; scripts/performance/utils.py at v2.3.0 and
# helpers.py at v2.4.0: bf16_with_fp8_mixed / bf16_with_fp8_current_scaling_mixed, fp8_param_gather = True,
# turned off under Megatron FSDP: "Currently FSDP does not support FP8 param gather"); their MXFP8 config
# changed between releases (False at v2.3.0, True at v2.4.0) and no nemo_docs row runs it.
FP8_PARAM_GATHER = {"mbridge_perf": ("fp8", "fp8-tensorwise", "mxfp8"), **{src: ("fp8", "fp8-tensorwise") for src in NEMO_DOCS}}
# (model key prefix, precision) whose Megatron-Bridge scripts turn the primary-weight gather of the precision config
# off again, with the word the row's notes must hold for the scripts' condition (None: always):
# - Kimi K2, MXFP8 on Muon: `set_kimi_k2_common_configs` sets `fp8_param_gather = False` when the optimizer is
#   dist_muon ("WAR: MXFP8's fp8_param_gather ... incompatible with Muon's LayerWiseDistributedOptimizer";
#   scripts/performance/configs/kimi/kimi_llm_pretrain.py at v0.4.2 and v0.5.0, whose GPU configs default to
#   `optimizer_type: str = "muon"`; the page's note says Muon);
# - Nemotron 3 Super, NVFP4: `fp4_param_gather = False  # Disabled until MCore PR 4358 lands`
#   (nemotron_3_llm_pretrain.py `set_nemotron_3_super_common_configs` at v0.4.2 and v0.5.0, called by every GPU's
#   config; perf_recipes/nemotronh/common.py `_nemotron_3_super_nvfp4_precision` at v0.6.0).
PARAM_GATHER_OFF = {("kimi-k2", "mxfp8"): "muon", ("nemotron3-super", "nvfp4"): None}


def gather_turned_off(raw: dict, precision: str, model_key: str) -> str | None:
    """Where the row's source scripts turn its model's primary-weight gather off (`PARAM_GATHER_OFF`): the
    condition they need, as said (" with Muon", or "" for none); None where they keep it."""
    notes = " ".join(str(note) for note in raw.get("notes") or ()).lower()
    for (key, prec), word in PARAM_GATHER_OFF.items():
        if raw.get("source") == "mbridge_perf" and model_key.startswith(key) and precision == prec:
            if word is None or word in notes:
                return f" with {word.capitalize()}" if word else ""
    return None


def precision_settings(raw: dict, precision: str, assumed: list, model_key: str = "",
                       megatron_fsdp: bool = False, recipe: dict | None = None) -> dict:
    """The job settings of a row's precision config: its primary-weight settings (`weight_settings`) and FP8
    attention where its recipe sets it (`fp8_attention_settings`); `recipe`: the row's recipe block as its reader
    resolved it (default: as the row states it). {} for another row."""
    recipe = recipe_block(raw) if recipe is None else recipe
    return {**weight_settings(raw, precision, assumed, model_key, megatron_fsdp, recipe),
            **fp8_attention_settings(recipe, assumed)}


def weight_settings(raw: dict, precision: str, assumed: list, model_key: str, megatron_fsdp: bool,
                    recipe: dict) -> dict:
    """FP8 primary weights where the source's config keeps them (`FP8_PARAM_GATHER`; not in a NeMo run under
    Megatron-FSDP, `eras.fsdp_of`, which its scripts turn them off for, nor where the model's scripts do,
    `PARAM_GATHER_OFF`), or the row's NVFP4 settings (`nvfp4_settings`)."""
    source = raw.get("source", "")
    if precision in FP8_PARAM_GATHER.get(source, ()) and not (megatron_fsdp and source in NEMO_DOCS):
        condition = gather_turned_off(raw, precision, model_key)
        if condition is not None:
            assumed.append(f"FP8 weights not gathered: the source's scripts turn fp8_param_gather off for "
                           f"{model_key}{condition} under {precision}")
            return {"fp8_param_gather": False}
        assumed.append("FP8 weights kept and gathered as the source's precision config sets them (fp8_param_gather)")
        return {"fp8_param_gather": True}
    return nvfp4_settings(raw, assumed, model_key, recipe)


def fp8_attention_settings(recipe: dict, assumed: list) -> dict:
    """FP8 attention where the row's recipe sets it (Megatron-Bridge's `cfg.mixed_precision.
    fp8_dot_product_attention`), else off, Megatron-Core's default; a value the data leaves open (a helper's
    argument) stays off and is said. `fp8_attention_guard` then checks that the row's job can run it."""
    value = recipe.get("fp8_dot_product_attention")
    if value is True:
        return {"fp8_dot_product_attention": True}
    if value is not None and value is not False:
        assumed.append(f"FP8 attention {value!r}: not settled by the data, off (Megatron-Core's default)")
    return {}


def fp8_attention_guard(settings: dict, assumed: list, **job) -> None:
    """A recipe's FP8 attention where Transformer Engine d0067d0 does not run it for the row's precision, GPU or
    model (`specs.fp8_attention`; `job`: the JobSpec fields that rule reads): the row ran, on a release this
    rule does not describe, so it is priced in BF16 and said, rather than refused."""
    if not settings.get("fp8_dot_product_attention"):
        return
    defaults = dict(framework="megatron", flash_attention=True, attention_kernel="cudnn")
    problem = fp8_attention_problem(SimpleNamespace(**{**defaults, **job}, fp8_dot_product_attention=True))
    if problem:
        settings.pop("fp8_dot_product_attention")
        assumed.append(f"the recipe's FP8 attention priced in BF16: {problem.split('; drop')[0]}")


# Megatron-Bridge's NVFP4 precision config, which its performance scripts use for every NVFP4 run
# (scripts/performance/utils/precision.py get_precision_config("nvfp4") at v0.4.2 and v0.5.0,
# perf_recipes/_common.py _perf_precision at v0.6.0): bf16_with_nvfp4_mixed in
# src/megatron/bridge/training/mixed_precision.py sets fp4_param_gather = True and leaves
# first_last_layers_bf16 False (MixedPrecisionConfig's default, num_layers_at_start/end_in_bf16 = 0);
# a model's own config may keep layers in BF16 (nemotron_3_super_bf16_with_nvfp4_mixed: the last 14)
NVFP4_SOURCES = {"mbridge_perf": dict(fp8_param_gather=True, bf16_layers_at_start=0, bf16_layers_at_end=0)}


def nvfp4_settings(raw: dict, assumed: list, model_key: str, recipe: dict) -> dict:
    """The job settings of an NVFP4 row: its source's precision config (`NVFP4_SOURCES`; the weight gather off where
    the model's scripts turn it off, `PARAM_GATHER_OFF`), the BF16 layers its recipe block states
    (`num_layers_at_start_in_bf16` / `num_layers_at_end_in_bf16` with `first_last_layers_bf16`) or its model's
    config states (`NVFP4_MODEL_BF16_LAYERS`); {} for another row."""
    if "nvfp4" not in str(raw.get("precision", "")).lower():  # rows.precision_of's nvfp4
        return {}
    out = dict(NVFP4_SOURCES.get(raw.get("source", ""), {}))
    if out and gather_turned_off(raw, "nvfp4", model_key) is not None:
        out["fp8_param_gather"] = False
    model_layers = next((v for k, v in NVFP4_MODEL_BF16_LAYERS.items() if model_key.startswith(k)), None)
    if recipe.get("first_last_layers_bf16") is not None:
        on = bool(recipe["first_last_layers_bf16"])
        out.update(bf16_layers_at_start=int(recipe.get("num_layers_at_start_in_bf16") or 0) if on else 0,
                   bf16_layers_at_end=int(recipe.get("num_layers_at_end_in_bf16") or 0) if on else 0)
    elif model_layers is not None:
        out.update(bf16_layers_at_start=model_layers[0], bf16_layers_at_end=model_layers[1])
    if out:
        assumed.append(f"NVFP4 as the source's precision config runs it: NVFP4 weights gathered "
                       f"({out.get('fp8_param_gather', False)}), layers kept in BF16 at the start / end: "
                       f"{out.get('bf16_layers_at_start', 0)} / {out.get('bf16_layers_at_end', 0)}")
    return {**out, **module_precision_settings(raw, assumed, model_key)}


# (source, model key prefix) whose NVFP4 recipes load a per-module precision config (Megatron-Core's
# `quant_recipe`), and the file, shipped byte for byte beside this module: Megatron-Bridge's Nemotron 3 Super
# NVFP4 recipes, `set_nemotron_3_super_common_configs` in scripts/performance/configs/nemotronh/
# nemotron_3_llm_pretrain.py at v0.4.2 and v0.5.0 and the four `nemotron_3_super_pretrain_64gpu_*_nvfp4_config`
# in src/megatron/bridge/perf_recipes/nemotronh/ at v0.6.0, each `load_quantization_recipe(... "te_quant.cfg")`;
# the file is the same blob (646ff9e) at the three tags.
NVFP4_TE_CONFIG = {("mbridge_perf", "nemotron3-super"): "mbridge_nemotronh_te_quant.cfg"}


@cache
def te_config_rules(name: str) -> tuple[tuple[str, str], ...]:
    """The (glob, precision) rules of a shipped TE precision config (`NVFP4_TE_CONFIG`)."""
    return rules_from_te_config(Path(__file__).with_name(name).read_text())


def module_precision_settings(raw: dict, assumed: list, model_key: str) -> dict:
    """The per-module precision (`JobSpec.module_precision`) an NVFP4 row's recipe loads (`NVFP4_TE_CONFIG`); {}
    for another row."""
    name = next((v for (src, key), v in NVFP4_TE_CONFIG.items()
                 if raw.get("source") == src and model_key.startswith(key)), None)
    if name is None:
        return {}
    rules = te_config_rules(name)
    assumed.append(f"per-module precision as the recipe loads it (Megatron-Bridge te_quant.cfg): "
                   f"{', '.join(f'{glob}={prec}' for glob, prec in rules)}")
    return {"module_precision": rules}


# (start, end) layers a model's own NVFP4 config keeps in BF16: Megatron-Bridge
# nemotron_3_super_bf16_with_nvfp4_mixed (src/megatron/bridge/training/mixed_precision.py at v0.6.0:
# first_last_layers_bf16 = True, num_layers_at_end_in_bf16 = 14)
NVFP4_MODEL_BF16_LAYERS = {"nemotron3-super": (0, 14)}
