"""Leases with fencing (docs/core.md "Leases and fencing"): claims bump the epoch;
complete_task, fail_task and complete_and_claim are refused with ``LeaseError`` and
change nothing when the caller does not hold the lease or names an older epoch."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError, LeaseError
from corral.clock import FakeClock
from corral.types import Client
from tests.contract._world import T0

OPERATIONS = ("complete_task", "fail_task", "complete_and_claim")
BAD_INPUT = ("complete_task", "fail_task", "complete_and_claim")


def _snapshot(cluster: Client) -> tuple[list[dict[str, Any]], int]:
    return [t.to_dict() for t in cluster.list_tasks()], len(cluster.events(limit=10_000))


def test_stale_epoch_is_refused_and_changes_nothing(cluster: Client) -> None:
    """After a re-claim, completing with the old epoch is refused."""
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    cluster.add_task("Implement login")
    first = cluster.claim_best_task("A", "developer")
    assert first is not None
    cluster.fail_task(first.id, "A", first.epoch, error="flaky")
    second = cluster.claim_best_task("B", "developer")
    assert second is not None
    assert (second.id, second.epoch) == (first.id, first.epoch + 1)

    before = _snapshot(cluster)
    with pytest.raises(LeaseError):
        cluster.complete_task(first.id, "A", first.epoch, result="late")
    with pytest.raises(LeaseError):
        cluster.complete_task(first.id, "B", first.epoch, result="wrong epoch")
    assert _snapshot(cluster) == before

    done = cluster.complete_task(second.id, "B", second.epoch, result="B's work")
    assert (done.status, done.result, done.assigned_to) == ("done", "B's work", "B")


def test_completion_by_a_node_that_never_held_it_is_refused(cluster: Client) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    cluster.add_task("Implement export")
    task = cluster.claim_best_task("A", "developer")
    assert task is not None
    with pytest.raises(LeaseError, match="held by A"):
        cluster.complete_task(task.id, "B")
    pending = cluster.add_task("Write docs")
    with pytest.raises(LeaseError, match="pending"):
        cluster.complete_task(pending.id, "A")


def test_attempts_are_counted_and_max_attempts_respected(cluster: Client) -> None:
    """A task failed with retry goes back to pending until it has used max_attempts."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement flaky thing", max_attempts=2)
    t1 = cluster.claim_best_task("A", "developer")
    assert t1 is not None
    assert cluster.fail_task(t1.id, "A", t1.epoch, error="boom").status == "pending"
    t2 = cluster.claim_best_task("A", "developer")
    assert t2 is not None
    assert t2.attempts == 2
    final = cluster.fail_task(t2.id, "A", t2.epoch, error="boom again")
    assert (final.id, final.status, final.error) == (task.id, "failed", "boom again")
    assert cluster.claim_best_task("A", "developer") is None


def test_fail_without_retry_is_final(cluster: Client) -> None:
    cluster.register_node("A", "developer")
    cluster.add_task("Implement once")
    t = cluster.claim_best_task("A", "developer")
    assert t is not None
    assert cluster.fail_task(t.id, "A", t.epoch, error="no", retry=False).status == "failed"


def test_terminating_returns_leases_without_burning_attempts(cluster: Client) -> None:
    """A node that terminates itself gives its tasks back at once."""
    cluster.register_node("A", "developer")
    cluster.add_task("Implement a", max_attempts=1)
    t = cluster.claim_best_task("A", "developer")
    assert t is not None
    cluster.set_agent_status("A", "terminated")
    back = cluster.get_task(t.id)
    assert (back.status, back.assigned_to) == ("pending", None)


def test_complete_and_claim_is_complete_then_claim(cluster: Client) -> None:
    """The worker's step: the same checks and events as the two calls, one commit."""
    cluster.register_node("A", "developer")
    first = cluster.add_task("Implement one", priority="high")
    second = cluster.add_task("Implement two", priority="low")
    t = cluster.claim_best_task("A", "developer")
    assert t is not None
    done, nxt = cluster.complete_and_claim(t.id, "A", "developer", epoch=t.epoch, result=1)
    assert nxt is not None
    assert (done.id, done.status, done.result) == (first.id, "done", 1)
    assert (nxt.id, nxt.status, nxt.assigned_to) == (second.id, "in_progress", "A")
    kinds = [e.kind for e in cluster.events()][-2:]
    assert kinds == ["task_completed", "task_claimed"]
    done, nxt = cluster.complete_and_claim(nxt.id, "A", "developer", epoch=nxt.epoch)
    assert done.status == "done" and nxt is None


def test_complete_and_claim_refusals_change_nothing(cluster: Client) -> None:
    cluster.register_node("A", "developer")
    cluster.add_task("Implement one")
    cluster.add_task("Implement two")
    t = cluster.claim_best_task("A", "developer")
    assert t is not None
    before = _snapshot(cluster)
    with pytest.raises(LeaseError, match=f"has no epoch {t.epoch + 1}: its lease is at epoch"):
        cluster.complete_and_claim(t.id, "A", "developer", epoch=t.epoch + 1)
    with pytest.raises(InvalidInputError):
        cluster.complete_and_claim(t.id, "A", "wizard", epoch=t.epoch)
    assert _snapshot(cluster) == before


