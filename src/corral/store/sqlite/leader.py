"""The monitor leader on SQLite: an exclusive ``flock`` on ``<database>-monitor``.

Every monitor over one file (each ``corral serve`` worker runs one) tries the lock at
each pass; the one holding it does the duties, the others only try again. The kernel
releases the lock when its holder's process dies, so another monitor takes over at
its next pass (within ``max_sleep``, 0.5 s by default). A leader that is stopped
(``SIGSTOP``, a debugger) keeps the lock without doing its duties: a monitor that finds
the holder stopped does them itself meanwhile (they are double-checked inside their
transactions, so two monitors acting at once do each thing once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from corral.store.sqlite.writer import fcntl, lock_holder

__all__ = ["MonitorLeader"]

log = logging.getLogger("corral.store.sqlite")  # as PostgreSQL's leader: corral.store.postgres


class MonitorLeader:
    """One store's claim to lead the monitors of its database file."""

    def __init__(self, db_path: Path | None) -> None:
        # None (an in-memory database, or no flock on this platform): every monitor leads.
        self._path = None if db_path is None or fcntl is None else Path(f"{db_path}-monitor")
        self._fd: int | None = None
        self._leading = False
        self._stand_in = False
        self._lock = threading.Lock()

    def try_lead(self, holder: str) -> bool:
        if self._path is None:
            return True
        with self._lock:
            if self._leading:
                return True
            if self._fd is None:
                try:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError:
                    return True  # no lock file (a read-only directory): every monitor acts
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = lock_holder(self._fd)
                stand_in = other is not None and other.stopped
                if stand_in and not self._stand_in:
                    log.warning(
                        "the monitor leader (process %d) is stopped; %s does the duties"
                        " until it resumes or ends",
                        other.pid,  # type: ignore[union-attr]
                        holder,
                        extra={"action": "monitor_stand_in", "monitor": holder},
                    )
                self._stand_in = stand_in
                return stand_in
            self._leading = True
            self._stand_in = False
            extra = {"action": "monitor_elected", "monitor": holder}
            log.info("%s leads the monitors", holder, extra=extra)
            return True

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            self._leading = False
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)  # releases the flock
