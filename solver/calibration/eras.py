"""Facts of the software that ran a published row, for what the row leaves unstated (`rows.row_job` reads them;
`rows` module docstring): the software of the row's time (`ERA`, `era_of`), the settings a source's own launch
scripts fix (`SOURCE_SETTINGS`) and the attention kernel they ran (`SOURCE_KERNEL`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from .names import squeezed

GradReduceDtype = Literal["fp32", "bf16"]  # JobSpec.grad_reduce_dtype
# DeepSpeed's ZeRO-3 before v0.5.5 (2021-11): per-parameter gathers after a device synchronisation
# (JobSpec.zero3_gathers, formulation/layer_terms.per_parameter_zero3_s); v0.5.5 coalesced them
DEEPSPEED_ZERO3 = "per_parameter"
# Software of the time, for knobs a row leaves unstated (see the module docstring).
ERA: dict[str, dict[str, Any]] = {
    "megatron_2020_readme": {"sequence_parallel": (False,), "recompute": ("full",), "zero": (0,), "flash": False},
    "narayanan2021": {"sequence_parallel": (False,), "zero": (0,), "flash": False, "overlap_grad_reduce": False,
                      "zero3_gathers": DEEPSPEED_ZERO3},
    "korthikanti2022": {"flash": False, "overlap_grad_reduce": False},
}
# Settings a source's own launch scripts fix for every run it publishes, with the evidence a row's
# `assumed` quotes. Gradients in bf16: Megatron-Bridge scripts/performance/configs/*/*_llm_pretrain.py
# (v0.2.0-v0.5.x) and src/megatron/bridge/perf_recipes/_common.py (v0.6.0) set grad_reduce_in_fp32 = False
# (mixed_precision and ddp), as NeMo 2.0 scripts/performance does with FP8; NVIDIA/dgxc-benchmarking@v24.11.1
# (llama3.1/, nemotron/, grok1/ yamls) sets optim.grad_sync_dtype: bf16 with Apex's distributed_fused_adam, whose
# contiguous gradient buffer has that dtype (apex/contrib/optimizers/distributed_fused_adam.py `_init_grad_buffer`).
_SCRIPTS, NEMO_DOCS = "the source's launch scripts: grad_reduce_in_fp32 = False", ("nemo_docs_2502", "nemo_docs_2504", "nemo_docs_2507")
_DGXC_YAML = "the source's yaml: optim.grad_sync_dtype bf16, Apex distributed_fused_adam's gradient buffer in it"
SOURCE_SETTINGS: dict[str, dict[str, tuple[GradReduceDtype, str]]] = {
    **{src: {"grad_reduce_dtype": ("bf16", _SCRIPTS)} for src in ("mbridge_perf", *NEMO_DOCS)},
    "dgxc_v24111": {"grad_reduce_dtype": ("bf16", _DGXC_YAML)},
    # Megatron-LM's README tables of Megatron-Core r0.8.0 on H100: its arguments.py (core_r0.8.0, `validate_args`)
    # sets accumulate_allreduce_grads_in_fp32 = True for every bf16 run ("bfloat16 requires gradient
    # accumulation and all-reduce to be done in fp32"), whatever the flags
    "megatron_core_h100_2024": {"grad_reduce_dtype": ("fp32", "Megatron-Core r0.8.0: bf16 reduces gradients in fp32")}}
# Adam state a source's yaml fixes for one model (source, model name): NVIDIA/dgxc-benchmarking@v24.11.1
# nemotron/nemotron4-340b-synth.yaml alone sets `optim.dtype: bf16` for Apex's distributed_fused_adam (its other yamls
# keep fp32 state). NeMo v2.0.0 `MegatronBaseModel.setup_optimization` then keeps Adam's moments in bf16 and, the model
# being bf16 (megatron_amp_O2), stores no master copy (store_params False), or a bf16 one when the launch turns FP8
# parameters on (nemotron/launch.sh: +model.fp8_params for fp8 runs): 4 or 6 bytes per parameter, sharded over the
# data-parallel ranks. Priced as Megatron's precision-aware optimizer with bf16 moments (6: exact for fp8, an upper
# bound for bf16).
_DGXC_340B_YAML = ("the source's yaml nemotron4-340b-synth.yaml: optim.dtype bf16, NeMo's distributed Adam then "
                   "keeps bf16 moments and no fp32 master")
SOURCE_OPTIMIZER: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    ("dgxc_v24111", "nemotron4340b"): ({"precision_aware_optimizer": True, "optimizer_moment_dtype": "bf16"},
                                       _DGXC_340B_YAML)}
FLASH_BY_DEFAULT = True  # 2023+ sources: Megatron-Core / NeMo / llm-foundry all run flash attention
# The attention kernel a source's own launch scripts ran, where it is not the rule in `row_job`:
# llm-foundry's throughput tables (scripts/train/benchmarking/README.md, last tables 2024-01-06 @5e85bd62)
# were taken with submit_benchmarks.py, whose `--attn_impl` defaults to 'triton' (sweep.sh never sets it) and
# whose mpt-*.yaml say `attn_impl: triton`: llmfoundry/models/layers/flash_attn_triton.py, a copy of
# FlashAttention's 2022 Triton port ("Overall Triton forward + backward is slightly slower than CUDA
# forward + backward" of FlashAttention-1, its header) -- the FlashAttention-1 generation, not FlashAttention-2.
SOURCE_KERNEL: dict[str, Literal["flash1"]] = {"mosaic_llmfoundry": "flash1"}


def era_of(source: str, text: str) -> dict:
    """The software facts of a row's time for knobs it leaves unstated: the ERA table for
    known sources; otherwise read from the source's own words. Runs dated 2022 or earlier
    had no flash attention in Megatron-style stacks (it reached Megatron-LM and NeMo in 2023),
    2021 or earlier no sequence parallelism, distributed optimizer or overlapped gradient
    reduction; DeepSpeed's pipeline engine reduces gradients after the pipeline flush (not
    overlapped) with ZeRO-1, and Megatron-DeepSpeed has no Megatron sequence parallelism; DeepSpeed's
    ZeRO-3 of 2021 or earlier gathered parameter by parameter (`DEEPSPEED_ZERO3`)."""
    if source in ERA:
        return ERA[source]
    t = text.lower()
    years = [int(y) for y in re.findall(r"(?<!\d)(20[12]\d)(?!\d)", t)]
    era: dict = {}
    if years and max(years) <= 2022:
        era["flash"] = False
    if years and max(years) <= 2021:
        era.update(sequence_parallel=(False,), zero=(0,), overlap_grad_reduce=False)
    if "deepspeed" in t:  # Megatron-DeepSpeed: no Megatron sequence parallelism, ZeRO-1, reduction after the flush
        era.update(overlap_grad_reduce=False, sequence_parallel=(False,))
        era.setdefault("zero", (1,))
        if years and max(years) <= 2021:
            era["zero3_gathers"] = DEEPSPEED_ZERO3
    return era


def fsdp_of(p: dict) -> Literal["megatron", "pytorch", ""]:
    """Which FSDP a row's FSDP column (`parallel.fsdp`) names: Megatron-FSDP (NeMo's and Megatron-Bridge's tables:
    "Megatron-FSDP", "yes (FSDP=1)"), PyTorch FSDP (any other value: llm-foundry's FULL_SHARD, SHARD_GRAD_OP), or
    none ("no (DDP)", "not stated", "column absent", or no column)."""
    text = str(p.get("fsdp") or "").lower()
    if text.startswith(("megatron-fsdp", "yes (fsdp")):
        return "megatron"
    return "" if not text or text.startswith(("no", "not stated", "column absent")) else "pytorch"


def fsdp_zero(p: dict, assumed: list[str]) -> int | None:
    """The ZeRO stage a row's FSDP column names (`fsdp_of`), said in `assumed`: Megatron-FSDP is ZeRO-3
    (optim_grads_params), PyTorch FSDP ZeRO-3 (FULL_SHARD) or ZeRO-2 (SHARD_GRAD_OP: parameters gathered once per
    micro-batch); None without FSDP. The one rule of the dense and MoE readers."""
    kind, text = fsdp_of(p), str(p.get("fsdp") or "")
    if kind == "megatron":
        assumed.append("Megatron-FSDP costed as ZeRO-3 (optim_grads_params)")
        return 3
    if kind == "pytorch" and "shard_grad_op" in text.lower():
        assumed.append("FSDP SHARD_GRAD_OP costed as ZeRO-2 (parameters gathered once per micro-batch)")
        return 2
    if kind == "pytorch":
        assumed.append(f"PyTorch FSDP ({text}) costed as ZeRO-3")
        return 3
    return None


def recipe_block(raw: dict, assumed: list[str] | None = None) -> dict:
    """The recipe block a row's `parallel.other.recipe` states ({} without one). A block that is not an object (a
    file of another source) is read as no recipe, and said in `assumed` when given: the row is read, not refused."""
    block = ((raw.get("parallel") or {}).get("other") or {}).get("recipe") or {}
    if isinstance(block, dict):
        return block
    if assumed is not None:
        assumed.append(f"recipe block {type(block).__name__}, not an object: read as no recipe")
    return {}


def optimizer_settings(raw: dict, assumed: list[str]) -> dict[str, Any]:
    """The Adam-state settings the row's source fixes for its model (`SOURCE_OPTIMIZER`), said in `assumed`."""
    name = squeezed(str((raw.get("model") or {}).get("name") or ""))
    for (source, model), (settings, evidence) in SOURCE_OPTIMIZER.items():
        if raw.get("source") == source and name.startswith(model):
            assumed.append(f"Adam state in bf16 ({evidence})")
            return dict(settings)
    return {}


