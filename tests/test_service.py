"""The HTTP service (FastAPI TestClient): endpoints answer what the library answers, bad input
is 422 with the offending field, big bodies 413, and fuzzed bodies never a 5xx."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from solveplan import api  # noqa: E402
from solveplan.service import create_app, field_loc  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

HAS_OPTIMIZE = importlib.util.find_spec("solveplan.optimize") is not None
needs_optimize = pytest.mark.skipif(not HAS_OPTIMIZE, reason="solveplan.optimize (CP-SAT) is not in this checkout yet")

SMALL = {"model": "gpt3-1.3b", "cluster": "a100x8"}
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def cache():
    return api.ResultCache(maxsize=256)


@pytest.fixture(scope="module")
def client(cache):
    return TestClient(create_app(cache, max_body_bytes=MAX_BODY, max_time_limit_s=30))


def test_healthz_and_openapi(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    spec = client.get("/openapi.json").json()
    assert {"/v1/plan", "/v1/check", "/v1/fewest-gpus", "/v1/admit", "/healthz"} <= set(spec["paths"])


def test_check_equals_the_library(client, cache):
    for job in (SMALL, {"model": "llama3.1-405b", "cluster": "a100x8"}, {"model": "llama2-7b", "cluster": "a100x64"}):
        r = client.post("/v1/check", json={"job": job, "time_limit_s": 20})
        assert r.status_code == 200
        assert r.json() == api.check(job, time_limit_s=20, cache=cache).model_dump(mode="json")


@needs_optimize
def test_plan_fewest_and_admit_equal_the_library(client, cache):
    r = client.post("/v1/plan?time_limit_s=20", json={"job": SMALL})
    assert r.status_code == 200 and r.json()["status"] == "OPTIMAL"
    assert r.json() == api.plan(SMALL, time_limit_s=20, cache=cache).model_dump(mode="json")

    body = {"job": {"model": "gpt3-1.3b"}, "cluster": "a100x64", "target": {"tokens_per_s": 2e5}, "time_limit_s": 30}
    r = client.post("/v1/fewest-gpus", json=body)
    assert r.status_code == 200 and r.json()["num_gpus"]
    lib = api.fewest_gpus({"model": "gpt3-1.3b"}, "a100x64", {"tokens_per_s": 2e5}, time_limit_s=30, cache=cache)
    assert r.json() == lib.model_dump(mode="json")

    jobs = [{"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}, {"id": 2, "model": "nope", "num_gpus": 8}]
    r = client.post("/v1/admit", json={"jobs": jobs, "cluster": "a100x8", "time_limit_s": 20})
    assert r.status_code == 200
    assert [d["status"] for d in r.json()["decisions"]] == ["OPTIMAL", "INVALID"]
    assert r.json() == api.admit(jobs, "a100x8", time_limit_s=20, cache=cache).model_dump(mode="json")


@pytest.mark.parametrize("path, body, loc", [
    ("/v1/check", {"job": {"model": "llama-9000", "cluster": "a100x8"}}, ["body", "job", "model"]),
    ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x12"}}, ["body", "job", "cluster"]),
    ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "zz9x8"}}, ["body", "job", "cluster"]),
    ("/v1/check", {"job": {"model": "llama2-7b"}}, ["body", "job", "cluster"]),
    ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8", "global_batch_size": 0}}, ["body", "job", "global_batch_size"]),
    ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8", "constraints": {"tq": [1]}}}, ["body", "job", "constraints", "tq"]),
    ("/v1/check", {"job": {"model": {"num_layers": 2}, "cluster": "a100x8"}}, ["body", "job", "model"]),
    ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8"}, "extra": 1}, ["body", "extra"]),
    ("/v1/plan", {"job": {"model": "llama2-7b", "cluster": "a100x8"}, "time_limit_s": -1}, ["body", "time_limit_s"]),
    ("/v1/plan", {"job": {"model": "llama2-7b", "cluster": "a100x999992"}}, ["body", "job", "cluster"]),
    ("/v1/fewest-gpus", {"job": {"model": "llama2-7b"}, "cluster": "a100", "target": {}}, ["body", "target"]),
    ("/v1/fewest-gpus", {"job": {"model": "llama2-7b"}, "target": {"tokens_per_s": 1}}, ["body", "cluster"]),
    ("/v1/fewest-gpus", {"job": {"model": "llama2-7b"}, "cluster": "q100", "target": {"tokens_per_s": 1}}, ["body", "cluster"]),
    ("/v1/admit", {"jobs": [], "cluster": "nosuch"}, ["body", "cluster"]),
    ("/v1/admit", {"jobs": {}, "cluster": "a100x8"}, ["body", "jobs"]),
])
def test_bad_input_is_422_naming_the_field(client, path, body, loc):
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    locs = [d["loc"] for d in r.json()["detail"]]
    assert any(x[: len(loc)] == loc for x in locs), locs


def test_not_json_and_wrong_types_are_422(client):
    r = client.post("/v1/check", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = client.post("/v1/check", json=[1, 2])
    assert r.status_code == 422
    r = client.post("/v1/check?time_limit_s=abc", json={"job": SMALL})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "time_limit_s"]


@pytest.mark.parametrize("raw", [
    b'{"job":{"model":"gpt3-1.3b","cluster":{"gpu":"a100-80gb","num_nodes":1,"nvlink_gbyte_per_s":Infinity,"nic_gbit_per_s":1}}}',
    b'{"job":{"model":"gpt3-1.3b","cluster":{"gpu":"a100-80gb","num_nodes":1,"nvlink_gbyte_per_s":1e300,"nic_gbit_per_s":1}}}',
    b'{"job":{"model":"gpt3-1.3b","cluster":{"gpu":{"name":"g","peak_bf16_tflops":NaN,"hbm_gib":80,"hbm_gbyte_per_s":1000},"num_nodes":1,"nvlink_gbyte_per_s":1,"nic_gbit_per_s":1}}}',
    b'{"job":{"model":"gpt3-1.3b","cluster":"a100x8"},"time_limit_s":NaN}',
    b'{"job":{"model":"gpt3-1.3b"},"cluster":"a100x8","target":{"tokens_per_s":Infinity}}',
    b'{"job":{"model":"gpt3-1.3b"},"cluster":"a100x8","target":{"deadline_s":1e-300,"token_budget":1e300}}',
])
def test_non_finite_and_absurd_numbers_are_422(client, raw):
    path = "/v1/fewest-gpus" if b"target" in raw else "/v1/check"
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text


def test_big_body_is_413(client):
    body = json.dumps({"job": SMALL, "pad": "x" * MAX_BODY}).encode()
    r = client.post("/v1/check", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413

    def chunks():  # no Content-Length: counted as it streams
        for _ in range(8):
            yield b" " * (MAX_BODY // 4)

    r = client.post("/v1/check", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_time_limit_is_capped_and_reported(client):
    r = client.post("/v1/check?time_limit_s=1000", json={"job": SMALL})
    assert r.status_code == 200 and r.headers["x-time-limit-s"] == "30"
    r = client.post("/v1/check", json={"job": SMALL, "time_limit_s": 3})
    assert r.headers["x-time-limit-s"] == "3"


def test_field_loc():
    assert field_loc("jobs[2].model") == ["body", "jobs", 2, "model"]
    assert field_loc("--model") == ["body", "model"]
    assert field_loc("") == ["body"]


# ------------------------------------------------------------------ fuzz
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
                     max_leaves=12)
_names = st.sampled_from(["llama2-7b", "gpt3-1.3b", "gpt2", "x", "", "a100x8", "h100", "a100x7", "llama3.1-405b"])
_clusters = st.sampled_from(["a100x8", "a100x16", "h100x8", "v100x16", "a100", "a100x0", "selene-like", "nope"])
_ints = st.one_of(st.integers(-3, 4096), st.integers(-10**19, 10**19), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3))
_job = st.fixed_dictionaries({"model": st.one_of(_names, _json)}, optional={
    "cluster": st.one_of(_clusters, _json,
                         st.fixed_dictionaries({"gpu": st.one_of(st.just("a100-80gb"), _json),
                                                "num_nodes": _ints, "nvlink_gbyte_per_s": _ints, "nic_gbit_per_s": _ints})),
    "global_batch_size": _ints, "seq_length": _ints, "precision": st.sampled_from(["bf16", "fp8", "fp4"]),
    "flash_attention": _scalar,
    "constraints": st.one_of(_json, st.dictionaries(st.sampled_from(["tp", "pp", "zero", "recompute", "tp_max", "bad"]),
                                                    st.one_of(_ints, st.lists(_ints, max_size=3)), max_size=3)),
    "id": _scalar,
})
_target = st.one_of(_json, st.fixed_dictionaries({}, optional={"tokens_per_s": _ints, "deadline_s": _ints, "token_budget": _ints}))
_bodies = st.one_of(
    st.tuples(st.just("/v1/check"), st.one_of(_json, st.fixed_dictionaries({"job": _job}, optional={"time_limit_s": _ints}))),
    st.tuples(st.just("/v1/plan"), st.fixed_dictionaries({"job": _job}, optional={"time_limit_s": _ints})),
    st.tuples(st.just("/v1/fewest-gpus"), st.fixed_dictionaries({"job": _job, "target": _target},
                                                                 optional={"cluster": st.one_of(_clusters, _json)})),
    st.tuples(st.just("/v1/admit"), st.fixed_dictionaries({"jobs": st.lists(st.one_of(_job, _json), max_size=3),
                                                           "cluster": st.one_of(_clusters, _json)})),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_bodies)
def test_fuzzed_bodies_never_yield_5xx(client, path_body):
    path, body = path_body
    r = client.post(f"{path}?time_limit_s=0.3", json=body)
    assert r.status_code < 500, (path, body, r.text)
    if r.status_code == 422:
        assert r.json()["detail"] and all("loc" in d for d in r.json()["detail"])
    else:
        assert r.status_code == 200, r.text
        assert not _has_nonfinite(r.json())


def _has_nonfinite(x) -> bool:
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, dict):
        return any(_has_nonfinite(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_nonfinite(v) for v in x)
    return False


# ------------------------------------------------------------------ hostile clients (issue #17)
@pytest.mark.parametrize("raw, needle", [
    (b'{"job": {"model": "gpt3-1.3b", "model": "gpt2", "cluster": "a100x8"}}', "twice"),
    (b'{"job": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'{"job": {"model": "gpt3-1.3b", "cluster": "a100x8", "global_batch_size": ' + b"9" * 5000 + b"}}", "digits"),
    (b'{"job": {"model": "gpt3-1.3b", "cluster": "a100x8"}, "x": "\xff"}', "not UTF-8"),
])
def test_unsafe_json_is_422_before_parsing(client, raw, needle):
    r = client.post("/v1/check", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and needle in r.json()["detail"][0]["msg"], r.text


@pytest.mark.parametrize("ref", ["/etc/shadow", "../../etc/passwd", "/proc/kmsg", "/no/such.yaml"])
def test_the_service_opens_no_client_named_file(client, ref):
    for body in ({"job": {"model": ref, "cluster": "a100x8"}}, {"job": {"model": "gpt3-1.3b", "cluster": ref}}):
        r = client.post("/v1/check", json=body)
        assert r.status_code == 422 and "opens no files" in r.json()["detail"][0]["msg"], r.text


def test_a_spec_directory_serves_plain_names(tmp_path, cache):
    (tmp_path / "tiny.yaml").write_text("num_layers: 4\nhidden_size: 512\nnum_attention_heads: 8\n"
                                        "ffn_hidden_size: 2048\nvocab_size: 32000\n")
    c = TestClient(create_app(cache, spec_dir=str(tmp_path)))
    assert c.post("/v1/check", json={"job": {"model": "tiny.yaml", "cluster": "a100x8"}}).json()["status"] == "FEASIBLE"
    r = c.post("/v1/check", json={"job": {"model": str(tmp_path / "tiny.yaml"), "cluster": "a100x8"}})
    assert r.status_code == 422


def test_requests_beyond_a_clients_cap_are_429(cache):
    import anyio

    from solveplan.service import Guard
    from solveplan.catalog import SpecFiles

    release = anyio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = Guard(slow_app, max_bytes=1000, policy=SpecFiles(None), max_client_requests=2, max_requests=100,
                  body_timeout_s=5, in_flight={})
    statuses = []

    async def one(host):
        sent = False

        async def receive():  # the body, then (as a server does) nothing until the client leaves
            nonlocal sent
            if sent:
                await anyio.sleep_forever()
            sent = True
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(msg):
            if msg["type"] == "http.response.start":
                statuses.append((host, msg["status"]))

        await guard({"type": "http", "client": (host, 1)}, receive, send)

    async def main():
        async with anyio.create_task_group() as tg:
            for host in ("10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"):
                tg.start_soon(one, host)
                await anyio.sleep(0.01)
            release.set()

    anyio.run(main)
    assert sorted(statuses) == [("10.0.0.1", 200), ("10.0.0.1", 200), ("10.0.0.1", 429), ("10.0.0.2", 200)]


def test_absurd_targets_and_hardware_are_422(client):
    r = client.post("/v1/fewest-gpus", json={"job": {"model": "gpt3-1.3b"}, "cluster": "a100x64",
                                            "target": {"tokens_per_s": 1e300}})
    assert r.status_code == 422
    gpu = {"name": "g", "peak_bf16_tflops": 1e-20, "hbm_gib": 80, "hbm_gbyte_per_s": 2000}
    r = client.post("/v1/check", json={"job": {"model": "gpt3-1.3b", "cluster": {
        "gpu": gpu, "num_nodes": 1, "nvlink_gbyte_per_s": 300, "nic_gbit_per_s": 200}}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "peak_bf16_tflops"
