"""Waiting claims: ``claim_best_task(..., wait=s)`` returns as soon as a task exists."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from corral.clock import FakeClock
from corral.errors import InvalidInputError
from corral.store.signal import ReadySignal, signal_for
from corral.types import Client
from tests.support.worker_app import wait_for

OPERATIONS = ("claim_best_task",)
BAD_INPUT = ("claim_best_task",)


def _signal(cluster: Any, tmp_path: Any) -> ReadySignal:
    """The wake-up a waiting claim blocks on: the store's, or for the HTTP backend the
    server's (same process, same SQLite file, one signal per file)."""
    store = getattr(cluster, "store", None)
    return store._ready if store is not None else signal_for(tmp_path / "corral.db")


def test_wait_returns_a_pending_task_at_once(cluster: Any) -> None:
    """With a task already pending, a waiting claim does not wait."""
    cluster.register_node("w1", "developer")
    task = cluster.add_task("implement it")
    start = time.monotonic()
    got = cluster.claim_best_task("w1", "developer", wait=10)
    assert got is not None and got.id == task.id
    assert time.monotonic() - start < 1.0


def test_wait_wakes_when_a_task_is_added(cluster: Any, tmp_path: Any) -> None:
    """A claim waiting on an empty board takes the task another thread adds."""
    cluster.register_node("w1", "developer")
    added: list[int] = []
    signal = _signal(cluster, tmp_path)

    def add_later() -> None:
        wait_for(lambda: signal.waiters > 0, timeout=10, what="the claim waiting")
        added.append(cluster.add_task("implement the thing").id)

    thread = threading.Thread(target=add_later)
    thread.start()
    got = cluster.claim_best_task("w1", "developer", wait=10)
    thread.join()
    assert got is not None and [got.id] == added
    assert got.assigned_to == "w1"


def test_wait_times_out_with_none(cluster: Any) -> None:
    """Nothing added: the waiting claim gives up after ``wait`` seconds."""
    cluster.register_node("w1", "developer")
    start = time.monotonic()
    assert cluster.claim_best_task("w1", "developer", wait=0.2) is None
    assert 0.2 <= time.monotonic() - start < 2.0


@pytest.mark.parametrize("bad", [-1, "1", True, float("nan"), 10**9])
def test_wait_is_validated(cluster: Any, bad: Any) -> None:
    """A bad ``wait`` is refused before anything is claimed."""
    cluster.register_node("w1", "developer")
    cluster.add_task("implement it")
    with pytest.raises(InvalidInputError) as info:
        cluster.claim_best_task("w1", "developer", wait=bad)
    assert info.value.field == "wait"
    assert cluster.list_tasks(status="pending")


# --- claim order (anti-idle.md "Scoring Algorithm"; DESIGN.md §4) -----------------
def test_ties_go_to_the_older_task(cluster: Client, clock: FakeClock) -> None:
    cluster.register_node("N", "developer")
    first = cluster.add_task("docs one", priority="medium")
    clock.advance(1)
    cluster.add_task("docs two", priority="medium")
    claimed = cluster.claim_best_task("N", "developer")
    assert claimed is not None and claimed.id == first.id


def test_age_overtakes_priority(cluster: Client, clock: FakeClock) -> None:
    """A low task 21 minutes older beats a fresh high one (10 + 21 > 30)."""
    cluster.register_node("N", "developer")
    old = cluster.add_task("docs old", priority="low")
    clock.advance(21 * 60)
    cluster.add_task("docs new", priority="high")
    claimed = cluster.claim_best_task("N", "developer")
    assert claimed is not None and claimed.id == old.id


def test_role_bonus_beats_priority_gap(cluster: Client, clock: FakeClock) -> None:
    """A medium task matching the role (35) beats a high one that does not (30)."""
    cluster.register_node("N", "architect")
    cluster.add_task("Write docs", priority="high")
    match = cluster.add_task("Design the schema", priority="medium")
    claimed = cluster.claim_best_task("N", "architect")
    assert claimed is not None and claimed.id == match.id


def test_changing_role_keywords_reindexes_pending_tasks(cluster: Client) -> None:
    cluster.register_node("N", "developer")
    cluster.add_task("Write docs", priority="high")
    docs = cluster.add_task("Polish docs", priority="medium")
    cluster.configure(role_keywords={"developer": ["polish"], "architect": ["design"]})
    assert cluster.get_task(docs.id).roles == ("developer",)
    claimed = cluster.claim_best_task("N", "developer")
    assert claimed is not None and claimed.id == docs.id
