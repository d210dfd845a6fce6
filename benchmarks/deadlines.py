"""Does work stop at its deadline (issue #27 item 1)? The largest pooled and joint jobs, with
short and long limits, through every entry point; for each answer the wall time against the
limit and the CPU seconds its process spends after answering.

- service: `solveplan serve` on loopback (this script starts it); `/v1/plan` on two pools of
  512 nodes at 20 s and 1 s, `/v1/check` on two pools of 64 nodes at 1 s. The server's CPU
  time (/proc/PID/stat, user + system) is read at the answer, 2 s and 5 s after it.
- API: a fresh process calls `api.plan(job, time_limit_s=L)` on the 512 + 512 pools, returns,
  and exits; reported are the call's wall time and when the process had exited, both from the
  start of the call (CLOCK_MONOTONIC is shared by processes), and its CPU after the answer.
- CLI: `solveplan optimize --time-limit 0.4` on the 512 + 512 pools, end to end (start-up
  included; `solveplan models` is the start-up alone, for reference), and the call it makes,
  `optimize(job, time_limit_s=0.4)`, timed alone in a warmed-up process.

Usage:
    python benchmarks/deadlines.py            # ~2 minutes on 2 cores
    python benchmarks/deadlines.py --write    # and write benchmarks/results/deadlines.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, ROOT, code_state
from service_abuse import Server, client, wait_ready
from service_load import free_port

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def pools(n: int) -> dict:
    return {"name": f"two-{n}", "inter_pool_gbit_per_s": 100, "pools": [
        {"name": "h100", "gpu": "h100-sxm", "gpus_per_node": 8, "num_nodes": n, "nvlink_gbyte_per_s": 450,
         "nic_gbit_per_s": 400},
        {"name": "a100", "gpu": "a100-80gb", "gpus_per_node": 8, "num_nodes": n, "nvlink_gbyte_per_s": 300,
         "nic_gbit_per_s": 200}]}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def service_case(c, pid: int, path: str, job: dict, limit_s: float) -> dict:
    """One request; its wall time, status, and the server's CPU 0-2 s and 2-5 s after it."""
    t0 = time.monotonic()
    r = c.post(path, json={"job": job, "time_limit_s": limit_s})
    wall = time.monotonic() - t0
    at = cpu_s(pid)
    time.sleep(2.0)
    at2 = cpu_s(pid)
    time.sleep(3.0)
    at5 = cpu_s(pid)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    return {"entry": f"service {path}", "job": f"{job['model']} on {job['cluster']['name']}", "limit_s": limit_s,
            "wall_s": wall, "status": body.get("status", r.status_code), "cpu_0_2_s": at2 - at,
            "cpu_2_5_s": at5 - at2}


API_SCRIPT = """
import json, sys, time
t0 = time.monotonic()
from solveplan import api
job = json.loads(sys.argv[1]); limit = float(sys.argv[2])
start = time.monotonic()
res = api.plan(job, time_limit_s=limit)
done = time.monotonic()
c0 = time.process_time()
print(json.dumps({"start": start, "done": done, "status": res.status, "cpu_at_answer": c0}), flush=True)
"""


def api_case(job: dict, limit_s: float) -> dict:
    """api.plan in a fresh process that exits after answering (atexit joins the workers)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", API_SCRIPT, json.dumps(job), str(limit_s)], stdout=subprocess.PIPE,
                         text=True, env=env)
    line = p.stdout.readline()
    p.wait(600)
    exited = time.monotonic()
    out = json.loads(line)
    return {"entry": "api.plan (own process)", "job": f"{job['model']} on {job['cluster']['name']}",
            "limit_s": limit_s, "wall_s": out["done"] - out["start"], "status": out["status"],
            "exit_s": exited - out["start"]}


OPTIMIZE_SCRIPT = """
import json, sys, time
from solveplan.catalog import load_job
from solveplan.optimize import optimize
job = load_job({"model": "gpt3-13b", "cluster": sys.argv[1]})
optimize(load_job({"model": "gpt3-1.3b", "cluster": "mixed-h100-a100"}), time_limit_s=2)  # imports, warm-up
t0 = time.monotonic()
res = optimize(job, time_limit_s=float(sys.argv[2]))
print(json.dumps({"wall_s": time.monotonic() - t0, "status": res.status}))
"""


def optimize_case(cluster_file: Path, limit_s: float) -> dict:
    """The CLI's call, `optimize(job, time_limit_s)`, alone (start-up and imports excluded)."""
    p = subprocess.run([sys.executable, "-c", OPTIMIZE_SCRIPT, str(cluster_file), str(limit_s)], capture_output=True,
                       text=True, timeout=600)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return {"entry": "optimize() in-process (what the CLI calls)", "job": f"gpt3-13b on {cluster_file.stem}",
            "limit_s": limit_s, "wall_s": out["wall_s"], "status": out["status"], "note": "start-up excluded"}


