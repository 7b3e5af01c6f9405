"""A record's ``to_dict``: every field by name, read by a getter made once per class."""

from __future__ import annotations

import dataclasses
from typing import Any

from corral.model import Node, Process, Task


def _by_fields(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def test_to_dict_is_every_field_by_name_for_each_class() -> None:
    task = Task(id=7, title="t", priority="high", status="pending", roles=("a", "b"))
    node = Node(id="A", role="developer", status="idle", heartbeat={"k": 1}, pid=9)
    process = Process(host="h", agent="a", state="RUNNING", flags=["x"])
    for _ in range(2):  # the second time from the getters made the first
        assert task.to_dict() == {**_by_fields(task), "roles": ["a", "b"], "depends_on": []}
        assert node.to_dict() == _by_fields(node)
        assert process.to_dict() == {**_by_fields(process), "flags": ["x"]}
    assert list(node.to_dict()) == [f.name for f in dataclasses.fields(Node)]
