"""Settings live in the cluster, so every process agrees (docs/core.md "Settings"):
settings() and configure(**changes), on every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from corral import InvalidInputError
from corral.clock import FakeClock
from corral.model import Settings
from tests.contract._world import T0, world

OPERATIONS = ("settings", "configure")
BAD_INPUT = ("configure",)


def test_a_new_cluster_has_the_documented_defaults(cluster: Any) -> None:
    s = cluster.settings()
    assert s == Settings()
    assert (s.max_agents, s.idle_timeout_seconds, s.grace_period_seconds) == (4, 30.0, 30.0)
    assert (s.heartbeat_interval, s.stale_threshold, s.missed_beats) == (300.0, 600.0, 3)
    assert s.role_keywords == {
        "architect": ["design", "architect", "plan"],
        "developer": ["implement", "code", "test"],
    }
    assert s.roles == ("bootstrap_manager", "runner", "architect", "developer")


def test_configure_changes_what_every_reader_sees(cluster: Any) -> None:
    new = cluster.configure(max_agents=6, idle_timeout_seconds=12, project_summary="Ship v2")
    expected = dataclasses.replace(
        Settings(), max_agents=6, idle_timeout_seconds=12.0, project_summary="Ship v2"
    )
    assert new == expected
    assert cluster.settings() == expected
    [event] = cluster.events()
    assert (event.kind, event.ts) == ("settings_changed", T0)
    assert event.data == {
        "changes": {"max_agents": 6, "idle_timeout_seconds": 12.0, "project_summary": "Ship v2"},
        "actor": "operator",  # the embedded client's and the operator token's name
    }
    assert cluster.read_state().summary == "Ship v2"


def test_new_roles_can_register_and_claim(cluster: Any) -> None:
    cluster.configure(role_keywords={"tester": ["verify"], "developer": ["implement"]})
    assert cluster.settings().roles == ("bootstrap_manager", "runner", "developer", "tester")
    cluster.register_node("T", "tester")
    task = cluster.add_task("Verify the release")
    assert task.roles == ("tester",)
    assert cluster.claim_best_task("T", "tester").id == task.id
    with pytest.raises(InvalidInputError):
        cluster.register_node("A", "architect")  # no longer a role


def test_timing_changes_move_the_live_nodes_deadlines(cluster: Any, clock: FakeClock) -> None:
    """A node is dead after min(missed_beats x interval, stale_threshold) of silence:
    changing those settings re-computes the deadline of every live node."""
    cluster.register_node("A", "developer", heartbeat_interval=10)
    cluster.register_node("B", "developer")
    clock.advance(5)
    cluster.configure(missed_beats=2, stale_threshold=100)
    assert cluster.get_node("A").dead_at == T0 + 20
    assert cluster.get_node("B").dead_at == T0 + 100


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_agents": True}, "max_agents"),
        ({"max_agents": 2.5}, "max_agents"),
        ({"max_agents": "4"}, "max_agents"),
        ({"stale_threshold": -1.0}, "stale_threshold"),
        ({"project_summary": 5}, "project_summary"),
        ({"model_strengths": [["opus", "huge"]]}, "model_strengths"),
        ({"role_keywords": {}}, "role_keywords"),
        ({"max_agents": 5, "colour": "blue"}, "colour"),
    ],
)
def test_a_bad_change_is_refused_whole(cluster: Any, changes: dict[str, Any], field: str) -> None:
    """One bad key refuses the call: no setting changes, no event."""
    cluster.register_node("A", "developer")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.configure(**changes)
    assert exc.value.field == field
    assert world(cluster) == before
