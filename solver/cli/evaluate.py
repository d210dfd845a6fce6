"""`solveplan evaluate`: predict step time, throughput, MFU and per-stage memory of one
explicit configuration with the float formulation."""

from __future__ import annotations

import json

import click

from ..errors import InputError
from .jobopts import build_job, job_base_options



def parse_layers(text: str, pp: int, num_layers: int) -> list[int]:
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError("--layers-per-stage", f"{text!r} is not a comma-separated list of integers") from None
    if len(layers) != pp:
        raise InputError("--layers-per-stage", f"{len(layers)} entries for pp={pp}; give one count per stage")
    if any(x < 1 for x in layers):
        raise InputError("--layers-per-stage", f"every stage needs at least one layer (got {text})")
    if sum(layers) != num_layers:
        raise InputError("--layers-per-stage", f"counts sum to {sum(layers)} but the model has {num_layers} layers")
    return layers


def evaluate_config(job, *, tp=1, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="selective",
                    sequence_parallel=None, zero=1, layers=None):
    """Plan for one explicit configuration; InputError naming the flag when it is illegal."""
    from ..formulation.splits import balanced_split
    from ..plan import ParallelConfig, make_plan
    from ..space.enumeration import config_violations

    if sequence_parallel is None:
        sequence_parallel = tp > 1
    dp, errs = config_violations(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=micro_batch_size,
                                 recompute=recompute, sequence_parallel=sequence_parallel, zero=zero)
    if errs:
        field, _, msg = errs[0].partition(": ")
        more = f" (and {len(errs) - 1} more: {'; '.join(errs[1:])})" if len(errs) > 1 else ""
        raise InputError(field, msg + more)
    if layers is None:
        if pp * vp > job.model.num_layers:
            raise InputError("--vp", "too many stages for the layers")
        layers = balanced_split(job.model.num_layers, pp)
    # with vp > 1 a rank holding fewer than vp layers has empty virtual chunks: legal in
    # Megatron Core's --pipeline-model-parallel-layout ("E||t|L": empty stages are allowed)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=micro_batch_size,
                         num_microbatches=job.global_batch_size // (dp * micro_batch_size), recompute=recompute,
                         sequence_parallel=sequence_parallel, zero=zero)
    return make_plan(job, par, layers)


@click.command()
@job_base_options
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--vp", type=click.IntRange(min=1), default=1, show_default=True, help="Virtual pipeline stages per rank.")
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="selective", show_default=True)
@click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Default: on when tp > 1.")
@click.option("--zero", type=click.Choice(["0", "1", "2", "3"]), default=None, help="Default: 1 (distributed optimizer) when dp*cp > 1.")
@click.option("--layers-per-stage", default=None, help="Comma-separated layer counts, one per pipeline stage.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evaluate(tp, pp, cp, vp, micro_batch_size, recompute, sequence_parallel, zero, layers_per_stage, as_json, **base):
    """Predict step time, throughput, MFU and per-stage memory of one configuration."""
    job = build_job(**base)
    N = job.cluster.num_gpus
    if zero is None:
        zero = 1 if N % (tp * cp * pp) == 0 and N // (tp * pp) > 1 else 0
    layers = parse_layers(layers_per_stage, pp, job.model.num_layers) if layers_per_stage else None
    plan = evaluate_config(job, tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=micro_batch_size, recompute=recompute,
                           sequence_parallel=sequence_parallel, zero=int(zero), layers=layers)
    if as_json:
        click.echo(json.dumps(plan.model_dump(), indent=2))
    else:
        import sys

        from rich.console import Console

        from ..render.table import render_plan

        Console(width=None if sys.stdout.isatty() else 160).print(render_plan(plan))
