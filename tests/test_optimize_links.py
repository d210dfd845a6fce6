"""`solveplan optimize --links`: the plan is placed on the measured nodes, and the hostfile
written realises it."""

import json

def test_optimize_places_the_plan_on_measured_links(tmp_path, cli):
    """The plan and its nodes are chosen together (the joint model): every stage names its
    nodes, the hostfile lists them in Megatron's rank order, and the plan is at least as fast
    as the same shape and split on the nodes in index order."""
    links = tmp_path / "links.json"
    code, _, err = cli("links", "generate", "--nodes", "4", "--degraded-node", "1:0.25", "-o", str(links))
    assert code == 0, err
    hf = tmp_path / "hostfile"
    code, out, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--pp", "2", "--tp", "8",
                          "--links", str(links), "--hostfile", str(hf), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "OPTIMAL" and d["parallel"]["pp"] == 2 and d["parallel"]["tp"] == 8
    hosts = [line.split()[0] for line in hf.read_text().splitlines()]
    assert hosts == [h for st in d["stages"] for h in st["nodes"]] and len(set(hosts)) == len(hosts)
    assert set(hosts) <= {f"node{i}" for i in range(4)}
    assert d["hostfile"] == hf.read_text()
    if d["default_order"] is not None:
        assert d["step_time_s"] <= d["default_order"]["step_time_s"] * (1 + 1e-12)


def test_links_of_the_wrong_size_and_hostfile_without_links_are_bad_input(tmp_path, cli):
    links = tmp_path / "links.json"
    cli("links", "generate", "--nodes", "3", "-o", str(links))
    code, _, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--links", str(links))
    assert code == 2 and "--links" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--hostfile", "x")
    assert code == 2 and "--hostfile" in err

