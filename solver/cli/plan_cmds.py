"""`solveplan optimize`: the fastest plan that fits, with the solver's proof; `solveplan
evaluate`: one explicit configuration, predicted by the float formulation.

    solveplan optimize --model gpt3-13b --cluster a100x64
    solveplan optimize --model gpt3-175b --cluster a100x1024 --format megatron
    solveplan optimize --model llama3.1-8b --cluster h100x64 --format torchtitan
    solveplan optimize --model llama3.1-70b --cluster h100x256 --top-k 3 --json
    solveplan optimize --model gpt3-13b --cluster a100x64 --compare "tp=8,pp=2,mbs=1"

Exit codes: 0 a plan (OPTIMAL, or FEASIBLE when the time limit stopped the proof), 2 bad input,
3 infeasible (the shortfall is printed on stderr), 4 no plan (or, with --top-k, fewer plans than
asked) within the time limit.
The JSON (`--json` or `--format json`) is identical across runs, seeds and worker counts except
the `search` block, which holds measurements (wall times, branch counts).
"""

from __future__ import annotations

import json
import sys
import time

import click

from ..errors import InputError
from ..search.result import INFEASIBLE
from ..specs.writing import PLOT_SUFFIXES, check_output, write_text
from . import EXIT_INFEASIBLE, EXIT_NO_PLAN_IN_TIME
from .options import (
    OUTPUT,
    SECONDS,
    build_job,
    config_options,
    is_digits,
    job_base_options,
    job_options,
    parse_ints,
    split_options,
)

_ALIASES = {"mbs": "micro_batch_size", "micro-batch-size": "micro_batch_size", "micro_batch_size": "micro_batch_size",
            "sp": "sequence_parallel", "sequence-parallel": "sequence_parallel", "sequence_parallel": "sequence_parallel",
            "tp": "tp", "pp": "pp", "cp": "cp", "vp": "vp", "dp": "dp", "zero": "zero", "recompute": "recompute",
            "layers": "layers", "ep": "ep", "etp": "etp",
            **{f"account{sep}for{sep}{w}": f"account_for_{w}" for sep in ("_", "-") for w in ("embedding", "loss")}}
_SWITCHES = ("sequence_parallel", "account_for_embedding", "account_for_loss")
_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}


def parse_compare(text: str) -> dict:
    """"tp=8,pp=2,mbs=1,recompute=full,sp=on,zero=1,layers=10:10:10:10" -> a config mapping
    (account_for_embedding=on / account_for_loss=on: Megatron's split with them counted).
    Every item is key=value, each key at most once (an alias counts as its key)."""
    cfg: dict = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            raise InputError("--compare", f"{text[:60]!r}: an empty item; give key=value pairs separated by commas "
                                          f"(e.g. \"tp=8,pp=2,mbs=1\")")
        key, sep, val = item.partition("=")
        key = key.strip().lower()
        val = val.strip()
        if not sep or key not in _ALIASES:
            raise InputError("--compare", f"{item!r}: give key=value pairs with keys tp, pp, cp, vp, mbs, recompute, sp, "
                                          f"zero, ep, etp, account_for_embedding, account_for_loss, layers (e.g. "
                                          f"\"tp=8,pp=2,mbs=1\")")
        name = _ALIASES[key]
        if name in cfg:
            raise InputError("--compare", f"{item!r}: {name} is given twice; give each key once")
        try:
            if name in _SWITCHES:
                if val.lower() not in _TRUE | _FALSE:
                    raise ValueError
                cfg[name] = val.lower() in _TRUE
            elif name == "recompute":
                cfg[name] = val  # checked with the rest of the configuration (space.rules)
            elif name == "layers":
                parts = val.replace("/", ":").split(":")
                if not all(is_digits(x) for x in parts):
                    raise ValueError
                cfg[name] = [int(x) for x in parts]
            else:
                if not is_digits(val):
                    raise ValueError
                cfg[name] = int(val)
                if cfg[name] < (0 if name == "zero" else 1) or (name == "zero" and cfg[name] > 3):
                    raise ValueError
        except ValueError:
            raise InputError("--compare", f"{item!r}: bad value for {key}") from None
    return cfg


