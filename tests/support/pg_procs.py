"""Child processes of the PostgreSQL fleet tests (importable by the spawn start method)."""

from __future__ import annotations

import logging
import time
from typing import Any

import corral
from corral.errors import LeaseError, NotFoundError, StoreUnavailableError


def coordinator(url: str, name: str, max_sleep: float) -> None:
    """A coordinator: its monitor, until killed."""
    logging.basicConfig(level=logging.WARNING)
    while True:
        try:
            cluster = corral.connect(url, pool_size=2)
            break
        except StoreUnavailableError:
            time.sleep(0.2)
    corral.Monitor(cluster, max_sleep=max_sleep, name=name).run()


def _retry(fn: Any, deadline: float) -> Any:
    backoff = 0.05
    while True:
        try:
            return fn()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


def worker(url: str, node_id: str, heartbeat_interval: float, stop: Any, out: Any) -> None:
    """Claim (waiting) and complete until ``stop``; ride out store outages: after one,
    finish whatever this node holds (a claim whose answer was lost still counts)."""
    deadline = time.monotonic() + 600
    client = _retry(lambda: corral.connect(url, pool_size=1), deadline)
    _retry(
        lambda: client.register_node(node_id, "developer", heartbeat_interval=heartbeat_interval),
        deadline,
    )
    done: list[int] = []
    errors: list[str] = []
    outages = 0

    def finish_held() -> None:
        for task in client.list_tasks(status="in_progress", assigned_to=node_id):
            try:
                client.complete_task(task.id, node_id, task.epoch, result={"by": node_id})
                done.append(task.id)
            except LeaseError:
                pass

    while not stop.is_set():
        try:
            task = client.claim_best_task(node_id, "developer", wait=0.5)
            if task is not None:
                client.complete_task(task.id, node_id, task.epoch, result={"by": node_id})
                done.append(task.id)
        except StoreUnavailableError:
            outages += 1
            try:
                _retry(finish_held, deadline)
            except Exception as exc:
                errors.append(f"resume: {exc!r}")
                break
        except (LeaseError, NotFoundError) as exc:
            errors.append(repr(exc))
            break
    client.close()
    out.put((node_id, done, errors, outages))


def event_writer(url: str, node_id: str, rounds: int, barrier: Any, out: Any) -> None:
    """Write events as fast as a worker does: add, claim, complete, broadcast (four
    event-writing transactions per round, each with its own commit)."""
    client = corral.connect(url, pool_size=1)
    client.register_node(node_id, "developer", heartbeat_interval=600)
    barrier.wait()
    for i in range(rounds):
        client.add_task(f"{node_id} job {i}")
        task = client.claim_best_task(node_id, "developer")
        if task is not None:
            client.complete_task(task.id, node_id, task.epoch)
        client.broadcast(f"{node_id} round {i}", node_id=node_id)
    client.close()
    out.put(node_id)


def configure_many(url: str, key: str, times: int, barrier: Any, out: Any) -> None:
    """Change setting ``key`` ``times`` times, as fast as possible, from the barrier on."""
    client = corral.connect(url, pool_size=1)
    barrier.wait(timeout=60)
    errors = []
    for i in range(times):
        try:
            change: dict[str, Any] = {key: 10 + i}
            client.configure(**change)
        except Exception as exc:  # reported to the test, which fails on it
            errors.append(repr(exc))
    client.close()
    out.put((key, errors))
