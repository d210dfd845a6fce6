"""What the sources of the published mixture-of-experts rows set beyond what a row states, read in their
scripts and recipes (Megatron-Bridge's performance scripts and perf recipes): the recomputation a source fixes
for a model family, the settings of the 25.09 scripts the data file names without attaching, and what every
perf recipe of a model sets. `moe_rows` applies them to a row's recipe dict."""

from __future__ import annotations

# What every Megatron-Bridge perf recipe of a model sets, for rows that attach none (NVIDIA-NeMo/Megatron-Bridge@067f987:
# Nemotron 3 Ultra's GB200 and GB300 recipes, perf_recipes/nemotronh/{gb200,gb300}/nemotronh.py with common.py
# `_apply_nemotron_3_ultra_perf_defaults` and `_apply_nemotron_3_ultra_fsdp_hsdp`: Megatron-FSDP's HSDP with one
# instance per 64-GPU NVLink domain, `num_distributed_optimizer_instances = max(1, num_gpus // 64)`)
MODEL_RECIPES = {"nemotron3-ultra": dict(
    use_megatron_fsdp=True, hsdp_domain_gpus=64, recompute_granularity="selective", recompute_modules=["moe_act"],
    offload_modules=["fused_group_mlp"], min_offloaded_tensor_size={"gb200": 350_000_000, "gb300": 500_000_000},
    moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
    cuda_graph_impl="none")}

# Recomputation a source's scripts fix for every run of a model family, and the module sets its presets
# use (read in those scripts): Megatron-Bridge runs DeepSeek-V3 with selective recomputation in every
# performance config -- scripts/performance/configs/deepseek/deepseek_v3_llm_pretrain.yaml at v0.1.0rc3
# (`recompute_granularity: "selective"`), set_deepseek_v3_common_configs in deepseek_llm_pretrain.py
# v0.2.0 to v0.5.x (`cfg.model.recompute_granularity = "selective"`), perf_recipes/deepseek at v0.6.0 --
# with the modules of each GPU's preset (run_script.py at v0.1.0rc3; *workload_base_configs.py and
# perf_recipes/deepseek/*): mla_up_proj; mla_up_proj, mlp; mlp; moe_act; mla_up_proj, layernorm, moe_act;
# mla_up_proj, mlp, moe_act; none listed (Megatron's default core_attn). A row stating no recompute takes
# the granularity, and the modules at the best legal value among those sets.
FAMILY_RECOMPUTE = {("mbridge_perf", "deepseek-moe"): ("selective", (
    ("mla_up_proj",), ("mla_up_proj", "mlp"), ("mlp",), ("moe_act",), ("mla_up_proj", "layernorm", "moe_act"),
    ("mla_up_proj", "mlp", "moe_act"), ("core_attn",)))}

# The module sets of selective recomputation a row stating no recompute may have run, where its source fixes
# none for the family (`FAMILY_RECOMPUTE`): those of Megatron-Bridge's MoE presets -- DeepSeek's above, and
# layernorm with moe_act, which its GPT-OSS and Nemotron 3 recipes set (the data file's recipe blocks) -- as
# Megatron-Core's `--recompute-modules` takes them; a set naming a module the model lacks (mla_up_proj
# without MLA) is refused by the job's own rules and not tried.
MOE_RECOMPUTE_PRESETS = (*FAMILY_RECOMPUTE[("mbridge_perf", "deepseek-moe")][1], ("layernorm", "moe_act"))

