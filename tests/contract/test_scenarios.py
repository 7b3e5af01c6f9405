"""anti-idle.md "Integration Testing Scenarios", on every backend."""

from __future__ import annotations

import pytest

from corral import CapacityError
from corral.clock import FakeClock
from corral.types import Client

OPERATIONS = (
    "register_node",
    "add_tasks",
    "assess_workload",
    "claim_best_task",
    "complete_task",
    "set_agent_status",
    "catch_up",
    "broadcast",
    "configure",
    "record_metrics",
)
BAD_INPUT = ("register_node",)  # CapacityError at max_agents


def test_scenario_1_scaling_up(cluster: Client, clock: FakeClock) -> None:
    """A lone manager with 10 tasks is told to spawn; the cluster is balanced once full.

    The document's worked example says "balanced" after Developer-1 claimed 3 tasks,
    but its own rule (7 pending >= 3 and 2 < 4 nodes) says overloaded; the rule stands
    (docs/core.md). Balance comes when the fleet reaches capacity."""
    cluster.register_node("Node-BM", "bootstrap_manager", "claude-sonnet-4-5")
    cluster.add_tasks([{"title": f"Implement feature {i}"} for i in range(10)])
    a = cluster.assess_workload()
    assert (a.status, a.recommendation) == ("overloaded", "spawn_developer")
    assert (a.pending_tasks, a.active_count) == (10, 1)

    cluster.register_node("Developer-1", "developer", "claude-sonnet-4-5")
    for _ in range(3):
        clock.advance(5)
        task = cluster.claim_best_task("Developer-1", "developer")
        assert task is not None
        cluster.complete_task(task.id, "Developer-1", task.epoch)
    a = cluster.assess_workload()
    assert (a.pending_tasks, a.active_count) == (7, 2)
    assert (a.status, a.recommendation) == ("overloaded", "spawn_developer")

    for name in ("Developer-2", "Developer-3"):
        cluster.register_node(name, "developer", "claude-sonnet-4-5")
        cluster.claim_best_task(name, "developer")
    a = cluster.assess_workload()
    assert a.active_count == a.max_agents == 4
    assert (a.status, a.recommendation) == ("balanced", "maintain")


def test_scenario_2_scaling_down(cluster: Client, clock: FakeClock) -> None:
    """Developers with no work left go idle, wait out the grace period and terminate,
    leaving the manager and the developer finishing the last task."""
    cluster.register_node("Node-BM", "bootstrap_manager", "claude-sonnet-4-5")
    devs = ["Developer-1", "Developer-2", "Developer-3"]
    for d in devs:
        cluster.register_node(d, "developer", "claude-sonnet-4-5")
    cluster.add_tasks([{"title": f"Implement part {i}"} for i in range(3)])
    held = {d: cluster.claim_best_task(d, "developer") for d in devs}

    for d in devs[:2]:
        clock.advance(10)
        task = held[d]
        assert task is not None
        cluster.complete_task(task.id, d, task.epoch)
        cluster.catch_up(d)
        assert cluster.list_tasks(status="pending") == []
        cluster.set_agent_status(d, "idle")
        clock.advance(30)
        cluster.catch_up(d)
        assert cluster.claim_best_task(d, "developer") is None
        cluster.set_agent_status(d, "terminated")
        cluster.broadcast(f"Node {d} terminating due to lack of work", node_id=d)

    live = {n.id: n.status for n in cluster.list_nodes() if n.status != "terminated"}
    assert live == {"Node-BM": "working", "Developer-3": "working"}
    messages = [e.data["message"] for e in cluster.events() if e.kind == "broadcast"]
    assert messages == [f"Node {d} terminating due to lack of work" for d in devs[:2]]


def test_scenario_3_max_capacity(cluster: Client) -> None:
    """A fifth node is refused with the document's text; after a termination it fits."""
    cluster.register_node("Node-BM", "bootstrap_manager", "claude-sonnet-4-5")
    for i in (1, 2, 3):
        cluster.register_node(f"Developer-{i}", "developer", "claude-sonnet-4-5")
    with pytest.raises(CapacityError) as exc:
        cluster.register_node("Node-D4", "developer", "model")
    assert str(exc.value) == "ERROR: Cluster at capacity (4 nodes). Registration rejected."
    assert len([n for n in cluster.list_nodes() if n.status != "terminated"]) == 4

    cluster.set_agent_status("Developer-1", "terminated")
    reg = cluster.register_node("Node-D4", "developer", "claude-sonnet-4-5")
    assert reg.text == "Node Node-D4 registered as developer (high). Active nodes: 4/4"


def test_capacity_follows_the_setting(cluster: Client) -> None:
    """The refusal names the configured maximum."""
    cluster.configure(max_agents=2)
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    with pytest.raises(CapacityError, match=r"^ERROR: Cluster at capacity \(2 nodes\)\."):
        cluster.register_node("C", "developer")


def test_reregistration_and_manager_always_allowed(cluster: Client) -> None:
    """A live node may register again at capacity; a bootstrap manager always may."""
    cluster.configure(max_agents=1)
    cluster.register_node("A", "developer")
    again = cluster.register_node("A", "developer", "claude-haiku")
    assert (again.active_nodes, again.strength) == (1, "medium")
    bm = cluster.register_node("BM", "bootstrap_manager")
    assert bm.active_nodes == 2


def test_terminated_id_registers_as_new_incarnation(cluster: Client) -> None:
    """Terminated is final: registering the same id again makes a new entry."""
    first = cluster.register_node("A", "developer")
    cluster.set_agent_status("A", "terminated")
    second = cluster.register_node("A", "architect")
    assert second.incarnation > first.incarnation
    assert (second.status, second.role) == ("idle", "architect")
    assert cluster.get_node("A").incarnation == second.incarnation


def test_catch_up_skips_heartbeat_samples_but_moves_past_them(cluster: Client) -> None:
    """Agents catch up on news; the metrics series stays out of their way."""
    cluster.register_node("A", "developer")
    start = cluster.catch_up("A").cursor
    for i in range(5):
        cluster.record_metrics("A", {"cpu_usage": float(i)})
    cluster.add_task("Implement x")
    for i in range(3):
        cluster.record_metrics("A", {"cpu_usage": float(i)})
    got = cluster.catch_up("A", limit=2)
    assert [e.kind for e in got.events] == ["task_added"]
    assert got.cursor > start
    assert cluster.catch_up("A").events == []
