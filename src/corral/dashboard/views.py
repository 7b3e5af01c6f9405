"""Presentation: the panels' templates over a ``Snapshot``, and nothing else.

Every number shown comes from an operation's answer; this module only formats it,
with the helpers every operator's view shares (``corral.cockpit``: ages, the
heartbeat's colour against the node's own liveness window, a pending task's score
parts), and keeps the page's filters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from corral import cockpit
from corral.cockpit import age, score_parts
from corral.dashboard import svg
from corral.dashboard.feed import TASKS_SHOWN, Snapshot
from corral.dashboard.history import BUCKET, Trend
from corral.model import Event, Node, Process

__all__ = [
    "NODES_SHOWN",
    "NODE_STATUSES",
    "PANELS",
    "PROCESS_ACTIONS",
    "SPAWN_ACTIONS",
    "TASKS_PAGE",
    "TASK_ARGUMENTS",
    "TASK_FILTERS",
    "Filters",
    "environment",
    "render_panel",
]

PANELS = ("fleet", "nodes", "tasks", "processes", "pools", "workflows", "activations", "events")
PROCESS_ACTIONS = ("start", "stop", "restart")  # request_process_action's actions
SPAWN_ACTIONS = ("accept", "decline")  # accept_spawn_request, decline_spawn_request
RECENT = 3600.0  # the Pools panel's "last hour"
NODE_STATUSES = ("working", "idle", "waiting", "terminated")
NODES_SHOWN = 100  # the Nodes panel's page: its first rows, and each "show more" adds as many
_MAX_NODES_SHOWN = 100_000  # the most ``node_limit`` asks for
TASKS_PAGE = 25  # rows per list the Tasks panel shows unless ``tasks_shown`` asks for more
_MAX_FILTER = 100
_MEMBER = re.compile(r"^(.+)-[0-9]+$")  # a pool member's node id: <pool>-<n>
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
    "all" every node, or one status) and ``node_limit`` (how many of those nodes the
    Nodes panel shows, "" ``NODES_SHOWN``), ``tasks_shown`` (rows per list of the Tasks
    panel, "" ``TASKS_PAGE``, at most the ``TASKS_SHOWN`` read), ``event_kind`` ("" every
    kind), and the task
    filter the Tasks panel's bulk actions apply (``TASK_FILTERS``: each as typed, ""
    any; the operation checks them when an action runs); ``idle_minutes`` the
    Workflows panel's (runs idle for more than that many minutes, "" any idle run),
    ``event_node`` and ``event_task`` the Events panel's besides its kind."""

    node_status: str = ""
    node_limit: str = ""
    tasks_shown: str = ""
    event_kind: str = ""
    event_node: str = ""
    event_task: str = ""
    idle_minutes: str = ""
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
        node = query.get("event_node", "").strip()[:_MAX_FILTER]
        task = query.get("event_task", "").strip().removeprefix("task-")
        minutes = query.get("idle_minutes", "").strip()
        limit = query.get("node_limit", "").strip()
        if not (limit.isdigit() and 0 < int(limit) <= _MAX_NODES_SHOWN):
            limit = ""
        rows = query.get("tasks_shown", "").strip()
        if not (rows.isdigit() and 0 < int(rows) <= TASKS_SHOWN):
            rows = ""
        return cls(
            node_status=status,
            node_limit=str(int(limit)) if limit else "",
            tasks_shown=str(int(rows)) if rows else "",
            event_kind=kind,
            event_node=node,
            event_task=task if task.isdigit() and len(task) < 19 else "",
            idle_minutes=minutes if _number(minutes) is not None else "",
            **tasks,
        )

    def pairs(self) -> dict[str, str]:
        """Every filter that is set, by its query name."""
        names = (
            "node_status",
            "node_limit",
            "tasks_shown",
            "event_kind",
            "event_node",
            "event_task",
            "idle_minutes",
            *(f"task_{k}" for k in TASK_FILTERS),
        )
        return {k: getattr(self, k) for k in names if getattr(self, k)}

    def link(self, **changed: str) -> str:
        """The page's URL with these filters changed (the Events panel's links)."""
        pairs = {**self.pairs(), **changed}
        query = urlencode({k: v for k, v in pairs.items() if v})
        return "/" + (f"?{query}" if query else "")

    def hidden(self, *own: str) -> list[tuple[str, str]]:
        """The filters a form carries along besides the ones it names itself (the task
        filters, the idle minutes, the events' node and task, the Nodes panel's page;
        set ones only), so submitting it keeps them in the URL; ``own`` its own fields."""
        carried = ("idle_minutes", "event_node", "event_task", "node_limit", "tasks_shown")
        return [
            (k, v)
            for k, v in self.pairs().items()
            if (k.startswith("task_") or k in carried) and k not in own
        ]

    def query(self) -> str:
        """The filters as a query string ("" when none is set)."""
        return urlencode(self.pairs())

    def key(self, panel: str) -> str:
        if panel == "nodes":
            return f"{self.node_status}\0{self.node_limit}"
        if panel == "events":
            return f"{self.event_kind}\0{self.event_node}\0{self.event_task}"
        if panel == "workflows":
            return self.idle_minutes
        if panel == "tasks":
            return self.tasks_shown
        return ""


