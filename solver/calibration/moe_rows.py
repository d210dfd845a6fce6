"""Published mixture-of-experts runs (../shared/data/published_runs_moe_newgpu.json, category A:
Megatron-Bridge's performance summaries and NeMo's documentation, MoE on H100 / B200 / GB200 /
B300 / GB300) as rows `solveplan validate` predicts, with every inference named.

What a row states wins:
- the model: the row's `model.key` names a catalog entry (models/<key>.yaml, each citing its
  config); the row's own dimensions (layers, hidden, heads, experts, top-k, expert FFN, MLA ranks) are checked against
  it and a row that disagrees is skipped with the difference. A model without a catalog entry is
  built from the shape the row states (`moe_row_model`, Megatron-Core's MoE defaults for the rest,
  said); DeepSeek-V4 Flash, whose row states its name only, is its catalog entry (built from its config.json). MTP and token
  dropping follow the row's label ("with/without MTP", "token-drop" / "dropless"); unlabelled,
  the published config.
- the configuration: tp, pp, cp, ep, vp, micro-batch, global batch; etp, recompute, sequence
  parallelism from the table or the matched Megatron-Bridge recipe (`parallel.other.recipe`, the
  data file's stated provenance). Knobs neither states take the best legal value, as for dense
  rows (`rows` module docstring): published runs were tuned; a granularity the source's scripts fix
  for a whole model family (`FAMILY_RECOMPUTE`: Megatron-Bridge's DeepSeek-V3, selective) is stated,
  its modules then take the best value among those its presets use. A recipe's pipeline layout
  (`pp_layout`: Megatron-Bridge's DeepSeek-V3 `Et*4|(t*4|)*14tmL`) is the row's split, read and
  priced by `space.pipeline_layout` (what its pricing assumes joins the row's `assumed`); one
  Megatron refuses or the formulation does not model leaves the balanced split, said.
- precision: bf16, or the FP8 recipe the row names when the job schema has it (fp8-cs is
  per-tensor current scaling, `fp8-tensorwise`; mxfp8; fp8-blockwise); otherwise costed as FP8
  (stated in the row's `assumed`); FP8 primary weights and NVFP4's BF16 layers as its source's
  precision config, recipe or model config keeps them (`precision_rows.precision_settings`).
- hardware: the GPU catalog entry and its `<family>x<N>` reference cluster (the rows state no
  fabric); a GPU without a catalog entry is skipped.
- routing: every Megatron-Bridge MoE row forces balanced routing ("forced balanced token
  distribution", the page's footnote), the formulation's default (`JobSpec.moe_load_imbalance`
  1.0). Rows of the file's category B (dense models on Blackwell) are not read here.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InputError
from ..specs import Constraints, JobSpec, ModelSpec
from .eras import fsdp_of, fsdp_zero, recipe_block, stated_vp
from .legal_rows import broken_rule_text, with_blamed_knob_freed
from .moe_recipes import (
    FAMILY_RECOMPUTE,
    MODEL_RECIPES,
    MOE_RECOMPUTE_PRESETS,
    resolved_recipe,
    scripts_2509_recipe,
)
from .moe_row_model import stated_moe_model
from .names import dims_disagreement, names_catalog_moe, squeezed, with_named_key
from .precision_rows import fp8_attention_guard, precision_settings, row_precision
from .rows import (
    ROW_READERS,
    Row,
    ddp_zero,
    gpu_of,
    grad_reduce_dtype,
    measured_step_s,
    pipeline_accounting,
    published_row_cluster,
    recompute_of,
)
from .stated import NO_GLOBAL_BATCH, first_yes_no
from .tasks import task_problem, task_settings
from .unread_sources import CHOICES as UNREAD_SOURCE_CHOICES
from .unread_sources import said as said_of_unread_source
from .unread_sources import unread_source_settings

MOE_FILE = "published_runs_moe_newgpu.json"
# model.key names the catalog entry (models/<key>.yaml); the family, for cross-validation by model
FAMILY_OF_KEY = {"deepseek-v4": "deepseek-v4", "deepseek": "deepseek-moe", "qwen3": "qwen3-moe", "gpt-oss": "gpt-oss",
                 "mixtral": "mixtral", "llama4": "llama4", "nemotron3": "nemotron3", "kimi": "kimi"}
NOT_IN_CATALOG: dict[str, str] = {}  # row keys with no catalog entry and no stated shape, with why (none left)
CAPACITY_FACTOR_DROP = 1.0  # Megatron-Bridge's token-drop recipes: moe_expert_capacity_factor 1.0


def is_moe_file_row(raw: dict) -> bool:
    """A mixture-of-experts row, of the MoE / new-GPU file or of any other file of runs: category A, or
    a row that states experts or expert parallelism (Nemotron 3.5 Lightning is filed as dense but
    runs with EP 8), is tagged moe or names a catalog MoE model. Dense rows are read by `rows.row_job` itself."""
    m, p = raw.get("model") or {}, raw.get("parallel") or {}
    return (raw.get("category") == "A" or bool(m.get("num_experts")) or (p.get("ep") or 1) > 1
            or "moe" in (raw.get("tags") or []) or names_catalog_moe(m))


def _family(key: str) -> str:
    return next((fam for prefix, fam in FAMILY_OF_KEY.items() if key.startswith(prefix)), key)


def _recompute(p: dict, recipe: dict, assumed: list[str], settings: dict | None = None) -> str | None:
    """The row's recompute granularity; with `selective` and the modules stated, those modules
    as the job's `recompute_modules` (Megatron's --recompute-modules, formulation/recompute.py)."""
    rec = p.get("recompute")
    gran = rec.get("granularity") if isinstance(rec, dict) else recompute_of(rec)
    modules = rec.get("modules") if isinstance(rec, dict) else None
    if gran is None and recipe.get("recompute_granularity"):
        gran, modules = recipe["recompute_granularity"], recipe.get("recompute_modules")
    if gran in (None, "not stated"):
        return None
    gran = str(gran).lower()
    if gran.startswith("sel"):
        if isinstance(modules, list) and settings is not None:
            from ..formulation.recompute import MODULES

            known = tuple(m for m in modules if m in MODULES)
            if len(known) < len(modules):
                assumed.append(f"recompute modules {', '.join(m for m in modules if m not in MODULES)} not priced")
            settings["recompute_modules"] = known
        return "selective"
    return "full" if gran.startswith("full") else "none"


def _job_settings(raw: dict, recipe: dict, precision: str, assumed: list[str]) -> tuple[dict, list[str]]:
    """(the job settings a row and its matched recipe state, the settings left to the best legal value).

    - token dispatcher: Megatron-Bridge's perf recipes run the flex dispatcher whenever they name a
      backend (the data file's note on the Qwen3 recipes);
    - all-to-all overlap: stated by the recipe; a recipe of the WorkloadBaseConfig era (tags before
      v0.6.0) that does not set it runs without it: `moe_a2a_overlap: Optional[bool] = False` is the
      dataclass default (scripts/performance/utils/utils.py) and `_set_moe_a2a_overlap_overrides`
      (utils/overrides.py) only turns it on, over base recipes that leave it off (recipes/*:
      `overlap_moe_expert_parallel_comm = False` or unset);
      a container older than the feature (`EP_OVERLAP_FROM`) runs without it; so does a row that states
      nothing: an opt-in that Megatron-Core leaves off (`overlap_moe_expert_parallel_comm = False`,
      transformer_config.py), and off in 66 of the 82 released MoE runs whose recipe, scripts or container
      settle it -- unlike the dispatcher and the CUDA graphs, whose best value is also what most recipes run;
    - CUDA graphs (`_recipe_graphs`).
    A row without a matched recipe states neither the dispatcher nor the graphs: like its other unstated
    knobs, they take the best value (`_best_settings`)."""
    settings: dict = {}
    backend = recipe.get("moe_flex_dispatcher_backend")
    flex = recipe.get("moe_token_dispatcher_type") == "flex" or (
        backend and recipe.get("moe_token_dispatcher_type") in (None, "flex"))
    overlap_keys = [k for k in ("moe_a2a_overlap", "overlap_moe_expert_parallel_comm") if isinstance(recipe.get(k), bool)]
    unstated = []
    if recipe:
        settings["moe_token_dispatcher"] = "flex" if flex else "alltoall"
    else:
        unstated.append("moe_token_dispatcher")
    if overlap_keys or _workload_base_config(recipe):
        settings["moe_a2a_overlap"] = any(recipe[k] for k in overlap_keys)
    elif _container(raw) and _container(raw) < EP_OVERLAP_FROM:
        settings["moe_a2a_overlap"] = False
        assumed.append(f"no EP all-to-all overlap: container {raw.get('container')} predates Megatron-Core's")
    else:
        settings["moe_a2a_overlap"] = False
        assumed.append("EP all-to-all overlap not stated: off, Megatron-Core's default, as 66 of the 82 released "
                       "MoE runs whose recipe, scripts or container settle it ran")
    if recipe.get("offload_modules"):
        settings["offload_modules"] = tuple(recipe["offload_modules"])
        size = recipe.get("min_offloaded_tensor_size") or {}  # by GPU where a model's recipes differ
        size = size.get(str(raw["hardware"].get("gpu")).lower()) if isinstance(size, dict) else size
        if size:
            settings["min_offloaded_tensor_size"] = int(size)
    if recipe.get("hsdp_domain_gpus"):  # Megatron-FSDP's HSDP: one instance per NVLink domain
        settings["distributed_optimizer_instances"] = max(1, int(raw["parallel"]["num_gpus"]) // recipe["hsdp_domain_gpus"])
    graphs = _recipe_graphs(recipe, settings["moe_token_dispatcher"] if recipe else None, assumed)
    if graphs is None:
        unstated.append("cuda_graph")
    else:
        settings.update(graphs)
    return settings, unstated


# Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm) arrived with ae1c88296f of
# 2025-08-01 ("Support Expert Parallel A2A Overlapping - (02) Support EP A2A overlap at PP=1"; core_v0.13.0
# of 2025-07-25 has no such option): a NeMo container of an earlier month cannot have run it.
EP_OVERLAP_FROM = (25, 8)


def _container(raw: dict) -> tuple[int, ...]:
    """A row's container as (year, month), () when it states none."""
    return tuple(int(x) for x in re.findall(r"\d+", str(raw.get("container", "")))[:2])


def _recipe_graphs(recipe: dict, dispatcher: str | None, assumed: list[str]) -> dict | None:
    """The CUDA-graph settings of a matched recipe, or None where it states none: its cuda_graph_impl and
    scope (the modules the formulation knows; a per-layer graph of a whole dropless MoE layer is not
    captured, a whole-iteration graph needs the flex dispatcher); a WorkloadBaseConfig preset that sets
    none runs without (its base recipes set `cfg.model.cuda_graph_impl = "none"`, Megatron's default)."""
    impl = recipe.get("cuda_graph_impl")
    if impl in ("local", "transformer_engine"):
        mods = tuple(m for m in PER_LAYER_GRAPHS + ("mamba",) if m in (recipe.get("cuda_graph_scope") or ()))
        if mods and ("moe_preprocess" not in mods or "moe_router" in mods):
            return {"cuda_graph_impl": impl, "cuda_graph_modules": mods}
        assumed.append(f"CUDA graph scope {recipe.get('cuda_graph_scope')} captures no MoE-layer module: priced eager")
        return {"cuda_graph_impl": "none", "cuda_graph_modules": ()}
    if impl == "full_iteration" and dispatcher == "flex":
        return {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ()}
    if impl == "full_iteration":
        assumed.append("whole-iteration CUDA graph without the flex dispatcher's budget: priced eager")
    return {"cuda_graph_impl": "none", "cuda_graph_modules": ()} if impl or _workload_base_config(recipe) else None


def _workload_base_config(recipe: dict) -> bool:
    """A matched recipe of Megatron-Bridge's scripts/performance WorkloadBaseConfig presets (tags
    v0.2.0 to v0.5.x; v0.6.0 moved to src/megatron/bridge/perf_recipes, whose helpers the data file
    does not list in full)."""
    tag = re.findall(r"\d+", str(recipe.get("recipe_tag", "")))
    return bool(recipe.get("recipe_name")) and bool(tag) and tuple(map(int, tag[:2])) < (0, 6)


def _family_recompute(row: Row, unstated: list[str]) -> str | None:
    """For a row that states no recompute: the granularity its source runs the model family with
    (`FAMILY_RECOMPUTE`), its modules left to the best legal value among the source's presets; None when
    the source fixes none -- the granularity is then the best legal value, and selective's modules the best
    among Megatron-Bridge's MoE presets (`MOE_RECOMPUTE_PRESETS`)."""
    family = FAMILY_RECOMPUTE.get((row.source, row.model_family))
    unstated.append("recompute_modules")
    if family is None:  # granularity free; selective's modules among the MoE presets
        return None
    row.assumed.append(f"recompute {family[0]}, as the source's scripts run every {row.model_family} config")
    return family[0]


def moe_row_job(raw: dict) -> Row:
    """One row of the MoE / new-GPU file as a Row: a job whose constraints hold what the row (and
    its matched recipe) states, or the reason it is skipped."""
    from ..catalog import catalog_families, catalog_models, load_model

    hw, p, m = raw["hardware"], raw["parallel"], raw["model"]
    row = Row(id=raw["id"], source=raw["source"], gpu="", family="", num_gpus=int(p["num_gpus"]), raw=raw)
    row.raw = raw = with_named_key(raw, row.assumed, moe=True)  # a key the catalog lacks: the one the row names
    m = raw["model"]
    key = str(m.get("key") or "")
    row.model_family = _family(key)
    named = squeezed(key or str(m.get("name") or ""))
    reason = next((why for prefix, why in NOT_IN_CATALOG.items() if named.startswith(squeezed(prefix))), None)
    reason = reason or task_problem(raw, moe=True) or (NO_GLOBAL_BATCH if p.get("gbs") is None else None)
    stated = stated_moe_model(m, row.assumed) if not reason and key not in catalog_models() else None
    if isinstance(stated, str):
        reason = stated
    if reason:
        row.skipped = reason
        return row
    gpu = gpu_of(hw.get("gpu"))  # the one mapping of a row's GPU text (rows.gpu_of)
    if gpu is None or gpu[1] not in catalog_families():
        row.skipped = f"GPU {hw.get('gpu')!r} is not in the catalog"
        return row
    row.gpu, row.family = gpu
    assumed = row.assumed
    precision = row_precision(raw.get("precision", "bf16"), assumed, raw["source"])
    model = stated if isinstance(stated, ModelSpec) else load_model(key)
    wrong = dims_disagreement(m, model)
    if wrong:
        row.skipped = wrong
        return row
    recipe = resolved_recipe(recipe_block(raw, assumed) or scripts_2509_recipe(raw, row.assumed), assumed)
    if key in MODEL_RECIPES:
        recipe = {**MODEL_RECIPES[key], **recipe}
        assumed.append(f"the settings every Megatron-Bridge perf recipe of {key} sets: " + ", ".join(
            f"{k} {v}" for k, v in MODEL_RECIPES[key].items()))
    layout = str(recipe.get("pp_layout") or recipe.get("pipeline_model_parallel_layout") or "")
    model = _row_model(model, raw, layout, recipe, assumed)
    if any("muon" in str(note).lower() for note in raw.get("notes") or ()):
        assumed.append("Muon optimizer (the row's note) costed as Adam: Adam's two fp32 states bound the memory "
                       "from above; Muon's Newton-Schulz iterations are not priced")
    settings, unstated_settings = _job_settings(raw, recipe, precision, assumed)
    settings.update(precision_settings(raw, precision, assumed, key, megatron_fsdp=fsdp_of(p) == "megatron",
                                       recipe=recipe))
    unstated_settings += unread_source_settings(raw, settings)
    settings.update(task_settings(raw, assumed))  # SFT said; LoRA is refused on MoE models (task_problem)
    if layout:
        _row_layout(row, layout, model)
    try:  # the row's cluster as the dense rows build theirs (NVL72 racks shared out evenly)
        cluster = published_row_cluster(hw, row.num_gpus, assumed)
    except (InputError, ValueError) as exc:
        row.skipped = f"cluster of {row.num_gpus} {hw.get('gpu')}: {getattr(exc, 'message', exc)}"
        return row
    fp8_attention_guard(settings, assumed, model=model, cluster=cluster, precision=precision)
    cons = _row_constraints(row, recipe, model, settings, unstated_settings)
    base = JobSpec(model=model, cluster=cluster, global_batch_size=int(p["gbs"]), seq_length=model.seq_length,
                   precision=precision, grad_reduce_dtype=grad_reduce_dtype(raw, assumed), constraints=cons,
                   **settings)
    row.job = _best_settings(base, unstated_settings, row) or _relaxed(base, unstated_settings, row)
    if row.job is not None and "grad_reduce_dtype" in unstated_settings:
        assumed.append(said_of_unread_source(row.job))
    if row.job is None:
        row.skipped = ("no legal configuration matches what the row states (Megatron's rules as the space "
                       "enforces them)" + broken_rule_text(base))
        return row
    row.measured_s, row.basis = measured_step_s(raw, row.job)
    if row.measured_s is None:
        row.skipped = "no time measure (iteration time, tokens/s, TFLOP/s or MFU)"
        return row
    unpriced = unpriced_reason(model)
    if unpriced:
        row.skipped = unpriced
    return row


def _relaxed(base: JobSpec, unstated: list[str], row: Row) -> JobSpec | None:
    """The row's job with the one stated knob that breaks Megatron's rules at its best legal value
    (`legal_rows`), or None. Megatron-Bridge's 25.09 table gives DeepSeek-V3 on 256 GB200 a parenthesised
    variant "PP 4 (8)" beside a single "EP 64", which fits 64 GPUs per stage at PP 4 and none at PP 8
    (Megatron-Core: etp*ep*pp divides the world size, parallel_state.initialize_model_parallel)."""
    said: list[str] = []
    freed = with_blamed_knob_freed(base, said)
    job = _best_settings(freed, unstated, row) if freed is not None else None
    if job is not None:
        row.assumed.extend(said)
    return job


def _row_layout(row: Row, layout: str, model: ModelSpec) -> None:
    """The row's pipeline layout (its recipe's `pp_layout`) as `row.layout`, after Megatron's
    checks (`space.pipeline_layout`: the stated pp and vp, the model's layers and MTP), and what
    its pricing assumes into `row.assumed`. A layout Megatron refuses or the formulation does not
    model leaves the row on the balanced split, said in `row.assumed` (a run that ran is never
    rejected for it)."""
    from ..space.pipeline_layout import layout_degrees, priced_split, read_layout

    p = row.raw["parallel"]
    try:
        pp, _ = layout_degrees(layout, p.get("pp"), p.get("vp") or (1 if p.get("pp") else None))
        _, notes = priced_split(model, read_layout(layout, pp, model))
    except ValueError as exc:
        row.assumed.append(f"pipeline layout {layout} costed with the balanced split: {exc}")
        return
    row.layout = layout
    row.assumed.extend(notes)


def _row_model(model: ModelSpec, raw: dict, layout: str, recipe: dict, assumed: list) -> ModelSpec:
    """The catalog model as the row ran it: its sequence length, MTP layers where the row drops
    them or its matched recipe states them (`mtp_num_layers`), else the published config's (said),
    and token dropping where the row's label states it."""
    m, other = raw["model"], raw["parallel"].get("other") or {}
    update: dict = {"seq_length": int(m["seq_len"])} if m.get("seq_len") else {}
    if not update:
        assumed.append(f"sequence length not stated: {model.seq_length}, the published config's")
    mtp = str(other.get("mtp") or "").lower()
    stated = recipe.get("mtp_num_layers")
    if "without mtp" in mtp:
        update["mtp_num_layers"] = 0
    elif isinstance(stated, int) and not isinstance(stated, bool) and stated >= 0:
        update["mtp_num_layers"] = stated
    elif model.mtp_num_layers and not mtp and "m" not in layout:
        assumed.append(f"MTP not stated: {model.mtp_num_layers} layer(s), as the published config")
    drop = str(other.get("moe_token_drop") or "").lower()
    if "token-drop" in drop and model.moe_expert_capacity_factor is None:
        update["moe_expert_capacity_factor"] = CAPACITY_FACTOR_DROP
        assumed.append(f"token dropping at capacity factor {CAPACITY_FACTOR_DROP:g} (the label states dropping, "
                       f"not the factor)")
    return model.model_copy(update=update)


def _row_constraints(row: Row, recipe: dict, model: ModelSpec, settings: dict, unstated_settings: list) -> Constraints:
    """The knobs the row (and its matched recipe) states as constraints; the rest, said in `row.assumed`, the best."""
    p, assumed = row.raw["parallel"], row.assumed
    etp = p.get("etp") or recipe.get("expert_tensor_parallel_size")
    sp = first_yes_no(p.get("sequence_parallel"), recipe.get("sequence_parallel"))
    recompute = _recompute(p, recipe, assumed, settings) or _family_recompute(row, unstated_settings)
    knobs: dict[str, Any] = dict(
        tp=(p["tp"],) if p.get("tp") else None, pp=(p["pp"],) if p.get("pp") else None, cp=(p.get("cp") or 1,),
        ep=(p["ep"],) if p.get("ep") else None, etp=(etp,) if etp else None,
        micro_batch_size=(p["mbs"],) if p.get("mbs") else None,
        vp=stated_vp(row.raw, assumed),
        recompute=(recompute,) if recompute else None, sequence_parallel=(sp,) if sp is not None else None,
        zero=(3,) if recipe.get("use_megatron_fsdp") else _stage(fsdp_zero(p, assumed)) or ddp_zero(p, assumed),
    )
    free = [k for k, v in knobs.items() if v is None] + unstated_settings
    assumed.append("unstated, best legal value: " + ", ".join(free))
    return Constraints(**{k: v for k, v in knobs.items() if v is not None}, uneven_split=False,
                       **pipeline_accounting(p, model.num_layers, assumed))


def _stage(zero: int | None) -> tuple[int, ...] | None:
    return (zero,) if zero is not None else None


def _best_settings(base: JobSpec, unstated: list[str], row: Row) -> JobSpec | None:
    """`base` with the job settings the row leaves unstated (token dispatcher, the
    modules of a family's selective recomputation, `FAMILY_RECOMPUTE`, CUDA graphs, `_graph_choices`, and
    the gradient dtype and FP8 weights of a source whose scripts are unread, `unread_sources`) at
    the values whose best legal configuration the formulation predicts fastest (the shipped GPU
    parameters), as `evaluate.best_config` does for a row's unstated knobs, among those whose
    configuration fits in memory when any does; None when no configuration is legal."""
    from .row_predict import best_settings

    choices: dict[str, list[dict[str, Any]]] = {"moe_token_dispatcher": [{"moe_token_dispatcher": v} for v in ("alltoall", "flex")],
               "recompute_modules": [{"recompute_modules": v} for v in
                                     FAMILY_RECOMPUTE.get((row.source, row.model_family), ("", MOE_RECOMPUTE_PRESETS))[1]],
               "cuda_graph": _graph_choices(row.raw),
               **UNREAD_SOURCE_CHOICES}
    return best_settings(base, [choices[k] for k in unstated], row.layout)


# The per-layer CUDA graphs Megatron-Bridge's MoE presets name (scripts/performance/configs/*, v0.2.0 on:
# `cuda_graph_scope=["attn", "moe_router", "moe_preprocess"]`), and the first NeMo container whose
# Megatron-Core can graph a whole dropless MoE iteration: the flex dispatcher's static per-rank budget came
# with "Paged Stashing (#4247)", Megatron-LM f007db77b9 of 2026-05-22 (26.06 is the container after it).
PER_LAYER_GRAPHS = ("attn", "moe_router", "moe_preprocess")
FULL_ITERATION_FROM = (26, 6)
# The per-layer graph scopes a container's Megatron-Core offers a dropless MoE model: "moe_router" and
# "moe_preprocess" came with Megatron-LM 4008d3de18 of 2025-10-31 ("feat(MoE): Refactor cuda_graph_scope (#1917)"),
# first in a NeMo container with Megatron-Bridge v0.2.0 (25.11; its Megatron-LM submodule 0d8e0714 of 2025-11-17
# has them); the 25.09 recipes' Megatron-Bridge v0.1.0rc3 pins megatron-core <0.15, whose TransformerConfig has
# cuda_graph_scope "full" or "attn" only ("attn" since a606486ece of 2025-03-18, "Add conditional cudagraph support
# for MoE models", core_v0.12.0); before it, a layer's graph is the whole layer, which a dropless MoE cannot capture.
MOE_GRAPH_SCOPES_FROM, ATTN_GRAPH_FROM = (25, 11), (25, 4)


def _graph_choices(raw: dict) -> list[dict]:
    """The CUDA-graph settings a row stating none may have run: per-layer graphs of the static-shape
    modules its container's Megatron-Core can capture, and a whole-iteration graph from the container that
    could capture one (a setting with more graphed is never predicted slower, so no graphs at all is not a
    candidate where a graph could run)."""
    container = _container(raw)
    if container and container < ATTN_GRAPH_FROM:
        return [{"cuda_graph_impl": "none", "cuda_graph_modules": ()}]
    if container and container < MOE_GRAPH_SCOPES_FROM:
        return [{"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ("attn",)}]
    options = [{"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": PER_LAYER_GRAPHS}]
    if container and container >= FULL_ITERATION_FROM:
        options.append({"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ()})
    return options


ROW_READERS.append((is_moe_file_row, moe_row_job))


def unpriced_reason(model) -> str | None:
    """Why the formulation cannot predict this MoE model, or None: it prices MoE layers once it has
    its expert terms (solver/formulation/moe.py, composed by coefficients.stage_coefficients).
    (`catalog.refuse_unpriced_moe` stops MoE jobs at the CLI until the two branches meet; rows do
    not go through it.)"""
    import importlib.util

    if model.is_moe and importlib.util.find_spec(f"{__package__.rsplit('.', 1)[0]}.formulation.moe") is None:
        return "the formulation does not price mixture-of-experts layers yet"
    return None
