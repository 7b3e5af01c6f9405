"""Progress, stuck tasks and sessions (docs/guardrails.md) on every backend.

A holder's ``report_progress`` moves its task's stuck deadline on; a task in progress
with no progress for its ``progress_timeout`` (its own, else the cluster's) is stuck at
that deadline, and the monitor applies the cluster's ``stuck_action``: flag, requeue
(taken back at a new epoch) or fail. Every claim carries the task's ``session_id``,
fixed by the first claim. The monitor runs on the store behind the client (the HTTP
backend's is the SQLite file its server serves).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import corral
from corral import InvalidInputError, LeaseError, TaskCancelledError
from corral.clock import FakeClock
from corral.model import Task
from corral.monitor import Monitor
from corral.types import Client
from tests.contract._world import T0, world

OPERATIONS = ("report_progress",)
BAD_INPUT = ("report_progress",)


@pytest.fixture
def monitor(cluster: Client, tmp_path: Path, clock: FakeClock) -> Monitor:
    """The monitor over the cluster's store (for HTTP: the file the server serves)."""
    if isinstance(cluster, corral.Cluster):
        return Monitor(cluster, name="contract")
    behind = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    assert isinstance(behind, corral.Cluster)
    return Monitor(behind, name="contract")


def _claimed(cluster: Client, node: str = "A", **task: object) -> Task:
    cluster.register_node(node, "developer")
    cluster.add_task("Implement the report", **task)  # type: ignore[arg-type]
    claimed = cluster.claim_best_task(node, "developer")
    assert claimed is not None
    return claimed


