"""The heartbeat's two paths in the store: a steady beat (live node, same health) is
one guarded UPDATE; a health change, an unknown or a terminated node take the full
path. Both must give the embedded client's answers on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import NotFoundError


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
