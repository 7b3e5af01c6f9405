"""``corral up``: the whole fleet in one process tree.

In start order: a lock on ``.corral/up.lock`` of the current directory (a second
``corral up`` there fails at once), the cluster (the embedded SQLite store
``.corral/corral.db``, or ``[cluster] url``) with the manifest's settings and seed
tasks, the HTTP server (API, ``/mcp``, ``/metrics``) with the monitor in a thread of
its own, and the supervisor with its pools on the main thread's event loop (state in
``.corral/supervisor/``, so ``corral ctl`` run in the same directory finds it).
Agents and pool members reach the cluster over HTTP, each with a node token of its
own. SIGINT or SIGTERM stops them in reverse order: the members and agents (their
leases handed back), then the server and the monitor, then the store.

While it runs, :class:`EventPrinter` turns the cluster's events into one line per
fleet event (spawned, ready, claimed, finished, retired, restarted, scaled).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from corral.errors import CorralError, InvalidInputError
from corral.fleet.manifest import FleetManifest, read_seed
from corral.model import Event

__all__ = ["EventPrinter", "Lock", "describe", "seed_board"]

STATE_DIR = Path(".corral") / "supervisor"
LOCK_FILE = Path(".corral") / "up.lock"
PRINT_INTERVAL = 0.2  # seconds between two reads of the cluster's events


class AlreadyRunning(CorralError):
    code = "already_running"
    status = 409
    exit_code = 1
    hint = (
        "Stop the other corral up (Ctrl-C, or `corral ctl shutdown`) or run in another directory."
    )


class Lock:
    """An exclusive ``flock`` on ``.corral/up.lock`` for as long as ``corral up`` runs
    (released by the kernel when the process ends, however it ends)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._f: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        f = open(self.path, "a+")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            pid = f.read().strip() or "?"
            f.close()
            raise AlreadyRunning(
                f"corral up is already running in {self.path.parent.parent} (pid {pid})"
            ) from None
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        self._f = f

    def release(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def apply_settings(cluster: Any, fleet: FleetManifest) -> None:
    """The manifest's ``[cluster] settings`` (a bad value names the manifest)."""
    if not fleet.cluster_settings:
        return
    try:
        cluster.configure(**dict(fleet.cluster_settings))
    except InvalidInputError as e:
        field = f"cluster.settings.{e.field}" if e.field else "cluster.settings"
        raise InvalidInputError(f"{fleet.path}: {field}: {e.message}", field=field) from None


def seed_board(cluster: Any, fleet: FleetManifest) -> int:
    """Load the seed tasks when the board has never had a task; how many."""
    if fleet.seed is None or cluster.list_tasks(limit=1):
        return 0
    tasks = read_seed(fleet.seed)
    if tasks:
        cluster.add_tasks(tasks)
    return len(tasks)


# ---- what a person reads -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """One fleet event: ``what`` (spawned, ready, claimed, ...), ``who``, the text."""

    ts: float
    what: str
    who: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts, "event": self.what, "who": self.who, "text": self.text}


def describe(e: Event) -> Line | None:
    """The fleet event ``e`` is, or None (an event a person need not see)."""
    d = e.data
    who = e.node_id
    if e.kind == "process_state":
        who = d.get("agent")
        old, new = d.get("from"), d.get("to")
        if new in ("STARTING", "RUNNING") and old in (None, "STOPPED"):
            return Line(e.ts, "spawned", who, f"spawned {who} (pid {d.get('pid')})")
        if new in ("STARTING", "RUNNING") and old == "UNHEALTHY":
            # The exit it follows and the last line it wrote to stderr: why it restarts.
            why = f"; last exit: {d['exit']}" if d.get("exit") else ""
            why += f", stderr: {d['stderr']}" if why and d.get("stderr") else ""
            return Line(e.ts, "restarted", who, f"restarted {who} (pid {d.get('pid')}){why}")
        if new == "RUNNING" and old == "STARTING":
            return Line(e.ts, "ready", who, f"{who} running (heartbeat)")
        if new == "UNHEALTHY":
            return Line(e.ts, "unhealthy", who, f"{who} unhealthy")
        if new == "STOPPED":
            return Line(e.ts, "stopped", who, f"{who} stopped")
        return None
    if e.kind == "node_registered":
        return Line(e.ts, "ready", who, f"{who} ready ({d.get('role')})")
    if e.kind == "task_claimed":
        return Line(e.ts, "claimed", who, f"{who} claimed task {e.task_id}")
    if e.kind == "task_completed":
        return Line(e.ts, "finished", who, f"{who} finished task {e.task_id}")
    if e.kind == "task_failed":
        return Line(e.ts, "failed", who, f"{who} failed task {e.task_id}")
    if e.kind == "node_status" and d.get("new") == "terminated":
        return Line(e.ts, "retired", who, f"{who} retired")
    if e.kind == "node_retired":
        return Line(e.ts, "retired", who, f"{who} retired by the cluster (idle)")
    if e.kind == "node_dead":
        return Line(e.ts, "dead", who, f"{who} silent: marked dead")
    if e.kind == "lease_recovered":
        return Line(e.ts, "recovered", who, f"task {e.task_id} taken back from {who}")
    if e.kind == "alert" and d.get("reason") == "pool_scaled":
        return Line(e.ts, "scaled", d.get("pool"), str(d.get("message") or _scaled(d)))
    if e.kind == "alert" and d.get("condition"):  # the alerter's (corral.alerter)
        return Line(e.ts, "alert", d.get("subject"), f"alert: {d.get('message')}")
    if e.kind.startswith("spawn_request"):
        what = "requested" if e.kind == "spawn_requested" else e.kind.removeprefix("spawn_request_")
        by = f" by {d['actor']}" if d.get("actor") else ""
        why = f" ({d['reason']})" if d.get("reason") else ""
        text = f"spawn request {d.get('id')} for pool {d.get('pool')}: {d.get('status')}{by}{why}"
        return Line(e.ts, what, d.get("pool"), text)
    return None


def _scaled(d: dict[str, Any]) -> str:
    return f"pool {d.get('pool')}: {d.get('from')} -> {d.get('to')} members ({d.get('why')})"


class EventPrinter:
    """Prints one line per fleet event from the cluster's events (JSON with ``as_json``)."""

    def __init__(self, cluster: Any, write: Callable[[str], None], *, as_json: bool) -> None:
        self.cluster = cluster
        self.write = write
        self.as_json = as_json
        self.cursor = 0  # start after what is already there
        while batch := cluster.events(self.cursor, 10_000):
            self.cursor = batch[-1].seq

    def emit(self, line: Line) -> None:
        if self.as_json:
            self.write(json.dumps(line.to_dict()))
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(line.ts))
            self.write(f"{stamp} {line.text}")

    def drain(self) -> None:
        while True:
            events = self.cluster.events(self.cursor, 1000)
            for e in events:
                self.cursor = e.seq
                line = describe(e)
                if line is not None:
                    self.emit(line)
            if len(events) < 1000:
                return

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(CorralError):
                await asyncio.to_thread(self.drain)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PRINT_INTERVAL)
        with contextlib.suppress(CorralError):
            await asyncio.to_thread(self.drain)


class ServerThread:
    """uvicorn serving ``app`` on ``sock`` in a thread of its own (its own loop)."""

    def __init__(self, app: Any, sock: Any) -> None:
        import uvicorn

        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=3
        )
        self.server = uvicorn.Server(config)
        self.sock = sock
        self.thread = threading.Thread(target=self._run, name="corral-http", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as e:
            self.error = e

    def start(self, timeout: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise CorralError(f"the HTTP server did not start: {self.error}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
