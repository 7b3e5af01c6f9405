"""What the worker SDK records (docs/worker.md): alert, record_metrics,
metrics_series; and stats, the counts behind /metrics and /v1/stats."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError
from corral.clock import FakeClock
from tests.contract._world import T0, world

OPERATIONS = ("alert", "record_metrics", "metrics_series", "stats")
BAD_INPUT = ("alert", "record_metrics", "metrics_series")


def test_an_alert_is_an_event_with_its_data(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    clock.advance(3)
    ev = cluster.alert("heartbeat destination failed 3 times", node_id="A", failures=3, dest="s3")
    assert (ev.kind, ev.node_id, ev.task_id, ev.ts) == ("alert", "A", None, T0 + 3)
    assert ev.data == {
        "failures": 3,
        "dest": "s3",
        "message": "heartbeat destination failed 3 times",
    }
    assert cluster.events()[-1] == ev
    plain = cluster.alert("disk nearly full")
    assert (plain.node_id, plain.data) == (None, {"message": "disk nearly full"})
    assert plain.seq > ev.seq
    assert [e.kind for e in cluster.catch_up("A").events][-2:] == ["alert", "alert"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.alert(""), "message"),
        (lambda c: c.alert(" \n "), "message"),
        (lambda c: c.alert("m" * 20_001), "message"),
        (lambda c: c.alert("hi", node_id="bad\nid"), "node_id"),
        (lambda c: c.alert("hi", blob="x" * 70_000), "data"),
    ],
)
def test_alert_refuses_bad_input(cluster: Any, call: Any, field: str) -> None:
    cluster.register_node("A", "developer")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        call(cluster)
    assert exc.value.field == field
    assert world(cluster) == before


def test_samples_form_a_series_that_keep_prunes(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    points = []
    for i in range(5):
        clock.advance(1)
        points.append(cluster.record_metrics("A", {"cpu_usage": float(i), "n": i}))
        cluster.record_metrics("B", {"cpu_usage": 50.0})
    first = points[0]
    assert (first.kind, first.node_id, first.ts) == ("heartbeat_sample", "A", T0 + 1)
    assert first.data == {"cpu_usage": 0.0, "n": 0}
    assert cluster.metrics_series("A") == points
    assert cluster.metrics_series("A", limit=2) == points[3:]  # the newest, oldest first
    assert len(cluster.metrics_series("B")) == 5
    newest = cluster.record_metrics("A", {"cpu_usage": 9.0}, keep=3)
    assert cluster.metrics_series("A") == [*points[3:], newest]
    assert len(cluster.metrics_series("B")) == 5  # keep prunes only A's series
    assert cluster.metrics_series("Nobody") == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.record_metrics("A", [1, 2]), "sample"),
        (lambda c: c.record_metrics("A", "cpu=3"), "sample"),
        (lambda c: c.record_metrics("A", {"blob": "x" * 70_000}), "sample"),
        (lambda c: c.record_metrics("A", {"cpu_usage": 1.0}, keep=0), "keep"),
        (lambda c: c.record_metrics("A", {"cpu_usage": 1.0}, keep=True), "keep"),
        (lambda c: c.record_metrics("", {"cpu_usage": 1.0}), "node_id"),
        (lambda c: c.metrics_series("A", limit=0), "limit"),
        (lambda c: c.metrics_series("A", limit=2**63), "limit"),
        (lambda c: c.metrics_series("x" * 65), "node_id"),
    ],
)
def test_metrics_refuse_bad_input(cluster: Any, call: Any, field: str) -> None:
    cluster.register_node("A", "developer")
    cluster.record_metrics("A", {"cpu_usage": 1.0})
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        call(cluster)
    assert exc.value.field == field
    assert world(cluster) == before
    assert len(cluster.metrics_series("A")) == 1


def test_stats_count_nodes_tasks_and_claims(cluster: Any, clock: FakeClock) -> None:
    empty = cluster.stats()
    assert (empty.nodes, empty.tasks, empty.claims, empty.completions) == ({}, {}, 0, 0)
    assert (empty.last_event, empty.max_agents, empty.live_nodes) == (0, 4, [])
    cluster.register_node("BM", "bootstrap_manager")
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    cluster.terminate_node("B")
    cluster.add_tasks([{"title": f"Implement {i}"} for i in range(3)])
    clock.advance(61)  # over a tenth of A's 600 s window: its claim re-stamps it
    t = cluster.claim_best_task("A", "developer")
    cluster.complete_task(t.id, "A", t.epoch)
    t = cluster.claim_best_task("A", "developer")
    a = cluster.assess_workload()
    s = cluster.stats()
    assert s.nodes == {
        "working": {"bootstrap_manager": 1, "developer": 1},
        "terminated": {"developer": 1},
    }
    assert s.tasks == {"done": 1, "in_progress": 1, "pending": 1}
    assert (s.claims, s.completions, s.lease_recoveries, s.max_agents) == (2, 1, 0, 4)
    assert s.last_event == cluster.events()[-1].seq
    assert s.assessment == {
        "last_assessment": a.assessed_at,
        "workload_status": a.status,
        "spawn_recommendation": a.recommendation,
    }
    live = {n["id"]: n for n in s.live_nodes}
    assert set(live) == {"BM", "A"}
    assert (live["A"]["role"], live["A"]["status"], live["A"]["last_seen"]) == (
        "developer",
        "working",
        T0 + 61,
    )


def test_a_nodes_inbox_counts_the_events_after_its_cursor(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.add_tasks([{"title": f"Implement {i}"} for i in range(3)])
    cluster.broadcast("hello")
    # A never caught up: its inbox is every event from its registration on
    [a] = cluster.stats().live_nodes
    assert a["inbox"] == len(cluster.events(since=cluster.get_node("A").cursor)) == 5
    cluster.catch_up("A")
    cluster.add_task("Implement more")
    [a] = cluster.stats().live_nodes
    assert a["inbox"] == 1


def test_every_live_nodes_inbox_is_counted_at_its_own_cursor_and_capped(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes caught up to different points (two at the same one), with gaps in the
    event numbers (pruned metrics samples): each inbox is the events after its own
    cursor; an inbox is at most ``MAX_INBOX``, and a terminated node is not listed.
    The assessment's counts come with the stats (the Fleet panel's)."""
    from corral.store import stats

    cluster.configure(max_agents=10)
    for name in "ABCDE":
        cluster.register_node(name, "developer")
    for i in range(12):
        cluster.add_task(f"Implement {i}")
        cluster.record_metrics("A", {"step": i}, keep=1)
        for name in {2: "B", 5: "CE", 9: "D"}.get(i, ""):
            cluster.catch_up(name)
    cluster.terminate_node("D")
    cluster.assess_workload()
    got = cluster.stats()
    assert sorted(n["id"] for n in got.live_nodes) == ["A", "B", "C", "E"]
    for n in got.live_nodes:
        cursor = cluster.get_node(n["id"]).cursor
        assert n["inbox"] == len(cluster.events(since=cursor, limit=10_000)), n["id"]
    assert len({n["inbox"] for n in got.live_nodes}) == 3  # C and E share a cursor
    assert got.metadata["pending_task_count"] == 12
    assert got.metadata["active_agent_count"] == 4
    monkeypatch.setattr(stats, "MAX_INBOX", 3)
    assert {n["inbox"] for n in cluster.stats().live_nodes} == {3}


