"""The worker SDK: what a process imports to be a good citizen of a corral cluster.

- ``worker``: ``Worker``, the claim / complete / idle / retire loop (what
  ``corral worker`` runs around a command);
- ``heartbeat``: ``HeartbeatMonitor``, the heartbeats on a fixed grid;
- ``destinations``: where heartbeats go (the cluster, webhooks, GitHub, the metrics
  series), each with its retries and alerts;
- ``child``: ``stop_child``, a task's process stopped (SIGTERM, SIGKILL after a grace).

``corral.Worker`` and ``corral.HeartbeatMonitor`` are the same classes.
"""

from __future__ import annotations

from corral.worker.child import KILL_GRACE, stop_child
from corral.worker.destinations import (
    ClusterDestination,
    Destination,
    DestinationError,
    GitHubDestination,
    MetricsDestination,
    RetryPolicy,
    WebhookDestination,
)
from corral.worker.heartbeat import HeartbeatMonitor
from corral.worker.worker import EXIT_LOST, EXIT_OK, EXIT_UNAVAILABLE, Claimed, TaskFailed, Worker

__all__ = [
    "EXIT_LOST",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "KILL_GRACE",
    "Claimed",
    "ClusterDestination",
    "Destination",
    "DestinationError",
    "GitHubDestination",
    "HeartbeatMonitor",
    "MetricsDestination",
    "RetryPolicy",
    "TaskFailed",
    "WebhookDestination",
    "Worker",
    "stop_child",
]
