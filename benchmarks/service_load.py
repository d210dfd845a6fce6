"""Load test of the HTTP service: N concurrent clients for T seconds against a server this
script starts on 127.0.0.1 (loopback only), asserting no 5xx and answers identical to the
library's.

1. Start `python -m solveplan.cli serve --host 127.0.0.1 --port P` (a free port) and wait for
   /healthz (bounded: 60 s).
2. Compute the library's answers in this process for a mix of requests (check, plan,
   fewest-gpus, admit over catalog jobs, with generous time limits), and warm the server with
   the same requests once, so both sides hold final answers.
3. N client threads (httpx, one connection each) send random requests from the mix -- and
   malformed ones (unknown model, bad field, oversized body), which must get 422/413 -- until
   T seconds have passed. Every 200 answer is compared with the library's (timing fields
   dropped: the wall time of a search differs between processes).
4. Stop the server; print latency percentiles per endpoint and status counts; exit 1 on any
   5xx, any mismatch, or any transport error.

Usage:
    python benchmarks/service_load.py                 # 50 clients, 60 s
    python benchmarks/service_load.py --seconds 10 --clients 20
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

from admission_latency import pct  # the same percentile definition as the latency report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

JOBS = [
    {"model": "gpt3-1.3b", "cluster": "a100x8"},
    {"model": "llama2-7b", "cluster": "a100x64"},
    {"model": "gpt3-13b", "cluster": "a100x64"},
    {"model": "llama3.1-8b", "cluster": "h100x64"},
    {"model": "llama2-70b", "cluster": "h100x256"},
    {"model": "llama3.1-405b", "cluster": "a100x8"},  # does not fit
]
TIMING_KEYS = {"wall_time_s", "elapsed_s"}


def canonical(obj):
    """Drop what legitimately differs between processes: search wall times and solver timings."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in TIMING_KEYS or (k == "solver" and isinstance(v, dict)):
                continue
            out[k] = canonical(v)
        return out
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def post_and_judge(c, name: str, path: str, body, want, expected):
    """(response or None, what is wrong or None): a 5xx, a status other than `want` (None: any
    below 500), a 200 whose answer is not `expected` (canonical form; None: not compared), or a
    transport error."""
    import httpx

    try:
        r = c.post(path, json=body)
    except httpx.HTTPError as exc:
        return None, f"{name}: transport error {exc!r}"
    if r.status_code >= 500:
        return r, f"{name}: HTTP {r.status_code} {r.text[:200]}"
    if want is not None and r.status_code != want:
        return r, f"{name}: HTTP {r.status_code}, expected {want}: {r.text[:200]}"
    if want == 200 and expected is not None and canonical(r.json()) != expected:
        return r, f"{name}: answer differs from the library's"
    return r, None