def _number(text: str) -> float | None:
    """``text`` as a number of minutes from zero, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < 1e9 else None


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


def _node_page(snap: Snapshot, f: Filters) -> dict[str, Any]:
    """The Nodes panel's page: the first ``node_limit`` (else ``NODES_SHOWN``) of the
    nodes the filter chooses, in registration order, each with its heartbeat's
    colour; how many the filter chooses; the link that shows ``NODES_SHOWN`` more and
    the one that shows them all (None when every one is shown)."""
    chosen = _nodes(snap, f)
    limit = int(f.node_limit) if f.node_limit else NODES_SHOWN
    shown = chosen[:limit]
    more = len(chosen) > len(shown)
    return {
        "rows": [(n, heartbeat(n, snap)) for n in shown],
        "total": len(chosen),
        "more": f.link(node_limit=str(limit + NODES_SHOWN)) + "#nodes-title" if more else None,
        "every": f.link(node_limit=str(len(chosen))) + "#nodes-title" if more else None,
        "step": min(NODES_SHOWN, len(chosen) - len(shown)),
    }


def _task_page(snap: Snapshot, f: Filters) -> dict[str, Any]:
    """The Tasks panel's lists: the first ``tasks_shown`` (else ``TASKS_PAGE``) of
    each list read (pending ones with their score's parts), and the link that shows
    every task read (``TASKS_SHOWN`` per list; None when each list is shown whole)."""
    rows = int(f.tasks_shown) if f.tasks_shown else TASKS_PAGE
    lists = (snap.pending, snap.in_progress, snap.failed)
    cut = any(len(tasks) > rows for tasks in lists)
    return {
        "pending": [(t, score_parts(t, snap.now)) for t in snap.pending[:rows]],
        "in_progress": snap.in_progress[:rows],
        "failed": snap.failed[:rows],
        "more": f.link(tasks_shown=str(TASKS_SHOWN)) + "#tasks-title" if cut else None,
    }


def _events(snap: Snapshot, f: Filters, limit: int = 50) -> list[Event]:
    chosen = [
        e
        for e in snap.events
        if (not f.event_kind or e.kind == f.event_kind)
        and (not f.event_node or e.node_id == f.event_node or e.data.get("agent") == f.event_node)
        and (not f.event_task or str(e.task_id) == f.event_task)
    ]
    return list(reversed(chosen[-limit:]))


def _processes(snap: Snapshot) -> list[tuple[str, list[Process]]]:
    """Every host's processes, by host then agent."""
    hosts: dict[str, list[Process]] = {}
    for p in sorted(snap.processes, key=lambda p: (p.host, p.agent)):
        hosts.setdefault(p.host, []).append(p)
    return list(hosts.items())


def _pools(snap: Snapshot) -> list[dict[str, Any]]:
    """Each pool the events name: its members now (live nodes named ``<pool>-<n>``),
    its limits as its last ``pool_scaled`` event gave them, its scale timeline
    (newest first) and its reversals (a change against the one before) in the last
    hour, and its pending spawn requests."""
    pools: dict[str, dict[str, Any]] = {}

    def pool(name: str) -> dict[str, Any]:
        return pools.setdefault(
            name,
            {"name": name, "members": [], "scaled": [], "reversals": 0, "limits": {}, "asks": []},
        )

    for e in snap.scale_events:
        if e.kind == "alert" and e.data.get("pool"):
            p = pool(str(e.data["pool"]))
            p["scaled"].append(e)
            if "min" in e.data or "max" in e.data:
                p["limits"] = {"min": e.data.get("min"), "max": e.data.get("max")}
    for r in snap.spawn_pending:
        pool(r.pool)["asks"].append(r)
    for n in snap.nodes:
        m = _MEMBER.match(n.id)
        name = m.group(1) if m else None
        if name in pools and n.status != "terminated":
            pools[name]["members"].append(n.id)
    for p in pools.values():
        last = 0
        for e in p["scaled"]:
            try:
                step = (int(e.data["to"]) > int(e.data["from"])) - (
                    int(e.data["to"]) < int(e.data["from"])
                )
            except (KeyError, TypeError, ValueError):
                continue
            if step and last and step != last and snap.now - e.ts <= RECENT:
                p["reversals"] += 1
            last = step or last
        p["scaled"] = list(reversed(p["scaled"]))[:20]
    return sorted(pools.values(), key=lambda p: p["name"])


def _idle_runs(snap: Snapshot, f: Filters) -> list[Any]:
    minutes = _number(f.idle_minutes) or 0.0
    return [
        h
        for h in snap.idle_runs
        if h.idle_since is not None and snap.now - h.idle_since > minutes * 60
    ]


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
            context.update(_node_page(snap, f))
        elif panel == "tasks":
            context.update(_task_page(snap, f))
        elif panel == "processes":
            context["hosts"] = _processes(snap)
        elif panel == "pools":
            context["pools"] = _pools(snap)
        elif panel == "workflows":
            context["runs"] = _idle_runs(snap, f)
        elif panel == "activations":
            never = float("-inf")
            context["agents"] = sorted(
                snap.agents,
                key=lambda a: (a.last_activated_at is not None, a.last_activated_at or never),
            )
            modes: dict[str, int] = {}
            for a in snap.assignments:
                modes[a.mode] = modes.get(a.mode, 0) + 1
            context["modes"] = sorted(modes.items())
        elif panel == "events":
            context["rows"] = _events(snap, f)
        html = snap.rendered[key] = env.get_template(f"panels/{panel}.html").render(context)
    return html
