"""Wake-ups for waiting claims: "a task may have become pending".

A ``ReadySignal`` is a counter under a condition variable. A waiting claim takes a
token (the counter) *before* it tries to claim, and waits only while the counter
still equals that token, so a task added between the claim and the wait is never
missed. SQLite bumps it after committing a transaction that made a task pending
(one signal per database file in the process), and rings the ``Doorbell`` of the
other processes on the same file; PostgreSQL bumps it from its LISTEN connection.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import stat
import threading
import time

__all__ = [
    "WAKE_QUERIES",
    "Doorbell",
    "ReadySignal",
    "close_listeners",
    "doorbell_for",
    "signal_for",
]

# Named queries after which a committed transaction may have made a task pending.
WAKE_QUERIES = frozenset(
    {"task_insert", "task_requeue", "task_requeue_fresh", "ready_insert", "task_make_pending"}
)


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


class Doorbell:
    """Wake-ups across the processes that share one SQLite file, without polling.

    A process with a waiting claim listens on a FIFO of its own in ``<database>-wait/``
    (mode 0700; the FIFO 0600): a daemon thread blocks reading it and bumps the
    process's ``ReadySignal`` for every byte. A process that commits a transaction that
    made a task pending writes one byte, without blocking, into every other FIFO there.
    A FIFO that no process reads any more (its listener died) refuses the writer
    (``ENXIO``) and is removed by it. Without a FIFO (a read-only directory, no POSIX
    FIFOs) waiting claims still re-check every ``SQLITE_WAIT_RECHECK`` seconds."""

    def __init__(self, db_path: str, signal: ReadySignal) -> None:
        self.dir = f"{db_path}-wait"
        self.signal = signal
        self._lock = threading.Lock()
        self._pid: int | None = None  # the process whose thread listens
        self._own: str | None = None
        self._fds: tuple[int, int] | None = None

    def listen(self) -> None:
        """Start this process's listener, once per process; never raises."""
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._forget_parent()
            path = os.path.join(self.dir, f"{os.getpid()}-{os.urandom(4).hex()}")
            try:
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                os.mkfifo(path, 0o600)
                rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                # Our own writer keeps the reader from seeing end-of-file between rings.
                wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                os.set_blocking(rfd, True)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                return
            self._own, self._fds, self._pid = path, (rfd, wfd), os.getpid()
            threading.Thread(
                target=self._run, args=(rfd,), name="corral-sqlite-doorbell", daemon=True
            ).start()
            atexit.register(_unlink_own, path, os.getpid())

    def _forget_parent(self) -> None:
        """In a forked child: close the parent's listener's descriptors (its thread did
        not survive the fork), so that its FIFO is seen as gone once the parent is."""
        if self._fds is not None:
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._own, self._fds = None, None

    def close(self) -> None:
        """Remove this process's FIFO (its listener hears nothing more; a waiting
        claim still re-checks on its own). For a process about to end without
        running its ``atexit`` handlers (killed by the signal it re-raises after a
        graceful shutdown, as ``corral serve`` is). Never raises."""
        with self._lock:
            if self._pid != os.getpid() or self._own is None:
                return
            _unlink(self._own)
            self._own = None

    def _run(self, rfd: int) -> None:
        while True:
            try:
                if not os.read(rfd, 4096):
                    return
            except InterruptedError:
                continue
            except OSError:
                return
            self.signal.bump()

    def ring(self) -> None:
        """Wake the waiting claims of the other processes; never blocks, never raises."""
        try:
            entries = os.scandir(self.dir)
        except OSError:
            return  # nobody has ever waited on this file
        own = self._own if self._pid == os.getpid() else None
        with entries:
            for entry in entries:
                if entry.path == own:
                    continue
                try:
                    if not stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode):
                        continue
                    fd = os.open(entry.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # no reader: its process is gone
                        _unlink(entry.path)
                    continue
                try:
                    os.write(fd, b"\0")
                except OSError:
                    pass  # full: that process has wake-ups pending already
                finally:
                    os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _unlink_own(path: str, pid: int) -> None:
    """At exit, remove this process's FIFO (not in a forked child, which inherits the
    handler but not the listener)."""
    if os.getpid() == pid:
        _unlink(path)


_doorbells: dict[str, Doorbell] = {}


def close_listeners() -> None:
    """Remove every FIFO this process listens on (``Doorbell.close``)."""
    with _lock:
        bells = list(_doorbells.values())
    for bell in bells:
        bell.close()


def doorbell_for(path: str | os.PathLike[str], signal: ReadySignal) -> Doorbell:
    """The process-wide doorbell of one SQLite file (by resolved path)."""
    name = os.path.realpath(str(path))
    with _lock:
        bell = _doorbells.get(name)
        if bell is None:
            bell = _doorbells[name] = Doorbell(name, signal)
        return bell
