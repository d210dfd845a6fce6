"""The phase runner (`search.phases`, issue 25 item 2): the time limit shared out among phases,
the deadline respected, the best bound and incumbent kept, each phase's time reported. A fake
clock makes every number exact."""


import pytest

from solveplan.search.phases import Phase, Phases
from solveplan.specs.deadline import Deadline


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cumulative_phases_pass_unused_time_on():
    clock = FakeClock()
    run = Phases(10.0, (Phase("a", ends_at=0.1), Phase("b", ends_at=0.5), Phase("c", keep_s=1.0)), clock=clock)
    assert run.budget_s("a") == pytest.approx(1.0)
    with run.run("a") as budget:
        assert budget == pytest.approx(1.0)
        clock.now += 0.25  # a ends early: b gets what a left
    assert run.budget_s("b") == pytest.approx(4.75)
    clock.now += 6.0  # b overran its end: c still keeps 1 s back, b's budget floors where asked
    assert run.budget_s("b") == pytest.approx(-1.25) and run.budget_s("b", 0.01) == 0.01
    assert run.budget_s("c") == pytest.approx(10.0 - 6.25 - 1.0)
    assert run.times == [{"phase": "a", "wall_time_s": pytest.approx(0.25), "budget_s": pytest.approx(1.0)}]


def test_fixed_share_phase_is_the_same_each_run_and_capped():
    clock = FakeClock()
    run = Phases(20.0, (Phase("pool", share=0.1, most_s=5.0, least_s=0.2),), clock=clock)
    assert run.budget_s("pool") == pytest.approx(2.0) and run.worth("pool")
    for spent in (1.5, 0.5):
        assert run.call("pool", lambda s: s) == pytest.approx(2.0)  # elapsed time does not shrink it
        clock.now += spent
    assert run.report() == {"pool": 0.0}  # the fake clock did not move inside the calls
    assert Phases(100.0, (Phase("pool", share=0.1, most_s=5.0),)).budget_s("pool") == 5.0
    assert not Phases(1.0, (Phase("pool", share=0.1, least_s=0.2),)).worth("pool")


def test_rest_phase_takes_its_share_of_what_is_left_each_round():
    """A phase run in rounds (placement's row-count probes): each round's budget is its share of
    what the rounds before left, never of the whole limit."""
    clock = FakeClock()
    run = Phases(10.0, (Phase("probe", rest=0.6), Phase("after", rest=0.5, most_s=1.0)), clock=clock)
    assert run.left_s() == pytest.approx(10.0) and run.budget_s("probe") == pytest.approx(6.0)
    clock.now += 6.0
    assert run.budget_s("probe") == pytest.approx(0.6 * 4.0)
    assert run.budget_s("after") == pytest.approx(1.0)  # 2 s, capped by most_s
    clock.now += 5.0  # past the limit: nothing left to share
    assert run.left_s() == pytest.approx(-1.0) and run.budget_s("probe") < 0


def test_the_deadline_caps_every_budget_and_is_derived():
    dl = Deadline.after(0.5)
    run = Phases(60.0, (Phase("a", ends_at=0.5),), deadline=dl)
    assert run.budget_s("a") <= 0.5
    sub = run.deadline_of("a")
    assert sub.left_s() <= 0.5 and sub.flag is dl.flag  # stopping the call stops the phase
    dl.stop()
    assert run.budget_s("a") == 0.0 and sub.expired()


def test_best_bound_and_incumbent_are_kept():
    run = Phases(1.0, ())
    run.offer(bound=3.0)
    run.offer(bound=2.0, value=9.0, incumbent="x")
    run.offer(value=7.5, incumbent="y")
    run.offer(bound=4.0, value=8.0, incumbent="z")
    assert run.bound == 4.0 and (run.best, run.best_value) == ("y", 7.5)


def test_per_phase_time_is_reported_and_summed():
    clock = FakeClock()
    run = Phases(10.0, (Phase("model"),), clock=clock)
    for spent in (0.5, 1.25):
        with run.run("model"):
            clock.now += spent
    run.record("canonical", 0.75, status="OPTIMAL")
    assert run.report() == {"model": pytest.approx(1.75), "canonical": 0.75}
    assert run.times[-1] == {"phase": "canonical", "wall_time_s": 0.75, "status": "OPTIMAL"}
