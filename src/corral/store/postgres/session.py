"""corral's PostgreSQL sessions (``Sessions``): the URL's options, the pool, how each
session is set up, transactions over named SQL (``_Tx``), the hot statements'
one-round-trip path and the migrations.

Driver errors become ``StoreUnavailableError`` here, at the boundary: a lost
connection, a restart, a statement or pool timeout is a clear retryable error, never
a hang.

A session of corral's never waits between the statements of a transaction but for
the next statement (no user code, no I/O inside), so the server ends any session left
idle inside a transaction longer than ``idle_in_transaction_timeout`` (default 1 s,
``IDLE_IN_TRANSACTION_TIMEOUT``): a client stopped mid-transaction (SIGSTOP, a
debugger, a paused VM) releases its row locks within that bound, below the smallest
liveness window in practice (3 s for a 1 s heartbeat), and the monitor skips locked
rows meanwhile (``nodes_dead`` ... ``SKIP LOCKED``). A read-only transaction
(``Sessions.read``) holds no row lock: it may idle up to ``READ_IDLE_TIMEOUT`` (10 s),
so a reader starved of CPU on a loaded machine keeps its snapshot instead of failing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from operator import itemgetter
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from corral.errors import InvalidInputError, StoreUnavailableError
from corral.store.queries import load_queries, migrations, refuse_newer
from corral.store.signal import WAKE_QUERIES

__all__ = ["IDLE_IN_TRANSACTION_TIMEOUT", "READ_IDLE_TIMEOUT", "Sessions"]

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
# Seconds a read-only transaction may sit idle (it holds no row lock; the server
# still ends a reader stopped for good).
READ_IDLE_TIMEOUT = 10.0


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


def _raw(sql: str) -> tuple[bytes, Callable[[Mapping[str, Any]], tuple[Any, ...]]]:
    """``sql`` (pyformat, as ``_QUERIES`` holds it) with PostgreSQL's own ``$n``
    placeholders, a name used twice being one parameter as psycopg makes it; and what
    takes the parameters' values from a dict in ``$n`` order (``itemgetter``: no
    Python loop per execute)."""
    names: dict[str, int] = {}

    def placeholder(m: re.Match[str]) -> str:
        if m[1] is None:
            return "%"
        return f"${names.setdefault(m[1], len(names) + 1)}"

    text = _PLACEHOLDER.sub(placeholder, sql).encode()
    if len(names) == 1:  # itemgetter of one name gives the value, not a tuple
        [only] = names
        return text, lambda params: (params[only],)
    return text, itemgetter(*names) if names else lambda params: ()


def _session_function(name: str, params: tuple[str, ...]) -> str:
    """Query ``name``, a function's ``CREATE``, with its parameters ``params`` (in
    their order) written as the function's own ``$1``, ``$2``…"""
    sql = _QUERIES[name]
    for n, param in enumerate(params, 1):
        sql = sql.replace(f"%({param})s", f"${n}")
    if "%(" in sql:  # pragma: no cover - a queries.sql edit
        raise RuntimeError(f"{name}: a parameter other than {params}")
    return sql


# Made in each pooled session as it opens (pg_temp: the session's own).
_SESSION_SETUP = _session_function("session_node_went_idle", ("node_id", "id", "now"))


def _set_up(conn: psycopg.Connection[Any]) -> None:
    """A new pooled session's own functions (the hot statements call them)."""
    conn.execute(_SESSION_SETUP)


# The hot statements as sent (``_raw``), converted once on their first use. psycopg
# converts a named-parameter query on every execute, caching the result only for a
# query up to 4 kB (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH): the hot statements
# are longer, and the conversion (a regex pass over the text) cost more client time
# per job than the rest of the claim. A raw cursor sends the text as it is.
_HOT: dict[str, tuple[bytes, Callable[[Mapping[str, Any]], tuple[Any, ...]]]] = {}


class _Conn(psycopg.Connection[Any]):
    """A pooled connection that keeps one raw tuple cursor for the hot statements
    (``_raw``'s text, positional parameters): a kept cursor reuses its parameter
    dumpers and column loaders from one execute to the next, where ``conn.execute``
    builds a new cursor and looks them up again."""

    _hot: psycopg.RawCursor[tuple[Any, ...]] | None = None

    def hot(self) -> psycopg.RawCursor[tuple[Any, ...]]:
        cur = self._hot
        if cur is None or cur.closed:
            cur = self._hot = psycopg.RawCursor(self, row_factory=tuple_row)
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


def _session_lost(exc: psycopg.Error, conn: psycopg.Connection[Any] | None) -> bool:
    """``exc`` lost the session: a connection error, or any error after which the
    connection is gone (the server ended it: ``idle_in_transaction_session_timeout``
    is an ``InternalError``, an administrator's ``pg_terminate_backend`` an
    ``OperationalError``). Those are outages, retried by the caller; any other error
    (a constraint, a statement's own failure) is the statement's."""
    return isinstance(exc, psycopg.OperationalError) or (conn is not None and conn.broken)


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


