"""Issue 3's acceptance runs: 3 coordinators (each with its monitor) and 16 workers
in separate processes on one PostgreSQL database, 10,000 tasks."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import corral
from corral.store.postgres.session import _LEADER_KEY
from tests.support import pg_procs
from tests.support.backends import postgres as pg
from tests.support.backends.http import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from hosts.pg import Postgres  # bench/hosts: a PostgreSQL cluster of the test's own

CTX = mp.get_context("spawn")
TASKS = 10_000
WORKERS = 16
COORDINATORS = 3
MAX_SLEEP = 0.5  # the monitors' longest sleep


class Fleet:
    def __init__(self, url: str, heartbeat_interval: float) -> None:
        self.url = url
        self.heartbeat_interval = heartbeat_interval
        self.stop = CTX.Event()
        self.out = CTX.Queue()
        self.coordinators = {
            f"coord-{i}": CTX.Process(
                target=pg_procs.coordinator, args=(url, f"coord-{i}", MAX_SLEEP)
            )
            for i in range(COORDINATORS)
        }
        self.workers = {
            f"W{i:02d}": CTX.Process(
                target=pg_procs.worker,
                args=(url, f"W{i:02d}", heartbeat_interval, self.stop, self.out),
            )
            for i in range(WORKERS)
        }

    def start(self) -> None:
        for p in (*self.coordinators.values(), *self.workers.values()):
            p.start()

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(query, params).fetchall()

    def done(self) -> int:
        count: int = self.sql("SELECT count(*) FROM tasks WHERE status = 'done'")[0][0]
        return count

    def leader(self) -> str | None:
        rows = self.sql(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = %s AND l.objid = %s",
            _LEADER_KEY >> 32,
            _LEADER_KEY & 0xFFFFFFFF,
        )
        return rows[0][0].removeprefix("corral monitor ") if rows else None

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = check()
                if value:
                    return value
            except psycopg.OperationalError:
                pass  # the server is restarting
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def finish(self, timeout: float = 240) -> list[Any]:
        self.wait_for("every task done", lambda: self.done() == TASKS, timeout)
        self.stop.set()
        alive = [p for p in self.workers.values() if p.exitcode is None and p.is_alive()]
        reports = [self.out.get(timeout=60) for _ in alive]
        for p in alive:
            p.join(timeout=30)
        return reports

    def kill_all(self) -> None:
        for p in (*self.coordinators.values(), *self.workers.values()):
            if p.is_alive():
                p.kill()
            p.join(timeout=10)

    def events(self) -> list[tuple[int, float, str, str | None, int | None, dict[str, Any]]]:
        rows = self.sql("SELECT seq, ts, kind, node_id, task_id, data FROM events ORDER BY seq")
        return [(s, ts, k, n, t, json.loads(d)) for s, ts, k, n, t, d in rows]


def board(url: str) -> str:
    """The fleet's settings and its TASKS tasks, on the database at ``url``."""
    with corral.connect(url) as c:
        c.configure(max_agents=WORKERS + 4, workload_assessment_interval=1.0)
        for start in range(0, TASKS, 5000):
            c.add_tasks([{"title": f"job {i}"} for i in range(start, start + 5000)])
    return url


@pytest.fixture
def fleet_url(request: pytest.FixtureRequest) -> str:
    return board(pg.fresh_database(request))


@pytest.fixture
def own_server() -> Iterator[Postgres]:
    """A PostgreSQL cluster of the test's own (initdb into a temporary folder, a free
    port on 127.0.0.1), so that restarting it touches nothing else on the machine."""
    server = Postgres("127.0.0.1", free_port())
    try:
        server.init()
        server.start()
        server.create_db()
        yield server
    finally:
        server.stop()
        server.remove()


def assert_each_task_completed_once(fleet: Fleet, events: list[Any]) -> None:
    assert fleet.sql("SELECT status, count(*) FROM tasks GROUP BY status") == [("done", TASKS)]
    completed = Counter(t for _, _, kind, _, t, _ in events if kind == "task_completed")
    assert len(completed) == TASKS and set(completed.values()) == {1}


