"""The transaction object the SQL store's capability modules run over (``Db``), and
the helpers they share: plain functions over a ``Tx``.

The store's operations are plain functions in capability modules (``sqlnodes``,
``sqltasks``, ``sqlviews``, ``sqlduties``, ``sqlprocs``, ``sqlworkflows``,
``sqlsched``, ``sqlspawn``), each taking a ``Db`` first: the manager-over-connector
shape. A ``Db`` is made by an adapter (``SQLiteStore``, ``PostgresStore``) from its
transactions, and holds what every operation shares: the settings cache, the monitor
whose duties a thread runs, the events a block captures. ``SQLStore`` composes the
modules into the ``Store`` port.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from corral.config import settings_from_rows
from corral.errors import InvalidInputError, LeaseError, NotFoundError, TaskCancelledError
from corral.model import Event, Node, Settings
from corral.store.rows import Tx, dumps, event_from_row, loads, node_from_row

__all__ = [
    "Db",
    "UsageTail",
    "check_role",
    "dequeue",
    "enqueue",
    "live",
    "meta",
    "meta_int",
    "node_record",
    "refuse",
]

Transaction = Callable[[], AbstractContextManager[Tx]]


class UsageTail(Protocol):
    """An adapter whose completions leave their usage reports for a roll-up instead
    of adding them to their nodes' hours (SQLite: on their tasks, marked by their
    completion events; sqlusage reads and rolls them up through this)."""

    def rows(self, tx: Tx, limit: int) -> list[Any]:
        """The reports not rolled up yet, in order, at most ``limit``: each with
        ``seq``, ``ts``, ``node_id``, ``input_tokens``, ``output_tokens``,
        ``cost_micros``, ``role`` and ``model``."""
        ...

    def roll_up(self, tx: Tx, limit: int) -> int:
        """Add up to ``limit`` of them to their hours, in ``tx``, and mark them
        rolled up; how many."""
        ...


# The clock of the settings' recheck (``settings_checked``, ``sqlusage.budgetless``):
# monotonic seconds; tests set it to step over ``SETTINGS_RECHECK`` without waiting.
monotonic = time.monotonic


class Db:
    """An adapter's transactions and the state its operations share.

    ``write``: a write transaction that excludes conflicting writers from its start.
    ``read``: a read-only transaction with a consistent snapshot. ``write_redone``: a
    ``write`` the monitor would redo if a crash lost it (an adapter may commit it
    without waiting for its log to reach the disk). ``read_latest(single)``: a
    ``read`` whose event reads see every event committed before it began
    (``single``: the body runs one statement). ``read_row(name, **params)``: the
    first row of named query ``name``, read on its own, its values by position.
    (``SQLStore`` documents each and gives their defaults.)"""

    def __init__(
        self,
        *,
        write: Transaction,
        read: Transaction,
        write_redone: Transaction,
        read_latest: Callable[[bool], AbstractContextManager[Tx]],
        read_row: Callable[..., Sequence[Any] | None],
    ) -> None:
        self.write = write
        self.read = read
        self.write_redone = write_redone
        self._read_latest = read_latest
        self.read_row = read_row
        # (settings_version, Settings) last read; None: read them again.
        self.settings_cache: tuple[Any, Settings] | None = None
        # When (time.monotonic) this process last read the settings' version: its
        # cache holds no budget another process set before then (sqlusage).
        self.settings_checked = -math.inf
        # Where completions leave their usage for a roll-up (SQLite: on their tasks)
        # instead of adding it to their hours themselves; None: they add it.
        self.usage_tail: UsageTail | None = None
        self._actor = threading.local()  # the monitor whose duties this thread runs
        # (pass time, retry time) of the last monitor pass that skipped locked rows,
        # per duty (sqlduties).
        self.locked: dict[str, tuple[float, float] | None] = {}

    def read_latest(self, single: bool = False) -> AbstractContextManager[Tx]:
        return self._read_latest(single)

    # --- the settings -----------------------------------------------------------------
    def settings_in(self, tx: Tx) -> Settings:
        self.settings_checked = monotonic()
        row = tx.one("meta_get", key="settings_version")
        version = row["value"] if row else None
        cached = self.settings_cache
        if cached is not None and cached[0] == version:
            return cached[1]
        settings = settings_from_rows((r["key"], r["value"]) for r in tx.all("settings_all"))
        self.settings_cache = (version, settings)
        return settings

    def settings_now(self, version: Any) -> Settings:
        """The settings, given their version read just now: the cached ones when it
        is theirs, else read again."""
        cached = self.settings_cache
        if cached is not None and cached[0] == version:
            return cached[1]
        with self.read() as tx:
            return self.settings_in(tx)

    # --- events -----------------------------------------------------------------------
    @contextmanager
    def acting_as(self, monitor: str) -> Iterator[None]:
        """Events this thread writes in the block name ``monitor``."""
        self._actor.name = monitor
        try:
            yield
        finally:
            self._actor.name = None

    def event(
        self,
        tx: Tx,
        now: float,
        kind: str,
        node_id: str | None = None,
        task_id: int | None = None,
        **data: Any,
    ) -> None:
        """Append an event in ``tx`` (named by the monitor acting, if any)."""
        monitor = getattr(self._actor, "name", None)
        if monitor is not None:
            data["monitor"] = monitor
        captured: list[Event] | None = getattr(self._actor, "events", None)
        params = {"ts": now, "kind": kind, "node_id": node_id, "task_id": task_id}
        if captured is None:
            tx.run("event_insert", **params, data=dumps(data))
        else:  # the caller returns what it wrote (capturing): read back as it is written
            row = tx.one("event_insert_returning", **params, data=dumps(data))
            captured.append(event_from_row(row))

    @contextmanager
    def capturing(self) -> Iterator[list[Event]]:
        """The events this thread's ``event`` calls write in the block, in order (each
        read back by its INSERT: no query for them afterwards)."""
        events: list[Event] = []
        self._actor.events = events
        try:
            yield events
        finally:
            self._actor.events = None


# --- helpers over a transaction ----------------------------------------------------------
def meta(tx: Tx, key: str) -> dict[str, Any]:
    row = tx.one("meta_get", key=key)
    return loads(row["value"]) if row else {}


def meta_int(tx: Tx, key: str) -> int | None:
    row = tx.one("meta_get", key=key)
    return int(row["value"]) if row else None


def node_record(tx: Tx, row: Any) -> Node:
    """``node_from_row`` with the held task looked up for a working or waiting node
    (an idle node holds none: ``lifecycle.status_allowed``; a terminated one has
    handed its leases back), so the answer is the record ``get_node`` reads."""
    held = None
    if row["current_task_id"] is None and row["status"] in ("working", "waiting"):
        found = tx.one("node_held_task", id=row["id"])
        held = found["t"] if found else None
    return node_from_row(row, held)


def live(tx: Tx, node_id: str, query: str = "node_live") -> Any:
    """The live row of ``node_id`` (read by ``query``), or ``NotFoundError``."""
    row = tx.one(query, id=node_id)
    if row is not None:
        return row
    if tx.one("node_latest", id=node_id) is not None:
        raise NotFoundError(
            f"node {node_id} is terminated; register it again to rejoin", field="node_id"
        )
    raise NotFoundError(f"unknown node {node_id}; register it first", field="node_id")


def enqueue(tx: Tx, task_id: int, sort_key: float, created_at: float, roles: str) -> None:
    """Add a pending task's role heads (the all-roles head is the partial index on
    pending tasks, kept by the status itself)."""
    for role in roles.split():
        tx.run("ready_insert", role=role, sort_key=sort_key, created_at=created_at, task_id=task_id)


def dequeue(tx: Tx, task_id: int, sort_key: float, created_at: float, roles: str) -> None:
    """Drop a claimed task's role heads (``enqueue``'s reverse)."""
    for role in roles.split():
        tx.run("ready_remove", role=role, sort_key=sort_key, created_at=created_at, task_id=task_id)


def check_role(db: Db, tx: Tx, role: str) -> None:
    """``InvalidInputError`` unless ``role`` is one of the settings' roles."""
    cached = db.settings_cache
    if cached is not None and role in cached[1].role_keywords:
        return  # a role removed since is harmless: it only loses its bonus
    roles = db.settings_in(tx).roles
    if role not in roles:
        raise InvalidInputError(
            f"role must be one of {', '.join(roles)}; got {role!r:.40}", field="role"
        )


