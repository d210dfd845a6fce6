"""The only state of admission control: an explicit, lock-protected LRU cache of results with
single flight (`ResultCache`), and the clock every call measures its time limit on (`Clock`,
`wait`).

Work that cannot be interrupted -- enumerating shapes, building coefficients, a solve -- runs
in the cache's worker threads; the caller stops waiting at its deadline (`wait`), the work
finishes in the background and its result is cached, so the next call is fast.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Optional

from ..errors import InputError

# Default time limits (seconds) of each call.
DEFAULT_TIME_LIMIT_S = {"plan": 10.0, "check": 2.0, "fewest_gpus": 30.0, "admit": 30.0}


class Busy(RuntimeError):
    """Too many distinct computations in flight: the caller answers UNKNOWN at once."""


class ResultCache:
    """Lock-protected LRU of finished results plus the computations in flight (single flight:
    concurrent callers of one key share one computation).

    `maxsize` bounds the finished entries; `max_inflight` the distinct keys queued or being
    computed (beyond it `run` raises `Busy`); `workers` how many computations use the CPU at
    once. The workers are daemon threads started on first use and fed by a queue, so
    submitting work costs no thread start and a process can exit with work still queued.
    """

    def __init__(self, maxsize: int = 1024, max_inflight: int = 256, workers: Optional[int] = None):
        self.maxsize = maxsize
        self.max_inflight = max_inflight
        self.workers = workers or max(2, os.cpu_count() or 2)
        self._lock = threading.Lock()
        self._data: OrderedDict = OrderedDict()
        self._inflight: dict = {}
        self._queues: dict[str, queue.SimpleQueue] = {}
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
            lane: str = "prepare") -> Future:
        """The future of `fn()` for `key`: the cached value, the computation in flight, or a new
        one queued for the workers (stored in the cache when `store(value)`)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                fut: Future = Future()
                fut.set_result(self._data[key])
                return fut
            fut = self._inflight.get(key)
            if fut is not None:
                return fut
            if len(self._inflight) >= self.max_inflight:
                raise Busy(f"{len(self._inflight)} computations in flight")
            self.misses += 1
            fut = Future()
            self._inflight[key] = fut
            q = self._queues.get(lane)
            if q is None:
                q = self._queues[lane] = queue.SimpleQueue()
                for i in range(self.workers):
                    threading.Thread(target=self._worker, args=(q,), daemon=True, name=f"solveplan-{lane}-{i}").start()
        q.put((key, fn, fut, store))
        return fut

    def _worker(self, q: queue.SimpleQueue) -> None:
        while True:
            key, fn, fut, store = q.get()
            try:
                value = fn()
            except BaseException as exc:  # handed to every waiter
                with self._lock:
                    self._inflight.pop(key, None)
                fut.set_exception(exc)
                continue
            with self._lock:
                self._inflight.pop(key, None)
                self.computed += 1
                if store(value):
                    self._put(key, value)
            fut.set_result(value)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._data), "maxsize": self.maxsize, "inflight": len(self._inflight),
                    "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "computed": self.computed}


DEFAULT_CACHE = ResultCache()


class Clock:
    """A deadline measured from the call. `left()` is the remaining budget in seconds."""

    def __init__(self, time_limit_s: Optional[float], default: float):
        limit = default if time_limit_s is None else float(time_limit_s)
        if not math.isfinite(limit) or limit < 0:
            raise InputError("time_limit_s", f"must be a non-negative number of seconds (got {time_limit_s!r})")
        self.limit = limit
        self.start = time.monotonic()
        self.deadline = self.start + limit

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def reserve(self) -> float:
        """Time kept back at the end to assemble an answer after a wait times out. The waiting
        thread has to win the GIL back from a worker (5 ms switch interval, longer inside
        numpy calls) and the CPU from other processes: 15 ms + 4% of the limit, at most 0.25 s."""
        return min(0.25, 0.015 + 0.04 * self.limit)


def wait(fut: Future, clock: Clock, reserve: bool = True):
    """fut's value, or None when the deadline (less the reserve) comes first."""
    timeout = clock.left() - (clock.reserve() if reserve else 0.0)
    if fut.done():
        return fut.result()
    if timeout <= 0:
        return None
    try:
        return fut.result(timeout=timeout)
    except FutureTimeout:
        return None
