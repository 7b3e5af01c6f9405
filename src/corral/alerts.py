"""Alerts: the conditions an operator is told about, and how often.

Pure functions of data and ``now`` (no I/O, no clock): which events and states are
an alert (``from_event``, ``crash_loop``, ``spawn_overdue``, ``past_deadline``), the
rate limit per subject (``admit``, ``RateLimit``), and the alert settings
(``AlertConfig``: the ``alert_*`` fields of ``corral.model.Settings``; in a fleet
manifest, the ``[alerts]`` table, whose keys are those names without ``alert_``).
The service that follows the cluster and sends is ``corral.alerter``.

The conditions, each with its subject (what the rate limit counts per):

- ``node_dead_with_lease`` (``node:ID``): a ``lease_recovered`` event, the monitor
  took a dead node's task back;
- ``task_failed`` (``task:ID``): an event with ``outcome: failed`` (no attempts left,
  or no retry);
- ``restart_exhausted`` (``process:HOST/AGENT``): its host reports it flagged
  ``restart-exhausted``;
- ``crash_loop`` (``process:HOST/AGENT``): ``alert_crash_loop_restarts`` restarts
  within ``alert_crash_loop_window`` seconds;
- ``spawn_request_pending`` (``spawn_request:ID``): pending longer than
  ``alert_spawn_pending_seconds``;
- ``workflow_past_deadline`` (``workflow_run:ID``): an idle run whose earliest waiter
  deadline has passed;
- ``budget`` (``budget:NAME``): a ``budget_warning`` (80% of a budget spent) or
  ``budget_spent`` (100%) event (docs/guardrails.md).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.errors import InvalidInputError
from corral.model import Event, Settings

__all__ = [
    "CONDITIONS",
    "MANIFEST_KEYS",
    "MAX_WEBHOOKS",
    "WEBHOOKS_SCHEMA",
    "Alert",
    "AlertConfig",
    "RateLimit",
    "admit",
    "check_webhooks",
    "crash_loop",
    "from_event",
    "one_line",
    "past_deadline",
    "restarts_within",
    "spawn_overdue",
]

CONDITIONS = (
    "node_dead_with_lease",
    "task_failed",
    "restart_exhausted",
    "crash_loop",
    "spawn_request_pending",
    "workflow_past_deadline",
    "budget",
)

# The [alerts] table of a fleet manifest: its keys are the settings' names without
# the ``alert_`` prefix.
MANIFEST_KEYS: dict[str, str] = {
    name.removeprefix("alert_"): name
    for name in Settings.__dataclass_fields__
    if name.startswith("alert_")
}

MAX_WEBHOOKS = 10
MAX_URL = 2000
# An http(s) URL with a host, no whitespace or control characters.
_URL = r"^https?://[^\s/?#@\x00-\x1f\x7f]+(?:[/?#][^\s\x00-\x1f\x7f]*)?$"
_URL_RE = re.compile(_URL)
WEBHOOKS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_WEBHOOKS,
    "items": {"type": "string", "maxLength": MAX_URL, "pattern": _URL},
}
"""The JSON Schema of ``alert_webhooks``: what ``check_webhooks`` accepts."""


def check_webhooks(value: Any, field: str = "alert_webhooks") -> list[str]:
    """A list of at most ``MAX_WEBHOOKS`` http(s) URLs; else ``InvalidInputError``
    naming ``field``."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInputError(f"{field} must be a list of http(s) URLs", field=field)
    if len(value) > MAX_WEBHOOKS:
        raise InvalidInputError(f"{field} takes at most {MAX_WEBHOOKS} URLs", field=field)
    for url in value:
        if not isinstance(url, str) or len(url) > MAX_URL or not _URL_RE.fullmatch(url):
            shown = repr(url)[:60]
            raise InvalidInputError(
                f"{field} must hold http:// or https:// URLs with a host; got {shown}",
                field=field,
            )
    return list(value)


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """The alert settings, as the alerter uses them."""

    webhooks: tuple[str, ...] = ()
    retry_attempts: int = 3
    retry_delay: float = 5.0
    rate_limit_seconds: float = 300.0
    crash_loop_restarts: int = 5
    crash_loop_window: float = 600.0
    spawn_pending_seconds: float = 900.0

    @classmethod
    def from_settings(cls, s: Settings) -> AlertConfig:
        return cls(
            webhooks=tuple(s.alert_webhooks),
            retry_attempts=s.alert_retry_attempts,
            retry_delay=s.alert_retry_delay,
            rate_limit_seconds=s.alert_rate_limit_seconds,
            crash_loop_restarts=s.alert_crash_loop_restarts,
            crash_loop_window=s.alert_crash_loop_window,
            spawn_pending_seconds=s.alert_spawn_pending_seconds,
        )


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert: its condition, its subject, a one-line message, and the facts."""

    condition: str
    subject: str
    message: str
    node_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


# --- the rate limit ---------------------------------------------------------------
def admit(last_sent: float | None, now: float, window: float) -> bool:
    """Whether a subject last alerted at ``last_sent`` (None: never) may be alerted
    at ``now``: at most once per ``window`` seconds."""
    return last_sent is None or now - last_sent >= window


class RateLimit:
    """The last time each subject was alerted, and the alerts held back since."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.held: dict[str, int] = {}

    def note(self, subject: str, at: float) -> None:
        """``subject`` was alerted at ``at`` (by this alerter or another's event)."""
        if at >= self.last.get(subject, float("-inf")):
            self.last[subject] = at

    def take(self, subject: str, now: float, window: float) -> int | None:
        """If ``subject`` may be alerted at ``now``: note it and return how many of its
        alerts were held back since the last one; else count one more held back and
        return None."""
        if not admit(self.last.get(subject), now, window):
            self.held[subject] = self.held.get(subject, 0) + 1
            return None
        self.last[subject] = now
        return self.held.pop(subject, 0)

    def forget_before(self, when: float) -> None:
        """Drop the subjects last alerted before ``when`` (their window is over)."""
        for subject in [s for s, t in self.last.items() if t < when]:
            del self.last[subject]
            self.held.pop(subject, None)


