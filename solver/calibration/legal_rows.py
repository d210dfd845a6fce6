"""A published row whose stated configuration breaks one of Megatron's rules: the run ran, so its source
misstates one knob. The knob the first broken rule names is taken as unstated (its best legal value), said in
the row's assumptions; a rule that blames no stated knob alone leaves the row skipped, naming the rule. One rule
for every row reader (`rows.row_job`, `moe_rows.moe_row_job`)."""

from __future__ import annotations

from ..errors import InputError
from ..specs import JobSpec


def broken_rule(job: JobSpec) -> tuple[str, str] | None:
    """(knob, rule) of the first of Megatron's rules the job's stated knobs break (`evaluate`'s check,
    `space.rules.constrained_config`), or None when none alone does."""
    from ..space.rules import constrained_config

    try:
        constrained_config(job, {})
    except InputError as exc:
        return exc.field, exc.message
    return None


def broken_rule_text(job: JobSpec) -> str:
    """': <knob>: <rule>' for a skip reason, '' when no single knob breaks a rule."""
    broken = broken_rule(job)
    return f": {broken[0]}: {broken[1]}" if broken else ""


def with_blamed_knob_freed(job: JobSpec, assumed: list[str]) -> JobSpec | None:
    """`job` with the stated knob the first broken rule names left free, the reason added to `assumed`; None
    when no stated knob is to blame. The caller checks that something is legal then."""
    broken = broken_rule(job)
    if broken is None or getattr(job.constraints, broken[0], None) is None:
        return None
    knob, rule = broken
    assumed.append(f"{knob} as stated breaks Megatron's rules ({rule}): the run ran, so {knob} is taken as "
                   f"unstated, at its best legal value")
    return job.model_copy(update={"constraints": job.constraints.model_copy(update={knob: None})})
