"""Waiting claims: ``claim_best_task(..., wait=s)`` returns as soon as a task exists."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from corral.errors import InvalidInputError


def test_wait_returns_a_pending_task_at_once(cluster: Any) -> None:
    """With a task already pending, a waiting claim does not wait."""
    cluster.register_node("w1", "developer")
    task = cluster.add_task("implement it")
    start = time.monotonic()
    got = cluster.claim_best_task("w1", "developer", wait=10)
    assert got is not None and got.id == task.id
    assert time.monotonic() - start < 1.0


def test_wait_wakes_when_a_task_is_added(cluster: Any) -> None:
    """A claim waiting on an empty board takes the task another thread adds."""
    cluster.register_node("w1", "developer")
    added: list[int] = []
    started = threading.Event()

    def add_later() -> None:
        started.wait(5)
        time.sleep(0.05)  # let the claim reach its wait
        added.append(cluster.add_task("implement the thing").id)

    thread = threading.Thread(target=add_later)
    thread.start()
    started.set()
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
