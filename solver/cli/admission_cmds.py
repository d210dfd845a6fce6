"""`solveplan admit jobs.jsonl --cluster C`: admission decisions for a batch of jobs;
`solveplan serve`: the HTTP service (`solveplan.service`) under uvicorn.

admit: one JSON object per input line on stdout, in input order, each as soon as it is decided:
a decision `{line, id, admitted, status, num_gpus, cluster, plan, reason, field}` (see
`solveplan.api.Decision`), or `{line, error, field}` (with the job's `id` when it has one) for
a line that cannot be read as a job: bad JSON, unknown keys, an unknown model, no allocation.
The other lines go on. Each line is a job as in `--job` files plus the allocation it asks for:
`num_gpus`, a `cluster` of the free cluster's GPU type, or a throughput `target`
({"tokens_per_s": ...} or {"deadline_s": ..., "token_budget": ...}: the fewest GPUs that meet
it). Blank lines are skipped.

Jobs are admitted first come, first served on the free cluster `--cluster`; `--time-limit`
bounds the whole batch. Exit code 0, also when jobs are rejected or lines are malformed; 2 when
the file cannot be read or --cluster is bad.

fewest-gpus: the smallest allocation of --cluster (a family such as h100, a cluster, or a cluster
of pools: then the nodes of each pool) whose best plan meets --tokens-per-s (or --token-budget by
--deadline); `solveplan.api.fewest_gpus`. Exit code 0 found (OPTIMAL: proven the smallest in the
order of preference; FEASIBLE: smaller ones not all ruled out in time), 2 bad input, 3 no
allocation meets the target (the reason on stderr), 4 none found within --time-limit.

serve: needs the serve extra (fastapi, uvicorn); without it the command says so in one line.
Binds 127.0.0.1 by default: put a proxy in front to expose it. Answers only requests whose Host
header is the bound address or localhost (--allow-host adds names), and with --token-file only
those that carry its bearer token.
"""

from __future__ import annotations

import json
import sys

import click

from ..errors import InputError
from ..search.result import INFEASIBLE
from .options import SECONDS, job_options, job_request


def _emit(record: dict) -> None:
    click.echo(json.dumps(record, separators=(",", ":")))
    sys.stdout.flush()


def read_lines(jobs_file: str) -> list[str]:
    from ..catalog import read_text

    if jobs_file != "-":
        return read_text(jobs_file, "JOBS.jsonl").splitlines()
    try:
        return sys.stdin.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("JOBS.jsonl", f"cannot read standard input: {getattr(exc, 'strerror', None) or 'not UTF-8'}") from None


def parse_lines(lines: list[str]):
    """[(line number, job mapping or error record, is_error)] for the non-blank lines (each
    parsed by the safe JSON reader: no duplicate keys, deep nesting or huge integers)."""
    from ..catalog import parse_data

    out = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = parse_data(raw, "", f"line {number}", "json")
        except InputError as exc:
            out.append((number, {"line": number, "error": exc.message, "field": None}, True))
            continue
        if not isinstance(data, dict):
            out.append((number, {"line": number, "error": f"a job must be a JSON object, not {type(data).__name__}",
                                 "field": None}, True))
            continue
        out.append((number, data, False))
    return out


def record(number: int, index: int, decision) -> dict:
    """The output record of line `number`, the `index`-th job of the batch (an INVALID one's
    field relative to its line)."""
    d = decision.model_dump(mode="json")
    if decision.status == "INVALID":
        field = (d["field"] or "").removeprefix(f"jobs[{index}]").removeprefix(".") or None
        rec = {"line": number, "error": d["reason"], "field": field}
        if d["id"] is not None:
            rec["id"] = d["id"]
        return rec
    return {"line": number, **d}


@click.command()
@click.argument("jobs_file", metavar="JOBS.jsonl", type=str)
@click.option("--cluster", "cluster", required=True,
              help="The free cluster: catalog name, <gpu>x<N> (e.g. a100x256) or a YAML/JSON file.")
@click.option("--time-limit", "time_limit", type=SECONDS, default=None,
              help="Seconds for the whole batch (default 30).")
def admit(jobs_file, cluster, time_limit):
    """Admission decisions for JOBS.jsonl (one job per line; '-' reads stdin)."""
    from .. import api

    entries = parse_lines(read_lines(jobs_file))
    jobs = [(n, e) for n, e, bad in entries if not bad]
    pending = [(n, e) for n, e, bad in entries if bad]

    def flush_errors(before: float) -> None:
        while pending and pending[0][0] < before:
            _emit(pending.pop(0)[1])

    def on_decision(i: int, decision) -> None:
        number = jobs[i][0]
        flush_errors(number)
        _emit(record(number, i, decision))

    api.admit([e for _, e in jobs], api.as_cluster_ref(cluster, "cluster"), time_limit_s=time_limit,
              on_decision=on_decision)
    flush_errors(float("inf"))


