"""The terminal's tables (rich): the Fleet figures, nodes, tasks, spawn requests and
supervised processes, as ``corral status``, ``corral top`` and ``corral ctl status``
print them. Only drawing: every figure and word comes from ``corral.cockpit`` over
operations' answers. Imported lazily by those commands (rich is the CLI's only)."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from corral import cockpit

if TYPE_CHECKING:
    from corral.model import Node, Settings, Task
    from corral.spawning import SpawnRequest

__all__ = [
    "console",
    "fleet_table",
    "nodes_table",
    "processes_table",
    "requests_table",
    "show",
    "tasks_table",
    "to_text",
]

_PIPE_WIDTH = 120  # columns when the output is not a terminal (and $COLUMNS is unset)
_HEARTBEAT_STYLE = {"ok": "green", "late": "yellow", "overdue": "bold red", "ended": "dim"}
_STATE_STYLE = {
    "RUNNING": "green",
    "STARTING": "cyan",
    "UNHEALTHY": "bold red",
    "WAITING": "yellow",
    "STOPPED": "dim",
}


def console(file: Any = None) -> Console:
    """A console on stdout (or ``file``): the terminal's width and colours on a
    terminal; plain text ``$COLUMNS`` (else 120) wide otherwise."""
    out = file if file is not None else sys.stdout
    if out.isatty():
        return Console(file=out)
    width = int(os.environ.get("COLUMNS") or _PIPE_WIDTH)
    return Console(file=out, width=width, color_system=None, highlight=False)


def show(*renderables: RenderableType | None, file: Any = None) -> None:
    """Print the renderables one after another, a blank line between two (None ones
    skipped): through rich on a terminal, as ``to_text`` otherwise (``$COLUMNS``, else
    120, wide; no colours, no trailing spaces)."""
    out = file if file is not None else sys.stdout
    parts = [r for r in renderables if r is not None]
    if out.isatty():
        con = Console(file=out)
        for i, r in enumerate(parts):
            if i:
                con.print()
            con.print(r)
        return
    width = int(os.environ.get("COLUMNS") or _PIPE_WIDTH)
    out.write("\n\n".join(to_text(r, width) for r in parts) + "\n")
    out.flush()


def to_text(renderable: RenderableType, width: int = _PIPE_WIDTH) -> str:
    """``renderable`` as plain text (no colours), each line's trailing spaces cut."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def _mark(cell: str, chosen: bool) -> str:
    """A selected row's first cell begins with ``›`` (seen without colours too)."""
    return f"› {cell}" if chosen else cell


def _table(title: str | None, *columns: str, **kwargs: Any) -> Table:
    t = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        **kwargs,
    )
    for c in columns:
        t.add_column(c, overflow="ellipsis")
    return t


