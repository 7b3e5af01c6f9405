"""``pids.json``: what the supervisor must know to find its children again.

:class:`PidFile` writes the whole document atomically (a temporary file in the same
directory, fsync, rename, fsync of the directory), so a supervisor killed at any
moment leaves either the previous or the new version, never a torn one. A missing
or unreadable file loads as empty (a first start, or nothing worth trusting).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["VERSION", "PidFile"]

VERSION = 1


class PidFile:
    """The supervisor's ``pids.json``: ``{"version", "supervisor_pid", "agents":
    {id: {pid, start_time, state, restarts, flags, last_exit, started_at, backoff,
    restart_at, held, waiting_on, run_start, ...}}}`` (one agent's record is
    :meth:`corral.supervisor.agent.Agent.record`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        """The saved document, or ``{"agents": {}}`` when there is none (or it is not
        a JSON object with an ``agents`` object)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"agents": {}}
        if not isinstance(data, dict) or not isinstance(data.get("agents"), dict):
            return {"agents": {}}
        return data

    def save(self, data: dict[str, Any]) -> None:
        """Replace the file with ``data`` atomically (mode 0600)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        payload = json.dumps({"version": VERSION, **data}, sort_keys=True).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
