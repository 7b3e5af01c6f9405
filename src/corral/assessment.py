"""The workload assessment: the cluster's workload status and spawn recommendation.

- nothing pending or in progress: ``idle`` / ``terminate_idle``;
- at least 3 pending, or any pending while no non-manager node is working, and
  fewer than ``max_agents`` active nodes: ``overloaded`` / ``spawn_developer``
  (``spawn_architect`` when more than half the pending tasks match only the
  architect's keywords);
- at most 1 pending, more than 1 active node and some node idle:
  ``underutilized`` / ``terminate_idle``;
- otherwise ``balanced`` / ``maintain``.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.types import WorkloadStatus

__all__ = ["Counts", "decide"]


@dataclass(frozen=True, slots=True)
class Counts:
    """What the decision reads.

    ``active_count`` is every non-terminated node (the manager included);
    ``working`` the non-manager nodes whose status is ``working``;
    ``idle`` the nodes whose status is ``idle``;
    ``architect_only`` the pending tasks that match the architect role and no other.
    """

    pending: int
    in_progress: int
    active_count: int
    working: int
    idle: int
    max_agents: int
    architect_only: int = 0


def decide(c: Counts) -> tuple[WorkloadStatus, str]:
    """(workload_status, spawn_recommendation)."""
    if c.pending == 0 and c.in_progress == 0:
        return "idle", "terminate_idle"
    if (c.pending >= 3 and c.active_count < c.max_agents) or (
        c.pending > 0 and c.working == 0 and c.active_count < c.max_agents
    ):
        if 2 * c.architect_only > c.pending:
            return "overloaded", "spawn_architect"
        return "overloaded", "spawn_developer"
    if c.pending <= 1 and c.active_count > 1 and c.idle > 0:
        return "underutilized", "terminate_idle"
    return "balanced", "maintain"
