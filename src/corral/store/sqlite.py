"""The embedded store: one SQLite file in WAL mode.

Durability: ``synchronous=NORMAL`` (the default) loses nothing when any process
crashes; a power loss or OS crash can roll back the last transactions committed
before it (never corrupting the file). ``synchronous=FULL`` syncs every commit.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corral.defaults import BUSY_TIMEOUT_SECONDS, SQLITE_WAIT_RECHECK
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.model import Task
from corral.store.queries import load_queries, migrations
from corral.store.signal import WAKE_QUERIES, signal_for
from corral.store.sqlbase import SQLStore, task_from_row

__all__ = ["SQLiteStore", "WouldBlock"]

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_QUERIES = load_queries("sqlite")


class WouldBlock(Exception):
    """Raised in ``SQLiteStore.nowait()`` when a transaction would have to wait for
    another thread or process; that transaction has done nothing."""


class _Tx:
    __slots__ = ("_conn", "wake")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.wake = False  # a task may become pending: wake waiting claims on commit

    def one(self, name: str, **params: Any) -> Any:
        self.wake = self.wake or name in WAKE_QUERIES
        rows = self._conn.execute(_QUERIES[name], params).fetchall()
        return rows[0] if rows else None

    def all(self, name: str, **params: Any) -> list[Any]:
        return self._conn.execute(_QUERIES[name], params).fetchall()

    def run(self, name: str, **params: Any) -> int:
        self.wake = self.wake or name in WAKE_QUERIES
        return self._conn.execute(_QUERIES[name], params).rowcount


def _unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    return StoreUnavailableError(f"SQLite store unavailable: {exc}; retry the call")


class SQLiteStore(SQLStore):
    """One connection per store, shared by the process's threads under a lock.
    Open a new store in each process (never share one across ``fork``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__()
        sync = str(synchronous).upper()
        if sync not in _SYNCHRONOUS:
            raise InvalidInputError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}", field="synchronous"
            )
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._nowait = threading.local()
        self._busy_timeout = busy_timeout
        self._ready = signal_for(path)
        try:
            # SQLite's busy handler is off (timeout=0): waits are ours (``_retrying``).
            self._conn = sqlite3.connect(
                str(path), timeout=0, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._retrying("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={sync}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.Error as exc:
            raise _unavailable(exc) from exc

    def _retrying(self, sql: str) -> None:
        """Run ``sql``, waiting out a busy database in short sleeps.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... ms between tries, far longer
        than corral's transactions hold the write lock (about 0.1 ms), so under
        contention writers would mostly sleep. corral waits itself: 50 us doubling to
        2 ms, with jitter, up to the busy timeout; then ``StoreUnavailableError``."""
        deadline = None
        pause = 0.00005
        while True:
            try:
                self._conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise _unavailable(exc) from exc
                if getattr(self._nowait, "on", False):
                    raise WouldBlock("another process holds the database") from None
                now = time.monotonic()
                deadline = deadline or now + self._busy_timeout
                if now > deadline:
                    raise _unavailable(exc) from exc
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.002)

    @contextmanager
    def nowait(self) -> Iterator[None]:
        """Transactions started in this block, on this thread, never wait: when
        another thread holds the store or the database is busy, they raise
        ``WouldBlock`` before doing anything. An event loop runs short operations
        inline this way and hops to a thread only on contention (corral serve)."""
        self._nowait.on = True
        try:
            yield
        finally:
            self._nowait.on = False

    def _acquire(self) -> None:
        if getattr(self._nowait, "on", False):
            if not self._lock.acquire(blocking=False):
                raise WouldBlock("the store is busy in another thread")
        else:
            self._lock.acquire()

    def _migrate(self) -> None:
        self._retrying("PRAGMA user_version")
        current = self._conn.execute("PRAGMA user_version").fetchone()[0]
        pending = [(v, sql) for v, sql in migrations("sqlite") if v > current]
        if not pending:
            return
        with self._write() as _:
            # Re-read under the write lock: another process may have migrated first.
            current = self._conn.execute("PRAGMA user_version").fetchone()[0]
            for version, sql in pending:
                if version <= current:
                    continue
                for statement in _statements(sql):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version={version}")

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        self._acquire()
        try:
            self._retrying("BEGIN IMMEDIATE")
            tx = _Tx(self._conn)
            try:
                yield tx
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise _unavailable(exc) from exc
        finally:
            self._lock.release()
        if tx.wake:
            self._ready.bump()

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        self._acquire()
        try:
            self._conn.execute("BEGIN")
            try:
                # Take the read snapshot now, where a busy database can be waited out.
                self._retrying("SELECT 1 FROM meta LIMIT 1")
                yield _Tx(self._conn)
            finally:
                self._conn.execute("COMMIT")
        finally:
            self._lock.release()

    def complete_and_claim(
        self, task_id: int, node_id: str, epoch: int | None, result: Any, role: str, now: float
    ) -> tuple[Task, Task | None]:
        """One transaction: a worker's finish-then-next costs one commit, not two. (The
        write lock makes the shared claim statement exact here; PostgreSQL has its own
        single statement.)"""
        with self._write() as tx:
            done = self._complete_in(tx, task_id, node_id, epoch, result, now)
            nxt = self._claim_in(tx, node_id, role, now)
        return task_from_row(done), None if nxt is None else task_from_row(nxt)

    def ready_token(self) -> int:
        return self._ready.token()

    def wait_ready(self, token: Any, timeout: float) -> None:
        """Woken in-process at once; a task added by another process is seen at the
        next re-check (every ``SQLITE_WAIT_RECHECK`` seconds)."""
        self._ready.wait(token, min(timeout, SQLITE_WAIT_RECHECK))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _statements(script: str) -> Iterator[str]:
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            yield text
            buf = []
    if "".join(buf).strip():
        raise ValueError(f"incomplete SQL statement in migration: {''.join(buf)[:80]}")
