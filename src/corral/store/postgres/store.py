"""The shared store: PostgreSQL through psycopg 3 and a psycopg-pool pool.

Any number of coordinators, monitors and workers on different hosts open the same
database. Transactions run at READ COMMITTED with row locks where the shared SQL
needs them (``*_for_update``, ``lock_registry``); the hot operations (claim,
complete, bulk add) are single statements. The sessions themselves (the pool, their
setup, the errors at the driver's boundary, the migrations) are ``session.py``'s;
the two sessions outside the pool (LISTEN, the monitor leader) ``dedicated.py``'s.

Extra URL parameters (removed before connecting): ``pool_size``, ``statement_timeout``,
``connect_timeout`` and ``idle_in_transaction_timeout`` (seconds). Keyword arguments of
the same names override them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any

import psycopg.errors

from corral import lifecycle, scoring
from corral.errors import InvalidInputError, LeaseError, StoreUnavailableError
from corral.model import Task
from corral.store import claimkeys, sqltasks, sqlusage
from corral.store.base import TaskSpec
from corral.store.postgres.dedicated import Leader, Listener
from corral.store.postgres.session import _QUERIES, Sessions, _Tx
from corral.store.rows import (
    TaskRow,
    _dumps,
    as_task_row,
    finished_task,
    task_from_task_row,
    task_row,
    task_tail,
)
from corral.store.signal import ReadySignal
from corral.store.sqlbase import SQLStore, task_from_row
from corral.store.sqldb import live, refuse

__all__ = ["PostgresStore"]

_STAMP = 1 - lifecycle.STAMP_FRACTION  # node rows re-stamped after a tenth of the window
_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_CLAIMED_KEEP = 1024  # claimed task rows a store remembers for their completion


# The report added to the task's sums, in its completion's UPDATE (as _QUERIES holds
# the statements: pyformat).
_TASK_SUMS = (
    "updated_at = %(now)s,\n"
    "                     usage_input_tokens = usage_input_tokens + %(input_tokens)s::bigint,\n"
    "                     usage_output_tokens = usage_output_tokens + %(output_tokens)s::bigint,\n"
    "                     usage_cost_micros = usage_cost_micros + %(cost_micros)s::bigint,\n"
    "                     usage_reports = usage_reports + 1"
)
_COMPLETION_SET = re.compile(r"finished_at = %\(now\)s,\s+updated_at = %\(now\)s")


def _with_usage_cte(name: str, done: str) -> str:
    """Hot statement ``name`` with the report's usage: added to the task's sums by its
    completion's UPDATE (its CTE ``done``), and ``usage_add_done`` as its last CTE,
    guarded by ``done``: a completion with usage in one statement."""
    sql, n = _COMPLETION_SET.subn(f"finished_at = %(now)s, {_TASK_SUMS}", _QUERIES[name])
    if n != 1:  # pragma: no cover - a queries.sql edit
        raise RuntimeError(f"{name}: its completion's UPDATE not found")
    end = sql.rindex("\n)\nSELECT") + 2
    cte = _QUERIES["usage_add_done"].replace("usage_done_cte", done)
    return f"{sql[:end]}, usage_up AS (\n{cte}\n){sql[end:]}"


for _name, _done in (
    ("complete_full", "t"),
    ("complete_claim_full", "fin"),
    ("complete_lean_quiet", "t"),
    ("complete_claim_lean_quiet", "fin"),
):
    _QUERIES[f"{_name}+usage"] = _with_usage_cte(_name, _done)

# The claim's key (claimkeys) in the statement: its CTEs (keyed, then ck and ckp, the
# part claim_key_put) run only in the "+key" forms, which queries.sql writes; the
# plain forms, a claim without a key, are those without them (a CTE that writes runs,
# and opens its table, even when its condition leaves it nothing to do).
_KEY_CTES = re.compile(r"\), keyed AS \(.*?(?=\), ev AS \()", re.DOTALL)


def _unkeyed(name: str) -> str:
    sql, n = _KEY_CTES.subn("", _QUERIES[name])
    if n != 1 or "claim_keys" in sql or "%(key)s" in sql:  # pragma: no cover - an edit
        raise RuntimeError(f"{name}: its claim key's CTEs not found")
    return sql


for _name in ("claim_full", "claim_lean", "complete_claim_full", "complete_claim_lean_quiet"):
    for _form in (_name, f"{_name}+usage"):
        if _form in _QUERIES:
            _QUERIES[f"{_form}+key"] = _QUERIES[_form]
            _QUERIES[_form] = _unkeyed(_form)


def _task(values: Any, start: int, tail: tuple[int, ...]) -> Task:
    """The task whose columns (``TASK_COLUMNS``: what RETURNING * and take.* give the
    hot statements, in table order; ``rows.TASK_TAIL`` at ``tail``) start at
    ``values[start]``."""
    return task_from_task_row(task_row(values, start, tail))


_TASK_ROW_WIDTH = len(TaskRow._fields)


def _task_row_at(values: tuple[Any, ...], start: int) -> TaskRow:
    """The ``TaskRow`` of a hot statement's row whose task columns (claim_pick's and
    complete_claim_full's RETURNING: ``TaskRow``'s, in its order) start at
    ``values[start]``."""
    return as_task_row(values[start : start + _TASK_ROW_WIDTH])


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
        self._sessions = Sessions(
            url,
            pool_size=pool_size,
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
        )
        self._hot = self._sessions.hot  # bound once: the hot path's one round trip
        self._ready = ReadySignal()
        self._listener = Listener(self._sessions, self._ready)
        self._leader = Leader(self._sessions)
        self._analyzed = False  # the claim's tables have statistics (_analyze_if_never)
        # Claimed task rows by id (their completion's Task), and per node whether its
        # last claim left it working without a current task (the lean statements).
        self._claimed: dict[int, TaskRow] = {}
        self._lean: dict[str, bool] = {}
        # Where the columns added after TASK_COLUMNS are (rows.task_row's tail).
        self._tail = task_tail([r[0] for r in self._sessions.hot("task_columns", {})])

    # --- transactions -----------------------------------------------------------------
    def _write(self) -> AbstractContextManager[_Tx]:
        return self._sessions.transaction("BEGIN")

    def _write_redone(self) -> AbstractContextManager[_Tx]:
        # The monitor's duties: visible at once, flushed with the next durable commit
        # (PostgreSQL's WAL is one sequence), redone from the deadlines after a crash.
        return self._sessions.transaction("BEGIN; SET LOCAL synchronous_commit TO off")

    def _read(self) -> AbstractContextManager[_Tx]:
        return self._sessions.read(_READ)

    def _read_row(self, name: str, **params: Any) -> Sequence[Any] | None:
        # One statement in autocommit: one round trip (a transaction block is three).
        rows = self._sessions.hot(name, params)
        return rows[0] if rows else None

    def _read_latest(self, single: bool = False) -> AbstractContextManager[_Tx]:
        """The event horizon (corral_event_horizon, schema.sql) is exact only at READ
        COMMITTED, where each of its statements takes a new snapshot. One statement
        runs there; several share a REPEATABLE READ snapshot whose horizon is at least
        the one read exactly just before it began (``corral.event_floor``)."""
        if single:
            return self._sessions.read("BEGIN READ ONLY")
        return self._sessions.read(_READ, floor="event_floor")

    # --- hot operations -----------------------------------------------------------------
    def _cached_settings(self, refresh: bool = False) -> tuple[Any, Any]:
        if refresh or self._db.settings_cache is None:
            self._db.settings_cache = None
            self.settings()
        assert self._db.settings_cache is not None
        return self._db.settings_cache

    def _settings_for(self, role: str, refresh: bool = False) -> tuple[Any, float | None]:
        """The cached settings version and their progress_timeout (None: off), once
        ``role`` is known (re-read if it is not). A claim passes both: it takes a task
        only while that version is current, so the deadline it sets is the cluster's."""
        version, settings = self._cached_settings(refresh)
        if role not in settings.roles and not refresh:
            version, settings = self._cached_settings(True)
        if role not in settings.roles:
            raise InvalidInputError(
                f"role must be one of {', '.join(settings.roles)}; got {role!r:.40}",
                field="role",
            )
        return version, settings.progress_timeout or None

    def _remember(self, values: tuple[Any, ...], start: int) -> Task:
        """Keep a claimed task's row (``TaskRow``'s columns from ``values[start]``,
        claim_pick's RETURNING) for its completion (``_held``); its task."""
        row = _task_row_at(values, start)
        claimed = self._claimed
        if len(claimed) >= _CLAIMED_KEEP:
            with suppress(KeyError, RuntimeError, StopIteration):
                del claimed[next(iter(claimed))]
        claimed[row.id] = row
        return task_from_task_row(row)

    def _set_lean(self, node_id: str) -> None:
        lean = self._lean
        if len(lean) >= _CLAIMED_KEEP and node_id not in lean:
            lean.clear()  # a hint only: a node left out takes the full statement once
        lean[node_id] = True

    def _held(self, task_id: int, epoch: int | None) -> TaskRow | None:
        """The row of ``task_id`` as this store's claim at ``epoch`` returned it, if
        it is remembered. Only a claim changes an in-progress task's columns but for
        its completion or release, and every claim changes its epoch: a completion at
        this epoch finds the task as that claim left it."""
        held = self._claimed.pop(task_id, None)
        if held is None or epoch is None or held.epoch != epoch:
            return None
        return held

    def claim(self, node_id: str, role: str, now: float, *, key: str | None = None) -> Task | None:
        sqlusage.budget_refusal(self._db, node_id, now)  # no read without budgets
        if key is None:
            return self._claim(node_id, role, now, None)
        try:  # the statement records the key, or fails if it is recorded already
            return self._claim(node_id, role, now, key)
        except psycopg.errors.UniqueViolation:
            pass
        with self._read() as tx:  # sent again: what the first one took
            found = claimkeys.answer(tx, node_id, key)
        return None if found is None else found[1]

    def _claim(self, node_id: str, role: str, now: float, key: str | None) -> Task | None:
        refresh = False
        lean = self._lean.get(node_id, False)
        keyed = "" if key is None else "+key"
        while True:
            version, progress_timeout = self._settings_for(role, refresh)
            params = {
                "node_id": node_id,
                "role": role,
                "now": now,
                "bonus": scoring.ROLE_BONUS_SECONDS,
                "settings_version": version,
                "progress_timeout": progress_timeout,
                "stamp": _STAMP,
                "role_json": _dumps(role),
                "key": key,
                "keys_before": now - claimkeys.CLAIM_KEY_SECONDS,
            }
            if lean:
                row = self._hot(f"claim_lean{keyed}", params)[0]
                if row[0] and not row[1]:  # the node needs its update: the full claim
                    lean = self._lean[node_id] = False
                    continue
                i = 2
            else:
                row = self._hot(f"claim_full{keyed}", params)[0]
                i = 1
            fresh = row[0]
            if fresh is None:  # no live node
                with self._read() as tx:
                    live(tx, node_id)  # raises NotFoundError
            if fresh:
                if row[i] is None:
                    return None
                if not lean:  # the node is now working without a current task
                    self._set_lean(node_id)
                return self._remember(row, i)
            refresh = True  # the settings changed under us: re-check the role, retry

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
        text = None if result is None else _dumps(result)
        params = _completion(task_id, node_id, epoch, text, now)
        # A completion leaves the node idle unless it holds another task: its next
        # claim needs the node update, so it goes to claim_full at once (claim_lean
        # would only find that out and send it there: one round trip more per job).
        self._lean.pop(node_id, None)
        with_usage = ""  # the "+usage" statements: the completion and its usage in one
        if usage is not None:
            if self._budgets_maybe():  # a report that may write a budget event
                self._claimed.pop(task_id, None)
                rows = self._with_usage("complete_full", params, task_id, node_id, usage, now)
                if not rows:
                    with self._read() as tx:
                        refuse(tx, task_id, node_id, epoch)  # raises
                return _task(rows[0], 0, self._tail)
            params.update(sqlusage.add_params(node_id, usage, now))
            with_usage = "+usage"
        held = self._held(task_id, epoch)
        if held is not None:
            lean, done = self._hot(f"complete_lean_quiet{with_usage}", params)[0]
            if lean:
                if done is None:
                    with self._read() as tx:
                        refuse(tx, task_id, node_id, epoch)  # raises
                return finished_task(held, text, now)
        rows = self._hot(f"complete_full{with_usage}", params)
        if not rows:
            with self._read() as tx:
                refuse(tx, task_id, node_id, epoch)  # raises
        return _task(rows[0], 0, self._tail)

    def _budgets_maybe(self) -> bool:
        """Whether budgets may be set (this process's settings have some, or it has
        not read them within ``sqlusage.SETTINGS_RECHECK``): a report then reads
        them, in a transaction of its own."""
        return not sqlusage.budgetless(self._db)

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
        """One statement, one commit: a worker's finish-then-next costs one round trip.
        With ``key``: the statement records it, or fails (taking nothing) if it is
        recorded already, and then the answer is the record's. With ``usage``, the
        statement and the usage's in one transaction. A node covered by a spent
        budget completes and claims nothing."""
        if self.budget_spent(node_id, now):  # no read without budgets
            return self.complete(task_id, node_id, epoch, result, now, usage=usage), None
        if key is None:
            return self._complete_and_claim(task_id, node_id, epoch, result, role, now, None, usage)
        try:
            return self._complete_and_claim(task_id, node_id, epoch, result, role, now, key, usage)
        except (psycopg.errors.UniqueViolation, LeaseError) as exc:
            refused = exc  # sent again: the completion is refused, or the key recorded
        with self._read() as tx:
            found = claimkeys.answer(tx, node_id, key)
        if found is None:
            if isinstance(refused, LeaseError):
                raise refused
            raise StoreUnavailableError("the claim's key vanished; retry") from None
        return found[0] or self.get_task(task_id), found[1]

    def _complete_and_claim(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        role: str,
        now: float,
        key: str | None,
        usage: dict[str, Any] | None = None,
    ) -> tuple[Task, Task | None]:
        version, progress_timeout = self._settings_for(role)  # bad input changes nothing
        text = None if result is None else _dumps(result)
        params = {
            **_completion(task_id, node_id, epoch, text, now),
            "role": role,
            "bonus": scoring.ROLE_BONUS_SECONDS,
            "settings_version": version,
            "progress_timeout": progress_timeout,
            "role_json": _dumps(role),
            "key": key,
            "keys_before": now - claimkeys.CLAIM_KEY_SECONDS,
        }
        keyed = "" if key is None else "+key"
        with_usage = ""  # the "+usage" statements: the completion and its usage in one
        if usage is not None and not self._budgets_maybe():
            params.update(sqlusage.add_params(node_id, usage, now))
            with_usage, usage = "+usage", None
        held = self._held(task_id, epoch)
        if usage is None and held is not None and self._lean.get(node_id, False):
            row = self._hot(f"complete_claim_lean_quiet{with_usage}{keyed}", params)[0]
            fresh, lean = row[0], row[1]
            if lean:
                if not row[2]:  # not finished
                    with self._read() as tx:
                        refuse(tx, task_id, node_id, epoch)  # raises
                done = finished_task(held, text, now)
                if not fresh:
                    return done, self._claim(node_id, role, now, key)  # the settings changed
                if row[3] is None:
                    return done, None
                return done, self._remember(row, 3)
            self._lean[node_id] = False  # the node needs its update: the full statement
        if usage is None:
            rows = self._hot(f"complete_claim_full{with_usage}{keyed}", params)
        else:  # budgets may be set: the usage in a transaction that may announce them
            rows = self._with_usage(
                f"complete_claim_full{keyed}", params, task_id, node_id, usage, now
            )
        if not rows:
            with self._read() as tx:
                refuse(tx, task_id, node_id, epoch)  # raises
        parts = {r[1]: r for r in rows}  # (fresh, part, task columns...)
        done = task_from_task_row(_task_row_at(parts["done"], 2))  # fin's TaskRow columns
        if "next" in parts:
            self._set_lean(node_id)  # working, without a current task
            return done, self._remember(parts["next"], 2)
        if parts["done"][0]:
            return done, None
        return done, self._claim(node_id, role, now, key)  # the settings changed: claim anew

    def _with_usage(
        self,
        name: str,
        params: dict[str, Any],
        task_id: int,
        node_id: str,
        usage: dict[str, Any],
        now: float,
    ) -> list[tuple[Any, ...]]:
        """Hot statement ``name`` and the usage (``sqlusage.record``: the task's sums,
        its node's row, the budgets it crosses announced) in one transaction, the usage
        only when the statement finished the task; its rows as tuples. (Without budgets
        the store runs ``name`` with the usage in it instead: its "+usage" form.)"""
        with self._write() as tx:
            rows = [tuple(r.values()) for r in tx.all(name, **params)]
            if rows:
                tx.one("event_seqs_reserve", n=2)  # it may write a budget event
                sqlusage.record(self._db, tx, node_id, task_id, usage, now)
        return rows

    def add_tasks(self, specs: list[TaskSpec], now: float) -> list[Task]:
        if not specs:
            return []
        if any(sqltasks.ordered(sp) for sp in specs):  # dependencies, times: one by one
            return sqltasks.add_tasks(self._db, specs, now)
        # The roles are matched before the transaction (no idle time inside it), with
        # the cached settings; again inside only if the settings changed meanwhile.
        known = self._cached_settings()[1]
        roles = _match_roles(specs, known)
        keys = [scoring.sort_key(sp.priority, now) for sp in specs]
        with self._write() as tx:
            s = self._db.settings_in(tx)
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
            rows = sqltasks.with_progress_timeouts(tx, specs, sorted(rows, key=lambda r: r["id"]))
        if not self._analyzed:
            self._analyze_if_never()
        return [task_from_row(r) for r in rows]

    def _analyze_if_never(self) -> None:
        """``ANALYZE`` the claim's tables if they never were, once per store.

        Until autovacuum's first ``ANALYZE`` (up to a minute after the first tasks),
        the planner has no statistics, and a claim's cached plan can join the role
        heads against every pending task: O(pending) per claim until the statistics
        arrive. ``ANALYZE`` blocks no reads or writes; cached plans are replanned."""
        with self._sessions.connection() as conn:
            row = conn.execute(_QUERIES["claim_tables_unanalyzed"]).fetchone()
            if row and row["n"]:
                conn.execute(_QUERIES["claim_tables_analyze"])
        self._analyzed = True

    # --- waiting claims (LISTEN/NOTIFY) ---------------------------------------------
    def ready_token(self) -> int:
        self._listener.ensure()
        return self._ready.token()

    def wait_ready(self, token: Any, timeout: float) -> None:
        self._ready.wait(token, timeout)

    def wake_waiters(self) -> None:
        self._ready.bump()

    # --- leader election ----------------------------------------------------------------
    def server_time(self) -> float:
        """The database server's wall clock (seconds since the epoch): the clock of
        every cluster on this store (``corral.clock.ServerClock``)."""
        with self._sessions.connection() as conn:
            query = "SELECT extract(epoch FROM clock_timestamp())::float8 AS t"
            row = conn.execute(query).fetchone()
        assert row is not None
        return float(row["t"])

    def try_lead(self, holder: str) -> bool:
        """The monitor leader holds a session advisory lock on a dedicated connection
        (``dedicated.Leader``): another monitor takes it when this one's process dies
        or its connection drops."""
        return self._leader.try_lead(holder)

    def close(self) -> None:
        self._listener.close()
        self._leader.close()
        self._sessions.close()


def _match_roles(specs: list[TaskSpec], settings: Any) -> list[str]:
    """Each task's roles (space-separated), by ``scoring.task_roles``."""
    return [
        scoring.task_roles(sp.title, sp.description, settings.role_keywords, sp.role)
        for sp in specs
    ]
