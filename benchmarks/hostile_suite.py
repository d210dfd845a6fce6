"""The slow part of the hostile-input suite (issue #27 item 8): every hostile CLI input as a real
subprocess, and HTTP probes against a live `solveplan serve` on loopback.

CLI: every file of tests/data/hostile through every command that reads a file (the slots of
tests/test_hostile_cli.py) and every bad flag there, each `python -m solveplan.cli ...` in its
own process: required exit code 2, one line on stderr starting `error: `, no traceback, no
escape character (ESC) in the output.
HTTP: every hostile file that parses as JSON/YAML posted inline as the job, as the model and as
the cluster of /v1/check and /v1/plan; every file's raw bytes as a body; hostile Host headers,
paths and methods: required a 4xx (never 2xx, never 5xx), a JSON error naming the problem and no
ESC or newline in any message.

Usage:
    python benchmarks/hostile_suite.py --write          # ~5-10 min on 2 cores (CLI ~1 s a case)
    python benchmarks/hostile_suite.py --cli-limit 100  # a sample of the CLI cases
Writes benchmarks/results/hostile_suite.md (with --write).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import RESULTS, ROOT, code_state
from service_abuse import wait_ready
from service_load import free_port

sys.path.insert(0, str(ROOT / "tests"))
from test_hostile_cli import FILE_CASES, FLAG_CASES, HOSTILE, SLOTS, _argv  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), NO_COLOR="1")


def cli_case(argv: list[str], tmp: Path) -> str | None:
    """What is wrong with the CLI's answer to `argv` (None: exit 2, one line, no traceback)."""
    try:
        r = subprocess.run([sys.executable, "-m", "solveplan.cli", *argv], cwd=tmp, env=ENV, capture_output=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "no answer within 120 s"
    err, out = r.stderr.decode("utf-8", "replace"), r.stdout.decode("utf-8", "replace")
    if "Traceback" in err + out:
        return "traceback: " + err.strip().splitlines()[-1][:200]
    if r.returncode != 2:
        return f"exit {r.returncode}: {err[:200]!r}"
    if len(err.splitlines()) != 1 or not err.startswith("error: "):
        return f"not one error line: {err[:200]!r}"
    if "\x1b" in err + out:
        return "an escape character reached the terminal"
    return None


def run_cli(limit: int | None, workers: int) -> tuple[int, list[str]]:
    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    os.mkfifo(tmp / "fifo")
    (tmp / "jobs.jsonl").write_text(json.dumps({"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}) + "\n")
    cases = [_argv(SLOTS[slot], tmp, name) for slot, name in FILE_CASES] + [_argv(a, tmp) for a in FLAG_CASES]
    cases = cases[:limit] if limit else cases
    cases = [a for a in cases if not any("\0" in x for x in a)]  # no exec takes a NUL byte: tested in-process
    with ThreadPoolExecutor(workers) as pool:
        verdicts = list(pool.map(lambda a: cli_case(a, tmp), cases))
    return len(cases), [f"`{' '.join(a)[:120]}`: {v}" for a, v in zip(cases, verdicts) if v]


def parsed(path: Path):
    """The file's data by the project's safe reader (no aliases: a billion-laughs file would
    expand while the probe is encoded); None for what it refuses (sent only as raw bytes)."""
    from solveplan.errors import InputError
    from solveplan.specs.reading import parse_data

    try:
        return parse_data(path.read_text("utf-8"), "f", path.name, "json" if path.suffix == ".json" else "yaml")
    except (InputError, UnicodeDecodeError):
        return None


def http_probes() -> list[tuple[str, str, dict, bytes]]:
    """(name, method+path, headers, body) of each probe."""
    h = {"content-type": "application/json", "host": "127.0.0.1"}
    probes = []
    for f in sorted(HOSTILE.iterdir()):
        if f.name in ("cluster_family_name_v100.yaml", "model_name_markup.yaml"):
            continue  # valid specs (tested for what they should do)
        probes.append((f"raw {f.name}", "POST /v1/check", h, f.read_bytes()))
        data = parsed(f)
        if not isinstance(data, dict):
            continue
        for route in ("/v1/check", "/v1/plan"):
            probes.append((f"{route} job={f.name}", f"POST {route}", h, json.dumps({"job": data, "time_limit_s": 2}).encode()))
        if "num_layers" in data or "model_type" in data or "_name_or_path" in data:
            probes.append((f"model={f.name}", "POST /v1/check", h,
                           json.dumps({"job": {"model": data, "cluster": "a100x8"}, "time_limit_s": 2}).encode()))
        if any(k in data for k in ("gpu", "pools", "node_names", "num_nodes")):
            probes.append((f"cluster={f.name}", "POST /v1/check", h,
                           json.dumps({"job": {"model": "gpt3-1.3b", "cluster": data}, "time_limit_s": 2}).encode()))
    ok_body = json.dumps({"job": {"model": "gpt3-1.3b", "cluster": "a100x8"}}).encode()
    for host in ("evil.example", "127.0.0.1.evil.example", "localhost.evil", "", "[::1", "0.0.0.0", "127.0.0.2"):
        probes.append((f"Host {host!r}", "POST /v1/check", {**h, "host": host}, ok_body))
    for p in ("/docs", "/redoc", "/docs/oauth2-redirect", "/v1/../etc/passwd", "/v1/plan/../../x", "/%2e%2e/etc/passwd"):
        probes.append((f"GET {p}", f"GET {p}", h, b""))
    probes.append(("DELETE /v1/plan", "DELETE /v1/plan", h, b""))
    return probes


def run_http(base: str) -> tuple[int, list[str], dict]:
    import httpx

    bad, codes = [], {}
    probes = http_probes()
    with httpx.Client(base_url=base, timeout=60) as c:
        for name, target, headers, body in probes:
            method, path = target.split(" ", 1)
            try:
                r = c.request(method, path, headers=headers, content=body)
            except httpx.HTTPError as exc:
                bad.append(f"{name}: {type(exc).__name__}")
                continue
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            if not 400 <= r.status_code < 500:
                bad.append(f"{name}: {r.status_code} {r.text[:150]!r}")
            elif any("\x1b" in str(d.get("msg", "")) or "\n" in str(d.get("msg", "")) for d in _detail(r)):
                bad.append(f"{name}: unescaped text in {r.text[:150]!r}")
    return len(probes), bad, codes


def _detail(r) -> list[dict]:
    try:
        d = r.json().get("detail")
    except ValueError:
        return []
    return d if isinstance(d, list) else [{"msg": str(d)}]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli-limit", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    n_cli, bad_cli = run_cli(args.cli_limit, args.workers)
    t_cli = time.monotonic() - t0
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "solveplan.cli", "serve", "--port", str(port), "--log-level",
                             "critical"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        n_http, bad_http, codes = run_http(base)
    finally:
        proc.terminate()
        proc.wait(10)
    lines = ["# Hostile-input suite, slow part (issue #27 item 8)", "",
             f"`python benchmarks/hostile_suite.py` at {code_state()}, 2 shared cores, loopback only.", "",
             f"- CLI: {n_cli} command lines, each a fresh process ({t_cli:.0f} s): {n_cli - len(bad_cli)} answered "
             f"exit 2 with one escaped error line; {len(bad_cli)} did not",
             f"- HTTP: {n_http} probes against `solveplan serve`: statuses {dict(sorted(codes.items()))}; "
             f"{len(bad_http)} not a 4xx with an escaped message", ""]
    lines += [f"- {x}" for x in bad_cli + bad_http] or ["No traceback, no 5xx, no silent acceptance."]
    print("\n".join(lines))
    if args.write:
        (RESULTS / "hostile_suite.md").write_text("\n".join(lines) + "\n")
    return 1 if bad_cli or bad_http else 0


if __name__ == "__main__":
    sys.exit(main())
