"""One agent's runtime record, its status dict and its ``pids.json`` record."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from corral.supervisor import process as proc
from corral.supervisor.manifest import AgentSpec
from corral.supervisor.policy import RestartTracker, State

__all__ = ["STDERR_TAIL", "agent_record", "agent_status", "stderr_tail"]

STDERR_TAIL = 50


def stderr_tail(path: Path, lines: int = STDERR_TAIL, *, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of a log file (empty when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    return [ln.decode("utf-8", "replace") for ln in data.splitlines()[-lines:]]


class _Agent:
    """The runtime record of one agent."""

    def __init__(self, spec: AgentSpec, tracker: RestartTracker) -> None:
        self.spec = spec
        self.tracker = tracker
        self.state = State.STOPPED
        self.child: proc.Child | None = None
        self.started_at: float | None = None
        self.last_beat: float | None = None
        self.beat_status: str | None = None
        self.beats_lost = False  # pipe agent whose stdout the log daemon lost
        self.restart_at: float | None = None
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
        self.last_pid: int | None = None  # the process the last transition was about


def agent_status(a: _Agent, now: float) -> dict[str, Any]:
    """The status dict of one agent (``Supervisor.status`` lists them)."""
    alive = a.child is not None and a.started_at is not None
    return {
        "agent": a.spec.id,
        "state": a.state.value,
        "pid": a.child.pid if a.child else None,
        "restarts": a.tracker.restarts,
        "uptime": max(0.0, now - a.started_at) if alive and a.started_at else None,
        "last_beat": a.last_beat,
        "beat_status": a.beat_status,
        "heartbeat": a.spec.heartbeat,
        "flags": list(a.tracker.flags),
        "last_exit": a.last_exit,
        "waiting_on": sorted(a.waiting_on),
        "adopted": bool(a.child and a.child.adopted),
    }


def agent_record(a: _Agent) -> dict[str, Any]:
    """What ``pids.json`` keeps of one agent (to adopt it after a crash)."""
    return {
        "pid": a.child.pid if a.child else None,
        "start_time": a.child.start_time if a.child else None,
        "state": a.state.value,
        "restarts": a.tracker.restarts,
        "flags": list(a.tracker.flags),
        "last_exit": a.last_exit,
        "started_at": a.started_at,
        "operator_stopped": a.operator_stopped,
        "heartbeat": a.spec.heartbeat,
    }
