"""`solveplan serve`: the HTTP service (`solveplan.service`) under uvicorn.

Needs the serve extra (fastapi, uvicorn); without it the command says so in one line.
Binds 127.0.0.1 by default: put a proxy in front to expose it.
"""

from __future__ import annotations

import click


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--max-time-limit", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Cap on any request's time_limit_s, seconds.")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=1 << 20, show_default=True,
              help="Larger request bodies get 413.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
def serve(host, port, max_time_limit, max_body_bytes, log_level):
    """Serve /v1/plan, /v1/check, /v1/fewest-gpus, /v1/admit and /healthz over HTTP."""
    from . import EXIT_BAD_INPUT, fail
    from ..service import MISSING_EXTRA

    try:
        import uvicorn

        from ..service import create_app

        app = create_app(max_body_bytes=max_body_bytes, max_time_limit_s=max_time_limit)
    except ImportError as exc:
        fail(f"{MISSING_EXTRA} ({exc})", EXIT_BAD_INPUT)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