def test_stats_count_the_tasks_finished_in_the_last_hour(cluster: Any, clock: FakeClock) -> None:
    """``finished_last_hour``: done, failed and cancelled tasks by the time they
    finished, the hour before the cluster's clock (what the Fleet panel and
    ``corral status`` show); a requeued task is no longer finished."""
    cluster.register_node("A", "developer")
    cluster.add_tasks([{"title": f"Implement {i}"} for i in range(5)])
    t = cluster.claim_best_task("A", "developer")
    cluster.complete_task(t.id, "A", t.epoch)  # done at T0, out of the window later
    clock.advance(1800)
    t = cluster.claim_best_task("A", "developer")
    cluster.complete_task(t.id, "A", t.epoch)
    t = cluster.claim_best_task("A", "developer")
    cluster.fail_task(t.id, "A", t.epoch, "boom", retry=False)
    failed = t.id
    t = cluster.claim_best_task("A", "developer")
    cluster.cancel_task(t.id, "not needed")
    assert cluster.stats().finished_last_hour == {"done": 2, "failed": 1, "cancelled": 1}
    clock.advance(1801)  # the first completion is an hour and a second old
    cluster.requeue_task(failed)
    s = cluster.stats()
    assert s.finished_last_hour == {"done": 1, "cancelled": 1}
    assert s.tasks == {"done": 2, "cancelled": 1, "pending": 2}


def test_stats_name_the_last_lease_recovery(embedded: Any, clock: FakeClock) -> None:
    """``last_recovery`` is the newest ``lease_recovered`` event's time (None before
    the first), beside their count."""
    from corral.monitor import Monitor

    assert embedded.stats().last_recovery is None
    embedded.register_node("A", "developer", heartbeat_interval=20)
    embedded.add_task("Implement it")
    embedded.claim_best_task("A", "developer")
    clock.advance(61)  # A missed 3 beats: dead, its lease recovered
    Monitor(embedded).tick(clock.now())
    s = embedded.stats()
    [recovered] = [e for e in embedded.events() if e.kind == "lease_recovered"]
    assert (s.lease_recoveries, s.last_recovery) == (1, recovered.ts)
    assert recovered.ts == T0 + 61
