"""The heartbeat's two paths in the store: a steady beat (live node, same health) is
one guarded UPDATE; a health change, an unknown or a terminated node take the full
path. Both must give the embedded client's answers on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from corral.clock import FakeClock
from corral.errors import InvalidInputError, NotFoundError
from tests.contract._world import T0, world

OPERATIONS = ("heartbeat",)
BAD_INPUT = ("heartbeat",)


def _kinds(c: Any) -> list[tuple[str, Any]]:
    return [(e.kind, e.data) for e in c.events() if e.kind == "node_health"]


def test_steady_beats_change_no_health_and_record_no_event(cluster: Any) -> None:
    """Beats with the same health (or none) update the node and add no event."""
    cluster.register_node("w1", "developer")
    first = cluster.heartbeat("w1", health_status="healthy", capacity_available=1)
    assert first.health == "healthy" and first.heartbeat["capacity_available"] == 1
    second = cluster.heartbeat("w1", health_status="healthy", capacity_available=2)
    assert second.heartbeat["capacity_available"] == 2
    assert second.last_heartbeat is not None and second.dead_at is not None
    assert _kinds(cluster) == [("node_health", {"old": None, "new": "healthy"})]


def test_a_health_change_is_recorded_once(cluster: Any) -> None:
    """healthy -> degraded -> degraded -> healthy: two node_health events."""
    cluster.register_node("w1", "developer")
    cluster.heartbeat("w1", health_status="healthy")
    assert cluster.heartbeat("w1", health_status="degraded").health == "degraded"
    cluster.heartbeat("w1", health_status="degraded")
    cluster.heartbeat("w1", health_status="healthy")
    assert _kinds(cluster) == [
        ("node_health", {"old": None, "new": "healthy"}),
        ("node_health", {"old": "healthy", "new": "degraded"}),
        ("node_health", {"old": "degraded", "new": "healthy"}),
    ]


def test_beats_of_unknown_or_terminated_nodes_are_refused(cluster: Any) -> None:
    """NotFoundError naming what to do, and nothing changes."""
    cluster.register_node("w1", "developer")
    cluster.terminate_node("w1")
    before = ([n.to_dict() for n in cluster.list_nodes()], [e.seq for e in cluster.events()])
    with pytest.raises(NotFoundError, match="register it first"):
        cluster.heartbeat("ghost", health_status="healthy")
    with pytest.raises(NotFoundError, match="terminated"):
        cluster.heartbeat("w1", health_status="healthy")
    after = ([n.to_dict() for n in cluster.list_nodes()], [e.seq for e in cluster.events()])
    assert after == before


def test_a_beat_stamps_the_node_and_keeps_its_payload(cluster: Any, clock: FakeClock) -> None:
    """heartbeat-protocol.md's fields and free-form ones are kept as sent; the node is
    dead missed_beats x its interval after the beat."""
    cluster.register_node("w1", "developer", heartbeat_interval=5)
    clock.advance(4)
    node = cluster.heartbeat(
        "w1",
        current_tasks=[1, "task-2"],
        capacity_available=0,
        metrics={"cpu_usage": 12.5},
        zone="eu",
    )
    assert (node.last_heartbeat, node.dead_at, node.health) == (T0 + 4, T0 + 19, "healthy")
    assert node.heartbeat == {
        "current_tasks": [1, "task-2"],
        "capacity_available": 0,
        "metrics": {"cpu_usage": 12.5},
        "zone": "eu",
    }
    assert cluster.get_node("w1") == node
    clock.advance(1)
    assert cluster.heartbeat("w1").heartbeat == {}  # each beat replaces the payload


@pytest.mark.parametrize(
    ("metrics", "health"),
    [
        ({"cpu_usage": 70.0, "memory_usage": 4096}, "healthy"),
        ({"cpu_usage": 70.5}, "degraded"),
        ({"memory_usage": 4097}, "degraded"),
        ({"cpu_usage": 90.1, "memory_usage": 10}, "unhealthy"),
        ({"memory_usage": 8193}, "unhealthy"),
    ],
)
def test_health_is_derived_from_the_metrics(cluster: Any, metrics: Any, health: str) -> None:
    """heartbeat-protocol.md "Health Status Determination": CPU above 70 % or memory
    above 4096 MB is degraded, above 90 % or 8192 MB unhealthy; a given
    health_status wins."""
    cluster.register_node("w1", "developer")
    assert cluster.heartbeat("w1", metrics=metrics).health == health
    given = cluster.heartbeat("w1", metrics=metrics, health_status="healthy")
    assert given.health == "healthy"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"current_tasks": "1,2"}, "current_tasks"),
        ({"current_tasks": [""]}, "current_tasks"),
        ({"current_tasks": ["task-0"]}, "current_tasks"),
        ({"current_tasks": [True]}, "current_tasks"),
        ({"capacity_available": 1.5}, "capacity_available"),
        ({"capacity_available": True}, "capacity_available"),
        ({"metrics": [1, 2]}, "metrics"),
        ({"metrics": {"memory_usage": "lots"}}, "metrics.memory_usage"),
        ({"health_status": "HEALTHY"}, "health_status"),
    ],
)
def test_a_bad_beat_names_the_field_and_changes_nothing(
    cluster: Any, payload: dict[str, Any], field: str
) -> None:
    cluster.register_node("w1", "developer")
    cluster.heartbeat("w1", health_status="healthy")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.heartbeat("w1", **payload)
    assert exc.value.field == field
    assert world(cluster) == before


def test_a_bad_current_task_item_names_current_tasks(cluster: Any) -> None:
    cluster.register_node("w1", "developer")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.heartbeat("w1", current_tasks=[1.5])
    assert exc.value.field == "current_tasks"
    assert world(cluster) == before