# Sources that matched each row's recipe on its virtual-pipeline size: Megatron-Bridge's performance summary, whose
# data-file rows attach the perf recipe "whose TP/PP/CP/VP/EP/MBS/GBS/#GPUs match this table row" (the rows' notes).
# Its tables print VP "n/a" for no interleaving, which the file writes as null; the workload configs those rows name
# set no virtual_pipeline_model_parallel_size (scripts/performance/configs/*_workload_base_configs.py at each row's
# tag, v0.3.1-v0.5.0), and `set_workload_base_configs` (scripts/performance/utils/overrides.py) writes that None onto
# the model, which the script's own log prints as "VP: 1". A row without a recipe keeps the best legal vp: a table
# "n/a" alone is not proof (26.02.01's Llama 3 70B GB300 MXFP8 row prints n/a where the v0.3.1 config nearest it
# sets 5).
RECIPE_MATCHED_ON_VP = frozenset({"mbridge_perf"})


def stated_vp(raw: dict, assumed: list) -> tuple[int, ...] | None:
    """The row's virtual-pipeline size as its source states it: the number; 1 without pipelining; 1 where a recipe
    matched on vp leaves it unset (`RECIPE_MATCHED_ON_VP`); else None (the best legal value)."""
    p = raw["parallel"]
    if p.get("vp"):
        return (p["vp"],)
    if p.get("pp") == 1:
        return (1,)
    if p.get("pp") and raw.get("source") in RECIPE_MATCHED_ON_VP and recipe_block(raw):
        assumed.append("vp 1: the matched recipe sets no virtual pipeline (its table prints VP n/a)")
        return (1,)
    return None
