"""The assignment order, as pure functions of data and ``now`` (no I/O, no clock).

Which agent a runner gets, by its mode:

- ``notification`` runners get inbox work only; ``exploration`` runners never do;
  ``hybrid`` runners take the inbox first, then the rest.
- **inbox**: agents with unread notifications, most unread first (ties: the stalest,
  never activated first, then the id);
- **scheduled**: an agent whose cron override is due (``next_due_at <= now``), the
  longest overdue first (then the id) — ahead of staleness;
- **discovery**: agents with an empty inbox, the stalest first (never activated
  first, then the id), leaving out those activated within their minimum interval
  (the agent's own, else the cluster's; 0 or none: off).

Agents under an activation lease are never picked. The SQL stores encode this
order with index heads; ``tests/integration/test_scheduler_sql.py`` proves they agree.

Daily caps: posts and comments are counted per agent and UTC day; an assignment
carries what is left of the day's allowance, and a release reporting more is
refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from corral.scheduler.cron import next_fire

__all__ = [
    "KINDS",
    "MODES",
    "Allowance",
    "Candidate",
    "Counts",
    "Pick",
    "allowance",
    "day_of",
    "inbox_key",
    "next_due",
    "pick",
    "rested",
    "stale_key",
    "tally",
]

Mode = Literal["notification", "exploration", "hybrid"]
Kind = Literal["inbox", "scheduled", "discovery"]
MODES: tuple[str, ...] = ("notification", "exploration", "hybrid")
KINDS: tuple[str, ...] = ("inbox", "scheduled", "discovery")
DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the order looks at of one agent."""

    id: str
    unread: int = 0
    last_activated_at: float | None = None
    held: bool = False
    min_interval: float | None = None  # the agent's own; None: the cluster's
    next_due_at: float | None = None


@dataclass(frozen=True, slots=True)
class Pick:
    agent_id: str
    kind: str


def inbox_key(c: Candidate) -> tuple[int, bool, float, str]:
    """Most unread first, then never activated, then the stalest, then the id."""
    last = c.last_activated_at
    return (-c.unread, last is not None, last if last is not None else 0.0, c.id)


def stale_key(c: Candidate) -> tuple[bool, float, str]:
    """Never activated first (NULLS FIRST), then the oldest activation, then the id."""
    last = c.last_activated_at
    return (last is not None, last if last is not None else 0.0, c.id)


def rested(c: Candidate, now: float, min_interval: float) -> bool:
    """Whether the minimum interval since its last activation has passed."""
    interval = c.min_interval if c.min_interval is not None else min_interval
    last = c.last_activated_at
    return last is None or interval <= 0 or last <= now - interval


def pick(
    agents: Iterable[Candidate], mode: str, now: float, min_interval: float = 0.0
) -> Pick | None:
    """The agent a runner in ``mode`` gets at ``now``, and the kind of its activation
    (None: nothing for this mode)."""
    free = [a for a in agents if not a.held]
    if mode != "exploration":
        inbox = [a for a in free if a.unread > 0]
        if inbox:
            return Pick(min(inbox, key=inbox_key).id, "inbox")
    if mode == "notification":
        return None
    due = [a for a in free if a.next_due_at is not None and a.next_due_at <= now]
    if due:
        return Pick(min(due, key=lambda a: (a.next_due_at, a.id)).id, "scheduled")
    stale = [a for a in free if a.unread == 0 and rested(a, now, min_interval)]
    if stale:
        return Pick(min(stale, key=stale_key).id, "discovery")
    return None


def next_due(config: dict[str, Any], after: float) -> tuple[float, str] | None:
    """The first cron override of ``config`` to fire after ``after``: (time, task)."""
    best: tuple[float, str] | None = None
    for entry in config.get("schedule_override", ()):
        t = next_fire(entry["cron"], after, entry.get("tz", "UTC"))
        if best is None or t < best[0]:
            best = (t, entry["task"])
    return best


# --- daily caps -------------------------------------------------------------------------
def day_of(now: float) -> int:
    """The UTC day number of ``now`` (the caps' day)."""
    return int(now // DAY)


@dataclass(frozen=True, slots=True)
class Counts:
    """Posts and comments counted on ``day``."""

    day: int = 0
    posts: int = 0
    comments: int = 0


@dataclass(frozen=True, slots=True)
class Allowance:
    """What is left today: None is no cap."""

    posts: int | None
    comments: int | None

    def to_dict(self) -> dict[str, int | None]:
        return {"posts": self.posts, "comments": self.comments}


def allowance(config: dict[str, Any], counts: Counts, now: float) -> Allowance:
    """Today's posts and comments left for an agent with ``config``."""
    today = counts if counts.day == day_of(now) else Counts(day_of(now))
    posts_cap = config.get("max_daily_posts")
    if not config.get("can_create_posts", True):
        posts: int | None = 0
    else:
        posts = None if posts_cap is None else max(0, posts_cap - today.posts)
    comments_cap = config.get("max_daily_comments")
    comments = None if comments_cap is None else max(0, comments_cap - today.comments)
    return Allowance(posts, comments)


def tally(counts: Counts, posts: int, comments: int, now: float) -> Counts:
    """``counts`` after an activation released at ``now`` made ``posts`` and
    ``comments`` (a new day starts from zero)."""
    if counts.day != day_of(now):
        counts = Counts(day_of(now))
    return Counts(counts.day, counts.posts + posts, counts.comments + comments)
