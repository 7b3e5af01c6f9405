"""The two sessions a PostgreSQL store keeps outside its pool: ``Listener`` (LISTEN
for new pending tasks, the wake-ups of waiting claims) and ``Leader`` (the monitor
leader's session advisory lock)."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import suppress
from typing import Any

import psycopg

from corral.backoff import Backoff
from corral.errors import StoreUnavailableError
from corral.store.postgres.session import _CHANNEL, _LEADER_KEY, Sessions, _unavailable
from corral.store.signal import ReadySignal

__all__ = ["LEADER_IDLE_MS", "Leader", "Listener"]

# The monitor renews its lead at every tick (at most 0.5 s apart).
LEADER_IDLE_MS = 2000

log = logging.getLogger("corral.store.postgres")


class Listener:
    """A thread on its own session that bumps ``ready`` at each notification of a task
    that may have become pending, and once after each (re)connection (tasks may have
    come while it was not listening). Started by the first ``ensure``."""

    def __init__(self, sessions: Sessions, ready: ReadySignal) -> None:
        self._sessions = sessions
        self._ready = ready
        self._closed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()

    def ensure(self) -> None:
        """The listener runs and listens, or ``StoreUnavailableError``."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._listen, name="corral-pg-listen", daemon=True
                )
                self._thread.start()
        if not self._listening.wait(self._sessions.connect_timeout):
            raise StoreUnavailableError(
                "PostgreSQL store unavailable: cannot LISTEN for new tasks; retry the call"
            )

    def _listen(self) -> None:
        backoff = Backoff(base=0.1, cap=5.0)  # 0.1 s doubling to 5 s
        while not self._closed:
            try:
                with self._sessions.connect() as conn:
                    conn.execute(f"LISTEN {_CHANNEL}")
                    self._listening.set()
                    self._ready.bump()  # tasks may have come while we were not listening
                    backoff.reset()
                    while not self._closed:
                        for _ in conn.notifies(timeout=1.0):
                            self._ready.bump()
            except psycopg.Error as exc:
                self._listening.clear()
                if self._closed:
                    return
                log.warning(
                    "LISTEN connection lost (%s); reconnecting",
                    exc,
                    extra={"action": "listen_retry"},
                )
                time.sleep(backoff.next())

    def close(self) -> None:
        """The thread ends within a second (its wait for notifications)."""
        self._closed = True


class Leader:
    """The monitor leader holds a session advisory lock on a dedicated connection.
    When its process dies or its connection drops, the server releases the lock and
    the next ``try_lead`` of another monitor takes it."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._leading = False

    def try_lead(self, holder: str) -> bool:
        with self._lock:
            try:
                conn = self._conn
                if conn is None or conn.closed:
                    self._leading = False
                    conn = self._conn = self._sessions.connect(
                        application_name=f"corral monitor {holder}"
                    )
                    # A leader that sends nothing for this long (stopped, paused, cut
                    # off) has its session ended by the server, releasing the lock
                    # (PostgreSQL 14 and later; before, only TCP keepalive ends it).
                    if conn.info.server_version >= 140000:
                        conn.execute(f"SET idle_session_timeout = {LEADER_IDLE_MS}")
                if self._leading:
                    conn.execute("SELECT 1")  # the session lives, so the lock is held
                else:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", [_LEADER_KEY]).fetchone()
                    self._leading = bool(row and row[0])
                    if self._leading:
                        extra = {"action": "monitor_elected", "monitor": holder}
                        log.info("%s leads the monitors", holder, extra=extra)
                return self._leading
            except psycopg.Error as exc:
                was = self._leading
                self._drop()
                if was:
                    extra = {"action": "monitor_lost_lead", "monitor": holder}
                    log.warning("%s lost the monitor lead: %s", holder, exc, extra=extra)
                raise _unavailable(exc) from exc

    def _drop(self) -> None:
        self._leading = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()
