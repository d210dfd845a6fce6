"""Per-module precision under a quantised recipe: Megatron-Core's Transformer Engine precision config
(Megatron-LM `--te-precision-config-file`; megatron/core/quantization/quant_config.py `RecipeConfig`,
megatron/core/extensions/transformer_engine.py `TEQuantizationParams` / `TEQuantizationRecipe`, and
megatron/core/extensions/TransformerEngineMixedPrecision.md at d98e8a6).

A job's `module_precision` is that config's ordered matchers as (glob, precision) rules: each TE linear
module is matched by its module path (`decoder.layers.3.self_attention.linear_qkv`; fnmatch, bash-style)
and the first rule that matches chooses its precision; a module no rule matches keeps the job's recipe.
Megatron-Bridge's Nemotron 3 Super NVFP4 recipes load such a file (perf_recipes/nemotronh/te_quant.cfg at
v0.4.2 ... v0.6.0: attention's linear_qkv / linear_proj, LatentMoE's projections and the MTP block in
BF16, the Mamba out_proj in MXFP8).

The formulation prices a precision per role -- the attention block's linears, a dense MLP's, LatentMoE's two
projections, a Mamba mixer's in_proj and out_proj, the MTP block -- so a rule set must give every module of
a role one precision in every layer (a pattern on a layer number, or one that splits a role, is refused:
Megatron names layers by their index inside a pipeline stage, so such a pattern changes meaning with the
split). The routed and shared experts' and Gated DeltaNet's linears are not priced per module: a rule that
moves them off the job's recipe is refused in one line. Megatron's defaults kept: an override applies to
modules the recipe quantises (`override_quantized_autocast` true); layers kept in BF16
(`--first-last-layers-bf16`) stay BF16 (`override_nonquantized_autocast` false)."""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache

import yaml

# TEQuantizationRecipe's recipe names -> the job's precision names (megatron/core/enums.py Fp8Recipe, Fp4Recipe)
TE_FP8_RECIPES = {"tensorwise": "fp8-tensorwise", "blockwise": "fp8-blockwise", "mxfp8": "mxfp8"}
TE_FP4_RECIPES = {"nvfp4": "nvfp4"}
TE_RECIPE_OF = {**{v: k for k, v in TE_FP8_RECIPES.items()}, **{v: k for k, v in TE_FP4_RECIPES.items()}}
TE_PRECISION_FILE = "te_precision.yaml"  # the file a launch of a job with module_precision names
OVERRIDE_PRECISIONS = ("bf16",) + tuple(TE_FP8_RECIPES.values()) + tuple(TE_FP4_RECIPES.values())
# TEQuantizationRecipe's fields (transformer_engine.py at d98e8a6) that do not change what is priced
NEUTRAL_RECIPE_FIELDS = {"fp8_format", "tp_only_amax_red", "override_quantized_autocast"}
RECIPE_FIELDS = NEUTRAL_RECIPE_FIELDS | {"fp8_quantization_recipe", "fp4_quantization_recipe", "custom_recipe_factory",
                                         "override_nonquantized_autocast", "fp8_param", "fp4_param"}

# Megatron-Core's module names per role, relative to a decoder layer (decoder.layers.<i>.)
ATTENTION = ("self_attention.linear_qkv", "self_attention.linear_proj")
MLA_ATTENTION = ("self_attention.linear_q_proj", "self_attention.linear_q_down_proj", "self_attention.linear_q_up_proj",
                 "self_attention.linear_kv_down_proj", "self_attention.linear_kv_up_proj", "self_attention.linear_proj")
ROLE_MODULES = {
    "mlp": ("mlp.linear_fc1", "mlp.linear_fc2"),
    "experts": ("mlp.experts.linear_fc1", "mlp.experts.linear_fc2"),
    "shared_experts": ("mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"),
    "latent_proj": ("mlp.fc1_latent_proj", "mlp.fc2_latent_proj"),
    "mamba_in_proj": ("mixer.in_proj",),
    "mamba_out_proj": ("mixer.out_proj",),
    "gdn": ("mixer.in_proj", "mixer.out_proj"),
}
PRICED_ROLES = ("attention", "mlp", "latent_proj", "mamba_in_proj", "mamba_out_proj", "mtp")
# the MTP block's modules (multi_token_prediction.py: eh_proj, and its layer's own linears)
MTP_MODULES = ("mtp.layers.{d}.eh_proj", "mtp.layers.{d}.transformer_layer.self_attention.linear_qkv",
               "mtp.layers.{d}.transformer_layer.mlp.linear_fc1", "mtp.layers.{d}.mtp_model_layer.layers.0.mixer.in_proj")


