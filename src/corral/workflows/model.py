"""The records of workflow runs (handlers): plain frozen data, no I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HANDLER_STATUSES",
    "Delivery",
    "Handler",
    "HandlerRun",
    "WorkflowHost",
    "WorkflowWork",
    "iso8601",
]

HANDLER_STATUSES = ("running", "released", "completed", "failed", "cancelled")
"""A run's status: running on a host (or about to be), released (checkpointed in the
store, resumable on any host serving its workflow), or finished."""

FINISHED = ("completed", "failed", "cancelled")


def iso8601(ts: float | None) -> str | None:
    """A unix time as ISO 8601 in UTC (``2026-01-02T03:04:05.678000+00:00``)."""
    if ts is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()


def _as_dict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@dataclass(frozen=True, slots=True)
class Handler:
    """One workflow run. ``active_waiters`` are its outstanding waits (``step``,
    ``event_type``, ``waiter_id``, ``deadline``); ``idle_since`` is set while it is
    idle (kept when released); ``resident_reason`` says why an idle run cannot be
    released; ``release_requested_at`` is when an operator asked that it be released
    now (``release_workflow``; None once released, busy again, resident or finished)."""

    handler_id: str
    workflow: str
    status: str
    host: str | None = None
    idle_since: float | None = None
    active_waiters: list[dict[str, Any]] = field(default_factory=list)
    wake_at: float | None = None
    result: Any = None
    error: str | None = None
    resident_reason: str | None = None
    resumes: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    released_at: float | None = None
    finished_at: float | None = None
    release_requested_at: float | None = None

    @property
    def idle(self) -> bool:
        return self.idle_since is not None

    def to_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["active_waiters"] = [dict(w) for w in self.active_waiters]
        # On the wire idle_since is ISO 8601; the unix time rides beside it.
        d["idle_since"] = iso8601(self.idle_since)
        d["idle_since_unix"] = self.idle_since
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Handler:
        """A handler from ``to_dict``'s output (the remote client's answers)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in names}
        values["idle_since"] = d.get("idle_since_unix")
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Delivery:
    """An event sent to a run, handed to its host to deliver."""

    seq: int
    handler_id: str
    event_type: str
    data: dict[str, Any]
    sent_at: float

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class HandlerRun:
    """A run a host has taken: a new one (``checkpoint`` None: start it with
    ``start``) or a released one to restore from ``checkpoint``, re-arming the
    deadlines of ``handler.active_waiters``. ``release_after`` is this host's own
    release delay for the workflow (None: the cluster's)."""

    handler: Handler
    start: dict[str, Any]
    checkpoint: dict[str, Any] | None = None
    release_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "handler": self.handler.to_dict(),
            "start": self.start,
            "checkpoint": self.checkpoint,
            "release_after": self.release_after,
        }


@dataclass(frozen=True, slots=True)
class WorkflowWork:
    """What a host must do now (``take_workflow_work``): runs to start or restore,
    events to deliver to its runs (after starting those runs), and idle runs to
    release, oldest idle first."""

    runs: list[HandlerRun]
    deliveries: list[Delivery]
    release: list[str]
    now: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.to_dict() for r in self.runs],
            "deliveries": [d.to_dict() for d in self.deliveries],
            "release": list(self.release),
            "now": self.now,
        }


@dataclass(frozen=True, slots=True)
class WorkflowHost:
    """A workflow a host serves, with the host's own release delay for it."""

    workflow: str
    host: str
    idle_release_after: float | None
    seen_at: float

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)
