"""When a workflow run is idle, and what follows from it: pure functions of data and
``now``.

A run is *idle* when it is still running, no step of it has work (nothing queued,
nothing in progress, no retry waiting out its backoff) and at least one step waits on
an outside event. A nested run is a run of its own: its steps count for it, not for
its parent, and it is tracked under its own handler.

``idle_since`` follows the run's transitions: it is set when the run becomes idle,
kept while it stays idle, and cleared when work resumes. The release policy picks
the idle runs a host should release (with those an operator asked to release); the
wake time of a released run is its earliest waiter deadline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "IdleRun",
    "RunState",
    "StepState",
    "Transition",
    "Waiter",
    "active_waiters",
    "idle_transition",
    "is_idle",
    "release_due",
    "wake_at",
]


@dataclass(frozen=True, slots=True)
class Waiter:
    """One outstanding ``wait_for_event``: the awaited event type and, when the wait
    has a timeout, the moment it times out."""

    event_type: str
    waiter_id: str = ""
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class StepState:
    """One step's work: events queued, workers running, retries waiting out a
    backoff, and the waits it has outstanding."""

    queue: int = 0
    in_progress: int = 0
    backoff: int = 0
    waiters: tuple[Waiter, ...] = ()

    @property
    def busy(self) -> bool:
        return self.queue > 0 or self.in_progress > 0 or self.backoff > 0


@dataclass(frozen=True, slots=True)
class RunState:
    """A run as a host reports its raw step state. ``children`` are nested runs:
    each is tracked on its own (``is_idle`` of the parent does not look at them)."""

    running: bool = True
    steps: Mapping[str, StepState] = field(default_factory=dict)
    undelivered: int = 0  # events sent but not yet routed to a step
    children: Mapping[str, RunState] = field(default_factory=dict)


def is_idle(run: RunState) -> bool:
    """True when the run is running, no step has work (queued, in progress, in retry
    backoff), nothing is undelivered, and at least one step waits on an event."""
    if not run.running or run.undelivered > 0:
        return False
    waiting = False
    for step in run.steps.values():
        if step.busy:
            return False
        waiting = waiting or bool(step.waiters)
    return waiting


def active_waiters(run: RunState) -> list[tuple[str, Waiter]]:
    """Every outstanding wait of the run's own steps, as ``(step, waiter)``, by step."""
    return [(name, w) for name in sorted(run.steps) for w in run.steps[name].waiters]


Transition = Literal["idle", "resumed"] | None


def idle_transition(
    idle_since: float | None, idle: bool, now: float
) -> tuple[float | None, Transition]:
    """The new ``idle_since`` after observing the run ``idle`` (or not) at ``now``,
    and the transition observed: ``"idle"`` when it became idle, ``"resumed"`` when
    work resumed after idleness, None when nothing changed (an idle run stays idle
    since the first moment)."""
    if idle and idle_since is None:
        return now, "idle"
    if not idle and idle_since is not None:
        return None, "resumed"
    return idle_since, None


def wake_at(waiters: Iterable[Waiter]) -> float | None:
    """When a released run must be back to time out: its earliest waiter deadline
    (None when no wait has a timeout)."""
    deadlines = [w.deadline for w in waiters if w.deadline is not None]
    return min(deadlines) if deadlines else None


@dataclass(frozen=True, slots=True)
class IdleRun:
    """An idle run resident on a host, as the release policy sees it."""

    handler_id: str
    idle_since: float
    release_after: float  # its workflow's idle_release_after (or the cluster's)
    requested: bool = False  # an operator asked that it be released now


def release_due(runs: Sequence[IdleRun], now: float, max_resident_idle: int) -> list[str]:
    """The idle runs a host should release now, oldest idle first: every run idle for
    longer than its ``release_after``, every run an operator asked to release
    (``requested``, whatever its delay), and the oldest beyond ``max_resident_idle``
    idle runs kept resident. Ties on ``idle_since`` go by handler id."""
    ordered = sorted(runs, key=lambda r: (r.idle_since, r.handler_id))
    excess = max(0, len(ordered) - max_resident_idle)
    return [
        r.handler_id
        for i, r in enumerate(ordered)
        if i < excess or r.requested or now - r.idle_since > r.release_after
    ]
