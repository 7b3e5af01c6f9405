"""Waiting claims over HTTP: a claim whose caller has gone away takes nothing."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import corral
from corral.store.signal import signal_for
from tests.support.backends.http import TOKEN, free_port, serving, start_uvicorn, stop_uvicorn
from tests.support.backends.postgres import fresh_database
from tests.support.worker_app import wait_for

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_an_abandoned_waiting_claim_takes_nothing(tmp_path: Path) -> None:
    """A client asks for a task with ``wait: 5`` and gives up after 1 s; a task
    added next stays pending (no lease for a caller nobody answers), and the node's
    next claim gets it at epoch 1, attempt 1."""
    with serving(tmp_path) as (url, _):
        client = corral.connect(url, token=TOKEN)
        client.register_node("n1", "developer")
        ready = signal_for(tmp_path / "served.db")
        gives_up = httpx.Client(base_url=url, headers=AUTH, timeout=1.0)
        with gives_up, pytest.raises(httpx.ReadTimeout):
            gives_up.post("/v1/nodes/n1/claim", json={"wait": 5})
        # The server notices the disconnect and stops waiting (before the fix the
        # claim waited out its 5 s, then took whatever came).
        wait_for(lambda: ready.waiters == 0, timeout=3, what="the abandoned claim to end")
        task = client.add_task("implement it")
        assert client.get_task(task.id).status == "pending"
        assert [e.kind for e in client.events() if e.kind == "task_claimed"] == []
        got = client.claim_best_task("n1", "developer")
        assert got is not None and got.id == task.id
        assert (got.epoch, got.attempts) == (1, 1)
        client.close()


def test_a_waiting_claim_still_gets_a_task_added_while_it_waits(tmp_path: Path) -> None:
    """The caller that stays is woken by the task added meanwhile and gets it."""
    with serving(tmp_path) as (url, _):
        client = corral.connect(url, token=TOKEN)
        client.register_node("n1", "developer")
        ready = signal_for(tmp_path / "served.db")
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as stays:
            answers: list[httpx.Response] = []
            t = threading.Thread(
                target=lambda: answers.append(stays.post("/v1/nodes/n1/claim", json={"wait": 20}))
            )
            t.start()
            wait_for(lambda: ready.waiters > 0, timeout=10, what="the claim waiting")
            task = client.add_task("implement it")
            t.join(timeout=10)
        assert answers and answers[0].status_code == 200
        assert answers[0].json()["task"]["id"] == task.id
        assert client.get_task(task.id).assigned_to == "n1"
        client.close()


@contextmanager
def _serving_on(db: str) -> Iterator[tuple[str, Any]]:
    """A server on the store at ``db``: ``(base_url, uvicorn server)``."""
    from corral.server import create_app

    embedded = corral.connect(db)
    port = free_port()
    app = create_app(embedded, token=TOKEN, monitor=False, mcp=False)
    server, thread = start_uvicorn(app, port, timeout_graceful_shutdown=1)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        stop_uvicorn(server, thread)
        embedded.close()


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_claim_whose_caller_left_during_the_try_is_handed_back_uncounted(
    request: pytest.FixtureRequest, max_attempts: int
) -> None:
    """On PostgreSQL every try runs on a thread. The node's row is held locked (by
    this test's own session) so the try waits inside the store while the client
    gives up and disconnects; once the lock is let go the try takes the task and
    finds its caller gone: the task is pending again with the attempt undone (on its
    last attempt too), the node as it was, a ``lease_released`` event says so, and
    the node's next claim is its first attempt (epoch 2: a lease number is never
    reused)."""
    db = fresh_database(request)
    with _serving_on(db) as (url, server):
        client = corral.connect(url, token=TOKEN)
        client.register_node("n1", "developer")
        task = client.add_task("implement it", max_attempts=max_attempts)
        before = client.get_node("n1")
        connections = len(server.server_state.connections)
        with psycopg.connect(db) as locker:
            locker.execute("SELECT 1 FROM nodes WHERE id = 'n1' FOR UPDATE")
            answers: list[BaseException] = []

            def give_up() -> None:
                with httpx.Client(base_url=url, headers=AUTH, timeout=1.0) as c:
                    try:
                        c.post("/v1/nodes/n1/claim", json={"wait": 5, "role": "developer"})
                    except httpx.ReadTimeout as exc:
                        answers.append(exc)

            t = threading.Thread(target=give_up)
            t.start()
            wait_for(
                lambda: _waits_on_a_lock(locker), timeout=10, what="the claim to wait on the row"
            )
            t.join(timeout=10)
            assert answers, "the client should have given up"
            wait_for(
                lambda: len(server.server_state.connections) == connections,
                timeout=5,
                what="the server to see the client gone",
            )
            locker.commit()  # the try goes on: it takes the task, then sees its caller gone
        # (Not "the task is pending": it is, before the try takes it.)
        wait_for(
            lambda: any(e.kind == "lease_released" for e in client.events()),
            timeout=10,
            what="the task handed back",
        )
        back = client.get_task(task.id)
        assert (back.status, back.assigned_to, back.attempts, back.epoch) == (
            "pending",
            None,
            0,
            1,
        )
        node = client.get_node("n1")
        assert (node.status, node.idle_since, node.current_task_id) == (
            before.status,
            before.idle_since,
            before.current_task_id,
        )
        [released] = [e for e in client.events() if e.kind == "lease_released"]
        assert (released.node_id, released.task_id) == ("n1", task.id)
        assert released.data["reason"] == "abandoned"
        assert (released.data["outcome"], released.data["attempt"]) == ("pending", 1)
        got = client.claim_best_task("n1", "developer")
        assert got is not None and (got.id, got.epoch, got.attempts) == (task.id, 2, 1)
        client.close()


def _waits_on_a_lock(conn: psycopg.Connection[Any]) -> bool:
    """Whether another session of this database waits on a row lock (the claim)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    ).fetchone()
    return bool(row and row[0])