class _StderrProgress:
    """Progress of long work on stderr: the phase, the best plan so far (incumbent), the proven
    bound and its gap, the elapsed time against the limit, and the shapes done where a method
    counts them. A line when the phase changes, else at most every 0.5 s, and the final one."""

    def __init__(self, limit_s=None):
        self.start = self.last = time.perf_counter()
        self.limit_s, self.phase = limit_s, None

    def __call__(self, info):
        now = time.perf_counter()
        if not isinstance(info, dict):
            click.echo(str(info), err=True)
            return
        phase = info.get("phase")
        if not info.get("final") and phase == self.phase and now - self.last < 0.5:
            return
        self.last, self.phase = now, phase
        click.echo(progress_line(info, now - self.start, self.limit_s), err=True)


def progress_line(info: dict, elapsed_s: float, limit_s=None) -> str:
    """One progress event in words (see `_StderrProgress`)."""
    parts = [f"[{info.get('method', 'search')}]"]
    if info.get("phase"):
        parts.append(str(info["phase"]))
    if info.get("status"):
        parts.append(str(info["status"]))
    best, bound = info.get("best_s"), info.get("bound_s")
    parts.append(f"incumbent {best:.6g} s" if best is not None else "no plan yet")
    if bound is not None:
        gap = f" (gap {max(0.0, best - bound) / best:.2%})" if best else ""
        parts.append(f"bound {bound:.6g} s{gap}")
    if info.get("shapes_done") is not None:
        parts.append(f"{info['shapes_done']:,}/{info.get('shapes'):,} shapes")
    if info.get("evaluations") is not None:
        parts.append(f"{info['evaluations']:,} splits evaluated")
    parts.append(f"{elapsed_s:.1f} s" + (f" of {limit_s:g} s" if limit_s else ""))
    return parts[0] + " " + " | ".join(parts[1:])


def _echo_model_notes(job) -> None:
    """What a Hugging Face config's mapping decided (sequence length, what is not modelled), and the job's own
    --seq-len where it differs: on stderr, stdout stays the plan (optimize and evaluate alike)."""
    if job.model.source.startswith("Hugging Face config.json") and job.model.notes:
        given = (f"; the job trains at sequence length {job.seq_length} (--seq-len)"
                 if job.model.seq_length and job.seq_length != job.model.seq_length else "")
        click.echo(f"model {job.model.name}: {job.model.notes}{given}", err=True)


@click.command("optimize")
@job_options
@click.option("--method", type=click.Choice(["cpsat", "exhaustive", "alpa-dp"]), default="cpsat", show_default=True,
              help="Search method: the CP-SAT model, or a baseline over the same formulation.")
@click.option("--time-limit", "time_limit", type=SECONDS, default=60.0, show_default=True,
              help="Seconds for the whole call: enumeration, search, model building and --links placement.")
@click.option("--workers", type=click.IntRange(1, 256), default=1, show_default=True, help="CP-SAT worker threads.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="CP-SAT random seed (the answer does not depend on it).")
@click.option("--top-k", "top_k", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Return the K best distinct parallel configurations.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (same as --format json).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "megatron", "torchtitan", "transformers"]),
              default=None, help="table (default), json, megatron (the launch arguments only), torchtitan (the job "
                                 "config: a Python config module for torchtitan 0.3, TOML sections for 0.2) or "
                                 "transformers (the Trainer launch: a plan of --framework transformers).")
@click.option("--torchtitan-version", "torchtitan_version", type=click.Choice(["0.3", "0.2"]), default="0.3",
              show_default=True, help="The torchtitan release whose config format --format torchtitan (and the "
                                      "JSON's torchtitan block) follows: 0.3 (current) or 0.2 (the last TOML one).")
@click.option("--timeline", type=OUTPUT, default=None,
              help="Write a PNG of the plan's pipeline schedule (needs matplotlib: the plot extra).")
@click.option("--compare", "compare", default=None,
              help='A configuration to compare with, e.g. "tp=8,pp=2,mbs=1,recompute=full,layers=20:20".')
@click.option("--links", "links_file", type=click.Path(dir_okay=False), default=None,
              help="Measured node x node link matrix (JSON/CSV, see `solveplan links`): choose the plan and the nodes "
                   "of its stages together (the joint model).")
