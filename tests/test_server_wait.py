"""Waiting claims over HTTP: a claim whose caller has gone away takes nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

import corral
from corral.store.signal import signal_for
from tests.backends.http import TOKEN, serving
from tests.worker_app import wait_for

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