def test_a_claim_hopping_to_a_thread_on_sqlite_is_handed_back_uncounted(tmp_path: Path) -> None:
    """SQLite's waiting claim tries on the event loop, but hops to a thread when
    another process holds the write lock (here this test's own connection); a caller
    that leaves while that try waits gets nothing: the task is handed back with its
    attempt undone, though it was its last."""
    db = tmp_path / "hop.db"
    with _serving_on(f"sqlite:///{db}") as (url, server):
        client = corral.connect(url, token=TOKEN)
        client.register_node("n1", "developer")
        task = client.add_task("implement it", max_attempts=1)
        before = client.get_node("n1")
        connections = len(server.server_state.connections)
        locker = sqlite3.connect(db, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")
            gives_up = httpx.Client(base_url=url, headers=AUTH, timeout=1.0)
            with gives_up, pytest.raises(httpx.ReadTimeout):
                gives_up.post("/v1/nodes/n1/claim", json={"wait": 5, "role": "developer"})
            wait_for(
                lambda: len(server.server_state.connections) == connections,
                timeout=5,
                what="the server to see the client gone",
            )
            locker.execute("COMMIT")  # the try goes on on its thread and takes the task
        finally:
            locker.close()
        # (Not "the task is pending": it is, before the try takes it.)
        wait_for(
            lambda: any(e.kind == "lease_released" for e in client.events()),
            timeout=10,
            what="the task handed back",
        )
        back = client.get_task(task.id)
        assert (back.status, back.assigned_to, back.attempts, back.epoch) == (
            "pending",
            None,
            0,
            1,
        )
        node = client.get_node("n1")
        assert (node.status, node.idle_since) == (before.status, before.idle_since)
        assert [e.data["reason"] for e in client.events() if e.kind == "lease_released"] == [
            "abandoned"
        ]
        client.close()
