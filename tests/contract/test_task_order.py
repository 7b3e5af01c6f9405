"""Tasks with time and order (docs/core.md "Tasks with time and order") on every
backend: ``add_task``'s ``timeout``, ``not_before``, ``depends_on`` and
``retry_backoff``.

A task not ready yet is ``scheduled`` (until its ``ready_at``) or ``blocked`` (on its
dependencies) and no claim takes it; the monitor makes a scheduled task pending at its
time and takes a run back at its timeout; a dependency's completion makes its
dependents pending in the same transaction. The monitor runs on the store behind the
client (the HTTP backend's is the SQLite file its server serves), on the fake clock.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import corral
from corral import ConflictError, InvalidInputError, LeaseError, NotFoundError
from corral.clock import FakeClock
from corral.defaults import SQLITE_WAIT_RECHECK
from corral.monitor import Monitor
from corral.store.signal import ReadySignal, signal_for
from corral.types import Client
from tests.contract._world import T0
from tests.support.worker_app import wait_for

OPERATIONS = ("add_task",)
BAD_INPUT = ("add_task",)


@pytest.fixture
def monitor(cluster: Client, tmp_path: Path, clock: FakeClock) -> Monitor:
    """The monitor over the cluster's store (for HTTP: the file the server serves)."""
    if isinstance(cluster, corral.Cluster):
        return Monitor(cluster, name="contract")
    behind = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    assert isinstance(behind, corral.Cluster)
    return Monitor(behind, name="contract")


def _signal(cluster: Any, tmp_path: Path) -> ReadySignal:
    """The wake-up a waiting claim blocks on: the store's, or for the HTTP backend the
    server's (same process, same SQLite file, one signal per file)."""
    store = getattr(cluster, "store", None)
    return store._ready if store is not None else signal_for(tmp_path / "corral.db")


def _kinds(monitor: Monitor, now: float) -> list[tuple[str, int | None]]:
    """The task events of the monitor's pass at ``now`` (an idle node's retirement
    aside)."""
    return [(e.kind, e.task_id) for e in monitor.tick(now).events if e.task_id is not None]