@click.option("--hostfile", "hostfile_out", type=OUTPUT, default=None,
              help="With --links or a cluster with pools: write the hostfile that realises the placement.")
@click.option("--prefer", type=click.Choice(["fastest", "simple"]), default=None,
              help="fastest: the optimum. simple: among plans within --tolerance of the optimum, the one with the fewest "
                   "departures from the textbook Megatron-LM plan (no interleaving, no CP, even split, fewest degrees "
                   "changed), proven best under that tie-break. Default: the --job file's, else fastest.")
@click.option("--tolerance", "tolerance_rel", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="With --prefer simple: the relative tolerance, e.g. 0.05 (default: the half-width of the optimum's "
                   "80% interval).")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Solver progress on stderr (default: when stderr is a terminal).")
def optimize_command(method, time_limit, workers, seed, top_k, as_json, fmt, torchtitan_version, timeline, compare,
                     links_file, hostfile_out, prefer, tolerance_rel, show_progress, **jobkw):
    """The fastest parallel plan that fits, with the solver's bound."""
    fmt = fmt or ("json" if as_json else "table")
    if as_json and fmt != "json":
        raise InputError("--json", f"conflicts with --format {fmt}; give one of them")
    if timeline is not None:
        _check_timeline(timeline)
    cmp_cfg = parse_compare(compare) if compare is not None else None
    if tolerance_rel is not None and prefer != "simple":
        raise InputError("--tolerance", "applies to --prefer simple only; add --prefer simple or drop --tolerance")
    job = build_job(**jobkw, prefer=prefer, tolerance_rel=tolerance_rel)
    if fmt == "transformers" and job.framework != "transformers":
        raise InputError("--format", f"transformers launches a plan priced for the transformers stack, and this job's "
                                     f"is {job.framework}; add --framework transformers")
    if hostfile_out and not links_file and not job.cluster.is_mixed:
        raise InputError("--hostfile", "needs --links FILE (the measured links to place on) or a cluster with pools")
    _echo_model_notes(job)
    links = _links_of(links_file, job) if links_file else None

    from ..optimize import optimize

    if show_progress is None:
        show_progress = sys.stderr.isatty()
    result = optimize(job, method=method, time_limit_s=time_limit, workers=workers, top_k=top_k, seed=seed,
                      compare=cmp_cfg, progress=_StderrProgress(time_limit) if show_progress else None, links=links)
    if hostfile_out and result.plan is not None:
        from ..optimize.placed import PlacedPlan

        assert isinstance(result.plan, PlacedPlan)  # --hostfile needs links or pools (above): the plan is placed
        write_text(hostfile_out, result.plan.hostfile, "--hostfile")

    drawn = None
    if timeline is not None and result.plan is not None:
        from ..render.timeline import render_timeline

        drawn = render_timeline(job, result.plan, timeline, field="--timeline")
    _print_plan(fmt, result, job, torchtitan_version, drawn, hostfile_out)
    _exit_without_plan(result, time_limit)


def _check_timeline(timeline: str) -> None:
    """Before any work, so that no plan is lost to a bad name or a missing matplotlib."""
    check_output(timeline, "--timeline", PLOT_SUFFIXES)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("--timeline", "needs matplotlib: pip install 'solveplan[plot]'") from None


def _links_of(links_file: str, job):
    """The measured link matrix of --links, one node per node of the job's cluster."""
    from ..placement.links import load_links

    links = load_links(links_file, cluster=job.cluster)
    if links.n != job.cluster.num_nodes:
        raise InputError("--links", f"{links_file} has {links.n} nodes but {job.cluster.name} has "
                                    f"{job.cluster.num_nodes}; give a matrix of the cluster's nodes")
    return links


