"""Tasks with time and order on PostgreSQL under locks another session holds: the
monitor's pass skips a due scheduled task whose row is locked (it never waits on it)
and comes back to it a moment later instead of at once (no busy loop), then makes it
pending."""

from __future__ import annotations

import psycopg
import pytest

import corral
from corral.clock import FakeClock
from corral.monitor import Monitor
from tests.support.backends import postgres as pg

T0 = 1_700_000_000.0


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    return pg.fresh_database(request)


def test_a_locked_due_task_is_skipped_and_retried_shortly(pg_url: str) -> None:
    clock = FakeClock(T0)
    c = corral.connect(pg_url, clock=clock)
    assert isinstance(c, corral.Cluster)
    task = c.add_task("Implement the nightly job", not_before=T0 + 10)
    monitor = Monitor(c, name="locked-test")
    with psycopg.connect(pg_url) as other:  # a session holding the task's row
        other.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (task.id,))
        clock.set(T0 + 10)
        result = monitor.tick(T0 + 10)
        assert [e for e in result.events if e.task_id == task.id] == []
        assert c.get_task(task.id).status == "scheduled"
        # the next pass is the retry a moment later, not an immediate one
        assert c.store.deadlines().task_ready_at == pytest.approx(T0 + 10.05)
        other.rollback()
    clock.set(T0 + 10.05)
    events = monitor.tick(T0 + 10.05).events
    assert [(e.kind, e.task_id) for e in events] == [("task_ready", task.id)]
    assert c.get_task(task.id).status == "pending"
    assert c.store.deadlines().task_ready_at is None
    c.close()


def test_a_run_whose_holder_row_is_locked_is_timed_out_shortly_after(pg_url: str) -> None:
    """The holder's node row held by another session at the run's deadline: the pass
    skips it rather than wait, retries a moment later and then takes the run back."""
    clock = FakeClock(T0)
    c = corral.connect(pg_url, clock=clock)
    assert isinstance(c, corral.Cluster)
    c.register_node("A", "developer")
    task = c.add_task("Implement the slow job", timeout=5)
    assert c.claim_best_task("A", "developer") is not None
    monitor = Monitor(c, name="locked-test")
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT 1 FROM nodes WHERE id = 'A' FOR UPDATE")
        clock.set(T0 + 5)
        assert [e for e in monitor.tick(T0 + 5).events if e.task_id == task.id] == []
        assert c.store.deadlines().task_timeout_at == pytest.approx(T0 + 5.05)
        other.rollback()
    clock.set(T0 + 5.05)
    events = monitor.tick(T0 + 5.05).events
    assert [(e.kind, e.task_id) for e in events] == [("task_timed_out", task.id)]
    assert c.store.deadlines().task_timeout_at is None
    c.close()
