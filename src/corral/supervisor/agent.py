"""One agent's runtime state and its state machine.

:class:`_Agent` holds what the supervisor knows of one agent (its process, state,
beats, restart bookkeeping, dependencies it waits on) and answers the questions
the daemon asks of it: what the policy decides on an exit (:meth:`_Agent.on_exit`),
when it next needs attention (:meth:`_Agent.deadline`), how it shows in ``status``
(:meth:`_Agent.status`) and what ``pids.json`` keeps of it (:meth:`_Agent.record`,
:meth:`_Agent.restore`). The daemon does the I/O (spawn, signals, logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.supervisor import process as proc
from corral.supervisor.manifest import AgentSpec
from corral.supervisor.policy import (
    Decision,
    Exit,
    RestartTracker,
    State,
    agent_deadline,
    decide,
    next_deadline,
)

__all__ = ["PROBES", "STDERR_TAIL", "Agent", "RunStart", "stderr_tail"]

STDERR_TAIL = 50
PROBES = ("http", "tcp", "exec")  # heartbeat kinds the supervisor runs itself

RunStart = tuple[int, int]  # (inode, size) of stderr.log when a run was spawned


def _stat(path: Path) -> RunStart:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)  # no file yet: everything that appears is this run's
    return (st.st_ino, st.st_size)


def stderr_tail(
    path: Path,
    lines: int = STDERR_TAIL,
    *,
    since: RunStart | None = None,
    max_bytes: int = 256 * 1024,
) -> list[str]:
    """The last ``lines`` lines of a log file (empty when there is none).

    With ``since`` (the file's inode and size when a run was spawned) only what
    that run wrote: from that offset of the file that had that inode (``path`` or
    a rotated ``path.N``) and everything newer; lines of earlier runs never show."""
    files = [path]
    if since is not None:
        files += [path.with_name(f"{path.name}.{i}") for i in range(1, 1000)]
    chunks: list[bytes] = []
    budget = max_bytes
    for f in files:
        try:
            with open(f, "rb") as fh:
                st = os.fstat(fh.fileno())
                start = 0
                if since is not None and st.st_ino == since[0]:
                    start = min(since[1], st.st_size)
                fh.seek(max(start, st.st_size - budget))
                data = fh.read(budget)
        except OSError:
            break
        chunks.append(data)
        budget -= len(data)
        if since is None or st.st_ino == since[0] or budget <= 0:
            break
        if sum(c.count(b"\n") for c in chunks) > lines:
            break
    data = b"".join(reversed(chunks))
    return [ln.decode("utf-8", "replace") for ln in data.splitlines()[-lines:]]


class _Agent:
    """The runtime state of one agent (see the module docstring).

    ``held``: a start came due while a dependency was not RUNNING; the agent is
    WAITING with no process and is spawned once ``waiting_on`` is empty."""

    def __init__(self, spec: AgentSpec, tracker: RestartTracker, *, cluster: bool = True) -> None:
        self.spec = spec
        self.tracker = tracker
        # the heartbeat kind in force: "cluster" without a cluster is "none"
        self.heartbeat = "none" if spec.heartbeat == "cluster" and not cluster else spec.heartbeat
        self.state = State.STOPPED
        self.child: proc.Child | None = None
        self.started_at: float | None = None
        self.last_beat: float | None = None
        # The last moment the cluster (a "cluster" heartbeat's source) could not be
        # asked: silence is not counted while nobody can tell (silence_from).
        self.cluster_unreachable_at: float | None = None
        self.beat_status: str | None = None
        self.beats_lost = False  # pipe agent whose stdout the log daemon lost
        self.restart_at: float | None = None
        self.held = False
        self.stop_deadline: float | None = None
        self.stopping: asyncio.Future[None] | None = None
        self.stop_reason = ""
        self.hung: str | None = None  # why it is being killed (startup/heartbeat timeout)
        self.operator_stopped = False
        self.auto_start = True
        self.reached_running = False
        self.waiting_on: set[str] = set()
        self.last_exit: dict[str, Any] | None = None
        self.next_check: float | None = None  # cluster heartbeat
        self.checking = False
        self.probe_failures = 0  # consecutive failed probes (http/tcp/exec)
        self.last_pid: int | None = None  # the process the last transition was about
        self.run_start: RunStart | None = None  # where this run's stderr begins

    # ---- the state machine's questions ------------------------------------------

    @property
    def pending_start(self) -> bool:
        """No process, but one is due: after a backoff, or once a dependency runs."""
        return self.child is None and (self.restart_at is not None or self.held)

    @property
    def watched(self) -> bool:
        """Its heartbeat deadlines apply (a live process neither stopping nor hung)."""
        return not (
            self.child is None
            or self.stopping is not None
            or self.hung
            or self.beats_lost
            or self.checking
        )

    def on_exit(
        self,
        ex: Exit,
        now: float,
        *,
        shutting_down: bool = False,
        retired: bool = False,
        not_before: float | None = None,
    ) -> Decision:
        """Its process ended (``ex``; a hung one counts as a failure whatever its
        status): the restart policy's decision, the tracker updated. ``retired`` and
        ``not_before`` are the outside inputs of :func:`~corral.supervisor.policy.decide`."""
        return decide(
            self.spec.restart,
            Exit(at=now) if self.hung else ex,
            stopped_by_operator=shutting_down,
            tracker=self.tracker,
            now=now,
            retired=retired,
            not_before=not_before,
        )

    def silence_from(self) -> float | None:
        """The moment this agent's silence counts from: its last beat or, when later,
        the last time the cluster could not be asked (an outage of the cluster is no
        silence of the agent's: its timeout runs again from the cluster's return)."""
        if self.last_beat is None or self.cluster_unreachable_at is None:
            return self.last_beat
        return max(self.last_beat, self.cluster_unreachable_at)

    def deadline(self) -> float | None:
        """The earliest moment a check could change this agent: a startup or
        heartbeat timeout, the end of a backoff, a stop timeout, the next cluster
        check (exits and beats are events, not deadlines)."""
        hb = self.heartbeat if self.watched else "none"
        last_beat = self.silence_from()
        if hb in PROBES:  # probes fail by count, not by a timeout after the last beat
            last_beat = None
        return next_deadline(
            [
                agent_deadline(
                    self.state,
                    heartbeat=hb,
                    started_at=self.started_at,
                    last_beat=last_beat,
                    startup_timeout=self.spec.startup_timeout,
                    heartbeat_timeout=self.spec.heartbeat_timeout,
                    restart_at=self.restart_at,
                    stop_deadline=self.stop_deadline if self.child is not None else None,
                ),
                self.next_check if hb == "cluster" else None,
            ]
        )

    def status(self, now: float) -> dict[str, Any]:
        """Its row of ``Supervisor.status``."""
        alive = self.child is not None and self.started_at is not None
        return {
            "agent": self.spec.id,
            "state": self.state.value,
            "pid": self.child.pid if self.child else None,
            "restarts": self.tracker.restarts,
            "uptime": max(0.0, now - self.started_at) if alive and self.started_at else None,
            "last_beat": self.last_beat,
            "beat_status": self.beat_status,
            "heartbeat": self.spec.heartbeat,
            "flags": list(self.tracker.flags),
            "last_exit": self.last_exit,
            "waiting_on": sorted(self.waiting_on),
            "restart_at": self.restart_at,
            "adopted": bool(self.child and self.child.adopted),
        }

    # ---- pids.json ----------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """What ``pids.json`` keeps of it: enough to adopt it after a crash and go
        on where this supervisor was (backoff step, due restart, restarts counted)."""
        return {
            "pid": self.child.pid if self.child else None,
            "start_time": self.child.start_time if self.child else None,
            "state": self.state.value,
            "restarts": self.tracker.restarts,
            "flags": list(self.tracker.flags),
            "last_exit": self.last_exit,
            "started_at": self.started_at,
            "operator_stopped": self.operator_stopped,
            "heartbeat": self.spec.heartbeat,
            "restart_at": self.restart_at,
            "held": self.held,
            "waiting_on": sorted(self.waiting_on),
            "backoff": self.tracker.snapshot(),
            "run_start": list(self.run_start) if self.run_start else None,
        }

    def restore(self, rec: Mapping[str, Any]) -> State | None:
        """Take back what :meth:`record` kept (not the process: adoption checks it).
        Returns the recorded state (``None`` when unreadable)."""
        saved = rec.get("backoff")
        if isinstance(saved, dict):
            self.tracker.restore(saved)
        else:  # a file written before the backoff was kept
            self.tracker.restarts = int(rec.get("restarts") or 0)
            self.tracker.exhausted = "restart-exhausted" in (rec.get("flags") or [])
        self.operator_stopped = bool(rec.get("operator_stopped"))
        last_exit = rec.get("last_exit")
        self.last_exit = last_exit if isinstance(last_exit, dict) else None
        started = rec.get("started_at")
        self.started_at = float(started) if isinstance(started, int | float) else None
        pid = rec.get("pid")
        self.last_pid = pid if isinstance(pid, int) else None
        run_start = rec.get("run_start")
        if isinstance(run_start, list) and len(run_start) == 2:
            with contextlib.suppress(TypeError, ValueError):
                self.run_start = (int(run_start[0]), int(run_start[1]))
        restart_at = rec.get("restart_at")
        if isinstance(restart_at, int | float) and not isinstance(restart_at, bool):
            self.restart_at = float(restart_at)
        self.held = rec.get("held") is True
        waiting = rec.get("waiting_on")
        if isinstance(waiting, list):
            self.waiting_on = {w for w in waiting if isinstance(w, str)}
        try:
            return State(str(rec.get("state")))
        except ValueError:
            return None

    def mark_run_start(self, stderr_path: Path) -> None:
        """A run begins: remember where its stderr starts (its crash tail)."""
        self.run_start = _stat(stderr_path)


Agent = _Agent  # the name the supervisor's subclasses and helpers annotate with
