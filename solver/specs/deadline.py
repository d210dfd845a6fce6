"""The one deadline of a call (issue #27): every solve, preparation loop, heuristic and probe
takes a `Deadline` and checks it, so that once an answer is due no work goes on.

A `Deadline` is a point in `time.monotonic()` time plus a `StopFlag` shared with the deadlines
derived from it (`within`): setting the flag (`Deadline.stop`: the caller went away, the
process exits, nobody waits for the work any more) expires them all at once and stops the
CP-SAT solves running under them (`Deadline.stopping`).

Work checks it in two ways: `expired()` where it can return what it has (a partial answer),
`check()` where it cannot (raises `DeadlineExpired`, which the caller that owns the deadline
turns into its time-limit answer).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator


class DeadlineExpired(Exception):
    """The deadline passed (or the work was stopped) in work that has no partial answer."""


class StopFlag:
    """Set once, from any thread: the work under it stops. Callbacks registered with `on_set`
    (a CP-SAT solver's `stop_search`) run when it is set, or at once if it already is."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    @contextlib.contextmanager
    def on_set(self, fn: Callable[[], None]) -> Iterator[None]:
        """Call `fn` if the flag is set while the block runs."""
        with self._lock:
            now = self._event.is_set()
            if not now:
                self._callbacks.append(fn)
        if now:
            fn()
        try:
            yield
        finally:
            with self._lock:
                if fn in self._callbacks:
                    self._callbacks.remove(fn)


class Deadline:
    """`at` (monotonic seconds; inf: none) and the stop flag shared with derived deadlines."""

    def __init__(self, at: float = math.inf, stop: StopFlag | None = None) -> None:
        self.at = float(at)
        self.flag = stop if stop is not None else StopFlag()

    @classmethod
    def after(cls, seconds: float, stop: StopFlag | None = None) -> Deadline:
        """A deadline `seconds` from now."""
        return cls(time.monotonic() + max(0.0, float(seconds)), stop)

    def within(self, seconds: float) -> Deadline:
        """The earlier of this deadline and `seconds` from now, stopped with this one."""
        return Deadline(min(self.at, time.monotonic() + max(0.0, float(seconds))), self.flag)

    def left_s(self) -> float:
        """Seconds left (0 once passed or stopped; inf without a deadline)."""
        if self.flag.is_set():
            return 0.0
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.left_s() <= 0.0

    def check(self) -> None:
        """Raise `DeadlineExpired` when the deadline has passed or the work was stopped."""
        if self.expired():
            raise DeadlineExpired("the time limit is spent" if not self.flag.is_set() else "stopped")

    def stop(self) -> None:
        """Expire this deadline and every one derived from it, now."""
        self.flag.set()

    def solver_s(self, cap_s: float) -> float:
        """A solver's time limit: `cap_s`, at most what is left (at least 1 ms: CP-SAT needs one)."""
        return max(0.001, min(float(cap_s), self.left_s()))

    def stopping(self, stop_search: Callable[[], None]):
        """Context manager: `stop_search()` is called if this deadline is stopped meanwhile."""
        return self.flag.on_set(stop_search)

