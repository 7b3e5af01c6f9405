"""Bad input gets a clear error naming the field, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral import InvalidInputError, NotFoundError
from corral.types import Client

OPERATIONS = ("register_node",)
BAD_INPUT = (
    "register_node",
    "set_agent_status",
    "claim_best_task",
    "heartbeat",
    "catch_up",
    "add_task",
    "add_tasks",
    "complete_task",
    "fail_task",
    "complete_and_claim",
    "list_tasks",
    "list_nodes",
    "events",
    "read_state",
    "configure",
    "broadcast",
    "get_node",
    "get_task",
    "alert",
    "record_metrics",
)


def world(
    cluster: Client,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Everything observable: nodes, tasks and the event log."""
    return (
        [n.to_dict() for n in cluster.list_nodes()],
        [t.to_dict() for t in cluster.list_tasks()],
        [e.to_dict() for e in cluster.events(limit=10_000)],
    )


BAD_IDS = ["", "x" * 65, "bad\nid", "tab\tid", "nul\x00", " padded", 42, None]


@pytest.fixture
def seeded(cluster: Client) -> Client:
    cluster.register_node("A", "developer")
    cluster.add_task("Implement a")
    return cluster


# ``bad`` is of any type on purpose: the rules' checks at run time are under test.
@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_node_ids_are_refused(seeded: Client, bad: Any) -> None:
    before = world(seeded)
    call: Callable[[], object]
    for call in (
        lambda: seeded.register_node(bad, "developer"),
        lambda: seeded.set_agent_status(bad, "idle"),
        lambda: seeded.claim_best_task(bad, "developer"),
        lambda: seeded.heartbeat(bad),
        lambda: seeded.catch_up(bad),
    ):
        with pytest.raises(InvalidInputError) as exc:
            call()
        assert exc.value.field == "node_id"
    assert world(seeded) == before


def test_sixty_four_characters_is_the_longest_id(seeded: Client) -> None:
    assert seeded.register_node("x" * 64, "architect").id == "x" * 64


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.register_node("B", "wizard"), "role"),
        (lambda c: c.register_node("B", "developer", strength="huge"), "strength"),
        (lambda c: c.register_node("B", "developer", heartbeat_interval=-1), "heartbeat_interval"),
        (lambda c: c.set_agent_status("A", "sleeping"), "status"),
        (lambda c: c.set_agent_status("A", "working", "task-x"), "current_task_id"),
        (lambda c: c.add_task("t", priority="urgent"), "priority"),
        (lambda c: c.add_task(""), "title"),
        (lambda c: c.add_task("   "), "title"),
        (lambda c: c.add_task("x" * 501), "title"),
        (lambda c: c.add_task("t", role="wizard"), "role"),
        (lambda c: c.add_task("t", max_attempts=0), "max_attempts"),
        (lambda c: c.add_tasks([{"title": "ok"}, {"title": "t", "priority": "nope"}]), "priority"),
        (lambda c: c.add_tasks([{"name": "t"}]), "tasks"),
        (lambda c: c.claim_best_task("A", "wizard"), "role"),
        (lambda c: c.complete_task("one", "A"), "task_id"),
        (lambda c: c.complete_task(0, "A"), "task_id"),
        (lambda c: c.complete_task(1, "A", epoch=0), "epoch"),
        (lambda c: c.heartbeat("A", health_status="great"), "health_status"),
        (lambda c: c.heartbeat("A", capacity_available=-1), "capacity_available"),
        (lambda c: c.heartbeat("A", metrics={"cpu_usage": "hot"}), "metrics.cpu_usage"),
        (lambda c: c.heartbeat("A", blob="x" * 70_000), "heartbeat"),
        (lambda c: c.list_tasks(status="open"), "status"),
        (lambda c: c.list_nodes(status="busy"), "status"),
        (lambda c: c.catch_up("A", since=-1), "since"),
        (lambda c: c.catch_up("A", since=2**63), "since"),
        (lambda c: c.events(since=2**64), "since"),
        (lambda c: c.events(since="3"), "since"),
        (lambda c: c.events(limit=-1), "limit"),
        (lambda c: c.complete_task(1, "A", epoch=2**63), "epoch"),
        (lambda c: c.fail_task(1, "A", epoch=2**70), "epoch"),
        (lambda c: c.add_task("t", max_attempts=2**63), "max_attempts"),
        (lambda c: c.read_state(limit=-1), "limit"),
        (lambda c: c.read_state(limit=2**63), "limit"),
        (lambda c: c.configure(max_agents=2**63), "max_agents"),
        (lambda c: c.configure(idle_timeout_seconds=10**400), "idle_timeout_seconds"),
        (lambda c: c.add_task("t", max_attempts=10**400), "max_attempts"),
        (lambda c: c.broadcast(""), "message"),
        (lambda c: c.configure(max_agents=0), "max_agents"),
        (lambda c: c.configure(colour="blue"), "colour"),
        (lambda c: c.configure(role_keywords={"bootstrap_manager": ["x"]}), "role_keywords"),
        (lambda c: c.configure(role_keywords={"data eng": ["etl"]}), "role_keywords"),
    ],
)
def test_bad_values_name_the_field_and_change_nothing(
    seeded: Client, call: Callable[[Client], object], field: str
) -> None:
    before = world(seeded)
    settings = seeded.settings()
    with pytest.raises(InvalidInputError) as exc:
        call(seeded)
    assert exc.value.field == field
    assert isinstance(exc.value, ValueError)
    assert world(seeded) == before
    assert seeded.settings() == settings


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.set_agent_status("Ghost", "idle"), "node_id"),
        (lambda c: c.claim_best_task("Ghost", "developer"), "node_id"),
        (lambda c: c.heartbeat("Ghost"), "node_id"),
        (lambda c: c.get_node("Ghost"), "node_id"),
        (lambda c: c.get_task(999), "task_id"),
        (lambda c: c.complete_task(999, "A"), "task_id"),
        (lambda c: c.fail_task(999, "A"), "task_id"),
        (lambda c: c.set_agent_status("A", "working", 999), "current_task_id"),
        (lambda c: c.broadcast("hi", node_id="Ghost"), "node_id"),
    ],
)
def test_unknown_nodes_and_tasks_are_not_found(
    seeded: Client, call: Callable[[Client], object], field: str
) -> None:
    before = world(seeded)
    with pytest.raises(NotFoundError) as exc:
        call(seeded)
    assert exc.value.field == field
    assert world(seeded) == before


