"""A stuck task under real ``corral worker`` processes, in real time.

The first worker's child prints a few lines (progress) and then nothing while its
worker keeps heartbeating: the monitor (a real one, in this process) finds the task
stuck at its deadline, and with ``stuck_action = "requeue"`` takes it back; the
worker's next heartbeat stops the child, whose late completion is refused. A second
worker claims the task and finishes it, once, in the same session (the children see
``CORRAL_SESSION_ID``, ``CORRAL_ATTEMPT`` and ``CORRAL_EPOCH``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import corral
from corral.monitor import Monitor
from tests.support.worker_app import wait_for

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 1.5  # progress_timeout, seconds
# The task's command. Attempt 1: three lines of progress, then silence (a session
# that hangs while its worker heartbeats); on SIGTERM it answers with a result, the
# late completion to be refused. Attempt 2: finishes at once.
CHILD = """
import json, os, signal, sys, time
from pathlib import Path
d = Path(sys.argv[1])
attempt = os.environ["CORRAL_ATTEMPT"]
seen = {k: os.environ[k] for k in ("CORRAL_SESSION_ID", "CORRAL_ATTEMPT", "CORRAL_EPOCH")}
(d / f"env.{attempt}.json").write_text(json.dumps(seen))
sys.stdin.read()
if attempt == "2":
    print("resuming the session", file=sys.stderr, flush=True)
    print(json.dumps({"finished_by": os.environ["CORRAL_NODE_ID"]}), flush=True)
    sys.exit(0)
def term(*_):
    (d / "child.term").write_text("TERM")
    print('{"finished": "late"}', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(d / "child.pid").write_text(str(os.getpid()))
for i in range(3):
    print(f"step {i}", flush=True)
    time.sleep(0.6)
(d / "child.quiet").write_text("")
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The workers started; at the end each is killed if it still runs, and so is the
    first attempt's child (in a session of its own: a killed worker leaves it)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.killpg(int((tmp_path / "child.pid").read_text()), signal.SIGKILL)


def _worker(url: str, tmp: Path, node: str, *extra: str) -> subprocess.Popen[bytes]:
    child = tmp / "child.py"
    child.write_text(CHILD)
    argv = [sys.executable, "-m", "corral", "--url", url, "worker", "--id", node]
    argv += ["--role", "developer", "--heartbeat-interval", "0.2", "--idle-timeout", "60"]
    argv += [*extra, "--", sys.executable, str(child), str(tmp)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with open(tmp / f"{node}.log", "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def _log(tmp: Path, node: str) -> str:
    return (tmp / f"{node}.log").read_text(errors="replace")


def test_a_silent_child_is_stuck_at_its_deadline_and_requeued_to_another_worker(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    c = corral.connect(url)
    assert isinstance(c, corral.Cluster)
    c.configure(progress_timeout=TIMEOUT, stuck_action="requeue")
    monitor = Monitor(c, name="test")
    monitor.start_thread()
    try:
        task = c.add_task("Implement the long migration")
        procs.append(w1 := _worker(url, tmp_path, "W1", "--max-tasks", "1"))
        wait_for(lambda: (tmp_path / "child.quiet").exists(), timeout=20, what="W1's child")
        held = c.get_task(task.id)
        assert (held.status, held.assigned_to) == ("in_progress", "W1")
        # Its output lines were its progress, one report a second at most: step 0 and
        # step 2 were reported, step 1 (0.6 s after step 0) was not.
        assert held.progress_note == "step 2"
        procs.append(_worker(url, tmp_path, "W2"))  # idle until the task is back

        def stuck() -> list[corral.Event]:
            return [e for e in c.events(limit=10_000) if e.kind == "task_stuck"]

        wait_for(lambda: stuck() != [], timeout=20, what="the task stuck")
        [event] = stuck()
        # Flagged at its deadline: the last progress report plus progress_timeout.
        assert held.progress_at is not None
        assert event.data["stuck_since"] == pytest.approx(held.progress_at + TIMEOUT)
        assert 0 <= event.ts - event.data["stuck_since"] <= 0.1, event
        assert (event.node_id, event.data["outcome"]) == ("W1", "pending")
        # W1 heartbeats all along: it is alive, its task was not recovered as a lease.
        assert not [e for e in c.events(limit=10_000) if e.kind == "lease_recovered"]

        # W1's next heartbeat stops its child; the child's late result is refused.
        pid = int((tmp_path / "child.pid").read_text())
        wait_for(lambda: (tmp_path / "child.term").exists(), timeout=10, what="SIGTERM")
        wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what="the child gone")
        assert w1.wait(20) == 0
        log = _log(tmp_path, "W1")
        assert f"completion of task {task.id} refused" in log, log
        assert f"epoch {held.epoch}; the task is at epoch" in log, log

        wait_for(lambda: c.get_task(task.id).status == "done", timeout=20, what="done by W2")
        done = c.get_task(task.id)
        assert (done.assigned_to, done.result) == ("W2", {"finished_by": "W2"})
        completed = [e for e in c.events(limit=10_000) if e.kind == "task_completed"]
        assert [(e.task_id, e.node_id) for e in completed] == [(task.id, "W2")]
        first = json.loads((tmp_path / "env.1.json").read_text())
        second = json.loads((tmp_path / "env.2.json").read_text())
        assert first["CORRAL_SESSION_ID"] == second["CORRAL_SESSION_ID"] == done.session_id
        assert (first["CORRAL_ATTEMPT"], second["CORRAL_ATTEMPT"]) == ("1", "2")
        assert int(first["CORRAL_EPOCH"]) == held.epoch < int(second["CORRAL_EPOCH"])
    finally:
        monitor.stop()
        c.close()
