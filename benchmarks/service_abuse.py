"""Replay the attacks of issue #17 against a live `solveplan serve` on loopback, then a bounded
load test beside them, and report what each attack gets.

The server is started by this script on 127.0.0.1 (default settings: no spec directory, 8
requests in flight per client, 10 s to send a request head and body). Clients use their own
loopback source addresses (127.0.0.2, 127.0.1.x, ...) so that per-client caps apply as they
would to separate machines. Server memory is its resident set size (/proc/PID/status), sampled
every 0.25 s from the first request to the end.

Attacks (each: what is sent, the outcome that is required):
  file-read     models/clusters naming /etc/shadow, /etc/passwd, ../ paths, a repo YAML, a missing
                path -> 422, the same message for all, no line of any file in any answer
  fifo          64 concurrent requests naming /proc/kmsg -> 422 at once; a valid check still answers
  huge-space    the 327-byte check (4,096 layers, 5,040 heads, 6 x 5,040 GPUs) and the same within the
                spec ranges (30 x 1,008 GPUs) -> 422 naming the limit; memory stays flat
  starve        8 heavy plans with time_limit_s 1 from one client, then a victim's check from another
                -> the victim gets its answer; the workers are idle within seconds of the attackers'
  target        tokens_per_s 1e300 on /v1/fewest-gpus and /v1/admit -> 422
  family-name   a V100 cluster named h100x64 on /v1/admit -> priced with V100s (the library's answer)
  history       plan at 0.35 s then 30 s; infeasible at 0.5 s then 30 s -> equal to a cold library call
  unsafe-json   duplicate keys, 5,000-deep nesting, a 5,000-digit integer, non-UTF-8 -> 422
  idle          300 connections with half a request head -> all closed by the server within the head
                timeout; the service answers meanwhile
  slow-body     a body that never completes -> 408 within the body timeout
  client-cap    24 concurrent plans from one address -> 429 beyond 8 in flight, no 5xx
Load: 50 clients (each its own address), 60 s, a mix of valid catalog requests (answers
compared with the library's), invalid ones (422/413) and heavy ones (distinct large jobs with
short limits: any 200/422/429, never 5xx).

Usage:
    python benchmarks/service_abuse.py                      # everything (~4 min on 2 cores)
    python benchmarks/service_abuse.py --load-seconds 10    # shorter load test
Writes benchmarks/results/service_abuse.md (with --write).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import RESULTS, ROOT, commit
from service_load import JOBS, Tally, canonical, free_port, post_and_judge, requests_mix

MB = 1 << 20


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Server:
    def __init__(self, port: int):
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.port = port
        self.proc = subprocess.Popen([sys.executable, "-m", "solveplan.cli", "serve", "--host", "127.0.0.1",
                                      "--port", str(port), "--log-level", "critical"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()

    def sample(self):
        while not self._stop.is_set() and self.proc.poll() is None:
            try:
                self.samples.append((time.monotonic(), rss_bytes(self.proc.pid)))
            except OSError:
                return
            time.sleep(0.25)

    def stop(self):
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def client(base: str, source: str, timeout: float = 120):
    import httpx

    return httpx.Client(base_url=base, timeout=timeout, transport=httpx.HTTPTransport(local_address=source))


def wait_ready(base: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("server did not answer /healthz within 60 s")


def in_parallel(fns) -> list:
    out = [None] * len(fns)

    def run(i, fn):
        try:
            out[i] = fn()
        except Exception as exc:  # noqa: BLE001 - reported as the outcome
            out[i] = exc

    ts = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    return out


# ------------------------------------------------------------------ attacks
def attack_file_read(base):
    refs = ["/etc/shadow", "/etc/passwd", "../../../../etc/passwd", str(ROOT / "models" / "gpt3-13b.yaml"),
            "/no/such/file.yaml", "/proc/self/environ"]
    secrets = [line.split(":")[0] + ":" for line in Path("/etc/passwd").read_text().splitlines()[:5]]
    codes, msgs, leaked = [], set(), False
    with client(base, "127.0.0.2") as c:
        for ref in refs:
            for body in ({"job": {"model": ref, "cluster": "a100x8"}}, {"job": {"model": "gpt3-1.3b", "cluster": ref}}):
                r = c.post("/v1/check", json=body)
                codes.append(r.status_code)
                msgs.add(r.json()["detail"][0]["msg"] if r.status_code == 422 else r.text)
                leaked |= any(s in r.text for s in secrets) or "num_layers" in r.text
    ok = set(codes) == {422} and len(msgs) == 1 and not leaked
    return ok, f"{len(codes)} requests: HTTP {sorted(set(codes))}; {len(msgs)} distinct message(s); file content in an answer: {leaked}"


def attack_fifo(base):
    t0 = time.monotonic()
    fns = [lambda k=k: client(base, f"127.0.2.{k + 1}").post(
        "/v1/check", json={"job": {"model": "/proc/kmsg", "cluster": "a100x8"}}).status_code for k in range(64)]
    codes = in_parallel(fns)
    took = time.monotonic() - t0
    with client(base, "127.0.0.3") as c:
        t1 = time.monotonic()
        r = c.post("/v1/check", json={"job": JOBS[0], "time_limit_s": 10})
        after = time.monotonic() - t1
    ok = all(x == 422 for x in codes) and r.status_code == 200 and r.json()["status"] == "FEASIBLE"
    return ok, f"64 requests: HTTP {sorted(set(map(str, codes)))} in {took:.2f} s; then a valid check: {r.status_code} {r.json().get('status')} in {after:.2f} s"


def attack_huge_space(base):
    model = {"num_layers": 4096, "hidden_size": 5040, "num_attention_heads": 5040, "ffn_hidden_size": 5040,
             "vocab_size": 5040}
    raw = {"job": {"model": model, "cluster": {"gpu": "h100-sxm", "gpus_per_node": 5040, "num_nodes": 6,
                                               "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400}}}
    ranged = {"job": {"model": {**model, "hidden_size": 40320, "ffn_hidden_size": 161280, "vocab_size": 50400,
                                "global_batch_size": 30240, "seq_length": 4096},
                      "cluster": {"gpu": "h100-sxm", "gpus_per_node": 1008, "num_nodes": 30,
                                  "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400}}}
    out = []
    with client(base, "127.0.0.4") as c:
        for body in (raw, ranged):
            t0 = time.monotonic()
            r = c.post("/v1/check", json=body)
            out.append((r.status_code, time.monotonic() - t0, r.json()["detail"][0]["msg"][:90] if r.status_code == 422 else ""))
    ok = all(code == 422 for code, _, _ in out)
    return ok, "; ".join(f"HTTP {c} in {t:.2f} s ({m})" for c, t, m in out)


def attack_starve(base):
    heavy = [{"job": {"model": m, "cluster": cl, "global_batch_size": gbs}, "time_limit_s": 1}
             for m, cl, gbs in [("llama3.1-405b", "h100x16384", 2048), ("gpt3-175b", "a100x32768", 4096),
                                ("llama3.1-405b", "h100x8192", 4096), ("gpt3-175b", "a100x16384", 3072),
                                ("llama2-70b", "h100x16384", 8192), ("llama3.1-405b", "h100x32768", 8192),
                                ("gpt3-175b", "a100x8192", 6144), ("llama3.1-70b", "h100x32768", 16384)]]
    attacker = client(base, "127.0.0.5")
    t0 = time.monotonic()
    res = in_parallel([lambda b=b: attacker.post("/v1/plan", json=b).status_code for b in heavy])
    answered = time.monotonic() - t0
    with client(base, "127.0.0.6") as c:
        t1 = time.monotonic()
        r = c.post("/v1/check", json={"job": {"model": "gpt3-13b", "cluster": "a100x128"}, "time_limit_s": 10})
        victim = time.monotonic() - t1
        idle_after = None
        for _ in range(240):
            if c.get("/healthz").json()["cache"]["inflight"] == 0:
                idle_after = time.monotonic() - t0 - answered
                break
            time.sleep(0.25)
    attacker.close()
    ok = r.status_code == 200 and r.json()["status"] == "FEASIBLE" and idle_after is not None and idle_after < 15
    return ok, (f"8 heavy plans (1 s limit): HTTP {sorted(set(map(str, res)))}, all answered in {answered:.1f} s; victim's "
                f"check: {r.status_code} {r.json().get('status')} in {victim:.2f} s; workers idle "
                f"{idle_after if idle_after is None else round(idle_after, 1)} s after the attackers' answers")


def attack_target(base):
    with client(base, "127.0.0.7") as c:
        a = c.post("/v1/fewest-gpus", json={"job": {"model": "gpt3-1.3b"}, "cluster": "a100x64",
                                           "target": {"tokens_per_s": 1e300}}).status_code
        b = c.post("/v1/admit", json={"jobs": [{"id": 1, "model": "gpt3-1.3b", "target": {"tokens_per_s": 1e300}}],
                                     "cluster": "a100x64"})
    status = b.json()["decisions"][0]["status"] if b.status_code == 200 else None
    ok = a == 422 and b.status_code == 200 and status == "INVALID"
    return ok, f"fewest-gpus: HTTP {a}; admit: HTTP {b.status_code}, decision {status}"


def attack_family_name(base):
    from solveplan import api

    v100 = {"name": "h100x64", "gpu": "v100-32gb", "num_nodes": 8, "gpus_per_node": 8, "nvlink_gbyte_per_s": 150,
            "nic_gbit_per_s": 100}
    jobs = [{"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}]
    with client(base, "127.0.0.8") as c:
        r = c.post("/v1/admit", json={"jobs": jobs, "cluster": v100, "time_limit_s": 30})
    got = r.json()["decisions"][0]["plan"]["step_time_s"]
    own = api.plan({"model": "gpt3-1.3b", "cluster": {**v100, "num_nodes": 1}}, time_limit_s=30).plan.step_time_s
    h100 = api.plan({"model": "gpt3-1.3b", "cluster": "h100x8"}, time_limit_s=30).plan.step_time_s
    ok = r.status_code == 200 and abs(got - own) <= 1e-9 * own
    return ok, f"step {got:.3f} s on the client's V100s (library: {own:.3f} s; the catalog's h100x8 would be {h100:.3f} s)"


def attack_history(base):
    from solveplan import api

    out, ok = [], True
    with client(base, "127.0.0.9") as c:
        for job, short in (({"model": "llama3.1-70b", "cluster": "h100x512"}, 0.35),
                           ({"model": "llama3.1-405b", "cluster": "a100x16"}, 0.5)):
            c.post("/v1/plan", json={"job": job, "time_limit_s": short})
            r = c.post("/v1/plan", json={"job": job, "time_limit_s": 30})
            lib = api.plan(job, time_limit_s=30, cache=api.ResultCache())
            same = canonical(r.json()) == canonical(lib.model_dump(mode="json"))
            ok &= same
            out.append(f"{job['model']}@{job['cluster']} {short} s then 30 s: {r.json()['status']}, "
                       f"{'equal to' if same else 'DIFFERS from'} a cold library call")
    return ok, "; ".join(out)


def attack_unsafe_json(base):
    bodies = [b'{"job": {"model": "gpt3-1.3b", "model": "gpt2", "cluster": "a100x8"}}',
              b'{"job": ' + b"[" * 5000 + b"]" * 5000 + b"}",
              b'{"job": {"model": "gpt3-1.3b", "cluster": "a100x8", "global_batch_size": ' + b"9" * 5000 + b"}}",
              b'{"job": {"model": "gpt3-1.3b\xff", "cluster": "a100x8"}}']
    with client(base, "127.0.0.10") as c:
        codes = [c.post("/v1/check", content=b, headers={"content-type": "application/json"}).status_code for b in bodies]
    return codes == [422] * 4, f"HTTP {codes}"


def attack_idle(base, port):
    socks = []
    for k in range(300):
        s = socket.socket()
        s.bind((f"127.0.3.{k % 250 + 1}", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    with client(base, "127.0.0.11") as c:
        t0 = time.monotonic()
        r = c.post("/v1/check", json={"job": JOBS[0], "time_limit_s": 10})
        during = time.monotonic() - t0
    time.sleep(12)
    closed = 0
    for s in socks:
        s.settimeout(0.5)
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        s.close()
    return closed == 300 and r.status_code == 200, (f"300 half-sent heads: {closed} closed by the server within 12 s; "
                                                    f"a check meanwhile: {r.status_code} in {during:.2f} s")


def attack_slow_body(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
    s.settimeout(30)
    t0 = time.monotonic()
    head = s.recv(64).split(b"\r\n")[0].decode(errors="replace")
    took = time.monotonic() - t0
    s.close()
    return head.startswith("HTTP/1.1 408") and took < 15, f"{head!r} after {took:.1f} s"


def attack_client_cap(base):
    c = client(base, "127.0.0.12")
    body = {"job": {"model": "llama3.1-405b", "cluster": "h100x4096", "global_batch_size": 1024}, "time_limit_s": 3}
    codes = in_parallel([lambda: c.post("/v1/plan", json=body).status_code for _ in range(24)])
    c.close()
    counts = {str(x): codes.count(x) for x in set(codes)}
    return all(isinstance(x, int) and x < 500 for x in codes) and codes.count(429) >= 1, f"24 concurrent: {counts}"


# ------------------------------------------------------------------ load
def load_test(base, seconds: float, clients: int):
    mix = requests_mix()
    expected = {}
    for name, path, body, lib in mix:
        expected[name] = canonical(lib().model_dump(mode="json"))
    with client(base, "127.0.0.13") as c:
        for name, path, body, lib in mix:
            c.post(path, json=body)
    bad = [("/v1/check", {"job": {"model": "llama-9000", "cluster": "a100x8"}}, 422),
           ("/v1/check", {"job": {"model": "/etc/passwd", "cluster": "a100x8"}}, 422),
           ("/v1/plan", {"job": {"model": "llama2-7b", "cluster": "a100x8", "global_batch_size": True}}, 422),
           ("/v1/fewest-gpus", {"job": {"model": "llama2-7b"}, "cluster": "a100", "target": {"tokens_per_s": 1e300}}, 422),
           ("/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8"}, "pad": "x" * (2 << 20)}, 413)]
    tally = Tally()
    stop_at = time.monotonic() + seconds

    def one(k):
        rng = random.Random(k)
        with client(base, f"127.0.1.{k + 1}", timeout=90) as c:
            while time.monotonic() < stop_at:
                u = rng.random()
                if u < 0.15:
                    path, body, want = rng.choice(bad)
                    name = None
                elif u < 0.25:  # heavy: a distinct large job, short limit
                    gbs = rng.choice([1024, 2048, 3072, 4096, 6144, 8192])
                    body = {"job": {"model": rng.choice(["llama3.1-405b", "gpt3-175b", "llama2-70b"]),
                                    "cluster": f"h100x{rng.choice([2048, 4096, 8192, 16384])}", "global_batch_size": gbs},
                            "time_limit_s": rng.choice([0.5, 1, 2])}
                    path, want, name = rng.choice(["/v1/check", "/v1/plan"]), None, None
                else:
                    name, path, body, _ = rng.choice(mix)
                    want = 200
                tally.add(*post_and_judge(c, name or path, path, body, want, expected.get(name) if name else None))

    in_parallel([lambda k=k: one(k) for k in range(clients)])
    return tally.codes, tally.failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load-seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/service_abuse.md")
    args = ap.parse_args(argv)
    if not (0 < args.load_seconds <= 600 and 1 <= args.clients <= 200):
        ap.error("--load-seconds in (0, 600], --clients in 1..200")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = Server(port)
    rows = []
    try:
        wait_ready(base)
        with client(base, "127.0.0.2") as c:  # warm: catalog loaded, modules imported
            c.post("/v1/check", json={"job": JOBS[0], "time_limit_s": 30})
        baseline = rss_bytes(server.proc.pid)
        threading.Thread(target=server.sample, daemon=True).start()
        attacks = [("file-read", lambda: attack_file_read(base)), ("fifo", lambda: attack_fifo(base)),
                   ("huge-space", lambda: attack_huge_space(base)), ("starve", lambda: attack_starve(base)),
                   ("target", lambda: attack_target(base)), ("family-name", lambda: attack_family_name(base)),
                   ("history", lambda: attack_history(base)), ("unsafe-json", lambda: attack_unsafe_json(base)),
                   ("idle", lambda: attack_idle(base, port)), ("slow-body", lambda: attack_slow_body(port)),
                   ("client-cap", lambda: attack_client_cap(base))]
        for name, fn in attacks:
            t0 = time.monotonic()
            try:
                ok, what = fn()
            except Exception as exc:  # noqa: BLE001 - an attack that breaks the harness is a failure
                ok, what = False, f"harness error: {exc!r}"
            rows.append((name, ok, what, time.monotonic() - t0))
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {what}", flush=True)
        t0 = time.monotonic()
        codes, failures = load_test(base, args.load_seconds, args.clients)
        n = sum(codes.values())
        n5 = sum(v for k, v in codes.items() if k >= 500)
        load_ok = n5 == 0 and not failures
        load = (f"{args.clients} clients x {args.load_seconds:g} s: {n} requests ({n / args.load_seconds:.0f}/s), "
                f"status codes {dict(sorted(codes.items()))}, 5xx: {n5}, failures (mismatch with the library, "
                f"transport errors, wrong status): {len(failures)}")
        print(f"{'ok  ' if load_ok else 'FAIL'} load: {load}", flush=True)
        for f in failures[:10]:
            print("   ", f)
        alive = server.proc.poll() is None
    finally:
        server.stop()
    peak = max((m for _, m in server.samples), default=baseline)
    mem_ok = peak - baseline < 1.5 * 1024 * MB
    lines = ["# HTTP service under attack (issue #17)", "",
             f"`python benchmarks/service_abuse.py --write` at commit {commit()}, {os.cpu_count()} CPUs shared by the "
             f"server and its clients (load average {os.getloadavg()[0]:.1f} at the end). The server is "
             f"`solveplan serve` with its defaults on 127.0.0.1; clients use their own loopback addresses.", "",
             "| attack | outcome | required | wall s |", "|---|---|---|---:|"]
    for name, ok, what, secs in rows:
        lines.append(f"| {name} | {what} | {'met' if ok else 'NOT MET'} | {secs:.1f} |")
    lines += ["", f"Load beside them: {load} ({'met' if load_ok else 'NOT MET'}).", "",
              f"Server memory (resident): {baseline / MB:.0f} MiB after warm-up, peak {peak / MB:.0f} MiB "
              f"(+{(peak - baseline) / MB:.0f} MiB; required: under +1536 MiB: {'met' if mem_ok else 'NOT MET'}); "
              f"server alive at the end: {alive}."]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.write:
        (RESULTS / "service_abuse.md").write_text(text)
    return 0 if all(ok for _, ok, _, _ in rows) and load_ok and mem_ok and alive else 1


if __name__ == "__main__":
    sys.exit(main())
