"""Rows to records, and the transaction protocol every SQL adapter provides."""

from __future__ import annotations

import json
from typing import Any, Protocol

from corral.model import Event, Node, Task

__all__ = ["Tx", "dumps", "event_from_row", "loads", "node_from_row", "task_from_row"]


class Tx(Protocol):
    """A transaction: runs named queries. Rows support ``row["column"]``."""

    def one(self, name: str, **params: Any) -> Any: ...
    def all(self, name: str, **params: Any) -> list[Any]: ...
    def run(self, name: str, **params: Any) -> int: ...


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def node_from_row(row: Any, held: int | None = None) -> Node:
    """A node; its current task is the one it named, else the newest it holds
    (``held``, or the row's ``held_task_id`` column when the query computed it)."""
    current = row["current_task_id"]
    if current is None:
        current = held
    # sqlite3.Row's ``in`` looks at values, so ask its keys.
    if current is None and "held_task_id" in row.keys():  # noqa: SIM118
        current = row["held_task_id"]
    return Node(
        id=row["id"],
        role=row["role"],
        status=row["status"],
        model=row["model"],
        strength=row["strength"],
        current_task_id=current,
        idle_since=row["idle_since"],
        last_activity=row["last_activity"],
        last_heartbeat=row["last_heartbeat"],
        heartbeat_interval=row["heartbeat_interval"],
        health=row["health"],
        heartbeat=_loads(row["heartbeat"]) or {},
        host=row["host"],
        pid=row["pid"],
        registered_at=row["registered_at"],
        terminated_at=row["terminated_at"],
        dead_at=row["dead_at"],
        incarnation=row["incarnation"],
        cursor=row["cursor"],
    )


def task_from_row(row: Any) -> Task:
    return Task(
        id=row["id"],
        title=row["title"],
        description=row["description"],
        priority=row["priority"],
        role=row["role"],
        roles=tuple(row["roles"].split()),
        status=row["status"],
        assigned_to=row["assigned_to"],
        epoch=row["epoch"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        created_at=row["created_at"],
        claimed_at=row["claimed_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        result=_loads(row["result"]),
        error=row["error"],
    )


def event_from_row(row: Any) -> Event:
    return Event(
        seq=row["seq"],
        ts=row["ts"],
        kind=row["kind"],
        node_id=row["node_id"],
        task_id=row["task_id"],
        data=_loads(row["data"]) or {},
    )


dumps = _dumps
loads = _loads
