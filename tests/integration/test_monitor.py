"""The monitor's duties with an injected clock: detection at the threshold itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from corral import Monitor
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.monitor import TickResult

T0 = 1_700_000_000.0


def kinds(result: TickResult, node_id: str | None = None) -> list[str]:
    return [e.kind for e in result.events if node_id is None or e.node_id == node_id]


def test_lease_recovered_at_the_threshold_not_after(embedded: Cluster, clock: FakeClock) -> None:
    """A node beating every 10 s is dead after 3 missed beats: at exactly +30 s, and
    the monitor's next deadline says so (a poller would act at threshold + interval)."""
    embedded.register_node("W", "developer", heartbeat_interval=10)
    task = embedded.add_task("Implement it")
    embedded.claim_best_task("W", "developer")
    claimed_at = clock.now()
    monitor = Monitor(embedded)

    early = monitor.tick(claimed_at + 29.999)
    assert kinds(early) == [] and early.next_deadline == claimed_at + 30
    late = monitor.tick(claimed_at + 30)
    assert kinds(late, "W") == ["lease_recovered", "node_dead"]
    rec = late.events[0]
    assert rec.task_id == task.id
    assert rec.data["stale_seconds"] == 30 and rec.data["attempt"] == 1
    assert embedded.get_task(task.id).status == "pending"
    assert embedded.get_node("W").status == "terminated"


def test_heartbeats_and_calls_keep_a_node_alive(embedded: Cluster, clock: FakeClock) -> None:
    embedded.register_node("W", "developer", heartbeat_interval=10)
    embedded.add_task("Implement it")
    embedded.claim_best_task("W", "developer")
    monitor = Monitor(embedded)
    clock.advance(25)
    embedded.heartbeat("W", metrics={"cpu_usage": 5.0, "memory_usage": 100})
    assert kinds(monitor.tick(clock.now() + 29.9)) == []
    assert monitor.tick(clock.now() + 30).events[0].kind == "lease_recovered"


def test_silent_node_without_declared_interval_dies_at_stale_threshold(
    embedded: Cluster, clock: FakeClock
) -> None:
    """No declared interval: 3 x 300 s would be 15 min, but stale_threshold caps it at 10."""
    embedded.register_node("W", "developer")
    embedded.set_agent_status("W", "working")
    monitor = Monitor(embedded)
    assert kinds(monitor.tick(clock.now() + 599.9)) == []
    assert kinds(monitor.tick(clock.now() + 600), "W") == ["node_dead"]


def test_a_node_that_registers_and_never_works_is_retired_as_idle(
    embedded: Cluster, clock: FakeClock
) -> None:
    embedded.register_node("W", "developer", heartbeat_interval=1000)
    assert embedded.get_node("W").status == "idle"
    assert kinds(Monitor(embedded).tick(clock.now() + 60), "W") == ["node_retired"]


def test_idle_node_retired_at_exactly_sixty_seconds(embedded: Cluster, clock: FakeClock) -> None:
    """Defaults: idle_timeout 30 s + grace 30 s."""
    embedded.register_node("W", "developer", heartbeat_interval=1000)
    embedded.set_agent_status("W", "idle")
    since = clock.now()
    monitor = Monitor(embedded)
    r = monitor.tick(since + 59.999)
    assert kinds(r) == [] and r.next_deadline == since + 60
    r = monitor.tick(since + 60)
    assert kinds(r, "W") == ["node_retired"]
    assert embedded.get_node("W").status == "terminated"


def test_idle_since_is_kept_while_idle_and_cleared_on_work(
    embedded: Cluster, clock: FakeClock
) -> None:
    embedded.register_node("W", "developer", heartbeat_interval=1000)
    embedded.set_agent_status("W", "idle")
    since = clock.now()
    clock.advance(20)
    assert embedded.set_agent_status("W", "idle").idle_since == since
    clock.advance(20)
    embedded.add_task("Implement more")
    embedded.claim_best_task("W", "developer")
    assert embedded.get_node("W").idle_since is None
    assert kinds(Monitor(embedded).tick(since + 60)) == []


def test_manager_is_never_retired_for_idleness(embedded: Cluster, clock: FakeClock) -> None:
    """Idle for hours while heartbeating: still there."""
    embedded.register_node("BM", "bootstrap_manager", heartbeat_interval=20)
    embedded.set_agent_status("BM", "idle")
    monitor = Monitor(embedded)
    for _ in range(360):
        clock.advance(20)
        embedded.heartbeat("BM")
        assert kinds(monitor.tick(clock.now()), "BM") == []
    node = embedded.get_node("BM")
    assert node.status == "idle" and node.idle_since is not None
    assert clock.now() - node.idle_since == 7200


