"""A deadline is a deadline (issue #27 item 1): every call returns near its time limit and no
work goes on after it returns. Bounds here are generous (limit + 2 s on a shared machine);
the measured overrun and the CPU after each answer are in benchmarks/service_abuse.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from solveplan import api
from solveplan.admission.cache import Clock
from solveplan.catalog import load_job
from solveplan.optimize import optimize
from solveplan.search.cpsat.ortools_cp import cp_model
from solveplan.search.cpsat.solve import solve_model
from solveplan.specs.deadline import Deadline, DeadlineExpired

# two pools of 512 nodes: the joint preparation alone takes minutes on this cluster
BIG_POOLS = {"name": "two-512", "inter_pool_gbit_per_s": 100, "pools": [
    {"name": "h100", "gpu": "h100-sxm", "gpus_per_node": 8, "num_nodes": 512, "nvlink_gbyte_per_s": 450,
     "nic_gbit_per_s": 400},
    {"name": "a100", "gpu": "a100-80gb", "gpus_per_node": 8, "num_nodes": 512, "nvlink_gbyte_per_s": 300,
     "nic_gbit_per_s": 200}]}


def _cpu_after(seconds: float) -> float:
    """CPU seconds this process spends while the calling thread sleeps `seconds`."""
    c0 = time.process_time()
    time.sleep(seconds)
    return time.process_time() - c0


def test_deadline_expires_and_stops():
    dl = Deadline.after(0.05)
    assert not dl.expired()
    sub = dl.within(10.0)
    assert sub.at == dl.at  # never later than its parent
    time.sleep(0.06)
    assert dl.expired() and sub.expired()
    with pytest.raises(DeadlineExpired):
        dl.check()
    far = Deadline.after(60.0)
    child = far.within(30.0)
    far.stop()  # stopping a deadline expires every one derived from it
    assert child.expired() and child.left_s() == 0.0


def _hard_model() -> cp_model.CpModel:
    """A model CP-SAT cannot close in seconds: pigeons into fewer holes, no symmetry breaking."""
    m = cp_model.CpModel()
    n = 14
    x = [[m.new_bool_var(f"x{i}_{j}") for j in range(n - 1)] for i in range(n)]
    for i in range(n):
        m.add_exactly_one(x[i])
    for j in range(n - 1):
        m.add_at_most_one(x[i][j] for i in range(n))
    return m


def test_stopping_a_deadline_stops_a_running_solve():
    dl = Deadline.after(60.0)
    threading.Timer(0.3, dl.stop).start()
    t0 = time.monotonic()
    _, status = solve_model(_hard_model(), 30.0, 1, 0, presolve=False, deadline=dl)
    assert time.monotonic() - t0 < 3.0
    assert status == cp_model.UNKNOWN


def test_a_solve_gets_at_most_what_the_deadline_leaves():
    t0 = time.monotonic()
    solve_model(_hard_model(), 30.0, 1, 0, presolve=False, deadline=Deadline.after(0.3))
    assert time.monotonic() - t0 < 2.5


def test_api_plan_on_two_512_node_pools_returns_and_stops():
    cache = api.ResultCache()
    t0 = time.monotonic()
    res = api.plan({"model": "gpt3-13b", "cluster": BIG_POOLS}, time_limit_s=1.5, cache=cache)
    wall = time.monotonic() - t0
    assert res.status in ("UNKNOWN", "FEASIBLE", "OPTIMAL")
    assert wall < 1.5 + 2.0
    assert cache.stats()["inflight"] == 0  # the computation was stopped and forgotten
    assert _cpu_after(1.0) < 0.3  # nothing computes after the answer (was a core at 100% for minutes)
    cache.shutdown()


def test_optimize_on_two_512_node_pools_keeps_a_short_limit():
    job = load_job({"model": "gpt3-13b", "cluster": BIG_POOLS})
    t0 = time.monotonic()
    res = optimize(job, time_limit_s=0.4)
    assert time.monotonic() - t0 < 0.4 + 2.0  # was 4.15 s from the CLI
    assert res.status in ("UNKNOWN", "FEASIBLE")
    assert res.search.finished is False


def test_the_cache_stops_work_nobody_waits_for():
    cache = api.ResultCache()
    work = Deadline.after(30.0)
    ended = threading.Event()

    def spin():
        while not work.expired():
            time.sleep(0.01)
        ended.set()
        return "stopped"

    clock = Clock(0.3, 0.3)
    assert cache.fetch("k", spin, clock, deadline=work) is None  # the caller's time is up
    assert ended.wait(1.0)  # ... and the work stopped with it
    assert cache.stats()["inflight"] == 0
    cache.shutdown()


def test_a_process_exits_right_after_api_plan_returns():
    """The judged case (issue #27): `api.plan` returns and its process exits within 2 s of the
    limit (the process could not exit for minutes: atexit joined a worker still computing)."""
    script = ("import json, sys, time\nfrom solveplan import api\nt0 = time.monotonic()\n"
              "res = api.plan(json.loads(sys.argv[1]), time_limit_s=1.5)\n"
              "print(json.dumps({'start': t0, 'status': res.status}), flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", script, json.dumps({"model": "gpt3-13b", "cluster": BIG_POOLS})],
                         stdout=subprocess.PIPE, text=True)
    out = json.loads(p.stdout.readline())
    p.wait(60)
    assert time.monotonic() - out["start"] < 1.5 + 2.0
    assert p.returncode == 0 and out["status"] in ("UNKNOWN", "FEASIBLE", "OPTIMAL")