def _print_plan(fmt: str, result, job, torchtitan_version: str, drawn: dict | None, hostfile_out) -> None:
    """The result on stdout as --format asks: json, megatron, torchtitan, transformers or the table (which
    ends with the launch of the job's own stack)."""
    if fmt == "json":
        from ..render.json import result_json

        d = result_json(result, job, torchtitan_version)
        if drawn is not None:
            d["timeline"] = drawn
        click.echo(json.dumps(d, indent=2))
    elif fmt in ("megatron", "torchtitan", "transformers"):
        if result.plan is not None:
            click.echo(_launch_of(fmt, job, result.plan, torchtitan_version)[1], nl=False)
    else:
        from rich.console import Console

        from ..render.table import render_result

        con = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
        con.print(render_result(result))
        if result.plan is not None:
            title, launch = _launch_of(job.framework, job, result.plan, torchtitan_version)
            con.print(f"[bold]{title}[/]")
            con.print(launch, markup=False, highlight=False, end="", soft_wrap=True)  # a wrapped line breaks the shell
        if drawn is not None:
            con.print(f"timeline written to {drawn['path']}", markup=False)
        if hostfile_out and result.plan is not None:
            con.print(f"hostfile written to {hostfile_out} (Megatron-LM rank order tp-cp-dp-pp)", markup=False)


def _launch_of(stack: str, job, plan, torchtitan_version: str) -> tuple[str, str]:
    """(title, text) of `stack`'s launch of the plan (the table's: the stack it was priced for, `--framework`)."""
    if stack == "torchtitan":
        from ..render.torchtitan import render_torchtitan

        return f"torchtitan {torchtitan_version} job config", render_torchtitan(job, plan, torchtitan_version)
    if stack == "transformers":
        from ..render.transformers import render_transformers

        return "transformers Trainer launch", render_transformers(job, plan)
    from ..render.megatron import megatron_args

    return "Megatron-LM launch arguments", megatron_args(job, plan).command()


def _exit_without_plan(result, time_limit: float) -> None:
    """Exit with EXIT_INFEASIBLE or EXIT_NO_PLAN_IN_TIME (saying why on stderr) when the
    answer is not the plan(s) asked for."""
    if result.status == INFEASIBLE:
        sf = result.shortfall
        msg = sf.message if sf is not None else "no plan fits"
        click.echo(f"infeasible: {msg}", err=True)
        if sf is not None and sf.suggestions:
            click.echo("try: " + "; ".join(sf.suggestions), err=True)
        sys.exit(EXIT_INFEASIBLE)
    if result.plan is None:
        click.echo(f"no plan within the time limit of {time_limit:g} s (status {result.status}); "
                   f"raise --time-limit", err=True)
        sys.exit(EXIT_NO_PLAN_IN_TIME)
    if result.top_k_cut_short:
        click.echo(f"found {result.top_k_found} of the {result.top_k_asked} plans asked for within the time limit of "
                   f"{time_limit:g} s; raise --time-limit", err=True)
        sys.exit(EXIT_NO_PLAN_IN_TIME)


@click.command()
@job_base_options
@config_options
@split_options
@click.option("--layers-per-stage", default=None, help="Comma-separated layer counts, one per pipeline stage.")
@click.option("--pipeline-layout", default=None,
              help="Megatron-LM's --pipeline-model-parallel-layout, e.g. 'Et*4|(t*4|)*14tmL': fixes the split and vp "
                   "(stages / pp; give --pp). Not with --layers-per-stage or --account-for-*.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evaluate(tp, pp, cp, vp, ep, etp, micro_batch_size, recompute, sequence_parallel, zero, account_for_embedding,
             account_for_loss, layers_per_stage, pipeline_layout, as_json, **base):
    """Predict step time, throughput, MFU and per-stage memory of one configuration."""
    from ..plan import plan_config
    from ..space.rules import constrained_config

    job = build_job(**base)
    _echo_model_notes(job)
    cfg = dict(tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, etp=etp, micro_batch_size=micro_batch_size, recompute=recompute,
               sequence_parallel=sequence_parallel, zero=zero, account_for_embedding=account_for_embedding,
               account_for_loss=account_for_loss,
               layers=parse_ints(layers_per_stage, "layers") if layers_per_stage is not None else None,
               pipeline_layout=pipeline_layout)
    from ..calibration.intervals import with_interval

    plan = with_interval(job, plan_config(job, constrained_config(job, cfg)))
    if as_json:
        click.echo(json.dumps(plan.model_dump(), indent=2))
    else:
        from rich.console import Console

        from ..render.table import render_plan

        Console(width=None if sys.stdout.isatty() else 160, emoji=False).print(render_plan(plan))
