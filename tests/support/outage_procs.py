"""Processes for the outage tests and bench: workers (``corral worker`` and the SDK)
on one board, a ``corral serve`` that is SIGKILLed and started again on its port, and
PostgreSQL sessions ended with ``pg_terminate_backend`` (tests/integration/test_worker_outage.py,
bench/worker_outage.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from corral.server.auth import ensure_token_file
from tests.integration.test_server_cli import _wait_healthy as wait_healthy
from tests.support.backends.http import free_port

__all__ = [
    "Fleet",
    "Partition",
    "Serve",
    "add_board",
    "check_done_once",
    "env_for",
    "tally",
    "terminate_sessions",
    "wait_for",
]

TASK = """#!/bin/sh
# one run of a task: its id on a line of the runs file, then a little work
echo "$CORRAL_TASK_ID" >> "{runs}"
sleep {seconds}
echo '{{"ok": true}}'
"""

SDK_WORKER = """
import sys, time
import corral
from corral.worker.destinations import RetryPolicy

node, url, runs, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
beat, tolerance = float(sys.argv[5]), float(sys.argv[6])

def handle(task):
    with open(runs, "a") as f:
        f.write(f"{task.id}\\n")
    time.sleep(seconds)
    return {"ok": True}

w = corral.Worker(node, "developer", url=url, heartbeat_interval=beat,
                  idle_timeout_seconds=120, retry=RetryPolicy(retry_attempts=1, retry_delay=0),
                  outage_tolerance=tolerance)
sys.exit(w.run(handle))
"""


def wait_for(what: str, ok: Callable[[], bool], deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while not ok():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Fleet:
    """Worker processes (``corral worker`` and the SDK) on one board, with their logs."""

    def __init__(
        self,
        tmp_path: Path,
        env: dict[str, str],
        task_seconds: float,
        *,
        tolerance: float | None = None,
        beat: float = 2.0,
    ) -> None:
        self.tolerance = tolerance  # the workers' outage_tolerance (None: the default)
        # Their heartbeat interval: a node is dead after 3 beats without one, and a
        # restarted server (its monitor) judges them at once, so the window must
        # outlast the restart on a loaded machine (1 s down, then 1-3 s to listen).
        self.beat = beat
        self.tmp = tmp_path
        self.env = env
        self.runs = tmp_path / "runs"
        self.runs.touch()
        self.script = tmp_path / "task.sh"
        self.script.write_text(TASK.format(runs=self.runs, seconds=task_seconds))
        self.script.chmod(0o755)
        self.sdk = tmp_path / "sdk_worker.py"
        self.sdk.write_text(SDK_WORKER)
        self.task_seconds = task_seconds
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def cli(self, node: str, url: str, *options: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "corral",
            "--url",
            url,
            "worker",
            "--id",
            node,
            "--role",
            "developer",
            "--heartbeat-interval",
            str(self.beat),
            "--idle-timeout",
            "120",
            "--retry-attempts",
            "1",
            "--retry-delay",
            "0",
            *options,
        ]
        if self.tolerance is not None:
            argv += ["--outage-tolerance", str(self.tolerance)]
        argv += ["--", str(self.script)]
        self.start(node, argv)

    def sdk_worker(self, node: str, url: str) -> None:
        tolerance = 60.0 if self.tolerance is None else self.tolerance
        argv = [
            sys.executable,
            str(self.sdk),
            node,
            url,
            str(self.runs),
            str(self.task_seconds),
            str(self.beat),
            str(tolerance),
        ]
        self.start(node, argv)

    def start(self, node: str, argv: list[str]) -> None:
        """Start ``argv`` as worker ``node`` (its stderr in ``<node>.log``)."""
        log = (self.tmp / f"{node}.log").open("wb")
        self.procs[node] = subprocess.Popen(argv, env=self.env, stderr=log, cwd=self.tmp)
        log.close()

    def log(self, node: str) -> str:
        return (self.tmp / f"{node}.log").read_text(errors="replace")

    def exited(self) -> dict[str, int]:
        return {n: code for n, p in self.procs.items() if (code := p.poll()) is not None}

    def runs_per_task(self) -> Counter[int]:
        return Counter(int(line) for line in self.runs.read_text().split())

    def stop(self) -> dict[str, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for node, p in self.procs.items():
            try:
                codes[node] = p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[node] = None
        return codes


class Serve:
    """A real ``corral serve`` on a fixed port, that can be SIGKILLed and restarted."""

    def __init__(self, db_url: str, tmp_path: Path, *, port: int | None = None) -> None:
        self.db_url = db_url
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = ensure_token_file(tmp_path / "token")
        self.token = self.token_file.read_text().strip()
        self.log = tmp_path / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "corral",
                    "--url",
                    self.db_url,
                    "serve",
                    "--port",
                    str(self.port),
                    "--token-file",
                    str(self.token_file),
                    "--log-level",
                    "warning",
                ],
                stderr=log,
            )
        wait_healthy(self.url, self.proc)  # tests/integration/test_server_cli.py's

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def env_for(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_TOKEN"] = token
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return env


def add_board(client: Any, n: int) -> None:
    client.add_tasks([{"title": f"task {i}", "role": "developer"} for i in range(n)])


def tally(client: Any, fleet: Fleet, n: int) -> dict[str, int]:
    """The Acceptance line's counts for a board of ``n`` tasks: tasks done, tasks
    not done, tasks claimed more than once, tasks run more than once (or never),
    lease recoveries, and worker processes that exited."""
    tasks = client.list_tasks(limit=n + 10)
    runs = fleet.runs_per_task()
    recovered = [e for e in client.events(limit=1_000_000) if e.kind == "lease_recovered"]
    return {
        "tasks": len(tasks),
        "done": sum(t.status == "done" for t in tasks),
        "not_done": sum(t.status != "done" for t in tasks),
        "claimed_twice": sum(t.attempts > 1 for t in tasks),
        "run_twice": sum(c > 1 for c in runs.values()),
        "never_run": sum(t.id not in runs for t in tasks),
        "lease_recoveries": len(recovered),
        "worker_exits": len(fleet.exited()),
    }


def check_done_once(client: Any, fleet: Fleet, n: int) -> None:
    """Every task done, claimed and run once; no recovery; no worker exited."""
    counts = tally(client, fleet, n)
    assert counts == {
        "tasks": n,
        "done": n,
        "not_done": 0,
        "claimed_twice": 0,
        "run_twice": 0,
        "never_run": 0,
        "lease_recoveries": 0,
        "worker_exits": 0,
    }, counts


def terminate_sessions(db_url: str, admin_url: str) -> int:
    """``pg_terminate_backend`` of every session on the database but this one."""
    dbname = db_url.rsplit("/", 1)[1]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [dbname],
        ).fetchall()
    return len(rows)


class Partition:
    """A TCP proxy to ``port`` that can cut the network for a while: ``cut(seconds)``
    closes every relayed connection and, for ``seconds``, closes each new one at once
    (the client sees its connection refused or reset, as when the server is down),
    while the server itself and its monitor keep running."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._until = 0.0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, seconds: float) -> None:
        with self._lock:
            self._until = time.monotonic() + seconds
            conns, self._open = self._open, set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.cut(0)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if time.monotonic() < self._until:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)  # the other direction ends too
        src.close()  # (each socket is the source of one pipe)