# --- the conditions -----------------------------------------------------------------
MAX_TEXT = 200


def one_line(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as one printable line of at most ``limit`` characters (a task's error
    text is the worker's: no newline or terminal escape reaches a reader)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def from_event(e: Event) -> list[Alert]:
    """The alerts one event is: a dead node's lease recovered, a task failed for good
    (a recovered lease may be both). A process's conditions come from its host's
    report (``crash_loop``)."""
    d = e.data
    found: list[Alert] = []
    if e.kind == "alert":
        return found
    if e.kind == "lease_recovered" and e.node_id:
        found.append(
            Alert(
                "node_dead_with_lease",
                f"node:{e.node_id}",
                f"node {e.node_id} died holding task {e.task_id}; its lease was recovered"
                f" (task now {d.get('outcome')})",
                e.node_id,
                {"task_id": e.task_id, "outcome": d.get("outcome"), "event_seq": e.seq},
            )
        )
    if e.kind in ("budget_warning", "budget_spent"):
        spent = e.kind == "budget_spent"
        found.append(
            Alert(
                "budget",
                f"budget:{d.get('budget')}",
                f"{d.get('budget')} is {'spent' if spent else 'at 80%'}"
                f" ({float(d.get('used') or 0):.0%} used; the window frees at"
                f" {float(d.get('frees_at') or 0):.0f})",
                e.node_id,
                {
                    "budget": d.get("budget"),
                    "event": e.kind,
                    "used": d.get("used"),
                    "frees_at": d.get("frees_at"),
                    "event_seq": e.seq,
                },
            )
        )
    if d.get("outcome") == "failed" and e.task_id is not None:
        error = one_line(
            d.get("error_text")
            or (f"{e.kind}: its holder {e.node_id} {d['reason']}" if d.get("reason") else e.kind)
        )
        found.append(
            Alert(
                "task_failed",
                f"task:{e.task_id}",
                f"task {e.task_id} failed for good ({error})",
                e.node_id,
                {"task_id": e.task_id, "event": e.kind, "error": error, "event_seq": e.seq},
            )
        )
    return found


def restarts_within(samples: Sequence[tuple[float, int]], now: float, window: float) -> int:
    """Restarts counted in ``(at, restarts)`` samples of one agent (oldest first)
    within the ``window`` seconds before ``now``: the rises of its restart count
    between samples, the later of each pair in the window (a count that drops, the
    agent started afresh, adds nothing)."""
    since = now - window
    return sum(max(0, b[1] - a[1]) for a, b in itertools.pairwise(samples) if since < b[0] <= now)


def crash_loop(
    samples: Sequence[tuple[float, int]], now: float, window: float, restarts: int
) -> bool:
    """An agent restarted at least ``restarts`` times within ``window`` seconds."""
    return restarts_within(samples, now, window) >= restarts


def spawn_overdue(pending: Mapping[int, float], now: float, after: float) -> list[int]:
    """The pending spawn requests (id -> when asked) pending longer than ``after``
    seconds at ``now``, oldest first."""
    return [rid for rid, at in sorted(pending.items(), key=lambda p: p[1]) if now - at > after]


def past_deadline(waiters: Iterable[Mapping[str, Any]], now: float) -> float | None:
    """The earliest waiter ``deadline`` of an idle workflow run, when it has passed
    at ``now``; else None."""
    deadlines = [float(w["deadline"]) for w in waiters if w.get("deadline") is not None]
    if deadlines and min(deadlines) < now:
        return min(deadlines)
    return None