def test_a_completion_returns_the_task_as_stored(cluster: Client, clock: FakeClock) -> None:
    """What complete_task and complete_and_claim return is the stored task, field for
    field, however the completion is made: fenced or not, with or without a result,
    and for a task the same node claimed again after losing it."""
    cluster.register_node("A", "developer")
    for i in range(5):
        cluster.add_task(f"Implement part {i}", priority="high", description=f"d{i}")
    t1 = cluster.claim_best_task("A", "developer")
    assert t1 is not None
    clock.advance(1)
    done = cluster.complete_task(t1.id, "A", t1.epoch, result={"ok": [1, 2], "n": 1.5})
    assert done == cluster.get_task(t1.id) and done.result == {"ok": [1, 2], "n": 1.5}
    t2 = cluster.claim_best_task("A", "developer")
    assert t2 is not None
    clock.advance(1)
    done = cluster.complete_task(t2.id, "A")  # unfenced
    assert done == cluster.get_task(t2.id) and done.result is None
    t3 = cluster.claim_best_task("A", "developer")
    assert t3 is not None
    clock.advance(1)
    done, t4 = cluster.complete_and_claim(t3.id, "A", "developer", t3.epoch, result="r3")
    assert t4 is not None
    assert done == cluster.get_task(t3.id) and t4 == cluster.get_task(t4.id)
    cluster.fail_task(t4.id, "A", t4.epoch, error="flaky")  # back to pending, same node
    again = cluster.claim_best_task("A", "developer")
    assert again is not None
    assert (again.id, again.epoch) == (t4.id, t4.epoch + 1)
    with pytest.raises(LeaseError, match=rf"claimed again \(epoch {again.epoch}\)"):
        cluster.complete_task(t4.id, "A", t4.epoch)
    clock.advance(1)
    done = cluster.complete_task(again.id, "A", again.epoch, result=[3])
    assert done == cluster.get_task(again.id)
    assert (done.status, done.epoch, done.attempts, done.error) == ("done", 2, 2, None)


def test_complete_and_claim_on_every_backend(cluster: Any) -> None:
    """complete_and_claim (one request over HTTP) finishes the held task and claims
    the next; a stale epoch or an unknown role refuses and changes nothing."""
    cluster.register_node("A", "developer")
    first = cluster.add_task("Implement one", priority="high")
    second = cluster.add_task("Implement two", priority="low")
    t = cluster.claim_best_task("A", "developer")
    before = ([x.to_dict() for x in cluster.list_tasks()], [e.seq for e in cluster.events()])
    with pytest.raises(LeaseError):
        cluster.complete_and_claim(t.id, "A", "developer", epoch=t.epoch + 1)
    with pytest.raises(InvalidInputError):
        cluster.complete_and_claim(t.id, "A", "wizard", epoch=t.epoch)
    assert ([x.to_dict() for x in cluster.list_tasks()], [e.seq for e in cluster.events()]) == (
        before
    )
    done, nxt = cluster.complete_and_claim(t.id, "A", "developer", epoch=t.epoch, result=1)
    assert (done.id, done.status, done.result) == (first.id, "done", 1)
    assert nxt is not None and (nxt.id, nxt.assigned_to) == (second.id, "A")
    done, nxt = cluster.complete_and_claim(nxt.id, "A", "developer", epoch=nxt.epoch)
    assert done.status == "done" and nxt is None


def test_fail_task_requeues_with_its_error_and_frees_the_node(
    cluster: Any, clock: FakeClock
) -> None:
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement it")
    held = cluster.claim_best_task("A", "developer")
    clock.advance(6)
    back = cluster.fail_task(task.id, "A", held.epoch, error="tests red")
    assert (back.status, back.assigned_to, back.error, back.attempts, back.epoch) == (
        "pending",
        None,
        "tests red",
        1,
        1,
    )
    assert (back.updated_at, back.finished_at) == (T0 + 6, None)
    assert cluster.get_task(task.id) == back
    assert cluster.get_node("A").current_task_id is None


def test_fail_task_refusals_change_nothing(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    task = cluster.add_task("Implement it")
    held = cluster.claim_best_task("A", "developer")
    before = _snapshot(cluster)
    with pytest.raises(LeaseError):
        cluster.fail_task(task.id, "B", held.epoch)
    with pytest.raises(LeaseError):
        cluster.fail_task(task.id, "A", held.epoch + 1)
    with pytest.raises(InvalidInputError) as exc:
        cluster.fail_task(task.id, "A", held.epoch, error="e" * 20_001)
    assert exc.value.field == "error"
    with pytest.raises(InvalidInputError) as exc:
        cluster.fail_task(task.id, "A", held.epoch, error=None)
    assert exc.value.field == "error"
    assert _snapshot(cluster) == before


def test_a_finished_task_cannot_be_completed_again(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.add_task("Implement it")
    held = cluster.claim_best_task("A", "developer")
    cluster.complete_task(held.id, "A", held.epoch, result="ok")
    before = _snapshot(cluster)
    with pytest.raises(LeaseError):
        cluster.complete_task(held.id, "A", held.epoch, result="twice")
    with pytest.raises(LeaseError):
        cluster.fail_task(held.id, "A", held.epoch)
    with pytest.raises(InvalidInputError) as exc:
        cluster.complete_task(held.id, "A", held.epoch, result="x" * 70_000)
    assert exc.value.field == "result"
    assert _snapshot(cluster) == before
    assert cluster.get_task(held.id).result == "ok"
