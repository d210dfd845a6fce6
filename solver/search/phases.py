"""Time-limited multi-phase solves (issue 25 item 2): one runner shares a call's time limit out
among named phases, keeps the best bound and the best incumbent the phases find, and reports
the time each phase took. Placement (`placement.cpsat`), the joint model (`optimize.joint`,
`search.joint.solve`), `optimize`'s pools-alone plans and admission (`admission.planner`) declare
their phases here instead of keeping share constants of their own.

A phase declares what it needs (`Phase`):
- `ends_at`: the share of the limit, counted from the runner's start, by which it ends; what an
  earlier phase does not use passes on to the later ones (cumulative schedule);
- or `share`: a fixed budget of `share` x the limit, whatever has elapsed (a phase run several
  times with the same budget, such as one plan per pool), at most `most_s`;
- or `rest`: `rest` x what is left of the limit when it starts (a phase run in rounds, each
  taking part of what the rounds before it left, such as placement's row-count probes);
- `keep_s`: seconds it leaves at the end for what follows it (assembling the answer);
- `least_s`: below this budget the phase is not worth starting (`worth`).
Every budget is also at most what the runner's `Deadline` leaves.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..specs.deadline import Deadline


@dataclass(frozen=True)
class Phase:
    """A phase's need (module docstring)."""

    name: str
    ends_at: float = 1.0
    share: float | None = None
    rest: float | None = None
    most_s: float = math.inf
    least_s: float = 0.0
    keep_s: float = 0.0


@dataclass
class Phases:
    """The runner: `limit_s` shared out among `phases` from `start` (default: now, on `clock`),
    never past `deadline`. `times` holds one record per phase run (`run`, `record`); `bound_s`
    and `best` the highest bound and the lowest-valued incumbent offered (`offer`)."""

    limit_s: float
    phases: Sequence[Phase]
    deadline: Deadline | None = None
    clock: Callable[[], float] = time.perf_counter
    start: float | None = None
    times: list[dict] = field(default_factory=list)
    bound: float | None = None
    best: Any = None
    best_value: float | None = None

    def __post_init__(self) -> None:
        self.start = self.clock() if self.start is None else self.start
        self._by_name = {p.name: p for p in self.phases}

    def elapsed_s(self) -> float:
        return self.clock() - float(self.start or 0.0)

    def left_s(self) -> float:
        """Seconds left of the limit (and of the deadline, when there is one)."""
        s = self.limit_s - self.elapsed_s()
        return s if self.deadline is None else min(s, self.deadline.left_s())

    def budget_s(self, name: str, floor_s: float | None = None) -> float:
        """Seconds phase `name` may take from now (at least `floor_s`, when given)."""
        p = self._by_name[name]
        if p.rest is not None:
            s = min(p.rest * self.left_s(), p.most_s)
        elif p.share is not None:
            s = min(p.share * self.limit_s, p.most_s)
        else:
            s = min(p.ends_at * self.limit_s - self.elapsed_s(), p.most_s)
        s -= p.keep_s
        if self.deadline is not None:
            s = min(s, self.deadline.left_s())
        return s if floor_s is None else max(s, floor_s)

    def worth(self, name: str) -> bool:
        """Is the phase's budget at least its `least_s`?"""
        return self.budget_s(name) >= self._by_name[name].least_s

    def deadline_of(self, name: str) -> Deadline:
        """The phase's budget as a deadline derived from the runner's (stopped with it)."""
        return (self.deadline if self.deadline is not None else Deadline()).within(self.budget_s(name, 0.0))

    @contextlib.contextmanager
    def run(self, name: str, floor_s: float | None = None) -> Iterator[float]:
        """Run phase `name`: yields its budget (`budget_s`) and records its wall time."""
        budget = self.budget_s(name, floor_s)
        t = self.clock()
        try:
            yield budget
        finally:
            self.record(name, self.clock() - t, budget_s=budget)

    def call(self, name: str, fn: Callable[[float], Any], floor_s: float | None = None) -> Any:
        """`fn(budget)` run as phase `name` (`run`); its value."""
        with self.run(name, floor_s) as budget:
            return fn(budget)

    def record(self, name: str, wall_time_s: float, **info) -> None:
        """One phase run's time (and what else the caller reports of it)."""
        self.times.append({"phase": name, "wall_time_s": wall_time_s, **info})

    def offer(self, bound: float | None = None, value: float | None = None, incumbent: Any = None) -> None:
        """A proven lower bound and/or an incumbent of objective `value`: the highest bound and
        the lowest-valued incumbent are kept."""
        if bound is not None and (self.bound is None or bound > self.bound):
            self.bound = bound
        if value is not None and (self.best_value is None or value < self.best_value):
            self.best, self.best_value = incumbent, value

    def report(self) -> dict:
        """Per phase name, the seconds spent (summed over its runs)."""
        out: dict[str, float] = {}
        for r in self.times:
            out[r["phase"]] = out.get(r["phase"], 0.0) + r["wall_time_s"]
        return out