def fleet_table(f: cockpit.Fleet, *, title: str | None = "Fleet") -> RenderableType:
    """The Fleet figures as label/value rows, then the last assessment and the counts
    it was made from."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    oldest = cockpit.age(f.oldest_pending)
    if f.oldest_at_least:
        oldest = f"≥ {oldest}"
    recovery = "never" if f.last_recovery is None else f"{cockpit.age(f.last_recovery)} ago"
    rows = [
        ("Live nodes", f"{f.live} / {f.max_agents}"),
        ("Pending", str(f.pending)),
        ("In progress", str(f.in_progress)),
        ("Done (last hour)", str(f.done_last_hour)),
        ("Failed (last hour)", str(f.failed_last_hour)),
        ("Oldest pending", oldest),
        ("Last recovery", f"{recovery} ({f.recoveries} in the event log)"),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    if f.status is None:
        grid.add_row("Assessment", "not assessed yet")
    else:
        when = "" if f.assessed is None else f", {cockpit.age(f.assessed)} ago"
        grid.add_row("Assessment", Text(f"{f.status} → {f.recommendation}{when}"))
        b = f.basis
        basis = (
            f"{b.get('pending_task_count', '?')} pending, {b.get('active_agent_count', '?')}"
            f" active of {b.get('max_agents', '?')} allowed, {b.get('idle_agent_count', '?')} idle"
        )
        grid.add_row("  from", basis)
    if f.manager:
        grid.add_row("Manager", f.manager)
    return grid if title is None else Group(Text(title, style="bold"), grid)


def nodes_table(
    nodes: Sequence[Node],
    settings: Settings,
    now: float,
    *,
    selected: int | None = None,
    title: str | None = "Nodes",
) -> Table:
    """Nodes: id, role, status, model, heartbeat age coloured against the node's own
    window, current task, health."""
    t = _table(title, "NODE", "ROLE", "STATUS", "MODEL", "HEARTBEAT", "TASK", "HEALTH")
    for i, n in enumerate(nodes):
        hb = cockpit.heartbeat(n, settings, now)
        beat = Text(f"{hb['age']} / {hb['window']}", style=_HEARTBEAT_STYLE.get(hb["state"], ""))
        task = "—" if n.current_task_id is None else f"task-{n.current_task_id}"
        model = n.model or "—"
        if n.strength:
            model += f" ({n.strength})"
        style = "reverse" if i == selected else None
        t.add_row(
            _mark(n.id, i == selected),
            n.role,
            n.status,
            model,
            beat,
            task,
            n.health or "—",
            style=style,
        )
    if not nodes:
        t.add_row("(no live nodes)", *[""] * 6)
    return t


def tasks_table(
    tasks: Sequence[Task],
    now: float,
    *,
    selected: int | None = None,
    title: str | None = "Tasks",
) -> Table:
    """Tasks in the order given (in progress, then pending in claim order, then
    failed): a pending one with its score's parts, a held one with its holder, lease
    age and epoch, a failed one with its error."""
    t = _table(title, "ID", "STATUS", "PRIO", "TITLE", "DETAIL", "AGE")
    t.columns[3].ratio = 1
    for i, task in enumerate(tasks):
        if task.status == "pending":
            p = cockpit.score_parts(task, now)
            detail = f"score {p['score']:.0f} = {p['priority']} + {p['age']:.0f} min"
            if p["bonus"]:
                detail += f" (+{p['bonus']} for {p['roles']})"
            since: float | None = task.created_at
        elif task.status == "in_progress":
            lease = cockpit.age(None if task.claimed_at is None else now - task.claimed_at)
            detail = f"@{task.assigned_to} lease {lease} epoch {task.epoch}"
            since = task.claimed_at
        else:
            detail = task.error or ""
            since = task.finished_at or task.updated_at
        age = cockpit.age(None if since is None else now - since)
        style = "reverse" if i == selected else None
        t.add_row(
            _mark(str(task.id), i == selected),
            task.status,
            task.priority,
            task.title,
            detail,
            age,
            style=style,
        )
    if not tasks:
        t.add_row("", "(no open tasks)", *[""] * 4)
    return t


def requests_table(
    requests: Sequence[SpawnRequest],
    now: float,
    *,
    selected: int | None = None,
    title: str | None = "Pending spawn requests",
) -> Table:
    """Pending spawn requests: id, pool, role, why, how long pending."""
    t = _table(title, "ID", "POOL", "ROLE", "REASON", "PENDING")
    for i, r in enumerate(requests):
        style = "reverse" if i == selected else None
        t.add_row(str(r.id), r.pool, r.role, r.reason, cockpit.age(now - r.created_at), style=style)
    if not requests:
        t.add_row("", "(none)", "", "", "")
    return t


def processes_table(
    rows: Sequence[cockpit.ProcessRow],
    *,
    hosts: bool = False,
    selected: int | None = None,
    title: str | None = None,
) -> RenderableType:
    """Supervised processes: (host,) agent, state, pid, last beat, uptime, restarts;
    then a line per process with flags, what it waits on or its last exit."""
    head = ("HOST",) if hosts else ()
    t = _table(title, *head, "AGENT", "STATE", "PID", "LAST BEAT", "UPTIME", "RESTARTS")
    for i, r in enumerate(rows):
        first = (_mark(r.host, i == selected),) if hosts else ()
        state = Text(r.state, style=_STATE_STYLE.get(r.state, ""))
        style = "reverse" if i == selected else None
        t.add_row(
            *first,
            _mark(r.agent, i == selected and not hosts),
            state,
            r.pid,
            r.last_beat,
            r.uptime,
            r.restarts,
            style=style,
        )
    if not rows:
        t.add_row(*[""] * len(head), "(no supervised processes)", *[""] * 5)
    notes = [f"{r.agent}: {r.note}" for r in rows if r.note]
    if not notes:
        return t
    return Group(t, Text(""), *(Text(n) for n in notes))
