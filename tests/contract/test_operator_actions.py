"""The operator's hands on the work (docs/core.md "Cancelling and requeueing"):
cancel_task, requeue_task and their bulk forms cancel_tasks and requeue_tasks, on
every backend. Each change is an event naming its actor; a refused call changes
nothing."""

from __future__ import annotations

from typing import Any

import pytest

from corral import ConflictError, InvalidInputError, LeaseError, NotFoundError, TaskCancelledError
from corral.clock import FakeClock
from corral.types import Client
from tests.contract._world import world

OPERATIONS = ("cancel_task", "requeue_task", "cancel_tasks", "requeue_tasks")
BAD_INPUT = OPERATIONS


def _held(cluster: Client, node: str = "W1", title: str = "Implement login") -> Any:
    cluster.register_node(node, "developer")
    cluster.add_task(title)
    task = cluster.claim_best_task(node, "developer")
    assert task is not None
    return task


def _last(cluster: Client, kind: str) -> Any:
    return [e for e in cluster.events(limit=10_000) if e.kind == kind][-1]


def test_cancel_task_takes_a_pending_task_off_the_board(cluster: Client) -> None:
    """A cancelled pending task is never claimed (its role head is gone too), and its
    event names the operator and the reason."""
    cluster.register_node("W1", "developer")
    task = cluster.add_task("Implement login", role="developer")
    cancelled = cluster.cancel_task(task.id, reason="duplicate of task 7")
    assert (cancelled.status, cancelled.error) == (
        "cancelled",
        "cancelled by operator: duplicate of task 7",
    )
    assert cancelled.finished_at is not None
    assert cluster.get_task(task.id) == cancelled
    assert cluster.claim_best_task("W1", "developer") is None
    event = _last(cluster, "task_cancelled")
    assert (event.task_id, event.node_id) == (task.id, None)
    assert event.data == {
        "actor": "operator",
        "was": "pending",
        "epoch": 0,
        "reason": "duplicate of task 7",
    }


def test_cancel_task_lets_the_holder_go_and_refuses_its_late_completion(
    cluster: Client,
) -> None:
    """An in-progress task is cancelled at once: its holder no longer holds it (idle,
    no current task), its next heartbeat answers the task as cancelled, and its
    completion and failure are refused with TaskCancelledError, changing nothing."""
    task = _held(cluster)
    assert cluster.heartbeat("W1", current_tasks=[str(task.id)]).cancelled_tasks == []
    cluster.cancel_task(f"task-{task.id}")
    node = cluster.get_node("W1")
    assert (node.status, node.current_task_id) == ("idle", None)
    beat = cluster.heartbeat("W1", current_tasks=[str(task.id)])
    assert beat.cancelled_tasks == [task.id]
    assert cluster.heartbeat("W1", current_tasks=[]).cancelled_tasks == []
    # A worker of two tasks names both: the one still held is not in the answer.
    cluster.add_task("Implement the lexer")
    other = cluster.claim_best_task("W1", "developer")
    assert other is not None
    both = cluster.heartbeat("W1", current_tasks=[str(task.id), f"task-{other.id}"])
    assert both.cancelled_tasks == [task.id]
    cluster.complete_task(other.id, "W1", other.epoch)
    before = world(cluster)
    with pytest.raises(TaskCancelledError) as exc:
        cluster.complete_task(task.id, "W1", task.epoch, result="late")
    assert isinstance(exc.value, ConflictError) and isinstance(exc.value, LeaseError)
    assert "was cancelled by operator" in exc.value.message
    with pytest.raises(TaskCancelledError):
        cluster.fail_task(task.id, "W1", task.epoch, error="late")
    with pytest.raises(TaskCancelledError):
        cluster.complete_and_claim(task.id, "W1", "developer", task.epoch)
    assert world(cluster) == before
    event = _last(cluster, "task_cancelled")
    assert (event.task_id, event.node_id, event.data["was"]) == (task.id, "W1", "in_progress")


@pytest.mark.parametrize("end", ["done", "failed", "cancelled"])
def test_cancel_task_refuses_a_finished_task(cluster: Client, end: str) -> None:
    task = _held(cluster)
    if end == "done":
        cluster.complete_task(task.id, "W1", task.epoch)
    elif end == "failed":
        cluster.fail_task(task.id, "W1", task.epoch, error="broken", retry=False)
    else:
        cluster.cancel_task(task.id)
    before = world(cluster)
    with pytest.raises(ConflictError) as exc:
        cluster.cancel_task(task.id)
    assert exc.value.field == "task_id" and f"is {end}" in exc.value.message
    assert world(cluster) == before


