"""Acceptance of the worker SDK with real worker processes against a real SQLite
cluster: heartbeat cadence and payload, kill -9 recovery, SIGSTOP fencing, a failing
webhook, SIGTERM shutdown. Short settings: heartbeats every 0.2 s, dead after 3
missed beats (0.6 s), a monitor in this process waking at least every 50 ms."""

from __future__ import annotations

import http.server
import itertools
import json
import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import corral
from corral.model import Event
from tests.support.worker_app import log_text, spawn, wait_for

pytestmark = pytest.mark.slow

INTERVAL = 0.2
WINDOW = 3 * INTERVAL  # missed_beats (3) × the worker's declared interval
DOC_KEYS = {
    "worker_id",
    "timestamp",
    "health_status",
    "current_tasks",
    "capacity_available",
    "metrics",
}
METRIC_KEYS = {"cpu_usage", "memory_usage", "tasks_completed", "tasks_failed", "uptime"}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A cluster URL, a client on the real clock, and cleanup of spawned workers."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    client = corral.connect(url)
    procs: list[subprocess.Popen[bytes]] = []

    def start(node_id: str, *args: str) -> subprocess.Popen[bytes]:
        proc = spawn(url, node_id, tmp_path, *args)
        procs.append(proc)
        return proc

    yield {"url": url, "c": client, "dir": tmp_path, "start": start}
    (tmp_path / "gate").touch()
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    client.close()


@pytest.fixture
def monitor(env: dict[str, Any]) -> Iterator[corral.Monitor]:
    m = corral.Monitor(env["c"], max_sleep=0.05)
    thread = m.start_thread()
    yield m
    m.stop()
    thread.join(5)


def _events(c: corral.Cluster, kind: str, **match: Any) -> list[Event]:
    return [
        e
        for e in c.events(0, 10_000)
        if e.kind == kind and all(getattr(e, k) == v for k, v in match.items())
    ]


def _started(d: Path, node_id: str, task_id: int) -> bool:
    return (d / f"started-{node_id}-{task_id}").exists()


def test_heartbeats_arrive_at_the_interval_with_the_documents_payload(env: dict[str, Any]) -> None:
    """Every gap between stored heartbeats is the interval within 10%, and the stored
    heartbeat is exactly heartbeat-protocol.md's HeartbeatData."""
    c, interval = env["c"], 0.5
    env["start"]("W1", "--interval", str(interval), "--metrics-keep", "100")

    def ten_samples() -> list[Event]:
        s = c.metrics_series("W1")
        return s if len(s) >= 10 else []

    samples = wait_for(ten_samples, timeout=15, what="10 heartbeat samples")
    gaps = [b.ts - a.ts for a, b in itertools.pairwise(samples)]
    assert all(abs(g - interval) <= 0.1 * interval for g in gaps), gaps
    assert abs(statistics.mean(gaps) - interval) <= 0.02 * interval
    beat = c.get_node("W1").heartbeat
    assert set(beat) == DOC_KEYS
    assert set(beat["metrics"]) == METRIC_KEYS
    assert beat["worker_id"] == "W1" and beat["current_tasks"] == []
    assert beat["health_status"] == "healthy" and beat["capacity_available"] == 1
    assert abs(beat["timestamp"] / 1000 - time.time()) < 5
    assert 5 < beat["metrics"]["memory_usage"] < 500  # resident MB of a real process
    assert samples[-1].data["task_count"] == 0 and set(samples[-1].data["metrics"]) == METRIC_KEYS


def test_kill_9_holder_lease_recovered_at_threshold_and_completed_elsewhere(
    env: dict[str, Any], monitor: corral.Monitor
) -> None:
    c, d = env["c"], env["dir"]
    task = c.add_task("implement the thing")
    w1 = env["start"]("W1", "--interval", str(INTERVAL))
    wait_for(lambda: _started(d, "W1", task.id), what="W1 to start the task")
    wait_for(
        lambda: c.get_node("W1").heartbeat.get("current_tasks") == [str(task.id)],
        what="a heartbeat naming the task",
    )
    w1.kill()
    w1.wait()
    recovered = wait_for(
        lambda: _events(c, "lease_recovered", task_id=task.id), timeout=5, what="lease recovery"
    )[0]
    # Recovered at the threshold: silent for the window, not much longer.
    assert WINDOW - 0.001 <= recovered.data["stale_seconds"] <= WINDOW + 0.3
    assert c.get_task(task.id).status == "pending"
    (d / "gate").touch()
    env["start"]("W2", "--interval", str(INTERVAL))
    done = wait_for(lambda: (t := c.get_task(task.id)).status == "done" and t, what="W2 done")
    assert done.assigned_to == "W2" and done.result == {"by": "W2"}
    assert done.attempts == 2


