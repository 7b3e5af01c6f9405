"""When the monitor's duties fall due, as pure functions of the nodes and settings.

The stores keep each deadline in an indexed column (a node's ``dead_at``; its
``idle_since``, the idle limit being one setting for every node) and read the next
one from the index head, so a wake costs the same at 100 nodes as at 100,000. These
functions say what those reads must return; tests/unit/test_deadlines.py runs random
histories through each store and checks that the store's answers equal them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.lifecycle import idle_expired, idle_retire_at, liveness_window
from corral.model import Node, Settings, Task

__all__ = [
    "Deadlines",
    "dead_due",
    "death_at",
    "idle_due",
    "monitor_deadlines",
    "progress_deadline",
    "stuck_due",
    "task_due",
    "task_timeout_at",
]


@dataclass(frozen=True, slots=True)
class Deadlines:
    """The earliest moments the monitor has something to do (None: nothing)."""

    dead_at: float | None
    idle_retire_at: float | None
    assess_at: float
    # Tasks with time and order: the earliest moment a scheduled task becomes pending
    # (its not_before, or the end of a failed attempt's backoff), and the earliest end
    # of a run with a timeout (its claim plus its timeout).
    task_ready_at: float | None = None
    task_timeout_at: float | None = None
    # The earliest stuck deadline of a task in progress (its last progress plus its
    # progress_timeout; docs/guardrails.md).
    stuck_at: float | None = None


def death_at(node: Node, settings: Settings) -> float | None:
    """When a live ``node`` is dead: its last sign of life (heartbeat, call or
    registration) plus its liveness window (``missed_beats`` of its declared heartbeat
    interval, at most ``stale_threshold``); None for a terminated node."""
    if node.status == "terminated":
        return None
    return node.last_seen + liveness_window(node.heartbeat_interval, settings)


def _earliest(times: Iterable[float | None]) -> float | None:
    found = [t for t in times if t is not None]
    return min(found) if found else None


def monitor_deadlines(
    nodes: Iterable[Node], settings: Settings, last_assessment: float | None
) -> Deadlines:
    """The next deadline of each kind over the fleet: the earliest death, the earliest
    idle retirement, and the next assessment (``last_assessment`` plus the interval;
    at once when there has been none)."""
    fleet = list(nodes)
    return Deadlines(
        dead_at=_earliest(death_at(n, settings) for n in fleet),
        idle_retire_at=_earliest(idle_retire_at(n, settings) for n in fleet),
        assess_at=(last_assessment or 0.0) + settings.workload_assessment_interval,
    )


def dead_due(nodes: Iterable[Node], settings: Settings, now: float) -> set[str]:
    """The ids of the live nodes dead at ``now`` (their deadline is at or before it)."""
    return {n.id for n in nodes if (t := death_at(n, settings)) is not None and t <= now}


def idle_due(nodes: Iterable[Node], settings: Settings, now: float) -> set[str]:
    """The ids of the nodes the monitor retires for idleness at ``now``."""
    return {n.id for n in nodes if idle_expired(n, settings, now)}


def progress_deadline(
    last_progress: float, task_timeout: float | None, settings: Settings
) -> float | None:
    """When an attempt without progress since ``last_progress`` (its claim, else its
    last progress report) is stuck: plus the task's own ``progress_timeout``, else the
    cluster's (0: off); None when no limit applies. The stores keep it in an indexed
    column (``stuck_at``, the rule ``progress_deadline`` of queries.sql)."""
    limit = task_timeout if task_timeout is not None else settings.progress_timeout
    return last_progress + limit if limit else None


def stuck_due(tasks: Iterable[Task], settings: Settings, now: float) -> set[int]:
    """The ids of the tasks in progress, not flagged stuck yet, that are stuck at
    ``now`` (their progress deadline at or before it)."""
    return {
        t.id
        for t in tasks
        if t.status == "in_progress"
        and t.stuck_since is None
        and (
            at := progress_deadline(
                t.progress_at if t.progress_at is not None else t.claimed_at or 0.0,
                t.progress_timeout,
                settings,
            )
        )
        is not None
        and at <= now
    }


def task_timeout_at(task: Task) -> float | None:
    """When the run of an in-progress ``task`` is taken back: its claim plus its
    ``timeout`` (None: no timeout, or not in progress)."""
    if task.status != "in_progress" or task.timeout is None or task.claimed_at is None:
        return None
    return task.claimed_at + task.timeout


def task_due(tasks: Iterable[Task], now: float) -> tuple[set[int], set[int]]:
    """The ids of the scheduled tasks pending at ``now`` (their ``ready_at`` is at or
    before it) and of the runs taken back at ``now`` (past their timeout)."""
    fleet = list(tasks)
    ready = {
        t.id
        for t in fleet
        if t.status == "scheduled" and t.ready_at is not None and t.ready_at <= now
    }
    timed_out = {t.id for t in fleet if (at := task_timeout_at(t)) is not None and at <= now}
    return ready, timed_out
