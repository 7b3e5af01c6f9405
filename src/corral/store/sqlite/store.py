"""The embedded store: one SQLite file in WAL mode (``SQLiteStore``).

Durability: ``synchronous=NORMAL`` (the default) loses nothing when any process
crashes; a power loss or OS crash can roll back the last transactions committed
before it (never corrupting the file). ``synchronous=FULL`` syncs every commit before
the call returns, sharing disk flushes among processes (``_SyncedCommits``).

Writers. corral's processes queue for the write lock on a lock file next to the
database (``<file>-lock``, ``flock``): a waiting writer spins briefly, then sleeps
between tries, for up to the busy timeout, instead of polling SQLite's lock on its
busy handler's schedule (see ``_WriterLock``).

Checkpoints. Copying the WAL back into the database file is done by a background
thread (``_Checkpointer``), not by the commit that happens to fill the WAL, so a
claim or a completion never pays for it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, cast

from corral import budgets, lifecycle, scoring
from corral.backoff import Backoff
from corral.defaults import (
    BUSY_TIMEOUT_SECONDS,
    SQLITE_CHECKPOINT_EVERY,
    SQLITE_WAIT_RECHECK,
    SQLITE_WAL_LIMIT_PAGES,
    SQLITE_WAL_RESTART_PAGES,
)
from corral.errors import ConflictError, InvalidInputError, LeaseError, StoreUnavailableError
from corral.model import Task
from corral.store import claimkeys, sqlusage
from corral.store.base import LockHolder, WouldBlock
from corral.store.queries import load_queries, migrations, refuse_newer
from corral.store.rows import TASK_COLUMNS as ROW_TASK_COLUMNS
from corral.store.rows import (
    TaskRow,
    as_task_row,
    dumps,
    finished_task,
    new_session_id,
    task_from_task_row,
    task_row,
    task_tail,
)
from corral.store.signal import WAKE_QUERIES, doorbell_for, signal_for
from corral.store.sqlbase import SQLStore
from corral.store.sqldb import check_role, dequeue, live, refuse
from corral.store.sqlite.checkpoint import _Checkpointer
from corral.store.sqlite.leader import MonitorLeader
from corral.store.sqlite.synced import _SyncedCommits
from corral.store.sqlite.usage import CompletionEvents
from corral.store.sqlite.writer import _WriterLock, fcntl

__all__ = ["TASK_COLUMNS", "SQLiteStore", "WouldBlock"]

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_QUERIES = load_queries("sqlite")
_CLAIM_TAKE = _QUERIES["claim_take"]
_TASK_COMPLETE = _QUERIES["task_complete"]
# The same without its RETURNING, for a task this store claimed (``_complete_in``): a
# RETURNING costs SQLite an ephemeral table, a third of the statement.
_TASK_COMPLETE_QUIET = _TASK_COMPLETE.removesuffix("RETURNING *").rstrip()
if _TASK_COMPLETE_QUIET == _TASK_COMPLETE:  # pragma: no cover - a queries.sql edit
    raise RuntimeError("task_complete must end with RETURNING *")
# A completion with usage: the task's sums in the same statement, and the report kept
# on the task's row (usage_last_*), which ``sqlusage.roll_up`` adds to its node's hour
# later: no statement more than a completion without, the same event and trigger work.
_TASK_COMPLETE_USAGE = _QUERIES["task_complete_usage"]
_TASK_COMPLETE_USAGE_QUIET = _TASK_COMPLETE_USAGE.removesuffix("RETURNING *").rstrip()
_CLAIMED_KEEP = 1024  # claimed task rows a store remembers for their completion


def _bookkeeping(name: str) -> str:
    """The TEMP trigger ``name`` of queries.sql as a connection creates it: SQLite takes
    no parameters in a trigger, so its rules' ``:now`` is the row's own time
    (``new.updated_at``, which the claim and the completion set to their ``:now``) and
    ``:stamp`` is written as its number."""
    sql = re.sub(r"^[ \t]*--.*\n?", "", _QUERIES[name], flags=re.MULTILINE)
    sql = re.sub(r":now\b", "new.updated_at", sql)
    sql = re.sub(r":stamp\b", repr(1 - lifecycle.STAMP_FRACTION), sql)
    if left := re.search(r"(?<![:\w]):[A-Za-z_]\w*", sql):  # pragma: no cover - an edit
        raise RuntimeError(f"{name} takes a parameter a trigger cannot have: {left[0]}")
    return sql


# The claim's and the completion's bookkeeping (queries.sql), created on every
# connection: a claim and a completion stay one statement each.
_BOOKKEEPING = tuple(
    _bookkeeping(n)
    for n in ("trigger_task_claimed", "trigger_task_completed", "trigger_task_woken")
)


class _Flag(threading.local):
    """A per-thread flag, off in every thread until set (``nowait()``)."""

    on = False


class _Tx:
    """A transaction's statements, run on the store's kept row cursor (a cursor made
    per statement costs more than a short statement's own work)."""

    __slots__ = ("_cur", "nested", "wake")

    def __init__(self, cur: sqlite3.Cursor, nested: bool = False) -> None:
        self._cur = cur
        self.nested = nested  # a savepoint of a group's transaction (SQLiteStore.group)
        self.wake = False  # a task may become pending: wake waiting claims on commit

    def one(self, name: str, **params: Any) -> Any:
        self.wake = self.wake or name in WAKE_QUERIES
        rows = self._cur.execute(_QUERIES[name], params).fetchall()
        return rows[0] if rows else None

    def all(self, name: str, **params: Any) -> list[Any]:
        return self._cur.execute(_QUERIES[name], params).fetchall()

    def run(self, name: str, **params: Any) -> int:
        self.wake = self.wake or name in WAKE_QUERIES
        return self._cur.execute(_QUERIES[name], params).rowcount


# ``SELECT * FROM tasks`` in table order (tests/integration/test_sqlite_store.py checks it): the
# shared leading columns, then SQLite's own.
TASK_COLUMNS = (*ROW_TASK_COLUMNS, "claimed_role")


def _task(values: Any, tail: tuple[int, ...]) -> Task:
    """The task of a whole tasks row (``TASK_COLUMNS`` first, ``rows.TASK_TAIL`` at
    ``tail``)."""
    return task_from_task_row(task_row(values, 0, tail))


# Held from a new database file's creation to the close of the descriptor that made it
# (``_create_private``), so no store of this process opens the file in between.
_CREATING = threading.Lock()


def _create_private(path: Path) -> None:
    """Create the database file, if missing, readable by its owner only: SQLite gives
    the WAL and shared-memory files the database's mode. An existing file keeps its
    mode; an unreadable one is left for SQLite to report.

    The file is opened here only when this call creates it (``O_EXCL``). SQLite's locks
    on it are POSIX locks, which closing *any* descriptor of the file in the process
    drops, the open connections' included: an open and close of an existing file here,
    while another store of the process had it open, once let another process's close
    delete the WAL that this process went on writing into (docs/core.md, "What a corral
    process must never do to its database file"). A file this call creates has no
    connection yet, and ``_CREATING`` keeps this process's other stores from opening it
    before its descriptor is closed."""
    with _CREATING, contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    return StoreUnavailableError(f"SQLite store unavailable: {exc}; retry the call")


def _raise_unavailable(exc: BaseException) -> None:
    """Raise ``StoreUnavailableError`` for SQLite's own failures inside a transaction
    (a full disk, an I/O error, a damaged file): the store's condition, not the
    call's; return for anything else (the caller re-raises it)."""
    if isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError:
        raise _unavailable(exc) from exc


class SQLiteStore(SQLStore):
    """One connection per store, shared by the process's threads under a lock.
    Open a new store in each process (never share one across ``fork``)."""

    inline_calls = True  # nowait() and group() below: corral serve's fast path

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float | str = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__()
        self._db.usage_tail = CompletionEvents()  # completions' usage on their tasks
        sync = str(synchronous).upper()
        if sync not in _SYNCHRONOUS:
            raise InvalidInputError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}", field="synchronous"
            )
        try:
            busy_timeout = float(busy_timeout)
        except (TypeError, ValueError):
            busy_timeout = -1.0
        if not 0 < busy_timeout < float("inf"):
            raise InvalidInputError(
                "busy_timeout must be a positive number of seconds", field="busy_timeout"
            )
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InvalidInputError(
                    f"cannot create the directory of the SQLite file {self.path}: "
                    f"{exc.strerror or exc}",
                    field="url",
                ) from None
            _create_private(self.path)
        self._lock = threading.RLock()
        self._keys_pruned = 0.0  # when this store last dropped expired claim keys
        self._claimed: dict[int, TaskRow] = {}  # task id -> its claim's row
        self._group: tuple[int, _Tx] | None = None  # (thread, transaction) of a group()
        self._nowait = _Flag()
        self._busy_timeout = busy_timeout
        self._ready = signal_for(path)
        self._bell = None if memory else doorbell_for(path, self._ready)
        self._leader = MonitorLeader(None if memory else self.path)
        synced = sync == "FULL" and not memory and fcntl is not None
        try:
            self._writer = _WriterLock(self.path, busy_timeout, synced)
        except OSError as exc:
            raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
        # FULL is a group commit (``_SyncedCommits``): SQLite itself runs at NORMAL.
        self._synced: _SyncedCommits | None = None
        if synced:
            try:
                self._synced = _SyncedCommits(self.path)
            except OSError as exc:
                self._writer.close()
                raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
            sync = "NORMAL"
        self._checkpoints = (
            None
            if memory
            else _Checkpointer(
                str(path),
                sync,
                SQLITE_CHECKPOINT_EVERY,
                SQLITE_WAL_RESTART_PAGES if synced else 0,
            )
        )
        try:
            # SQLite's busy handler is off (timeout=0): waits are ours (``_retrying``).
            self._conn = sqlite3.connect(
                str(path), timeout=0, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._rows = self._conn.cursor()  # _Tx's statements: sqlite3.Row rows
            self._hot = self._conn.cursor()  # the hot statements' rows: plain tuples
            self._hot.row_factory = None
            self._retrying("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={sync}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_LIMIT_PAGES}")
            # A task made pending by a trigger (a dependency's completion) wakes
            # waiting claims at the commit (trigger_task_woken).
            self._woke = False
            self._migrate()
            # Where the columns added after TASK_COLUMNS are (rows.task_row's tail).
            self._tail = task_tail([r[1] for r in self._conn.execute("PRAGMA table_info(tasks)")])
            self._conn.create_function("corral_woken", 0, self._note_woken)
            self._claims: list[tuple[Any, ...]] = []
            self._conn.create_function("corral_claimed", len(TaskRow._fields), self._note_claimed)
            for sql in _BOOKKEEPING:
                self._retrying(sql)
        except (sqlite3.Error, ConflictError) as exc:
            self._writer.close()
            if self._synced is not None:
                self._synced.close()
            if isinstance(exc, ConflictError):
                self._conn.close()
                raise
            raise _unavailable(exc) from exc

    def _note_woken(self) -> None:
        """``corral_woken()``: a statement of the open transaction made a task pending
        by a trigger; its commit wakes waiting claims."""
        self._woke = True

    def _note_claimed(self, *row: Any) -> None:
        """``corral_claimed(...)``: the row claim_take claimed, handed over by its
        trigger (``TaskRow``'s columns, in its order)."""
        self._claims.append(row)

    def _retrying(self, sql: str) -> None:
        """Run ``sql``, waiting out a busy database in short sleeps.

        corral's own writers queue on ``_WriterLock`` and rarely get here; this waits
        out the rest (another program's writer, a checkpoint taking the WAL's recovery
        lock). SQLite's own busy handler sleeps 1, 2, 5, 10 ... ms between tries, far
        longer than a write transaction takes, so corral waits itself: 100 us
        doubling to 3 ms, each scaled by a jitter in [0.5, 1] (``corral.backoff``), up
        to the busy timeout; then ``StoreUnavailableError``."""
        deadline = None
        pauses = Backoff(base=0.0001, cap=0.003, jitter=0.5)
        while True:
            try:
                self._conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise _unavailable(exc) from exc
                if self._nowait.on:
                    raise WouldBlock("another process holds the database") from None
                now = time.monotonic()
                deadline = deadline or now + self._busy_timeout
                if now > deadline:
                    raise _unavailable(exc) from exc
            time.sleep(pauses.next())

    def write_lock_holder(self) -> LockHolder | None:
        return self._writer.holder()

    def try_lead(self, holder: str) -> bool:
        """One monitor per database file leads: the holder of an ``flock`` on
        ``<file>-monitor`` (``MonitorLeader``)."""
        return self._leader.try_lead(holder)

    def write_lock_timeouts(self) -> int:
        return self._writer.timeouts

    @contextmanager
    def nowait(self) -> Iterator[None]:
        """Transactions started in this block, on this thread, never wait: when
        another thread or process holds the store or the database is busy, they
        raise ``WouldBlock`` before doing anything. An event loop runs short
        operations inline this way and hops to a thread only on contention (corral
        serve)."""
        self._nowait.on = True
        try:
            yield
        finally:
            self._nowait.on = False

    def _acquire(self) -> bool:
        """Take the store (threads); whether this thread is in ``nowait()``."""
        nowait = self._nowait.on
        if not self._lock.acquire(blocking=not nowait):
            raise WouldBlock("the store is busy in another thread")
        return nowait

    def _migrate(self) -> None:
        self._retrying("PRAGMA user_version")
        current = self._conn.execute("PRAGMA user_version").fetchone()[0]
        refuse_newer(current, "sqlite", f"sqlite:///{self.path}")
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

    # --- write transactions -----------------------------------------------------------
    def _begin(self) -> _Tx:
        """Take the store (threads), the writer lock (processes), then SQLite's write
        lock; in a ``group``, a savepoint of its transaction. Pair with ``_end``."""
        if self._group is not None and self._group[0] == threading.get_ident():
            self._lock.acquire()  # held by this thread already
            try:
                if not self._conn.in_transaction:
                    # SQLite rolled the group's transaction back after an error (a full
                    # disk, say): a savepoint now would be a transaction of its own,
                    # committed at once, and the group's end would report it failed.
                    raise StoreUnavailableError(
                        "SQLite store unavailable: an earlier call's error rolled this"
                        " group's transaction back; retry the call"
                    )
                self._hot.execute("SAVEPOINT corral_call")
            except BaseException:
                self._lock.release()
                raise
            return _Tx(self._rows, nested=True)
        nowait = self._acquire()
        try:
            if not self._writer.acquire(blocking=not nowait):
                raise WouldBlock("another process is writing")
            try:
                try:
                    self._hot.execute("BEGIN IMMEDIATE")  # a kept cursor: none made per call
                except sqlite3.OperationalError:  # another program writes: wait it out
                    self._retrying("BEGIN IMMEDIATE")
            except BaseException:
                self._writer.release()
                raise
        except BaseException:
            self._lock.release()
            raise
        return _Tx(self._rows)

    def _end(self, tx: _Tx, commit: bool) -> None:
        if tx.nested:
            try:
                if commit:
                    try:
                        self._hot.execute("RELEASE corral_call")
                    except sqlite3.Error as exc:
                        raise _unavailable(exc) from exc
                    if (tx.wake or self._woke) and self._group is not None:
                        self._group[1].wake = True
                    self._woke = False
                else:
                    self._claimed.clear()
                    self._woke = False
                    self._rollback("ROLLBACK TO corral_call", "RELEASE corral_call")
            finally:
                self._lock.release()
            return
        number = None
        try:
            if commit:
                try:
                    if not self._conn.in_transaction:  # a group's, rolled back by SQLite
                        raise sqlite3.OperationalError(
                            "an error in the transaction made SQLite roll it back"
                        )
                    self._hot.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._claimed.clear()  # it may hold a claim that did not happen
                    self._rollback("ROLLBACK")
                    raise _unavailable(exc) from exc
                if self._synced is not None:
                    number = self._synced.committed()
            else:
                self._claimed.clear()
                self._rollback("ROLLBACK")
        finally:
            woke, self._woke = self._woke, False
            self._writer.release()
            if commit and self._checkpoints is not None:
                self._checkpoints.committed()
            self._lock.release()
        if number is not None:
            try:
                self._synced.wait_synced(  # type: ignore[union-attr]
                    number, patient=not self._nowait.on
                )
            except OSError as exc:
                raise StoreUnavailableError(
                    f"SQLite store unavailable: the commit was made but syncing it to"
                    f" disk failed ({exc}); it may be lost on a power failure"
                ) from exc
        if commit and (tx.wake or woke):
            self._ready.bump()
            if self._bell is not None:
                self._bell.ring()

    def _abort(self, tx: _Tx, exc: BaseException) -> None:
        """End ``tx`` undone after ``exc``; raise ``StoreUnavailableError`` instead of
        SQLite's own failures (the caller re-raises anything else)."""
        self._end(tx, commit=False)
        _raise_unavailable(exc)

    def _rollback(self, *statements: str) -> None:
        """Undo the transaction (or the call's savepoint) after an error, unless SQLite
        has rolled it back itself (it may, on a full disk or an I/O error). Never
        raises: the error being handled is the one to report."""
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                for statement in statements:
                    self._conn.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        tx = self._begin()
        try:
            yield tx
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)

    @contextmanager
    def group(self) -> Iterator[None]:
        """Write transactions started in this block, on this thread, share one commit.

        Each runs as a savepoint of the block's transaction, so a call that fails
        undoes only its own writes, and the block commits once at its end (a failed
        commit raises, and none of the block's writes is kept). Whoever answers for
        the calls must do so after the block, so every answer is durable. Reads in
        the block see its writes. Under ``nowait()`` the block raises ``WouldBlock``
        at its start, having done nothing, if the store or the database is busy.
        ``corral serve`` runs the short calls of one event-loop turn this way."""
        if self._group is not None and self._group[0] == threading.get_ident():
            raise RuntimeError("SQLiteStore.group() does not nest")
        tx = self._begin()
        self._group = (threading.get_ident(), tx)
        try:
            yield
        except BaseException as exc:
            self._group = None
            self._abort(tx, exc)
            raise
        self._group = None
        self._end(tx, commit=True)

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        if self._group is not None and self._group[0] == threading.get_ident():
            with self._lock:  # inside the group's transaction, which sees its writes
                yield _Tx(self._rows)
            return
        self._acquire()
        try:
            self._hot.execute("BEGIN")
            try:
                # Take the read snapshot now, where a busy database can be waited out.
                self._retrying("SELECT 1 FROM meta LIMIT 1")
                yield _Tx(self._rows)
            except BaseException as exc:
                self._rollback("ROLLBACK")
                _raise_unavailable(exc)
                raise
            self._hot.execute("COMMIT")
        finally:
            self._lock.release()

    # --- the hot path: a claim and a completion are one statement each ----------------
    # Their bookkeeping (the holder's activity stamp, the event, a claim's role head) is
    # in their TEMP triggers (``_BOOKKEEPING``), so the write lock is held for three
    # round trips from Python, like the bare loop's: BEGIN, UPDATE, COMMIT. (A task matching several
    # roles adds a DELETE of its role heads.) The statements run on the connection
    # directly, without ``_Tx``.
    def _claim_in(
        self, tx: _Tx, node_id: str, role: str, now: float, session_id: str
    ) -> TaskRow | None:
        """The claim inside a write transaction; the task's row, or None. The session
        id a first claim gives its task is made by the caller, before the write lock."""
        claims = self._claims
        claims.clear()
        self._hot.execute(
            _CLAIM_TAKE,
            {
                "role": role,
                "node_id": node_id,
                "now": now,
                "bonus": scoring.ROLE_BONUS_SECONDS,
                "session_id": session_id,
            },
        )
        if not claims:  # nothing pending, or the node is not live (which raises)
            node = tx.one("node_claim_state", id=node_id) or live(tx, node_id)
            if lifecycle.stamp_due(node["dead_at"], node["live_window"], now):
                tx.run("node_touch", id=node_id, now=now)
            return None
        row = as_task_row(claims.pop())  # handed over by claim_take's trigger
        if " " in row.roles:  # a task matching several roles: the claim drops only one head
            dequeue(tx, row.id, row.sort_key, row.created_at, row.roles)
        claimed = self._claimed
        if len(claimed) >= _CLAIMED_KEEP:
            del claimed[next(iter(claimed))]
        claimed[row.id] = row
        return row

    def _complete_in(
        self,
        tx: _Tx,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        now: float,
        usage: dict[str, Any] | None = None,
    ) -> Callable[[], Task]:
        """The completion inside a write transaction (or LeaseError), with ``usage``
        recorded by the completion's statement: on the task's row, its sums and its
        completion's report for its node's hour (``sqlusage.roll_up``; with budgets set,
        rolled up now and the budgets it crosses announced).

        A task this store claimed, completed with its epoch, is unchanged since its
        claim but for what the completion sets (only a claim changes an in-progress
        task, and a claim changes its epoch), so its record is built from the claim's
        row and the statement skips its RETURNING.

        It returns what makes the completed task's record, called once the write lock
        is let go: the lock is held for the statements alone, not for building records
        (with several processes, every other writer waits out the holder's time)."""
        text = None if result is None else dumps(result)
        if usage is None:
            params = {"id": task_id, "node_id": node_id, "epoch": epoch, "result": text, "now": now}
            quiet, full = _TASK_COMPLETE_QUIET, _TASK_COMPLETE
        else:  # and the report's amounts as stored (sqlusage.add_params')
            get = usage.get
            params = {
                "id": task_id,
                "node_id": node_id,
                "epoch": epoch,
                "result": text,
                "now": now,
                "input_tokens": get("input_tokens", 0),
                "output_tokens": get("output_tokens", 0),
                "cost_micros": round(get("cost_usd", 0.0) * budgets.MICROS),
            }
            quiet, full = _TASK_COMPLETE_USAGE_QUIET, _TASK_COMPLETE_USAGE
        held = self._claimed.pop(task_id, None)
        if held is not None and epoch is not None and held.epoch == epoch:
            if self._hot.execute(quiet, params).rowcount != 1:
                refuse(tx, task_id, node_id, epoch)
            done = partial(finished_task, held, text, now)
        else:
            rows = self._hot.execute(full, params).fetchall()
            if not rows:
                refuse(tx, task_id, node_id, epoch)
            done = partial(_task, rows[0], self._tail)
        if usage is not None:
            sqlusage.after_completion(self._db, tx, node_id, now)
        return done

    def _done_with(self, tx: _Tx, node_id: str, task_id: int, now: float) -> None:
        """After a completion that claimed nothing: a working node that holds no
        other task becomes idle (lifecycle.status_after_finishing, encoded in the
        query; the completion's trigger did the rest of node_done_with)."""
        tx.run("node_now_idle", node_id=node_id, id=task_id, now=now)

    def claim(self, node_id: str, role: str, now: float, *, key: str | None = None) -> Task | None:
        sqlusage.budget_refusal(self._db, node_id, now)  # no read without budgets
        session_id = new_session_id()  # made before the write lock, not under it
        tx = self._begin()
        try:
            check_role(self._db, tx, role)
            row = self._claim_in(tx, node_id, role, now, session_id)
            # (A claim that took nothing records nothing: sent again, it is a new try.)
            kept = key is None or row is None or self._keep_key(tx, node_id, key, row, now)
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        if not kept:  # sent again (tx undone): what the first one took
            return self._repeated(node_id, cast(str, key), None)[1]
        self._end(tx, commit=True)
        return None if row is None else task_from_task_row(row)  # with the lock let go

    def _keep_key(
        self,
        tx: _Tx,
        node_id: str,
        key: str,
        taken: TaskRow | None,
        now: float,
        done_id: Any = None,
    ) -> bool:
        """Record in ``tx`` (the claim's transaction) that the claim sent with ``key``
        took ``taken`` (and finished ``done_id``), dropping expired keys at most every
        ``claimkeys.PRUNE_EVERY``; False, with ``tx`` undone, when the key is recorded
        already (its integrity error): the claim was sent again."""
        prune = now - self._keys_pruned >= claimkeys.PRUNE_EVERY
        try:
            if prune:
                tx.run("claim_keys_prune", before=now - claimkeys.CLAIM_KEY_SECONDS)
            tx.run(
                "claim_key_put",
                node_id=node_id,
                key=key,
                task_id=None if taken is None else taken.id,
                epoch=None if taken is None else taken.epoch,
                done_id=done_id,
                now=now,
            )
        except sqlite3.IntegrityError:
            self._end(tx, commit=False)
            return False
        if prune:
            self._keys_pruned = now
        return True

    def _repeated(
        self, node_id: str, key: str, refused: BaseException | None
    ) -> tuple[Task | None, Task | None]:
        """The answer of the claim first sent with ``key`` (``claimkeys.answer``);
        ``refused`` (a completion's refusal) when no claim was made with it."""
        with self._read() as tx:
            found = claimkeys.answer(tx, node_id, key)
        if found is None:
            if refused is not None:
                raise refused
            raise StoreUnavailableError("the claim's key vanished; retry")  # pragma: no cover
        return found

    def complete(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Task:
        tx = self._begin()
        try:
            done = self._complete_in(tx, task_id, node_id, epoch, result, now, usage)
            self._done_with(tx, node_id, task_id, now)
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)
        return done()

    def complete_and_claim(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        role: str,
        now: float,
        *,
        key: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> tuple[Task, Task | None]:
        """One transaction: a worker's finish-then-next costs one commit, not two.
        With ``key``: recorded with the claim, or, sent again (the completion refused,
        or the key recorded), the answer the first one had. A node covered by a spent
        budget completes and claims nothing."""
        spent = self.budget_spent(node_id, now)  # no read without budgets
        session_id = new_session_id()  # made before the write lock, not under it
        tx = self._begin()
        refused: LeaseError | None = None
        try:
            check_role(self._db, tx, role)
            done = self._complete_in(tx, task_id, node_id, epoch, result, now, usage)
            nxt = None if spent else self._claim_in(tx, node_id, role, now, session_id)
            if nxt is None:  # with a task claimed the node stays working: no write
                self._done_with(tx, node_id, task_id, now)
            kept = key is None or self._keep_key(tx, node_id, key, nxt, now, task_id)
        except LeaseError as exc:
            self._abort(tx, exc)
            if key is None:
                raise
            kept, refused = False, exc  # perhaps sent again: the completion is done
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        if not kept:  # sent again (tx undone): what the first one did
            first, held = self._repeated(node_id, cast(str, key), refused)
            return first or self.get_task(task_id), held
        self._end(tx, commit=True)
        # The records are built with the lock let go (``_complete_in``).
        return done(), None if nxt is None else task_from_task_row(nxt)

    def ready_token(self) -> int:
        # Listen before the claim that takes this token: a task another process adds
        # after that claim rings this process.
        if self._bell is not None:
            self._bell.listen()
        return self._ready.token()

    def wait_ready(self, token: Any, timeout: float) -> None:
        """Woken at once by this process's commits and, through the ``Doorbell``, by
        other corral processes'; a task added by another program is seen at the next
        re-check (every ``SQLITE_WAIT_RECHECK`` seconds)."""
        self._ready.wait(token, min(timeout, SQLITE_WAIT_RECHECK))

    def wake_waiters(self) -> None:
        self._ready.bump()

    def close_listeners(self) -> None:
        if self._bell is not None:
            self._bell.close()

    def close(self) -> None:
        self._leader.close()
        if self._checkpoints is not None:
            self._checkpoints.close()
        with self._lock:
            self._conn.close()
            self._writer.close()
            if self._synced is not None:
                self._synced.close()


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