def test_requeue_task_gives_a_failed_task_a_new_epoch_and_fresh_attempts(
    cluster: Client,
) -> None:
    task = _held(cluster)
    cluster.fail_task(task.id, "W1", task.epoch, error="broken", retry=False)
    again = cluster.requeue_task(task.id)
    assert (again.status, again.assigned_to, again.attempts, again.error) == (
        "pending",
        None,
        0,
        None,
    )
    assert again.epoch == task.epoch + 1
    event = _last(cluster, "task_requeued")
    assert event.data == {"actor": "operator", "was": "failed", "epoch": again.epoch}
    taken = cluster.claim_best_task("W1", "developer")
    assert taken is not None and taken.id == task.id and taken.epoch > again.epoch


def test_requeue_task_fences_out_the_old_holder(cluster: Client) -> None:
    task = _held(cluster)
    cluster.register_node("W2", "developer")
    cluster.requeue_task(task.id)
    assert cluster.get_node("W1").current_task_id is None
    taken = cluster.claim_best_task("W2", "developer")
    assert taken is not None and taken.id == task.id
    before = world(cluster)
    with pytest.raises(LeaseError):
        cluster.complete_task(task.id, "W1", task.epoch, result="late")
    assert world(cluster) == before
    done = cluster.complete_task(task.id, "W2", taken.epoch)
    assert (done.status, done.assigned_to) == ("done", "W2")


@pytest.mark.parametrize("start", ["pending", "done", "cancelled"])
def test_requeue_task_refuses_a_task_it_does_not_apply_to(cluster: Client, start: str) -> None:
    cluster.register_node("W1", "developer")
    task = cluster.add_task("Implement login")
    if start == "done":
        held = cluster.claim_best_task("W1", "developer")
        assert held is not None
        cluster.complete_task(held.id, "W1", held.epoch)
    elif start == "cancelled":
        cluster.cancel_task(task.id)
    before = world(cluster)
    with pytest.raises(ConflictError):
        cluster.requeue_task(task.id)
    assert world(cluster) == before


def _board(cluster: Client, clock: FakeClock) -> dict[str, int]:
    """Six tasks: two old ones, a held one, a failed one, a high one, a docs one."""
    cluster.register_node("W1", "developer")
    cluster.register_node("W2", "developer")
    ids = {}
    ids["old_a"] = cluster.add_task("Implement parser", role="developer").id
    ids["old_b"] = cluster.add_task("Write the docs", role="architect").id
    clock.advance(300)
    ids["held"] = cluster.add_task("Implement lexer", priority="high", role="developer").id
    held = cluster.claim_best_task("W1", "developer")
    assert held is not None and held.id == ids["held"]
    ids["failed"] = cluster.add_task("Implement printer", priority="high", role="developer").id
    gone = cluster.claim_best_task("W2", "developer")
    assert gone is not None and gone.id == ids["failed"]
    cluster.fail_task(gone.id, "W2", gone.epoch, error="crash", retry=False)
    ids["high"] = cluster.add_task("Fix the IMPLEMENTATION notes", priority="high").id
    ids["docs"] = cluster.add_task("Tidy the release", priority="low").id
    return ids


def test_cancel_tasks_counts_first_then_cancels_exactly_the_matching_tasks(
    cluster: Client, clock: FakeClock
) -> None:
    ids = _board(cluster, clock)
    before = world(cluster)
    dry = cluster.cancel_tasks(title_contains="implement")
    assert (dry.count, dry.task_ids, dry.dry_run) == (
        3,
        sorted([ids["old_a"], ids["held"], ids["high"]]),
        True,
    )
    assert world(cluster) == before  # a dry run changes nothing
    assert cluster.cancel_tasks(min_age=200).task_ids == sorted([ids["old_a"], ids["old_b"]])
    assert cluster.cancel_tasks(role="architect").task_ids == [ids["old_b"]]
    assert cluster.cancel_tasks(priority="low").task_ids == [ids["docs"]]
    assert cluster.cancel_tasks(assigned_to="W1").task_ids == [ids["held"]]
    assert cluster.cancel_tasks(status="in_progress").task_ids == [ids["held"]]
    assert cluster.cancel_tasks(priority="high", status="pending").task_ids == [ids["high"]]

    done = cluster.cancel_tasks(title_contains="implement", reason="new plan", dry_run=False)
    assert (done.count, done.task_ids, done.dry_run) == (3, dry.task_ids, False)
    statuses = {t.id: t.status for t in cluster.list_tasks(limit=100)}
    assert [i for i, s in statuses.items() if s == "cancelled"] == sorted(
        dry.task_ids, reverse=True
    )
    assert statuses[ids["failed"]] == "failed" and statuses[ids["old_b"]] == "pending"
    events = [e for e in cluster.events(limit=10_000) if e.kind == "task_cancelled"]
    assert sorted(e.task_id for e in events if e.task_id is not None) == dry.task_ids
    assert {(e.data["actor"], e.data["reason"]) for e in events} == {("operator", "new plan")}
    assert cluster.get_node("W1").current_task_id is None


