"""HTTP front end of `solveplan.api` for cluster schedulers (FastAPI; the `serve` extra).

    POST /v1/plan         {"job": {...}, "time_limit_s": 5}            -> SolveResult
    POST /v1/check        {"job": {...}, "time_limit_s": 1}            -> CheckResult
    POST /v1/fewest-gpus  {"job": {...}, "cluster": "h100", "target": {"tokens_per_s": 1e6}} -> FewestGpusResult
    POST /v1/admit        {"jobs": [{...}, ...], "cluster": "a100x256"} -> AdmitResult
    GET  /healthz                                                        -> status and cache counters
    GET  /openapi.json

A job is a `specs.request.JobRequest` -- what `solveplan --job` files hold (model, cluster,
global_batch_size, seq_length, precision, flash_attention, constraints): catalog names or
inline mappings. Answers are the
library's results serialised with `model_dump(mode="json")`: the same JSON as
`solveplan.api.<call>(...).model_dump(mode="json")` in Python.

Time limits: `time_limit_s` in the body or the query (the query wins), capped at
`max_time_limit_s` (the answer's header `X-Time-Limit-S` says which limit applied), measured
from the moment the handler starts, so time spent waiting for a worker counts.
Bad input is 422 with the offending field (`detail[].loc`, as FastAPI reports validation
errors), including names the catalogs do not know; a body over `max_body_bytes` is 413.
Bad input never yields a 5xx.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from . import api
from .errors import InputError
from .specs.request import JobRequest, Target

DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_MAX_TIME_LIMIT_S = 60.0
MISSING_EXTRA = "the HTTP service needs the serve extra: pip install 'solveplan[serve]' (fastapi, uvicorn)"

TimeLimit = Optional[float]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


_LIMIT = Field(None, gt=0, allow_inf_nan=False, description="seconds; capped by the server")


class JobCall(_In):
    job: JobRequest
    time_limit_s: Optional[float] = _LIMIT


class FewestGpusCall(_In):
    job: JobRequest
    cluster: Optional[Union[str, dict]] = Field(
        None, description="a family (h100), <gpu>x<N> (the largest allocation) or a cluster; default: the job's cluster")
    target: Target
    time_limit_s: Optional[float] = _LIMIT


class AdmitCall(_In):
    jobs: list[Any] = Field(description="jobs with num_gpus, cluster or target each; a malformed one is decided INVALID")
    cluster: Union[str, dict] = Field(description="the free cluster")
    time_limit_s: Optional[float] = _LIMIT


# ------------------------------------------------------------------ errors
_INDEX = re.compile(r"\[(\d+)\]")


def field_loc(field: str, root: str = "body") -> list:
    """'jobs[2].model' -> ['body', 'jobs', 2, 'model'] (FastAPI's `loc`)."""
    loc: list = [root]
    for part in (field or "").split("."):
        if not part:
            continue
        m = _INDEX.search(part)
        name = part[: m.start()] if m else part
        if name:
            loc.append(name.lstrip("-").replace("-", "_"))
        loc.extend(int(x) for x in _INDEX.findall(part))
    return loc


def input_error_detail(exc: InputError) -> list[dict]:
    field = exc.field or ""
    return [{"loc": field_loc(field), "msg": exc.message, "type": "input_error"}]


class BodyLimit:
    """ASGI middleware: 413 for a request body over `max_bytes` (by Content-Length, or counted
    while it streams in)."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    return await self._reject(send)
        seen = 0
        started = rejected = False

        async def limited_receive():
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # answer 413 now; the app sees a disconnected client and its answer is dropped
                    rejected = True
                    if not started:
                        await self._reject(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            nonlocal started
            if rejected:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not rejected:
                raise

    async def _reject(self, send):
        import json

        body = json.dumps({"detail": [{"loc": ["body"], "msg": f"request body over {self.max_bytes} bytes",
                                       "type": "body_too_large"}]}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------ app
def create_app(cache: Optional[api.ResultCache] = None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_time_limit_s: float = DEFAULT_MAX_TIME_LIMIT_S, max_concurrency: int = 64):
    """The FastAPI application. `cache` defaults to the library's `api.DEFAULT_CACHE` (so the
    service and in-process library calls share it)."""
    try:
        import anyio
        from fastapi import FastAPI, Query, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{MISSING_EXTRA} ({exc})") from None

    from . import __version__

    cache = api.DEFAULT_CACHE if cache is None else cache
    limiter = anyio.CapacityLimiter(max_concurrency)
    app = FastAPI(
        title="solveplan", version=__version__,
        description="Parallel training plans for LLMs on GPU clusters, in bounded time: plan, check, fewest GPUs, "
                    "batch admission. Every answer carries a status.",
    )

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        return JSONResponse(status_code=422, content={"detail": input_error_detail(exc)})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        detail = []
        for err in exc.errors():
            item = {"loc": list(err.get("loc", ())), "msg": str(err.get("msg", "invalid")), "type": err.get("type", "")}
            detail.append(item)  # drop 'input'/'ctx': they may hold what cannot be serialised
        return JSONResponse(status_code=422, content={"detail": detail})

    def limit_for(kind: str, query: TimeLimit, body: TimeLimit) -> float:
        chosen = query if query is not None else body
        if chosen is None:
            chosen = api.DEFAULT_TIME_LIMIT_S[kind]
        return min(float(chosen), max_time_limit_s)

    async def call(kind: str, fn, limit: float, *args):
        started = time.monotonic()

        def run():
            left = max(0.0, limit - (time.monotonic() - started))
            return fn(*args, time_limit_s=left, cache=cache)

        result = await anyio.to_thread.run_sync(run, limiter=limiter)
        headers = {"X-Time-Limit-S": f"{limit:g}"}
        try:
            return JSONResponse(content=result.model_dump(mode="json"), headers=headers)
        except ValueError:  # NaN or infinity: only absurd hardware numbers get here
            return JSONResponse(status_code=422, headers=headers, content={"detail": [{
                "loc": ["body"], "type": "input_error",
                "msg": "the job's numbers give non-finite times or sizes; check the GPU and cluster values"}]})

    q_limit = Query(None, gt=0, allow_inf_nan=False, description="seconds; overrides the body's; capped by the server")

    @app.post("/v1/plan", response_model=api.SolveResult)
    async def post_plan(req: JobCall, time_limit_s: Optional[float] = q_limit):
        """The fastest plan that fits (CP-SAT), or the best known with its gap when time runs out."""
        return await call("plan", api.plan, limit_for("plan", time_limit_s, req.time_limit_s), req.job.job_fields())

    @app.post("/v1/check", response_model=api.CheckResult)
    async def post_check(req: JobCall, time_limit_s: Optional[float] = q_limit):
        """Does some plan fit? If not, which resource is short and by how much."""
        return await call("check", api.check, limit_for("check", time_limit_s, req.time_limit_s), req.job.job_fields())

    @app.post("/v1/fewest-gpus", response_model=api.FewestGpusResult)
    async def post_fewest(req: FewestGpusCall, time_limit_s: Optional[float] = q_limit):
        """The smallest allocation whose best plan meets a throughput or deadline target."""
        job = req.job.job_fields()
        ref = req.cluster if req.cluster is not None else job.get("cluster")
        if ref is None:
            raise InputError("cluster", "give the cluster family (e.g. h100) or cluster to size, here or in job.cluster")
        ref = api.as_cluster_ref(ref, "cluster" if req.cluster is not None else "job.cluster")
        return await call("fewest_gpus", api.fewest_gpus, limit_for("fewest_gpus", time_limit_s, req.time_limit_s),
                          job, ref, req.target)

    @app.post("/v1/admit", response_model=api.AdmitResult)
    async def post_admit(req: AdmitCall, time_limit_s: Optional[float] = q_limit):
        """One decision per job, first come first served, on the free cluster."""
        ref = api.as_cluster_ref(req.cluster, "cluster")
        return await call("admit", api.admit, limit_for("admit", time_limit_s, req.time_limit_s), req.jobs, ref)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "version": __version__, "cache": cache.stats(),
                "max_time_limit_s": max_time_limit_s, "max_body_bytes": max_body_bytes}

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app
