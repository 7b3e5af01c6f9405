"""The queue's metrics (``corral.server.queue_metrics``): task wait and run histograms,
completions, failures and lease recoveries by role, derived from the events (no extra
read per request), and the alert rules' gauges, on a real SQLite store and the fake
clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import corral
from corral import Monitor
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.model import Event
from corral.server.metrics import Metrics
from corral.server.queue_metrics import QueueCounts

T0 = 1_700_000_000.0
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _e(seq: int, ts: float, kind: str, node: str, task: int, **data: Any) -> Event:
    return Event(seq=seq, ts=ts, kind=kind, node_id=node, task_id=task, data=data)


def test_waits_runs_and_outcomes_are_counted_by_the_claims_role() -> None:
    q = QueueCounts()
    q.observe(
        [
            _e(1, 110.0, "task_claimed", "w1", 1, role="developer", created_at=100.0),
            _e(2, 112.5, "task_completed", "w1", 1, claimed_at=110.0),
            _e(3, 120.0, "task_claimed", "a1", 2, role="architect", created_at=20.0),
            _e(4, 150.0, "lease_recovered", "a1", 2, outcome="failed"),
            _e(5, 151.0, "task_claimed", "w1", 3, role="developer", created_at=151.0),
            _e(6, 152.0, "task_failed", "w1", 3, outcome="pending"),  # retried: no failure
        ],
        {},
    )
    assert q.wait["developer"].total == 10.0 and sum(q.wait["developer"].counts) == 2
    assert q.wait["architect"].total == 100.0
    assert q.run["developer"].total == 2.5 and "architect" not in q.run
    assert q.completed == {"developer": 1}
    assert q.failed == {"architect": 1}
    assert q.recovered == {"architect": 1}
    assert q.in_flight == {}


def test_a_claim_not_seen_takes_its_holders_role() -> None:
    """The counting began after the claim: the holder's registered role, else unknown."""
    q = QueueCounts()
    q.observe(
        [
            _e(1, 10.0, "task_completed", "w1", 7, claimed_at=4.0),
            _e(2, 11.0, "task_completed", "ghost", 8, claimed_at=4.0),
        ],
        {"w1": "developer"},
    )
    assert q.completed == {"developer": 1, "unknown": 1}
    assert q.run["developer"].total == 6.0


@pytest.fixture
def faked(tmp_path: Path) -> Any:
    clock = FakeClock(T0)
    c = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    assert isinstance(c, Cluster)
    yield c, clock
    c.close()


def test_a_scrape_shows_the_queue_from_the_events(faked: tuple[Cluster, FakeClock]) -> None:
    """Through the store's own events: a task waits 30 s and runs 12 s; another fails
    for good when its holder dies (a lease recovery). The first scrape places the
    cursor: what came before it is not counted."""
    c, clock = faked
    c.register_node("w0", "developer")
    c.add_task("implement before")  # before the first scrape: never counted
    first = c.claim_best_task("w0", "developer")
    assert first is not None
    c.complete_task(first.id, "w0", first.epoch)
    metrics = Metrics(c)
    before = _samples(metrics.render().decode())
    assert ("corral_tasks_completed_total", (("role", "developer"),)) not in before

    c.register_node("w1", "developer", heartbeat_interval=10)
    c.add_task("implement a")
    c.add_task("implement b", max_attempts=1)
    clock.advance(30)
    a = c.claim_best_task("w1", "developer")
    assert a is not None
    clock.advance(12)
    c.complete_task(a.id, "w1", a.epoch)
    assert c.claim_best_task("w1", "developer") is not None
    clock.advance(31)
    Monitor(c).tick(clock.now())  # w1 is dead: its lease recovered, the task failed

    s = _samples(metrics.render().decode())
    dev = (("role", "developer"),)
    assert s[("corral_task_wait_seconds_count", dev)] == 2
    assert s[("corral_task_wait_seconds_sum", dev)] == 30 + 42
    assert s[("corral_task_wait_seconds_bucket", (("le", "30.0"), *dev))] == 1
    assert s[("corral_task_run_seconds_count", dev)] == 1
    assert s[("corral_task_run_seconds_sum", dev)] == 12
    assert s[("corral_tasks_completed_total", dev)] == 1
    assert s[("corral_tasks_failed_total", dev)] == 1
    assert s[("corral_task_lease_recoveries_total", dev)] == 1


def test_the_alert_rules_gauges_read_the_store(faked: tuple[Cluster, FakeClock]) -> None:
    c, clock = faked
    c.report_processes(
        "h1",
        [
            {"agent": "relay", "state": "RUNNING", "restarts": 3, "flags": []},
            {"agent": "w", "state": "STOPPED", "restarts": 9, "flags": ["restart-exhausted"]},
        ],
    )
    c.request_spawn("dev", "developer", reason="backlog")
    clock.advance(100)
    c.request_spawn("dev", "developer", reason="backlog")
    clock.advance(20)
    c.serve_workflows("h1", [{"name": "hitl"}])
    handler_id = c.run_workflow("hitl")
    c.take_workflow_work("h1")
    waiter = {"step": "ask", "event_type": "Answer", "waiter_id": "x", "deadline": T0}
    c.report_handler("h1", handler_id, "idle", [waiter])

    s = _samples(Metrics(c).render().decode())
    assert s[("corral_process_restarts_total", (("agent", "relay"), ("host", "h1")))] == 3
    assert s[("corral_process_restart_exhausted", (("agent", "relay"), ("host", "h1")))] == 0
    assert s[("corral_process_restart_exhausted", (("agent", "w"), ("host", "h1")))] == 1
    assert s[("corral_spawn_request_oldest_pending_age_seconds", ())] == 120
    assert s[("corral_workflow_runs_past_deadline", ())] == 1
