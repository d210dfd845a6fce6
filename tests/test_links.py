"""Link matrices: loaders (JSON, Pipette's form, CSV), validation naming the offending cell,
the topology generator, nccl-tests import conventions, and the `links` CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from solveplan.errors import InputError
from solveplan.cli.links_cmds import parse_degraded_link, parse_degraded_node
from solveplan.placement.links import links_from_mapping, load_links
from solveplan.placement.topology import generate_links, import_nccl_logs

from conftest import DATA, run_subprocess

LINKS = DATA / "links"


def test_native_json_roundtrip(tmp_path):
    lm = generate_links(6, nodes_per_leaf=3, oversubscription=4, degraded_nodes=[(1, 0.25)], degraded_links=[(2, 5, 0.5)])
    p = tmp_path / "l.json"
    lm.write(p)
    back = load_links(p)
    assert back.hosts == lm.hosts
    np.testing.assert_allclose(back.bandwidth_gbit_per_s, lm.bandwidth_gbit_per_s)
    np.testing.assert_allclose(back.latency_us, lm.latency_us)
    assert not back.measured


def test_generator_levels():
    b = generate_links(8, nodes_per_leaf=4, oversubscription=4, nic_gbit_per_s=200,
                       degraded_nodes=[(3, 0.25)], degraded_links=[(0, 1, 0.5)]).bandwidth_gbit_per_s
    assert b[0, 2] == 200 and b[0, 4] == 50  # same leaf / across the 4:1 spine
    assert b[3, 2] == 50 and b[3, 7] == 12.5  # quarter-speed NIC, inside and across leaves
    assert b[0, 1] == b[1, 0] == 100
    rr = generate_links(4, nodes_per_leaf=2, oversubscription=2, rack_order="round-robin").bandwidth_gbit_per_s
    assert rr[0, 2] == 200 and rr[0, 1] == 100


def test_pipette_form_collapses_gpus_to_nodes():
    lm = load_links(LINKS / "pipette4.json")
    assert lm.hosts == ("a1", "b1")
    assert lm.bandwidth_gbit_per_s[0, 1] == 20 * 8  # slowest GPU pair, GB/s -> Gbit/s
    assert lm.measured


def test_csv_rows_in_any_order_and_reorder_by_hosts():
    lm = load_links(LINKS / "rack4.csv")
    assert lm.hosts == ("a1", "a2", "b1", "b2")
    assert lm.bandwidth_gbit_per_s[2, 3] == 200 and lm.bandwidth_gbit_per_s[0, 2] == 50
    re = load_links(LINKS / "rack4.csv", hosts=["b2", "a1", "b1", "a2"])
    assert re.bandwidth_gbit_per_s[0, 2] == 200  # b2-b1
    with pytest.raises(InputError, match="unknown host 'zz'"):
        load_links(LINKS / "rack4.csv", hosts=["a1", "a2", "b1", "zz"])


def test_asymmetric_uses_slower_direction():
    lm = links_from_mapping({"hosts": ["a", "b"], "bandwidth_gbit_per_s": [[None, 100], [40, None]]})
    assert lm.pair_gbit_per_s()[0, 1] == 40 == lm.pair_gbit_per_s()[1, 0]


@pytest.mark.parametrize("data, message", [
    ({"hosts": ["a", "b"], "bandwidth": [[0, float("nan")], [1, 0]]}, r"bandwidth\[0\]\[1\]: must be a positive number \(got nan\)"),
    ({"hosts": ["a", "b"], "bandwidth": [[0, -3], [1, 0]]}, r"bandwidth\[0\]\[1\]: must be a positive number \(got -3\)"),
    ({"hosts": ["a", "b"], "bandwidth": [[0, 1], [0, 0]]}, r"bandwidth\[1\]\[0\]: must be a positive number \(got 0\)"),
    ({"hosts": ["a", "b"], "bandwidth": [[0, "x"], [1, 0]]}, r"bandwidth\[0\]\[1\]: must be a positive number \(got 'x'\)"),
    ({"hosts": ["a", "b", "c"], "bandwidth": [[0, 1], [1, 0]]}, r"bandwidth: has 2 rows but there are 3 hosts"),
    ({"hosts": ["a", "b"], "bandwidth": [[0, 1, 1], [1, 0]]}, r"bandwidth\[0\]: has 3 entries"),
    ({"hosts": ["a", "a"], "bandwidth": [[0, 1], [1, 0]]}, r"hosts\[1\]: host 'a' appears twice"),
    ({"hosts": ["a", "b"], "bandwidth": [[0, 1], [1, 0]], "latency_us": [[0, float("inf")], [1, 0]]},
     r"latency_us\[0\]\[1\]: must be a positive number"),
    ({"hosts": ["a", "b"], "bandwith": [[0, 1], [1, 0]]}, r"links.bandwith: unknown key"),
])
def test_bad_matrices_name_the_cell(data, message):
    with pytest.raises(InputError, match=message):
        links_from_mapping(data)


def test_bad_csv_unknown_host(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("host,a,b\na,,1\nc,1,\n")
    with pytest.raises(InputError, match=r"row 3: unknown host 'c'"):
        load_links(p)
    p.write_text("host,a,b\na,,1\nb,nan,\n")
    with pytest.raises(InputError, match=r"bandwidth\[1\]\[0\]: must be a positive number \(got nan\)"):
        load_links(p)


def test_degraded_specs():
    assert parse_degraded_node("3:0.25") == (3, 0.25)
    assert parse_degraded_link("2-5:0.5") == (2, 5, 0.5)
    for bad in ("3", "3:0", "3:2", "x:0.5"):
        with pytest.raises(InputError):
            parse_degraded_node(bad)
    with pytest.raises(InputError):
        parse_degraded_link("2-2:0.5")


def test_import_three_pair_conventions():
    """hostA__hostB.log (file name), run2.log (header comment), run3.log (device lines)."""
    lm = import_nccl_logs(sorted(LINKS.glob("*.log")))
    assert set(lm.hosts) == {"hostA", "hostB", "hostC"}
    b = lm.pair_gbit_per_s()
    i = {h: k for k, h in enumerate(lm.hosts)}
    assert b[i["hostA"], i["hostB"]] == pytest.approx(160, rel=0.01)  # 20 GB/s busbw at 1 GiB
    assert b[i["hostB"], i["hostC"]] == pytest.approx(40, rel=0.01)
    assert lm.measured and lm.latency_us[i["hostA"], i["hostB"]] == pytest.approx(20, abs=0.1)


def test_import_missing_pair_and_unknown_host():
    logs = [LINKS / "hostA__hostB.log", LINKS / "run3.log"]
    with pytest.raises(InputError, match="no measurement for"):
        import_nccl_logs(logs)
    with pytest.raises(InputError, match="unknown host 'hostC'"):
        import_nccl_logs(logs, hosts=["hostA", "hostB"])


def test_cli_generate_show_import(cli, tmp_path):
    out = tmp_path / "g.json"
    r = cli("links", "generate", "--nodes", "16", "--nodes-per-leaf", "8", "--oversubscription", "4",
            "--degraded-node", "3:0.25", "--degraded-link", "2-5:0.5", "-o", str(out))
    assert r.code == 0, r.err
    data = json.loads(out.read_text())
    assert data["bandwidth_gbit_per_s"][3][4] == 50 and data["bandwidth_gbit_per_s"][2][5] == 100
    r = cli("links", "show", str(out))
    assert r.code == 0 and "node3" in r.out
    imp = tmp_path / "imp.json"
    r = cli("links", "import", *map(str, sorted(LINKS.glob("*.log"))), "-o", str(imp))
    assert r.code == 0, r.err
    assert json.loads(imp.read_text())["measured"] is True


def test_cli_bad_matrix_exit_2():
    r = run_subprocess("links", "show", str(LINKS / "bad_nan.json"))
    assert r.code == 2
    assert r.err.strip() == "error: bandwidth_gbit_per_s[3][5]: must be a positive number (got nan)"
    assert "Traceback" not in r.err
    r = run_subprocess("links", "generate", "--nodes", "4", "--degraded-node", "9:0.5", "-o", "/dev/null")
    assert r.code == 2 and "outside 0..3" in r.err


PIPETTE = LINKS / "pipette"


def test_pipette_link_file_as_its_script_writes_it():
    """Pipette's round_robin_test.py: host names, busbw strings in GB/s, intra-node diagonal."""
    raw = json.loads((PIPETTE / "round_robin_links.json").read_text())
    assert isinstance(raw["bandwidth"][0][1], str) and "unit" not in raw
    from solveplan.catalog import load_cluster

    lm = load_links(PIPETTE / "round_robin_links.json", cluster=load_cluster("a100x32"))
    assert lm.hosts == ("agpu1425", "agpu1426", "agpu1501", "agpu1502") and lm.measured
    assert lm.bandwidth_gbit_per_s[0, 1] == pytest.approx(23.81 * 8)  # GB/s, Pipette's unit
    assert lm.bandwidth_gbit_per_s[0, 3] == pytest.approx(11.90 * 8)
    assert any("GB/s" in n for n in lm.notes)