def test_progress_moves_the_stuck_deadline_on(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """With progress_timeout 60, a report at +50 moves the deadline to +110: the
    monitor flags nothing at +100, and flags the task stuck at exactly +110."""
    cluster.configure(progress_timeout=60)
    task = _claimed(cluster)
    clock.set(T0 + 50)
    reported = cluster.report_progress(task.id, "A", epoch=task.epoch, note="step 1 of 3")
    assert (reported.progress_at, reported.progress_note) == (T0 + 50, "step 1 of 3")
    assert monitor.tick(T0 + 100).events == []
    assert cluster.get_task(task.id).stuck_since is None
    clock.set(T0 + 110)
    [stuck] = monitor.tick(T0 + 110).events
    assert (stuck.kind, stuck.task_id, stuck.node_id) == ("task_stuck", task.id, "A")
    assert stuck.data["action"] == "flag" and stuck.data["outcome"] == "in_progress"
    flagged = cluster.get_task(task.id)
    assert (flagged.status, flagged.assigned_to, flagged.stuck_since) == (
        "in_progress",
        "A",
        T0 + 110,
    )
    assert "stuck" in cluster.read_state().text


def test_progress_on_a_stuck_task_clears_the_flag(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """A flagged task that reports progress again is no longer stuck (a
    ``task_unstuck`` event) and has a new deadline."""
    cluster.configure(progress_timeout=30)
    task = _claimed(cluster)
    monitor.tick(T0 + 30)
    assert cluster.get_task(task.id).stuck_since == T0 + 30
    clock.set(T0 + 45)
    again = cluster.report_progress(task.id, "A", epoch=task.epoch)
    assert again.stuck_since is None and again.progress_note is None
    assert [e.kind for e in cluster.events()][-1] == "task_unstuck"
    assert monitor.tick(T0 + 74).events == []
    assert [e.kind for e in monitor.tick(T0 + 75).events] == ["task_stuck"]


def test_a_task_sets_its_own_progress_timeout(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """The cluster's setting is off (0) by default; a task's own progress_timeout
    applies anyway, and a task without one is never stuck."""
    assert cluster.settings().progress_timeout == 0
    cluster.register_node("A", "developer")
    own = cluster.add_task("Implement fast", priority="high", progress_timeout=5)
    cluster.add_task("Implement slow")
    assert own.progress_timeout == 5
    first = cluster.claim_best_task("A", "developer")
    second = cluster.claim_best_task("A", "developer")
    assert first is not None and second is not None and first.id == own.id
    assert first.progress_timeout == 5 and second.progress_timeout is None
    events = monitor.tick(T0 + 100).events
    assert [(e.kind, e.task_id) for e in events] == [("task_stuck", own.id)]


def test_requeue_takes_a_stuck_task_back_at_a_new_epoch(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """stuck_action requeue: at the deadline the task is pending again at a newer
    epoch; the old holder's heartbeat answer names it, its late progress and
    completion are refused naming the epochs; another node finishes it once, in the
    same session."""
    cluster.configure(progress_timeout=60, stuck_action="requeue")
    task = _claimed(cluster)
    assert task.session_id is not None
    cluster.heartbeat("A", current_tasks=[task.id])
    [stuck] = monitor.tick(T0 + 60).events
    assert (stuck.data["action"], stuck.data["outcome"]) == ("requeue", "pending")
    back = cluster.get_task(task.id)
    assert (back.status, back.assigned_to) == ("pending", None)
    assert back.epoch > task.epoch
    assert cluster.heartbeat("A", current_tasks=[task.id]).cancelled_tasks == [task.id]
    with pytest.raises(LeaseError, match=rf"epoch {task.epoch}; the task is at epoch"):
        cluster.report_progress(task.id, "A", epoch=task.epoch)
    cluster.register_node("B", "developer")
    clock.set(T0 + 61)
    again = cluster.claim_best_task("B", "developer")
    assert again is not None and again.id == task.id
    assert again.session_id == task.session_id and again.attempts == 2
    with pytest.raises(LeaseError, match=rf"epoch {task.epoch}; the task is at epoch"):
        cluster.complete_task(task.id, "A", task.epoch, result="late")
    done = cluster.complete_task(again.id, "B", again.epoch, result="B's")
    assert (done.status, done.result) == ("done", "B's")
    completed = [e for e in cluster.events() if e.kind == "task_completed"]
    assert [e.node_id for e in completed] == ["B"]


def test_requeue_of_a_stuck_task_with_a_retry_backoff_backs_off(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """A stuck attempt is a failed attempt: requeued, a task with a retry_backoff is
    scheduled at a new epoch, claimable once its backoff is over (30 s after a first
    attempt), not at once; the old holder's completion is refused."""
    cluster.configure(progress_timeout=60, stuck_action="requeue")
    task = _claimed(cluster, retry_backoff=30)
    [stuck] = monitor.tick(T0 + 60).events
    assert (stuck.data["outcome"], stuck.data["ready_at"]) == ("scheduled", T0 + 90)
    back = cluster.get_task(task.id)
    assert (back.status, back.assigned_to, back.ready_at) == ("scheduled", None, T0 + 90)
    assert back.epoch > task.epoch and stuck.data["new_epoch"] == back.epoch
    clock.set(T0 + 89)
    monitor.tick(T0 + 89)
    cluster.register_node("B", "developer")
    assert cluster.claim_best_task("B", "developer") is None
    clock.set(T0 + 90)
    monitor.tick(T0 + 90)
    again = cluster.claim_best_task("B", "developer")
    assert again is not None and (again.id, again.attempts) == (task.id, 2)
    with pytest.raises(LeaseError):
        cluster.complete_task(task.id, "A", task.epoch, result="late")


def test_fail_fails_a_stuck_task(cluster: Client, monitor: Monitor) -> None:
    """stuck_action fail: at the deadline the task fails with why; its holder's
    completion is refused."""
    cluster.configure(progress_timeout=10, stuck_action="fail")
    task = _claimed(cluster)
    [stuck] = monitor.tick(T0 + 10).events
    assert stuck.data["outcome"] == "failed"
    failed = cluster.get_task(task.id)
    assert failed.status == "failed" and "stuck: no progress for 10s" in (failed.error or "")
    with pytest.raises(LeaseError):
        cluster.complete_task(task.id, "A", task.epoch)


def test_a_stuck_task_failed_for_good_fails_the_tasks_waiting_on_it(
    cluster: Client, monitor: Monitor
) -> None:
    """A dependent blocked on a task the stuck duty fails is failed with it, naming
    the dependency (not left blocked for ever)."""
    cluster.configure(progress_timeout=10, stuck_action="fail")
    task = _claimed(cluster)
    waiting = cluster.add_task("Review the report", depends_on=[task.id])
    assert cluster.get_task(waiting.id).status == "blocked"
    monitor.tick(T0 + 10)
    after = cluster.get_task(waiting.id)
    assert after.status == "failed"
    assert f"dependency task {task.id} failed" in (after.error or "")


def test_a_requeued_task_out_of_attempts_fails(cluster: Client, monitor: Monitor) -> None:
    """A stuck task on its last attempt is failed, not requeued."""
    cluster.configure(progress_timeout=10, stuck_action="requeue")
    task = _claimed(cluster, max_attempts=1)
    [stuck] = monitor.tick(T0 + 10).events
    assert stuck.data["outcome"] == "failed"
    assert cluster.get_task(task.id).status == "failed"


def test_read_state_shows_a_node_whose_every_task_is_stuck(
    cluster: Client, monitor: Monitor, clock: FakeClock
) -> None:
    """A node heartbeating with every task stuck is named in ``stuck_nodes`` and its
    line says so; a node with one task still progressing is not."""
    cluster.configure(progress_timeout=30)
    task = _claimed(cluster, node="A")
    other = _claimed(cluster, node="B")
    clock.set(T0 + 20)
    cluster.heartbeat("A", current_tasks=[task.id])
    cluster.report_progress(other.id, "B", epoch=other.epoch)
    monitor.tick(T0 + 30)
    clock.set(T0 + 30)
    state = cluster.read_state()
    assert state.stuck_nodes == ["A"]
    [line_a] = [line for line in state.text.splitlines() if line.startswith("🟡 A:")]
    assert "stuck: no progress on any of its tasks" in line_a


def test_every_claim_carries_the_session_fixed_by_the_first(cluster: Client) -> None:
    """The session id is a UUID fixed by the first claim and kept by every later
    attempt (a failure and a retry), and by the completion's answer."""
    cluster.register_node("A", "developer")
    added = cluster.add_task("Implement sessions")
    assert added.session_id is None
    first = cluster.claim_best_task("A", "developer")
    assert first is not None and first.session_id is not None
    assert str(uuid.UUID(first.session_id)) == first.session_id
    assert uuid.UUID(first.session_id).version == 4  # random, as uuid.uuid4 makes
    cluster.fail_task(first.id, "A", first.epoch, error="crashed")
    second = cluster.claim_best_task("A", "developer")
    assert second is not None and (second.session_id, second.attempts) == (first.session_id, 2)
    done = cluster.complete_task(second.id, "A", second.epoch)
    assert done.session_id == first.session_id
    assert cluster.get_task(first.id).session_id == first.session_id


def test_a_task_first_claimed_by_complete_and_claim_gets_its_own_session(
    cluster: Client,
) -> None:
    """The worker's loop claims through complete_and_claim: each task it takes first
    gets a new session there, a task of its own, as claim_best_task gives."""
    cluster.register_node("A", "developer")
    cluster.add_tasks([{"title": f"step {i}"} for i in range(3)])
    task = cluster.claim_best_task("A", "developer")
    assert task is not None
    sessions = [task.session_id]
    for _ in range(2):
        _, task = cluster.complete_and_claim(task.id, "A", "developer", epoch=task.epoch)
        assert task is not None and task.session_id is not None
        assert uuid.UUID(task.session_id).version == 4
        sessions.append(task.session_id)
    assert len(set(sessions)) == 3
    assert {t.session_id for t in cluster.list_tasks()} == set(sessions)  # as stored


def test_progress_by_another_node_or_on_a_cancelled_task_is_refused(cluster: Client) -> None:
    """Progress is the holder's: another node's is a LeaseError, a cancelled task's a
    TaskCancelledError; neither changes anything."""
    task = _claimed(cluster)
    cluster.register_node("B", "developer")
    before = world(cluster)
    with pytest.raises(LeaseError, match="held by A, not B"):
        cluster.report_progress(task.id, "B")
    assert world(cluster) == before
    cluster.cancel_task(task.id, reason="not needed")
    with pytest.raises(TaskCancelledError):
        cluster.report_progress(task.id, "A", epoch=task.epoch)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"task_id": "nope", "node_id": "A"}, "task_id"),
        ({"task_id": 1, "node_id": "A", "epoch": 0}, "epoch"),
        ({"task_id": 1, "node_id": "A", "note": "x" * 501}, "note"),
        ({"task_id": 1, "node_id": "n" * 65}, "node_id"),
    ],
)
def test_bad_progress_reports_are_refused(
    cluster: Client, args: dict[str, object], field: str
) -> None:
    _claimed(cluster)
    before = world(cluster)
    with pytest.raises(InvalidInputError) as caught:
        cluster.report_progress(**args)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert world(cluster) == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"stuck_action": "explode"}, "stuck_action"),
        ({"progress_timeout": -1}, "progress_timeout"),
    ],
)
def test_bad_stuck_settings_are_refused(
    cluster: Client, change: dict[str, Any], field: str
) -> None:
    before = cluster.settings()
    with pytest.raises(InvalidInputError) as caught:
        cluster.configure(**change)
    assert caught.value.field == field
    assert cluster.settings() == before


@pytest.mark.parametrize("bad", [0, -5, "soon", True])
def test_a_bad_progress_timeout_on_add_task_is_refused(cluster: Client, bad: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        cluster.add_task("Implement it", progress_timeout=bad)  # type: ignore[arg-type]
    assert caught.value.field == "progress_timeout"
    assert cluster.list_tasks() == []


def test_a_holders_heartbeat_names_every_task_it_no_longer_holds(cluster: Client) -> None:
    """The heartbeat's ``cancelled_tasks`` names the tasks the beat calls current that
    the node neither holds nor finished: requeued by the operator (and held by another
    since) or cancelled; not the one it holds, nor the one it completed."""
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    for title in ("Implement one", "Implement two", "Implement three", "Implement four"):
        cluster.add_task(title)
    held = [cluster.claim_best_task("A", "developer") for _ in range(4)]
    one, two, three, four = (t.id for t in held if t is not None)
    cluster.complete_task(one, "A")
    cluster.requeue_task(two)
    again = cluster.claim_best_task("B", "developer")
    assert again is not None and again.id == two
    cluster.cancel_task(three, reason="not needed")
    beat = cluster.heartbeat("A", current_tasks=[one, two, three, four])
    assert beat.cancelled_tasks == [two, three]
