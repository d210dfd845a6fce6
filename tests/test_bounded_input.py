"""Bounded parsing and bounded work (issue #27 item 3): element counts, string sizes, steps,
scenarios and link matrices are capped before the work they would cost; each refusal is one
line naming the limit (exit 2 in the CLI, 422 in the service)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings

import pytest

from solveplan.calibration.step_fit import MAX_STEP_ROWS, read_steps
from solveplan.errors import InputError
from solveplan.placement.link_formats import MAX_LINK_HOSTS
from solveplan.placement.links import links_from_mapping
from solveplan.specs.reading import MAX_ELEMENTS, MAX_STRING_CHARS, parse_data
from solveplan.sweep.grid import expand, load_grid

# the CLI in a fresh process that reports its own peak memory (MiB) on the last line of stderr:
# VmHWM of /proc/self/status (getrusage's maxrss keeps the forking parent's peak across exec)
MEASURED_CLI = ("import sys\nfrom solveplan.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
                "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
                "    print(int(hwm) // 1024, file=sys.stderr)\n")


def _cli_measured(*args: str) -> tuple[int, str, float, int]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", MEASURED_CLI, *args], capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    return p.returncode, "\n".join(lines[:-1]), time.monotonic() - t0, int(lines[-1])


HUGE = {"list.yaml": lambda: "- 1\n" * 2_000_000,  # 8 MB, 2M items (took 200 s and 2 GB)
        "items.json": lambda: "[" + ",".join(["[]"] * 10_000_000) + "]"}  # 30 MB of empty lists (51 s, 1.5 GB)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("name", sorted(HUGE))
def test_a_huge_file_is_refused_fast_and_small(tmp_path, name):
    f = tmp_path / name
    f.write_text(HUGE[name]())
    code, err, wall_s, peak_mib = _cli_measured("optimize", "--model", str(f), "--cluster", "a100x8")
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert f"more than {MAX_ELEMENTS:,} elements" in err
    assert wall_s < 5.0 and peak_mib < 500


def test_many_keys_and_flow_items_are_counted():
    many_keys = "".join(f"k{i}: 1\n" for i in range(MAX_ELEMENTS + 1))
    with pytest.raises(InputError, match="elements"):
        parse_data(many_keys, "model", "keys.yaml")
    flow = "[" + ",".join(["1"] * (MAX_ELEMENTS + 1)) + "]"
    for fmt in ("yaml", "json"):
        with pytest.raises(InputError, match="elements"):
            parse_data(flow, "model", "flow", fmt)
    assert parse_data("[" + ",".join(["1"] * 1000) + "]", "model", "ok", "json") == [1] * 1000


def test_the_yaml_guard_counts_nodes_while_parsing():
    """Past the count before parsing (a low limit here), the loader stops at the limit."""
    with pytest.raises(InputError, match="more than 10 elements"):
        parse_data("a: [1, 2, 3]\nb: {c: 1, d: 2}\ne: [4, 5, 6, 7]\n", "model", "m.yaml", max_elements=10)


def test_a_huge_string_is_refused():
    with pytest.raises(InputError, match="string of"):
        parse_data(json.dumps({"name": "x" * (MAX_STRING_CHARS + 1)}), "model", "m.json", "json")


def test_steps_rows_are_capped(tmp_path):
    f = tmp_path / "steps.csv"
    f.write_text("model,tp,pp,step_time_s\n" + "gpt3-13b,1,1,1.0\n" * (MAX_STEP_ROWS + 1))
    with pytest.raises(InputError, match=f"at most {MAX_STEP_ROWS:,} measured steps"):
        read_steps(f)


def test_grid_scenarios_are_capped_and_the_cap_can_be_raised():
    grid = {"models": ["gpt3-13b", "llama2-70b", "gpt3-175b"], "clusters": ["a100x64", "h100x512"],
            "global_batch_sizes": [512, 1024]}
    g, base = load_grid(grid)
    with pytest.raises(InputError) as exc:
        expand(g, base, max_scenarios=10)
    assert exc.value.field == "max_scenarios" and "12 scenarios" in exc.value.message
    assert len(expand(g, base, max_scenarios=12)) == 12


def test_sweep_cli_names_the_flag(tmp_path, cli):
    grid = tmp_path / "grid.yaml"
    grid.write_text("models: [gpt3-13b, llama2-70b]\nclusters: [a100x64, h100x512]\n")
    r = cli("sweep", str(grid), "-o", str(tmp_path / "out.csv"), "--max-scenarios", "3")
    assert r.code == 2 and "--max-scenarios" in r.err and "4 scenarios" in r.err


def test_link_matrices_are_capped_before_their_cells_are_read():
    n = MAX_LINK_HOSTS + 1
    with pytest.raises(InputError, match=f"at most {MAX_LINK_HOSTS:,} hosts"):
        links_from_mapping({"hosts": [f"n{i}" for i in range(n)], "bandwidth_gbit_per_s": [[]] * n})


def test_service_refuses_a_body_of_too_many_elements():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from solveplan import api
    from solveplan.service import create_app

    client = TestClient(create_app(api.ResultCache(), max_body_bytes=1 << 20))
    body = '{"job": {"model": "gpt3-13b", "cluster": "a100x8"}, "pad": [' + ",".join(["0"] * 300_000) + "]}"
    r = client.post("/v1/check", content=body, headers={"content-type": "application/json"})
    assert r.status_code in (413, 422) and "elements" in r.text