def test_mpigraph_json_from_pipette():
    """mpiGraph (MiB/s: mpiGraph.c prints size * 1e6 / 2^20 per microsecond) as Pipette stores it."""
    lm = load_links(PIPETTE / "mpigraph_file.json")
    assert lm.hosts == ("agpu1425", "agpu1426") and lm.measured
    mib = 1.048576e6 * 8 / 1e9  # Gbit/s per MiB/s
    # 1425 -> 1426: send 14493.357, receive (at 1426) 14497.701 -> the slower; 1426 -> 1425: 11072.47
    assert lm.bandwidth_gbit_per_s[0, 1] == pytest.approx(14493.357 * mib, rel=1e-6)
    assert lm.bandwidth_gbit_per_s[1, 0] == pytest.approx(11072.472 * mib, rel=1e-6)
    big = load_links(PIPETTE / "mpigraph_16nodes_time_0.json")
    assert big.n == 16 and 100 < np.nanmedian(big.bandwidth_gbit_per_s) < 200


def test_unitless_matrix_must_be_plausible():
    from solveplan.catalog import load_cluster

    a100 = load_cluster("a100x32")  # 200 Gbit/s NICs, 600 GB/s NVLink
    gbs = {"hosts": ["a", "b", "c"], "bandwidth": [[0, 23.81, 23.81], [23.81, 0, 11.9], [23.81, 11.9, 0]]}
    with pytest.raises(InputError, match=r"bandwidth: no unit given.*they look like GB/s .*add \"unit\": \"GB/s\""):
        links_from_mapping(gbs, cluster=a100)
    with pytest.raises(InputError, match="look like GB/s"):
        links_from_mapping(gbs)  # no cluster: 25 Gbit/s is already a slow NIC
    assert links_from_mapping({**gbs, "unit": "GB/s"}, cluster=a100).bandwidth_gbit_per_s[0, 1] == pytest.approx(190.48)
    assert links_from_mapping({"hosts": ["a", "b"], "bandwidth_gbit_per_s": [[0, 23.81], [23.81, 0]]}, cluster=a100)
    mb = {"hosts": ["a", "b"], "bandwidth": [[0, 23810], [23810, 0]]}
    with pytest.raises(InputError, match="look like MB/s"):
        links_from_mapping(mb, cluster=a100)
    plausible = {"hosts": ["a", "b"], "bandwidth": [[0, 200], [150, 0]]}
    assert links_from_mapping(plausible, cluster=a100).bandwidth_gbit_per_s[1, 0] == 150


