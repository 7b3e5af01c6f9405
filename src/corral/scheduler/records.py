"""The scheduler's records: plain frozen data, no I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Agent", "Assignment", "Notification"]


def _as_dict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent to activate: its config and where it stands in the order."""

    id: str
    config: dict[str, Any] = field(default_factory=dict)
    unread: int = 0
    last_activated_at: float | None = None
    activation_count: int = 0
    held_by: str | None = None  # the runner holding its activation, if any
    epoch: int = 0
    next_due_at: float | None = None  # its next cron override, if any
    next_due_task: str | None = None
    cap_day: int = 0  # the UTC day the counts below are for
    posts_today: int = 0
    comments_today: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class Notification:
    """One inbox item."""

    id: int
    agent_id: str
    payload: Any
    created_at: float
    read_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class Assignment:
    """A runner's turn with an agent: an activation lease until ``expires_at``.

    ``kind`` is ``inbox`` (with the unread ``inbox`` items), ``scheduled`` (the cron
    override's ``task``, due at ``due_at``) or ``discovery``. ``allowance`` is what is
    left of the agent's daily caps (None: no cap). Release it with ``id``, the
    runner's id and ``epoch``."""

    id: int
    agent_id: str
    runner_id: str
    kind: str
    epoch: int
    mode: str
    claimed_at: float
    expires_at: float
    task: str | None = None
    due_at: float | None = None
    inbox: list[Notification] = field(default_factory=list)
    allowance: dict[str, int | None] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Assignment:
        """The assignment from its JSON form (``to_dict``), its inbox items records."""
        names = cls.__dataclass_fields__
        out = {k: v for k, v in d.items() if k in names}
        notes = Notification.__dataclass_fields__
        out["inbox"] = [
            Notification(**{k: v for k, v in n.items() if k in notes}) for n in d.get("inbox", ())
        ]
        return cls(**out)

    @property
    def text(self) -> str:
        what = {
            "inbox": f"{len(self.inbox)} inbox item(s)",
            "scheduled": f"scheduled task {self.task}",
            "discovery": "discovery",
        }.get(self.kind, self.kind)
        return (
            f"Assignment {self.id}: activate {self.agent_id} ({what}), epoch {self.epoch};"
            f" release it by {self.expires_at:.0f} with release_assignment."
        )

    def to_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["inbox"] = [n.to_dict() for n in self.inbox]
        return d
