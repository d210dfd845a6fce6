"""Hostile and careless command lines (issue #17): a corpus of bad inputs -- the malicious files
in tests/data/hostile (non-UTF-8, deep nesting, 5,000-digit integers, a YAML billion-laughs
file, duplicate keys, booleans and zeros where numbers are expected, absurd hardware, paths to
/etc and /proc, a FIFO) through every command that reads a file, and bad flag values -- each of
which must exit 2 with exactly one line on stderr, never a traceback, never a silently changed
input. Runs in-process (`solveplan.cli.main`); `SOLVEPLAN_HOSTILE_SUBPROCESS=1` runs every case
as a real subprocess instead (slow: ~1 s a case)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import DATA, run_subprocess

HOSTILE = DATA / "hostile"
SUBPROCESS = os.environ.get("SOLVEPLAN_HOSTILE_SUBPROCESS") == "1"
NOT_FILES = ["/etc/shadow", "/etc/passwd", "/proc/kmsg", "/proc/self/environ", "/dev/zero", "/etc", "{tmp}/fifo",
             "{tmp}/missing.yaml", "../../../../etc/hostname"]
# valid in some command: kept out of the file corpus (tested for what they should do instead)
VALID_SOMEWHERE = {"cluster_family_name_v100.yaml", "jobs_bad.jsonl", "model_name_markup.yaml",
                   "model_name_backslash_emoji.yaml"}
FILES = sorted(p.name for p in HOSTILE.iterdir() if p.name not in VALID_SOMEWHERE) + NOT_FILES

# every command line that reads a file the user names ({f}); {tmp} is a scratch directory
SLOTS = {
    "show": ["show", "{f}"],
    "job": ["optimize", "--job", "{f}", "--time-limit", "5"],
    "evaluate-job": ["evaluate", "--job", "{f}"],
    "model": ["optimize", "--model", "{f}", "--cluster", "a100x8", "--time-limit", "5"],
    "cluster": ["optimize", "--model", "gpt3-1.3b", "--cluster", "{f}", "--time-limit", "5"],
    "links-show": ["links", "show", "{f}"],
    "links": ["optimize", "--model", "gpt3-1.3b", "--cluster", "a100x16", "--links", "{f}", "--time-limit", "5"],
    "steps": ["calibrate", "--cluster", "a100x16", "--steps", "{f}", "-o", "{tmp}/out.yaml"],
    "admit-cluster": ["admit", "{tmp}/jobs.jsonl", "--cluster", "{f}"],
}
# only where they are bad input: an evaluated configuration of a huge job is a fine answer
ONLY_IN = {"job_inline_heads_5040.json": {"job", "show", "model", "cluster", "links-show", "links", "steps",
                                          "admit-cluster"}}

FILE_CASES = [(slot, f) for f in FILES for slot in SLOTS if slot in ONLY_IN.get(f, SLOTS)]

J = ["--model", "gpt3-1.3b", "--cluster", "a100x8"]
FLAG_CASES = [
    *[["optimize", *J, "--global-batch-size", v] for v in ("0", "-1", "1e35", "9" * 5000, "", "abc", "16777217", "4.0")],
    *[["optimize", *J, "--seq-len", v] for v in ("0", "-2048", "1e5", "", "99999999999")],
    *[["optimize", *J, "--tp", v] for v in ("", "4,,8", "0", "-4", "4.5", "9" * 30, ",", "four")],
    *[["optimize", *J, "--pp-max", v] for v in ("0", "-1", "x")],
    *[["optimize", *J, "--zero", v] for v in ("4", "", "0,5", "one")],
    *[["optimize", *J, "--recompute", v] for v in ("", "some", "none,all")],
    *[["optimize", *J, "--time-limit", v] for v in ("0", "-1", "nan", "inf", "1e400", "", "abc", "1e7")],
    *[["optimize", *J, "--top-k", v] for v in ("0", "1001", "-3")],
    *[["optimize", *J, "--workers", v] for v in ("0", "257")],
    *[["optimize", *J, "--seed", v] for v in ("-1", str(2**31), "-99999999999999999999", "1.5")],
    *[["optimize", *J, "--compare", v] for v in ("", "tp=8,tp=4", "mbs=2,micro_batch_size=1", "zero=4", "tp=", "tp",
                                                  "tp=8,,pp=1", "colour=red", "tp=-8", "tp=1e3", "sp=maybe",
                                                  "layers=10:x", "layers=", "tp=99999999999")],
    *[["evaluate", *J, "--layers-per-stage", v] for v in ("", ",", "12,", "a,b", "0,24", "-1,25", "9" * 40)],
    *[["optimize", "--model", "gpt3-1.3b", "--cluster", v] for v in ("a100x0", "a100x12", "h100x" + "1" * 22, "", "x",
                                                                    "a100x-8", "tpux64")],
    *[["optimize", "--model", v, "--cluster", "a100x8"] for v in ("", "gpt3-13", "gpt3-1.3b\x00", "x" * 5000)],
    ["optimize", *J, "--format", "json", "--json", "--timeline", "{tmp}"],
    ["optimize", *J, "--timeline", "/nonexistent/dir/t.png"],
    ["optimize", *J, "--hostfile", "{tmp}/hosts"],
    *[["links", "generate", *a, "-o", "{tmp}/l.json"] for a in (
        ["--nodes", "0"], ["--nodes", "100000"], ["--nodes", "8", "--nodes-per-leaf", "0"],
        ["--nodes", "8", "--nodes-per-leaf", "9"], ["--nodes", "8", "--oversubscription", "nan"],
        ["--nodes", "8", "--oversubscription", "inf"], ["--nodes", "8", "--oversubscription", "0.5"],
        ["--nodes", "8", "--nic-gbit-per-s", "0"], ["--nodes", "8", "--nic-gbit-per-s", "1e300"],
        ["--nodes", "8", "--latency-us", "-1"], ["--nodes", "8", "--latency-us", "nan"],
        ["--nodes", "8", "--degraded-node", "99:0.5"], ["--nodes", "8", "--degraded-node", "3:2"],
        ["--nodes", "8", "--degraded-node", "x:y"], ["--nodes", "8", "--degraded-node", "3:nan"],
        ["--nodes", "8", "--degraded-link", "1-1:0.5"], ["--nodes", "8", "--degraded-link", "1-99:0.5"],
        ["--nodes", "8", "--rack-order", "random"])],
    *[["links", "generate", "--nodes", "8", "-o", v] for v in ("{tmp}", "/nonexistent/x.json", "", "{tmp}/fifo")],
    *[["admit", v, "--cluster", "a100x16"] for v in ("{tmp}/missing.jsonl", "/etc", "{tmp}/fifo", "/proc/kmsg")],
    *[["admit", "{tmp}/jobs.jsonl", "--cluster", "a100x16", "--time-limit", v] for v in ("0", "nan", "-5")],
    *[["serve", *a] for a in (["--port", "70000"], ["--max-time-limit", "nan"], ["--spec-dir", "/nonexistent"],
                              ["--max-client-requests", "0"], ["--header-timeout", "0"])],
]


def test_the_corpus_is_large():
    assert len(FILE_CASES) + len(FLAG_CASES) >= 300, (len(FILE_CASES), len(FLAG_CASES))


@pytest.fixture
def scratch(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "jobs.jsonl").write_text(json.dumps({"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}) + "\n")
    return tmp_path


def _argv(argv: list[str], tmp: Path, f: str = "") -> list[str]:
    f = f.replace("{tmp}", str(tmp))
    if f and "/" not in f and (HOSTILE / f).exists():
        f = str(HOSTILE / f)
    return [a.replace("{f}", f).replace("{tmp}", str(tmp)) for a in argv]


def _one_line_exit_2(r, argv) -> None:
    lines = r.err.splitlines()
    assert "Traceback" not in r.err and "Traceback" not in r.out, (argv, r.err[-2000:])
    assert r.code == 2, (argv, r.code, r.err[-500:], r.out[-500:])
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, r.err)


def _run(cli, argv, tmp):
    return run_subprocess(*argv, cwd=tmp) if SUBPROCESS else cli(*argv)


@pytest.mark.parametrize("slot, name", FILE_CASES, ids=[f"{s}-{f}" for s, f in FILE_CASES])
def test_hostile_file(cli, scratch, slot, name):
    argv = _argv(SLOTS[slot], scratch, name)
    _one_line_exit_2(_run(cli, argv, scratch), argv)


@pytest.mark.parametrize("argv", FLAG_CASES, ids=[" ".join(a)[:80] for a in FLAG_CASES])
def test_bad_flag(cli, scratch, argv):
    argv = _argv(argv, scratch)
    _one_line_exit_2(_run(cli, argv, scratch), argv)


def test_bad_lines_of_an_admission_batch_are_error_records(cli):
    r = cli("admit", str(HOSTILE / "jobs_bad.jsonl"), "--cluster", "a100x16", "--time-limit", "5")
    assert r.code == 0 and r.err == "", r.err
    records = [json.loads(x) for x in r.out.splitlines()]
    assert [x["line"] for x in records] == [1, 2, 3, 4]
    assert all("error" in x for x in records), records
    assert records[0]["field"] == "num_gpus" and "twice" in records[1]["error"] and "deeply" in records[2]["error"]


def test_a_custom_cluster_named_like_a_family_keeps_its_gpus(cli):
    r = cli("show", str(HOSTILE / "cluster_family_name_v100.yaml"), "--json")
    assert r.code == 0 and json.loads(r.out)["spec"]["gpu"]["name"] == "v100-32gb"


def test_markup_in_a_name_prints_as_written(cli):
    r = cli("show", str(HOSTILE / "model_name_markup.yaml"))
    assert r.code == 0 and "Traceback" not in r.err, r.err
    assert "model [/] [link=http://evil]x[/link] [bold]" in r.out


@pytest.mark.parametrize("ref", ["gpt\x1b[2J\x1b[31m3", "a" * 1_000_000, "x\ud800", "l1\nerror: forged", "[/]"])
def test_an_error_line_is_escaped_and_short(cli, ref):
    r = cli("optimize", "--model", ref, "--cluster", "a100x8")
    _one_line_exit_2(r, ["optimize", "--model", ref[:40]])
    assert "\x1b" not in r.err and len(r.err) < 2200 and "\ud800" not in r.err


def test_no_hostfile_line_can_be_injected(cli, tmp_path):
    """A node name with a newline, a space or an escape never reaches a hostfile: the links
    file and the cluster file are refused, and nothing is written."""
    out = tmp_path / "hosts"
    for links in ("links_host_newline.json", "links_host_space.json", "links_host_ansi.csv"):
        r = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x16", "--links", str(HOSTILE / links),
                "--hostfile", str(out), "--time-limit", "5")
        _one_line_exit_2(r, links)
        assert "hosts[1]" in r.err and not out.exists()
    r = cli("optimize", "--model", "gpt3-1.3b", "--cluster", str(HOSTILE / "cluster_node_newline.yaml"),
            "--hostfile", str(out), "--time-limit", "5")
    _one_line_exit_2(r, "cluster_node_newline.yaml")
    assert "node_names" in r.err and not out.exists()


def test_evaluate_honours_the_jobs_constraints(cli, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"model": "gpt3-1.3b", "cluster": "a100x8", "constraints": {"tp": [8], "recompute": ["full"]}}))
    r = cli("evaluate", "--job", str(job), "--json")
    assert r.code == 0, r.err
    par = json.loads(r.out)["parallel"]
    assert (par["tp"], par["recompute"]) == (8, "full")
    r = cli("evaluate", "--job", str(job), "--tp", "4")
    _one_line_exit_2(r, "evaluate --tp 4")
    assert "--tp" in r.err and "constraints" in r.err


def test_evaluate_honours_the_jobs_expert_constraints(cli, tmp_path):
    """ep/etp constraints are constraints like tp's: a job fixing ep prices that ep when --ep is not
    given (it silently priced ep 1 before), and an --ep outside them is one line naming --ep."""
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"model": "qwen3-30b-a3b", "cluster": "h100x64", "global_batch_size": 512,
                               "constraints": {"ep": [8], "etp": [1]}}))
    r = cli("evaluate", "--job", str(job), "--tp", "1", "--pp", "1", "--json")
    assert r.code == 0, r.err
    par = json.loads(r.out)["parallel"]
    assert (par["ep"], par["etp"]) == (8, 1)
    r = cli("evaluate", "--job", str(job), "--tp", "1", "--pp", "1", "--ep", "4")
    _one_line_exit_2(r, "evaluate --ep 4")
    assert "--ep" in r.err and "ep in [8]" in r.err


def test_calibrate_without_scipy_says_which_extra(cli, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    r = cli("calibrate", "--cluster", "a100x16", "--nccl-tests", str(DATA / "nccl" / "all_reduce_perf_8gpu.log"),
            "-o", str(tmp_path / "fit.yaml"))
    _one_line_exit_2(r, "calibrate without scipy")
    assert "solveplan[fit]" in r.err and not (tmp_path / "fit.yaml").exists()


# ------------------------------------------------------------------ fuzz
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("SOLVEPLAN_FUZZ_EXAMPLES", "40"))
_value = st.one_of(st.integers(-10**6, 10**6).map(str), st.integers(-10**40, 10**40).map(str),
                   st.floats().map(repr), st.text(max_size=12), st.sampled_from(["", ",", "4,8", "0", "nan", "inf", "-1",
                                                                                 "1e35", "tp=8,tp=4", "a100x12"]))
_flags = st.sampled_from(["--global-batch-size", "--seq-len", "--tp", "--pp", "--pp-max", "--zero", "--recompute",
                          "--micro-batch-size", "--cp", "--vp", "--dp-max", "--precision", "--compare", "--top-k",
                          "--seed", "--workers", "--cluster", "--model"])
_optimize = st.lists(st.tuples(_flags, _value), max_size=3).map(
    lambda kv: ["optimize", "--model", "gpt3-1.3b", "--cluster", "a100x8", "--time-limit", "0.5",
                *[x for pair in kv for x in pair]])
_evaluate = st.lists(st.tuples(st.sampled_from(["--tp", "--pp", "--cp", "--vp", "--micro-batch-size", "--zero",
                                                "--recompute", "--layers-per-stage", "--global-batch-size"]), _value),
                     max_size=3).map(lambda kv: ["evaluate", "--model", "gpt3-1.3b", "--cluster", "a100x8",
                                                 *[x for pair in kv for x in pair]])
_generate = st.lists(st.tuples(st.sampled_from(["--nodes-per-leaf", "--oversubscription", "--nic-gbit-per-s",
                                                "--latency-us", "--degraded-node", "--degraded-link", "--rack-order"]),
                               _value), max_size=3).map(
    lambda kv: ["links", "generate", "--nodes", "8", "-o", "{tmp}/l.json", *[x for pair in kv for x in pair]])


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
@given(argv=st.one_of(_optimize, _evaluate, _generate))
def test_fuzzed_command_lines_never_trace_back(cli, tmp_path, argv):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    r = cli(*argv)
    assert "Traceback" not in r.err + r.out, (argv, r.err[-2000:])
    assert r.code in (0, 2, 3, 4), (argv, r.code, r.err[-500:])
    if r.code == 2:
        assert len(r.err.splitlines()) == 1 and r.err.startswith("error: "), (argv, r.err)


def test_backslashes_and_emoji_codes_in_a_name_print_as_written(cli):
    """rich reads `\\[` as an escaped bracket and `:smile:` as an emoji: neither may change a name."""
    r = cli("show", str(HOSTILE / "model_name_backslash_emoji.yaml"))
    assert r.code == 0 and "Traceback" not in r.err, r.err
    assert "model a\\[1] :smile: \\[b]x" in r.out