def test_import_refuses_a_log_that_names_no_test(tmp_path):
    """An all-reduce log from a release that prints no test name is not taken for a sendrecv log;
    a sendrecv log without its name is imported when the user says what it is (LOG:sendrecv)."""
    ar = (DATA / "nccl" / "all_reduce_perf_16gpu_2nodes.log").read_text().splitlines()
    p = tmp_path / "node-a__node-b.log"
    p.write_text("\n".join(line for line in ar if "Collective test concluded" not in line) + "\n")
    with pytest.raises(InputError, match="does not say which nccl-tests binary wrote it.*LOG:sendrecv"):
        import_nccl_logs([p])
    sr = (LINKS / "hostA__hostB.log").read_text().splitlines()
    q = tmp_path / "hostA__hostB.log"
    q.write_text("\n".join(line for line in sr if "sendrecv_perf" not in line) + "\n")
    with pytest.raises(InputError, match="does not say"):
        import_nccl_logs([q])
    lm = import_nccl_logs([f"{q}:sendrecv"])
    assert lm.hosts == ("hostA", "hostB") and lm.bandwidth_gbit_per_s[0, 1] > 0


def _stop_at(src: Path, dest: Path, max_bytes: int) -> Path:
    """A real-format sendrecv_perf log cut after its `max_bytes` row (as `-e 4K` would end it)."""
    lines = []
    for line in src.read_text().splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and int(cells[0]) > max_bytes:
            continue
        lines.append(line.replace("maxBytes 1073741824", f"maxBytes {max_bytes}"))
    dest.write_text("\n".join(lines) + "\n")
    return dest


def test_import_refuses_a_log_that_stops_below_the_bandwidth_regime(tmp_path):
    """Issue 24: a sendrecv log that stops at 4 KB showed 1.04 Gbit/s and was written as the
    link's bandwidth. Refused, naming the file and the size; written only with the override,
    and said."""
    src = DATA / "nccl" / "sendrecv_perf_2nodes.log"
    short = _stop_at(src, tmp_path / "node-a__node-b.log", 4096)
    with pytest.raises(InputError, match="stops at 4096 bytes below the bandwidth regime.*--allow-latency-bound") as e:
        import_nccl_logs([short])
    assert "node-a__node-b.log" in str(e.value)
    notes: list[str] = []
    lm = import_nccl_logs([short], allow_latency_bound=True, notes=notes)
    assert lm.pair_gbit_per_s()[0, 1] < 10 and len(notes) == 1 and "written anyway" in notes[0]
    full = import_nccl_logs([src])  # the whole log is in the bandwidth regime at 1 GiB
    assert full.pair_gbit_per_s()[0, 1] > 300


def test_cli_import_latency_bound_exit_2_and_override(cli, tmp_path):
    short = _stop_at(DATA / "nccl" / "sendrecv_perf_2nodes.log", tmp_path / "node-a__node-b.log", 4096)
    out = tmp_path / "l.json"
    r = cli("links", "import", str(short), "-o", str(out))
    assert r.code == 2 and r.err.count("\n") == 1 and "bandwidth regime" in r.err and not out.exists()
    r = cli("links", "import", str(short), "-o", str(out), "--allow-latency-bound")
    assert r.code == 0 and "warning:" in r.err and out.exists()