def precision_of_te_config(name: str, config) -> str:
    """The precision a TEQuantizationParams config trains at: an empty training_recipe is BF16, else its FP8 or
    FP4 recipe; what Megatron refuses, and what the formulation does not price, raise one line."""
    where = f"te precision config: configs.{name}"
    if not isinstance(config, dict) or config.get("transformer_engine_config_type") != "TEQuantizationParams":
        raise ValueError(f"{where}: transformer_engine_config_type must be TEQuantizationParams (Megatron-Core's only "
                         "type)")
    recipe = config.get("training_recipe")
    if not isinstance(recipe, dict):
        raise ValueError(f"{where}: training_recipe must be a mapping ({{}} for BF16)")
    unknown = sorted(set(recipe) - RECIPE_FIELDS)
    if unknown:
        raise ValueError(f"{where}.training_recipe: field {unknown[0]!r} is not a TEQuantizationRecipe field")
    if recipe.get("override_nonquantized_autocast") or recipe.get("fp8_param") or recipe.get("fp4_param"):
        raise ValueError(f"{where}.training_recipe: override_nonquantized_autocast, fp8_param and fp4_param are not "
                         "priced (Megatron: initialisation overrides are out of scope); drop them")
    fp8, fp4 = recipe.get("fp8_quantization_recipe"), recipe.get("fp4_quantization_recipe")
    if fp8 is not None and fp4 is not None:
        raise ValueError(f"{where}.training_recipe: fp8 and fp4 quantization settings are mutually exclusive (Megatron)")
    if fp8 is not None and fp8 not in TE_FP8_RECIPES:
        raise ValueError(f"{where}.training_recipe: fp8_quantization_recipe {fp8!r} is not priced (Megatron refuses "
                         f"delayed here; custom has no known rate): use one of {', '.join(TE_FP8_RECIPES)}")
    if fp4 is not None and fp4 not in TE_FP4_RECIPES:
        raise ValueError(f"{where}.training_recipe: fp4_quantization_recipe {fp4!r} is not priced: use nvfp4")
    return TE_FP8_RECIPES[fp8] if fp8 is not None else TE_FP4_RECIPES[fp4] if fp4 is not None else "bf16"


def rules_from_te_config(text: str) -> tuple[tuple[str, str], ...]:
    """The (glob, precision) rules of a Megatron TE precision config's text (YAML, as
    `RecipeConfig.from_yaml_file` reads it): its enabled matchers in file order (a matcher is enabled only
    when it says so: `_build_matchers`' default is false), each with its config's precision."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"te precision config: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("configs"), dict) or not isinstance(data.get("matchers"), dict):
        raise ValueError("te precision config: needs a 'configs' mapping and a 'matchers' mapping (Megatron-Core's "
                         "RecipeConfig)")
    configs, rules = data["configs"], []
    for name, matcher in data["matchers"].items():
        if not isinstance(matcher, dict):
            raise ValueError(f"te precision config: matchers.{name} must be a mapping")
        if not matcher.get("enabled", False):
            continue
        if matcher.get("type") != "glob" or not isinstance(matcher.get("pattern"), str):
            raise ValueError(f"te precision config: matchers.{name} needs type glob and a pattern (Megatron-Core's only "
                             "matcher type)")
        if matcher.get("config") not in configs:
            raise ValueError(f"te precision config: matchers.{name} names config {matcher.get('config')!r}, which "
                             f"configs does not hold")
        rules.append((matcher["pattern"], precision_of_te_config(matcher["config"], configs[matcher["config"]])))
    return tuple(rules)


def te_config_of_rules(rules) -> dict:
    """A Megatron TE precision config (the mapping `--te-precision-config-file` reads) of (glob, precision) rules."""
    configs, matchers = {}, {}
    for i, (pattern, precision) in enumerate(rules):
        recipe = ({} if precision == "bf16" else {"fp4_quantization_recipe" if precision in TE_FP4_RECIPES.values()
                                                  else "fp8_quantization_recipe": TE_RECIPE_OF[precision]})
        configs[precision] = {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": recipe}
        matchers[f"rule_{i}"] = {"config": precision, "type": "glob", "pattern": pattern, "enabled": True}
    return {"configs": configs, "matchers": matchers}


def te_config_text(rules) -> str:
    """`te_config_of_rules` as one line of JSON (which is YAML: the file Megatron reads)."""
    return json.dumps(te_config_of_rules(rules), separators=(",", ":"))


def model_roles(model) -> dict[str, tuple[str, ...]]:
    """The roles the model has, each with its module names relative to a decoder layer (MTP's are absolute, with
    {d} its depth)."""
    kinds = model.hybrid_layer_counts() if model.is_hybrid else {}
    dense_mlp = (kinds.get("mlp", 0) > 0) if model.is_hybrid else (not model.is_moe or not all(model.moe_layer_mask))
    has = {"attention": not model.is_hybrid or kinds.get("attention", 0) > 0, "mlp": dense_mlp,
           "experts": model.is_moe, "shared_experts": bool(model.is_moe and model.moe_shared_expert_intermediate_size),
           "latent_proj": bool(model.is_moe and model.moe_latent_size), "mamba_in_proj": kinds.get("mamba", 0) > 0,
           "mamba_out_proj": kinds.get("mamba", 0) > 0, "gdn": kinds.get("gdn", 0) > 0, "mtp": model.mtp_num_layers > 0}
    names = {**ROLE_MODULES, "attention": MLA_ATTENTION if model.multi_latent_attention else ATTENTION,
             "mtp": MTP_MODULES}
    return {role: names[role] for role, present in has.items() if present}


def role_paths(role: str, names: tuple[str, ...], num_layers: int, mtp_depths: int) -> list[str]:
    """The module paths of a role (`model_roles`) as Megatron names them: decoder.layers.{i}.<module> in every layer,
    the MTP block's absolute paths per depth."""
    if role == "mtp":
        return [n.format(d=d) for n in names for d in range(mtp_depths)]
    return [f"decoder.layers.{i}.{n}" for i in range(num_layers) for n in names]


