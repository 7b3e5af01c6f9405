"""The cluster's views: assess_workload (anti-idle.md "Decision Logic", recorded as
the work distribution) and read_state (the board, the swarm, the metadata)."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError
from corral.clock import FakeClock
from corral.types import Client
from tests.contract._world import T0

OPERATIONS = ("assess_workload", "read_state", "read_state_text")
BAD_INPUT = ("read_state", "read_state_text")


def test_store_assessment_counts_and_records(cluster: Client) -> None:
    """The store's counts feed the rule; the result is the cluster's work distribution."""
    cluster.register_node("BM", "bootstrap_manager")
    cluster.register_node("D1", "developer")
    cluster.add_tasks(
        [
            {"title": "Design the API"},
            {"title": "Plan the rollout"},
            {"title": "Architect storage"},
            {"title": "Implement it"},
        ]
    )
    a = cluster.assess_workload()
    assert (a.pending_tasks, a.active_count, a.working_count, a.architect_only_pending) == (
        4,
        2,
        0,
        3,
    )
    assert (a.status, a.recommendation) == ("overloaded", "spawn_architect")
    state = cluster.read_state()
    assert state.work_distribution["spawn_recommendation"] == "spawn_architect"
    assert state.metadata["manager_id"] == "BM"
    assert state.metadata["pending_task_count"] == 4
    assert "Recommendation: spawn_architect" in a.text


def test_an_empty_cluster_is_idle_and_the_result_is_recorded_once(
    cluster: Any, clock: FakeClock
) -> None:
    clock.advance(8)
    a = cluster.assess_workload()
    assert (a.status, a.recommendation, a.assessed_at, a.manager_id) == (
        "idle",
        "terminate_idle",
        T0 + 8,
        None,
    )
    assert (a.max_agents, a.active_count, a.pending_tasks, a.in_progress) == (4, 0, 0, 0)
    [event] = cluster.events()
    assert (event.kind, event.ts) == ("assessment", T0 + 8)
    assert event.data == {
        "status": "idle",
        "recommendation": "terminate_idle",
        "pending": 0,
        "active": 0,
    }
    clock.advance(1)
    assert cluster.assess_workload().assessed_at == T0 + 9
    assert len(cluster.events()) == 1  # the same decision is not news
    assert cluster.read_state().work_distribution == {
        "last_assessment": T0 + 9,
        "workload_status": "idle",
        "spawn_recommendation": "terminate_idle",
    }


def test_read_state_shows_the_board_and_the_live_swarm(cluster: Any, clock: FakeClock) -> None:
    """In-progress tasks first, then pending ones in claim order; live nodes only."""
    cluster.configure(project_summary="Ship it")
    cluster.register_node("A", "developer", heartbeat_interval=10)
    cluster.register_node("B", "developer")
    cluster.terminate_node("B")
    low = cluster.add_task("Implement low", priority="low")
    high = cluster.add_task("Implement high", priority="high")
    mid = cluster.add_task("Implement mid")
    clock.advance(2)
    held = cluster.claim_best_task("A", "developer")
    assert held.id == high.id
    clock.advance(3)
    cluster.heartbeat("A", health_status="healthy")
    state = cluster.read_state()
    assert (state.now, state.summary, state.max_agents) == (T0 + 5, "Ship it", 4)
    assert [t.id for t in state.tasks] == [high.id, mid.id, low.id]
    assert (state.pending_tasks, state.in_progress, state.tasks_omitted) == (2, 1, 0)
    assert [n.id for n in state.nodes] == ["A"]
    assert state.nodes[0] == cluster.get_node("A")
    assert (state.last_heartbeat, state.liveness_window) == (T0 + 5, 600.0)
    assert state.last_event_ts == T0 + 5
    short = cluster.read_state(limit=2)
    assert ([t.id for t in short.tasks], short.tasks_omitted) == ([high.id, mid.id], 1)
    assert cluster.read_state(node_id="B").last_heartbeat is None
    text = state.text
    assert "Ship it" in text and "Implement high" in text and "Active Nodes: 1/4" in text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"node_id": ""}, "node_id"),
        ({"node_id": "x" * 65}, "node_id"),
        ({"limit": 0}, "limit"),
        ({"limit": "5"}, "limit"),
    ],
)
def test_read_state_refuses_bad_input(cluster: Any, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as exc:
        cluster.read_state(**kwargs)
    assert exc.value.field == field


def test_read_state_text_is_the_rendered_state(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    cluster.add_task("Implement it")
    clock.advance(2)
    assert cluster.read_state_text() == cluster.read_state().text
    assert cluster.read_state_text(node_id="A", limit=1) == cluster.read_state("A", limit=1).text
    with pytest.raises(InvalidInputError) as exc:
        cluster.read_state_text(limit=0)
    assert exc.value.field == "limit"