def _safe(conninfo: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(conninfo)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class Sessions:
    """The pool of one store's sessions (safe to share between threads), opened and
    the schema migrated on creation; ``connect`` opens a dedicated session set up
    the same way (LISTEN, the monitor leader's lock)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int | str | None = None,
        statement_timeout: float | str | None = None,
        connect_timeout: float | str | None = None,
        idle_in_transaction_timeout: float | str | None = None,
    ) -> None:
        conninfo, opts = _split_url(url)
        size = int(pool_size if pool_size is not None else opts.get("pool_size", 5))
        if size < 1:
            raise InvalidInputError("pool_size must be at least 1", field="pool_size")
        self.statement_timeout = _seconds(
            statement_timeout or opts.get("statement_timeout", 30), "statement_timeout"
        )
        self.connect_timeout = _seconds(
            connect_timeout or opts.get("connect_timeout", 5), "connect_timeout"
        )
        self.idle_in_transaction_timeout = _seconds(
            idle_in_transaction_timeout
            or opts.get("idle_in_transaction_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
            "idle_in_transaction_timeout",
        )
        self.conninfo = conninfo
        self._conn_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(self.connect_timeout)),
            "options": f"-c statement_timeout={int(self.statement_timeout * 1000)}"
            " -c idle_in_transaction_session_timeout="
            f"{max(1, round(self.idle_in_transaction_timeout * 1000))}",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 2,
            "keepalives_count": 3,
        }
        self.pool: ConnectionPool[_Conn] = ConnectionPool(
            conninfo,
            connection_class=_Conn,
            min_size=1,
            max_size=size,
            kwargs={**self._conn_kwargs, "row_factory": dict_row},
            configure=_set_up,
            timeout=self.connect_timeout,
            name="corral",
            open=False,
        )
        try:
            self.pool.open(wait=True, timeout=self.connect_timeout)
        except PoolTimeout as exc:
            self.pool.close()
            raise _unavailable(exc, f"cannot reach PostgreSQL at {_safe(conninfo)}") from exc
        try:
            self._migrate()
        except BaseException:
            self.pool.close()
            raise

    def connect(self, **extra: Any) -> psycopg.Connection[Any]:
        """A dedicated session outside the pool (tuple rows; ``extra`` adds options
        such as ``application_name``). Raises ``psycopg.Error``."""
        return psycopg.connect(self.conninfo, **{**self._conn_kwargs, **extra})

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        held: psycopg.Connection[Any] | None = None
        try:
            with self.pool.connection(timeout=self.connect_timeout) as conn:
                held = conn
                yield conn
        except PoolTimeout as exc:
            raise _unavailable(exc, "no PostgreSQL connection available") from exc
        except psycopg.Error as exc:
            if not _session_lost(exc, held):
                raise
            self.pool.check()  # drop the other connections the outage broke
            raise _unavailable(exc) from exc

    @contextmanager
    def transaction(self, begin: str, floor: str | None = None) -> Iterator[_Tx]:
        """``begin``'s transaction. ``floor``: a query run just before it (autocommit),
        whose one value the transaction's first statement keeps as the setting
        ``corral.<floor>`` (transaction-local)."""
        with self.connection() as conn:
            if floor is None:
                conn.execute(begin)
            else:
                row = conn.execute(_QUERIES[floor]).fetchone()
                value = int(row[floor]) if row else 0
                conn.execute(f"{begin}; SELECT set_config('corral.{floor}', '{value}', true)")
            tx = _Tx(conn)
            try:
                yield tx
            except BaseException:
                if not conn.broken:
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            # A commit that makes a task pending rings waiting claims; the NOTIFY goes
            # out with the COMMIT, in one round trip.
            conn.execute(f"NOTIFY {_CHANNEL}; COMMIT" if tx.wake else "COMMIT")

    def read(self, begin: str, floor: str | None = None) -> AbstractContextManager[_Tx]:
        """``transaction`` for a read-only ``begin`` (``BEGIN … READ ONLY``): it may
        sit idle up to ``READ_IDLE_TIMEOUT`` (or the sessions' own bound, when
        longer), as it holds no row lock."""
        idle = round(max(READ_IDLE_TIMEOUT, self.idle_in_transaction_timeout) * 1000)
        return self.transaction(
            f"{begin}; SET LOCAL idle_in_transaction_session_timeout = {idle}", floor
        )

    def hot(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A hot statement in its own transaction (autocommit): one round trip, on the
        connection's kept cursor, rows as tuples. (``connection``'s errors, without
        its context managers: the pool's ``connection()`` adds a transaction block
        that autocommit does not need.)"""
        try:
            conn = self.pool.getconn(timeout=self.connect_timeout)
        except PoolTimeout as exc:
            raise _unavailable(exc, "no PostgreSQL connection available") from exc
        sql = _HOT.get(name)
        if sql is None:
            sql = _HOT[name] = _raw(_QUERIES[name])
        try:
            return conn.hot().execute(sql[0], sql[1](params)).fetchall()
        except psycopg.Error as exc:
            if not _session_lost(exc, conn):
                raise
            broken = exc
        finally:
            self.pool.putconn(conn)
        self.pool.check()  # drop the other connections the outage broke
        raise _unavailable(broken) from broken

    def _migrate(self) -> None:
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", [_MIGRATE_KEY])
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS corral_migrations (version integer PRIMARY KEY,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                done = {r["version"] for r in conn.execute("SELECT version FROM corral_migrations")}
                refuse_newer(max(done, default=0), "postgres", _safe(self.conninfo))
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

    def close(self) -> None:
        self.pool.close()