def _stop_outside_a_write(c: Any, pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write lock. Stopped inside a write
    transaction it would block every writer, the monitor's included: the store's
    documented limit, which tests/integration/test_sqlite_frozen.py holds it to. On a loaded
    machine a stop after the task's start met the heartbeat that follows the claim."""
    deadline = time.monotonic() + 10
    while True:
        os.kill(pid, signal.SIGSTOP)
        wait_for(
            lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED,
            what=f"process {pid} stopped",
        )
        holder = c.store.write_lock_holder()
        if holder is None or holder.pid != pid:
            return
        os.kill(pid, signal.SIGCONT)  # let it finish its transaction, then again
        assert time.monotonic() < deadline, f"process {pid} keeps the write lock"
        wait_for(
            lambda: getattr(c.store.write_lock_holder(), "pid", None) != pid,
            what=f"process {pid} to release the write lock",
        )


def test_sigstop_past_threshold_loses_lease_and_late_completion_is_refused(
    env: dict[str, Any], monitor: corral.Monitor
) -> None:
    c, d = env["c"], env["dir"]
    task = c.add_task("implement the thing")
    w1 = env["start"]("W1", "--interval", str(INTERVAL))
    wait_for(lambda: _started(d, "W1", task.id), what="W1 to start the task")
    _stop_outside_a_write(c, w1.pid)
    wait_for(
        lambda: _events(c, "lease_recovered", task_id=task.id), timeout=5, what="lease recovery"
    )
    assert c.get_node("W1").status == "terminated"
    (d / "gate").touch()
    env["start"]("W2", "--interval", str(INTERVAL))
    wait_for(lambda: c.get_task(task.id).status == "done", what="W2 to finish")
    os.kill(w1.pid, signal.SIGCONT)
    assert w1.wait(10) == 1  # the cluster had terminated W1: it exits "lost"
    log = log_text(d, "W1")
    assert f"completion of task {task.id} refused" in log
    assert "refused=1" in log
    final = c.get_task(task.id)
    assert final.status == "done" and final.assigned_to == "W2"
    assert final.result == {"by": "W2"}


class _Hook(http.server.BaseHTTPRequestHandler):
    status = 500
    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing_hook() -> Iterator[tuple[str, type[_Hook]]]:
    handler = type("Failing", (_Hook,), {"bodies": [], "status": 500})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


def test_webhook_failing_three_times_alerts_and_nothing_else_stops(
    env: dict[str, Any], failing_hook: tuple[str, type[_Hook]]
) -> None:
    c, d = env["c"], env["dir"]
    url, hook = failing_hook
    env["start"]("W1", "--interval", str(INTERVAL), "--webhook", url, "--retry-attempts", "1")
    alert = wait_for(lambda: _events(c, "alert", node_id="W1"), timeout=10, what="alert")[0]
    assert alert.data["destination"] == "webhook"
    assert alert.data["consecutive_failures"] == 3
    assert "HTTP 500" in alert.data["error"]
    assert len(hook.bodies) >= 3 and set(hook.bodies[0]) == DOC_KEYS
    assert "failed 3 times in a row" in log_text(d, "W1")
    # The cluster destination keeps receiving ...
    wait_for(
        lambda: (c.get_node("W1").last_heartbeat or 0) > alert.ts + 2 * INTERVAL,
        what="cluster heartbeats after the alert",
    )
    # ... and the worker keeps working.
    task = c.add_task("implement it", "quick")
    done = wait_for(lambda: (t := c.get_task(task.id)).status == "done" and t, what="done")
    assert done.result == {"by": "W1"}
    assert len(_events(c, "alert", node_id="W1")) == 1  # one alert per streak


def test_sigterm_holding_a_task_final_beat_task_pending_at_once_exit_0(env: dict[str, Any]) -> None:
    """No monitor runs and the heartbeat interval is 5 s (dead only after 15 s): the
    task is pending at once because the worker gave it back, not by recovery."""
    c, d = env["c"], env["dir"]
    task = c.add_task("implement the thing")
    w1 = env["start"]("W1", "--interval", "5")
    wait_for(lambda: _started(d, "W1", task.id), what="W1 to start the task")
    sent = time.monotonic()
    w1.send_signal(signal.SIGTERM)
    assert w1.wait(5) == 0
    assert time.monotonic() - sent < 3
    t = c.get_task(task.id)
    assert t.status == "pending" and t.assigned_to is None
    node = c.get_node("W1")
    assert node.status == "terminated"
    assert node.heartbeat["status"] == "shutting-down"
    assert node.heartbeat["current_tasks"] == [str(task.id)]
    released = _events(c, "lease_released", task_id=task.id)
    assert released and released[0].data["reason"] == "terminated"
    assert not _events(c, "lease_recovered")