def monitor_runs(events: list[Any]) -> list[str]:
    """The monitors that acted, one entry per uninterrupted run of their events."""
    runs: list[str] = []
    for *_, data in events:
        name = data.get("monitor")
        if name is not None and (not runs or runs[-1] != name):
            runs.append(name)
    return runs


@pytest.mark.slow
def test_fleet_survives_the_monitor_leader_being_killed(fleet_url: str) -> None:
    """Each of 10,000 tasks is completed exactly once; exactly one monitor acts at a
    time; kill -9 of the leader hands over within twice the detection bound, and the
    leases of workers killed after the handover are recovered at their threshold."""
    hb = 2.0
    window = 3 * hb  # missed_beats x interval
    fleet = Fleet(fleet_url, heartbeat_interval=hb)
    fleet.start()
    try:
        first = fleet.wait_for("a leader", fleet.leader, 60)
        fleet.wait_for("a quarter done", lambda: fleet.done() >= TASKS // 4, 120)
        leader_pid = fleet.coordinators[first].pid
        assert leader_pid is not None  # started
        os.kill(leader_pid, signal.SIGKILL)
        killed_at = time.time()
        second = fleet.wait_for(
            "a new leader", lambda: (name := fleet.leader()) != first and name, 2 * window
        )
        takeover = time.time() - killed_at
        victims = ["W00", "W01"]
        for name in victims:
            victim_pid = fleet.workers[name].pid
            assert victim_pid is not None  # started
            os.kill(victim_pid, signal.SIGKILL)
            fleet.workers[name].join(timeout=10)
        held = fleet.sql(
            "SELECT id FROM tasks WHERE status = 'in_progress' AND assigned_to = ANY(%s)",
            victims,
        )
        reports = fleet.finish()
        # The board may drain before the victims' silence reaches the window (when they
        # held nothing at the kill): the monitor must still declare them dead.
        fleet.wait_for(
            "the victims declared dead",
            lambda: (
                fleet.sql(
                    "SELECT count(DISTINCT node_id) FROM events"
                    " WHERE kind = 'node_dead' AND node_id = ANY(%s)",
                    victims,
                )[0][0]
                == len(victims)
            ),
            window + 30,
        )
    finally:
        fleet.kill_all()
    assert all(errors == [] for _, _, errors, _ in reports), reports
    events = fleet.events()
    assert_each_task_completed_once(fleet, events)
    assert takeover < 2 * window, f"takeover took {takeover:.2f}s"
    runs = monitor_runs(events)
    assert len(runs) == len(set(runs)), f"monitors interleaved: {runs}"
    assert first not in runs[1:] and second in runs
    late = [e for e in events if e[5].get("monitor") == first and e[1] > killed_at]
    assert late == []
    dead = {n: d for _, _, kind, n, _, d in events if kind == "node_dead" and n in victims}
    assert set(dead) == set(victims)
    for name, data in dead.items():
        assert data["monitor"] == second
        assert window <= data["silent_seconds"] < window + 2 * MAX_SLEEP, (name, data)
    recovered = {t for _, _, kind, _, t, d in events if kind == "lease_recovered"}
    assert {t for (t,) in held} <= recovered


@pytest.mark.slow
def test_fleet_survives_a_postgresql_restart(own_server: Postgres) -> None:
    """PostgreSQL restarted mid-run: clients get retryable errors and reconnect, and
    every task is claimed once and completed once."""
    fleet = Fleet(board(own_server.url()), heartbeat_interval=10.0)
    fleet.start()
    try:
        fleet.wait_for("a leader", fleet.leader, 60)
        fleet.wait_for("a quarter done", lambda: fleet.done() >= TASKS // 4, 120)
        own_server.restart()
        fleet.wait_for("the server back", lambda: fleet.done() >= 0, 60)
        fleet.wait_for("a leader again", fleet.leader, 30)
        reports = fleet.finish()
    finally:
        fleet.kill_all()
    assert all(errors == [] for _, _, errors, _ in reports), reports
    assert sum(outages for *_, outages in reports) > 0, "no worker saw the restart"
    events = fleet.events()
    assert_each_task_completed_once(fleet, events)
    claimed = Counter(t for _, _, kind, _, t, _ in events if kind == "task_claimed")
    assert set(claimed.values()) == {1}, "a task was claimed twice"
