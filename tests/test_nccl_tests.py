"""nccl-tests log parser: current and older layouts, in-place columns, the footer, debug lines
and launcher prefixes; malformed rows rejected with the file and line number."""

from __future__ import annotations

from pathlib import Path

import pytest

from solveplan.errors import InputError
from solveplan.calibration.nccl_tests import (NcclRow, busbw_factor, canonical_op, format_nccl_log, parse_nccl_log,
                                  synthetic_run)

NCCL = Path(__file__).parent / "data" / "nccl"


def test_current_layout_all_reduce():
    run = parse_nccl_log(NCCL / "all_reduce_perf_8gpu.log")
    assert run.source == "all_reduce_perf_8gpu.log"
    assert (run.op, run.op_from, run.nranks, run.hosts, run.redop) == ("all_reduce", "log", 8, ("node-a",), "sum")
    assert len(run.out_of_place) == len(run.in_place) == 28
    first, last = run.out_of_place[0], run.out_of_place[-1]
    assert (first.size_bytes, first.count, first.dtype) == (8, 2, "float")
    assert last.size_bytes == 2**30 and last.count == 2**28
    # in-place columns are their own measurements
    assert run.in_place[-1].time_us != last.time_us
    assert run.in_place[-1].size_bytes == last.size_bytes
    # busbw = algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), to the printed 2 decimals
    assert last.busbw_gbs == pytest.approx(last.algbw_gbs * busbw_factor("all_reduce", 8), abs=0.02)
    assert run.avg_busbw_gbs is not None and run.avg_busbw_gbs > 0
    assert run.wrong == 0
    lines = (NCCL / "all_reduce_perf_8gpu.log").read_text().splitlines()
    assert lines[run.line_numbers[0] - 1].split()[0] == "8"
    assert lines[run.line_numbers[-1] - 1].split()[0] == str(2**30)


def test_all_gather_size_is_the_whole_buffer():
    run = parse_nccl_log(NCCL / "all_gather_perf_8gpu.log")
    assert run.op == "all_gather" and run.redop == "none"
    r = run.out_of_place[-1]
    assert r.count * 4 * 8 == r.size_bytes  # count is per rank
    assert run.ratio_nranks() == 8


def test_older_layout_with_debug_lines():
    """No root column, `error` instead of `#wrong` (printed 0e+00), `#   Rank  0 Pid` device
    lines, NCCL INFO lines inside the table, the op named on the command line."""
    run = parse_nccl_log(NCCL / "old_layout_4gpu.log")
    assert (run.op, run.op_from, run.nranks, run.hosts) == ("all_reduce", "log", 4, ("dgx-07",))
    assert len(run.out_of_place) == 25 and run.out_of_place[-1] == NcclRow(134217728, 33554432, "float", 1577.5, 85.09, 127.63)
    assert run.in_place[-1].time_us == 1563.3
    assert run.avg_busbw_gbs == pytest.approx(37.4512)
    assert run.ratio_nranks() == 4


def test_launcher_prefix_and_no_validation():
    """Every line prefixed by OpenMPI's --tag-output; -c 0 prints N/A in #wrong; the log does
    not name the test, the file name does."""
    run = parse_nccl_log(NCCL / "prefixed_sendrecv_2nodes.log")
    assert (run.op, run.op_from, run.nranks, run.hosts) == ("sendrecv", "file name", 2, ("gpu-r1-03", "gpu-r1-04"))
    assert len(run.out_of_place) == 10 and run.out_of_place[-1].time_us == 11819
    assert run.avg_busbw_gbs == pytest.approx(12.0871)


def test_text_input_that_names_no_test_is_not_guessed():
    """A log that names no test (older releases print no test name; the file name says none):
    op stays None for the caller to ask about; the rank count still follows from busbw/algbw
    once the test is known."""
    text = (NCCL / "all_reduce_perf_16gpu_2nodes.log").read_text()
    text = "\n".join(line for line in text.splitlines() if "Collective test concluded" not in line and "Rank" not in line)
    run = parse_nccl_log(text)
    assert run.source == "<text>"
    assert (run.op, run.op_from) == (None, "")
    assert run.nranks is None and run.ratio_nranks("all_reduce") == 16


