"""Presentation: the panels' templates over a ``Snapshot``, and nothing else.

Every number shown comes from an operation's answer; this module only formats it,
with the helpers every operator's view shares (``corral.cockpit``: ages, the
heartbeat's colour against the node's own liveness window, a pending task's score
parts), and keeps the page's filters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from corral import cockpit
from corral.cockpit import age, score_parts
from corral.dashboard import svg
from corral.dashboard.feed import Snapshot
from corral.dashboard.history import BUCKET, Trend
from corral.model import Event, Node

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


def heartbeat(node: Node, snap: Snapshot) -> dict[str, Any]:
    """A node's silence against its own thresholds (``cockpit.heartbeat`` at the
    snapshot's time)."""
    return cockpit.heartbeat(node, snap.settings, snap.now)


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


def _newest(values: list[float | None], unit: str) -> str:
    newest = next((v for v in reversed(values) if v is not None), None)
    if newest is None:
        return "—"
    return f"{newest:.1f}{unit}" if unit else f"{newest:.0f}"


def sparklines(trend: Trend | None) -> list[dict[str, Any]]:
    """The Fleet panel's one-hour sparklines (name, label, newest value, SVG)."""
    rows = []
    series = (
        ("pending", "Pending tasks", None if trend is None else trend.pending, ""),
        ("live", "Live nodes", None if trend is None else trend.live, ""),
        ("throughput", "Throughput", None if trend is None else trend.throughput, "/min"),
    )
    for name, label, values, unit in series:
        values = values or []
        shown = _newest(values, unit)
        spoken = f"{label}, the last hour: now {shown}"
        rows.append(
            {
                "name": name,
                "label": label,
                "newest": shown,
                "svg": svg.sparkline(values, spoken, name),
            }
        )
    return rows


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
            context["sparklines"] = sparklines(snap.trend)
            context["history_bucket"] = BUCKET
        elif panel == "nodes":
            context["rows"] = [(n, heartbeat(n, snap)) for n in _nodes(snap, f)]
        elif panel == "tasks":
            context["pending"] = [(t, score_parts(t, snap.now)) for t in snap.pending]
        elif panel == "events":
            context["rows"] = _events(snap, f)
        html = snap.rendered[key] = env.get_template(f"panels/{panel}.html").render(context)
    return html
