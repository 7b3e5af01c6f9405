"""Time is injected: services read a ``Clock``; tests pass a ``FakeClock``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "FakeClock", "ServerClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> None:
        with self._lock:
            self._now = float(when)


class ServerClock:
    """Another machine's wall clock (a database server's), followed with this
    process's monotonic clock: ``now()`` is the local monotonic time plus an offset
    measured by ``read()`` (the server's time, seconds since the epoch) at the first
    call and again every ``every`` seconds, from the round trip's midpoint. Every
    process on the same server agrees within its round trip, and a step of this host's
    wall clock moves nothing. When ``read()`` fails the last offset is kept and the
    server read again ``every`` seconds later; before a first success this host's wall
    clock stands in, and the server is read again a second later.
    ``monotonic`` is the local clock it follows (injected by tests)."""

    def __init__(
        self,
        read: Callable[[], float],
        every: float = 10.0,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._every = every
        self._monotonic = monotonic
        self._offset: float | None = None
        self._next = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        mono = self._monotonic()
        if mono >= self._next and self._lock.acquire(blocking=False):
            try:
                before = self._monotonic()
                server = self._read()
                after = self._monotonic()
                self._offset = server - (before + after) / 2
                self._next = after + self._every
            except Exception:  # unreachable now: keep the offset
                # Until a first read succeeds this host's own wall clock stands in
                # (stepped, perhaps): try again within a second, not a period later.
                wait = self._every if self._offset is not None else min(self._every, 1.0)
                self._next = self._monotonic() + wait
            finally:
                self._lock.release()
        offset = self._offset
        if offset is None:
            return time.time()
        return self._monotonic() + offset
