"""Wake-ups for waiting claims: "a task may have become pending".

A ``ReadySignal`` is a counter under a condition variable. A waiting claim takes a
token (the counter) *before* it tries to claim, and waits only while the counter
still equals that token, so a task added between the claim and the wait is never
missed. SQLite bumps it after committing a transaction that made a task pending
(one signal per database file in the process); PostgreSQL bumps it from its
LISTEN connection.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["WAKE_QUERIES", "ReadySignal", "signal_for"]

# Named queries after which a committed transaction may have made a task pending.
WAKE_QUERIES = frozenset({"task_insert", "task_requeue", "ready_insert"})


class ReadySignal:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._waiters = 0

    @property
    def waiters(self) -> int:
        """How many claims are blocked in ``wait`` right now (tests wait on it)."""
        with self._cond:
            return self._waiters

    def token(self) -> int:
        with self._cond:
            return self._count

    def bump(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wait(self, token: int, timeout: float) -> bool:
        """Block until bumped past ``token`` or ``timeout`` seconds; True if bumped."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiters += 1
            try:
                while self._count == token:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self._waiters -= 1


_signals: dict[str, ReadySignal] = {}
_lock = threading.Lock()


def signal_for(key: str | os.PathLike[str]) -> ReadySignal:
    """The process-wide signal of one database (by resolved path or URL)."""
    name = str(key)
    if name != ":memory:" and "://" not in name:
        name = os.path.realpath(name)
    with _lock:
        sig = _signals.get(name)
        if sig is None:
            sig = _signals[name] = ReadySignal()
        return sig
