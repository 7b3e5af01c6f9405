"""Issue 16 defect 1: a client stopped (SIGSTOP) inside a transaction on PostgreSQL
must not stall lease recovery. The monitor skips the row it holds and comes back to
it; the server ends the stopped session after ``idle_in_transaction_timeout``."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import psycopg
import pytest

import corral
from corral.cluster import Cluster
from corral.store.postgres import IDLE_IN_TRANSACTION_TIMEOUT, PostgresStore
from tests.support.backends import postgres as pg

CTX = mp.get_context("spawn")
HB = 1.0
WINDOW = 3 * HB  # missed_beats x heartbeat interval
BOUND = IDLE_IN_TRANSACTION_TIMEOUT
TOLERANCE = 0.1  # the acceptance: recovered at its threshold +- 100 ms


def frozen_holder(url: str, node_id: str, go: Any, pipe: Connection) -> None:
    """Register, claim a task, then on ``go`` start a heartbeat's write transaction
    (its node row locked) and stop this very process inside it."""
    client = corral.connect(url, pool_size=1)
    assert isinstance(client, Cluster)  # a database URL gives the embedded client
    client.register_node(node_id, "developer", heartbeat_interval=HB)
    task = client.claim_best_task(node_id, "developer")
    pipe.send(("ready", task.id if task else None))
    go.wait()
    store = client.store
    assert isinstance(store, PostgresStore)
    with store._write() as tx:
        tx.one("node_heartbeat_steady", id=node_id, payload="{}", health=None, now=time.time())
        pipe.send(("locked", time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)
    pipe.send(("resumed", time.time()))  # never reached: the server ended the session


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(query, params).fetchall()


def test_a_stopped_client_inside_a_transaction_stalls_no_recovery(
    request: pytest.FixtureRequest,
) -> None:
    """Every other node is recovered at its own threshold (+-100 ms) while a stopped
    process holds its node's row lock; the stopped node itself once the server has
    ended its session (lock taken + the bound), its threshold plus at most the bound."""
    url = pg.fresh_database(request)
    setup = corral.connect(url, pool_size=1)
    setup.configure(max_agents=10, workload_assessment_interval=3600.0)
    setup.add_tasks([{"title": f"job {i}"} for i in range(4)])

    go = CTX.Event()
    ours, theirs = CTX.Pipe()
    child = CTX.Process(target=frozen_holder, args=(url, "F", go, theirs))
    child.start()
    pid = child.pid
    assert pid is not None  # started
    monitor = cluster = thread = None
    try:
        assert ours.poll(30), "the frozen holder never claimed"
        kind, f_task = ours.recv()
        assert kind == "ready" and f_task is not None
        # Three more nodes, each holding a task, silent from now on; their deadlines
        # fall while F's lock is held (F is stopped just before its own deadline).
        others = {"A": 1.0, "B": 1.1, "C": 1.2}
        held = {"F": f_task}
        for name, hb in others.items():
            setup.register_node(name, "developer", heartbeat_interval=hb)
            task = setup.claim_best_task(name, "developer")
            assert task is not None
            held[name] = task.id
        dead_at = dict(_sql(url, "SELECT id, dead_at FROM nodes WHERE status <> 'terminated'"))

        cluster = corral.connect(url, pool_size=2)
        monitor = corral.Monitor(cluster, max_sleep=0.5, name="mon")
        thread = monitor.start_thread()

        time.sleep(max(0.0, dead_at["F"] - 0.3 - time.time()))  # a scheduled moment
        go.set()
        assert ours.poll(10), "the holder never took its lock"
        kind, locked_at = ours.recv()
        assert kind == "locked"
        _wait_for("the holder stopped", lambda: _state(pid) == "T", 5)
        # A's deadline falls while the stopped session holds F's row.
        assert locked_at < dead_at["A"] < locked_at + BOUND

        def dead_events() -> dict[str, tuple[float, dict[str, Any]]]:
            rows = _sql(url, "SELECT node_id, ts, data FROM events WHERE kind = 'node_dead'")
            return {n: (ts, json.loads(data)) for n, ts, data in rows}

        _wait_for("all four nodes declared dead", lambda: len(dead_events()) == 4, 20)
        assert _state(pid) == "T"  # still stopped: the server ended its session
        dead = dead_events()
        for name, hb in others.items():
            ts, data = dead[name]
            late = ts - dead_at[name]
            assert 0 <= late <= TOLERANCE, f"{name} recovered {late:.3f}s after its threshold"
            assert data["silent_seconds"] >= 3 * hb
        ts, _ = dead["F"]
        # (the server's timer starts at the end of the statement, just before locked_at)
        assert locked_at + BOUND - 0.05 <= ts <= locked_at + BOUND + TOLERANCE, (
            f"F recovered {ts - locked_at:.3f}s after its lock (bound {BOUND}s)"
        )
        assert dead_at["F"] <= ts <= dead_at["F"] + BOUND + TOLERANCE
        recovered = {
            t for (t,) in _sql(url, "SELECT task_id FROM events WHERE kind = 'lease_recovered'")
        }
        assert set(held.values()) <= recovered
    finally:
        if monitor is not None:
            monitor.stop()
            if thread is not None:
                thread.join(timeout=10)
        if cluster is not None:
            cluster.close()
        if child.pid is not None and child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=10)
        setup.close()
