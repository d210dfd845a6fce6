"""Output a user reads (issue 24 item 8): progress lines, the timeline at any vp, the sweep's
panels, cost and energy in the table."""

from __future__ import annotations

import pytest

from solveplan.cli.plan_cmds import progress_line
from solveplan.render.timeline import phases, simulate


def test_progress_line_says_phase_incumbent_bound_and_time():
    line = progress_line({"method": "exhaustive", "phase": "every split of each shape", "best_s": 13.11,
                          "bound_s": 12.94, "shapes_done": 120, "shapes": 19866, "evaluations": 131072}, 0.7, 60)
    for part in ("[exhaustive]", "every split", "incumbent 13.11 s", "bound 12.94 s (gap 1.30%)", "120/19,866 shapes",
                 "0.7 s of 60 s"):
        assert part in line, line
    assert "no plan yet" in progress_line({"method": "joint", "phase": "bounding"}, 1.0)


def test_exhaustive_progress_bound_is_valid(tmp_path):
    """Every progress event's bound is at most the optimum the search ends with."""
    from solveplan.search.baselines import exhaustive
    from solveplan.search.candidates import prepare
    from test_cpsat import make_job

    events = []
    cands = prepare(make_job(L=8, gpus=16, batch=64, seq=2048), prune_time=False)
    res = exhaustive.search(cands, 60, progress=events.append)
    assert res.status == "OPTIMAL" and events[-1]["final"]
    assert events[-1]["shapes_done"] == events[-1]["shapes"] == cands.num_survivors
    for e in events:
        assert e["bound_s"] <= res.best.objective_s * (1 + 1e-12)


@pytest.mark.parametrize("vp", [2, 10])
def test_dense_schedules_are_drawn_as_phases(vp):
    p, m = 8, 24
    ops = simulate([1.0] * p, [2.0] * p, 0.01, m, vp)
    segs = phases(ops, max(o.end_s for o in ops) / 400)
    for i in range(p):
        kinds = [s.kind for s in segs if s.stage == i]
        # warm-up forwards, then the steady state, then cool-down backwards, in that order
        order = {"F": 0, "FB": 1, "B": 2}
        assert [order[k] for k in kinds] == sorted(order[k] for k in kinds)
        assert sum(s.ops for s in segs if s.stage == i) == 2 * m * vp
        assert len(kinds) < 2 * m * vp / 4  # a few bars, not one per operation


def test_sweep_panels_are_readable(tmp_path):
    """Cost within a few percent: a linear axis (tokens/s over decades: log); labels never overlap."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from solveplan.sweep.plot import plot_rows

    rows = []
    for n, cost in ((64, 1.00), (512, 1.01), (4096, 1.02)):
        for gpu, scale in (("a100-80gb", 1.0), ("h100-sxm", 1.005)):
            rows.append({"model": "m", "gpu": gpu, "cluster": f"{gpu}x{n}", "num_gpus": n, "tokens_per_s": 1e5 * n,
                         "cost_per_million_tokens_usd": cost * scale, "tp": 8, "pp": 2, "dp": n // 16, "cp": 1,
                         "vp": 1, "global_batch_size": 512, "seq_length": 2048, "precision": "bf16",
                         "constraints": "{}"})
    captured = {}
    real_close = plt.close
    plt.close = lambda fig: captured.setdefault("fig", fig)
    try:
        plot_rows(rows, tmp_path / "p.png")
    finally:
        plt.close = real_close
    fig = captured["fig"]
    cost_ax = [ax for ax in fig.axes if "USD" in ax.get_title()][0]
    assert cost_ax.get_yscale() == "linear"
    assert [ax for ax in fig.axes if "tokens/s" in ax.get_title()][0].get_yscale() == "log"
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [t.get_window_extent() for t in ax.texts]
        for a in range(len(boxes)):
            for b in range(a + 1, len(boxes)):
                assert not boxes[a].overlaps(boxes[b]), (ax.get_title(), ax.texts[a].get_text(), ax.texts[b].get_text())
    real_close(fig)


@pytest.mark.slow
def test_calibrate_reports_its_phases(cli, tmp_path):
    from test_calibrate import CLUSTER, GOOD_LOGS, logs, write_steps

    steps = write_steps(tmp_path / "steps.csv")
    res = cli("calibrate", "--cluster", CLUSTER, *logs(*GOOD_LOGS), "--steps", str(steps), "-o",
              str(tmp_path / "c.yaml"), "--progress")
    assert res.code == 0, res.err
    lines = [x for x in res.err.splitlines() if x.startswith("[calibrate]")]
    assert any("reading" in x for x in lines) and any("fitting nvlink" in x for x in lines)
    assert any("GPU efficiencies" in x and " s" in x for x in lines)
    quiet = cli("calibrate", "--cluster", CLUSTER, *logs(*GOOD_LOGS), "-o", str(tmp_path / "d.yaml"))
    assert "[calibrate]" not in quiet.err  # stderr is not a terminal here
