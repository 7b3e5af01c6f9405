"""The task board (docs/core.md "Tasks and claims"): add_task, add_tasks, get_task,
list_tasks and claim_best_task, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, world

OPERATIONS = ("add_task", "add_tasks", "get_task", "list_tasks", "claim_best_task")
BAD_INPUT = OPERATIONS


def test_add_task_returns_the_task_as_stored(cluster: Any, clock: FakeClock) -> None:
    """Role matches are fixed at insert (keywords starting a word, plus the explicit
    role); max_attempts defaults to the setting; the title is stripped."""
    clock.advance(2)
    t = cluster.add_task("  Design the testing plan ", "see the doc", "high", "developer")
    assert (t.title, t.description, t.priority, t.status) == (
        "Design the testing plan",
        "see the doc",
        "high",
        "pending",
    )
    assert (t.role, t.roles) == ("developer", ("architect", "developer"))
    assert (t.assigned_to, t.epoch, t.attempts, t.max_attempts) == (None, 0, 0, 3)
    assert (t.created_at, t.updated_at, t.claimed_at, t.finished_at) == (T0 + 2, T0 + 2, None, None)
    assert (t.result, t.error) == (None, None)
    assert cluster.get_task(t.id) == t
    [event] = cluster.events()
    assert (event.kind, event.task_id, event.ts) == ("task_added", t.id, T0 + 2)
    assert event.data == {"priority": "high", "roles": ["architect", "developer"]}
    other = cluster.add_task("the latest docs", max_attempts=7)
    assert (other.priority, other.roles, other.max_attempts) == ("medium", (), 7)
    assert other.id > t.id


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        ((None,), {}, "title"),
        (("t",), {"description": "d" * 20_001}, "description"),
        (("t",), {"description": 3}, "description"),
        (("t\x00",), {}, "title"),
        (("t",), {"priority": "High"}, "priority"),
        (("t",), {"role": "bootstrap manager"}, "role"),
        (("t",), {"max_attempts": 1.5}, "max_attempts"),
        (("t",), {"max_attempts": True}, "max_attempts"),
    ],
)
def test_add_task_refuses_bad_fields(
    cluster: Any, args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    cluster.add_task("Implement a")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.add_task(*args, **kwargs)
    assert exc.value.field == field
    assert world(cluster) == before


def test_add_tasks_adds_all_in_order(cluster: Any) -> None:
    tasks = cluster.add_tasks(
        [
            {"title": "Implement a"},
            {"title": "Plan b", "priority": "low", "description": "x"},
            {"title": "Docs c", "role": "architect", "max_attempts": 1},
        ]
    )
    assert [t.title for t in tasks] == ["Implement a", "Plan b", "Docs c"]
    assert [t.id for t in tasks] == [tasks[0].id, tasks[0].id + 1, tasks[0].id + 2]
    assert [t.roles for t in tasks] == [("developer",), ("architect",), ("architect",)]
    assert [(t.priority, t.max_attempts) for t in tasks] == [
        ("medium", 3),
        ("low", 3),
        ("medium", 1),
    ]
    assert tasks == [cluster.get_task(t.id) for t in tasks]
    assert [e.task_id for e in cluster.events() if e.kind == "task_added"] == [t.id for t in tasks]
    assert cluster.add_tasks([]) == []


@pytest.mark.parametrize(
    "bad",
    [
        "Implement a",
        {"title": "Implement a"},
        [{"title": "ok"}, {"title": "t", "colour": "red"}],
        [{"title": "ok"}, {"description": "no title"}],
        [{"title": "ok"}, {"title": "t", "role": "wizard"}],
    ],
)
def test_add_tasks_refuses_the_whole_batch(cluster: Any, bad: Any) -> None:
    cluster.add_task("Implement a")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.add_tasks(bad)
    assert exc.value.field in ("tasks", "role")
    assert world(cluster) == before


def test_add_tasks_names_the_batch_for_an_item_that_is_not_an_object(cluster: Any) -> None:
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.add_tasks([{"title": "ok"}, "Implement a"])
    assert exc.value.field == "tasks"
    assert world(cluster) == before


def test_get_task_takes_a_number_or_its_text(cluster: Any) -> None:
    cluster.add_task("Implement a")
    t = cluster.add_task("Implement b")
    assert cluster.get_task(t.id) == t
    assert cluster.get_task(str(t.id)) == t
    assert cluster.get_task(f"task-{t.id}") == t


@pytest.mark.parametrize("bad", [0, -1, "one", "task-", 2**63, True, 1.0, None])
def test_get_task_refuses_a_bad_id(cluster: Any, bad: Any) -> None:
    cluster.add_task("Implement a")
    with pytest.raises(InvalidInputError) as exc:
        cluster.get_task(bad)
    assert exc.value.field == "task_id"


def test_get_task_of_an_unknown_id_is_not_found(cluster: Any) -> None:
    with pytest.raises(NotFoundError) as exc:
        cluster.get_task(1)
    assert exc.value.field == "task_id"


def test_list_tasks_filters_and_limits(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    ids = [t.id for t in cluster.add_tasks([{"title": f"Implement {i}"} for i in range(5)])]
    a = cluster.claim_best_task("A", "developer")
    b = cluster.claim_best_task("B", "developer")
    cluster.complete_task(b.id, "B", b.epoch)
    ids.reverse()  # newest first
    assert [t.id for t in cluster.list_tasks()] == ids
    assert [t.id for t in cluster.list_tasks(limit=2)] == ids[:2]
    assert [t.id for t in cluster.list_tasks(status="in_progress")] == [a.id]
    assert [t.id for t in cluster.list_tasks(status="done")] == [b.id]
    assert [t.id for t in cluster.list_tasks(assigned_to="A")] == [a.id]
    assert sorted(t.id for t in cluster.list_tasks(status="pending")) == sorted(
        set(ids) - {a.id, b.id}
    )
    assert cluster.list_tasks(status="failed") == []
    assert cluster.list_tasks(assigned_to="Ghost") == []
    assert [t.id for t in cluster.list_tasks(limit=20_000)] == ids  # capped, not refused


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": -5}, "limit"),
        ({"limit": 2**63}, "limit"),
        ({"status": "open"}, "status"),
        ({"assigned_to": ""}, "assigned_to"),
        ({"assigned_to": "x" * 65}, "assigned_to"),
    ],
)
def test_list_tasks_refuses_bad_filters(cluster: Any, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as exc:
        cluster.list_tasks(**kwargs)
    assert exc.value.field == field


def test_a_claim_leases_the_task_and_sets_the_node_working(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    t = cluster.add_task("Implement it")
    clock.advance(4)
    got = cluster.claim_best_task("A", "developer")
    assert (got.id, got.status, got.assigned_to) == (t.id, "in_progress", "A")
    assert (got.epoch, got.attempts, got.claimed_at, got.updated_at) == (1, 1, T0 + 4, T0 + 4)
    assert cluster.get_task(t.id) == got
    node = cluster.get_node("A")
    assert (node.status, node.current_task_id, node.idle_since) == ("working", t.id, None)
    claimed = cluster.events()[-1]
    assert (claimed.kind, claimed.node_id, claimed.task_id) == ("task_claimed", "A", t.id)
    # created_at: the task's wait (the claim's ts minus it) is in the event itself
    assert claimed.data == {"epoch": 1, "role": "developer", "attempt": 1, "created_at": T0}
    cluster.complete_task(t.id, "A", got.epoch)
    done = cluster.events()[-1]
    assert (done.kind, done.data) == ("task_completed", {"epoch": 1, "claimed_at": T0 + 4})
    assert cluster.claim_best_task("A", "developer") is None


def test_a_claim_for_a_role_the_node_is_not_still_uses_known_roles(cluster: Any) -> None:
    """claim_best_task names the role to claim as; an unknown role is refused and no
    task moves."""
    cluster.register_node("A", "developer")
    cluster.add_task("Design it")
    before = world(cluster)
    for bad in ("wizard", "", 3):
        with pytest.raises(InvalidInputError) as exc:
            cluster.claim_best_task("A", bad)
        assert exc.value.field == "role"
    assert world(cluster) == before
    assert cluster.claim_best_task("A", "architect").title == "Design it"
