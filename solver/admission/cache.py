"""The only state of admission control: an explicit, lock-protected LRU cache of results with
single flight (`ResultCache`), and the clock every call measures its time limit on (`Clock`,
`wait`).

Work -- enumerating shapes, building coefficients, a solve -- runs in the cache's worker
threads under a `Deadline` (`specs.deadline`) it checks; the caller stops waiting at its
deadline or when it is cancelled (`wait`: the service cancels a request whose client left).
Work is owned by its waiters: queued work that no caller waits for any more is dropped before
it starts, and work that started is stopped (its deadline's stop flag: CP-SAT's StopSearch,
the preparation loops' checks) the moment its last waiter leaves, so no work goes on after
the answer. A result that is final is cached. At exit the workers are stopped the same way and
joined (a C++ solve still running when the interpreter tears down would abort the process).
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..errors import InputError
from ..specs.deadline import Deadline

# Default time limits (seconds) of each call.
DEFAULT_TIME_LIMIT_S = {"plan": 10.0, "check": 2.0, "fewest_gpus": 30.0, "admit": 30.0}


class Busy(RuntimeError):
    """Too many distinct computations in flight: the caller answers UNKNOWN at once."""


class Dropped(RuntimeError):
    """Queued work dropped before it started: no caller waited for it any more (or exit)."""


_CACHES: weakref.WeakSet[ResultCache] = weakref.WeakSet()


class ResultCache:
    """Lock-protected LRU of finished results plus the computations in flight (single flight:
    concurrent callers of one key share one computation).

    `maxsize` bounds the finished entries; `max_inflight` the distinct keys queued or being
    computed (beyond it `run` raises `Busy`); `workers` how many computations use the CPU at
    once. The workers are daemon threads started on first use and fed by a queue, so
    submitting work costs no thread start and a process can exit with work still queued.
    """

    def __init__(self, maxsize: int = 1024, max_inflight: int = 64, workers: int | None = None):
        self.maxsize = maxsize
        self.max_inflight = max_inflight
        self.workers = workers or max(2, os.cpu_count() or 2)
        self._lock = threading.Lock()
        self._data: OrderedDict = OrderedDict()
        self._inflight: dict = {}
        self._waiters: dict = {}  # key -> callers waiting for its computation
        self._deadlines: dict = {}  # key -> the deadline its computation runs under (stopped when unwanted)
        self._queues: dict[str, queue.SimpleQueue] = {}
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.dropped = 0
        _CACHES.add(self)
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.computed = 0

    def get(self, key, default=None):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return default

    def put(self, key, value) -> None:
        with self._lock:
            self._put(key, value)

    def put_if(self, key, value, keep: Callable[[Any], bool]) -> None:
        """Store `value` unless an entry exists and `keep(existing)` says to keep that one."""
        with self._lock:
            prev = self._data.get(key)
            if prev is None or not keep(prev):
                self._put(key, value)

    def _put(self, key, value) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)
            self.evictions += 1

    def run(self, key, fn: Callable[[], Any], store: Callable[[Any], bool] = lambda v: True,
            lane: str = "prepare", deadline: Deadline | None = None) -> Future:
        """The future of `fn()` for `key`: the cached value, the computation in flight, or a new
        one queued for the workers (stored in the cache when `store(value)`). `deadline`: the one
        `fn` runs under; the cache stops it when no caller waits for the result any more."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                fut: Future = Future()
                fut.set_result(self._data[key])
                return fut
            pending = self._inflight.get(key)
            if pending is not None:
                self._waiters[key] = self._waiters.get(key, 0) + 1
                return pending
            if self._closed:
                raise Busy("shutting down")
            if len(self._inflight) >= self.max_inflight:
                raise Busy(f"{len(self._inflight)} computations in flight")
            self.misses += 1
            fut = Future()
            self._inflight[key] = fut
            self._waiters[key] = 1
            if deadline is not None:
                self._deadlines[key] = deadline
            q = self._queues.get(lane)
            if q is None:
                q = self._queues[lane] = queue.SimpleQueue()
                for i in range(self.workers):
                    t = threading.Thread(target=self._worker, args=(q,), daemon=True, name=f"solveplan-{lane}-{i}")
                    self._threads.append(t)
                    t.start()
        q.put((key, fn, fut, store))
        return fut

    def release(self, key) -> None:
        """A caller of `run(key)` stopped waiting (answered, timed out or cancelled). When it was
        the last, the computation is stopped and forgotten: a later caller starts a new one."""
        stop = None
        with self._lock:
            n = self._waiters.get(key, 0) - 1
            if n > 0:
                self._waiters[key] = n
            else:
                self._waiters.pop(key, None)
                stop = self._deadlines.pop(key, None)
                if stop is not None:
                    self._inflight.pop(key, None)
        if stop is not None:
            stop.stop()

    def fetch(self, key, fn: Callable[[], Any], clock: Clock | None, store: Callable[[Any], bool] = lambda v: True,
              lane: str = "prepare", reserve: bool = True, deadline: Deadline | None = None):
        """`run` and wait for the value: None at the clock's deadline (or cancellation); with no
        clock, until it is computed. Raises Busy, Dropped or what `fn` raised (DeadlineExpired
        when `deadline` passed before `fn` had an answer)."""
        fut = self.run(key, fn, store, lane, deadline)
        try:
            return fut.result() if clock is None else wait(fut, clock, reserve)
        finally:
            self.release(key)

    def _worker(self, q: queue.SimpleQueue) -> None:
        while True:
            item = q.get()
            if item is None:  # shutdown
                return
            key, fn, fut, store = item
            with self._lock:
                unwanted = self._closed or self._inflight.get(key) is not fut or not self._waiters.get(key)
                if unwanted:
                    self._forget(key, fut)
                    self.dropped += 1
            if unwanted:
                fut.set_exception(Dropped("no caller waits for it"))
                continue
            try:
                value = fn()
            except BaseException as exc:  # handed to every waiter
                with self._lock:
                    self._forget(key, fut)
                fut.set_exception(exc)
                continue
            with self._lock:
                current = self._inflight.get(key) is fut
                self._forget(key, fut)
                self.computed += 1
                if current and store(value):
                    self._put(key, value)
            fut.set_result(value)

    def _forget(self, key, fut: Future) -> None:
        """Drop `key`'s in-flight entry if it is still `fut`'s (a stopped computation's key may
        already belong to a new one). Called with the lock held."""
        if self._inflight.get(key) is fut:
            del self._inflight[key]
            self._deadlines.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def shutdown(self) -> None:
        """Stop the workers: queued work is dropped, running work is stopped (its deadline) and
        the threads are joined. The cache cannot compute afterwards."""
        with self._lock:
            self._closed = True
            queues, threads = list(self._queues.values()), list(self._threads)
            running = list(self._deadlines.values())
        for dl in running:
            dl.stop()
        for q in queues:
            for _ in range(self.workers):
                q.put(None)
        for t in threads:
            if t is not threading.current_thread():
                t.join()

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._data), "maxsize": self.maxsize, "inflight": len(self._inflight),
                    "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "computed": self.computed, "dropped": self.dropped}


