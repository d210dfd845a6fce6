"""Fair admission of connections (issue #27 item 2): idle and half-sent connections from many
loopback addresses must not lock an honest client out.

A server (`solveplan serve` with its defaults, 127.0.0.1) is started by this script. Attackers:
`--addresses` loopback addresses (127.0.9.1, 127.0.9.2, ...) with `--per-address` connections
each; every connection sends a request head announcing a 1,000-byte body and 1 byte of it, then
waits; when the server answers (408) or closes it, it reconnects at once and does the same. An
honest client from 127.0.0.1 (httpx, keep-alive) meanwhile sends a warm `/v1/check` every
`--interval` seconds for `--seconds` seconds. Reported: the honest client's status counts and
latency percentiles, how many attack connections the server closed (408 or eviction) and the
attackers' reconnects.

Usage:
    python benchmarks/service_fairness.py --write                        # 33 x 8 = 264 idle, 40 s
    python benchmarks/service_fairness.py --addresses 75 --per-address 8 # beyond the 512 cap: eviction
    python benchmarks/service_fairness.py --source-root DIR              # the server from another checkout
Writes benchmarks/results/service_fairness.md (with --write; appends a section per run).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import RESULTS, ROOT, code_state
from admission_latency import pct
from service_abuse import wait_ready
from service_load import free_port

HEAD = (b"POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: 1000\r\n\r\n{")
JOB = {"job": {"model": "gpt3-13b", "cluster": "a100x64"}, "time_limit_s": 5}


def start_server(port: int, source_root: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(source_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "solveplan.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "critical"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Attackers:
    """`n` connections per address over `addresses` addresses, each kept half-sent and reopened
    as soon as the server closes it (one thread, a selector)."""

    def __init__(self, port: int, addresses: int, per_address: int):
        self.port, self.sources = port, [f"127.0.9.{1 + a}" for a in range(addresses) for _ in range(per_address)]
        self.sel = selectors.DefaultSelector()
        self.closed_by_server = self.got_408 = self.connects = self.failed_connects = 0
        self.stop = threading.Event()

    def _open(self, source: str) -> None:
        s = socket.socket()
        try:
            s.bind((source, 0))
            s.connect(("127.0.0.1", self.port))
            s.sendall(HEAD)
        except OSError:
            s.close()
            self.failed_connects += 1
            return
        self.connects += 1
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ, source)

    def run(self) -> None:
        for source in self.sources:
            self._open(source)
        while not self.stop.is_set():
            for key, _ in self.sel.select(0.2):
                s, source = key.fileobj, key.data
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                self.got_408 += data.startswith(b"HTTP/1.1 408")
                self.sel.unregister(s)
                s.close()
                self.closed_by_server += 1
                if not self.stop.is_set():
                    self._open(source)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


def honest(base: str, seconds: float, interval: float) -> list[tuple[int, float]]:
    """(status, latency s) of each request; status 0 is a transport error."""
    import httpx

    out = []
    stop_at = time.monotonic() + seconds
    with httpx.Client(base_url=base, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.1")) as c:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            try:
                status = c.post("/v1/check", json=JOB).status_code
            except httpx.HTTPError:
                status = 0
            out.append((status, time.monotonic() - t0))
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addresses", type=int, default=33)
    ap.add_argument("--per-address", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--source-root", type=Path, default=ROOT, help="a checkout whose solveplan serves (default: this one)")
    ap.add_argument("--label", default=None, help="how the run is named in the report")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.source_root)
    try:
        wait_ready(base)
        httpx.post(f"{base}/v1/check", json=JOB, timeout=60)  # warm: the answer is cached
        attackers = Attackers(port, args.addresses, args.per_address)
        thread = threading.Thread(target=attackers.run, daemon=True)
        thread.start()
        time.sleep(2.0)  # every idle connection open before the honest client starts
        cpu0 = _cpu_s(proc.pid)
        rows = honest(base, args.seconds, args.interval)
        cpu = _cpu_s(proc.pid) - cpu0
        attackers.stop.set()
        thread.join(10)
    finally:
        proc.terminate()
        proc.wait(10)
    lat = sorted(t for _, t in rows)
    codes = {c: sum(1 for s, _ in rows if s == c) for c in sorted({s for s, _ in rows})}
    ok = set(codes) == {200} and pct(lat, 99) < 1.0
    label = args.label or f"solveplan at {code_state()}" if args.source_root == ROOT else (args.label or str(args.source_root))
    lines = [f"### {label}: {args.addresses} addresses x {args.per_address} half-sent connections, {args.seconds:g} s", "",
             f"- honest client (127.0.0.1, a warm /v1/check every {args.interval:g} s): {len(rows)} requests, "
             f"statuses {codes}; latency p50 {pct(lat, 50) * 1e3:.1f} ms, p99 {pct(lat, 99) * 1e3:.1f} ms, "
             f"max {lat[-1] * 1e3:.1f} ms",
             f"- attack connections: {attackers.connects} opened ({attackers.failed_connects} refused at connect), "
             f"{attackers.closed_by_server} closed by the server ({attackers.got_408} of them with 408)",
             f"- server CPU during the run: {cpu:.1f} s over {args.seconds:g} s",
             f"- verdict (no 429 or error, p99 < 1 s): {'PASS' if ok else 'FAIL'}", ""]
    print("\n".join(lines))
    if args.write:
        out = RESULTS / "service_fairness.md"
        if not out.exists():
            out.write_text("# Fair admission of connections (issue #27 item 2)\n\n"
                           "`python benchmarks/service_fairness.py` (see its docstring): 2 shared cores, server, "
                           "attackers and the honest client on the same machine, loopback only.\n\n")
        with out.open("a") as fh:
            fh.write(f"Load average at the end: {os.getloadavg()[0]:.1f}\n\n" + "\n".join(lines) + "\n")
    return 0 if ok else 1


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
