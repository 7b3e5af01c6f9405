"""``corral top``: the fleet live in the terminal, full screen (rich.live).

    corral [--url URL] top [--panel fleet|nodes|tasks|processes]

Four panels, the dashboard's first ones: Fleet (its counts and the pending spawn
requests), Nodes, Tasks (in progress, pending in claim order, failed) and Processes.
It follows the event log the way ``corral up`` prints it (the ``events`` operation,
every ``POLL`` seconds) and reads a new frame through the operations when events
arrived (at most one read per ``MIN_READ`` seconds, and one every ``REFRESH`` seconds
for the ages), so a change shows within a second. Keys: 1-4 or Tab / Shift-Tab
switch panels, ↑/↓ (or k/j) select a row, and on the selected row ``c`` cancels a
task (``y`` confirms), ``e`` requeues one, ``r`` restarts a process, ``a`` / ``d``
accept / decline a spawn request; ``q`` quits and gives the terminal back as it was.
Every action is an operation called through the client with its token, so the roles
are the API's: a viewer's token is refused and the keys that act say "read only".
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from corral.cli._common import CONTEXT_SETTINGS, client
from corral.errors import AuthError, CorralError, InvalidInputError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from corral.model import Node, Process, Settings, State, Task
    from corral.spawning import SpawnRequest
    from corral.store.stats import ClusterStats
    from corral.types import Client

__all__ = ["PANELS", "Frame", "Top", "read_frame", "register"]

PANELS = ("fleet", "nodes", "tasks", "processes")
TITLES = {"fleet": "Fleet", "nodes": "Nodes", "tasks": "Tasks", "processes": "Processes"}
POLL = 0.2  # seconds between two reads of the event log
MIN_READ = 0.25  # seconds: a burst of events is one frame read
REFRESH = 2.0  # seconds: a frame is read at least this often (ages move on)
TASKS_READ = 100  # tasks per list (in progress, pending, failed)
_KEYS = {"\x1b[A": "up", "\x1b[B": "down", "\x1b[Z": "backtab", "\t": "tab"}


@dataclass(slots=True)
class Frame:
    """What the panels show, read through the operations at ``now`` after event
    ``seq``. A list an operation refused (a node token may not list processes) is
    None, with the refusal in ``refused``."""

    seq: int
    now: float
    settings: Settings
    stats: ClusterStats
    state: State
    nodes: list[Node]
    tasks: list[Task]  # in progress, then pending in claim order, then failed
    pending: list[Task]
    processes: list[Process] | None
    requests: list[SpawnRequest] | None
    refused: dict[str, str] = field(default_factory=dict)


def _maybe(call: Callable[[], Any], refused: dict[str, str], name: str) -> Any:
    try:
        return call()
    except AuthError as exc:
        refused[name] = exc.message
        return None


def read_frame(c: Client, seq: int) -> Frame:
    """One frame through the operations (the dashboard's ``read_snapshot`` reads,
    plus the processes and the pending spawn requests)."""
    refused: dict[str, str] = {}
    state = c.read_state(limit=1)
    held = c.list_tasks("in_progress", limit=TASKS_READ)
    pending = c.list_tasks("pending", limit=TASKS_READ)
    failed = c.list_tasks("failed", limit=TASKS_READ)
    return Frame(
        seq=seq,
        now=state.now,
        settings=c.settings(),
        stats=c.stats(),
        state=state,
        nodes=[n for n in c.list_nodes() if n.status != "terminated"],
        tasks=held + pending + failed,
        pending=pending,
        processes=_maybe(c.list_processes, refused, "processes"),
        requests=_maybe(lambda: c.spawn_requests(status="pending"), refused, "requests"),
        refused=refused,
    )


def parse_keys(data: str) -> list[str]:
    """Keys from what the terminal sent: arrows and Shift-Tab by name, the rest one
    character each; another escape sequence (``ESC [ … final``, ``ESC O x``) is
    dropped whole."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        if data[i] != "\x1b":
            keys.append(_KEYS.get(data[i], data[i]))
            i += 1
            continue
        if data[i : i + 3] in _KEYS:
            keys.append(_KEYS[data[i : i + 3]])
            i += 3
        elif data[i + 1 : i + 2] == "[":
            j = i + 2
            while j < len(data) and not "\x40" <= data[j] <= "\x7e":
                j += 1
            i = j + 1
        elif data[i + 1 : i + 2] == "O":
            i += 3
        else:
            i += 1  # Escape alone
    return keys


class Top:
    """The view's state (panel, selected rows, the message line, whether the token
    may act) and what each key does. ``c`` is the client the actions go through."""

    def __init__(self, c: Client, url: str, panel: str = "fleet") -> None:
        self.c = c
        self.url = url
        self.panel = PANELS.index(panel)
        self.selected = dict.fromkeys(PANELS, 0)
        self.offset = dict.fromkeys(PANELS, 0)  # each panel's first row shown
        self.frame: Frame | None = None
        self.message = ""
        self.read_only = False
        self.confirm: tuple[str, Callable[[], str]] | None = None
        self.quit = False

    # --- keys ---------------------------------------------------------------------
    def press(self, key: str) -> None:
        """Do what ``key`` does; the outcome goes to the message line."""
        if self.confirm is not None:
            _, act = self.confirm
            self.confirm = None
            self.message = self._act(act) if key in ("y", "Y") else "not done"
            return
        if key in ("q", "Q"):
            self.quit = True
        elif key in ("1", "2", "3", "4"):
            self.panel = int(key) - 1
        elif key in ("tab", "backtab"):
            self.panel = (self.panel + (1 if key == "tab" else -1)) % len(PANELS)
        elif key in ("up", "k", "down", "j"):
            name = PANELS[self.panel]
            step = -1 if key in ("up", "k") else 1
            last = max(0, len(self.rows(name)) - 1)
            self.selected[name] = min(last, max(0, self.selected[name] + step))
        elif key in ("c", "e", "r", "a", "d"):
            self._action(key)

    def rows(self, name: str) -> list[Any]:
        """The selectable rows of panel ``name``."""
        f = self.frame
        if f is None:
            return []
        if name == "fleet":
            return list(f.requests or [])
        if name == "nodes":
            return list(f.nodes)
        if name == "tasks":
            return list(f.tasks)
        return list(f.processes or [])

    def _chosen(self, name: str) -> Any:
        rows = self.rows(name)
        if not rows:
            return None
        return rows[min(self.selected[name], len(rows) - 1)]

    def _action(self, key: str) -> None:
        name = PANELS[self.panel]
        wanted = {"c": "tasks", "e": "tasks", "r": "processes", "a": "fleet", "d": "fleet"}[key]
        if name != wanted:
            self.message = (
                f"'{key}' acts on the {TITLES[wanted]} panel ({PANELS.index(wanted) + 1})"
            )
            return
        if self.read_only:
            self.message = "read only: this token may not act"
            return
        row = self._chosen(name)
        if row is None:
            self.message = "nothing selected"
            return
        c = self.c
        if key == "c":
            question = f"cancel task {row.id} ({row.title})? y/n"

            def cancel() -> str:
                return f"task {c.cancel_task(row.id, 'cancelled in corral top').id} cancelled"

            self.confirm = (question, cancel)
            self.message = question
        elif key == "e":
            self.message = self._act(lambda: f"task {c.requeue_task(row.id).id} requeued")
        elif key == "r":
            self.message = self._act(
                lambda: "restart of {} on {} requested (request {})".format(
                    row.agent,
                    row.host,
                    c.request_process_action(row.host, row.agent, "restart").seq,
                )
            )
        elif key == "a":
            self.message = self._act(lambda: c.accept_spawn_request(row.id).text)
        else:
            self.message = self._act(lambda: c.decline_spawn_request(row.id).text)

    def _act(self, act: Callable[[], str]) -> str:
        try:
            return act()
        except AuthError as exc:
            if exc.status != 403:  # 401: the token itself refused (revoked, wrong)
                return f"refused: {exc.message}"
            self.read_only = True  # the token may read, not act (a viewer's)
            return f"read only: {exc.message}"
        except CorralError as exc:
            return f"refused: {exc.message}"

    # --- drawing ------------------------------------------------------------------
    def render(self, height: int) -> RenderableType:
        """The screen: a header, the panel tabs, the current panel and the keys."""
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        tabs = Text()
        for i, name in enumerate(PANELS):
            label = f" {i + 1} {TITLES[name]} "
            tabs.append(label, style="reverse bold" if i == self.panel else "")
            tabs.append(" ")
        f = self.frame
        when = time.strftime("%H:%M:%S")
        mode = "  [read only]" if self.read_only else ""
        seq = "" if f is None else f"  event {f.seq}"
        head = Text(f"corral top  {self.url}  {when}{seq}{mode}", style="bold")
        name = PANELS[self.panel]
        room = max(3, height - 9)  # rows left for the panel's body
        title, body = (TITLES[name], Text("reading…")) if f is None else self._panel(name, f, room)
        keys = {
            "fleet": "a accept  d decline",
            "nodes": "",
            "tasks": "c cancel  e requeue",
            "processes": "r restart",
        }[name]
        help_line = f"1-4/Tab panels  ↑↓ select  {keys}{'  ' if keys else ''}q quit"
        return Group(
            head,
            tabs,
            Panel(body, title=title, title_align="left"),
            Text(self.message or " ", style="yellow"),
            Text(help_line, style="dim"),
        )

    def window(self, name: str, room: int) -> tuple[int, int]:
        """The slice of panel ``name``'s rows that fits ``room`` lines and shows the
        selected row."""
        sel, room = self.selected[name], max(1, room)
        start = min(self.offset[name], sel)  # moved above it: scroll up to it
        start = max(start, sel - room + 1)  # moved below it: scroll down to it
        self.offset[name] = start
        return start, start + room

    def _panel(self, name: str, f: Frame, room: int) -> tuple[str, RenderableType]:
        from rich.console import Group
        from rich.text import Text

        from corral import cockpit
        from corral.cli import _tables

        if name == "fleet":
            fleet = cockpit.fleet(f.stats, f.state, f.pending, f.now)
            requests = f.requests or []
            a, b = self.window(name, max(1, room - 14))
            sel = self.selected[name] - a
            if f.requests is None:
                table: RenderableType = Text(f"spawn requests: {f.refused.get('requests', '')}")
            else:
                table = _tables.requests_table(requests[a:b], f.now, selected=sel)
            title = f"Fleet — {fleet.live} / {fleet.max_agents} live, {fleet.pending} pending"
            return title, Group(_tables.fleet_table(fleet, title=None), Text(""), table)
        if name == "nodes":
            a, b = self.window(name, room - 2)
            t = _tables.nodes_table(
                f.nodes[a:b], f.settings, f.now, selected=self.selected[name] - a, title=None
            )
            return f"Nodes — {len(f.nodes)} live", t
        if name == "tasks":
            a, b = self.window(name, room - 2)
            t = _tables.tasks_table(
                f.tasks[a:b], f.now, selected=self.selected[name] - a, title=None
            )
            counts = f.stats.tasks
            summary = ", ".join(
                f"{counts.get(s, 0)} {s.replace('_', ' ')}"
                for s in ("in_progress", "pending", "failed")
            )
            return f"Tasks — {summary}", t
        if f.processes is None:
            return "Processes", Text(f"not shown: {f.refused.get('processes', '')}")
        a, b = self.window(name, room - 2)
        rows = [cockpit.process_row(p.to_dict(), f.now) for p in f.processes[a:b]]
        procs = _tables.processes_table(rows, hosts=True, selected=self.selected[name] - a)
        return f"Processes — {len(f.processes)} supervised", procs


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    """The terminal in cbreak mode (keys one at a time, unechoed; Ctrl-C still
    interrupts), restored on the way out whatever happens."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _on_resize(call: Callable[[], None]) -> Iterator[None]:
    """``call()`` on SIGWINCH (the terminal resized), the old handler back after."""
    old = signal.signal(signal.SIGWINCH, lambda *_: call())
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, old)


def _run(top: Top, c: Client) -> None:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    cursor = c.stats().last_event
    top.frame = read_frame(c, cursor)
    read_at = time.monotonic()
    moved = False
    fd = sys.stdin.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    next_poll = time.monotonic() + POLL
    resized: list[bool] = []  # the window changed size: draw again at the next look
    with (
        _on_resize(lambda: resized.append(True)),
        _cbreak(fd),
        Live(
            top.render(console.size.height),
            console=console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live,
    ):
        while not top.quit:
            dirty = bool(resized)
            resized.clear()
            wait = max(0.0, next_poll - time.monotonic())
            if sel.select(wait):
                data = os.read(fd, 64).decode("utf-8", "replace")
                if not data:  # the terminal went away
                    return
                for key in parse_keys(data):
                    top.press(key)
                dirty = True
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + POLL
                try:
                    while batch := c.events(cursor, 1000):
                        cursor, moved = batch[-1].seq, True
                        if len(batch) < 1000:
                            break
                    if (moved and now - read_at >= MIN_READ) or now - read_at >= REFRESH:
                        top.frame = read_frame(c, cursor)
                        read_at, moved, dirty = now, False, True
                except CorralError as exc:  # an outage: keep the last frame, say so
                    top.message = f"cannot read the cluster: {exc.message}"
                    dirty = True
            if dirty:
                live.update(top.render(console.size.height), refresh=True)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--panel",
    type=click.Choice(PANELS),
    default="fleet",
    show_default=True,
    help="The panel shown first.",
)
@click.pass_context
def top(ctx: click.Context, panel: str) -> None:
    """The fleet live, full screen: Fleet, Nodes, Tasks and Processes, updated
    within a second of a change (it follows the event log). 1-4 or Tab switch
    panels, arrows (or j/k) select a row; on it c cancels a task, e requeues one, r
    restarts a process, a / d accept / decline a spawn request (each an operation
    with this token's role: a viewer's token is read only); q quits."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InvalidInputError(
            "corral top needs a terminal (corral status prints the same tables)", field="top"
        )
    c = client(ctx)
    root = ctx.find_root()
    url = (root.obj or {}).get("url") or getattr(c, "url", "")
    _run(Top(c, str(url), panel), c)


def register(group: click.Group) -> None:
    group.add_command(top)
