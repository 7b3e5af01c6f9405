"""The remote client's records from JSON (``remote_calls.build``): a slotted record
filled field by field, then given its class, is the record its constructor makes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import pytest

from corral.model import Node, Task
from corral.remote_calls import build, converter
from tests.support.records import assert_the_same_record


def _answer(record: object) -> dict[str, object]:
    """``record`` as a server's answer carries it: through JSON."""
    d: dict[str, object] = json.loads(json.dumps(dataclasses.asdict(record)))  # type: ignore[call-overload]
    return d


def test_a_task_from_its_json_is_the_task_in_every_way() -> None:
    task = Task(
        id=7,
        title="implement it",
        priority="high",
        status="in_progress",
        roles=("developer", "tester"),
        assigned_to="A",
        epoch=3,
        result="ok",
        depends_on=(3, 5),
    )
    got = converter(Task)(_answer(task))
    assert_the_same_record(got, task)
    assert dataclasses.replace(got, epoch=4).epoch == 4


def test_fields_absent_take_their_defaults_and_unknown_ones_are_ignored() -> None:
    first = build(Node, {"id": "A", "role": "developer", "status": "idle", "newer": 1})
    second = build(Node, {"id": "A", "role": "developer", "status": "idle"})
    assert first == Node(id="A", role="developer", status="idle") == second
    # Each record its own list and dict, as a default_factory gives them.
    assert first.heartbeat is not second.heartbeat
    assert first.cancelled_tasks is not second.cancelled_tasks


def test_an_answer_with_every_field_and_more_is_the_record() -> None:
    """A server's answer has every field (the path taken at once, ``_filler``), and a
    newer server's may have more: they are ignored there too."""
    node = Node(id="A", role="developer", status="working", heartbeat={"cpu": 1})
    got = build(Node, {**_answer(node), "newer": 1})
    assert_the_same_record(got, node, hashable=False)  # a dict field: no hash
    assert got.heartbeat is not node.heartbeat  # the answer's own dict, not shared


def test_a_required_field_absent_is_the_constructors_error() -> None:
    with pytest.raises(TypeError, match="title"):
        build(Task, {"id": 1, "priority": "high", "status": "pending"})


@dataclass(frozen=True)
class _Plain:  # no slots: built by its __init__
    a: int
    b: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Checked:  # a __post_init__: built by its __init__, which runs it
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")


def test_records_with_more_to_do_are_built_by_their_constructor() -> None:
    assert build(_Plain, {"a": 1, "c": 2}) == _Plain(1)
    with pytest.raises(ValueError, match="negative"):
        build(_Checked, {"a": -1})
