"""The registry (docs/core.md "Nodes"): register_node, get_node, list_nodes,
set_agent_status, terminate_node and touch, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from corral import CapacityError, InvalidInputError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, kinds, world

OPERATIONS = (
    "register_node",
    "get_node",
    "list_nodes",
    "set_agent_status",
    "terminate_node",
    "touch",
)
BAD_INPUT = OPERATIONS


def test_register_node_returns_the_node_as_stored(cluster: Any) -> None:
    """A new node starts idle (idle_since now), derives its strength from the model,
    is dead after missed_beats x its own interval, and is recorded as an event."""
    reg = cluster.register_node(
        "A", "developer", "claude-haiku-4", heartbeat_interval=10, host="box-1", pid=4242
    )
    assert (reg.id, reg.role, reg.status, reg.model, reg.strength) == (
        "A",
        "developer",
        "idle",
        "claude-haiku-4",
        "medium",
    )
    assert (reg.host, reg.pid, reg.heartbeat_interval) == ("box-1", 4242, 10)
    assert (reg.registered_at, reg.idle_since, reg.last_activity) == (T0, T0, T0)
    assert (reg.last_heartbeat, reg.health, reg.heartbeat) == (None, None, {})
    assert (reg.dead_at, reg.incarnation, reg.current_task_id) == (T0 + 30, 1, None)
    assert (reg.active_nodes, reg.max_agents) == (1, 4)
    assert reg.text == "Node A registered as developer (medium). Active nodes: 1/4"
    node = cluster.get_node("A")
    assert {k: v for k, v in reg.to_dict().items() if k in node.to_dict()} == node.to_dict()
    [event] = cluster.events()
    assert (event.kind, event.node_id, event.ts) == ("node_registered", "A", T0)
    assert event.data == {
        "role": "developer",
        "model": "claude-haiku-4",
        "strength": "medium",
        "incarnation": 1,
    }


def test_a_manager_starts_working_and_a_given_strength_wins(cluster: Any) -> None:
    bm = cluster.register_node("BM", "bootstrap_manager", "claude-haiku", strength="high")
    assert (bm.status, bm.idle_since, bm.strength) == ("working", None, "high")
    # no interval declared: the cluster's (300 s), capped by stale_threshold (600 s)
    assert bm.dead_at == T0 + 600
    plain = cluster.register_node("D", "developer")
    assert (plain.model, plain.strength, plain.active_nodes) == (None, None, 2)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": "m" * 201}, "model"),
        ({"model": 7}, "model"),
        ({"pid": 0}, "pid"),
        ({"host": "h" * 256}, "host"),
        ({"heartbeat_interval": 0}, "heartbeat_interval"),
        ({"strength": "HIGH"}, "strength"),
    ],
)
def test_register_node_refuses_bad_fields(cluster: Any, kwargs: dict[str, Any], field: str) -> None:
    cluster.register_node("A", "developer")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.register_node("B", "developer", **kwargs)
    assert exc.value.field == field
    assert world(cluster) == before


def test_a_refusal_at_capacity_changes_nothing(cluster: Any) -> None:
    cluster.configure(max_agents=1)
    cluster.register_node("A", "developer")
    before = world(cluster)
    with pytest.raises(CapacityError):
        cluster.register_node("B", "architect")
    assert world(cluster) == before
    with pytest.raises(NotFoundError):
        cluster.get_node("B")


def test_get_node_shows_the_newest_incarnation(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    clock.advance(3)
    cluster.terminate_node("A")
    gone = cluster.get_node("A")
    assert (gone.status, gone.terminated_at, gone.incarnation) == ("terminated", T0 + 3, 1)
    clock.advance(1)
    cluster.register_node("A", "architect")
    back = cluster.get_node("A")
    assert (back.status, back.role, back.incarnation) == ("idle", "architect", 2)
    assert back.registered_at == T0 + 4


@pytest.mark.parametrize("bad", ["", "x" * 65, "a\nb", 5])
def test_get_node_refuses_a_bad_id(cluster: Any, bad: Any) -> None:
    with pytest.raises(InvalidInputError) as exc:
        cluster.get_node(bad)
    assert exc.value.field == "node_id"


def test_list_nodes_filters_by_status_and_role(cluster: Any) -> None:
    cluster.register_node("BM", "bootstrap_manager")
    cluster.register_node("D1", "developer")
    cluster.register_node("D2", "developer")
    cluster.register_node("A1", "architect")
    cluster.terminate_node("D2")
    assert sorted(n.id for n in cluster.list_nodes()) == ["A1", "BM", "D1", "D2"]
    assert sorted(n.id for n in cluster.list_nodes(role="developer")) == ["D1", "D2"]
    assert [n.id for n in cluster.list_nodes(status="terminated")] == ["D2"]
    assert sorted(n.id for n in cluster.list_nodes(status="idle")) == ["A1", "D1"]
    assert [n.id for n in cluster.list_nodes(status="idle", role="developer")] == ["D1"]
    assert [n.id for n in cluster.list_nodes(status="working")] == ["BM"]
    assert cluster.list_nodes(status="waiting") == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"role": "wizard"}, "role"), ({"status": "busy"}, "status"), ({"status": 1}, "status")],
)
def test_list_nodes_refuses_unknown_filters(
    cluster: Any, kwargs: dict[str, Any], field: str
) -> None:
    cluster.register_node("A", "developer")
    with pytest.raises(InvalidInputError) as exc:
        cluster.list_nodes(**kwargs)
    assert exc.value.field == field


def test_set_agent_status_tracks_idle_spells(cluster: Any, clock: FakeClock) -> None:
    """Entering idle sets idle_since, staying idle keeps it, anything else clears it;
    every call stamps last_activity; every change (not a status set again) is a
    node_status event."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement it")
    clock.advance(5)
    working = cluster.set_agent_status("A", "working", f"task-{task.id}")
    assert (working.status, working.idle_since, working.current_task_id) == (
        "working",
        None,
        task.id,
    )
    assert working.last_activity == T0 + 5
    clock.advance(5)
    idle = cluster.set_agent_status("A", "idle")
    assert (idle.status, idle.idle_since, idle.last_activity) == ("idle", T0 + 10, T0 + 10)
    clock.advance(10)
    still = cluster.set_agent_status("A", "idle")
    assert (still.idle_since, still.last_activity) == (T0 + 10, T0 + 20)
    waiting = cluster.set_agent_status("A", "waiting")
    assert (waiting.status, waiting.idle_since) == ("waiting", None)
    assert cluster.get_node("A") == waiting
    statuses = [(e.data["old"], e.data["new"]) for e in cluster.events() if e.kind == "node_status"]
    assert statuses == [
        ("idle", "working"),
        ("working", "idle"),
        ("idle", "waiting"),
    ]