def test_claim_by_unknown_node_takes_no_task(seeded: Client) -> None:
    """The claim's task update rolls back when the node turns out not to exist."""
    with pytest.raises(NotFoundError):
        seeded.claim_best_task("Ghost", "developer")
    assert [t.status for t in seeded.list_tasks()] == ["pending"]


def test_a_limit_past_the_cap_is_capped_on_every_backend(seeded: Client) -> None:
    """Embedded and over HTTP alike, a read past 10,000 rows answers with at most
    10,000, the same as asking for exactly that."""
    big = seeded.read_state(limit=20_000)
    assert [t.id for t in big.tasks] == [t.id for t in seeded.read_state(limit=10_000).tasks]
    assert big.tasks  # the seeded board has tasks
    assert [e.seq for e in seeded.events(limit=20_000)] == [
        e.seq for e in seeded.events(limit=10_000)
    ]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.configure(stale_threshold=float("inf")), "stale_threshold"),
        (lambda c: c.complete_task(1, "A", result={1, 2}), "result"),
        (lambda c: c.complete_and_claim(1, "A", "developer", result=float("nan")), "result"),
        (lambda c: c.alert("disk full", node_id="A", seen=object()), "data"),
        (lambda c: c.record_metrics("A", {"cpu_usage": float("nan")}), "sample"),
        (lambda c: c.heartbeat("A", load=float("inf")), "heartbeat"),
    ],
)
def test_values_json_cannot_carry_name_the_argument(
    seeded: Client, call: Callable[[Client], object], field: str
) -> None:
    """NaN, infinities, sets and objects are refused naming the argument that holds
    them, and nothing is written."""
    task = seeded.claim_best_task("A", "developer")
    assert task is not None and task.id == 1
    before = world(seeded)
    settings = seeded.settings()
    with pytest.raises(InvalidInputError) as exc:
        call(seeded)
    assert exc.value.field == field
    assert world(seeded) == before
    assert seeded.settings() == settings
