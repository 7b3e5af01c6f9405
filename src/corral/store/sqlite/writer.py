"""corral's queue for SQLite's write lock among its processes (``_WriterLock``), and
who holds it (``lock_holder``: a stopped process is named in the error)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from corral.backoff import Backoff
from corral.errors import StoreUnavailableError
from corral.store.base import LockHolder

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - no flock: SQLite's own lock and corral's retries only
    fcntl = None

# ``fcntl`` is None where the platform has no flock; the other modules ask here.
__all__ = ["fcntl", "lock_holder"]


# A writer that finds the lock taken first retries for up to _SPIN_SECONDS, yielding
# the CPU between tries: a write transaction is short, so most waits end there.
# The spin adapts: a wait longer than _SPIN_LONG_WAIT means a long queue (more writers
# than cores), where spinning only takes CPU from the holder, so the next spin is
# halved; a shorter wait doubles it back. After the spin the writer sleeps between
# tries, _SLEEP_FIRST doubling to _SLEEP_MAX. Sleeping rather than blocking in the
# kernel's queue lets a holder with more to write go on for a few transactions with
# its page cache warm (SQLite drops a connection's cache whenever another process has
# committed); a kernel wake-up hands the lock to another process at every release.
# Side by side with the blocking variant (bench/sqlite_throughput.py; the figures are
# in docs/performance.md), the worker's loop with 2 to 16 processes ran faster, with
# fewer slow jobs.
_SPIN_SECONDS = 0.0003
_SPIN_STEP = 0.00001
_SPIN_LONG_WAIT = 0.001
_SLEEP_FIRST = 0.001
_SLEEP_MAX = 0.004
# With synchronous=FULL a holder leaves to sync its commit (``_SyncedCommits``) and
# cannot take the lock back until the sync is done: waiters sleeping as long as above
# left the lock idle, and the group commit gained nothing with 4 processes; with the
# shorter sleeps below it beat SQLite's own FULL with 2 and 4 (bench/sqlite_throughput.py).
_SLEEP_FIRST_SYNCED = 0.0002
_SLEEP_MAX_SYNCED = 0.0005


def lock_holder(fd: int) -> LockHolder | None:
    """The process holding an ``flock`` on the file open as ``fd``, from
    ``/proc/locks`` (Linux), and whether ``/proc/<pid>/stat`` says it is stopped
    (state ``T``, or ``t`` under a debugger); None when nobody holds it or the
    platform cannot tell."""
    try:
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" ("->" marks a waiter)
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != key:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            return None
        return LockHolder(pid, _stopped(pid)) if pid > 0 else None
    return None


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


class _WriterLock:
    """The queue for SQLite's write lock among corral's processes: an exclusive
    ``flock`` on ``<database>-lock``, taken before ``BEGIN IMMEDIATE`` and released
    after ``COMMIT``.

    Without it, every writer would poll SQLite's own lock on its busy handler's
    schedule (1, 2, 5, 10 … ms) and meet "database is locked" at its end. Here a
    waiter spins briefly, then sleeps between tries (see ``_SLEEP_FIRST``), for up to
    the store's busy timeout: a holder stopped inside its transaction (``SIGSTOP``, a
    debugger, a frozen container) makes the others fail with a retryable
    ``StoreUnavailableError``, never hang. The kernel releases the lock when its holder
    dies. SQLite's lock stays the authority: a writer that does not take this lock
    (another program) is still waited out by ``_retrying``."""

    def __init__(self, db_path: Path, timeout: float, synced: bool = False) -> None:
        self._fd: int | None = None
        self._timeout = timeout
        self._sleeps = (
            (_SLEEP_FIRST_SYNCED, _SLEEP_MAX_SYNCED) if synced else (_SLEEP_FIRST, _SLEEP_MAX)
        )
        self._spin = _SPIN_SECONDS  # adaptive: see _SPIN_LONG_WAIT
        self.timeouts = 0  # waits that gave up after the timeout (a store statistic)
        self._path = f"{db_path}-lock"
        if fcntl is not None and str(db_path) != ":memory:":
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self, blocking: bool) -> bool:
        """Take the lock; ``False`` only when not ``blocking`` and it is taken.
        Raises ``StoreUnavailableError`` when it stays taken for the timeout."""
        fd = self._fd
        if fd is None:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not blocking:
                return False
        start = time.perf_counter()
        spin_until = start + self._spin
        while time.perf_counter() < spin_until:
            os.sched_yield()
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._spin = min(_SPIN_SECONDS, self._spin * 2 + _SPIN_STEP)  # it pays
                return True
        deadline = start + self._timeout
        first, longest = self._sleeps
        pauses = Backoff(base=first, cap=longest)
        while True:
            time.sleep(pauses.next())
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            if time.perf_counter() > deadline:
                self.timeouts += 1
                raise StoreUnavailableError(self._held_text())
        if time.perf_counter() - start >= _SPIN_LONG_WAIT:
            self._spin /= 2  # a long queue: spinning takes CPU from the holder
        return True

    def holder(self) -> LockHolder | None:
        """The process holding the lock now, as ``/proc/locks`` tells (Linux); None
        when it is free, not ours to see, or the platform cannot tell."""
        if self._fd is None:
            return None
        return lock_holder(self._fd)

    def _held_text(self) -> str:
        who = self.holder()
        if who is None:
            return (
                f"SQLite store unavailable: another process has held the write lock"
                f" ({self._path}) for {self._timeout:g} s; it may be stopped inside a"
                f" transaction (find it with: fuser -v {self._path}); retry the call"
            )
        if who.stopped:
            return (
                f"SQLite store unavailable: process {who.pid} is stopped (SIGSTOP, a"
                f" debugger, a frozen container) holding the write lock ({self._path});"
                f" every writer fails until it resumes or exits: resume it (kill -CONT"
                f" {who.pid}) or end it (kill {who.pid}); then retry the call"
            )
        return (
            f"SQLite store unavailable: process {who.pid} has held the write lock"
            f" ({self._path}) for {self._timeout:g} s; it may be stuck inside a transaction"
            f" (end it with: kill {who.pid}); retry the call"
        )

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