def test_set_agent_status_refusals_change_nothing(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.terminate_node("A")
    before = world(cluster)
    with pytest.raises(NotFoundError):
        cluster.set_agent_status("A", "working")
    with pytest.raises(InvalidInputError) as exc:
        cluster.set_agent_status("A", "WORKING")
    assert exc.value.field == "status"
    assert world(cluster) == before


def test_terminate_node_is_final_and_returns_its_leases(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement it")
    held = cluster.claim_best_task("A", "developer")
    clock.advance(7)
    seq = cluster.events()[-1].seq
    node = cluster.terminate_node("A")
    assert (node.status, node.terminated_at, node.idle_since) == ("terminated", T0 + 7, None)
    back = cluster.get_task(task.id)
    assert (back.status, back.assigned_to, back.attempts, back.epoch) == ("pending", None, 1, 1)
    assert kinds(cluster, seq) == ["node_status", "lease_released"]
    released = cluster.events(since=seq)[-1]
    assert (released.task_id, released.data["reason"]) == (held.id, "terminated")
    assert cluster.list_nodes(status="terminated") == [node]


def test_terminate_node_refuses_unknown_and_terminated_nodes(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.terminate_node("A")
    before = world(cluster)
    for bad in ("Ghost", "A"):
        with pytest.raises(NotFoundError):
            cluster.terminate_node(bad)
    with pytest.raises(InvalidInputError) as exc:
        cluster.terminate_node(" A")
    assert exc.value.field == "node_id"
    assert world(cluster) == before


def test_touch_stamps_the_heartbeat_pushes_the_death_deadline_and_keeps_the_payload(
    cluster: Any, clock: FakeClock
) -> None:
    cluster.register_node("A", "developer", heartbeat_interval=10)
    cluster.heartbeat("A", health_status="healthy", capacity_available=2, note="hi")
    events = len(cluster.events())
    clock.advance(25)
    assert cluster.touch("A") is True
    node = cluster.get_node("A")
    assert (node.last_activity, node.dead_at, node.last_heartbeat) == (T0 + 25, T0 + 55, T0 + 25)
    assert node.heartbeat == {"health_status": "healthy", "capacity_available": 2, "note": "hi"}
    assert node.health == "healthy"
    assert len(cluster.events()) == events  # a touch is not news


def test_touch_of_an_unknown_or_terminated_node_is_false_and_changes_nothing(
    cluster: Any,
) -> None:
    cluster.register_node("A", "developer")
    cluster.terminate_node("A")
    before = world(cluster)
    assert cluster.touch("A") is False
    assert cluster.touch("Ghost") is False
    assert world(cluster) == before


@pytest.mark.parametrize("bad", ["", "x" * 65, "tab\tid", None])
def test_touch_refuses_a_bad_id(cluster: Any, bad: Any) -> None:
    with pytest.raises(InvalidInputError) as exc:
        cluster.touch(bad)
    assert exc.value.field == "node_id"