def refuse(tx: Tx, task_id: int, node_id: str, epoch: int | None) -> None:
    """Raise why ``node_id`` at ``epoch`` does not hold ``task_id``."""
    row = tx.one("task_get", id=task_id)
    if row is None:
        raise NotFoundError(f"unknown task {task_id}", field="task_id")
    if row["status"] == "cancelled" and row["assigned_to"] == node_id:
        raise TaskCancelledError(
            f"task {task_id} was {row['error']}; stop working on it and claim another task",
            field="task_id",
        )
    # A caller that names its epoch hears the task's: a lease taken back and claimed
    # again (a stuck task requeued, a dead holder's lease recovered) is a newer epoch.
    epochs = "" if epoch is None else f" (epoch {epoch}; the task is at epoch {row['epoch']})"
    if row["status"] != "in_progress":
        raise LeaseError(
            f"task {task_id} is {row['status']}, not held by {node_id}{epochs}; claim a task first",
            field="task_id",
        )
    if row["assigned_to"] != node_id:
        raise LeaseError(
            f"task {task_id} is held by {row['assigned_to']}, not {node_id}{epochs}",
            field="node_id",
        )
    if epoch is not None and epoch > row["epoch"]:
        raise LeaseError(
            f"task {task_id} has no epoch {epoch}: its lease is at epoch {row['epoch']}",
            field="epoch",
        )
    raise LeaseError(
        f"task {task_id} was claimed again (epoch {row['epoch']}); epoch {epoch} is stale",
        field="epoch",
    )
