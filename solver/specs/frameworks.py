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
