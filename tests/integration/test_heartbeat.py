"""HeartbeatMonitor: the document's payload, counters, health, schedule, the thread
and asyncio loops, the final beat, and a node the cluster has terminated."""

from __future__ import annotations

import asyncio
import time

import pytest

import corral
from corral.clock import FakeClock
from corral.health import HealthThresholds
from corral.worker.heartbeat import HeartbeatMonitor, next_beat
from tests.support.worker_app import wait_for

DOC_KEYS = {
    "worker_id",
    "timestamp",
    "health_status",
    "current_tasks",
    "capacity_available",
    "metrics",
}


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (0.0, 0.0, 5.0),
        (0.0, 4.9, 5.0),
        (0.0, 5.0, 5.0),
        (0.0, 5.1, 10.0),
        (0.0, 12.0, 15.0),
        (100.0, 130.0, 130.0),
    ],
)
def test_next_beat_stays_on_the_grid_and_skips_missed_slots(
    previous: float, now: float, expected: float
) -> None:
    assert next_beat(previous, 5.0, now) == expected


# A beat's health comes from this process's real CPU, which a busy test run can push
# past 90 %: the tests that expect "healthy" give thresholds no CPU measurement reaches.


@pytest.fixture
def node(sqlite_cluster: corral.Cluster) -> corral.Cluster:
    sqlite_cluster.register_node("W1", "developer", heartbeat_interval=5.0)
    return sqlite_cluster


def test_payload_is_the_documents_heartbeat_data(node: corral.Cluster, clock: FakeClock) -> None:
    calm = HealthThresholds(cpu_degraded=1e9, cpu_unhealthy=1e9)
    hb = HeartbeatMonitor("W1", node, capacity=3, clock=clock, thresholds=calm)
    hb.add_task(12)
    hb.add_task("13")
    hb.add_task(12)
    hb.record_task_completion()
    hb.record_task_completion()
    hb.record_task_failure()
    p = hb.payload()
    assert set(p) == DOC_KEYS
    assert p["worker_id"] == "W1" and p["timestamp"] == int(clock.now() * 1000)
    assert p["current_tasks"] == ["12", "13"] and p["capacity_available"] == 1
    assert p["health_status"] == "healthy"
    m = p["metrics"]
    assert set(m) == {"cpu_usage", "memory_usage", "tasks_completed", "tasks_failed", "uptime"}
    assert (m["tasks_completed"], m["tasks_failed"]) == (2, 1)
    assert m["memory_usage"] > 5 and m["cpu_usage"] >= 0 and m["uptime"] >= 0
    hb.remove_task(12)
    hb.remove_task(99)
    assert hb.payload()["current_tasks"] == ["13"]


def test_uptime_comes_from_the_injected_monotonic_clock(node: corral.Cluster) -> None:
    t = [100.0]
    hb = HeartbeatMonitor("W1", node, monotonic=lambda: t[0])
    t[0] = 7300.0
    assert hb.get_metrics()["uptime"] == 7200.0


def test_health_thresholds_are_configurable(node: corral.Cluster) -> None:
    rss = HeartbeatMonitor("W1", node).get_metrics()["memory_usage"]
    degraded = HeartbeatMonitor("W1", node, thresholds=HealthThresholds(mem_degraded=rss / 2))
    assert degraded.get_health_status() == "degraded"
    sick = HeartbeatMonitor(
        "W1", node, thresholds=HealthThresholds(mem_degraded=1, mem_unhealthy=2)
    )
    assert sick.get_health_status() == "unhealthy"
    assert sick.payload()["health_status"] == "unhealthy"


def test_beat_stores_the_payload_and_renews_the_node(
    node: corral.Cluster, clock: FakeClock
) -> None:
    calm = HealthThresholds(cpu_degraded=1e9, cpu_unhealthy=1e9)
    hb = HeartbeatMonitor("W1", node, clock=clock, thresholds=calm)
    clock.advance(3)
    sent = hb.beat()
    n = node.get_node("W1")
    assert n.heartbeat == sent and n.last_heartbeat == clock.now()
    assert sent["health_status"] == "healthy"
    assert n.health == "healthy" and n.dead_at == clock.now() + 15.0


def test_stop_with_final_fields_sends_a_last_beat(node: corral.Cluster, clock: FakeClock) -> None:
    hb = HeartbeatMonitor("W1", node, clock=clock)
    hb.add_task(5)
    hb.stop(final={"status": "shutting-down"})
    beat = node.get_node("W1").heartbeat
    assert beat["status"] == "shutting-down" and beat["current_tasks"] == ["5"]


def test_thread_beats_every_interval_until_stopped(node: corral.Cluster) -> None:
    hb = HeartbeatMonitor("W1", node, heartbeat_interval=0.05)
    hb.start()
    wait_for(lambda: hb.beats >= 4, timeout=5, what="4 beats")
    thread = hb._thread
    hb.stop()
    # The only sender has exited, so a stopped monitor sends nothing more.
    assert thread is not None and not thread.is_alive()
    assert hb._thread is None


def test_asyncio_variant_beats_and_sends_the_final_beat(node: corral.Cluster) -> None:
    hb = HeartbeatMonitor("W1", node, heartbeat_interval=0.05)

    async def scenario() -> int:
        await hb.start_async()
        deadline = time.monotonic() + 5
        while hb.beats < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await hb.stop_async(final={"status": "shutting-down"})
        return hb.beats

    assert asyncio.run(scenario()) >= 4
    assert node.get_node("W1").heartbeat["status"] == "shutting-down"


def test_a_terminated_node_is_reported_once_not_retried(node: corral.Cluster) -> None:
    lost: list[Exception] = []
    sleeps: list[float] = []
    hb = HeartbeatMonitor("W1", node, on_node_lost=lost.append, sleep=sleeps.append)
    node.terminate_node("W1")
    hb.beat()
    hb.beat()
    assert len(lost) == 1 and isinstance(lost[0], corral.NotFoundError)
    assert hb.node_lost is lost[0] and sleeps == []
    assert not [e for e in node.events(0) if e.kind == "alert"]
