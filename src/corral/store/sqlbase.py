"""The domain operations over named SQL, shared by every SQL dialect.

An adapter supplies connections (``_write`` and ``_read`` yield a ``Tx``) and a
``queries.sql`` with the names used here; it may override an operation with a faster
single statement. ``lock_registry`` and ``*_for_update`` queries are where a dialect
with row locks (PostgreSQL) takes them; SQLite's write transaction already excludes
every other writer.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from corral import lifecycle, scoring
from corral.config import check_changes, settings_from_rows, timing_changed
from corral.defaults import MANAGER_ROLE
from corral.errors import (
    CapacityError,
    ConflictError,
    InvalidInputError,
    LeaseError,
    NotFoundError,
)
from corral.health import health_after_beat
from corral.model import Event, Node, Registered, Settings, Task, last_seen
from corral.render import capacity_error_text
from corral.store.base import NodeSpec, Store, TaskSpec
from corral.store.rows import Tx, _dumps, _loads, event_from_row, node_from_row, task_from_row
from corral.store.sqlduties import DutiesMixin
from corral.store.sqlprocs import ProcessesMixin
from corral.store.sqlsched import SchedulerMixin
from corral.store.sqlspawn import SpawnMixin
from corral.store.sqlviews import ViewsMixin
from corral.store.sqlworkflows import WorkflowsMixin
from corral.store.stats import ClusterStats, stats_in

__all__ = ["SQLStore", "Tx", "event_from_row", "node_from_row", "task_from_row"]


class SQLStore(
    ViewsMixin, DutiesMixin, ProcessesMixin, WorkflowsMixin, SchedulerMixin, SpawnMixin, Store
):
    """``Store`` over a ``Tx``; subclasses provide the connection handling."""

    def __init__(self) -> None:
        self._settings_cache: tuple[Any, Settings] | None = None
        self._actor = threading.local()  # the monitor whose duties this thread runs

    @contextmanager
    def acting_as(self, monitor: str) -> Iterator[None]:
        self._actor.name = monitor
        try:
            yield
        finally:
            self._actor.name = None

    def stats(self) -> ClusterStats:
        return stats_in(self, self._read_latest)

    @abstractmethod
    def _write(self) -> AbstractContextManager[Tx]:
        """A write transaction that excludes conflicting writers from its start."""

    def _write_redone(self) -> AbstractContextManager[Tx]:
        """A ``_write`` that the monitor would redo if a crash lost it: its rows are
        due, and stay due until a later pass commits. An adapter may commit it
        without waiting for its log to reach the disk (PostgreSQL does); any later
        commit that depends on it, being durable, makes it durable too."""
        return self._write()

    @abstractmethod
    def _read(self) -> AbstractContextManager[Tx]:
        """A read-only transaction with a consistent snapshot."""

    def _read_latest(self, single: bool = False) -> AbstractContextManager[Tx]:
        """A ``_read`` whose event reads see every event committed before it began
        (read-your-writes). ``single``: the body runs one statement, which needs no
        snapshot shared between statements."""
        return self._read()

    def _read_row(self, name: str, **params: Any) -> Sequence[Any] | None:
        """The first row of named query ``name``, one statement read on its own,
        its values by position (an adapter may answer it in one round trip)."""
        with self._read_latest(single=True) as tx:
            row = tx.one(name, **params)
        return None if row is None else tuple(row)

    # --- helpers --------------------------------------------------------------------
    def _settings_now(self, version: Any) -> Settings:
        """The settings, given their version read just now: the cached ones when it
        is theirs, else read again."""
        cached = self._settings_cache
        if cached is not None and cached[0] == version:
            return cached[1]
        with self._read() as tx:
            return self._settings_in(tx)

    def _settings_in(self, tx: Tx) -> Settings:
        row = tx.one("meta_get", key="settings_version")
        version = row["value"] if row else None
        cached = self._settings_cache
        if cached is not None and cached[0] == version:
            return cached[1]
        settings = settings_from_rows((r["key"], r["value"]) for r in tx.all("settings_all"))
        self._settings_cache = (version, settings)
        return settings

    def _event(
        self,
        tx: Tx,
        now: float,
        kind: str,
        node_id: str | None = None,
        task_id: int | None = None,
        **data: Any,
    ) -> None:
        monitor = getattr(self._actor, "name", None)
        if monitor is not None:
            data["monitor"] = monitor
        captured: list[Event] | None = getattr(self._actor, "events", None)
        params = {"ts": now, "kind": kind, "node_id": node_id, "task_id": task_id}
        if captured is None:
            tx.run("event_insert", **params, data=_dumps(data))
        else:  # the caller returns what it wrote (_capturing): read back as it is written
            row = tx.one("event_insert_returning", **params, data=_dumps(data))
            captured.append(event_from_row(row))

    @contextmanager
    def _capturing(self) -> Iterator[list[Event]]:
        """The events this thread's ``_event`` calls write in the block, in order (each
        read back by its INSERT: no query for them afterwards)."""
        events: list[Event] = []
        self._actor.events = events
        try:
            yield events
        finally:
            self._actor.events = None

    def _node(self, tx: Tx, row: Any) -> Node:
        """``node_from_row`` with the held task looked up for a working or waiting
        node (an idle node holds none: ``lifecycle.status_allowed``; a terminated one
        has handed its leases back), so the answer is the record ``get_node`` reads."""
        held = None
        if row["current_task_id"] is None and row["status"] in ("working", "waiting"):
            found = tx.one("node_held_task", id=row["id"])
            held = found["t"] if found else None
        return node_from_row(row, held)

    def _live(self, tx: Tx, node_id: str, query: str = "node_live") -> Any:
        row = tx.one(query, id=node_id)
        if row is not None:
            return row
        if tx.one("node_latest", id=node_id) is not None:
            raise NotFoundError(
                f"node {node_id} is terminated; register it again to rejoin", field="node_id"
            )
        raise NotFoundError(f"unknown node {node_id}; register it first", field="node_id")

    def _meta(self, tx: Tx, key: str) -> dict[str, Any]:
        row = tx.one("meta_get", key=key)
        return _loads(row["value"]) if row else {}

    def _enqueue(
        self, tx: Tx, task_id: int, sort_key: float, created_at: float, roles: str
    ) -> None:
        """Add a pending task's role heads (the all-roles head is the partial index on
        pending tasks, kept by the status itself)."""
        for role in roles.split():
            tx.run(
                "ready_insert", role=role, sort_key=sort_key, created_at=created_at, task_id=task_id
            )

    def _dequeue(
        self, tx: Tx, task_id: int, sort_key: float, created_at: float, roles: str
    ) -> None:
        """Drop a claimed task's role heads (``_enqueue``'s reverse)."""
        for role in roles.split():
            tx.run(
                "ready_remove", role=role, sort_key=sort_key, created_at=created_at, task_id=task_id
            )

    def _check_role(self, tx: Tx, role: str) -> None:
        cached = self._settings_cache
        if cached is not None and role in cached[1].role_keywords:
            return  # a role removed since is harmless: it only loses its bonus
        roles = self._settings_in(tx).roles
        if role not in roles:
            raise InvalidInputError(
                f"role must be one of {', '.join(roles)}; got {role!r:.40}", field="role"
            )

    def _requeue(
        self, tx: Tx, row: Any, now: float, *, kind: str, error: str, counts: bool, **data: Any
    ) -> Task:
        """Return a held task to pending, or fail it when it has used its attempts
        and ``counts`` (a lost lease counts; a voluntary release does not)."""
        if counts and row["attempts"] >= row["max_attempts"]:
            new = tx.one("task_fail_final", id=row["id"], error=error, now=now)
            self._event(tx, now, kind, row["assigned_to"], row["id"], outcome="failed", **data)
        else:
            new = tx.one("task_requeue", id=row["id"], error=error or None, now=now)
            self._enqueue(tx, row["id"], row["sort_key"], row["created_at"], row["roles"])
            self._event(tx, now, kind, row["assigned_to"], row["id"], outcome="pending", **data)
        return task_from_row(new)

    def _release_all(
        self, tx: Tx, node: Any, now: float, *, kind: str, counts: bool, **data: Any
    ) -> list[Task]:
        return [
            self._requeue(
                tx,
                row,
                now,
                kind=kind,
                error=f"{kind}: holder {node['id']} {data['reason']}",
                counts=counts,
                attempt=row["attempts"],
                epoch=row["epoch"],
                **data,
            )
            for row in tx.all("tasks_held_by_for_update", node_id=node["id"])
        ]

    # --- settings -------------------------------------------------------------------
    def settings(self) -> Settings:
        with self._read() as tx:
            return self._settings_in(tx)

    def update_settings(self, changes: dict[str, Any], now: float) -> Settings:
        changes = check_changes(changes)
        with self._write() as tx:
            # One change at a time (each gets its own settings_version), and none
            # while a registration checks max_agents.
            tx.one("lock_registry")
            old = self._settings_in(tx)
            for key, value in changes.items():
                tx.run("settings_put", key=key, value=_dumps(value))
            version = (self._meta_int(tx, "settings_version") or 0) + 1
            tx.run("meta_put", key="settings_version", value=str(version))
            new = settings_from_rows((r["key"], r["value"]) for r in tx.all("settings_all"))
            if "role_keywords" in changes and new.role_keywords != old.role_keywords:
                self._reindex_roles(tx, new)
            if timing_changed(changes):
                for row in tx.all("nodes_live_for_update"):
                    window = lifecycle.liveness_window(row["heartbeat_interval"], new)
                    seen = last_seen(
                        row["last_activity"], row["last_heartbeat"], row["registered_at"]
                    )
                    tx.run(
                        "node_set_window",
                        live_window=window,
                        dead_at=seen + window,
                        incarnation=row["incarnation"],
                    )
            self._event(tx, now, "settings_changed", changes=changes)
            self._settings_cache = None
            return new

    def _meta_int(self, tx: Tx, key: str) -> int | None:
        row = tx.one("meta_get", key=key)
        return int(row["value"]) if row else None

    def _reindex_roles(self, tx: Tx, settings: Settings) -> None:
        tx.run("ready_clear")
        for row in tx.all("tasks_pending_all"):
            roles = scoring.task_roles(
                row["title"], row["description"], settings.role_keywords, row["role"]
            )
            tx.run("task_set_roles", id=row["id"], roles=roles)
            self._enqueue(tx, row["id"], row["sort_key"], row["created_at"], roles)

    # --- nodes ----------------------------------------------------------------------
    def register_node(self, spec: NodeSpec, now: float) -> Registered:
        with self._write() as tx:
            tx.one("lock_registry")
            s = self._settings_in(tx)
            window = lifecycle.liveness_window(spec.heartbeat_interval, s)
            strength = spec.strength or lifecycle.derive_strength(spec.model, s.model_strengths)
            params = dict(
                role=spec.role,
                model=spec.model,
                strength=strength,
                heartbeat_interval=spec.heartbeat_interval,
                live_window=window,
                dead_at=now + window,
                host=spec.host,
                pid=spec.pid,
                now=now,
            )
            existing = tx.one("node_live_for_update", id=spec.id)
            live = tx.one("nodes_count_live")["n"]
            if existing is not None:
                row = self._reregister(tx, existing, spec, params, live, s, now)
            else:
                if not lifecycle.registration_allowed(spec.role, live, s.max_agents):
                    raise CapacityError(capacity_error_text(s.max_agents))
                last = tx.one("events_last")
                status = lifecycle.initial_status(spec.role)
                row = tx.one(
                    "node_insert",
                    id=spec.id,
                    cursor=last["seq"] if last else 0,
                    status=status,
                    idle_since=now if status == "idle" else None,
                    **params,
                )
                live += 1
                self._event(
                    tx,
                    now,
                    "node_registered",
                    spec.id,
                    role=spec.role,
                    model=spec.model,
                    strength=strength,
                    incarnation=row["incarnation"],
                )
            if spec.role == MANAGER_ROLE:
                md = self._meta(tx, "cluster_metadata")
                if md.get("ask_user"):
                    md.update(ask_user=False, ask_user_reason=None, manager_id=spec.id)
                    tx.run("meta_put", key="cluster_metadata", value=_dumps(md))
            node = self._node(tx, row)
            return Registered(
                **{f: getattr(node, f) for f in node.__dataclass_fields__},
                active_nodes=live,
                max_agents=s.max_agents,
            )

    def _reregister(
        self,
        tx: Tx,
        old: Any,
        spec: NodeSpec,
        params: dict[str, Any],
        live: int,
        s: Settings,
        now: float,
    ) -> Any:
        """A live node registering again: the cap when it leaves a manager's role for
        a counted one, and the status its new role gives it (``lifecycle``)."""
        if not lifecycle.reregistration_allowed(old["role"], spec.role, live, s.max_agents):
            raise CapacityError(capacity_error_text(s.max_agents))
        holds = tx.one("node_held_task", id=spec.id) is not None
        status = lifecycle.status_on_reregistering(old["status"], old["role"], spec.role, holds)
        row = tx.one(
            "node_reregister",
            incarnation=old["incarnation"],
            status=status,
            idle_since=lifecycle.next_idle_since(old["status"], old["idle_since"], status, now),
            **params,
        )
        if spec.role == old["role"]:
            self._event(tx, now, "node_reregistered", spec.id, role=spec.role)
        else:
            self._event(tx, now, "node_reregistered", spec.id, role=spec.role, old_role=old["role"])
        if status != old["status"]:
            self._event(tx, now, "node_status", spec.id, old=old["status"], new=status)
        return row

    def get_node(self, node_id: str) -> Node:
        with self._read() as tx:
            row = tx.one("node_latest", id=node_id)
        if row is None:
            raise NotFoundError(f"unknown node {node_id}", field="node_id")
        return node_from_row(row)

    def list_nodes(self, status: str | None = None, role: str | None = None) -> list[Node]:
        with self._read() as tx:
            rows = tx.all("nodes_all_latest")
        nodes = [node_from_row(r) for r in rows]
        return [
            n
            for n in nodes
            if (status is None or n.status == status) and (role is None or n.role == role)
        ]

    def set_status(
        self, node_id: str, status: str, current_task_id: int | None, now: float
    ) -> Node:
        with self._write() as tx:
            old = self._live(tx, node_id, "node_live_for_update")
            if current_task_id is not None and tx.one("task_get", id=current_task_id) is None:
                raise NotFoundError(f"unknown task {current_task_id}", field="current_task_id")
            if status == "idle":
                held = tx.one("node_held_task", id=node_id)
                if not lifecycle.status_allowed(status, held is not None):
                    raise ConflictError(
                        f"node {node_id} holds task {held['t']} (in progress), so it cannot be"
                        f" idle: finish it with complete_task, give it up with fail_task, or"
                        f" say waiting to keep it",
                        field="status",
                    )
            row = tx.one(
                "node_update_status",
                status=status,
                current_task_id=current_task_id,
                idle_since=lifecycle.next_idle_since(old["status"], old["idle_since"], status, now),
                terminated_at=now if status == "terminated" else None,
                now=now,
                incarnation=old["incarnation"],
            )
            if (old["status"], old["current_task_id"]) != (status, current_task_id):
                self._event(  # a status set again is no change: no event
                    tx, now, "node_status", node_id, current_task_id, old=old["status"], new=status
                )
            if status == "terminated":
                self._release_all(
                    tx, old, now, kind="lease_released", counts=False, reason="terminated"
                )
            return self._node(tx, row)

    def heartbeat(
        self, node_id: str, payload: dict[str, Any], health: str | None, now: float
    ) -> Node:
        encoded = _dumps(payload)
        with self._write() as tx:
            # The common beat (live node, same health) is one statement; else read it.
            row = tx.one(
                "node_heartbeat_steady", id=node_id, payload=encoded, health=health, now=now
            )
            if row is None:
                old = self._live(tx, node_id, "node_live_for_update")
                row = tx.one(
                    "node_heartbeat",
                    payload=encoded,
                    health=health,
                    now=now,
                    incarnation=old["incarnation"],
                )
                new = health_after_beat(old["health"], health)
                if new != old["health"]:
                    self._event(tx, now, "node_health", node_id, old=old["health"], new=new)
            return self._node(tx, row)

    def touch(self, node_id: str, now: float) -> bool:
        with self._write() as tx:
            return tx.run("node_beat_by_call", id=node_id, now=now) > 0

    # --- tasks ----------------------------------------------------------------------
    def add_tasks(self, specs: list[TaskSpec], now: float) -> list[Task]:
        with self._write() as tx:
            s = self._settings_in(tx)
            return [task_from_row(self._insert_task(tx, spec, s, now)) for spec in specs]

    def _insert_task(self, tx: Tx, spec: TaskSpec, s: Settings, now: float) -> Any:
        """Put one task on the board (its roles by ``scoring.task_roles``, its role
        heads, its ``task_added`` event); the inserted row."""
        roles = scoring.task_roles(spec.title, spec.description, s.role_keywords, spec.role)
        key = scoring.sort_key(spec.priority, now)
        row = tx.one(
            "task_insert",
            title=spec.title,
            description=spec.description,
            priority=spec.priority,
            role=spec.role,
            roles=roles,
            max_attempts=spec.max_attempts or s.max_attempts,
            sort_key=key,
            now=now,
        )
        self._enqueue(tx, row["id"], key, now, roles)
        self._event(
            tx, now, "task_added", None, row["id"], priority=spec.priority, roles=roles.split()
        )
        return row

    def get_task(self, task_id: int) -> Task:
        with self._read() as tx:
            row = tx.one("task_get", id=task_id)
        if row is None:
            raise NotFoundError(f"unknown task {task_id}", field="task_id")
        return task_from_row(row)

    def list_tasks(
        self, status: str | None = None, assigned_to: str | None = None, limit: int = 100
    ) -> list[Task]:
        with self._read() as tx:
            if status is not None and assigned_to is not None:
                rows = tx.all(
                    "tasks_by_status_holder", status=status, assigned_to=assigned_to, limit=limit
                )
            elif status == "pending":
                rows = tx.all("tasks_pending", limit=limit)
            elif status == "in_progress":
                rows = tx.all("tasks_in_progress", limit=limit)
            elif status is not None:
                rows = tx.all("tasks_by_status", status=status, limit=limit)
            elif assigned_to is not None:
                rows = tx.all("tasks_by_holder", assigned_to=assigned_to, limit=limit)
            else:
                rows = tx.all("tasks_all", limit=limit)
        return [task_from_row(r) for r in rows]

    def _refuse(self, tx: Tx, task_id: int, node_id: str, epoch: int | None) -> None:
        row = tx.one("task_get", id=task_id)
        if row is None:
            raise NotFoundError(f"unknown task {task_id}", field="task_id")
        if row["status"] != "in_progress":
            raise LeaseError(
                f"task {task_id} is {row['status']}, not held by {node_id}; claim a task first",
                field="task_id",
            )
        if row["assigned_to"] != node_id:
            raise LeaseError(
                f"task {task_id} is held by {row['assigned_to']}, not {node_id}", field="node_id"
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

    def fail(
        self, task_id: int, node_id: str, epoch: int | None, error: str, retry: bool, now: float
    ) -> Task:
        with self._write() as tx:
            # Node row, then its task: the order every transaction locks them in, so
            # a session stopped inside this one holds its node too (the reaper skips
            # that node rather than wait on the task).
            tx.one("node_live_for_update", id=node_id)
            row = tx.one("task_held_for_update", id=task_id, node_id=node_id)
            if row is None or (epoch is not None and row["epoch"] != epoch):
                self._refuse(tx, task_id, node_id, epoch)
            if retry and row["attempts"] < row["max_attempts"]:
                task = self._requeue(
                    tx,
                    row,
                    now,
                    kind="task_failed",
                    error=error,
                    counts=False,
                    attempt=row["attempts"],
                    error_text=error,
                )
            else:
                task = task_from_row(tx.one("task_fail_final", id=task_id, error=error, now=now))
                self._event(
                    tx,
                    now,
                    "task_failed",
                    node_id,
                    task_id,
                    outcome="failed",
                    attempt=row["attempts"],
                    error_text=error,
                )
            tx.run(
                "node_done_with",
                id=node_id,
                task_id=task_id,
                now=now,
                stamp=1 - lifecycle.STAMP_FRACTION,
            )
            return task

    def release_claim(
        self, task_id: int, node_id: str, epoch: int, now: float, *, before: Node | None = None
    ) -> Task:
        with self._write() as tx:
            # Node row, then its task (the lock order of every transaction).
            tx.one("node_live_for_update", id=node_id)
            row = tx.one("task_held_for_update", id=task_id, node_id=node_id)
            if row is None or row["epoch"] != epoch:
                self._refuse(tx, task_id, node_id, epoch)
            new = tx.one("task_release_claim", id=task_id, now=now)
            self._enqueue(tx, task_id, row["sort_key"], row["created_at"], row["roles"])
            if before is None:
                tx.run(
                    "node_done_with",
                    id=node_id,
                    task_id=task_id,
                    now=now,
                    stamp=1 - lifecycle.STAMP_FRACTION,
                )
            else:
                tx.run(
                    "node_release_claim",
                    id=node_id,
                    task_id=task_id,
                    status=before.status,
                    idle_since=before.idle_since,
                    current_task_id=before.current_task_id,
                )
            self._event(
                tx,
                now,
                "lease_released",
                node_id,
                task_id,
                reason="abandoned",
                outcome="pending",
                attempt=row["attempts"],
                epoch=row["epoch"],
            )
            return task_from_row(new)