@atexit.register
def _shutdown_all() -> None:
    for c in list(_CACHES):
        c.shutdown()


DEFAULT_CACHE = ResultCache()


class Clock:
    """A deadline measured from the call. `left()` is the remaining budget in seconds (0 once
    `cancel` is set: the caller went away)."""

    def __init__(self, time_limit_s: float | None, default: float, cancel: threading.Event | None = None):
        limit = default if time_limit_s is None else time_limit_s
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit < 0:
            raise InputError("time_limit_s", f"must be a non-negative number of seconds (got {time_limit_s!r})")
        self.limit = float(limit)
        self.start = time.monotonic()
        self.deadline = self.start + self.limit
        self.cancel = cancel

    def sub(self, limit: float) -> Clock:
        """A clock of `limit` seconds from now, cancelled with this one."""
        return Clock(max(0.0, limit), 0.0, self.cancel)

    def work(self, at: float | None = None) -> Deadline:
        """The deadline of a computation on this clock's behalf: `at` (monotonic seconds; default
        this clock's deadline), with its own stop flag (the cache stops it when its last waiter
        leaves)."""
        return Deadline(self.deadline if at is None else min(at, self.deadline))

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def left(self) -> float:
        return 0.0 if self.cancelled else self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def reserve(self) -> float:
        """Time kept back at the end to assemble an answer after a wait times out. The waiting
        thread has to win the GIL back from a worker (5 ms switch interval, longer inside
        numpy calls) and the CPU from other processes: 15 ms + 4% of the limit, at most 0.25 s."""
        return min(0.25, 0.015 + 0.04 * self.limit)


CANCEL_POLL_S = 0.05


def wait(fut: Future, clock: Clock, reserve: bool = True):
    """fut's value, or None when the deadline (less the reserve) or a cancellation comes first."""
    while True:
        if fut.done():
            return fut.result()
        timeout = clock.left() - (clock.reserve() if reserve else 0.0)
        if timeout <= 0:
            return None
        try:
            return fut.result(timeout=timeout if clock.cancel is None else min(timeout, CANCEL_POLL_S))
        except FutureTimeout:
            continue
