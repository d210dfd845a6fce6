"""Which parallelisms each software stack runs (`JobSpec.framework`): the one table the
planner's space is narrowed by (`narrow_constraints`, applied by `catalog.load_job` and by
`JobSpec` itself). What each stack costs is priced in `formulation/frameworks.py`.

- megatron: Megatron-LM / Megatron-Core runs every knob the planner has (TP, SP, PP with
  interleaving, CP, EP, distributed optimizer and Megatron-FSDP, selective and full recompute).
- torchtitan (docs/fsdp.md, torchtitan/models/llama3/parallelize.py, distributed/
  activation_checkpoint.py): FSDP2 (`fully_shard`, resharding after forward or not) or DDP,
  TP with or without sequence parallelism, PP (1F1B, Interleaved1F1B), CP, EP for MoE,
  selective and full activation checkpointing. It has no ZeRO-1 (FSDP2 always shards
  gradients): zero 0, 2, 3.
- transformers (Trainer with accelerate: DDP, DeepSpeed ZeRO 1-3 or FSDP): data parallelism
  only in the planner (no Megatron-style TP, PP or CP), gradient checkpointing (full
  recompute) or none, and its MoE layers run every expert on every rank (no EP).
"""

from __future__ import annotations

import numpy as np

FRAMEWORKS = ("megatron", "torchtitan", "transformers")

# knob -> the values the stack runs (absent: any)
ALLOWED: dict[str, dict[str, tuple]] = {
    "megatron": {},
    # counting the embedding / loss as layers of the split is Megatron's (--account-for-*-in-pipeline-split)
    "torchtitan": {"zero": (0, 2, 3), "account_for_embedding": (False,), "account_for_loss": (False,)},
    "transformers": {"tp": (1,), "pp": (1,), "cp": (1,), "vp": (1,), "ep": (1,), "recompute": ("none", "full"),
                     "account_for_embedding": (False,), "account_for_loss": (False,)},
}

# precisions a stack trains in, where not every one: transformers' Trainer mixes precision by
# torch.autocast (bf16 or fp16); FP8 GEMMs are Transformer Engine's (megatron) or torchao's
# Float8Linear (torchtitan's float8 converter)
PRECISIONS_RUN: dict[str, tuple[str, ...]] = {"transformers": ("bf16", "fp16")}


def narrow_constraints(framework: str, cons: dict, knobs) -> dict:
    """The constraint mapping with the stack's limits applied to the `knobs` the constraints
    have (`Constraints.model_fields`: expert parallelism only where the MoE formulation adds
    it); ValueError((knob, message)) when the user forced a value the stack cannot run."""
    out = dict(cons)
    for knob, allowed in ALLOWED[framework].items():
        if knob not in knobs:
            continue
        given = out.get(knob)
        if given is not None:
            bad = [v for v in given if v not in allowed]
            if bad:
                runs = ", ".join(str(v) for v in allowed)
                raise ValueError(knob, f"{knob} {bad[0]} is not run by framework {framework} ({knob} {runs} only); "
                                       f"leave {knob} free or use framework megatron")
            continue
        bound = out.get(f"{knob}_max")
        kept = tuple(v for v in allowed if bound is None or not isinstance(v, int) or v <= bound)
        out[knob] = kept or allowed
    return out


# The value an explicit configuration takes for a knob it leaves out when the usual default
# (selective recompute, zero 1: space/rules.py) is one the stack does not run: transformers
# trains without gradient checkpointing unless asked, torchtitan's nearest to the distributed
# optimizer is FSDP2 without resharding after forward (zero 2).
FALLBACK = {"recompute": "none", "zero": 2}


def default_for(framework: str, knob: str, value):
    """`value`, or the stack's fallback for `knob` when the stack does not run `value`."""
    allowed = ALLOWED[framework].get(knob)
    return value if allowed is None or value in allowed else FALLBACK[knob]


def config_conflicts(framework: str, config: dict) -> list[tuple[str, str]]:
    """(knob, message) for each value of an explicit configuration the stack does not run."""
    out = []
    for knob, allowed in ALLOWED[framework].items():
        if knob in config and config[knob] not in allowed:
            runs = ", ".join(str(v) for v in allowed)
            out.append((knob, f"{config[knob]} is not run by framework {framework} ({knob} {runs} only); "
                              f"use framework megatron"))
    return out


def users_constraints(framework: str, cons: dict) -> dict:
    """The constraints the user set: `cons` less the knobs its framework narrowed and nobody
    narrowed further (what a user can relax; the rest needs another framework)."""
    imposed = ALLOWED[framework]
    return {k: v for k, v in cons.items() if k not in imposed or tuple(v) != tuple(imposed[k])}


