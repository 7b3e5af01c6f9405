"""The background checkpoint thread (``_Checkpointer``): no claim or completion pays
for copying the WAL back into the database file."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

from corral.defaults import BUSY_TIMEOUT_SECONDS
from corral.store.sqlite.writer import _WriterLock

__all__: list[str] = []


# The checkpoint thread's tries for the writers' lock before a RESTART checkpoint: every
# _RESTART_POLL seconds for up to _RESTART_PATIENCE, then it waits for its next turn.
_RESTART_POLL = 0.0005
_RESTART_PATIENCE = 1.0


class _Checkpointer:
    """Checkpoints the WAL on a background thread every ``every`` commits.

    SQLite's automatic checkpoint runs inside the commit that crosses its threshold:
    that caller pays for copying the WAL back into the database file (a third of a
    claim's time, on average). Here the store's own commits wake a thread that runs a
    ``PASSIVE`` checkpoint on its own connection, which never blocks a reader or a
    writer. The thread starts at the first checkpoint (a store that only reads never
    has one) and sleeps, without a timer, between them. The store's connection keeps
    an automatic checkpoint at ``SQLITE_WAL_LIMIT_PAGES`` as a bound on the WAL should
    the thread fall behind.

    A ``PASSIVE`` checkpoint never lets the WAL start over while writers keep
    committing: new frames arrive while it copies, so the WAL grows to that bound.
    For a store that syncs its commits (``FULL``), when the WAL holds
    ``restart_after`` frames the thread therefore takes the writers'
    lock (``_WriterLock``) and finishes with a ``RESTART`` checkpoint, which copies
    the few frames written since and makes the next commit write from the WAL's start,
    over the file's existing pages. Writing over existing pages is cheaper to sync
    than growing the file (about half the ``fdatasync`` time here), and the WAL stays
    a few MB. The lock is held for that finishing copy only; a reader still on the
    WAL makes SQLite skip the restart (its busy handler is off), never wait."""

    def __init__(self, path: str, synchronous: str, every: int, restart_after: int = 0) -> None:
        self._path = path
        self._sync = synchronous
        self._every = every
        self._restart_after = restart_after  # 0: never restart
        self._count = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.runs = 0  # checkpoints done (tests wait on it)
        self.restarts = 0  # RESTART checkpoints that restarted the WAL

    def committed(self) -> None:
        """Called after each commit, under the store's lock."""
        self._count += 1
        if self._count < self._every or self._closed:
            return
        self._count = 0
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="corral-sqlite-checkpoint", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, timeout=0, isolation_level=None)
        except sqlite3.Error:
            return  # the store's automatic checkpoint still bounds the WAL
        lock: _WriterLock | None = None
        try:
            conn.execute(f"PRAGMA synchronous={self._sync}")
            if self._restart_after:
                # Its own open of the lock file: flock excludes per open file, so this
                # process's writers wait for the thread too (the store's fd would not).
                lock = _WriterLock(Path(self._path), BUSY_TIMEOUT_SECONDS)
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closed:
                    return
                with contextlib.suppress(sqlite3.Error):  # busy: the next wake-up retries
                    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if lock is not None and frames >= self._restart_after:
                        self._restart(conn, lock)
                self.runs += 1
        except OSError:
            return  # no lock file: the store's automatic checkpoint still bounds the WAL
        finally:
            if lock is not None:
                lock.close()
            conn.close()

    def _restart(self, conn: sqlite3.Connection, lock: _WriterLock) -> None:
        deadline = time.monotonic() + _RESTART_PATIENCE
        while not lock.acquire(blocking=False):
            if self._closed or time.monotonic() > deadline:
                return  # the writers keep it: the next wake-up tries again
            time.sleep(_RESTART_POLL)
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            self.restarts += not busy
        finally:
            lock.release()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