# Megatron-Bridge's 25.09 performance runs: the data file names their recipes -- the v0.1.0rc3 YAML
# configs -- without attaching them (the rows' notes); what that tag's scripts set for every run of a MoE
# model, whatever its perf_matrix entry (scripts/performance/run_script.py at v0.1.0rc3, `main`):
# - Qwen3 (30B-A3B, 235B-A22B): `apply_moe_token_drop(recipe.model)` -- the 25.09 page's "(tokendrop)"
#   label -- which requires the alltoall dispatcher (training/utils/moe_token_drop.py asserts it; the
#   Qwen3 MoE provider's default, models/qwen/qwen_provider.py `moe_token_dispatcher_type = "alltoall"`),
#   and no EP overlap: the script sets none and the recipe's CommOverlapConfig leaves it off
#   (training/comm_overlap.py: "Optimizations disabled by default", `overlap_moe_expert_parallel_comm =
#   False`); the YAML (configs/qwen3/*.yaml) sets `recompute_granularity: null`;
# - DeepSeek-V3: on H100 DeepEP (`enable_deepep` -> recipes/deepseek/deepseek_v3.py
#   `moe_token_dispatcher_type = "flex"`) and the 1F1B all-to-all overlap (`A2A_1F1B`:
#   overlap_moe_expert_parallel_comm = True); on B200 / GB200 token dropping, DeepEP off (alltoall) and
#   the overlap off; selective recomputation (configs/deepseek/deepseek_v3_llm_pretrain.yaml) of
#   mla_up_proj and mlp on H100, of mla_up_proj, mlp and moe_act on GB200 (B200's script lists none and
#   its perf_matrix entry, TP 2, is not the published TP 1 run: left to the family's presets, whose
#   best fits in memory; the recipe default core_attn does not, in the formulation).
# CUDA graphs come from each GPU's perf_matrix entry, whose parallel layout does not always match the
# published row's: left to the best value, as before.
SCRIPTS_2509 = {"qwen3": {"moe_token_dispatcher_type": "alltoall", "moe_a2a_overlap": False,
                          "recompute_granularity": "none"},
                "deepseek-v3:h100": {"moe_token_dispatcher_type": "flex", "moe_a2a_overlap": True,
                                     "recompute_granularity": "selective", "recompute_modules": ["mla_up_proj", "mlp"]},
                "deepseek-v3:gb200": {"moe_token_dispatcher_type": "alltoall", "moe_a2a_overlap": False,
                                      "recompute_granularity": "selective",
                                      "recompute_modules": ["mla_up_proj", "mlp", "moe_act"]},
                "deepseek-v3": {"moe_token_dispatcher_type": "alltoall", "moe_a2a_overlap": False}}


def scripts_2509_recipe(raw: dict, assumed: list[str]) -> dict:
    """The settings Megatron-Bridge v0.1.0rc3's performance scripts give a 25.09 MoE row (`SCRIPTS_2509`)
    as a recipe dict, or {} for another row."""
    if raw.get("source") != "mbridge_perf" or str(raw.get("container")) != "25.09":
        return {}
    key, gpu = str(raw["model"].get("key") or ""), str(raw["hardware"].get("gpu") or "").lower()
    name = "qwen3" if key.startswith("qwen3") else f"{key}:{gpu.split('-')[0]}"
    name = name if name in SCRIPTS_2509 or name == "qwen3" else key
    if name not in SCRIPTS_2509:
        return {}
    assumed.append(f"settings of Megatron-Bridge v0.1.0rc3 scripts/performance/run_script.py for {name} (the 25.09 "
                   f"recipes): {SCRIPTS_2509[name]}")
    return dict(SCRIPTS_2509[name])


# What a perf-recipe helper the data file names (`recipe.helpers_applied_in_order`) sets beyond the fields the
# file's recipe block restates, read at the row's tag. Megatron-Bridge v0.6.0,
# src/megatron/bridge/perf_recipes/qwen/common.py `_enable_hybridep_full_iteration_mxfp8` (the 26.08 Qwen3-MoE
# GB200/GB300 recipes): `cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True,
# overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)`. The file restates that helper's CUDA graphs,
# paged stash and FP8 attention but not its CommOverlapConfig; the GPT-OSS and DeepSeek helpers' EP overlap it does
# restate (perf_recipes/gpt_oss/common.py, deepseek/common.py at the same tag).
# Only the settings the MoE row reader uses are listed (its TP overlap is moot at these recipes' tp 1).
HELPER_SETTINGS = {("v0.6.0", "_enable_hybridep_full_iteration_mxfp8"): {"overlap_moe_expert_parallel_comm": True}}


