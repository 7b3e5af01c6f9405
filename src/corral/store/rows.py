"""Rows to records, and the transaction protocol every SQL adapter provides."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple, Protocol, cast

from corral.model import Event, Node, Task, unfrozen_twin

__all__ = [
    "TASK_COLUMNS",
    "TASK_TAIL",
    "TaskRow",
    "Tx",
    "as_task_row",
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


def _twin(cls: type) -> type:
    """``model.unfrozen_twin(cls)``, which the records built here must have."""
    twin = unfrozen_twin(cls)
    if twin is None:  # pragma: no cover - a change of the record class
        raise RuntimeError(f"{cls.__name__} must be a plain slotted dataclass")
    return twin


_NodeBuilding = _twin(Node)  # node records: nine tenths of their cost was __init__


def node_from_row(row: Any, held: int | None = None) -> Node:
    """A node; its current task is the one it named, else the newest it holds
    (``held``, or the row's ``held_task_id`` column when the query computed it)."""
    current = row["current_task_id"]
    if current is None:
        current = held
    # sqlite3.Row's ``in`` looks at values, so ask its keys.
    if current is None and "held_task_id" in row.keys():  # noqa: SIM118
        current = row["held_task_id"]
    n: Any = object.__new__(_NodeBuilding)
    n.id = row["id"]
    n.role = row["role"]
    n.status = row["status"]
    n.model = row["model"]
    n.strength = row["strength"]
    n.current_task_id = current
    n.idle_since = row["idle_since"]
    n.last_activity = row["last_activity"]
    n.last_heartbeat = row["last_heartbeat"]
    n.heartbeat_interval = row["heartbeat_interval"]
    n.health = row["health"]
    n.heartbeat = _loads(row["heartbeat"]) or {}
    n.host = row["host"]
    n.pid = row["pid"]
    n.registered_at = row["registered_at"]
    n.terminated_at = row["terminated_at"]
    n.dead_at = row["dead_at"]
    n.incarnation = row["incarnation"]
    n.cursor = row["cursor"]
    n.cancelled_tasks = []
    n.__class__ = Node  # a Node now, frozen (tests/unit/test_rows.py)
    node: Node = n
    return node


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


# A row holding ``TaskRow``'s columns, in its order, as a ``TaskRow``: tuple.__new__
# called from C, not ``TaskRow._make``'s Python frame (the hot statements' rows).
as_task_row: Callable[[Sequence[Any]], TaskRow] = cast(Any, partial(tuple.__new__, TaskRow))


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


_Building = _twin(Task)  # task records on the hot path
_new = object.__new__


def _building(r: TaskRow) -> Any:
    """A ``_Building`` with every field of ``r``'s task set: its fields unpacked at
    once (cheaper than one attribute read each), in ``TaskRow``'s order (checked
    below)."""
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
    t: Any = _new(_Building)
    t.id = id_
    t.title = title
    t.priority = priority
    t.status = status
    t.description = description
    t.role = role
    t.roles = tuple(roles.split()) if roles else ()
    t.assigned_to = assigned_to
    t.epoch = epoch
    t.attempts = attempts
    t.max_attempts = max_attempts
    t.created_at = created_at
    t.claimed_at = claimed_at
    t.updated_at = updated_at
    t.finished_at = finished_at
    t.result = None if result is None else _loads(result)
    t.error = error
    t.session_id = session_id
    t.progress_timeout = progress_timeout
    # A claim clears the attempt's progress, and a finished task shows none.
    t.progress_at = None
    t.progress_note = None
    t.stuck_since = None
    t.timeout = timeout
    t.retry_backoff = retry_backoff
    t.not_before = not_before
    t.depends_on = _ids(depends_on) if depends_on else ()
    t.ready_at = ready_at
    return t


_unpacked = _building.__code__.co_varnames[1:26]
if ("id_", *TaskRow._fields[1:11], "_", *TaskRow._fields[12:]) != _unpacked:  # pragma: no cover
    raise RuntimeError("_building must unpack TaskRow's fields in their order")


def task_from_task_row(r: TaskRow) -> Task:
    """``task_from_row`` for a ``TaskRow``."""
    t = _building(r)
    t.__class__ = Task
    task: Task = t  # a Task now (no typing.cast: a call per record)
    return task


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
    t = _building(held)
    t.status = "done"
    t.updated_at = now
    t.finished_at = now
    t.result = None if result is None else _loads(result)
    t.error = None
    t.__class__ = Task
    task: Task = t  # a Task now (no typing.cast: a call per record)
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
