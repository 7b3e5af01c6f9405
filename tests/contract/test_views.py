"""The cluster's views: assess_workload (anti-idle.md "Decision Logic", recorded as
the work distribution) and read_state (the board, the swarm, the metadata)."""

from __future__ import annotations

OPERATIONS = ("assess_workload", "read_state")
BAD_INPUT = ("read_state",)


def test_store_assessment_counts_and_records(cluster):
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
