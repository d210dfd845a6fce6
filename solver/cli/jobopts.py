"""Options shared by the commands that take a training job (evaluate, optimize, admit):
the model, the cluster, batch and sequence, and constraints on every planning knob.

A job can also come from a file (`--job job.yaml`): keys `model`, `cluster` (catalog names,
file paths or inline mappings), `global_batch_size`, `seq_length`, `precision`,
`flash_attention`, `constraints`. Flags given on the command line override the file.
"""

from __future__ import annotations

from typing import Any, Optional

import click

from ..catalog import _cluster_from_mapping, build, load_cluster, load_model, read_mapping
from ..errors import InputError
from ..specs import Constraints, JobSpec, ModelSpec


class IntList(click.ParamType):
    """A comma-separated list of positive integers: `4` or `4,8`."""

    name = "INT[,INT...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            vals = tuple(int(x) for x in str(value).split(",") if x.strip() != "")
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers (e.g. 4 or 4,8)", param, ctx)
        if not vals or any(v <= 0 for v in vals):
            self.fail(f"{value!r}: give positive integers (e.g. 4 or 4,8)", param, ctx)
        return vals


class ChoiceList(click.ParamType):
    name = "CHOICE[,CHOICE...]"

    def __init__(self, choices):
        self.choices = tuple(choices)

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        vals = tuple(x.strip() for x in str(value).split(",") if x.strip())
        bad = [v for v in vals if v not in self.choices]
        if bad or not vals:
            self.fail(f"{value!r}: choose from {', '.join(self.choices)} (comma-separated)", param, ctx)
        return vals


INT_LIST = IntList()

_BASE = [
    click.option("--model", "model", default=None, help="Catalog name, model YAML/JSON, or a Hugging Face config.json."),
    click.option("--cluster", "cluster", default=None, help="Catalog name, <gpu>x<N> (e.g. a100x64), or a cluster YAML/JSON."),
    click.option("--job", "job_file", default=None, type=click.Path(dir_okay=False), help="Job file (YAML/JSON); flags override it."),
    click.option("--global-batch-size", type=int, default=None, help="Sequences per optimizer step (default: the model's recipe)."),
    click.option("--seq-len", "seq_len", type=int, default=None, help="Sequence length (default: the model's recipe)."),
    click.option("--precision", type=click.Choice(["bf16", "fp8"]), default=None, help="Compute precision of the GEMMs."),
    click.option("--flash-attention/--no-flash-attention", default=None, help="Fused attention (default on)."),
]

_CONSTRAINTS = [
    click.option("--tp", type=INT_LIST, default=None, help="Allowed tensor-parallel sizes, e.g. 4,8."),
    click.option("--pp", type=INT_LIST, default=None, help="Allowed pipeline-parallel sizes."),
    click.option("--dp", type=INT_LIST, default=None, help="Allowed data-parallel sizes."),
    click.option("--cp", type=INT_LIST, default=None, help="Allowed context-parallel sizes."),
    click.option("--vp", type=INT_LIST, default=None, help="Allowed virtual pipeline stages per rank."),
    click.option("--micro-batch-size", type=INT_LIST, default=None, help="Allowed micro-batch sizes."),
    click.option("--tp-max", type=click.IntRange(min=1), default=None),
    click.option("--pp-max", type=click.IntRange(min=1), default=None),
    click.option("--dp-max", type=click.IntRange(min=1), default=None),
    click.option("--cp-max", type=click.IntRange(min=1), default=None),
    click.option("--vp-max", type=click.IntRange(min=1), default=None),
    click.option("--micro-batch-size-max", type=click.IntRange(min=1), default=None),
    click.option("--recompute", type=ChoiceList(("none", "selective", "full")), default=None, help="Allowed recomputation modes."),
    click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Fix sequence parallelism on or off."),
    click.option("--zero", type=ChoiceList(("0", "1", "2", "3")), default=None, help="Allowed optimizer sharding: 0 plain DP, 1 distributed optimizer, 2, 3."),
    click.option("--even-split", is_flag=True, default=False, help="Only even (balanced) layer splits."),
]

CONSTRAINT_KEYS = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "tp_max", "pp_max", "dp_max", "cp_max",
                   "vp_max", "micro_batch_size_max", "recompute", "sequence_parallel", "zero", "even_split")
