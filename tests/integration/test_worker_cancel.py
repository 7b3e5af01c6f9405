"""A task the operator cancels while a real ``corral worker`` runs it: the worker
learns it at its next heartbeat and stops the task's process (SIGTERM to its group),
and the late completion the stopped child still reports is refused; the worker goes
on. Both the SQLite file and ``corral serve`` (a node token, the operator's cancel
over HTTP) are used."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import corral
from corral.server.auth import Tokens
from corral.worker import stop_child
from tests.support.backends.http import free_port
from tests.support.worker_app import wait_for

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"
# The task's command: records its pid, and on SIGTERM records it and exits 0 with a
# result (a child that finishes "gracefully": its completion is what is refused).
CHILD = """
import os, signal, sys, time
from pathlib import Path
d = Path(sys.argv[1])
def term(*_):
    (d / "child.term").write_text("TERM")
    print('{"finished": "late"}', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
sys.stdin.read()
# Written whole, then renamed: the test reads it as soon as the name exists.
(d / "child.pid.tmp").write_text(str(os.getpid()))
os.replace(d / "child.pid.tmp", d / "child.pid")
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        _stop(proc, tmp_path)


def _stop(worker: subprocess.Popen[bytes], tmp: Path) -> None:
    """Kill the worker and, when a test ended before the worker stopped it, the task's
    child (its own process group, so killing the worker leaves it running)."""
    if worker.poll() is None:
        worker.kill()
        worker.wait()
    pid = tmp / "child.pid"
    if pid.exists():
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(int(pid.read_text())).kill()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), **extra}


def _worker(url: str, tmp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    child = tmp / "child.py"
    child.write_text(CHILD)
    argv = [sys.executable, "-m", "corral", "--url", url, "worker", "--id", "W1"]
    # Beats every 0.5 s: the cancel is learned within it, and a loaded machine's pause
    # of a second does not make the monitor end the worker (3 missed beats).
    argv += ["--role", "developer", "--heartbeat-interval", "0.5", "--idle-timeout", "60"]
    argv += ["--", sys.executable, str(child), str(tmp)]
    with open(tmp / "worker.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def _child_stopped(tmp: Path) -> int:
    """The child's pid, once it got SIGTERM and is gone."""
    pid = int((tmp / "child.pid").read_text())
    wait_for(lambda: (tmp / "child.term").exists(), timeout=10, what="the child's SIGTERM")
    wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what="the child gone")
    return pid


def _log(tmp: Path) -> str:
    return (tmp / "worker.log").read_text(errors="replace")


def test_a_cancelled_task_is_stopped_and_its_late_completion_refused(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    c = corral.connect(url)
    task = c.add_task("Implement the long migration")
    worker = _worker(url, tmp_path, _env())
    procs.append(worker)
    wait_for(lambda: (tmp_path / "child.pid").exists(), timeout=20, what="the child running")
    assert c.get_task(task.id).status == "in_progress"

    c.cancel_task(task.id, reason="the spec changed")
    _child_stopped(tmp_path)
    refused = f"completion of task {task.id} refused"
    wait_for(lambda: refused in _log(tmp_path), what="the refusal")
    log = _log(tmp_path)
    assert "was cancelled by operator: the spec changed" in log, log
    stopping = f"task {task.id} was cancelled by the operator or taken back: stopping its process"
    assert stopping in log, log

    after = c.get_task(task.id)
    assert (after.status, after.result) == ("cancelled", None)
    kinds = [e.kind for e in c.events(limit=1000) if e.task_id == task.id]
    assert kinds == ["task_added", "task_claimed", "task_cancelled"]
    assert worker.poll() is None  # the worker goes on: it is idle, waiting for work
    wait_for(lambda: c.get_node("W1").status == "idle", what="the worker idle")
    nxt = c.add_task("Implement the next thing")
    (tmp_path / "child.pid").unlink()
    wait_for(lambda: (tmp_path / "child.pid").exists(), timeout=20, what="the next task run")
    assert c.get_task(nxt.id).status == "in_progress"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    c.close()


def test_over_http_the_cancel_names_the_operator_and_the_node_token_worker_stops(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """``corral serve``: the worker runs with its node token; the operator cancels
    over HTTP; the event names the actor as the token's principal."""
    token = "op-token-for-cancel"
    db = f"sqlite:///{tmp_path / 'corral.db'}"
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "corral", "--url", db, "serve", "--port", str(port)],
        env=_env(CORRAL_TOKEN=token),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs.append(serve)
    base = f"http://127.0.0.1:{port}"
    found = wait_for(lambda: _connect(base, token), timeout=20, what="corral serve")
    assert found is not None
    op = found
    task = op.add_task("Implement the export")
    node_token = Tokens(token).node_token("W1")
    worker = _worker(base, tmp_path, _env(CORRAL_TOKEN=node_token))
    procs.append(worker)
    wait_for(lambda: (tmp_path / "child.pid").exists(), timeout=20, what="the child running")

    req = urllib.request.Request(
        f"{base}/v1/tasks/{task.id}/cancel",
        data=json.dumps({"reason": "not needed"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["status"] == "cancelled"
    _child_stopped(tmp_path)
    wait_for(lambda: f"completion of task {task.id} refused" in _log(tmp_path), what="refusal")
    [event] = [e for e in op.events(limit=1000) if e.kind == "task_cancelled"]
    assert (event.data["actor"], event.data["reason"]) == ("operator", "not needed")
    assert op.get_task(task.id).status == "cancelled"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    op.close()


def _connect(base: str, token: str) -> corral.Client | None:
    client = corral.connect(base, token=token)
    try:
        client.settings()
    except corral.CorralError:
        client.close()
        return None
    return client


def test_stop_child_kills_a_child_that_ignores_sigterm_once_its_grace_is_over(
    tmp_path: Path,
) -> None:
    """``stop_child``: SIGTERM to the child's group first; a child that ignores it
    (and its own child) is SIGKILLed when the grace is over, not before."""
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "sub = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(str(sub.pid))\n"
        "time.sleep(60)\n"
    )
    marker = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-c", script, str(marker)], start_new_session=True)
    grandchild = int(wait_for(lambda: marker.exists() and marker.read_text(), what="started"))
    began = time.monotonic()
    stop_child(proc, grace=0.5)
    took = time.monotonic() - began
    assert proc.returncode == -signal.SIGKILL
    assert took >= 0.5
    wait_for(lambda: not psutil.pid_exists(grandchild) or _zombie(grandchild), what="reaped")


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
