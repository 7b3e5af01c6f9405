"""The shared store: PostgreSQL through psycopg 3 and a psycopg-pool pool.

Any number of coordinators, monitors and workers on different hosts open the same
database. Transactions run at READ COMMITTED with row locks where the shared SQL
needs them (``*_for_update``, ``lock_registry``); the hot operations (claim,
complete, bulk add) are single statements. Driver errors become
``StoreUnavailableError`` here, at the boundary: a lost connection, a restart, a
statement or pool timeout is a clear retryable error, never a hang.

Extra URL parameters (removed before connecting): ``pool_size``, ``statement_timeout``,
``connect_timeout`` and ``idle_in_transaction_timeout`` (seconds). Keyword arguments of
the same names override them.

A session of corral's never waits between the statements of a transaction but for
the next statement (no user code, no I/O inside), so the server ends any session left
idle inside a transaction longer than ``idle_in_transaction_timeout`` (default 1 s,
``IDLE_IN_TRANSACTION_TIMEOUT``): a client stopped mid-transaction (SIGSTOP, a
debugger, a paused VM) releases its row locks within that bound, below the smallest
liveness window in practice (3 s for a 1 s heartbeat), and the monitor skips locked
rows meanwhile (``nodes_dead`` ... ``SKIP LOCKED``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from corral import lifecycle, scoring
from corral.backoff import Backoff
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.model import Event, Task
from corral.store.base import TaskSpec
from corral.store.queries import load_queries, migrations
from corral.store.rows import _dumps, task_from_tuple
from corral.store.signal import WAKE_QUERIES, ReadySignal
from corral.store.sqlbase import SQLStore, event_from_row, task_from_row

__all__ = ["PostgresStore"]

log = logging.getLogger("corral.store.postgres")

# psycopg-pool warns "discarding closed connection" for each session the server or the
# network dropped: the caller already gets StoreUnavailableError for it, so a library
# user without logging set up would see the same outage twice, as stray stderr lines.
# Only its errors are kept, unless the application set that logger's level itself.
_POOL_LOG = logging.getLogger("psycopg.pool")
if _POOL_LOG.level == logging.NOTSET:
    _POOL_LOG.setLevel(logging.ERROR)

_QUERIES = load_queries("postgres", pyformat=True)
_CHANNEL = "corral_ready"
# Advisory lock keys ("corral" + a number); lock_registry in queries.sql uses ...01.
_MIGRATE_KEY = 7165071367756054530
_LEADER_KEY = 7165071367756054531
_OPTIONS = ("pool_size", "statement_timeout", "connect_timeout", "idle_in_transaction_timeout")
# Seconds a session may sit idle inside a transaction before the server ends it (and
# its locks): below the smallest liveness window a cluster should use (3 s).
IDLE_IN_TRANSACTION_TIMEOUT = 1.0
_STAMP = 1 - lifecycle.STAMP_FRACTION  # node rows re-stamped after a tenth of the window
# The tasks table's columns in table order (schema.sql): what RETURNING * and take.*
# give the hot statements, read by position (tests/test_postgres_store.py checks).
_task = task_from_tuple  # the task whose TASK_COLUMNS start at row[i]
_CLAIMED_KEEP = 1024  # claimed task rows a store remembers for their completion


def _finished(held: tuple[Any, ...], result: str | None, now: float) -> Task:
    """A remembered claim row (``_held``) as its completion leaves it (complete_full's
    SET: status done, finished_at and updated_at now, the result, no error)."""
    return _task((*held[:6], "done", *held[7:14], now, now, result, None))


def _completion(
    task_id: int, node_id: str, epoch: int | None, result: str | None, now: float
) -> dict[str, Any]:
    """The parameters every completion statement takes."""
    return {
        "id": task_id,
        "node_id": node_id,
        "epoch": epoch,
        "result": result,
        "now": now,
        "stamp": _STAMP,
    }


class _Conn(psycopg.Connection[Any]):
    """A pooled connection that keeps one tuple cursor for the hot statements: a
    kept cursor reuses its parameter dumpers and column loaders from one execute to
    the next, where ``conn.execute`` builds a new cursor and looks them up again."""

    _hot: psycopg.Cursor[tuple[Any, ...]] | None = None

    def hot(self) -> psycopg.Cursor[tuple[Any, ...]]:
        cur = self._hot
        if cur is None or cur.closed:
            cur = self._hot = self.cursor(row_factory=tuple_row)
        return cur


class _Tx:
    __slots__ = ("_conn", "wake")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.wake = False  # a task may become pending: NOTIFY before commit

    def one(self, name: str, **params: Any) -> Any:
        self.wake = self.wake or name in WAKE_QUERIES
        cur = self._conn.execute(_QUERIES[name], params)
        return cur.fetchone() if cur.description else None

    def all(self, name: str, **params: Any) -> list[Any]:
        return self._conn.execute(_QUERIES[name], params).fetchall()

    def run(self, name: str, **params: Any) -> int:
        self.wake = self.wake or name in WAKE_QUERIES
        return self._conn.execute(_QUERIES[name], params).rowcount


def _unavailable(
    exc: BaseException, what: str = "PostgreSQL store unavailable"
) -> StoreUnavailableError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreUnavailableError(
        f"{what}: {detail}; retry the call (a write in flight may or may not have been applied)"
    )


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    ours = {k: v for k, v in query if k in _OPTIONS}
    rest = [(k, v) for k, v in query if k not in _OPTIONS]
    scheme = "postgresql"
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), ours


def _seconds(value: Any, field: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        raise InvalidInputError(f"{field} must be a positive number of seconds", field=field)
    return seconds


class PostgresStore(SQLStore):
    """A pool of connections per store (safe to share between threads). Open a new
    store in each process (never share one across ``fork``)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int | str | None = None,
        statement_timeout: float | str | None = None,
        connect_timeout: float | str | None = None,
        idle_in_transaction_timeout: float | str | None = None,
    ) -> None:
        super().__init__()
        conninfo, opts = _split_url(url)
        size = int(pool_size if pool_size is not None else opts.get("pool_size", 5))
        if size < 1:
            raise InvalidInputError("pool_size must be at least 1", field="pool_size")
        self._statement_timeout = _seconds(
            statement_timeout or opts.get("statement_timeout", 30), "statement_timeout"
        )
        self._connect_timeout = _seconds(
            connect_timeout or opts.get("connect_timeout", 5), "connect_timeout"
        )
        self._idle_in_transaction_timeout = _seconds(
            idle_in_transaction_timeout
            or opts.get("idle_in_transaction_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
            "idle_in_transaction_timeout",
        )
        self._conninfo = conninfo
        self._conn_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(self._connect_timeout)),
            "options": f"-c statement_timeout={int(self._statement_timeout * 1000)}"
            " -c idle_in_transaction_session_timeout="
            f"{max(1, round(self._idle_in_transaction_timeout * 1000))}",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 2,
            "keepalives_count": 3,
        }
        self._pool: ConnectionPool[_Conn] = ConnectionPool(
            conninfo,
            connection_class=_Conn,
            min_size=1,
            max_size=size,
            kwargs={**self._conn_kwargs, "row_factory": dict_row},
            timeout=self._connect_timeout,
            name="corral",
            open=False,
        )
        self._ready = ReadySignal()
        self._analyzed = False  # the claim's tables have statistics (_analyze_if_never)
        # Claimed task rows by id (their completion's Task), and per node whether its
        # last claim left it working without a current task (the lean statements).
        self._claimed: dict[int, tuple[Any, ...]] = {}
        self._lean: dict[str, bool] = {}
        self._closed = False
        self._listen_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._lead_lock = threading.Lock()
        self._lead_conn: psycopg.Connection[Any] | None = None
        self._leading = False
        try:
            self._pool.open(wait=True, timeout=self._connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise _unavailable(exc, f"cannot reach PostgreSQL at {_safe(conninfo)}") from exc
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise

    # --- connections ------------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection(timeout=self._connect_timeout) as conn:
                yield conn
        except PoolTimeout as exc:
            raise _unavailable(exc, "no PostgreSQL connection available") from exc
        except psycopg.OperationalError as exc:
            self._pool.check()  # drop the other connections the outage broke
            raise _unavailable(exc) from exc

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[_Tx]:
        with self._connection() as conn:
            conn.execute(begin)
            tx = _Tx(conn)
            try:
                yield tx
                if tx.wake:
                    conn.execute(f"NOTIFY {_CHANNEL}")
            except BaseException:
                if not conn.broken:
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _write(self) -> Any:
        return self._transaction("BEGIN")

    def _read(self) -> Any:
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _migrate(self) -> None:
        with self._connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", [_MIGRATE_KEY])
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS corral_migrations (version integer PRIMARY KEY,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                done = {r["version"] for r in conn.execute("SELECT version FROM corral_migrations")}
                for version, sql in migrations("postgres"):
                    if version in done:
                        continue
                    with conn.transaction():
                        conn.execute(sql)
                        conn.execute(
                            "INSERT INTO corral_migrations (version) VALUES (%s)", [version]
                        )
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", [_MIGRATE_KEY])

    def _hot(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A hot statement in its own transaction (autocommit): one round trip, on the
        connection's kept cursor, rows as tuples. (``_connection``'s errors, without
        its context managers: the pool's ``connection()`` adds a transaction block
        that autocommit does not need.)"""
        try:
            conn = self._pool.getconn(timeout=self._connect_timeout)
        except PoolTimeout as exc:
            raise _unavailable(exc, "no PostgreSQL connection available") from exc
        try:
            return conn.hot().execute(_QUERIES[name], params).fetchall()
        except psycopg.OperationalError as exc:
            broken = exc
        finally:
            self._pool.putconn(conn)
        self._pool.check()  # drop the other connections the outage broke
        raise _unavailable(broken) from broken

    # --- hot operations -----------------------------------------------------------------
    def _cached_settings(self, refresh: bool = False) -> tuple[Any, Any]:
        if refresh or self._settings_cache is None:
            self._settings_cache = None
            self.settings()
        assert self._settings_cache is not None
        return self._settings_cache

    def _settings_for(self, role: str, refresh: bool = False) -> Any:
        """The cached settings version, once ``role`` is known (re-read if it is not)."""
        version, settings = self._cached_settings(refresh)
        if role not in settings.roles and not refresh:
            version, settings = self._cached_settings(True)
        if role not in settings.roles:
            raise InvalidInputError(
                f"role must be one of {', '.join(settings.roles)}; got {role!r:.40}",
                field="role",
            )
        return version

    def _remember(self, row: tuple[Any, ...], i: int) -> None:
        """Keep a claimed task's row (its ``TASK_COLUMNS`` from ``row[i]``) for its
        completion (``_held``)."""
        claimed = self._claimed
        if len(claimed) >= _CLAIMED_KEEP:
            with suppress(KeyError, RuntimeError, StopIteration):
                del claimed[next(iter(claimed))]
        claimed[row[i]] = row[i : i + 18]

    def _set_lean(self, node_id: str) -> None:
        lean = self._lean
        if len(lean) >= _CLAIMED_KEEP and node_id not in lean:
            lean.clear()  # a hint only: a node left out takes the full statement once
        lean[node_id] = True

    def _held(self, task_id: int, epoch: int | None) -> tuple[Any, ...] | None:
        """The row of ``task_id`` as this store's claim at ``epoch`` returned it, if
        it is remembered. Only a claim changes an in-progress task's columns but for
        its completion or release, and every claim changes its epoch: a completion at
        this epoch finds the task as that claim left it."""
        held = self._claimed.pop(task_id, None)
        if held is None or epoch is None or held[8] != epoch:
            return None
        return held

    def claim(self, node_id: str, role: str, now: float) -> Task | None:
        refresh = False
        lean = self._lean.get(node_id, False)
        while True:
            params = {
                "node_id": node_id,
                "role": role,
                "now": now,
                "bonus": scoring.ROLE_BONUS_SECONDS,
                "settings_version": self._settings_for(role, refresh),
                "stamp": _STAMP,
                "role_json": _dumps(role),
            }
            if lean:
                row = self._hot("claim_lean", params)[0]
                if row[0] and not row[1]:  # the node needs its update: the full claim
                    lean = self._lean[node_id] = False
                    continue
                i = 2
            else:
                row = self._hot("claim_full", params)[0]
                i = 1
            fresh = row[0]
            if fresh is None:  # no live node
                with self._read() as tx:
                    self._live(tx, node_id)  # raises NotFoundError
            if fresh:
                if row[i] is None:
                    return None
                if not lean:  # the node is now working without a current task
                    self._set_lean(node_id)
                self._remember(row, i)
                return _task(row, i)
            refresh = True  # the settings changed under us: re-check the role, retry

    def complete(
        self, task_id: int, node_id: str, epoch: int | None, result: Any, now: float
    ) -> Task:
        text = None if result is None else _dumps(result)
        params = _completion(task_id, node_id, epoch, text, now)
        held = self._held(task_id, epoch)
        if held is not None:
            lean, done = self._hot("complete_lean_quiet", params)[0]
            if lean:
                if done is None:
                    with self._read() as tx:
                        self._refuse(tx, task_id, node_id, epoch)  # raises
                return _finished(held, text, now)
        rows = self._hot("complete_full", params)
        if not rows:
            with self._read() as tx:
                self._refuse(tx, task_id, node_id, epoch)  # raises
        return _task(rows[0])

    def complete_and_claim(
        self, task_id: int, node_id: str, epoch: int | None, result: Any, role: str, now: float
    ) -> tuple[Task, Task | None]:
        """One statement, one commit: a worker's finish-then-next costs one round trip."""
        version = self._settings_for(role)  # bad input changes nothing
        text = None if result is None else _dumps(result)
        params = {
            **_completion(task_id, node_id, epoch, text, now),
            "role": role,
            "bonus": scoring.ROLE_BONUS_SECONDS,
            "settings_version": version,
            "role_json": _dumps(role),
        }
        held = self._held(task_id, epoch)
        if held is not None and self._lean.get(node_id, False):
            row = self._hot("complete_claim_lean_quiet", params)[0]
            fresh, lean = row[0], row[1]
            if lean:
                if not row[2]:  # not finished
                    with self._read() as tx:
                        self._refuse(tx, task_id, node_id, epoch)  # raises
                done = _finished(held, text, now)
                if not fresh:
                    return done, self.claim(node_id, role, now)  # the settings changed
                if row[3] is None:
                    return done, None
                self._remember(row, 3)
                return done, _task(row, 3)
            self._lean[node_id] = False  # the node needs its update: the full statement
        rows = self._hot("complete_claim_full", params)
        if not rows:
            with self._read() as tx:
                self._refuse(tx, task_id, node_id, epoch)  # raises
        parts = {r[1]: r for r in rows}  # (fresh, part, task columns...)
        done = _task(parts["done"], 2)
        if "next" in parts:
            self._set_lean(node_id)  # working, without a current task
            self._remember(parts["next"], 2)
            return done, _task(parts["next"], 2)
        if parts["done"][0]:
            return done, None
        return done, self.claim(node_id, role, now)  # the settings changed: claim anew

    def add_tasks(self, specs: list[TaskSpec], now: float) -> list[Task]:
        if not specs:
            return []
        # The roles are matched before the transaction (no idle time inside it), with
        # the cached settings; again inside only if the settings changed meanwhile.
        known = self._cached_settings()[1]
        roles = _match_roles(specs, known)
        keys = [scoring.sort_key(sp.priority, now) for sp in specs]
        with self._write() as tx:
            s = self._settings_in(tx)
            if s.role_keywords != known.role_keywords:
                roles = _match_roles(specs, s)
            ids = sorted(r["id"] for r in tx.all("task_ids_next", n=len(specs)))
            rows = tx.all(
                "tasks_insert_many",
                ids=ids,
                titles=[sp.title for sp in specs],
                descriptions=[sp.description for sp in specs],
                priorities=[sp.priority for sp in specs],
                explicit_roles=[sp.role for sp in specs],
                roles=roles,
                max_attempts=[sp.max_attempts or s.max_attempts for sp in specs],
                sort_keys=keys,
                now=now,
            )
            heads = [
                (r, k, i) for i, k, rs in zip(ids, keys, roles, strict=True) for r in rs.split()
            ]
            if heads:
                tx.run(
                    "ready_insert_many",
                    roles=[h[0] for h in heads],
                    sort_keys=[h[1] for h in heads],
                    created_ats=[now] * len(heads),
                    task_ids=[h[2] for h in heads],
                )
            tx.run(
                "events_insert_many",
                now=now,
                kind="task_added",
                task_ids=ids,
                datas=[
                    _dumps({"priority": sp.priority, "roles": rs.split()})
                    for sp, rs in zip(specs, roles, strict=True)
                ],
            )
            tx.wake = True
        if not self._analyzed:
            self._analyze_if_never()
        return [task_from_row(r) for r in sorted(rows, key=lambda r: r["id"])]

    def _analyze_if_never(self) -> None:
        """``ANALYZE`` the claim's tables if they never were, once per store.

        Until autovacuum's first ``ANALYZE`` (up to a minute after the first tasks),
        the planner has no statistics, and a claim's cached plan can join the role
        heads against every pending task: O(pending) per claim until the statistics
        arrive. ``ANALYZE`` blocks no reads or writes; cached plans are replanned."""
        with self._connection() as conn:
            row = conn.execute(_QUERIES["claim_tables_unanalyzed"]).fetchone()
            if row and row["n"]:
                conn.execute(_QUERIES["claim_tables_analyze"])
        self._analyzed = True

    def _events_after(self, tx: Any, start: Any) -> list[Event]:
        """The events this transaction wrote (the monitor's duties report them)."""
        return [event_from_row(r) for r in tx.all("events_mine")]

    # --- waiting claims (LISTEN/NOTIFY) ---------------------------------------------
    def ready_token(self) -> int:
        self._ensure_listener()
        return self._ready.token()

    def wait_ready(self, token: Any, timeout: float) -> None:
        self._ready.wait(token, timeout)

    def _ensure_listener(self) -> None:
        with self._listen_lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = threading.Thread(
                    target=self._listen, name="corral-pg-listen", daemon=True
                )
                self._listener.start()
        if not self._listening.wait(self._connect_timeout):
            raise StoreUnavailableError(
                "PostgreSQL store unavailable: cannot LISTEN for new tasks; retry the call"
            )

    def _listen(self) -> None:
        backoff = Backoff(base=0.1, cap=5.0)  # 0.1 s doubling to 5 s
        while not self._closed:
            try:
                with psycopg.connect(self._conninfo, **self._conn_kwargs) as conn:
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
                log.warning("LISTEN connection lost (%s); reconnecting", exc,
                            extra={"action": "listen_retry"})  # fmt: skip
                time.sleep(backoff.next())

    # --- leader election ----------------------------------------------------------------
    def try_lead(self, holder: str) -> bool:
        """The monitor leader holds a session advisory lock on a dedicated connection.
        When its process dies or its connection drops, the server releases the lock and
        the next ``try_lead`` of another monitor takes it."""
        with self._lead_lock:
            try:
                conn = self._lead_conn
                if conn is None or conn.closed:
                    self._leading = False
                    conn = self._lead_conn = psycopg.connect(
                        self._conninfo,
                        **{**self._conn_kwargs, "application_name": f"corral monitor {holder}"},
                    )
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
                self._drop_lead()
                if was:
                    extra = {"action": "monitor_lost_lead", "monitor": holder}
                    log.warning("%s lost the monitor lead: %s", holder, exc, extra=extra)
                raise _unavailable(exc) from exc

    def _drop_lead(self) -> None:
        self._leading = False
        conn, self._lead_conn = self._lead_conn, None
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self._closed = True
        with self._lead_lock:
            self._drop_lead()
        self._pool.close()


def _match_roles(specs: list[TaskSpec], settings: Any) -> list[str]:
    """Each task's roles (space-separated), as ``scoring.matched_roles`` finds them."""
    return [
        " ".join(
            scoring.matched_roles(f"{sp.title}\n{sp.description}", settings.role_keywords, sp.role)
        )
        for sp in specs
    ]


def _safe(conninfo: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(conninfo)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