BASE_KEYS = ("model", "cluster", "job_file", "global_batch_size", "seq_len", "precision", "flash_attention")


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


def job_base_options(f):
    """--model, --cluster, --job, --global-batch-size, --seq-len, --precision, --flash-attention."""
    return _apply(_BASE, f)


def constraint_options(f):
    """--tp 4,8, --pp-max 4, --recompute selective, ... (constraints on the planning knobs)."""
    return _apply(_CONSTRAINTS, f)


def job_options(f):
    return job_base_options(constraint_options(f))


def pop_keys(kwargs: dict, keys) -> dict:
    return {k: kwargs.pop(k) for k in keys if k in kwargs}


def constraints_from_flags(flags: dict, base: Optional[dict] = None) -> Constraints:
    data: dict[str, Any] = dict(base or {})
    for key in CONSTRAINT_KEYS:
        val = flags.get(key)
        if val is None or (key == "even_split" and not val):
            continue
        if key == "even_split":
            data["uneven_split"] = False
        elif key == "sequence_parallel":
            data[key] = (val,)
        elif key == "zero":
            data[key] = tuple(int(x) for x in val)
        else:
            data[key] = val
    return build(Constraints, data, "constraints")


def _resolve_model(ref, field="model") -> ModelSpec:
    if isinstance(ref, dict):
        ref = dict(ref)
        ref.setdefault("name", "custom")
        return build(ModelSpec, ref, field)
    if not isinstance(ref, str):
        raise InputError(field, "give a catalog name, a file path or a mapping of model fields")
    return load_model(ref)


def _resolve_cluster(ref, field="cluster"):
    if isinstance(ref, dict):
        ref = dict(ref)
        ref.setdefault("name", "custom")
        return _cluster_from_mapping(ref, field)
    if not isinstance(ref, str):
        raise InputError(field, "give a catalog name, <gpu>x<N>, a file path or a mapping of cluster fields")
    return load_cluster(ref)


def job_from_mapping(data: dict, overrides: Optional[dict] = None, constraint_flags: Optional[dict] = None,
                     field_prefix: str = "") -> JobSpec:
    """Build a JobSpec from a job mapping (file, JSON line, HTTP body), applying overrides."""
    data = dict(data)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    allowed = {"model", "cluster", "global_batch_size", "seq_length", "precision", "flash_attention", "constraints", "name", "id"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(f"{field_prefix}{unknown[0]}", f"unknown key; allowed keys: {', '.join(sorted(allowed - {'name', 'id'}))}")
    data.update(overrides)
    for key in ("model", "cluster"):
        if data.get(key) is None:
            flag = f"--{key}" if not field_prefix else f"{field_prefix}{key}"
            raise InputError(flag, f"missing; give a {key} (see `solveplan {key}s`)")
    model = _resolve_model(data["model"], f"{field_prefix}model")
    cluster = _resolve_cluster(data["cluster"], f"{field_prefix}cluster")
    cons_base = data.get("constraints") or {}
    if not isinstance(cons_base, dict):
        raise InputError(f"{field_prefix}constraints", "must be a mapping of knob -> allowed values")
    constraints = constraints_from_flags(constraint_flags or {}, cons_base)
    job = {
        "model": model,
        "cluster": cluster,
        "global_batch_size": data.get("global_batch_size") or model.global_batch_size,
        "seq_length": data.get("seq_length") or model.seq_length,
        "constraints": constraints,
    }
    for key in ("precision", "flash_attention"):
        if data.get(key) is not None:
            job[key] = data[key]
    return build(JobSpec, job, f"{field_prefix}job".rstrip(".") if field_prefix else "job")


def build_job(model=None, cluster=None, job_file=None, global_batch_size=None, seq_len=None, precision=None,
              flash_attention=None, **constraint_flags) -> JobSpec:
    """JobSpec from the shared CLI options (a job file first, flags override)."""
    data: dict[str, Any] = read_mapping(job_file, "--job") if job_file else {}
    for name, val in (("--global-batch-size", global_batch_size), ("--seq-len", seq_len)):
        if val is not None and val <= 0:
            raise InputError(name, f"must be a positive integer (got {val})")
    overrides = {"model": model, "cluster": cluster, "global_batch_size": global_batch_size,
                 "seq_length": seq_len, "precision": precision, "flash_attention": flash_attention}
    return job_from_mapping(data, overrides, constraint_flags)
