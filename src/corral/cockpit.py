"""What the operator's views show, worked out once for all of them: the dashboard's
panels, ``corral status``, ``corral top`` and ``corral ctl status``. Pure: operations'
answers and ``now`` in, figures and words out; nothing here decides anything.

- ``age``: a duration as a person reads it;
- ``heartbeat``: a node's silence against its own liveness window
  (``corral.lifecycle.liveness_window``);
- ``score_parts``: a pending task's score as ``corral.scoring`` adds it up;
- ``fleet``: the Fleet panel's counts (live nodes against ``max_agents``, the tasks by
  status, those finished in the last hour, the oldest pending task's age, the last
  lease recovery) and the last assessment with the counts that produced it;
- ``process_row``: one supervised process as the processes table shows it, from a
  ``Process`` record or a supervisor's ``status`` answer alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral import lifecycle, scoring

if TYPE_CHECKING:
    from corral.model import Node, Settings, State, Task
    from corral.store.stats import ClusterStats

__all__ = [
    "Fleet",
    "ProcessRow",
    "age",
    "ago",
    "fleet",
    "heartbeat",
    "process_row",
    "score_parts",
]


def age(seconds: float | None) -> str:
    """A duration as a person reads it: ``4 s``, ``3 min``, ``2 h 5 min``, ``3 d``."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    return f"{s // 86400} d"


def ago(then: Any, now: float) -> str:
    """``age`` of a moment before ``now`` with "ago" (``—`` for none)."""
    if not isinstance(then, int | float) or isinstance(then, bool):
        return "—"
    return f"{age(now - then)} ago"


def heartbeat(node: Node, settings: Settings, now: float) -> dict[str, Any]:
    """A node's silence against its own thresholds: ``ok`` within one interval,
    ``late`` past it, ``overdue`` past its liveness window (it is dead then),
    ``ended`` once terminated; with the silence and the window as ``age`` words."""
    interval = node.heartbeat_interval or settings.heartbeat_interval
    window = lifecycle.liveness_window(node.heartbeat_interval, settings)
    silence = max(0.0, now - node.last_seen)
    if node.status == "terminated":
        state = "ended"
    elif silence <= interval:
        state = "ok"
    elif silence <= window:
        state = "late"
    else:
        state = "overdue"
    return {"age": age(silence), "window": age(window), "state": state}


def score_parts(task: Task, now: float) -> dict[str, Any]:
    """A pending task's score as the scoring rule adds it up (the role bonus goes to
    a claimant of one of its matched roles)."""
    points = scoring.PRIORITY_POINTS.get(task.priority, 0)
    minutes = max(0.0, now - task.created_at) / 60
    return {
        "priority": points,
        "bonus": scoring.ROLE_BONUS if task.roles else 0,
        "roles": ", ".join(task.roles),
        "age": minutes,
        "score": points + minutes,
    }


@dataclass(frozen=True, slots=True)
class Fleet:
    """The Fleet panel's figures. ``oldest_pending`` is the oldest of the pending
    tasks read (``oldest_at_least`` when more are pending than were read: the true
    oldest is at least that old). ``basis`` holds the counts the last assessment
    recorded beside its status and recommendation (``pending_task_count``,
    ``active_agent_count``, ``idle_agent_count``, ``max_agents``)."""

    live: int
    max_agents: int
    pending: int
    in_progress: int
    done_last_hour: int
    failed_last_hour: int
    oldest_pending: float | None
    oldest_at_least: bool
    last_recovery: float | None  # seconds since the last lease recovery
    recoveries: int
    status: str | None  # the last assessment's, None before the first
    recommendation: str | None
    assessed: float | None  # seconds since the last assessment
    basis: dict[str, Any]
    manager: str | None


def fleet(stats: ClusterStats, state: State, pending: Sequence[Task], now: float) -> Fleet:
    """The Fleet panel's figures from ``stats``, ``read_state`` and the pending tasks
    read (``list_tasks("pending")``, oldest pending among them)."""
    tasks = stats.tasks
    pending_total = tasks.get("pending", 0)
    ages = [now - t.created_at for t in pending]
    wd: Mapping[str, Any] = state.work_distribution
    md: Mapping[str, Any] = state.metadata
    assessed_at = wd.get("last_assessment")
    basis_keys = ("pending_task_count", "active_agent_count", "idle_agent_count", "max_agents")
    return Fleet(
        live=len(stats.live_nodes),
        max_agents=stats.max_agents,
        pending=pending_total,
        in_progress=tasks.get("in_progress", 0),
        done_last_hour=stats.finished_last_hour.get("done", 0),
        failed_last_hour=stats.finished_last_hour.get("failed", 0),
        oldest_pending=max(ages) if ages else None,
        oldest_at_least=bool(ages) and pending_total > len(pending),
        last_recovery=None if stats.last_recovery is None else now - stats.last_recovery,
        recoveries=stats.lease_recoveries,
        status=wd.get("workload_status") or None,
        recommendation=wd.get("spawn_recommendation") or None,
        assessed=None if not isinstance(assessed_at, int | float) else now - assessed_at,
        basis={k: md[k] for k in basis_keys if k in md},
        manager=md.get("manager_id") or None,
    )


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One supervised process as the processes table shows it: the cells, then the
    note worth a line of its own (flags, what it waits on, its last exit)."""

    host: str
    agent: str
    state: str
    pid: str
    last_beat: str
    uptime: str
    restarts: str
    note: str


def _describe_exit(last: Any) -> str:
    if last is None or isinstance(last, str):
        return last or ""
    if isinstance(last, dict):
        if isinstance(last.get("error"), str):  # it could not be started: say why
            return str(last["error"])
        if isinstance(last.get("describe"), str):
            return str(last["describe"])
        if last.get("signal") is not None:
            return f"killed by signal {last['signal']}"
        if last.get("code") is not None:
            return f"exit code {last['code']}"
        return "unknown"
    return str(last)


def _uptime(seconds: Any) -> str:
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "—"
    minutes = int(seconds) // 60
    return f"{minutes // 60}h {minutes % 60:02d}m"


def process_row(p: Mapping[str, Any], now: float) -> ProcessRow:
    """A process from a supervisor's ``status`` answer (``uptime`` given) or a
    ``Process`` record's ``to_dict()`` (``started_at`` given, the uptime counted from
    it while it runs)."""
    state = str(p.get("state", "?"))
    uptime = p.get("uptime")
    started = p.get("started_at")
    if uptime is None and state == "RUNNING" and isinstance(started, int | float):
        uptime = max(0.0, now - started)
    notes = [str(f) for f in p.get("flags") or []]
    if state == "WAITING" and p.get("waiting_on"):
        notes.append("waiting on " + ", ".join(map(str, p["waiting_on"])))
    if state != "RUNNING" and p.get("last_exit"):
        notes.append("last exit: " + _describe_exit(p["last_exit"]))
    pid = p.get("pid")
    return ProcessRow(
        host=str(p.get("host") or ""),
        agent=str(p.get("agent", "?")),
        state=state,
        pid="—" if pid is None else str(pid),
        last_beat=ago(p.get("last_beat"), now),
        uptime=_uptime(uptime),
        restarts=str(p.get("restarts", 0)),
        note="; ".join(notes),
    )
