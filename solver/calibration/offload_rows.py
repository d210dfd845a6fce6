"""The CPU activation offloading of a published row (read by `rows.row_job`): Megatron-Bridge's Megatron-FSDP
GB200/GB300 presets offload the saved activations of some layers to the Grace CPU (`cpu_offloading_num_layers`,
priced by formulation/offload.py); the layer count is the row's recipe block's, or, for the 25.09 rows that name no
recipe, the v0.1.0rc3 perf_matrix entry that matches the row."""

from __future__ import annotations

from ..specs.job import Precision
from .eras import recipe_block


def grace_offload_preset(raw: dict) -> bool:
    """A Megatron-FSDP GB200/GB300 run of Megatron-Bridge's performance page: every such preset also sets
    cpu_offloading_num_layers (scripts/performance/configs/llama/*_workload_base_configs.py, v0.2.0-v0.5.x: 5 to
    92 layers; the v0.1.0rc3 YAML perf_matrix: 20 to 95)."""
    p, gpu = raw.get("parallel") or {}, str((raw.get("hardware") or {}).get("gpu", "")).lower()
    return (raw.get("source") == "mbridge_perf" and str(p.get("fsdp", "")).lower().startswith("megatron-fsdp")
            and gpu.startswith(("gb200", "gb300")))


# The 25.09 rows name no recipe (their notes: "the 25.09 recipes (v0.1.0rc3 YAML configs) were not parsed"): the
# perf_matrix entry of Megatron-Bridge v0.1.0rc3 (2025-10-08; rc4 the same) that matches the row's GPU, GPU count,
# TP and micro-batch, read there: (model key, GPU, GPUs, tp, mbs) -> (layers offloaded, where, FP8 recipe or None).
# scripts/performance/utils/helpers.py:131-135 at v0.1.0rc3 turns a preset's cpu_offloading_num_layers into
# cpu_offloading = True, cpu_offloading_weights = False (activations only).
OFFLOAD_2509: dict[tuple[str, str, int, int, int], tuple[int, str, Precision | None]] = {
    ("llama3-70b", "gb200", 64, 1, 2): (
        40, "scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml:146, perf_matrix gb200.num_gpus_64."
            "fp8_cs (mbs 2; the bf16 and fp8_ds entries run mbs 1)", "fp8-tensorwise"),
    ("llama3.1-405b", "gb200", 128, 2, 1): (
        95, "scripts/performance/configs/llama31/llama31_405b_llm_pretrain.yaml:116 and :123, perf_matrix "
            "gb200.num_gpus_128.fp8_ds and fp8_cs (both TP 2, PP 1, Megatron-FSDP)", None),
}


def cpu_offload_of(raw: dict, assumed: list) -> dict | None:
    """The CPU offloading job settings of a row (`cpu_offloading_num_layers`, and `fp8_recipe` where the matched
    preset fixes the FP8 recipe the row does not name): {} for a row without offloading, None for a Grace offload preset whose layer count neither
    the row (`parallel.other.recipe.cpu_offloading_num_layers`) nor OFFLOAD_2509 gives. `assumed` gains the source."""
    p = raw.get("parallel") or {}
    recipe = recipe_block(raw, assumed)
    if recipe.get("cpu_offloading_num_layers"):
        n = int(recipe["cpu_offloading_num_layers"])
        assumed.append(f"cpu_offloading_num_layers {n} from the row's recipe {recipe.get('recipe_name')} "
                       f"(Megatron-Bridge {recipe.get('recipe_tag')}, {recipe.get('recipe_file')})")
        return {"cpu_offloading_num_layers": n}
    if not grace_offload_preset(raw):
        return {}
    m, gpu = raw.get("model") or {}, str((raw.get("hardware") or {}).get("gpu", "")).lower()
    key = (str(m.get("key")), gpu, int(p.get("num_gpus") or 0), int(p.get("tp") or 1), int(p.get("mbs") or 0))
    if str(raw.get("container")) != "25.09" or key not in OFFLOAD_2509:
        return None
    n, where, recipe_fp8 = OFFLOAD_2509[key]
    assumed.append(f"cpu_offloading_num_layers {n} from Megatron-Bridge v0.1.0rc3 {where} (the 25.09 recipes; "
                   f"the row states none)")
    return {"cpu_offloading_num_layers": n, **({"fp8_recipe": recipe_fp8} if recipe_fp8 else {})}