def cli_case(cluster_file: Path, limit_s: float) -> dict:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "solveplan.cli", "optimize", "--model", "gpt3-13b", "--cluster",
                        str(cluster_file), "--time-limit", str(limit_s)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "solveplan.cli", "models"], capture_output=True, text=True)
    startup = time.monotonic() - t0
    return {"entry": "CLI optimize (end to end)", "job": f"gpt3-13b on {cluster_file.stem}", "limit_s": limit_s,
            "wall_s": wall, "status": f"exit {r.returncode}", "startup_s": startup}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/deadlines.md")
    args = ap.parse_args(argv)
    big, mid = pools(512), pools(64)
    rows = []
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = Server(port)
    try:
        wait_ready(base)
        with client(base, "127.0.0.2") as c:
            c.post("/v1/check", json={"job": {"model": "gpt3-13b", "cluster": "a100x64"}, "time_limit_s": 30})
            for path, job, limit in [("/v1/plan", {"model": "gpt3-13b", "cluster": big}, 20.0),
                                     ("/v1/plan", {"model": "gpt3-175b", "cluster": big}, 20.0),
                                     ("/v1/plan", {"model": "gpt3-13b", "cluster": big}, 1.0),
                                     ("/v1/check", {"model": "gpt3-13b", "cluster": mid}, 1.0),
                                     ("/v1/check", {"model": "llama2-70b", "cluster": mid}, 1.0)]:
                rows.append(service_case(c, server.proc.pid, path, job, limit))
                print(rows[-1], flush=True)
    finally:
        server.stop()
    for limit in (20.0, 1.0):
        rows.append(api_case({"model": "gpt3-13b", "cluster": big}, limit))
        print(rows[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "two-512.json"
        f.write_text(json.dumps(big))
        rows.append(cli_case(f, 0.4))
        print(rows[-1], flush=True)
        rows.append(optimize_case(f, 0.4))
        print(rows[-1], flush=True)
    lines = ["# Work stops at its deadline (issue #27)", "",
             f"`python benchmarks/deadlines.py --write` at commit {code_state()}, {os.cpu_count()} CPUs shared with "
             f"other work (load average {os.getloadavg()[0]:.1f} at the end). Pools: `two-512` is 512 H100 + 512 "
             f"A100 nodes, `two-64` 64 + 64 (100 Gbit/s between pools).", "",
             "| entry | job | limit s | wall s | wall / limit | status | after the answer |",
             "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        if "cpu_0_2_s" in r:
            after = f"server CPU {r['cpu_0_2_s']:.2f} s in 0-2 s, {r['cpu_2_5_s']:.2f} s in 2-5 s"
        elif "exit_s" in r:
            after = f"process exited {r['exit_s'] - r['wall_s']:.2f} s after answering"
        elif "startup_s" in r:
            after = f"start-up alone (`solveplan models`): {r['startup_s']:.2f} s"
        else:
            after = r["note"]
        lines.append(f"| {r['entry']} | {r['job']} | {r['limit_s']:g} | {r['wall_s']:.2f} | "
                     f"{r['wall_s'] / r['limit_s']:.2f} | {r['status']} | {after} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.write:
        (RESULTS / "deadlines.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