def test_dead_manager_leaves_a_recovery_task_and_asks_the_user(
    embedded: Cluster, clock: FakeClock
) -> None:
    embedded.register_node("BM", "bootstrap_manager", heartbeat_interval=20)
    r = Monitor(embedded).tick(clock.now() + 60)
    assert kinds(r, "BM") == ["node_dead", "manager_lost"]
    recovery = embedded.list_tasks(status="pending")
    assert len(recovery) == 1 and recovery[0].priority == "high"
    assert "BM" in recovery[0].title and recovery[0].roles == ("bootstrap_manager",)
    state = embedded.read_state()
    assert state.metadata["ask_user"] is True
    assert "Ask User:" in state.text
    embedded.register_node("BM2", "bootstrap_manager")
    assert embedded.read_state().metadata["ask_user"] is False


def test_assessment_refreshed_every_interval(embedded: Cluster, clock: FakeClock) -> None:
    monitor = Monitor(embedded)
    first = monitor.tick(clock.now())
    assert first.assessment is not None
    assert first.next_deadline == clock.now() + 25
    assert monitor.tick(clock.now() + 24.9).assessment is None
    assert monitor.tick(clock.now() + 25).assessment is not None


def test_lost_lease_past_max_attempts_fails_the_task(embedded: Cluster, clock: FakeClock) -> None:
    embedded.register_node("W", "developer", heartbeat_interval=1)
    task = embedded.add_task("Implement poison", max_attempts=1)
    embedded.claim_best_task("W", "developer")
    r = Monitor(embedded).tick(clock.now() + 3)
    assert r.events[0].data["outcome"] == "failed"
    assert embedded.get_task(task.id).status == "failed"


def test_run_loop_acts_at_the_deadline_in_real_time(tmp_path: Path) -> None:
    """The daemon is the tick in a loop: a real node that stops beating loses its lease
    within its window plus the loop's sleep bound."""
    import corral

    url = f"sqlite:///{tmp_path / 'm.db'}"
    with corral.connect(url) as c:
        c.register_node("W", "developer", heartbeat_interval=0.1)
        c.add_task("Implement it")
        c.claim_best_task("W", "developer")
        start = time.monotonic()
        monitor = Monitor(corral.connect(url), max_sleep=0.05)
        thread = threading.Thread(target=monitor.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while c.list_tasks(status="pending") == [] and time.monotonic() < deadline:
                time.sleep(0.01)
            took = time.monotonic() - start
        finally:
            monitor.stop()
            thread.join(timeout=5)
        assert c.list_tasks(status="pending") != [], "lease never recovered"
        assert took < 2.0
        assert not thread.is_alive()


def test_a_tick_goes_by_the_deadlines_it_is_given(embedded: Cluster, clock: FakeClock) -> None:
    """``run`` hands a timer wake the deadlines the last tick read: the tick then does
    not read them, and does only what they say is due (a duty's own query decides)."""
    from corral.deadlines import Deadlines

    embedded.register_node("W", "developer", heartbeat_interval=10)
    embedded.add_task("Implement it")
    embedded.claim_best_task("W", "developer")
    dead_at = embedded.get_node("W").dead_at
    assert dead_at is not None
    monitor = Monitor(embedded)
    monitor.tick(dead_at - 1)  # reads them: the assessment is done, nothing else due
    nothing_due = Deadlines(dead_at=None, idle_retire_at=None, assess_at=dead_at + 100)
    assert kinds(monitor.tick(dead_at + 1, due=nothing_due)) == []
    assert embedded.get_node("W").status == "working"
    # By the deadlines it read itself (the node's death among them) it reaps.
    assert kinds(monitor.tick(dead_at + 1), "W") == ["lease_recovered", "node_dead"]


def test_a_tick_woken_early_does_its_work_at_the_deadline_not_before(tmp_path: Path) -> None:
    """``run`` wakes a little before a deadline (``EARLY``): the tick checks the
    election, then waits for the deadline, and its work is stamped at or after it."""
    import corral
    from corral.monitor import EARLY

    url = f"sqlite:///{tmp_path / 'early.db'}"
    with corral.connect(url) as c:
        c.register_node("W", "developer", heartbeat_interval=0.5)
        c.add_task("Implement it")
        c.claim_best_task("W", "developer")
        dead_at = c.get_node("W").dead_at
        assert dead_at is not None
        monitor = Monitor(corral.connect(url))
        deadline = time.time() + 10
        while time.time() < dead_at - EARLY:  # the run loop's own wake-up, a bit early
            assert time.time() < deadline
            time.sleep(min(0.05, max(0.0, dead_at - EARLY - time.time())))
        known = monitor.cluster.store.deadlines()
        result = monitor.tick(due=known, at=dead_at)
        assert kinds(result, "W") == ["lease_recovered", "node_dead"]
        assert all(e.ts >= dead_at for e in result.events)
        monitor.cluster.close()