# What a perf recipe passes to a helper whose assignment the data file records as "<set from function argument
# NAME>", read in the recipe function at the tag: Megatron-Bridge v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py
# calls `_enable_deepseek_full_iteration_mxfp8(cfg, fp8_dot_product_attention=True, fp8_output_proj=True)`,
# gb200/deepseek_v3.py `(cfg, fp8_output_proj=True)`, leaving the helper's default `fp8_dot_product_attention: bool =
# False` (perf_recipes/deepseek/common.py). (Their MXFP8 LM head, fp8_output_proj, is priced in BF16: an upper bound.)
RECIPE_ARGUMENTS = {("v0.6.0", "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"): {"fp8_dot_product_attention": True},
                    ("v0.6.0", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config"): {"fp8_dot_product_attention": False}}
ARGUMENT_PLACEHOLDER = "<set from function argument "


# What a perf recipe function sets that the data file's recipe block leaves out, read in the function at the tag
# (only the fields the MoE reader uses). Megatron-Bridge v0.6.0:
# - perf_recipes/deepseek/gb300/deepseek_v4.py `deepseek_v4_flash_pretrain_128gpu_gb300_fp8mx_config` returns
#   gb200/deepseek_v4.py `deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config()` with its own environment
#   variables, so its settings are that function's (the file records them on the GB200 row: etp 1, no sequence
#   parallelism, selective recomputation of mla_up_proj, the flex dispatcher with HybridEP, no EP overlap);
# - both run `set_full_iteration_cuda_graph(cfg.model)` (src/megatron/bridge/utils/cuda_graph.py: cuda_graph_impl
#   "full_iteration", or "local" with the full_iteration scope on an older Megatron-Core: a whole-iteration graph).
_DSV4_FLASH_128 = dict(expert_tensor_parallel_size=1, sequence_parallel=False, recompute_granularity="selective",
                       recompute_modules=["mla_up_proj"], moe_token_dispatcher_type="flex",
                       moe_flex_dispatcher_backend="hybridep", overlap_moe_expert_parallel_comm=False,
                       offload_modules=[], cuda_graph_impl="full_iteration", cuda_graph_scope=[])
RECIPE_SETTINGS = {("v0.6.0", "deepseek_v4_flash_pretrain_128gpu_gb300_fp8mx_config"): _DSV4_FLASH_128,
                   ("v0.6.0", "deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config"): _DSV4_FLASH_128}


def resolved_recipe(recipe: dict, assumed: list[str]) -> dict:
    """`recipe` (a row's recipe block) with what its recipe function (`RECIPE_SETTINGS`) and named helpers
    (`HELPER_SETTINGS`) set where the block states nothing, and the helper arguments the function passes
    (`RECIPE_ARGUMENTS`) where the block names an argument; each said in `assumed`. Helper names that are not a
    list of names are none (a block that is not an object is `eras.recipe_block`'s to refuse)."""
    out = dict(recipe)
    tag, name = str(recipe.get("recipe_tag")), str(recipe.get("recipe_name"))
    unread = {k: v for k, v in RECIPE_SETTINGS.get((tag, name), {}).items() if k not in recipe}
    if unread:
        out.update(unread)
        assumed.append(f"{', '.join(unread)}: as {name} sets them (Megatron-Bridge {tag}), not in the row")
    arguments = RECIPE_ARGUMENTS.get((tag, name), {})
    for key, value in recipe.items():
        if isinstance(value, str) and value.startswith(ARGUMENT_PLACEHOLDER) and key in arguments:
            out[key] = arguments[key]
            assumed.append(f"{key} {arguments[key]}: the argument {name} passes its helper (Megatron-Bridge {tag})")
    helpers = recipe.get("helpers_applied_in_order")
    for helper in (h for h in helpers if isinstance(h, str)) if isinstance(helpers, list) else ():
        for key, value in HELPER_SETTINGS.get((tag, helper), {}).items():
            if key not in out:
                out[key] = value
                assumed.append(f"{key} {value}: set by the recipe's helper {helper} (Megatron-Bridge {tag}), not "
                               f"restated in the row")
    return out