def test_format_parse_round_trip():
    sizes = [1024 * 2**k for k in range(12)]
    run = synthetic_run("reduce_scatter", 8, sizes, [20 + s / 3e5 for s in sizes], hosts=("a", "b"))
    back = parse_nccl_log(format_nccl_log(run), name="rs.log")
    assert (back.op, back.nranks, back.hosts, back.redop) == ("reduce_scatter", 8, ("a", "b"), "sum")
    for a, b in zip(run.out_of_place, back.out_of_place):
        assert (a.size_bytes, a.count, a.dtype) == (b.size_bytes, b.count, b.dtype)
        assert b.time_us == pytest.approx(a.time_us, rel=1e-3, abs=0.006)


@pytest.mark.parametrize("name,line,what", [
    ("malformed_truncated.log", 21, "expected 13 columns"),
    ("malformed_time.log", 19, "must be numbers"),
])
def test_malformed_rows_name_file_and_line(name, line, what):
    with pytest.raises(InputError) as exc:
        parse_nccl_log(NCCL / name)
    msg = str(exc.value)
    assert msg.startswith(f"{name}: line {line}:") and what in msg and "\n" not in msg


def test_not_an_nccl_log():
    with pytest.raises(InputError, match=r"^not_nccl.log: no nccl-tests result table .* in 3 lines"):
        parse_nccl_log(NCCL / "not_nccl.log")


def test_missing_file_and_two_tables(tmp_path):
    with pytest.raises(InputError, match="nope.log: file does not exist"):
        parse_nccl_log(tmp_path / "nope.log")
    with pytest.raises(InputError, match="nope.log: file does not exist"):
        parse_nccl_log(str(tmp_path / "nope.log"))
    text = (NCCL / "all_reduce_perf_8gpu.log").read_text()
    p = tmp_path / "twice.log"
    p.write_text(text + text)
    n = len(text.splitlines())
    with pytest.raises(InputError, match=rf"twice.log: line {n + 14}: a second result table \(the first starts at line 14\)"):
        parse_nccl_log(p)


def test_empty_table(tmp_path):
    head = [line for line in (NCCL / "all_reduce_perf_8gpu.log").read_text().splitlines() if line.startswith("#")][:15]
    p = tmp_path / "all_reduce_empty.log"
    p.write_text("\n".join(head) + "\n")
    with pytest.raises(InputError, match="all_reduce_empty.log: line 14: the result table has no rows"):
        parse_nccl_log(p)


def test_op_names():
    assert canonical_op("all_reduce_perf") == "all_reduce"
    assert canonical_op("AllGather") == "all_gather"
    assert canonical_op("reduce-scatter") == "reduce_scatter"
    assert canonical_op("p2p") == "sendrecv"
    assert canonical_op("bogus") is None
    assert busbw_factor("all_gather", 4) == 0.75 and busbw_factor("sendrecv", 2) == 1.0


@pytest.mark.parametrize("name", ["all_reduce_perf_timestamps.log", "all_reduce_perf_timestamp_first.log",
                                  "all_reduce_perf.json"])
def test_newer_layouts_read_like_the_plain_log(name):
    """-S 1 timestamps (after the row as released, before it as first proposed) and -J JSON:
    the same rows as the plain log they were rendered from (tests/data/nccl/write_newer_layouts.py)."""
    plain = parse_nccl_log(NCCL / "all_reduce_perf_8gpu.log")
    run = parse_nccl_log(NCCL / name)
    assert (run.op, run.op_from, run.nranks, run.hosts) == ("all_reduce", "log", 8, ("node-a",))
    assert run.out_of_place == plain.out_of_place and run.in_place == plain.in_place
    assert run.redop == "sum" and run.wrong == 0


def test_json_output_errors_name_the_entry(tmp_path):
    import json

    doc = json.loads((NCCL / "all_reduce_perf.json").read_text())
    doc["results"][3]["in_place"]["time"] = "fast"
    p = tmp_path / "ar.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"ar.json: results\[3\].in_place: time/alg_bw/bus_bw must be numbers"):
        parse_nccl_log(p)
    p.write_text(json.dumps({"version": 3}))
    with pytest.raises(InputError, match="not nccl-tests' -J output"):
        parse_nccl_log(p)
