"""Lease epochs: a worker that lost its lease cannot overwrite the new holder's work."""

from __future__ import annotations

from typing import Any

import pytest

from corral import LeaseError, Monitor, NotFoundError
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.types import Client


def _snapshot(cluster: Client) -> tuple[list[dict[str, Any]], int]:
    return [t.to_dict() for t in cluster.list_tasks()], len(cluster.events(limit=10_000))


def test_completion_after_lease_recovery_is_refused(embedded: Cluster, clock: FakeClock) -> None:
    """A node presumed dead comes back: its completion is refused, the task is redone
    by another node and keeps that node's result."""
    embedded.register_node("A", "developer", heartbeat_interval=5)
    embedded.add_task("Implement search")
    task = embedded.claim_best_task("A", "developer")
    assert task is not None
    embedded.register_node("B", "developer", heartbeat_interval=5)
    clock.advance(10)
    embedded.heartbeat("B")
    clock.advance(5)
    events = Monitor(embedded).tick(clock.now()).events
    assert [e.kind for e in events if e.node_id == "A"] == ["lease_recovered", "node_dead"]

    before = _snapshot(embedded)
    with pytest.raises(LeaseError):
        embedded.complete_task(task.id, "A", task.epoch, result="A's late work")
    with pytest.raises(LeaseError):
        embedded.fail_task(task.id, "A", task.epoch, error="late")
    assert _snapshot(embedded) == before
    with pytest.raises(NotFoundError, match="terminated"):
        embedded.heartbeat("A")

    retry = embedded.claim_best_task("B", "developer")
    assert retry is not None
    assert (retry.id, retry.epoch, retry.attempts) == (task.id, task.epoch + 1, 2)
    done = embedded.complete_task(retry.id, "B", retry.epoch, result="B's work")
    assert done.result == "B's work"
