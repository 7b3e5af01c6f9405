"""SIGKILL at random moments: what a caller was told stays true.

Writer processes claim and complete on one store; the test kills them at random
(seeded) moments, inside a transaction or between two, and starts new ones. Then:
every completion a writer got an answer for is in the store at that epoch; each task
was claimed once per epoch and completed at most once, each change with its one event;
an SQLite file passes its integrity check; and the monitor hands the killed writers'
leases back, after which one writer finishes the board: every task done exactly once.
SQLite at NORMAL ("no loss on any process crash"), at FULL (the group commit across
processes) and PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.monitor import Monitor
from tests import procs
from tests.backends import postgres as pg

CTX = mp.get_context("spawn")
BATCH = 400  # tasks added at a time
WRITERS = 3
KILLS = 12


def _acks(folder: Path) -> set[tuple[int, int]]:
    """(task id, epoch) of every acknowledged completion."""
    done: set[tuple[int, int]] = set()
    for f in folder.glob("*.acks"):
        for line in f.read_text().splitlines(keepends=True):
            # A writer killed inside its write leaves at most a torn last line.
            if line.endswith("\n") and line != "empty\n":
                task_id, epoch = line.split()
                done.add((int(task_id), int(epoch)))
    return done


def _check_history(c: Any, total: int) -> dict[int, Any]:
    """Each task claimed once per epoch and completed at most once, with its events."""
    tasks = {t.id: t for t in c.list_tasks(limit=10_000)}
    assert len(tasks) == total
    events: list[Any] = []
    while batch := c.events(since=events[-1].seq if events else 0, limit=10_000):
        events += batch
    claimed = Counter(e.task_id for e in events if e.kind == "task_claimed")
    completed: dict[int, list[Any]] = {}
    for e in events:
        if e.kind == "task_completed":
            completed.setdefault(e.task_id, []).append(e)
    for t in tasks.values():
        assert claimed[t.id] == t.epoch == t.attempts, t
        if t.status == "done":
            (event,) = completed[t.id]
            assert event.data["epoch"] == t.epoch and event.node_id == t.assigned_to
            assert t.result == {"by": t.assigned_to}
        else:
            assert t.id not in completed, t
            assert t.status in ("pending", "in_progress"), t
    return tasks


@pytest.fixture(params=["sqlite-normal", "sqlite-full", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "postgres":
        return pg.fresh_database(request), {"pool_size": 1}
    sync = request.param.removeprefix("sqlite-").upper()
    return f"sqlite:///{tmp_path / 'crash.db'}", {"synchronous": sync}


@pytest.mark.slow
def test_killed_writers_lose_nothing_they_were_told(store, tmp_path):
    url, overrides = store
    seed = int(os.environ.get("CORRAL_CRASH_SEED", "20261123"))
    rng = random.Random(seed)
    acks = tmp_path / "acks"
    acks.mkdir()
    live: dict[str, Any] = {}
    started = 0
    added = 0

    def start() -> None:
        nonlocal started
        node = f"W{started}"
        started += 1
        p = CTX.Process(
            target=procs.work_until_killed, args=(url, overrides, node, str(acks / f"{node}.acks"))
        )
        p.start()
        live[node] = p

    feeder = corral.connect(url, **overrides)
    feeder.configure(max_agents=100, max_attempts=100)  # a task may lose several holders

    def top_up(told: int) -> None:
        """Keep the board from running out while the writers are killed."""
        nonlocal added
        if added - told < BATCH // 2:
            feeder.add_tasks(
                [
                    {"title": f"Implement part {i}", "priority": ("high", "medium", "low")[i % 3]}
                    for i in range(added, added + BATCH)
                ]
            )
            added += BATCH

    top_up(0)
    for _ in range(WRITERS):
        start()
    try:
        for _ in range(KILLS):
            # Kill after a random amount of progress, then a random fraction of a
            # step later: the moment lands anywhere in a writer's step.
            target = len(_acks(acks)) + rng.randint(1, 10)
            deadline = time.monotonic() + 60
            while (told := len(_acks(acks))) < target:
                top_up(told)
                for node in [n for n, p in live.items() if p.exitcode is not None]:
                    live.pop(node).join(30)  # it found the board empty for a moment
                    start()
                assert time.monotonic() < deadline, f"no progress (seed {seed})"
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.002))
            node = rng.choice(sorted(live))
            os.kill(live[node].pid, signal.SIGKILL)
            live.pop(node).join(30)
            start()
    finally:
        for p in live.values():
            p.kill()
            p.join(30)
        feeder.close()

    told = _acks(acks)
    assert len(told) >= 30
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with corral.connect(url, **overrides) as c:
        tasks = _check_history(c, added)
        for task_id, epoch in told:
            assert (tasks[task_id].status, tasks[task_id].epoch) == ("done", epoch), task_id
        held = {t.id for t in tasks.values() if t.status == "in_progress"}
        assert held, "no writer was killed holding a task"

        # The monitor finds every writer dead (past its liveness window) and hands
        # their leases back; then one writer finishes the board.
        result = Monitor(c).tick(now=time.time() + 10_000)
        recovered = {e.task_id for e in result.events if e.kind == "lease_recovered"}
        assert recovered == held
        c.register_node("Finisher", "developer")
        while (task := c.claim_best_task("Finisher", "developer")) is not None:
            c.complete_task(task.id, "Finisher", task.epoch, result={"by": "Finisher"})
        tasks = _check_history(c, added)
        assert {t.status for t in tasks.values()} == {"done"}
