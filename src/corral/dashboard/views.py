"""Presentation: the panels' templates over a ``Snapshot``, and nothing else.

Every number shown comes from an operation's answer; this module only formats it:
ages, the heartbeat's colour against the node's own liveness window
(``corral.lifecycle.liveness_window``), a pending task's score parts
(``corral.scoring``), and the page's filters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from corral import lifecycle, scoring
from corral.dashboard.feed import Snapshot
from corral.model import Event, Node, Task

__all__ = [
    "NODE_STATUSES",
    "PANELS",
    "TASK_ARGUMENTS",
    "TASK_FILTERS",
    "Filters",
    "environment",
    "render_panel",
]

PANELS = ("fleet", "nodes", "tasks", "events")
NODE_STATUSES = ("working", "idle", "waiting", "terminated")
_MAX_FILTER = 100
# The task filter's fields (``task_<name>`` in the URL), as the bulk operations name
# them: cancel_tasks and requeue_tasks take ``TASK_ARGUMENTS[name]``.
TASK_FILTERS = ("status", "role", "priority", "holder", "title", "min_age")
TASK_ARGUMENTS = {
    "status": "status",
    "role": "role",
    "priority": "priority",
    "holder": "assigned_to",
    "title": "title_contains",
    "min_age": "min_age",
}


@dataclass(frozen=True, slots=True)
class Filters:
    """The page's filters, kept in its URL: ``node_status`` ("" every live node,
    "all" every node, or one status), ``event_kind`` ("" every kind), and the task
    filter the Tasks panel's bulk actions apply (``TASK_FILTERS``: each as typed, ""
    any; the operation checks them when an action runs)."""

    node_status: str = ""
    event_kind: str = ""
    task_status: str = ""
    task_role: str = ""
    task_priority: str = ""
    task_holder: str = ""
    task_title: str = ""
    task_min_age: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        status = query.get("node_status", "")
        if status not in ("", "all", *NODE_STATUSES):
            status = ""
        kind = query.get("event_kind", "").strip()[:_MAX_FILTER]
        tasks = {
            f"task_{k}": query.get(f"task_{k}", "").strip()[:_MAX_FILTER] for k in TASK_FILTERS
        }
        return cls(node_status=status, event_kind=kind, **tasks)

    def pairs(self) -> dict[str, str]:
        """Every filter that is set, by its query name."""
        names = ("node_status", "event_kind", *(f"task_{k}" for k in TASK_FILTERS))
        return {k: getattr(self, k) for k in names if getattr(self, k)}

    def hidden(self, *own: str) -> list[tuple[str, str]]:
        """The task filters a form other than the task filter's carries along (set
        ones only), so submitting it keeps them in the URL; ``own`` its own fields."""
        return [(k, v) for k, v in self.pairs().items() if k.startswith("task_") and k not in own]

    def query(self) -> str:
        """The filters as a query string ("" when none is set)."""
        from urllib.parse import urlencode

        return urlencode(self.pairs())

    def key(self, panel: str) -> str:
        if panel == "nodes":
            return self.node_status
        if panel == "events":
            return self.event_kind
        return ""


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


def heartbeat(node: Node, snap: Snapshot) -> dict[str, Any]:
    """A node's silence against its own thresholds: ``ok`` within one interval,
    ``late`` past it, ``overdue`` past its liveness window (it is dead then)."""
    interval = node.heartbeat_interval or snap.settings.heartbeat_interval
    window = lifecycle.liveness_window(node.heartbeat_interval, snap.settings)
    silence = max(0.0, snap.now - node.last_seen)
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


def _short(data: Mapping[str, Any], limit: int = 160) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(", ", ": "), sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _nodes(snap: Snapshot, f: Filters) -> list[Node]:
    if f.node_status == "all":
        return list(snap.nodes)
    if f.node_status:
        return [n for n in snap.nodes if n.status == f.node_status]
    return [n for n in snap.nodes if n.status != "terminated"]


def _events(snap: Snapshot, f: Filters, limit: int = 50) -> list[Event]:
    chosen = [e for e in snap.events if not f.event_kind or e.kind == f.event_kind]
    return list(reversed(chosen[-limit:]))


def environment() -> Environment:
    """The templates' environment (HTML autoescaped)."""
    env = Environment(
        loader=FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["short"] = _short
    return env


def render_panel(
    env: Environment, panel: str, snap: Snapshot, f: Filters, may_act: bool = False
) -> str:
    """One panel's HTML for ``snap`` under the filters, with its controls when the
    page ``may_act`` (an operator's; a viewer's shows none). Cached on the snapshot,
    so pages with the same filters and role share it."""
    key = (panel, f.key(panel) + ("\0act" if may_act else ""))
    html = snap.rendered.get(key)
    if html is None:
        context: dict[str, Any] = {"snap": snap, "filters": f, "may_act": may_act}
        if panel == "fleet":
            ages = [snap.now - t.created_at for t in snap.pending]
            context["oldest_pending"] = max(ages) if ages else None
            context["pending_total"] = snap.stats.tasks.get("pending", 0)
        elif panel == "nodes":
            context["rows"] = [(n, heartbeat(n, snap)) for n in _nodes(snap, f)]
        elif panel == "tasks":
            context["pending"] = [(t, score_parts(t, snap.now)) for t in snap.pending]
        elif panel == "events":
            context["rows"] = _events(snap, f)
        html = snap.rendered[key] = env.get_template(f"panels/{panel}.html").render(context)
    return html
