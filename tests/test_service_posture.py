"""The service's posture on a network: connections that hold no complete request cannot lock
an honest client out (a live uvicorn server on loopback), Host headers are checked, a bearer
token is asked when configured, and no docs page loads third-party scripts."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from fastapi.testclient import TestClient  # noqa: E402

from solveplan import api  # noqa: E402
from solveplan.admission.http_guards import IncompleteConnections, allowed_hosts, read_token  # noqa: E402
from solveplan.errors import InputError  # noqa: E402
from solveplan.service import create_app, uvicorn_config  # noqa: E402


class _Conn:
    def __init__(self, name):
        self.name, self.closed = name, False

    def evict(self):
        self.closed = True


def test_incomplete_connections_evict_the_oldest_not_the_newcomer():
    caps = IncompleteConnections(max_total=4, max_per_client=2)
    a = [_Conn(f"a{i}") for i in range(3)]
    for c in a:
        caps.incomplete(c, "10.0.0.1")
    assert [c.closed for c in a] == [True, False, False]  # the address's own oldest made room
    b = [_Conn(f"b{i}") for i in range(2)]
    for c in b:
        caps.incomplete(c, "10.0.0.2")
    honest = _Conn("honest")
    caps.incomplete(honest, "10.0.0.3")  # 4 in all: the oldest of any address is closed
    assert a[1].closed and not honest.closed
    caps.complete(honest)  # its request arrived: no longer counted
    assert honest not in caps.all and "10.0.0.3" not in caps.by_client
    assert caps.evicted == 2 and len(caps.all) == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def live_server():
    """A real uvicorn server with small caps: 16 requests in flight in all, 4 incomplete
    connections per address, 12 in all."""
    import uvicorn

    port = _free_port()
    app = create_app(api.ResultCache(), allowed_host_names=allowed_hosts("127.0.0.1"), max_requests=16)
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, "critical", header_timeout_s=30,
                                           max_incomplete=12, max_client_incomplete=4))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(10)


def _half_body(port: int, source: str) -> socket.socket:
    """A connection that sends a request head and 1 byte of its 1,000-byte body, then waits."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
              b"content-length: 1000\r\n\r\n{")
    return s


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.2)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_idle_connections_do_not_lock_out_an_honest_client(live_server):
    import httpx

    port = live_server
    idle = [_half_body(port, f"127.0.5.{1 + k // 8}") for k in range(48)]  # 8 from each of 6 addresses
    time.sleep(0.3)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        codes = [c.get("/healthz").status_code for _ in range(5)]
        codes.append(c.post("/v1/check", json={"job": {"model": "gpt3-1.3b", "cluster": "a100x8"}}).status_code)
    closed = sum(_closed_by_server(s) for s in idle)
    for s in idle:
        s.close()
    assert codes == [200] * 6  # 48 half-sent bodies hold none of the 16 request slots
    assert closed >= 48 - 12  # the caps closed the oldest, long before the 30 s head/body timeouts


def test_host_header_is_checked(live_server):
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{live_server}", timeout=10) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"host": "localhost:8080"}).status_code == 200
        r = c.get("/healthz", headers={"host": "evil.example:8080"})
        assert r.status_code == 400 and "Host header" in r.json()["detail"][0]["msg"]


def test_allowed_hosts():
    assert allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "planner.internal" in allowed_hosts("0.0.0.0", ("Planner.internal",))
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")


def test_bearer_token(tmp_path):
    token = "s3cret-token-0123456789"
    app = create_app(api.ResultCache(), token=token)
    c = TestClient(app)
    assert c.get("/healthz").status_code == 401
    assert c.get("/healthz", headers={"authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    r = c.get("/healthz", headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 200
    f = tmp_path / "token"
    f.write_text(token + "\n")
    assert read_token(str(f)) == token
    f.write_text("short\n")
    with pytest.raises(InputError, match="at least 16"):
        read_token(str(f))


def test_no_docs_page_loads_third_party_scripts():
    c = TestClient(create_app(api.ResultCache()))
    assert c.get("/docs").status_code == 404 and c.get("/redoc").status_code == 404
    assert c.get("/openapi.json").status_code == 200


# ------------------------------------------------------------------ the service accepts what the CLI accepts (#24)
def test_an_inline_hugging_face_config_and_pooled_cluster_are_served_as_the_library_serves_them():
    import json

    from conftest import DATA

    cache = api.ResultCache()
    c = TestClient(create_app(cache))
    hf = json.loads((DATA / "hf" / "Llama-3.2-3B" / "config.json").read_text())
    job = {"model": hf, "cluster": "a100x16"}
    r = c.post("/v1/check", json={"job": job, "time_limit_s": 5})
    assert r.status_code == 200, r.text
    assert r.json()["feasible"] == api.check(job, time_limit_s=5, cache=api.ResultCache()).feasible
    pools = {"name": "mix", "inter_pool_gbit_per_s": 100, "link_overrides": [{"src": 0, "dst": 1, "gbit_per_s": 50}],
             "pools": [{"name": "h100", "gpu": "h100-sxm", "num_nodes": 1, "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400},
                       {"name": "a100", "gpu": "a100-80gb", "num_nodes": 1, "nvlink_gbyte_per_s": 300,
                        "nic_gbit_per_s": 200}]}
    r = c.post("/v1/check", json={"job": {"model": "gpt3-1.3b", "cluster": pools}, "time_limit_s": 5})
    assert r.status_code == 200, r.text


def test_the_openapi_schema_types_model_cluster_and_constraints():
    schema = TestClient(create_app(api.ResultCache())).get("/openapi.json").json()
    job = schema["components"]["schemas"]["JobRequest"]["properties"]
    text = str(job["model"])
    assert "num_layers" in text and "HuggingFaceConfig" in text
    assert "pools" in str(job["cluster"]) and "peak_bf16_tflops" in str(job["cluster"])
    assert "pp_max" in str(job["constraints"])


@pytest.mark.parametrize("job, needle", [
    ({"model": "gpt3-1.3b", "cluster": {"gpu": "a100-80gb", "num_nodes": 2, "nvlink_gbyte_per_s": 300,
                                        "nic_gbit_per_s": 200, "node_names": ["a", "evil\nslots=64"]}}, "host name"),
    ({"model": "gpt3-1.3b", "cluster": "a100x8", "id": "x\ud800"}, "lone surrogate"),
    ({"model": {"name": "m\x1b[31m", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "ffn_hidden_size": 256, "vocab_size": 100, "seq_length": 128}, "cluster": "a100x8"}, "control character"),
    ({"model": "gpt3-1.3b", "cluster": "a100x8", "flash_attention": False, "attention_kernel": "flash2"}, "flash2"),
])
def test_hostile_names_and_knobs_are_422_with_an_escaped_message(job, needle):
    import json

    c = TestClient(create_app(api.ResultCache()))
    body = json.dumps({"job": job, "time_limit_s": 2}, ensure_ascii=True)
    r = c.post("/v1/check", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    msg = " ".join(d["msg"] for d in r.json()["detail"])
    assert needle in msg and "\x1b" not in msg and "\n" not in msg and "non-finite" not in msg