def torchtitan_moe_family(model) -> str | None:
    """Which torchtitan MoE decoder builds `model`'s architecture: deepseek_v3 (multi-latent
    attention, shared experts, dense first layers), qwen3 (GQA with QK norm, every layer routed, no
    shared expert), gpt_oss (linear biases, no shared expert); None when torchtitan has none (DeepSeek Sparse
    Attention and DeepSeek-V4's compressed attention among them)."""
    shared = model.moe_shared_expert_intermediate_size is not None
    # its deepseek_v3 decoder attends densely: no lightning indexer, no sparse MLA; nor DeepSeek-V4's compressors,
    # mHC residual streams or hash routing
    if model.is_dsa or model.is_dsv4:
        return None
    if model.multi_latent_attention:
        return "deepseek_v3"
    if shared or model.moe_router_score_function != "softmax" or model.num_dense_layers:
        return None
    if model.qk_norm and not model.add_bias_linear:
        return "qwen3"
    if model.add_bias_linear and not model.qk_norm:
        return "gpt_oss"
    return None


# The torchtitan MoE decoders whose layers formulation/eager_moe.py counts: qwen3's (torchtitan's GQA block,
# frameworks.TORCHTITAN_SAVED), deepseek_v3's (its multi-latent attention, eager_attention.py; shared experts, expert
# groups) and gpt_oss's (attention sinks, eager_attention.py; experts with biases and the clamped SwiGLU).
TORCHTITAN_PRICED_MOE = ("qwen3", "deepseek_v3", "gpt_oss")


def torchtitan_moe_unpriced(model) -> str | None:
    """Why `--framework torchtitan` cannot price this mixture-of-experts model (one line), or None when it can: its
    torchtitan decoder is one `eager_moe.py` counts (`TORCHTITAN_PRICED_MOE`)."""
    family = torchtitan_moe_family(model)
    if family in TORCHTITAN_PRICED_MOE:
        return None
    runs = (f"torchtitan runs it as its {family} decoder, whose attention and experts the torchtitan profile does "
            f"not count" if family else "torchtitan has no decoder for it (its MoE "
            "decoders: Qwen3-MoE, DeepSeek-V3 with MLA, GPT-OSS)")
    return f"'{model.name}' is a mixture-of-experts model and {runs}: use framework megatron"


def expert_conflicts(framework: str, *, tp: int, ep: int, etp: int, cp: int = 1, dp: int = 1,
                     zero: int | None = None) -> list[tuple[str, str]]:
    """(knob, message) where (ep, etp) is not the stack's form: torchtitan shards routed experts on EP alone when
    ep > 1 and like the dense MLP over TP when ep = 1 (torchtitan/models/common/MOE_SHARDING.md at b5bcd76), so etp
    is 1 with EP and tp without; and EP borrows its ranks from FSDP and TP (`torchtitan_ep_fits`, checked where
    `zero` is given)."""
    if framework != "torchtitan":
        return []
    errs = []
    if etp != torchtitan_etp(tp, ep):
        errs.append(("etp", f"{etp} is not torchtitan's form: it shards the experts on EP alone with ep > 1 (etp 1) "
                            f"and over TP with ep 1 (etp = tp = {tp}); leave etp out or use framework megatron"))
    if zero is not None and not torchtitan_ep_fits(tp=tp, cp=cp, dp=dp, zero=zero, ep=ep):
        shard = dp if zero >= 1 else 1
        errs.append(("ep", f"{ep} does not divide torchtitan's dp_shard x cp x tp = {shard} x {cp} x {tp} (EP borrows "
                           f"ranks from FSDP and TP; zero 0 runs DDP, dp_shard 1): choose zero 2 or 3, or an ep that "
                           f"divides it"))
    return errs


def torchtitan_ep_fits(*, tp, cp, dp, zero, ep):
    """Whether torchtitan can run EP `ep` (arrays or ints): torchtitan's ParallelDims._validate
    (torchtitan/distributed/parallel_dims.py) needs it to divide dp_shard x cp x tp, dp_shard being the FSDP degree
    (dp at zero 2/3, 1 under DDP, zero 0)."""
    shard = np.where(np.asarray(zero) >= 1, dp, 1)
    return (shard * np.asarray(cp) * np.asarray(tp)) % np.asarray(ep) == 0


def torchtitan_etp(tp: int, ep: int) -> int:
    """torchtitan's expert tensor parallelism for (tp, ep): 1 with EP, tp without (`expert_conflicts`)."""
    return 1 if ep > 1 else tp


def windows_skipped(framework: str, model) -> bool:
    """Whether the stack's attention kernel skips the blocks a sliding window masks: Transformer Engine's (Megatron), and
    torchtitan's for its gpt_oss decoder (varlen's window_size / flex's sliding-window block mask, models/gpt_oss);
    torchtitan's other decoders build no window and transformers masks the whole s x s (frameworks.masked_attention_s)."""
    return framework == "megatron" or (framework == "torchtitan" and model.is_moe
                                       and torchtitan_moe_family(model) == "gpt_oss")
