"""`solveplan optimize --links`: the plan is placed on the measured nodes, and the hostfile
written realises it."""

import json

def test_optimize_places_the_plan_on_measured_links(tmp_path, cli):
    links = tmp_path / "links.json"
    code, _, err = cli("links", "generate", "--nodes", "4", "--degraded-node", "1:0.25", "-o", str(links))
    assert code == 0, err
    hf = tmp_path / "hostfile"
    code, out, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--pp", "2", "--tp", "8",
                          "--links", str(links), "--hostfile", str(hf), "--json")
    assert code == 0, err
    d = json.loads(out)
    pl = d["placement"]
    assert pl["pp"] == d["parallel"]["pp"] and pl["dp"] == d["parallel"]["dp"]
    assert pl["optimized"]["step_time_s"] <= pl["default"]["step_time_s"] * (1 + 1e-12)
    hosts = [line.split()[0] for line in hf.read_text().splitlines()]
    assert sorted(hosts) == sorted(f"node{i}" for i in range(4))


def test_links_of_the_wrong_size_and_hostfile_without_links_are_bad_input(tmp_path, cli):
    links = tmp_path / "links.json"
    cli("links", "generate", "--nodes", "3", "-o", str(links))
    code, _, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--links", str(links))
    assert code == 2 and "--links" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("optimize", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--hostfile", "x")
    assert code == 2 and "--hostfile" in err

