"""The JSON of an optimize result (`solveplan optimize --json`): the plan's evaluation keys at
the top level, then the verdict, the Megatron-LM launch arguments, the comparisons, the other
top-k plans, the shortfall, the notes and the search statistics (the only block that holds
measurements: wall times, branch counts)."""

from __future__ import annotations

from ..formulation.job import job_assumptions
from .megatron import megatron_args
from .torchtitan import CURRENT, torchtitan_config, torchtitan_flags
from .transformers import deepspeed_config, launcher, trainer_flags, transformers_notes, written_model_config


def _transformers(job, plan) -> dict | None:
    """The Trainer launch (render/transformers.py) of a plan priced for the transformers stack; None otherwise."""
    if job.framework != "transformers":
        return None
    return {"launcher": launcher(job, plan), "args": trainer_flags(job, plan),
            "deepspeed_config": deepspeed_config(job, plan), "model_config": written_model_config(job),
            "notes": transformers_notes(job, plan)}


def result_json(result, job, torchtitan_version: str = CURRENT) -> dict:
    d: dict = result.plan.model_dump() if result.plan is not None else {}
    d.update(status=result.status, bound_step_time_s=result.bound_step_time_s, gap=result.gap,
             tolerance_s=result.tolerance_s, prefer=getattr(result, "prefer", "fastest"),
             proof=getattr(result, "proof", "the fastest plan of the formulation"))
    d["margins"] = [m.model_dump() for m in getattr(result, "margins", [])]
    tb = getattr(result, "tie_break", None)
    d["tie_break"] = tb.model_dump() if tb is not None else None
    cost = getattr(result, "cost", None)
    d["cost"] = cost.model_dump() if cost is not None else None
    if result.plan is not None:
        ma = megatron_args(job, result.plan)
        d["megatron_args"] = ma.args
        d["megatron_env"] = ma.env
        d["megatron_notes"] = ma.notes
        d["torchtitan_version"] = torchtitan_version
        d["torchtitan"], d["torchtitan_notes"] = torchtitan_config(job, result.plan, torchtitan_version)
        d["torchtitan_flags"] = torchtitan_flags(job, result.plan, torchtitan_version)
        d["transformers"] = _transformers(job, result.plan)
    d["textbook"] = result.textbook.model_dump() if getattr(result, "textbook", None) is not None else None
    d["compare"] = result.compare.model_dump() if getattr(result, "compare", None) is not None else None
    if getattr(result, "placed", False):  # the joint model's comparisons and explanation
        d["pools_alone"] = [c.model_dump() for c in result.pools_alone]
        d["default_order"] = result.default_order.model_dump() if result.default_order is not None else None
        d["explanation"] = list(result.explanation)
    d["alternatives"] = [p.model_dump() for p in result.alternatives]
    d["top_k_asked"] = getattr(result, "top_k_asked", 1)
    d["top_k_found"] = getattr(result, "top_k_found", 0 if result.plan is None else 1 + len(result.alternatives))
    d["shortfall"] = result.shortfall.model_dump() if result.shortfall is not None else None
    d["assumptions"] = job_assumptions(job)  # also when no plan: what any plan on this job would assume
    d["notes"] = list(result.notes)
    d["search"] = result.search.model_dump()
    return d