@lru_cache(maxsize=256)
def _resolve(rules: tuple, roles: tuple, num_layers: int, mtp_depths: int, precision: str) -> tuple:
    out = []
    for role, names in roles:
        paths = role_paths(role, names, num_layers, mtp_depths)
        chosen = {next((p for pattern, p in rules if fnmatch.fnmatch(path, pattern)), precision) for path in paths}
        if len(chosen) > 1:
            raise ValueError(f"module_precision gives the {role} modules {' and '.join(sorted(chosen))} in different "
                             f"layers or modules: the formulation prices one precision per role (attention, mlp, "
                             f"latent_proj, mamba_in_proj, mamba_out_proj, mtp) in every layer: cover the role's "
                             f"other modules too (the MTP block: a rule for mtp.*), and keep per-layer precision to "
                             f"bf16_layers_at_start/end")
        out.append((role, chosen.pop()))
    return tuple(out)


def role_precisions(rules, model, precision: str) -> dict[str, str]:
    """The precision of each role of `model` under the job's recipe `precision` and the (glob, precision) `rules`
    (module docstring): {} without rules; a role no rule touches keeps `precision`."""
    if not rules:
        return {}
    roles = tuple(model_roles(model).items())
    return dict(_resolve(tuple(map(tuple, rules)), roles, model.num_layers, max(model.mtp_num_layers, 0), precision))


def module_precision_problem(job) -> str | None:
    """Why the job's module_precision cannot be priced (one line naming the fix), or None."""
    rules = job.module_precision
    if not rules:
        return None
    if job.precision not in OVERRIDE_PRECISIONS or job.precision == "bf16" or job.framework != "megatron":
        return (f"module_precision overrides the modules of a quantised Megatron recipe (Megatron "
                f"--te-precision-config-file; BF16 modules are never overridden); precision {job.precision} under "
                f"framework {job.framework} has none to override: drop it or use precision mxfp8, nvfp4 or an FP8 "
                f"recipe other than delayed scaling")
    bad = [p for _, p in rules if p not in OVERRIDE_PRECISIONS]
    if bad:
        return f"module_precision: precision {bad[0]!r} is not one of {', '.join(OVERRIDE_PRECISIONS)}"
    try:
        chosen = role_precisions(rules, job.model, job.precision)
    except ValueError as err:
        return str(err)
    moved = [role for role, p in chosen.items() if p != job.precision and role not in PRICED_ROLES]
    if moved:
        return (f"module_precision moves the {moved[0]} modules to {chosen[moved[0]]}: the formulation prices "
                f"per-module precision for {', '.join(PRICED_ROLES)} only; narrow the pattern")
    return None
