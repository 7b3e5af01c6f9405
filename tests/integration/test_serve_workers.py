"""``corral serve --workers 2`` as real processes, on SQLite and PostgreSQL: both
workers answer on the one port (a heartbeat through each, found by which process
holds the accepted connection), one monitor leader recovers a silent node's lease,
and killing that leader (SIGKILL) hands the monitor to another worker within the
detection bound (the monitor's ``max_sleep``)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.defaults import MONITOR_MAX_SLEEP
from tests.support.backends.http import free_port
from tests.support.backends.postgres import fresh_database

TOKEN = "workers-test-token"
BEAT = 0.2  # the silent nodes' declared heartbeat interval: dead 0.6 s after their last call
SLACK = 0.5  # scheduling on a loaded 2-core machine

pytestmark = pytest.mark.slow


def _until(what: str, check: Any, timeout: float = 20.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.add(int(entry))
    return found


def _server_socket_owner(port: int, client_port: int, workers: set[int]) -> int | None:
    """The worker holding the server side of the connection from ``client_port``
    (``/proc/net/tcp``: the socket's inode; ``/proc/<pid>/fd``: who has it open)."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (
                int(local.split(":")[1], 16) == port
                and int(remote.split(":")[1], 16) == client_port
            ):
                inode = fields[9]
    if inode is None:
        return None
    for pid in workers:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
        except OSError:
            continue
    return None


def _heartbeat(port: int, node_id: str) -> http.client.HTTPConnection:
    """A heartbeat on a new connection, answered 200; the connection, still open
    (the worker that accepted it holds its server side until it closes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        f"/v1/nodes/{node_id}/heartbeat",
        body=json.dumps({}),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    response.read()
    assert response.status == 200
    return conn


def _recovered(c: Any, task_id: int, holder: str) -> Any:
    for event in c.events(0, 10_000):
        if (event.kind, event.task_id, event.node_id) == ("lease_recovered", task_id, holder):
            return event
    return None


def _silent_holder(c: Any, node_id: str) -> tuple[int, float]:
    """Register ``node_id`` with a short interval, let it claim a task and go silent:
    (the task's id, when the node is dead)."""
    c.register_node(node_id, "developer", heartbeat_interval=BEAT)
    c.add_task(f"Implement part {node_id}")
    claimed = c.claim_best_task(node_id, "developer")
    assert claimed is not None  # this task, or one recovered from an earlier holder
    node = c.get_node(node_id)
    assert node.dead_at is not None
    return claimed.id, node.dead_at


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_workers_serve_one_port_and_one_monitor_leads(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}" if backend == "sqlite" else fresh_database(request)
    port = free_port()
    env = {**os.environ, "CORRAL_TOKEN": TOKEN, "CORRAL_URL": url}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "serve",
            "--port",
            str(port),
            "--workers",
            "2",
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env=env,
        stderr=log,
    )
    try:
        workers = _until("two workers", lambda: (w := _children(proc.pid)) and len(w) == 2 and w)
        c = corral.connect(f"http://127.0.0.1:{port}", token=TOKEN)
        request.addfinalizer(c.close)
        _until("the server", lambda: _ready(c))
        c.configure(max_agents=50)
        c.register_node("beater", "developer")

        # A heartbeat through each worker: new connections until both have answered one.
        served: set[int] = set()
        for _ in range(200):
            conn = _heartbeat(port, "beater")
            assert conn.sock is not None
            owner = _server_socket_owner(port, conn.sock.getsockname()[1], workers)
            conn.close()
            if owner is not None:
                served.add(owner)
            if served == workers:
                break
        assert served == workers, f"heartbeats answered by {served} of {workers}"

        # One leader recovers a silent node's lease at its threshold.
        task_id, dead_at = _silent_holder(c, "silent1")
        first = _until("the lease recovered", lambda: _recovered(c, task_id, "silent1"))
        leader = int(first.data["monitor"].rsplit(":", 1)[1])
        assert leader in workers
        assert first.ts - dead_at <= MONITOR_MAX_SLEEP + SLACK
        acted = {e.data["monitor"] for e in c.events(0, 10_000) if "monitor" in e.data}
        assert acted == {first.data["monitor"]}, acted  # a single monitor did the duties

        # Killing the leader hands the monitor to another worker within the bound.
        os.kill(leader, signal.SIGKILL)
        killed_at = time.time()
        task_id, dead_at = _silent_holder(c, "silent2")
        second = _until("the lease recovered again", lambda: _recovered(c, task_id, "silent2"))
        successor = int(second.data["monitor"].rsplit(":", 1)[1])
        assert successor != leader
        assert successor in _children(proc.pid)
        # Due at max(its death, the handover); recovered within the detection bound.
        assert second.ts - max(dead_at, killed_at) <= MONITOR_MAX_SLEEP + SLACK
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    text = (tmp_path / "serve.log").read_text()
    assert code in (0, -signal.SIGTERM), text
    assert not _children(proc.pid)
    assert "2 workers" in text


def _ready(c: Any) -> bool:
    try:
        c.settings()
    except (corral.CorralError, OSError):
        return False
    return True


@pytest.mark.parametrize(
    ("args", "url", "says"),
    [
        (["--workers", "0"], None, "--workers"),
        (["--workers", "two"], None, "--workers"),
        (["--workers", "2"], "sqlite:///:memory:", "--workers"),
    ],
)
def test_bad_workers_is_exit_2_naming_the_option(
    tmp_path: Path, args: list[str], url: str | None, says: str
) -> None:
    env = {
        **os.environ,
        "CORRAL_TOKEN": TOKEN,
        "CORRAL_URL": url or f"sqlite:///{tmp_path / 'c.db'}",
    }
    r = subprocess.run(
        [sys.executable, "-m", "corral", "serve", "--port", str(free_port()), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and says in lines[0], r.stderr