def test_cancel_tasks_takes_scheduled_and_blocked_tasks_too(
    cluster: Client, clock: FakeClock
) -> None:
    """A bulk cancel applies to every task not finished: a task scheduled for later
    and a task blocked on another are matched, counted and cancelled like a pending
    one; a matched task blocked on a matched one is cancelled with its dependency
    and named in the answer once, so the answer matches the dry run's."""
    first = cluster.add_task("Migrate the schema").id
    later = cluster.add_task("Migrate the index", not_before=clock.now() + 3_600).id
    blocked = cluster.add_task("Migrate the data", depends_on=[first]).id
    other = cluster.add_task("Tidy the release").id
    assert [cluster.get_task(i).status for i in (first, later, blocked)] == [
        "pending",
        "scheduled",
        "blocked",
    ]
    assert cluster.cancel_tasks(status="scheduled").task_ids == [later]
    assert cluster.cancel_tasks(status="blocked").task_ids == [blocked]
    before = world(cluster)
    dry = cluster.cancel_tasks(title_contains="migrate")
    assert (dry.count, dry.task_ids) == (3, [first, later, blocked])
    assert world(cluster) == before
    done = cluster.cancel_tasks(title_contains="migrate", reason="dropped", dry_run=False)
    assert (done.count, done.task_ids) == (3, [first, later, blocked])
    assert {i: cluster.get_task(i).status for i in (first, later, blocked, other)} == {
        first: "cancelled",
        later: "cancelled",
        blocked: "cancelled",
        other: "pending",
    }
    was = {
        e.task_id: e.data["was"] for e in cluster.events(limit=10_000) if e.kind == "task_cancelled"
    }
    assert was == {first: "pending", later: "scheduled", blocked: "blocked"}


def test_requeue_tasks_requeues_exactly_the_matching_tasks(
    cluster: Client, clock: FakeClock
) -> None:
    ids = _board(cluster, clock)
    before = world(cluster)
    dry = cluster.requeue_tasks()
    assert dry.task_ids == sorted([ids["held"], ids["failed"]]) and dry.dry_run
    assert cluster.requeue_tasks(status="failed").task_ids == [ids["failed"]]
    assert cluster.requeue_tasks(assigned_to="W2").task_ids == [ids["failed"]]
    assert world(cluster) == before
    done = cluster.requeue_tasks(status="failed", dry_run=False)
    assert (done.count, done.task_ids, done.dry_run) == (1, [ids["failed"]], False)
    again = cluster.get_task(ids["failed"])
    assert (again.status, again.attempts) == ("pending", 0)
    assert cluster.get_task(ids["held"]).status == "in_progress"
    assert cluster.requeue_tasks(dry_run=False).task_ids == [ids["held"]]
    assert [e.task_id for e in cluster.events(limit=10_000) if e.kind == "task_requeued"] == [
        ids["failed"],
        ids["held"],
    ]


@pytest.mark.parametrize(
    ("call", "field", "error"),
    [
        (lambda c: c.cancel_task(999_999), "task_id", NotFoundError),
        (lambda c: c.cancel_task("task-x"), "task_id", InvalidInputError),
        (lambda c: c.cancel_task(1, reason="r" * 501), "reason", InvalidInputError),
        (lambda c: c.requeue_task(999_999), "task_id", NotFoundError),
        (lambda c: c.requeue_task(0), "task_id", InvalidInputError),
        (lambda c: c.cancel_tasks(status="done"), "status", InvalidInputError),
        (lambda c: c.cancel_tasks(status="failed", dry_run=False), "status", InvalidInputError),
        (lambda c: c.cancel_tasks(min_age=-5, dry_run=False), "min_age", InvalidInputError),
        (lambda c: c.cancel_tasks(role="nobody", dry_run=False), "role", InvalidInputError),
        (lambda c: c.cancel_tasks(priority="urgent"), "priority", InvalidInputError),
        (lambda c: c.cancel_tasks(title_contains=""), "title_contains", InvalidInputError),
        (lambda c: c.requeue_tasks(status="pending", dry_run=False), "status", InvalidInputError),
        (lambda c: c.requeue_tasks(min_age=-1, dry_run=False), "min_age", InvalidInputError),
        (
            lambda c: c.requeue_tasks(assigned_to=" W1", dry_run=False),
            "assigned_to",
            InvalidInputError,
        ),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    cluster: Client, call: Any, field: str, error: type[Exception]
) -> None:
    _held(cluster)
    before = world(cluster)
    with pytest.raises(error) as exc:
        call(cluster)
    assert getattr(exc.value, "field", None) == field
    assert world(cluster) == before
