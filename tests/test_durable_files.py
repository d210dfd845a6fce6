"""Durable files (issue #27 item 6): every output is written whole or not at all, filesystem
errors are one line (exit 2), and a killed sweep leaves no process behind."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solveplan.errors import InputError
from solveplan.specs import writing
from solveplan.specs.writing import atomic_output, write_text

from conftest import run_subprocess


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    out = tmp_path / "links.json"
    out.write_text("valid\n")
    with pytest.raises(RuntimeError):
        with atomic_output(out, "-o") as tmp:
            tmp.write_text("half a fi")
            raise RuntimeError("the renderer failed")
    assert out.read_text() == "valid\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["links.json"]


def test_a_full_disk_is_one_input_error_and_the_old_file_stays(tmp_path, monkeypatch):
    out = tmp_path / "hosts"
    out.write_text("node0 slots=8\n")

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writing.os, "replace", full)
    with pytest.raises(InputError) as exc:
        write_text(out, "node1 slots=8\n", "--hostfile")
    assert exc.value.field == "--hostfile" and "No space left on device" in exc.value.message
    assert out.read_text() == "node0 slots=8\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]


def test_directories_and_plot_suffixes_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        write_text(tmp_path, "x", "-o")
    with pytest.raises(InputError, match=r"\.png, \.pdf or \.svg"):
        writing.check_output(tmp_path / "x.txt", "--plot", writing.PLOT_SUFFIXES)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_is_a_one_line_error_not_a_traceback():
    r = run_subprocess("links", "generate", "--nodes", "4", "-o", "/dev/full")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.strip().count("\n") == 0 and "No space left on device" in r.err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_timeline_to_dev_full_does_not_write_another_file(cli):
    existed = os.path.exists("/dev/full.png")
    r = cli("optimize", "--model", "gpt3-13b", "--cluster", "a100x64", "--timeline", "/dev/full")
    assert r.code == 2 and ".png, .pdf or .svg" in r.err
    assert os.path.exists("/dev/full.png") == existed
    r = cli("optimize", "--model", "gpt3-13b", "--cluster", "a100x64", "--timeline", "x.txt")
    assert r.code == 2 and "--timeline" in r.err and ".png, .pdf or .svg" in r.err


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(d))
    return out


def _alive(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(p)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_sweep_leaves_no_process(tmp_path, sig):
    grid = tmp_path / "grid.yaml"
    grid.write_text("models: [gpt3-175b, llama3.1-405b, llama2-70b]\nclusters: [a100x1024, h100x4096]\n"
                    "global_batch_sizes: [512, 1024, 1536]\n")
    p = subprocess.Popen([sys.executable, "-m", "solveplan.cli", "sweep", str(grid), "-o", str(tmp_path / "out.csv"),
                          "--workers", "2", "--time-limit", "30", "--quiet"], stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    kids: list[int] = []
    while len(kids) < 3 and time.monotonic() - t0 < 60:  # two workers and the resource tracker
        time.sleep(0.2)
        kids = _children(p.pid)
    time.sleep(1.0)
    kids = _children(p.pid)
    assert len(kids) >= 2
    p.send_signal(sig)
    p.wait(30)
    t1 = time.monotonic()
    while _alive(kids) and time.monotonic() - t1 < 10:
        time.sleep(0.1)
    assert _alive(kids) == []
    if sig == signal.SIGTERM:
        assert p.returncode == 130 and "Traceback" not in p.stderr.read()