class Tally:
    """Status codes and failures (the first 50) of many client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.codes: dict[int, int] = {}
        self.failures: list[str] = []

    def add(self, r, problem) -> bool:
        """Count a response (None: a transport error) and its problem; True when one came back."""
        with self.lock:
            if r is not None:
                self.codes[r.status_code] = self.codes.get(r.status_code, 0) + 1
            if problem and len(self.failures) < 50:
                self.failures.append(problem)
        return r is not None


def requests_mix():
    """[(name, path, body, library call)]"""
    from solveplan import api

    out = []
    for j in JOBS:
        tag = f"{j['model']}@{j['cluster']}"
        out.append((f"check {tag}", "/v1/check", {"job": j, "time_limit_s": 30},
                    lambda j=j: api.check(j, time_limit_s=30)))
        out.append((f"plan {tag}", "/v1/plan", {"job": j, "time_limit_s": 30},
                    lambda j=j: api.plan(j, time_limit_s=30)))
    fg = {"job": {"model": "gpt3-1.3b"}, "cluster": "a100x64", "target": {"tokens_per_s": 2.0e5}, "time_limit_s": 60}
    out.append(("fewest gpt3-1.3b", "/v1/fewest-gpus", fg,
                lambda: api.fewest_gpus({"model": "gpt3-1.3b"}, "a100x64", {"tokens_per_s": 2.0e5}, time_limit_s=60)))
    jobs = [{"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}, {"id": 2, "model": "llama2-7b", "num_gpus": 64},
            {"id": 3, "model": "llama3.1-405b", "num_gpus": 8}, {"id": 4, "model": "gpt3-13b", "num_gpus": 64}]
    out.append(("admit batch", "/v1/admit", {"jobs": jobs, "cluster": "a100x128", "time_limit_s": 60},
                lambda: api.admit(jobs, "a100x128", time_limit_s=60)))
    return out


BAD = [
    ("bad model", "/v1/check", {"job": {"model": "llama-9000", "cluster": "a100x8"}}, 422),
    ("bad cluster", "/v1/plan", {"job": {"model": "llama2-7b", "cluster": "a100x12"}}, 422),
    ("bad field", "/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8", "global_batch_size": -4}}, 422),
    ("bad target", "/v1/fewest-gpus", {"job": {"model": "llama2-7b"}, "cluster": "a100", "target": {}}, 422),
    ("oversized", "/v1/check", {"job": {"model": "llama2-7b", "cluster": "a100x8"}, "pad": "x" * (2 << 20)}, 413),
]


SECTION = "## HTTP service under load"


def put_section(path: Path, title: str, body: str) -> None:
    """Replace (or append) the markdown section `title` of `path` (up to the next '## ')."""
    text = path.read_text() if path.exists() else ""
    block = f"{title}\n\n{body.rstrip()}\n"
    start = text.find(title + "\n")
    if start < 0:
        text = text.rstrip() + ("\n\n" if text else "") + block
    else:
        end = text.find("\n## ", start + len(title))
        text = text[:start] + block + (text[end:] if end >= 0 else "")
    path.write_text(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--bad-fraction", type=float, default=0.1, help="share of malformed requests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", type=Path, default=None,
                    help=f"put the summary in this markdown file as the section '{SECTION}' (replacing it), e.g. "
                         f"benchmarks/results/admission_latency.md")
    args = ap.parse_args(argv)
    if args.clients < 1 or args.clients > 500 or args.seconds <= 0 or args.seconds > 3600:
        ap.error("--clients in 1..500, --seconds in (0, 3600]")
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    server = subprocess.Popen([sys.executable, "-m", "solveplan.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                               "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    failures: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                print(server.stderr.read().decode(errors="replace"), file=sys.stderr)
                print("server exited before answering /healthz", file=sys.stderr)
                return 1
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                print("server did not answer /healthz within 60 s", file=sys.stderr)
                return 1
            time.sleep(0.2)

        mix = requests_mix()
        t0 = time.monotonic()
        expected = {}
        with httpx.Client(base_url=base, timeout=120) as c:
            for name, path, body, lib in mix:
                expected[name] = canonical(lib().model_dump(mode="json"))
                r = c.post(path, json=body)  # warm the server
                if r.status_code != 200:
                    failures.append(f"warm-up {name}: HTTP {r.status_code} {r.text[:200]}")
                elif canonical(r.json()) != expected[name]:
                    failures.append(f"warm-up {name}: answer differs from the library's")
        print(f"library answers and server warm-up: {time.monotonic() - t0:.1f} s", flush=True)

        lat: dict[str, list[float]] = {}
        tally = Tally()
        stop_at = time.monotonic() + args.seconds

        def client(k: int):
            rng = random.Random(args.seed * 1000 + k)
            # each client from its own loopback address, as separate machines (the server caps requests per address)
            transport = httpx.HTTPTransport(local_address=f"127.0.1.{k % 250 + 1}")
            with httpx.Client(base_url=base, timeout=60, transport=transport) as c:
                while time.monotonic() < stop_at:
                    if rng.random() < args.bad_fraction:
                        name, path, body, want = rng.choice(BAD)
                    else:
                        name, path, body, _ = rng.choice(mix)
                        want = 200
                    t = time.perf_counter()
                    r, problem = post_and_judge(c, name, path, body, want, expected.get(name) if want == 200 else None)
                    dt = time.perf_counter() - t
                    if tally.add(r, problem):
                        with tally.lock:
                            lat.setdefault(path if want == 200 else f"{path} (bad)", []).append(dt)

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(args.seconds + 120)
        codes = tally.codes
        failures.extend(tally.failures)
        total = sum(codes.values())
        n5 = sum(v for k, v in codes.items() if k >= 500)
        out = [f"{args.clients} clients, {args.seconds:g} s (`python benchmarks/service_load.py --clients {args.clients} "
               f"--seconds {args.seconds:g}`; {os.cpu_count()} CPUs shared by server and clients, load average "
               f"{os.getloadavg()[0]:.1f}): {total} requests ({total / args.seconds:.0f}/s), status codes "
               f"{dict(sorted(codes.items()))}; 5xx: {n5}; answers differing from the library's or other failures: "
               f"{len(failures)}. The clients run in a closed loop, so latency is about clients / throughput = "
               f"{1e3 * args.clients / max(total / args.seconds, 1e-9):.0f} ms: queueing in one server process that "
               f"shares the CPUs with its {args.clients} clients (every answer is a cache hit after the warm-up).", "",
               "| endpoint | n | p50 ms | p95 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
        for path, xs in sorted(lat.items()):
            out.append(f"| {path} | {len(xs)} | {1e3 * pct(xs, 50):.1f} | {1e3 * pct(xs, 95):.1f} | "
                       f"{1e3 * pct(xs, 99):.1f} | {1e3 * max(xs):.1f} |")
        print("\n" + "\n".join(out))
        for f in failures[:20]:
            print("  " + f)
        if args.report is not None:
            put_section(args.report, SECTION, "\n".join(out))
        return 1 if failures or n5 else 0
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
