"""Rows of a source whose launch scripts the project has not read: the settings those scripts would fix.

For the sources read so far, what their scripts set for every run is known and applied by source name
(`eras.SOURCE_SETTINGS`: gradients reduced in bf16; `precision_rows.FP8_PARAM_GATHER`: FP8 primary weights).
A row of any other source -- the runs kept aside for the independent check come from such sources -- left
them at Megatron-LM's defaults: gradients reduced in fp32 (`--accumulate-allreduce-grads-in-fp32`, which
Megatron-LM turns on for bf16) and no FP8 weights. Every source read so far (Megatron-Bridge, NeMo 2.0, DGX
Cloud's yamls) turns both the other way, for speed and memory, and a run that ran fits: at the defaults,
DeepSeek-V3 on 256 GB300 at its published layout fits only with Megatron-FSDP's sharded gradients (priced
35% slower), and Megatron-Bridge's dense rows restated under another source name were 16.8% off (at 529a48b).
So both are unstated settings of such a row, left to the best value that fits, as its unstated parallel
knobs are (`moe_rows._best_settings`, `best_of`): restated, Megatron-Bridge's dense rows are then 7.0% off
(5.5% as themselves) and NeMo's as themselves (benchmarks/other_sources.py). A source running Megatron-LM as it
comes is a source read: Megatron-Core's H100 tables of 2024 (r0.8.0 reduces bf16 gradients in fp32 whatever
the flags) are in `eras.SOURCE_SETTINGS`.

Not for a row the software of its time rules on (`eras.era_of`: dated 2022 or earlier, before bf16
reduction and FP8; or a known source's era), nor one that states its FSDP mixed precision, nor a PyTorch FSDP
run (`eras.fsdp_of`): its reduction stays fp32, torchtitan's only choice (`mixed_precision_reduce:
Literal["float32"] = "float32"`, torchtitan/config) and llm-foundry's DEFAULT mixed precision."""

from __future__ import annotations

from typing import Any

from .eras import ERA, SOURCE_SETTINGS, fsdp_of
from .precision_rows import FP8_PARAM_GATHER

CHOICES: dict[str, list[dict[str, Any]]] = {
    "grad_reduce_dtype": [{"grad_reduce_dtype": v} for v in ("fp32", "bf16")],
    "fp8_param_gather": [{"fp8_param_gather": v} for v in (False, True)]}


def unread_source_settings(raw: dict, settings: dict, era: dict | None = None) -> list[str]:
    """The settings (`CHOICES` keys) a row leaves to the best value because its source's scripts are unread
    (module docstring); [] for a source read, a row of an era that rules on them, or one stating them."""
    source = raw.get("source")
    if source in SOURCE_SETTINGS or source in ERA or (era and "flash" in era):
        return []
    p = raw.get("parallel") or {}
    if p.get("fsdp_mixed_precision_mode") or fsdp_of(p) == "pytorch":  # PyTorch FSDP reduces in fp32 (docstring)
        return []
    unstated = ["grad_reduce_dtype"]
    if "fp8_param_gather" not in settings and source not in FP8_PARAM_GATHER:
        unstated.append("fp8_param_gather")
    return unstated


def said(job) -> str:
    """The row's `assumed` line for the values chosen."""
    return (f"the source's gradient dtype and FP8 weights unknown (its scripts unread): the best that fits, "
            f"gradients reduced in {job.grad_reduce_dtype}, FP8 weights gathered: {job.fp8_param_gather}")


def best_of(job, unstated: list[str], layout: str | None = None):
    """`job` with the `unstated` settings at the values whose best configuration the formulation predicts
    fastest, among those whose configuration fits in memory when any does (the run ran); `job` itself when
    nothing is unstated. A value the job's own rules refuse (FP8 weights of a BF16 run) is not tried."""
    from .row_predict import best_settings

    return best_settings(job, [CHOICES[k] for k in unstated], layout) or job


def apply_to(row, era: dict) -> None:
    """A dense row's job (`rows.row_job`) with what the scripts of a source unread would fix at the best value
    that fits, said in the row."""
    unread = unread_source_settings(row.raw, row.job.model_dump(exclude_defaults=True), era)
    if unread:
        row.job = best_of(row.job, unread, row.layout)
        row.assumed.append(said(row.job))
