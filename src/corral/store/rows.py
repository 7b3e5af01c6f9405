"""Rows to records, and the transaction protocol every SQL adapter provides."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from corral.model import Event, Node, Task

__all__ = [
    "TASK_COLUMNS",
    "TASK_TAIL",
    "TaskRow",
    "Tx",
    "dumps",
    "event_from_row",
    "finished_task",
    "loads",
    "new_session_id",
    "node_from_row",
    "task_from_row",
    "task_from_task_row",
    "task_row",
    "task_tail",
]


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
        session_id=row["session_id"],
        progress_timeout=row["progress_timeout"],
        **_attempt(row),
        timeout=row["timeout"],
        retry_backoff=row["retry_backoff"],
        not_before=row["not_before"],
        depends_on=_ids(row["depends_on"]),
        ready_at=row["ready_at"],
    )


def _ids(text: str | None) -> tuple[int, ...]:
    """A space-separated id list (a task's ``depends_on`` column) as numbers."""
    return tuple(int(i) for i in text.split()) if text else ()


def _attempt(row: Any) -> dict[str, Any]:
    """The attempt in progress's progress and stuck fields; None for a task not in
    progress (what the hot statements' records say: a claim clears them, and a
    finished task has no attempt in progress)."""
    if row["status"] != "in_progress":
        return {}
    return {
        "progress_at": row["progress_at"],
        "progress_note": row["progress_note"],
        "stuck_since": row["stuck_since"],
    }


class TaskRow(NamedTuple):
    """A tasks row as the hot statements return it, read by name (``held.epoch``,
    ``held._replace(status="done")``). Its first fields are the table's leading
    columns in table order in both schemas (``TASK_COLUMNS``; tests check it), so a
    row that starts with them is sliced at once; the last two (``TASK_TAIL``) are
    columns added later, read at their place in the table (``task_row``'s ``tail``)."""

    id: int
    title: str
    description: str
    priority: str
    role: str | None
    roles: str
    status: str
    assigned_to: str | None
    epoch: int
    attempts: int
    max_attempts: int
    sort_key: float
    created_at: float
    claimed_at: float | None
    updated_at: float
    finished_at: float | None
    result: str | None
    error: str | None
    session_id: str | None
    progress_timeout: float | None
    timeout: float | None
    retry_backoff: float | None
    not_before: float | None
    depends_on: str
    ready_at: float | None


TASK_TAIL: tuple[str, ...] = (
    "session_id",
    "progress_timeout",
    "timeout",
    "retry_backoff",
    "not_before",
    "depends_on",
    "ready_at",
)
TASK_COLUMNS: tuple[str, ...] = TaskRow._fields[: -len(TASK_TAIL)]
_TASK_WIDTH = len(TASK_COLUMNS)


def task_tail(columns: Sequence[str]) -> tuple[int, ...]:
    """Where ``TASK_TAIL``'s columns are among the tasks table's ``columns`` (in table
    order): ``task_row``'s ``tail``."""
    return tuple(list(columns).index(c) for c in TASK_TAIL)


def task_row(values: Sequence[Any], start: int, tail: tuple[int, ...]) -> TaskRow:
    """The ``TaskRow`` whose columns start at ``values[start]`` (a whole tasks row
    from there), its ``TASK_TAIL`` at ``start + tail``'s places."""
    return TaskRow._make((*values[start : start + _TASK_WIDTH], *[values[start + i] for i in tail]))


# Task's slot setters, one per field: a task is built without the frozen dataclass's
# __init__ (one object.__setattr__ per field, a large part of its cost on the hot
# path), and with one call per field written out (cheaper than a loop over them).
_TASK_FIELDS = (
    "id",
    "title",
    "priority",
    "status",
    "description",
    "role",
    "roles",
    "assigned_to",
    "epoch",
    "attempts",
    "max_attempts",
    "created_at",
    "claimed_at",
    "updated_at",
    "finished_at",
    "result",
    "error",
    "session_id",
    "progress_timeout",
    "progress_at",
    "progress_note",
    "stuck_since",
    "timeout",
    "retry_backoff",
    "not_before",
    "depends_on",
    "ready_at",
)
if tuple(f.name for f in dataclasses.fields(Task)) != _TASK_FIELDS:  # pragma: no cover
    raise RuntimeError("task_from_task_row must set every field of Task")
(
    _set_id,
    _set_title,
    _set_priority,
    _set_status,
    _set_description,
    _set_role,
    _set_roles,
    _set_assigned_to,
    _set_epoch,
    _set_attempts,
    _set_max_attempts,
    _set_created_at,
    _set_claimed_at,
    _set_updated_at,
    _set_finished_at,
    _set_result,
    _set_error,
    _set_session_id,
    _set_progress_timeout,
    _set_progress_at,
    _set_progress_note,
    _set_stuck_since,
    _set_timeout,
    _set_retry_backoff,
    _set_not_before,
    _set_depends_on,
    _set_ready_at,
) = (Task.__dict__[name].__set__ for name in _TASK_FIELDS)
_new = object.__new__


def task_from_task_row(r: TaskRow) -> Task:
    """``task_from_row`` for a ``TaskRow``: its fields unpacked at once (cheaper than
    one attribute read each), in ``TaskRow``'s order (checked below)."""
    (
        id_,
        title,
        description,
        priority,
        role,
        roles,
        status,
        assigned_to,
        epoch,
        attempts,
        max_attempts,
        _,
        created_at,
        claimed_at,
        updated_at,
        finished_at,
        result,
        error,
        session_id,
        progress_timeout,
        timeout,
        retry_backoff,
        not_before,
        depends_on,
        ready_at,
    ) = r
    task = _new(Task)
    _set_id(task, id_)
    _set_title(task, title)
    _set_priority(task, priority)
    _set_status(task, status)
    _set_description(task, description)
    _set_role(task, role)
    _set_roles(task, tuple(roles.split()) if roles else ())
    _set_assigned_to(task, assigned_to)
    _set_epoch(task, epoch)
    _set_attempts(task, attempts)
    _set_max_attempts(task, max_attempts)
    _set_created_at(task, created_at)
    _set_claimed_at(task, claimed_at)
    _set_updated_at(task, updated_at)
    _set_finished_at(task, finished_at)
    _set_result(task, None if result is None else _loads(result))
    _set_error(task, error)
    _set_session_id(task, session_id)
    _set_progress_timeout(task, progress_timeout)
    # A claim clears the attempt's progress, and a finished task shows none.
    _set_progress_at(task, None)
    _set_progress_note(task, None)
    _set_stuck_since(task, None)
    _set_timeout(task, timeout)
    _set_retry_backoff(task, retry_backoff)
    _set_not_before(task, not_before)
    _set_depends_on(task, _ids(depends_on) if depends_on else ())
    _set_ready_at(task, ready_at)
    return task


_unpacked = task_from_task_row.__code__.co_varnames[1:26]
if _unpacked != ("id_", *TaskRow._fields[1:11], "_", *TaskRow._fields[12:]):  # pragma: no cover
    raise RuntimeError("task_from_task_row must unpack TaskRow's fields in their order")


_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}
_urandom = os.urandom
_SESSION_IDS_AT_ONCE = 64  # made from one os.urandom call (a system call each)
_session_ids: list[str] = []
# A forked child must not hand out its parent's next ids: it makes its own.
os.register_at_fork(after_in_child=_session_ids.clear)


def new_session_id() -> str:
    """A new session id for a first claim: a random UUID (version 4, RFC 4122's
    variant) in its canonical text, from 16 bytes of ``os.urandom`` (as
    ``uuid.uuid4``), written out without building a ``uuid.UUID`` (a claim makes one).
    They are made ``_SESSION_IDS_AT_ONCE`` at a time, from one read of the system's
    random source."""
    ids = _session_ids
    if not ids:
        h = _urandom(16 * _SESSION_IDS_AT_ONCE).hex()
        ids.extend(
            f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}"
            f"-{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
            for i in range(0, len(h), 32)
        )
    try:
        return ids.pop()
    except IndexError:  # pragma: no cover - another thread took the last ones
        return new_session_id()


def finished_task(held: TaskRow, result: str | None, now: float) -> Task:
    """The task of a claimed row ``held`` as its completion leaves it (the completion
    statements' SET: status done, updated_at and finished_at now, the result, no
    error): the claim's task with those fields set by name (no row made between)."""
    task = task_from_task_row(held)
    _set_status(task, "done")
    _set_updated_at(task, now)
    _set_finished_at(task, now)
    _set_result(task, None if result is None else _loads(result))
    _set_error(task, None)
    return task


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
