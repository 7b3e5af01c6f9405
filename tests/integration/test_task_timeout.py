"""A task's ``timeout`` with a real ``corral worker``: the monitor (real time, its own
thread) takes the run back at claim + timeout, the worker learns it at its next
heartbeat (the task in ``cancelled_tasks``) and stops the task's process (SIGTERM to
its group), and the late completion the stopped child still reports is refused."""

from __future__ import annotations

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
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _log(tmp: Path) -> str:
    return (tmp / "worker.log").read_text(errors="replace")


def test_a_run_past_its_timeout_is_stopped_and_its_late_completion_refused(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    c = corral.connect(url)
    assert isinstance(c, corral.Cluster)
    task = c.add_task("Implement the long migration", timeout=1.5, max_attempts=1)
    monitor = Monitor(c, name="timeout-test")
    monitor.start_thread()
    try:
        (tmp_path / "child.py").write_text(CHILD)
        argv = [sys.executable, "-m", "corral", "--url", url, "worker", "--id", "W1"]
        argv += ["--role", "developer", "--heartbeat-interval", "0.2", "--idle-timeout", "60"]
        argv += ["--", sys.executable, str(tmp_path / "child.py"), str(tmp_path)]
        with open(tmp_path / "worker.log", "ab") as log:
            worker = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(SRC)},
            )
        procs.append(worker)
        wait_for(lambda: (tmp_path / "child.pid").exists(), timeout=20, what="the child running")
        pid = int((tmp_path / "child.pid").read_text())
        claimed_at = c.get_task(task.id).claimed_at
        assert claimed_at is not None

        wait_for(lambda: (tmp_path / "child.term").exists(), timeout=15, what="the child's TERM")
        wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what="the child gone")
        refused = f"completion of task {task.id} refused"
        wait_for(lambda: refused in _log(tmp_path), timeout=15, what="the refusal")

        after = c.get_task(task.id)
        assert after.status == "failed"
        assert "timed out: ran longer than its timeout of 1.5s" in (after.error or "")
        [timed_out] = [e for e in c.events(limit=1000) if e.kind == "task_timed_out"]
        assert (timed_out.node_id, timed_out.data["outcome"]) == ("W1", "failed")
        # taken back at its deadline (the monitor sleeps until it), not a poll later
        assert claimed_at + 1.5 <= timed_out.ts < claimed_at + 1.5 + 0.5
        kinds = [e.kind for e in c.events(limit=1000) if e.task_id == task.id]
        assert kinds == ["task_added", "task_claimed", "task_timed_out"]
        assert worker.poll() is None  # the worker goes on
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        monitor.stop()
        c.close()
