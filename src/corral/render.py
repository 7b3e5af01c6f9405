"""Text answers: the one-line replies (registration, claims, capacity refusals) and
the ``read_state`` and assessment blocks, character for character. Pure.

Every ``.text`` of a record is rendered here. This module reads records through the
small protocols below and imports nothing from ``corral.model`` (which imports it for
``.text``), so the two modules do not import each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from corral.defaults import MANAGER_ROLE

__all__ = [
    "capacity_error_text",
    "claim_text",
    "model_cap_error_text",
    "registered_text",
    "render_assessment",
    "render_state",
]


class _TaskView(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def title(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def priority(self) -> str: ...
    @property
    def assigned_to(self) -> str | None: ...
    @property
    def stuck_since(self) -> float | None: ...


class _NodeView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def strength(self) -> str | None: ...
    @property
    def current_task_id(self) -> int | None: ...
    @property
    def last_heartbeat(self) -> float | None: ...
    @property
    def dead_at(self) -> float | None: ...


class _RegisteredView(_NodeView, Protocol):
    @property
    def active_nodes(self) -> int: ...
    @property
    def max_agents(self) -> int: ...


class _AssessmentView(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def recommendation(self) -> str: ...
    @property
    def max_agents(self) -> int: ...
    @property
    def active_count(self) -> int: ...
    @property
    def idle_count(self) -> int: ...
    @property
    def pending_tasks(self) -> int: ...
    @property
    def in_progress(self) -> int: ...


class _ProcessView(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def agent(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def restarts(self) -> int: ...
    @property
    def flags(self) -> Sequence[str]: ...


class _StateView(Protocol):
    @property
    def now(self) -> float: ...
    @property
    def summary(self) -> str: ...
    @property
    def tasks(self) -> Sequence[_TaskView]: ...
    @property
    def tasks_omitted(self) -> int: ...
    @property
    def nodes(self) -> Sequence[_NodeView]: ...
    @property
    def max_agents(self) -> int: ...
    @property
    def pending_tasks(self) -> int: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def work_distribution(self) -> Mapping[str, Any]: ...
    @property
    def last_event_ts(self) -> float | None: ...
    @property
    def last_heartbeat(self) -> float | None: ...
    @property
    def liveness_window(self) -> float: ...
    @property
    def processes(self) -> Sequence[_ProcessView]: ...
    @property
    def stuck_nodes(self) -> Sequence[str]: ...


RULE = "=" * 50


def capacity_error_text(max_agents: int) -> str:
    return f"ERROR: Cluster at capacity ({max_agents} nodes). Registration rejected."


def model_cap_error_text(model: str, cap: int) -> str:
    return f"ERROR: Model {model} at its cap ({cap} live nodes, model_caps). Registration rejected."


def registered_text(node: _RegisteredView) -> str:
    return (
        f"Node {node.id} registered as {node.role} ({node.strength or 'unknown'})."
        f" Active nodes: {node.active_nodes}/{node.max_agents}"
    )


def claim_text(task: _TaskView | None) -> str:
    if task is None:
        return "No pending tasks to claim."
    return f"Claimed task {task.id}: {task.title}"


def render_assessment(a: _AssessmentView) -> str:
    return "\n".join(
        [
            "📊 Workload Assessment",
            "=" * 40,
            f"Active Agents: {a.active_count}/{a.max_agents}",
            f"Idle Agents: {a.idle_count}",
            f"Pending Tasks: {a.pending_tasks}",
            f"In Progress: {a.in_progress}",
            f"Status: {a.status.upper()}",
            f"Recommendation: {a.recommendation}",
        ]
    )


def _ago(now: float, then: float | None) -> str:
    if then is None:
        return "never"
    return f"{max(0.0, now - then):.1f}s ago"


def _task_line(n: int, t: _TaskView, now: float) -> str:
    line = f"{n}. {t.title} [{t.status}]"
    if t.status == "in_progress" and t.assigned_to:
        if t.stuck_since is not None:
            stuck = max(0.0, now - t.stuck_since)
            return f"{line} (assigned to {t.assigned_to}, stuck for {stuck:.1f}s)"
        return f"{line} (assigned to {t.assigned_to})"
    return f"{line} (priority: {t.priority})"


def _node_line(node: _NodeView, now: float, window: float, stuck: bool = False) -> str:
    """🔴 past its death deadline; ⚪ alive but never heartbeated (registration or
    calls only), said in words too; 🟡 alive but every task it holds stuck (no
    progress past its progress_timeout), said in words too; 🟢 heartbeating within its
    window."""
    dead = window > 0 and node.dead_at is not None and now >= node.dead_at
    silent = node.last_heartbeat is None
    dot = "🔴" if dead else "⚪" if silent else "🟡" if stuck else "🟢"
    model = node.model or "unknown model"
    line = f"{dot} {node.id}: {node.role} [{node.status}] ({model} - {node.strength or 'unknown'})"
    if node.current_task_id is not None:
        line += f" | Task: task-{node.current_task_id}"
    if silent:
        line += " | no heartbeat yet"
    if stuck and not dead:
        line += " | stuck: no progress on any of its tasks"
    return line


def _process_lines(processes: Sequence[_ProcessView]) -> list[str]:
    """The supervised processes, a header per host: agent, state, pid, restarts."""
    lines = ["**Processes:**"]
    host = None
    for p in processes:
        if p.host != host:
            host = p.host
            lines.append(f"{host}:")
        line = f"  {p.agent} [{p.state}] pid {p.pid or '-'} | restarts {p.restarts}"
        if p.flags:
            line += f" | {', '.join(p.flags)}"
        lines.append(line)
    return lines


def render_state(s: _StateView) -> str:
    lines = ["📊 Context Bus State", RULE, "**Summary:**", s.summary or "(no summary set)"]
    lines.append("**Next Steps:**")
    if s.tasks:
        lines += [_task_line(i, t, s.now) for i, t in enumerate(s.tasks, 1)]
        if s.tasks_omitted:
            lines.append(f"... and {s.tasks_omitted} more")
    else:
        lines.append("(no open tasks)")
    lines.append("**Active Cluster Swarm:**")
    if s.nodes:
        stuck = set(s.stuck_nodes)
        lines += [_node_line(n, s.now, s.liveness_window, n.id in stuck) for n in s.nodes]
    else:
        lines.append("(no active nodes)")
    md, wd = s.metadata, s.work_distribution
    manager = md.get("manager_id") or next((n.id for n in s.nodes if n.role == MANAGER_ROLE), None)
    lines += [
        "**Cluster Metadata:**",
        f"Active Nodes: {len(s.nodes)}/{s.max_agents}",
        f"Idle Nodes: {sum(1 for n in s.nodes if n.status == 'idle')}",
        f"Pending Tasks: {s.pending_tasks}",
        f"Manager: {manager or 'none'}",
    ]
    if md.get("ask_user"):
        lines.append(f"Ask User: {md.get('ask_user_reason') or 'yes'}")
    lines += [
        "**Work Distribution:**",
        f"Status: {str(wd.get('workload_status') or 'unknown').upper()}",
        f"Recommendation: {wd.get('spawn_recommendation') or 'none'}",
        f"Last Assessment: {_ago(s.now, wd.get('last_assessment'))}",
        f"**Last Updated:** {_ago(s.now, s.last_event_ts).replace('s ago', ' seconds ago')}",
    ]
    if s.last_heartbeat is None:
        lines.append("**Node Heartbeat:** ⚪ NONE")
    else:
        age = s.now - s.last_heartbeat
        fresh = s.liveness_window <= 0 or age < s.liveness_window
        mark = "🟢 ACTIVE" if fresh else "🔴 STALE"
        lines.append(f"**Node Heartbeat:** {mark} ({_ago(s.now, s.last_heartbeat)})")
    if s.processes:  # only supervised clusters have the section
        lines += _process_lines(s.processes)
    return "\n".join(lines)