@click.command("fewest-gpus")
@job_options
@click.option("--tokens-per-s", "tokens_per_s", type=float, default=None, help="Throughput to reach, tokens/s.")
@click.option("--deadline", "deadline_s", type=SECONDS, default=None, help="Seconds to train --token-budget tokens in.")
@click.option("--token-budget", "token_budget", type=float, default=None, help="Tokens to train by --deadline.")
@click.option("--time-limit", "time_limit", type=SECONDS, default=None, help="Seconds for the search (default 30).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def fewest_gpus_command(tokens_per_s, deadline_s, token_budget, time_limit, as_json, **job_flags):
    """The fewest GPUs of --cluster (of which pools, for a cluster of pools) meeting a throughput target."""
    from .. import api
    from . import EXIT_INFEASIBLE, EXIT_NO_PLAN_IN_TIME

    job = job_request(**job_flags)
    if job.get("cluster") is None:
        raise InputError("cluster", "give the cluster family (e.g. h100) or the cluster (of pools) to size")
    target = {k: v for k, v in (("tokens_per_s", tokens_per_s), ("deadline_s", deadline_s),
                                ("token_budget", token_budget)) if v is not None}
    try:
        res = api.fewest_gpus(job, job["cluster"], target, time_limit_s=time_limit)
    except InputError as exc:  # the job's paths as the flags name them (`job.model` -> --model)
        raise InputError(exc.field.removeprefix("job.") if exc.field else exc.field, exc.message) from None
    if as_json:
        click.echo(json.dumps(res.model_dump(mode="json"), indent=2))
    else:
        where = ""
        if res.nodes_per_pool:
            where = " = " + " + ".join(f"{n} {p} node{'s' if n != 1 else ''}" for p, n in res.nodes_per_pool.items())
        click.echo(f"{res.status}: " + (f"{res.num_gpus} GPUs ({res.cluster}){where}" if res.num_gpus else "no allocation"))
        if res.num_gpus is not None:
            click.echo(res.reason)
        if res.result is not None and res.result.plan is not None:
            click.echo(f"plan: {res.result.plan.parallel.describe()}, {res.result.plan.tokens_per_s:.4g} tokens/s")
        for p in res.probes:
            at = (" (" + ", ".join(f"{q}={n}" for q, n in p.nodes_per_pool.items()) + ")") if p.nodes_per_pool else ""
            verdict = {True: "meets", False: "misses", None: "undecided"}[p.meets]
            click.echo(f"  probe {p.num_gpus} GPUs{at}: {verdict} ({p.how})")
        for note in res.notes:
            click.echo(f"  note: {note}")
    if res.num_gpus is None:
        click.echo(res.reason, err=True)
        sys.exit(EXIT_INFEASIBLE if res.status == INFEASIBLE else EXIT_NO_PLAN_IN_TIME)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--max-time-limit", type=SECONDS, default=60.0, show_default=True,
              help="Cap on any request's time_limit_s, seconds.")
@click.option("--max-body-bytes", type=click.IntRange(1, 1 << 30), default=1 << 20, show_default=True,
              help="Larger request bodies get 413.")
@click.option("--spec-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Let clients name spec files by plain name inside this directory (default: no files at all).")
@click.option("--max-client-requests", type=click.IntRange(min=1), default=8, show_default=True,
              help="Requests in flight per client address; more get 429.")
@click.option("--header-timeout", type=SECONDS, default=10.0, show_default=True,
              help="Seconds a connection may take to send a request head (and its body).")
@click.option("--max-connections", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Open connections; more get 429 and are closed.")
@click.option("--max-incomplete", type=click.IntRange(min=1), default=512, show_default=True,
              help="Connections holding no complete request (idle, half-sent); beyond it the oldest is closed.")
@click.option("--max-client-incomplete", type=click.IntRange(min=1), default=8, show_default=True,
              help="The same per client address; beyond it that address's oldest is closed.")
@click.option("--allow-host", multiple=True, metavar="NAME",
              help="Also answer requests whose Host header is NAME (repeatable; '*' for any). "
                   "Default: the bound address and localhost.")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="Require 'Authorization: Bearer <token>' with the token this file holds (read once, at start).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
def serve(host, port, max_time_limit, max_body_bytes, spec_dir, max_client_requests, header_timeout, max_connections,
          max_incomplete, max_client_incomplete, allow_host, token_file, log_level):
    """Serve /v1/plan, /v1/check, /v1/fewest-gpus, /v1/admit and /healthz over HTTP."""
    from ..service import MISSING_EXTRA
    from . import EXIT_BAD_INPUT, fail

    try:
        import uvicorn

        from ..admission.http_guards import allowed_hosts, read_token
        from ..service import create_app, uvicorn_config

        token = read_token(token_file) if token_file is not None else None
        app = create_app(max_body_bytes=max_body_bytes, max_time_limit_s=max_time_limit, spec_dir=spec_dir,
                         max_client_requests=max_client_requests, body_timeout_s=header_timeout,
                         allowed_host_names=allowed_hosts(host, allow_host), token=token)
        config = uvicorn_config(app, host, port, log_level, header_timeout_s=header_timeout,
                                max_connections=max_connections, max_incomplete=max_incomplete,
                                max_client_incomplete=max_client_incomplete)
    except ImportError as exc:
        fail(f"{MISSING_EXTRA} ({exc})", EXIT_BAD_INPUT)
    uvicorn.Server(config).run()
