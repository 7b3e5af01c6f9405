"""The settings and the nodes: registering, reading, status, heartbeats. Plain
functions over a ``Db``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corral import budgets, lifecycle
from corral.config import check_changes, settings_from_rows, timing_changed
from corral.defaults import MANAGER_ROLE
from corral.errors import CapacityError, ConflictError, NotFoundError
from corral.health import health_after_beat
from corral.model import Node, Registered, Settings, last_seen
from corral.render import capacity_error_text, model_cap_error_text
from corral.store import sqltasks, sqlusage
from corral.store.base import NodeSpec
from corral.store.rows import Tx, dumps, node_from_row
from corral.store.sqldb import Db, live, meta, meta_int, node_record

__all__ = [
    "get_node",
    "heartbeat",
    "list_nodes",
    "register_node",
    "set_status",
    "settings",
    "touch",
    "update_settings",
]


def settings(db: Db) -> Settings:
    with db.read() as tx:
        return db.settings_in(tx)


def update_settings(db: Db, changes: dict[str, Any], now: float, actor: str) -> Settings:
    changes = check_changes(changes)
    with db.write() as tx:
        # One change at a time (each gets its own settings_version), and none
        # while a registration checks max_agents.
        tx.one("lock_registry")
        old = db.settings_in(tx)
        for key, value in changes.items():
            tx.run("settings_put", key=key, value=dumps(value))
        version = (meta_int(tx, "settings_version") or 0) + 1
        tx.run("meta_put", key="settings_version", value=str(version))
        new = settings_from_rows((r["key"], r["value"]) for r in tx.all("settings_all"))
        if "role_keywords" in changes and new.role_keywords != old.role_keywords:
            sqltasks.reindex_roles(db, tx, new)
        if timing_changed(changes):
            for row in tx.all("nodes_live_for_update"):
                window = lifecycle.liveness_window(row["heartbeat_interval"], new)
                seen = last_seen(row["last_activity"], row["last_heartbeat"], row["registered_at"])
                tx.run(
                    "node_set_window",
                    live_window=window,
                    dead_at=seen + window,
                    incarnation=row["incarnation"],
                )
        db.event(tx, now, "settings_changed", changes=changes, actor=actor)
        db.settings_cache = None
        return new


def register_node(db: Db, spec: NodeSpec, now: float) -> Registered:
    with db.write() as tx:
        tx.one("lock_registry")
        s = db.settings_in(tx)
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
        sqlusage.before_registration(db, tx, spec.id, spec.role, spec.model, existing)
        live = tx.one("nodes_count_live")["n"]
        _check_model_cap(tx, spec, existing, s)
        if existing is not None:
            row = _reregister(db, tx, existing, spec, params, live, s, now)
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
            db.event(
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
            md = meta(tx, "cluster_metadata")
            if md.get("ask_user"):
                md.update(ask_user=False, ask_user_reason=None, manager_id=spec.id)
                tx.run("meta_put", key="cluster_metadata", value=dumps(md))
        node = node_record(tx, row)
        return Registered(
            **{f: getattr(node, f) for f in node.__dataclass_fields__},
            active_nodes=live,
            max_agents=s.max_agents,
        )


def _check_model_cap(tx: Tx, spec: NodeSpec, existing: Any, s: Settings) -> None:
    """``model_caps``: one more live node of a capped model than its cap is refused
    as ``max_agents`` refuses (``CapacityError``), under the same registry lock (a
    bootstrap manager is always admitted; a live node registering again with its
    model is not one more)."""
    model = spec.model
    if model is None or model not in s.model_caps or spec.role == MANAGER_ROLE:
        return
    if existing is not None and existing["model"] == model:
        return
    live_of_model = sqlusage.model_live_count(tx, model)
    if budgets.model_cap_reached(model, live_of_model, s.model_caps):
        raise CapacityError(model_cap_error_text(model, s.model_caps[model]))


def _reregister(
    db: Db,
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
        db.event(tx, now, "node_reregistered", spec.id, role=spec.role)
    else:
        db.event(tx, now, "node_reregistered", spec.id, role=spec.role, old_role=old["role"])
    if status != old["status"]:
        db.event(tx, now, "node_status", spec.id, old=old["status"], new=status)
    return row


def get_node(db: Db, node_id: str) -> Node:
    with db.read() as tx:
        row = tx.one("node_latest", id=node_id)
    if row is None:
        raise NotFoundError(f"unknown node {node_id}", field="node_id")
    return node_from_row(row)


def list_nodes(db: Db, status: str | None = None, role: str | None = None) -> list[Node]:
    with db.read() as tx:
        rows = tx.all("nodes_all_latest")
    nodes = [node_from_row(r) for r in rows]
    return [
        n
        for n in nodes
        if (status is None or n.status == status) and (role is None or n.role == role)
    ]


def set_status(
    db: Db,
    node_id: str,
    status: str,
    current_task_id: int | None,
    now: float,
    actor: str | None = None,
) -> Node:
    with db.write() as tx:
        old = live(tx, node_id, "node_live_for_update")
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
            by = {} if actor is None else {"actor": actor}
            db.event(  # a status set again is no change: no event
                tx,
                now,
                "node_status",
                node_id,
                current_task_id,
                old=old["status"],
                new=status,
                **by,
            )
        if status == "terminated":
            sqltasks.release_all(
                db, tx, old, now, kind="lease_released", counts=False, reason="terminated"
            )
        return node_record(tx, row)


def heartbeat(
    db: Db,
    node_id: str,
    payload: dict[str, Any],
    health: str | None,
    now: float,
    usage: dict[str, Any] | None = None,
) -> Node:
    encoded = dumps(payload)
    with db.write() as tx:
        # The common beat (live node, same health) is one statement; else read it.
        row = tx.one("node_heartbeat_steady", id=node_id, payload=encoded, health=health, now=now)
        if row is None:
            old = live(tx, node_id, "node_live_for_update")
            row = tx.one(
                "node_heartbeat",
                payload=encoded,
                health=health,
                now=now,
                incarnation=old["incarnation"],
            )
            new = health_after_beat(old["health"], health)
            if new != old["health"]:
                db.event(tx, now, "node_health", node_id, old=old["health"], new=new)
        if usage is not None:
            sqlusage.record(db, tx, node_id, None, usage, now)
        node = node_record(tx, row)
        named = _task_ids(payload.get("current_tasks"))
        if not named or named == [node.current_task_id]:
            return node  # it names nothing, or the one task it holds: none cancelled
        # Tasks the worker still runs that the operator cancelled: the answer tells it.
        found = tx.all("tasks_cancelled_of", ids=dumps(named), node_id=node_id)
        return replace(node, cancelled_tasks=[r["id"] for r in found]) if found else node


def _task_ids(tasks: Any) -> list[int]:
    """The task ids a heartbeat's ``current_tasks`` names (``"3"``, ``"task-3"`` or 3;
    checked by the service)."""
    if not isinstance(tasks, list):
        return []
    return [int(str(t).removeprefix("task-")) for t in tasks]


def touch(db: Db, node_id: str, now: float) -> bool:
    with db.write() as tx:
        return tx.run("node_beat_by_call", id=node_id, now=now) > 0
