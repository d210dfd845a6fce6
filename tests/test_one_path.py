"""One path and one result type (issue 25): `optimize` answers a cluster of one GPU type, a
cluster of pools and measured links with the same `OptimizeResult`; the joint model's plan is
a `PlacedPlan` in it, with its comparisons, and the top-k rule is the one of that type."""

import pytest

from solveplan.catalog import load_job
from solveplan.optimize import optimize
from solveplan.placement.links import load_links
from solveplan.optimize.placed import PlacedPlan
from solveplan.plan import OptimizeResult
from solveplan.render.json import result_json
from conftest import DATA


def _job(model: str, cluster: str):
    return load_job({"model": model, "cluster": cluster})


@pytest.mark.parametrize("placed", ["single", "pools", "links"])
def test_every_cluster_gets_the_same_result_type(placed):
    if placed == "single":
        job, links = _job("gpt3-1.3b", "a100x32"), None
    elif placed == "pools":
        job, links = _job("gpt3-1.3b", "mixed-h100-a100"), None
    else:
        job, links = _job("gpt3-1.3b", "a100x32"), load_links(DATA / "links" / "rack4.csv")
    res = optimize(job, time_limit_s=30, top_k=2, links=links)
    assert type(res) is OptimizeResult and res.status == "OPTIMAL"
    assert res.placed == (placed != "single")
    assert isinstance(res.plan, PlacedPlan) == res.placed
    s = res.search  # one count of the shapes on every path (`search.candidates.ShapeCounts`): each legal shape
    # is searched or set aside once, as dominated, by memory or by time
    assert s.shapes_legal == s.shapes_dominated + s.shapes_pruned_memory + s.shapes_pruned_time + s.shapes_searched
    assert s.shapes_searched >= 1 and s.shapes_dominated >= 1
    d = result_json(res, job)
    assert ("hostfile" in d) == ("pools_alone" in d) == res.placed  # a placed plan keeps its own fields
    if res.placed:  # the joint model returns the best plan only, and says so by the one rule's fields
        assert res.top_k_asked == 2 and res.top_k_found == 1 and not res.top_k_cut_short
        assert res.cost is None and res.margins == []
    else:
        assert res.top_k_found == 2 and res.cost is not None and res.explanation == []


def test_joint_result_is_gone():
    import solveplan.optimize.joint as joint

    assert not hasattr(joint, "JointResult")


def test_phase_times_are_reported_and_the_search_table_shows_the_solver_status():
    """The joint path's `search.solver["phases"]` holds the phase runner's records (each pool's
    own plan, the preparation) before the CP-SAT solves; the text table's solver status is the
    first CP-SAT solve's, as before the runner."""
    from rich.console import Console

    from solveplan.render.table import search_table

    res = optimize(_job("gpt3-1.3b", "mixed-h100-a100"), time_limit_s=30)
    names = [p["phase"] for p in res.search.solver["phases"]]
    assert names[:3] == ["pool alone", "pool alone", "prepare"] and "optimize" in names
    assert all(p["wall_time_s"] >= 0 for p in res.search.solver["phases"])
    console = Console(width=300, record=True)
    console.print(search_table(res))
    assert "OPTIMAL" in console.export_text()
