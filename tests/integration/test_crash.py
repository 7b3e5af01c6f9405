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
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.monitor import Monitor
from corral.server.auth import ensure_token_file
from tests.integration.test_server_cli import _wait_healthy
from tests.support import procs
from tests.support.backends import postgres as pg
from tests.support.backends.http import free_port

CTX = mp.get_context("spawn")
BATCH = 400  # tasks added at a time
WRITERS = 3
KILLS = 12
SERVER_KILLS = 6


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
    tasks = {i: c.get_task(i) for i in range(1, total + 1)}  # more than a list holds
    with pytest.raises(corral.NotFoundError):
        c.get_task(total + 1)
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


class _Run:
    """Writer processes on a store, the acknowledgements they leave, and a feeder that
    keeps the board from running out."""

    def __init__(
        self,
        url: str,
        overrides: dict[str, Any],
        tmp_path: Path,
        store_url: str,
        store_overrides: dict[str, Any],
    ) -> None:
        self.url, self.overrides = url, overrides  # what the writers connect to
        self.store_url, self.store_overrides = store_url, store_overrides
        self.seed = int(os.environ.get("CORRAL_CRASH_SEED", "20261123"))
        self.rng = random.Random(self.seed)
        self.acks = tmp_path / "acks"
        self.acks.mkdir()
        self.live: dict[str, tuple[Any, Path]] = {}  # node -> (writer process, its acks file)
        self.started = 0
        self.added = 0
        self.outages = False
        self.feeder = corral.connect(store_url, **store_overrides)
        self.feeder.configure(max_agents=100, max_attempts=100)  # a task may lose holders
        self.top_up(0)

    def top_up(self, told: int) -> None:
        if self.added - told < BATCH // 2:
            self.feeder.add_tasks(
                [
                    {"title": f"Implement part {i}", "priority": ("high", "medium", "low")[i % 3]}
                    for i in range(self.added, self.added + BATCH)
                ]
            )
            self.added += BATCH

    def start_writer(self, node: str | None = None) -> None:
        """A writer process with an acknowledgements file of its own. ``node`` again
        for a writer that found the board empty: its node is live and holds nothing,
        so registering it again takes no new place under max_agents (a new id each
        time would fill the cluster when the writers drain the board faster than the
        feeder tops it up)."""
        run = self.started
        self.started += 1
        node = node or f"W{run}"
        acks = self.acks / f"{node}-{run}.acks"
        p = CTX.Process(
            target=procs.work_until_killed,
            args=(self.url, self.overrides, node, str(acks), self.outages),
        )
        p.start()
        self.live[node] = (p, acks)

    def progress(self) -> None:
        """Wait for a random number of new acknowledgements (1-10), then a random
        fraction of a step: a kill that follows lands anywhere in a writer's step."""
        target = len(_acks(self.acks)) + self.rng.randint(1, 10)
        deadline = time.monotonic() + 60
        # ... and for every live writer to be in its loop (one acknowledgement at
        # least): a kill of a writer still starting up would test nothing.
        while (told := len(_acks(self.acks))) < target or not self._all_looping():
            self.top_up(told)
            for node in [n for n, (p, _) in self.live.items() if p.exitcode is not None]:
                self.live.pop(node)[0].join(30)  # it found the board empty for a moment
                self.start_writer(node)
            assert time.monotonic() < deadline, f"no progress (seed {self.seed})"
            time.sleep(0.001)
        time.sleep(self.rng.uniform(0, 0.002))

    def _all_looping(self) -> bool:
        return all(f.exists() and f.stat().st_size > 0 for _, f in self.live.values())

    def kill_writer(self) -> None:
        node = self.rng.choice(sorted(self.live))
        os.kill(self.live[node][0].pid, signal.SIGKILL)
        self.live.pop(node)[0].join(30)
        self.start_writer()  # a new node: the killed one's lease waits for the monitor

    def drive(self, kills: int, kill: Callable[[], None]) -> None:
        """Start the writers; then ``kills`` times, let them progress and ``kill``."""
        try:
            for _ in range(WRITERS):
                self.start_writer()
            for _ in range(kills):
                self.progress()
                kill()
        finally:
            self.stop()

    def stop(self) -> None:
        for p, _ in self.live.values():
            p.kill()
            p.join(30)
        self.feeder.close()

    def verify(self) -> None:
        """What the writers were told holds; the monitor recovers what they held; a
        last writer finishes the board."""
        told = _acks(self.acks)
        assert len(told) >= 30
        if self.store_url.startswith("sqlite"):
            with sqlite3.connect(self.store_url.removeprefix("sqlite:///")) as raw:
                assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        with corral.connect(self.store_url, **self.store_overrides) as c:
            tasks = _check_history(c, self.added)
            for task_id, epoch in told:
                assert (tasks[task_id].status, tasks[task_id].epoch) == ("done", epoch), task_id
            held = {t.id for t in tasks.values() if t.status == "in_progress"}
            assert held, "no writer was killed holding a task"
            # Every writer is dead, past its liveness window at this monitor's clock.
            result = Monitor(c).tick(now=time.time() + 10_000)
            assert {e.task_id for e in result.events if e.kind == "lease_recovered"} == held
            c.register_node("Finisher", "developer")
            while (task := c.claim_best_task("Finisher", "developer")) is not None:
                c.complete_task(task.id, "Finisher", task.epoch, result={"by": "Finisher"})
            tasks = _check_history(c, self.added)
            assert {t.status for t in tasks.values()} == {"done"}


@pytest.fixture(params=["sqlite-normal", "sqlite-full", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "postgres":
        return pg.fresh_database(request), {"pool_size": 1}
    sync = request.param.removeprefix("sqlite-").upper()
    return f"sqlite:///{tmp_path / 'crash.db'}", {"synchronous": sync}


@pytest.mark.slow
def test_killed_writers_lose_nothing_they_were_told(
    store: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, overrides = store
    run = _Run(url, overrides, tmp_path, url, overrides)
    run.drive(KILLS, run.kill_writer)
    run.verify()


def _serve(db_url: str, port: int, token_file: Path, log: Any) -> subprocess.Popen[bytes]:
    argv = ["--url", db_url, "serve", "--port", str(port), "--token-file", str(token_file)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", *argv, "--no-monitor", "--log-level", "warning"],
        stderr=log,
    )
    _wait_healthy(f"http://127.0.0.1:{port}", proc)
    return proc


@pytest.mark.slow
def test_a_killed_server_answered_only_what_it_had_committed(tmp_path: Path) -> None:
    """The same over HTTP, killing ``corral serve`` instead (its short calls share one
    commit per event-loop turn and are answered after it): a writer that loses its
    server drops the task in hand, waits for the restarted server and claims again."""
    db_url = f"sqlite:///{tmp_path / 'crash.db'}"
    token_file = ensure_token_file(tmp_path / "token")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("ab")
    server = [_serve(db_url, port, token_file, log)]

    def restart() -> None:
        server[0].kill()
        server[0].wait(30)
        server[0] = _serve(db_url, port, token_file, log)

    run = _Run(url, {"token": token_file.read_text().strip()}, tmp_path, db_url, {})
    run.outages = True
    try:
        run.drive(SERVER_KILLS, restart)
    finally:
        server[0].kill()
        server[0].wait(30)
        log.close()
    run.verify()
