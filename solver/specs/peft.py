"""Parameter-efficient fine-tuning as Megatron-Bridge runs it: LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of
Large Language Models") on Megatron-Core's linear layers, every base weight frozen.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge v0.5.0, src/megatron/bridge/peft/lora.py `LoRA`): `target_modules`
defaults to ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], `dim` (the rank) to 32, `alpha` 32, dropout 0;
each targeted linear gains a `ParallelLinearAdapter` (A: in x r, B: r x out, split over TP as the base linear is)
whose output is added to the base linear's. The base model's weights, embedding and output layer included, are
frozen (`requires_grad = False`), so they get no weight gradient, no main-gradient buffer, no optimizer state and
no data-parallel reduction; only the adapters train. The formulation that prices it: formulation/lora.py.
"""

from __future__ import annotations

from typing import Literal

Peft = Literal["none", "lora"]
LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
LORA_TARGETS: tuple[LoraTarget, ...] = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")  # Bridge's default
LORA_RANK = 32  # Bridge's LoRA `dim` default
FROZEN_ZERO_UNPRICED = (2, 3)  # a LoRA job's searched ZeRO stages are 0 and 1 (space.enumeration)


def peft_problem(job) -> str | None:
    """Why the job's (a JobSpec's) PEFT settings cannot be priced (one line naming the fix), or None. LoRA is priced as
    Megatron-Bridge runs it (framework megatron) on dense transformer models whose attention is Megatron's
    linear_qkv / linear_proj (no multi-latent attention, experts, hybrid layers or MTP block: their adapters'
    placement differs and is not modelled)."""
    model = job.model
    if job.peft == "none":
        if job.lora_rank != LORA_RANK or tuple(job.lora_target_modules) != LORA_TARGETS:
            return "lora_rank / lora_target_modules apply with peft lora only; set peft lora or drop them"
        return None
    if job.framework != "megatron":
        return (f"peft lora is priced as Megatron-Bridge runs it (Megatron-Core's linears with adapters); framework "
                f"{job.framework} is not: use framework megatron or peft none")
    kind = ("a mixture-of-experts" if model.is_moe else "a hybrid" if model.is_hybrid
            else "a multi-latent-attention" if model.multi_latent_attention else "an MTP" if model.mtp_num_layers
            else None)
    if kind:
        return (f"peft lora is priced for dense transformer models only ({model.name} is {kind} model, whose "
                f"adapters are not modelled); use peft none")
    sharded = sorted(set(job.constraints.zero or ()) & set(FROZEN_ZERO_UNPRICED))
    if sharded:
        return (f"zero allows {sharded} with peft lora: the frozen base weights stay whole on every rank "
                f"(Megatron-Bridge's LoRA runs DDP or the distributed optimizer over the adapters; ZeRO-2/3 sharding "
                f"of frozen weights is not priced); allow zero 0 or 1")
    if not job.lora_target_modules:
        return "lora_target_modules is empty: name at least one of " + ", ".join(LORA_TARGETS)
    return None
