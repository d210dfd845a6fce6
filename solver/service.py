"""HTTP front end of `solveplan.api` for cluster schedulers (FastAPI; the `serve` extra).

    POST /v1/plan         {"job": {...}, "time_limit_s": 5}            -> SolveResult
    POST /v1/check        {"job": {...}, "time_limit_s": 1}            -> CheckResult
    POST /v1/fewest-gpus  {"job": {...}, "cluster": "h100", "target": {"tokens_per_s": 1e6}} -> FewestGpusResult
    POST /v1/admit        {"jobs": [{...}, ...], "cluster": "a100x256"} -> AdmitResult
    GET  /healthz                                                        -> status and cache counters
    GET  /openapi.json

A job is a `specs.request.JobRequest` -- what `solveplan --job` files hold (model, cluster,
global_batch_size, seq_length, precision, flash_attention, constraints): catalog names or
inline mappings; a cluster may list pools (then /v1/fewest-gpus answers `nodes_per_pool`, the
fewest nodes of which pools). Answers are the
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
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import api
from .admission.http_guards import BearerToken, HostCheck, IncompleteConnections, require_unicode
from .admission.http_guards import reject as _reject
from .catalog import SpecFiles, file_policy, parse_data
from .errors import MAX_MESSAGE_CHARS, InputError, escape_text
from .specs.request import ClusterRef, JobRequest, Target

try:  # at module level: FastAPI resolves the handlers' (string) annotations in these globals
    from starlette.requests import Request
except ImportError:  # pragma: no cover - without the serve extra, create_app says what to install
    Request = None  # type: ignore[misc,assignment]  # the optional serve extra is missing

DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_MAX_TIME_LIMIT_S = 60.0
DEFAULT_MAX_CLIENT_REQUESTS = 8  # in flight per client address
DEFAULT_MAX_REQUESTS = 256  # in flight in all
DEFAULT_BODY_TIMEOUT_S = 10.0
DEFAULT_MAX_INCOMPLETE = 512  # connections without a complete request, in all
DEFAULT_MAX_CLIENT_INCOMPLETE = 8  # the same, per client address
MAX_ADMIT_JOBS = 256
MISSING_EXTRA = "the HTTP service needs the serve extra: pip install 'solveplan[serve]' (fastapi, uvicorn)"

TimeLimit = float | None


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


_LIMIT = Field(None, gt=0, allow_inf_nan=False, description="seconds; capped by the server")


class JobCall(_In):
    job: JobRequest
    time_limit_s: float | None = _LIMIT


class FewestGpusCall(_In):
    job: JobRequest
    cluster: ClusterRef | None = Field(
        None, description="a family (h100), <gpu>x<N> (the largest allocation) or a cluster; default: the job's cluster")
    target: Target
    time_limit_s: float | None = _LIMIT


class AdmitCall(_In):
    jobs: list[Any] = Field(description="jobs with num_gpus, cluster or target each; a malformed one is decided INVALID")
    cluster: ClusterRef = Field(description="the free cluster")
    time_limit_s: float | None = _LIMIT


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
    return [{"loc": field_loc(field), "msg": escape_text(exc.message, MAX_MESSAGE_CHARS), "type": "input_error"}]


class Guard:
    """ASGI middleware between the network and the handlers, so that no request can hold the
    service: per client (peer address) at most `max_client_requests` requests in flight and at
    most `max_requests` in all (429 beyond), a request counted once its body has arrived (a
    half-sent one holds no slot); the body read whole within `body_timeout_s` (408)
    and at most `max_bytes` (413); a body that is not safe JSON (`specs.reading.parse_data`:
    duplicate keys, deep nesting, huge integers) is 422 before FastAPI parses it; every
    request runs under the service's file policy; a client that disconnects sets the
    request's cancel event (`scope["state"]["cancel"]`), which stops its waiting and drops its
    queued work."""

    def __init__(self, app, *, max_bytes: int, policy: SpecFiles, max_client_requests: int, max_requests: int,
                 body_timeout_s: float, in_flight: dict[str, int]):
        self.app = app
        self.max_bytes = max_bytes
        self.policy = policy
        self.max_client_requests = max_client_requests
        self.max_requests = max_requests
        self.body_timeout_s = body_timeout_s
        self.in_flight = in_flight  # client address -> requests in flight

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = await self._read_body(receive, send)
        if body is None:  # answered (408, 413, 422) or the client left
            return
        client = (scope.get("client") or ("?", 0))[0]
        refusal = self._refusal(client)
        if refusal:
            return await _reject(send, 429, "too_many_requests", refusal)
        self.in_flight[client] = self.in_flight.get(client, 0) + 1
        try:
            with file_policy(self.policy):
                await self._serve(scope, receive, send, body)
        finally:
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]

    def _refusal(self, client: str) -> str | None:
        """Why a complete request of `client` cannot start now (None: it can). Only requests
        whose body has arrived count: a client still sending holds no slot (slow and idle
        connections are `IncompleteConnections`' business)."""
        if self.in_flight.get(client, 0) >= self.max_client_requests:
            return f"{self.max_client_requests} requests of this client are in flight; retry later"
        if sum(self.in_flight.values()) >= self.max_requests:
            return "the service is busy; retry later"
        return None

    async def _read_body(self, receive, send) -> bytes | None:
        """The whole body, read within `body_timeout_s` and at most `max_bytes`, checked to be
        safe JSON; None when the request was answered here (408, 413, 422) or the client left."""
        import anyio

        body, status = b"", None
        try:
            with anyio.fail_after(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    body += message.get("body", b"")
                    if len(body) > self.max_bytes:
                        status = 413
                        break
                    if not message.get("more_body"):
                        break
        except TimeoutError:
            await _reject(send, 408, "body_timeout", f"request body not received within {self.body_timeout_s:g} s")
            return None
        if status == 413:
            await _reject(send, 413, "body_too_large", f"request body over {self.max_bytes} bytes")
            return None
        if body.strip():
            try:
                data = parse_data(_decoded(body), "body", "the request body", "json")
                require_unicode(data, "the request body")
            except InputError as exc:
                await _reject(send, 422, "input_error", escape_text(exc.message, MAX_MESSAGE_CHARS))
                return None
        return body

    async def _serve(self, scope, receive, send, body: bytes):
        import anyio

        cancel = threading.Event()
        scope.setdefault("state", {})["cancel"] = cancel
        done = anyio.Event()
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def watch():  # the client leaving cancels its request (after the body, receive() waits for it)
            if (await receive())["type"] == "http.disconnect":
                cancel.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            try:
                await self.app(scope, replay, send)
            finally:
                done.set()
                tg.cancel_scope.cancel()


def _decoded(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("body", f"the request body is not UTF-8 (invalid byte at offset {exc.start})") from None


# ------------------------------------------------------------------ app
def create_app(cache: api.ResultCache | None = None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_time_limit_s: float = DEFAULT_MAX_TIME_LIMIT_S, max_concurrency: int = 64,
               spec_dir: str | None = None, max_client_requests: int = DEFAULT_MAX_CLIENT_REQUESTS,
               max_requests: int = DEFAULT_MAX_REQUESTS, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
               allowed_host_names: frozenset[str] | None = None, token: str | None = None):
    """The FastAPI application. `cache` defaults to the library's `api.DEFAULT_CACHE` (so the
    service and in-process library calls share it). The service opens no file a client names,
    except plain names inside `spec_dir` when an operator gives one (see `Guard` for the other
    limits). `allowed_host_names` (`allowed_hosts(...)`; None: any Host, as in-process tests
    send) and `token` (a bearer token; None: none asked) guard every route (`HostCheck`,
    `BearerToken`). No interactive docs are served: FastAPI's load scripts from a public CDN;
    the schema is at /openapi.json."""
    try:
        import anyio
        from fastapi import FastAPI
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{MISSING_EXTRA} ({exc})") from None

    from . import __version__

    cache = api.DEFAULT_CACHE if cache is None else cache
    limiter = anyio.CapacityLimiter(max_concurrency)
    app = FastAPI(
        title="solveplan", version=__version__, docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None,
        description="Parallel training plans for LLMs on GPU clusters, in bounded time: plan, check, fewest GPUs, "
                    "batch admission. Every answer carries a status.",
    )
    _add_error_handlers(app)
    in_flight: dict[str, int] = {}
    _add_routes(app, _Calls(cache, limiter, max_time_limit_s))

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "version": __version__, "cache": cache.stats(),
                "max_time_limit_s": max_time_limit_s, "max_body_bytes": max_body_bytes,
                "in_flight": sum(in_flight.values()), "spec_files": "directory" if spec_dir else "none"}

    policy = SpecFiles(Path(spec_dir).resolve() if spec_dir else None)
    app.add_middleware(Guard, max_bytes=max_body_bytes, policy=policy, max_client_requests=max_client_requests,
                       max_requests=max_requests, body_timeout_s=body_timeout_s, in_flight=in_flight)
    if token is not None:
        app.add_middleware(BearerToken, token=token)
    if allowed_host_names is not None:
        app.add_middleware(HostCheck, allowed=allowed_host_names)
    return app


def _add_error_handlers(app) -> None:
    """Bad input is 422 with the offending field: the library's InputError and FastAPI's own
    validation errors (without their 'input'/'ctx', which may not serialise)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        return JSONResponse(status_code=422, content={"detail": input_error_detail(exc)})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        detail = []
        for err in exc.errors():
            item = {"loc": [escape_text(x, 80) if isinstance(x, str) else x for x in err.get("loc", ())],
                    "msg": escape_text(str(err.get("msg", "invalid")), MAX_MESSAGE_CHARS), "type": err.get("type", "")}
            detail.append(item)  # drop 'input'/'ctx': they may hold what cannot be serialised
        return JSONResponse(status_code=422, content={"detail": detail})


class _Calls:
    """A library call from a handler: on a worker thread within the time limit that applies
    (`limit_for`), with the client's cancel event, answered as JSON with `X-Time-Limit-S`."""

    def __init__(self, cache: api.ResultCache, limiter, max_time_limit_s: float):
        self.cache, self.limiter, self.max_time_limit_s = cache, limiter, max_time_limit_s

    def limit_for(self, kind: str, query: TimeLimit, body: TimeLimit) -> float:
        chosen = query if query is not None else body
        if chosen is None:
            chosen = api.DEFAULT_TIME_LIMIT_S[kind]
        return min(float(chosen), self.max_time_limit_s)

    async def call(self, request: Request, kind: str, fn, limit: float, *args):
        import anyio
        from fastapi.responses import JSONResponse

        started = time.monotonic()
        cancel = request.scope.get("state", {}).get("cancel")

        def run():
            left = max(0.0, limit - (time.monotonic() - started))
            return fn(*args, time_limit_s=left, cache=self.cache, cancel=cancel)

        result = await anyio.to_thread.run_sync(run, limiter=self.limiter)
        headers = {"X-Time-Limit-S": f"{limit:g}"}
        try:
            return JSONResponse(content=result.model_dump(mode="json"), headers=headers)
        except ValueError:  # NaN or infinity: only absurd hardware numbers get here
            return JSONResponse(status_code=422, headers=headers, content={"detail": [{
                "loc": ["body"], "type": "input_error",
                "msg": "the job's numbers give non-finite times or sizes; check the GPU and cluster values"}]})


def _add_routes(app, calls: _Calls) -> None:
    """POST /v1/plan, /v1/check, /v1/fewest-gpus and /v1/admit (the module docstring)."""
    from fastapi import Query

    call, limit_for = calls.call, calls.limit_for
    q_limit = Query(None, gt=0, allow_inf_nan=False, description="seconds; overrides the body's; capped by the server")

    @app.post("/v1/plan", response_model=api.SolveResult)
    async def post_plan(req: JobCall, request: Request, time_limit_s: float | None = q_limit):
        """The fastest plan that fits (CP-SAT), or the best known with its gap when time runs out."""
        return await call(request, "plan", api.plan, limit_for("plan", time_limit_s, req.time_limit_s), req.job.job_fields())

    @app.post("/v1/check", response_model=api.CheckResult)
    async def post_check(req: JobCall, request: Request, time_limit_s: float | None = q_limit):
        """Does some plan fit? If not, which resource is short and by how much."""
        return await call(request, "check", api.check, limit_for("check", time_limit_s, req.time_limit_s), req.job.job_fields())

    @app.post("/v1/fewest-gpus", response_model=api.FewestGpusResult)
    async def post_fewest(req: FewestGpusCall, request: Request, time_limit_s: float | None = q_limit):
        """The smallest allocation whose best plan meets a throughput or deadline target."""
        job = req.job.job_fields()
        ref = req.cluster if req.cluster is not None else job.get("cluster")
        if ref is None:
            raise InputError("cluster", "give the cluster family (e.g. h100) or cluster to size, here or in job.cluster")
        ref = api.as_cluster_ref(ref, "cluster" if req.cluster is not None else "job.cluster")
        return await call(request, "fewest_gpus", api.fewest_gpus, limit_for("fewest_gpus", time_limit_s, req.time_limit_s),
                          job, ref, req.target)

    @app.post("/v1/admit", response_model=api.AdmitResult)
    async def post_admit(req: AdmitCall, request: Request, time_limit_s: float | None = q_limit):
        """One decision per job, first come first served, on the free cluster."""
        if len(req.jobs) > MAX_ADMIT_JOBS:
            raise InputError("jobs", f"{len(req.jobs)} jobs; a batch holds at most {MAX_ADMIT_JOBS}")
        ref = api.as_cluster_ref(req.cluster, "cluster")
        return await call(request, "admit", api.admit, limit_for("admit", time_limit_s, req.time_limit_s), req.jobs, ref)


def uvicorn_config(app, host: str, port: int, log_level: str = "info", *, header_timeout_s: float = 10.0,
                   max_connections: int = 1024, max_incomplete: int = DEFAULT_MAX_INCOMPLETE,
                   max_client_incomplete: int = DEFAULT_MAX_CLIENT_INCOMPLETE):
    """uvicorn's Config for the service: idle keep-alive connections closed after 5 s, a
    request head that is not complete within `header_timeout_s` closed (uvicorn alone holds a
    half-sent request forever), request heads capped at 32 KiB, at most `max_connections`
    open connections (the next ones get 429 and are closed), and connections that hold no
    complete request capped at `max_client_incomplete` per client address and
    `max_incomplete` in all, the oldest closed first (`IncompleteConnections`)."""
    import h11
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    too_many = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    incomplete = IncompleteConnections(max_incomplete, max_client_incomplete)
    waiting = (h11.IDLE, h11.SEND_BODY)  # their states without a complete request

    class GuardedH11Protocol(H11Protocol):
        _head_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(too_many)
                transport.close()
                return
            self._arm()
            self._track()

        def data_received(self, data):
            super().data_received(data)
            self._track()

        def on_response_complete(self):
            super().on_response_complete()
            self._arm()
            self._track()

        def connection_lost(self, exc):
            incomplete.complete(self)
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _track(self):
            if self.transport.is_closing() or self.conn.their_state not in waiting:
                incomplete.complete(self)
            else:
                incomplete.incomplete(self, (self.client or ("?", 0))[0])

        def evict(self):
            """Closed to make room (`IncompleteConnections`): it held no complete request."""
            if not self.transport.is_closing():
                self.transport.close()

        def _arm(self):
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _head_timeout(self):
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # no complete request head in time

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=GuardedH11Protocol,
                          timeout_keep_alive=5, h11_max_incomplete_event_size=32 * 1024)
