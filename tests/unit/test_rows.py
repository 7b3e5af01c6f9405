"""The hot path's records: a task built from a ``TaskRow`` is a ``Task`` in every way
(equal, frozen, hashable, copied, pickled, replaced), and a session id is a fresh
version-4 UUID, in a forked child too."""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any

from corral.model import Node, Task
from corral.store.rows import (
    TaskRow,
    finished_task,
    new_session_id,
    node_from_row,
    task_from_task_row,
)
from tests.support.records import assert_the_same_record

_ROW = TaskRow(
    id=7,
    title="implement it",
    description="the parser",
    priority="high",
    role=None,
    roles="developer tester",
    status="in_progress",
    assigned_to="A",
    epoch=3,
    attempts=2,
    max_attempts=5,
    sort_key=12.5,
    created_at=100.0,
    claimed_at=110.0,
    updated_at=110.0,
    finished_at=None,
    result=None,
    error="an earlier attempt failed",
    session_id="1b4e28ba-2fa1-41d2-883f-0016d3cca427",
    progress_timeout=30.0,
    timeout=60.0,
    retry_backoff=2.0,
    not_before=None,
    depends_on="3 5",
    ready_at=None,
)

_EXPECTED = Task(
    id=7,
    title="implement it",
    priority="high",
    status="in_progress",
    description="the parser",
    roles=("developer", "tester"),
    assigned_to="A",
    epoch=3,
    attempts=2,
    max_attempts=5,
    created_at=100.0,
    claimed_at=110.0,
    updated_at=110.0,
    error="an earlier attempt failed",
    session_id="1b4e28ba-2fa1-41d2-883f-0016d3cca427",
    progress_timeout=30.0,
    timeout=60.0,
    retry_backoff=2.0,
    depends_on=(3, 5),
)


def test_a_task_from_a_row_is_a_task_in_every_way() -> None:
    task = task_from_task_row(_ROW)
    assert_the_same_record(task, _EXPECTED)
    assert dataclasses.replace(task, epoch=4).epoch == 4
    assert dataclasses.asdict(task)["depends_on"] == (3, 5)


_NODE_ROW: dict[str, Any] = {
    "id": "A",
    "role": "developer",
    "status": "working",
    "model": "m",
    "strength": "strong",
    "current_task_id": None,
    "idle_since": None,
    "last_activity": 105.0,
    "last_heartbeat": 104.0,
    "heartbeat_interval": 5.0,
    "health": "ok",
    "heartbeat": '{"step": 2}',
    "host": "h1",
    "pid": 4242,
    "registered_at": 100.0,
    "terminated_at": None,
    "dead_at": 120.0,
    "incarnation": 3,
    "cursor": 9,
    "held_task_id": 7,
}


def test_a_node_from_a_row_is_a_node_in_every_way() -> None:
    """Built on Node's slots (no __init__), it is the Node its constructor makes: every
    field set (a field added to Node and not to node_from_row fails here)."""
    node = node_from_row(_NODE_ROW)
    fields = {k: v for k, v in _NODE_ROW.items() if k != "held_task_id"}
    expected = Node(**{**fields, "current_task_id": 7, "heartbeat": {"step": 2}})
    assert_the_same_record(node, expected, hashable=False)  # a dict field: no hash
    assert node.cancelled_tasks == [] and node.last_seen == 105.0
    assert dataclasses.replace(node, cancelled_tasks=[7]).cancelled_tasks == [7]
    # Its own list and dict, as a constructor's default_factory gives each record.
    other = node_from_row(_NODE_ROW)
    assert other.cancelled_tasks is not node.cancelled_tasks
    assert other.heartbeat is not node.heartbeat
    # The current task it named wins over the one it holds.
    assert node_from_row({**_NODE_ROW, "current_task_id": 9}).current_task_id == 9


def test_a_finished_task_is_the_claim_with_what_the_completion_sets() -> None:
    done = finished_task(_ROW, '{"ok": true}', 120.0)
    assert type(done) is Task
    assert done == dataclasses.replace(
        _EXPECTED,
        status="done",
        updated_at=120.0,
        finished_at=120.0,
        result={"ok": True},
        error=None,
    )


def test_session_ids_are_fresh_version_4_uuids_in_a_forked_child_too() -> None:
    ids = [new_session_id() for _ in range(300)]  # several batches of os.urandom
    assert len(set(ids)) == len(ids)
    for text in ids:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 4 and u.variant == uuid.RFC_4122
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, new_session_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != new_session_id()  # not the id the parent hands out next
    assert uuid.UUID(child).version == 4
