"""The training task a published row ran, for both row readers (`rows.row_job`, `moe_rows.moe_row_job`):
pre-training; supervised fine-tuning, the same full-parameter step over packed samples; LoRA, the frozen base
with low-rank adapters (specs/peft.py, formulation/lora.py).

Megatron-Bridge's performance scripts (`--task pretrain|sft|lora`, scripts/performance/argument_parser.py from
v0.2.0) pack their fine-tuning samples into sequences of the row's length (`packed_sequence_specs.
packed_sequence_size = seq_length`, padded to it: `pad_to_max_length`), whose samples attend only within
themselves, so the one causal sequence of that length prices the attention from above."""

from __future__ import annotations

from typing import Any

from ..specs.peft import LORA_RANK, LORA_TARGETS

TASKS = ("pretrain", "sft", "lora")
# LoRA as a source's scripts set it, where they differ from Megatron-Bridge's defaults (`LORA_RANK`, `LORA_TARGETS`):
# (source, catalog key of the row) -> (rank, target modules, evidence). Megatron-Bridge v0.3.0 to v0.5.x
# scripts/performance/configs/llama/llama3_llm_finetune.py and v0.6.0 perf_recipes/llama/*/llama3.py
# ("Override target_modules to only apply LoRA to QKV": `cfg.peft.target_modules = ["linear_qkv"]`) over
# src/megatron/bridge/recipes/llama/llama3.py `llama3_70b_peft_config` ("70B uses dim=16, alpha=32").
LORA_SETTINGS: dict[tuple[str, str], tuple[int, tuple[str, ...], str]] = {
    ("mbridge_perf", "llama3-70b"): (16, ("linear_qkv",), "Megatron-Bridge's llama3_70b_peft_config (dim 16) and its "
                                     "perf scripts' target_modules ['linear_qkv']"),
}


def task_problem(raw: dict, moe: bool = False) -> str | None:
    """Why a row's task is not priced (None: it is); LoRA is priced on dense transformer models (specs/peft.py)."""
    task = raw.get("task")
    if task in (None, *TASKS) and not (task == "lora" and moe):
        return None
    if task == "lora":
        return ("lora on a mixture-of-experts model: its expert adapters are not modelled (LoRA is priced on dense "
                "transformer models)")
    return f"{task}: not a training task the formulation prices (pretrain, sft or lora)"


def task_settings(raw: dict, assumed: list[str]) -> dict[str, Any]:
    """The JobSpec settings of a row's task (none for pre-training), what they assume said in `assumed`."""
    task = raw.get("task")
    if task == "sft":
        assumed.append("supervised fine-tuning: every weight trained, priced as a pre-training step; its packed "
                       "samples priced as one causal sequence of the packed length (attention bounded above)")
        return {}
    if task != "lora":
        return {}
    key = (str(raw.get("source")), str((raw.get("model") or {}).get("key")))
    rank, targets, evidence = LORA_SETTINGS.get(key, (LORA_RANK, LORA_TARGETS, "Megatron-Bridge's LoRA defaults"))
    assumed.append(f"LoRA rank {rank} on {', '.join(targets)} ({evidence}); packed samples priced as one causal "
                   f"sequence of the packed length (attention bounded above)")
    return dict(peft="lora", lora_rank=rank, lora_target_modules=targets)