# --- not_before -------------------------------------------------------------------------
def test_not_before_keeps_a_task_unclaimable_until_its_time(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """A task with not_before T0+60 is scheduled: no claim takes it before T0+60, the
    monitor does nothing at T0+59.999 and makes it pending at exactly T0+60; then it
    is claimed in its old place: before a task of the same priority added later."""
    cluster.register_node("A", "developer")
    delayed = cluster.add_task("Implement the nightly export", not_before=T0 + 60)
    assert (delayed.status, delayed.not_before, delayed.ready_at) == (
        "scheduled",
        T0 + 60,
        T0 + 60,
    )
    assert cluster.claim_best_task("A", "developer") is None
    clock.set(T0 + 30)
    later = cluster.add_task("Implement the morning report")
    assert _kinds(monitor, T0 + 59.999) == []
    clock.set(T0 + 60)
    assert _kinds(monitor, T0 + 60) == [("task_ready", delayed.id)]
    assert cluster.get_task(delayed.id).status == "pending"
    cluster.register_node("A", "developer")  # retired for idleness meanwhile
    first = cluster.claim_best_task("A", "developer")
    assert first is not None and first.id == delayed.id  # the older task first
    second = cluster.claim_best_task("A", "developer")
    assert second is not None and second.id == later.id


def test_a_past_not_before_is_pending_at_once(cluster: Client) -> None:
    """not_before at or before now: the task is pending as it is added."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement it", not_before=T0 - 10)
    assert (task.status, task.not_before, task.ready_at) == ("pending", T0 - 10, None)
    claimed = cluster.claim_best_task("A", "developer")
    assert claimed is not None and claimed.id == task.id


def test_a_waiting_claim_is_woken_when_not_before_comes_due(
    cluster: Client, monitor: Monitor, clock: FakeClock, tmp_path: Path
) -> None:
    """A claim waiting on a board whose only task is delayed takes it once the monitor
    makes it pending (woken by the store's signal, long before its wait is up)."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the delayed job", not_before=T0 + 20)
    signal = _signal(cluster, tmp_path)

    due_at: list[float] = []

    def due_later() -> None:
        wait_for(lambda: signal.waiters > 0, timeout=10, what="the claim waiting")
        clock.set(T0 + 20)
        monitor.tick(T0 + 20)
        due_at.append(time.monotonic())

    thread = threading.Thread(target=due_later)
    thread.start()
    got = cluster.claim_best_task("A", "developer", wait=30)
    taken_at = time.monotonic()
    thread.join()
    assert got is not None and got.id == task.id
    # woken by the monitor's commit, not found by SQLite's re-check a second later
    assert taken_at - due_at[0] < SQLITE_WAIT_RECHECK / 2


# --- timeout ----------------------------------------------------------------------------
def test_a_run_past_its_timeout_is_taken_back_at_the_deadline(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """timeout 30: at claim + 29.999 nothing happens; at claim + 30 the monitor takes
    the run back (pending again, attempts remaining); the holder's heartbeat naming
    the task answers it in cancelled_tasks (its worker stops the run), its completion
    is refused, and the next claim has a new epoch."""
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    task = cluster.add_task("Implement the slow job", timeout=30, max_attempts=3)
    assert task.timeout == 30
    clock.set(T0 + 10)
    held = cluster.claim_best_task("A", "developer")
    assert held is not None and held.timeout == 30
    assert _kinds(monitor, T0 + 39.999) == []
    clock.set(T0 + 40)
    events = monitor.tick(T0 + 40).events
    assert [(e.kind, e.task_id, e.node_id) for e in events] == [("task_timed_out", task.id, "A")]
    assert events[0].data["outcome"] == "pending"
    assert events[0].data["new_epoch"] == held.epoch + 1
    back = cluster.get_task(task.id)
    assert (back.status, back.assigned_to, back.epoch) == ("pending", None, held.epoch + 1)
    assert "timed out" in (back.error or "")
    assert cluster.get_node("A").status == "idle"
    assert cluster.heartbeat("A", current_tasks=[task.id]).cancelled_tasks == [task.id]
    with pytest.raises(LeaseError, match=f"the task is at epoch {held.epoch + 1}"):
        cluster.complete_task(task.id, "A", held.epoch, result="late")
    again = cluster.claim_best_task("B", "developer")
    assert again is not None and again.id == task.id and again.epoch > held.epoch
    assert cluster.heartbeat("B", current_tasks=[task.id]).cancelled_tasks == []
    assert cluster.complete_task(task.id, "B", again.epoch).status == "done"


def test_a_timeout_on_the_last_attempt_fails_the_task(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """With no attempt left the run taken back fails the task for good, with the
    reason, and the holder's heartbeat still names it to stop."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the slow job", timeout=5, max_attempts=1)
    held = cluster.claim_best_task("A", "developer")
    assert held is not None
    clock.set(T0 + 5)
    [event] = monitor.tick(T0 + 5).events
    assert (event.kind, event.data["outcome"]) == ("task_timed_out", "failed")
    failed = cluster.get_task(task.id)
    assert failed.status == "failed"
    assert "timed out: ran longer than its timeout of 5s" in (failed.error or "")
    assert cluster.heartbeat("A", current_tasks=[task.id]).cancelled_tasks == [task.id]


def test_a_run_finished_in_time_is_left_alone(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the quick job", timeout=5)
    held = cluster.claim_best_task("A", "developer")
    assert held is not None
    clock.set(T0 + 4)
    cluster.complete_task(task.id, "A", held.epoch)
    assert _kinds(monitor, T0 + 10) == []
    assert cluster.get_task(task.id).status == "done"


# --- depends_on -------------------------------------------------------------------------
def test_a_task_waits_for_its_dependencies_to_be_done(cluster: Client) -> None:
    """B depends on A and C on A and B: blocked until each dependency is done, then
    pending in the same transaction as the completion (a task_unblocked event)."""
    cluster.register_node("W", "developer")
    a = cluster.add_task("Implement the schema")
    b = cluster.add_task("Implement the API", depends_on=[a.id])
    c = cluster.add_task("Implement the UI", depends_on=[a.id, f"task-{b.id}"])
    assert (b.status, b.depends_on, c.status, c.depends_on) == (
        "blocked",
        (a.id,),
        "blocked",
        (a.id, b.id),
    )
    first = cluster.claim_best_task("W", "developer")
    assert first is not None and first.id == a.id
    assert cluster.claim_best_task("W", "developer") is None
    cluster.complete_task(a.id, "W", first.epoch)
    assert cluster.get_task(b.id).status == "pending"
    assert cluster.get_task(c.id).status == "blocked"  # still waits on B
    unblocked = [e for e in cluster.events() if e.kind == "task_unblocked"]
    assert [(e.task_id, e.data["after"]) for e in unblocked] == [(b.id, a.id)]
    second = cluster.claim_best_task("W", "developer")
    assert second is not None and second.id == b.id
    cluster.complete_task(b.id, "W", second.epoch)
    third = cluster.claim_best_task("W", "developer")
    assert third is not None and third.id == c.id


def test_a_waiting_task_is_rematched_when_the_role_keywords_change(cluster: Client) -> None:
    """A blocked task's roles follow a role_keywords change like a pending one's, and
    it is claimed with its new role's bonus once ready."""
    cluster.register_node("W", "architect")
    a = cluster.add_task("Sketch the plan")
    b = cluster.add_task("Polish the prose", depends_on=[a.id])
    cluster.configure(role_keywords={"developer": ["sketch"], "architect": ["polish"]})
    assert cluster.get_task(b.id).roles == ("architect",)
    held = cluster.claim_best_task("W", "architect")
    assert held is not None and held.id == a.id
    older = cluster.add_task("Sketch the API", priority="high")  # 30 points, no bonus
    cluster.complete_task(a.id, "W", held.epoch)
    nxt = cluster.claim_best_task("W", "architect")  # 20 + 15 beats 30
    assert nxt is not None and (nxt.id, nxt.roles) == (b.id, ("architect",))
    assert cluster.get_task(older.id).status == "pending"


def test_a_waiting_claim_is_woken_by_a_dependency_done(cluster: Client, tmp_path: Path) -> None:
    """A claim waiting on a board whose only other task is blocked takes it as soon as
    another node completes its dependency (the completion's commit wakes it)."""
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    first = cluster.add_task("Implement the schema")
    held = cluster.claim_best_task("B", "developer")
    assert held is not None
    blocked = cluster.add_task("Implement the API", depends_on=[first.id])
    signal = _signal(cluster, tmp_path)

    done_at: list[float] = []

    def complete_later() -> None:
        wait_for(lambda: signal.waiters > 0, timeout=10, what="the claim waiting")
        cluster.complete_task(first.id, "B", held.epoch)
        done_at.append(time.monotonic())

    thread = threading.Thread(target=complete_later)
    thread.start()
    got = cluster.claim_best_task("A", "developer", wait=30)
    taken_at = time.monotonic()
    thread.join()
    assert got is not None and got.id == blocked.id
    # woken by the commit, not found by SQLite's re-check a second later
    assert taken_at - done_at[0] < SQLITE_WAIT_RECHECK / 2


def test_a_blocked_task_with_a_later_not_before_waits_for_both(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """Its dependency done before its not_before: scheduled until then, not pending."""
    cluster.register_node("W", "developer")
    a = cluster.add_task("Implement the schema")
    b = cluster.add_task("Implement the API", depends_on=[a.id], not_before=T0 + 30)
    assert (b.status, b.ready_at) == ("blocked", T0 + 30)
    held = cluster.claim_best_task("W", "developer")
    assert held is not None
    cluster.complete_task(a.id, "W", held.epoch)
    assert cluster.get_task(b.id).status == "scheduled"
    assert cluster.claim_best_task("W", "developer") is None
    clock.set(T0 + 30)
    assert _kinds(monitor, T0 + 30) == [("task_ready", b.id)]
    got = cluster.claim_best_task("W", "developer")
    assert got is not None and got.id == b.id


def test_a_done_dependency_does_not_block(cluster: Client) -> None:
    cluster.register_node("W", "developer")
    a = cluster.add_task("Implement the schema")
    held = cluster.claim_best_task("W", "developer")
    assert held is not None
    cluster.complete_task(a.id, "W", held.epoch)
    b = cluster.add_task("Implement the API", depends_on=[a.id])
    assert b.status == "pending"


def test_a_failed_dependency_fails_its_dependents_for_good(cluster: Client) -> None:
    """A fails for good: B (on A) and C (on B) fail with it, each error naming the
    dependency; a pending task not depending on A is untouched."""
    cluster.register_node("W", "developer")
    a = cluster.add_task("Implement the schema", max_attempts=1)
    b = cluster.add_task("Implement the API", depends_on=[a.id])
    c = cluster.add_task("Implement the UI", depends_on=[b.id])
    held = cluster.claim_best_task("W", "developer")
    assert held is not None and held.id == a.id
    other = cluster.add_task("Write the docs")
    cluster.fail_task(a.id, "W", held.epoch, error="the disk is full", retry=False)
    b_now, c_now = cluster.get_task(b.id), cluster.get_task(c.id)
    assert (b_now.status, c_now.status) == ("failed", "failed")
    assert b_now.error == f"dependency task {a.id} failed: the disk is full"
    assert (c_now.error or "").startswith(f"dependency task {b.id} failed")
    assert cluster.get_task(other.id).status == "pending"
    failed = [e for e in cluster.events() if e.kind == "task_failed" and e.task_id != a.id]
    assert [(e.task_id, e.data["dependency"]) for e in failed] == [(b.id, a.id), (c.id, b.id)]


def test_a_cancelled_dependency_cancels_its_dependents(cluster: Client) -> None:
    """A cancelled: B (on A) is cancelled with it; a blocked task can be cancelled
    itself too."""
    a = cluster.add_task("Implement the schema")
    b = cluster.add_task("Implement the API", depends_on=[a.id])
    c = cluster.add_task("Implement the UI", depends_on=[a.id])
    assert cluster.cancel_task(c.id, reason="not needed").status == "cancelled"
    cluster.cancel_task(a.id, reason="dropped")
    b_now = cluster.get_task(b.id)
    assert b_now.status == "cancelled"
    assert (b_now.error or "").startswith(f"dependency task {a.id} cancelled")


def test_a_cycle_or_an_unknown_dependency_is_refused_naming_it(cluster: Client) -> None:
    """A task naming its own id (the next one) is a cycle, refused naming it; an id
    not on the board is refused with its number (a task can name only tasks that
    exist before it, so no longer cycle can be made); nothing is added."""
    a = cluster.add_task("Implement the schema")
    with pytest.raises(InvalidInputError, match=f"task {a.id + 1}, the task itself") as cyc:
        cluster.add_task("Implement the API", depends_on=[a.id, a.id + 1])
    assert cyc.value.field == "depends_on"
    with pytest.raises(NotFoundError, match=f"unknown task {a.id + 100}") as info:
        cluster.add_task("Implement the API", depends_on=[a.id, a.id + 100])
    assert info.value.field == "depends_on"
    assert [t.id for t in cluster.list_tasks()] == [a.id]


def test_a_failed_dependency_is_refused(cluster: Client) -> None:
    cluster.register_node("W", "developer")
    a = cluster.add_task("Implement the schema", max_attempts=1)
    held = cluster.claim_best_task("W", "developer")
    assert held is not None
    cluster.fail_task(a.id, "W", held.epoch, error="broken", retry=False)
    with pytest.raises(ConflictError, match=f"task {a.id}, which is failed"):
        cluster.add_task("Implement the API", depends_on=[a.id])


def test_add_tasks_items_take_time_and_order(cluster: Client) -> None:
    """A batch's items take the same arguments: an item may depend on a task added
    before the batch."""
    a = cluster.add_task("Implement the schema")
    b, c = cluster.add_tasks(
        [
            {"title": "Implement the API", "depends_on": [a.id], "timeout": 60},
            {"title": "Implement the cron", "not_before": T0 + 60, "retry_backoff": 5},
        ]
    )
    assert (b.status, b.depends_on, b.timeout) == ("blocked", (a.id,), 60)
    assert (c.status, c.ready_at, c.retry_backoff) == ("scheduled", T0 + 60, 5)


# --- retry_backoff ----------------------------------------------------------------------
def test_a_failed_attempt_backs_off_doubling(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """retry_backoff 10: attempt 1 failing at T0 is claimable again at T0+10 (not
    before), attempt 2 failing at T0+10 at T0+30 (20 s)."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the flaky job", retry_backoff=10, max_attempts=5)
    held = cluster.claim_best_task("A", "developer")
    assert held is not None
    failed = cluster.fail_task(task.id, "A", held.epoch, error="flaky")
    assert (failed.status, failed.ready_at) == ("scheduled", T0 + 10)
    assert cluster.claim_best_task("A", "developer") is None
    assert _kinds(monitor, T0 + 9.999) == []
    clock.set(T0 + 10)
    assert _kinds(monitor, T0 + 10) == [("task_ready", task.id)]
    held = cluster.claim_best_task("A", "developer")
    assert held is not None and held.attempts == 2
    failed = cluster.fail_task(task.id, "A", held.epoch, error="flaky again")
    assert (failed.status, failed.ready_at) == ("scheduled", T0 + 30)
    clock.set(T0 + 29)
    assert _kinds(monitor, T0 + 29) == []
    clock.set(T0 + 30)
    assert _kinds(monitor, T0 + 30) == [("task_ready", task.id)]


def test_a_timed_out_attempt_backs_off_too(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the job", timeout=5, retry_backoff=7)
    assert cluster.claim_best_task("A", "developer") is not None
    clock.set(T0 + 5)
    [event] = monitor.tick(T0 + 5).events
    assert (event.kind, event.data["outcome"], event.data["ready_at"]) == (
        "task_timed_out",
        "scheduled",
        T0 + 12,
    )
    assert cluster.get_task(task.id).status == "scheduled"


def test_without_retry_backoff_a_failed_attempt_is_pending_at_once(cluster: Client) -> None:
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement the job")
    held = cluster.claim_best_task("A", "developer")
    assert held is not None
    assert cluster.fail_task(task.id, "A", held.epoch, error="flaky").status == "pending"


# --- a chain of 1,000 tasks, 8 workers --------------------------------------------------
@pytest.mark.slow
def test_a_chain_of_1000_tasks_runs_in_order_on_8_workers(cluster: Client) -> None:
    """Task k depends on task k-1: 8 workers claiming with a wait (woken by each
    completion's release of the next) run the 1,000 tasks once each, in chain order."""
    # Over HTTP, the client itself: the backend's read-back of every write from
    # another process (tests/support/backends/http.py) would take minutes here.
    cluster = getattr(cluster, "_client", cluster)
    cluster.configure(max_agents=8)
    ids = [cluster.add_task("step 0").id]
    for k in range(1, 1000):
        ids.append(cluster.add_task(f"step {k}", depends_on=[ids[-1]]).id)
    done: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            cluster.register_node(name, "developer")
            while True:
                with lock:
                    if len(done) == len(ids):
                        return
                task = cluster.claim_best_task(name, "developer", wait=1)
                if task is None:
                    continue
                cluster.complete_task(task.id, name, task.epoch)
                with lock:
                    done.append(task.id)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    assert not errors
    assert sorted(done) == ids  # each once
    events = cluster.events(limit=10_000)
    completed = {e.task_id: e.seq for e in events if e.kind == "task_completed"}
    claimed = {e.task_id: e.seq for e in events if e.kind == "task_claimed"}
    assert sorted(completed, key=completed.__getitem__) == ids  # done in chain order
    # and none claimed before the one it depends on was done
    assert all(claimed[b] > completed[a] for a, b in itertools.pairwise(ids))


# --- bad input --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("timeout", 0),
        ("timeout", -5),
        ("timeout", "30"),
        ("retry_backoff", 0),
        ("retry_backoff", True),
        ("not_before", "tomorrow"),
        ("not_before", -1),
        ("not_before", 1e12),
        ("depends_on", 3),
        ("depends_on", "3"),
    ],
)
def test_bad_time_and_order_are_refused(cluster: Client, field: str, bad: Any) -> None:
    """Each argument's rule refuses a bad value, naming the argument; nothing is added."""
    with pytest.raises(InvalidInputError) as info:
        cluster.add_task("Implement it", **{field: bad})
    assert info.value.field == field
    assert cluster.list_tasks() == []


@pytest.mark.parametrize("bad", [[0], ["task-x"], [True]])
def test_bad_dependency_ids_are_refused(cluster: Client, bad: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        cluster.add_task("Implement it", depends_on=bad)
    assert info.value.field == "depends_on[0]"
    assert cluster.list_tasks() == []
