"""Issue 16 defect 2: a process stopped (SIGSTOP) while it holds SQLite's write lock.
SQLite cannot take a lock from a live process: the other writers' error names the
holder and what to do, the store's statistics and /metrics show it, and the monitor
logs it by pid and records an alert event once writes go through again."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.cluster import Cluster
from corral.errors import StoreUnavailableError
from corral.server.metrics import ClusterCollector
from corral.store.sqlite import SQLiteStore

CTX = mp.get_context("spawn")


def stopped_writer(url: str, pipe: Connection) -> None:
    """Open a write transaction and stop this very process inside it; once resumed,
    commit and say so."""
    client = corral.connect(url)
    assert isinstance(client, Cluster)  # a database URL gives the embedded client
    assert isinstance(client.store, SQLiteStore)
    with client.store._write() as tx:
        tx.one("meta_get", key="settings_version")
        pipe.send(("locked", os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
    pipe.send(("committed", os.getpid()))
    client.close()


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


def test_a_stopped_write_lock_holder_is_named_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    cluster = corral.connect(url, busy_timeout=0.3)
    assert isinstance(cluster, Cluster)  # a database URL gives the embedded client
    cluster.configure(workload_assessment_interval=1.0)
    ours, theirs = CTX.Pipe()
    child = CTX.Process(target=stopped_writer, args=(url, theirs))
    child.start()
    monitor = thread = None
    try:
        assert ours.poll(30), "the writer never took the lock"
        kind, pid = ours.recv()
        assert kind == "locked" and pid == child.pid
        _wait_for("the writer stopped", lambda: _state(pid) == "T", 5)

        # Another writer: a clear error naming the holder, and nothing written.
        with pytest.raises(StoreUnavailableError) as err:
            cluster.add_task("blocked")
        text = str(err.value)
        assert f"process {pid} is stopped" in text, text
        assert f"kill -CONT {pid}" in text and f"kill {pid}" in text, text
        assert cluster.list_tasks() == []

        # The store's statistics, and the metrics read from them.
        stats = cluster.stats()
        assert stats.write_lock_holder == {"pid": pid, "stopped": True}
        assert stats.write_lock_timeouts >= 1
        families = ClusterCollector(cluster).collect()
        metrics = {m.name: m.samples[0].value for m in families if m.samples}
        assert metrics["corral_store_write_lock_holder_stopped"] == 1.0
        assert metrics["corral_store_write_lock_timeouts"] >= 1

        # The monitor's pass fails: it names the holder in its log, not just "retry".
        caplog.set_level(logging.WARNING, logger="corral.monitor")
        monitor = corral.Monitor(cluster, max_sleep=0.2, name="mon")
        thread = monitor.start_thread()
        _wait_for(
            "the monitor naming the holder",
            lambda: any(
                getattr(r, "action", None) == "store_lock_held" and getattr(r, "pid", 0) == pid
                for r in caplog.records
            ),
            10,
        )
        # Resumed, the holder commits; the monitor's next pass records what happened.
        os.kill(pid, signal.SIGCONT)
        assert ours.poll(10) and ours.recv() == ("committed", pid)

        def alert() -> Any:
            found = [e for e in cluster.events(0) if e.kind == "alert"]
            return found[0] if found else None

        event = _wait_for("the monitor's alert", alert, 10)
        assert event.data["reason"] == "store_lock_held"
        assert event.data["pid"] == pid and event.data["stopped"] is True
        assert f"process {pid}" in event.data["message"]
        assert cluster.stats().write_lock_holder is None
        cluster.add_task("after")  # writes go through again
    finally:
        if monitor is not None:
            monitor.stop()
        if thread is not None:
            thread.join(timeout=10)
        if child.pid is not None and child.is_alive():
            os.kill(child.pid, signal.SIGCONT)
            child.join(timeout=10)
            if child.is_alive():
                os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=10)
        cluster.close()
