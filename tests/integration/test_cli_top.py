"""``corral top`` in a real terminal: tmux (a private server, a fixed 120x40 window)
runs it against a real ``corral serve`` and against the embedded default, and
``tmux capture-pane`` reads the screen. A node registered through the API shows
within a second; the keys switch panels (each panel's title); an operator's key
cancels a task; a viewer's token is read only; ``q`` gives the terminal back."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import corral
from corral.cli.top import Top, parse_keys
from tests.support.served import TOKEN, corral_serve

TMUX = shutil.which("tmux")
CORRAL = shutil.which("corral", path=os.path.dirname(sys.executable))
SEEN_WITHIN = 1.0  # seconds: the acceptance line's "reflects a change within a second"


class Pane:
    """One tmux session on a private server (``tmux -L``), killed with it."""

    def __init__(self, command: str, cwd: Path) -> None:
        assert TMUX is not None, "tmux is not installed (scripts/test installs it)"
        self.socket = f"corral-top-{uuid.uuid4().hex[:8]}"
        self.tmux = [TMUX, "-L", self.socket]
        session = ["-d", "-x", "120", "-y", "40", "-c", str(cwd), "-s", "top", command]
        subprocess.run(
            [*self.tmux, "-f", "/dev/null", "new-session", *session],
            check=True,
            env={k: v for k, v in os.environ.items() if k not in ("TMUX", "CORRAL_TOKEN")},
        )

    def screen(self) -> str:
        done = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "top", *keys], check=True)

    def wait(self, check: Callable[[str], bool], what: str, seconds: float = 15) -> float:
        """Poll the screen until ``check`` holds; the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            if check(self.screen()):
                return time.monotonic() - started
            time.sleep(0.02)
        raise AssertionError(f"{what}: not on the screen within {seconds}s:\n{self.screen()}")

    def resize(self, columns: int, lines: int) -> None:
        subprocess.run(
            [*self.tmux, "resize-window", "-t", "top", "-x", str(columns), "-y", str(lines)],
            check=True,
        )

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
        # tmux leaves the socket file of a killed server behind
        where = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        (where / self.socket).unlink(missing_ok=True)


def _top_command(*args: str, token: str | None = None, options: tuple[str, ...] = ()) -> str:
    """``corral top`` in the pane, then a line saying how it exited and whether the
    terminal's settings are the ones it found (``stty -g`` before and after)."""
    assert CORRAL is not None
    env = f"CORRAL_TOKEN={shlex.quote(token)} " if token else ""
    top = " ".join(shlex.quote(a) for a in (CORRAL, *args, "top", *options))
    return (
        f'before=$(stty -g); {env}{top}; code=$?; [ "$(stty -g)" = "$before" ] && same=yes;'
        ' echo "top exited $code, terminal restored: ${same:-no}"; sleep 60'
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A ``corral serve`` process over a fresh SQLite file, operator token TOKEN."""
    with corral_serve(tmp_path) as base:
        yield base


@pytest.fixture
def panes() -> Iterator[list[Pane]]:
    made: list[Pane] = []
    try:
        yield made
    finally:
        for p in made:
            p.close()


def test_top_shows_a_new_node_within_a_second_and_switches_panels(
    tmp_path: Path, served: str, panes: list[Pane]
) -> None:
    """Against ``corral serve`` with the operator's token: the Nodes panel (key 2)
    shows a node registered through the API within a second; 3, 4 and Tab show the
    Tasks, Processes and Fleet panels; c then y cancels the selected task; q quits
    with the terminal as it was."""
    pane = Pane(_top_command("--url", served, token=TOKEN), tmp_path)
    panes.append(pane)
    pane.wait(lambda s: "Fleet — 0 / 4 live, 0 pending" in s, "the Fleet panel")
    pane.keys("2")
    pane.wait(lambda s: "Nodes — 0 live" in s, "the Nodes panel")
    with corral.connect(served, token=TOKEN) as c:
        c.register_node("Node-T1", "developer")
        took = pane.wait(lambda s: "Node-T1" in s, "the new node")
        assert took < SEEN_WITHIN, f"the node showed after {took:.2f}s"
        assert "Nodes — 1 live" in pane.screen()
        task = c.add_task("Implement the login page")
        pane.keys("3")
        pane.wait(lambda s: "Tasks — 0 in progress, 1 pending, 0 failed" in s, "the Tasks panel")
        pane.wait(lambda s: f"› {task.id}" in s and "Implement the login page" in s, "the task")
        pane.keys("c")
        pane.wait(lambda s: f"cancel task {task.id} (Implement the login page)? y/n" in s, "ask")
        pane.keys("y")
        pane.wait(lambda s: f"task {task.id} cancelled" in s, "the cancellation")
        assert c.get_task(task.id).status == "cancelled"
        [event] = [e for e in c.events(limit=10_000) if e.kind == "task_cancelled"]
        assert event.data["reason"] == "cancelled in corral top"
    pane.keys("4")
    pane.wait(lambda s: "Processes — 0 supervised" in s, "the Processes panel")
    pane.keys("Tab")
    pane.wait(lambda s: "Fleet — 1 / 4 live, 0 pending" in s, "Tab back to Fleet")
    pane.keys("q")
    pane.wait(lambda s: "top exited 0, terminal restored: yes" in s, "the exit")
    assert "Fleet —" not in pane.screen()  # the alternate screen is gone


def test_top_keys_accept_a_spawn_request_and_restart_a_process(
    tmp_path: Path, served: str, panes: list[Pane]
) -> None:
    """On the Fleet panel ``a`` accepts the selected pending spawn request; on the
    Processes panel ``r`` asks the selected process's host to restart it (a
    ``process_action_requested`` event its supervisor answers); each through the API
    with the operator's token."""
    with corral.connect(served, token=TOKEN) as c:
        c.request_spawn("dev", "developer", "5 pending tasks")
        second = c.request_spawn("dev", "developer", "7 pending tasks")
        c.report_processes("host-a", [{"agent": "web", "state": "RUNNING", "pid": 4242}])
        pane = Pane(_top_command("--url", served, token=TOKEN), tmp_path)
        panes.append(pane)
        pane.wait(lambda s: "7 pending tasks" in s, "the pending spawn requests")
        pane.keys("Down", "a")
        pane.wait(lambda s: f"spawn request {second.id} (pool dev, developer): accepted" in s, "a")
        [accepted] = c.spawn_requests(status="accepted")
        assert (accepted.id, accepted.decided_by) == (second.id, "operator")
        pane.wait(lambda s: "7 pending tasks" not in s, "the accepted request gone")
        pane.keys("4")
        pane.wait(lambda s: "Processes — 1 supervised" in s and "› host-a" in s, "the process")
        pane.keys("r")
        pane.wait(lambda s: "restart of web on host-a requested (request " in s, "the restart")
        [asked] = c.process_actions("host-a")
        assert asked.data == {
            "host": "host-a",
            "agent": "web",
            "action": "restart",
            "actor": "operator",  # the token top was given
        }


def test_a_viewers_top_is_read_only(tmp_path: Path, served: str, panes: list[Pane]) -> None:
    """A viewer's token sees the panels; the keys that act say "read only" (the
    server refused the operation) and nothing changes."""
    with corral.connect(served, token=TOKEN) as c:
        viewer = c.create_token("wall-screen", "viewer").token
        assert viewer is not None
        task = c.add_task("Implement the login page")
        pane = Pane(_top_command("--url", served, token=viewer), tmp_path)
        panes.append(pane)
        pane.wait(lambda s: "Fleet — 0 / 4 live, 1 pending" in s, "the Fleet panel")
        pane.keys("3")
        pane.wait(lambda s: f"› {task.id}" in s, "the task selected")
        pane.keys("c", "y")
        pane.wait(lambda s: "read only: " in s and "[read only]" in s, "the refusal")
        pane.keys("e")
        pane.wait(lambda s: "read only: this token may not act" in s, "read only at once")
        assert c.get_task(task.id).status == "pending"
        assert not [e for e in c.events(limit=10_000) if e.kind == "task_cancelled"]
    pane.keys("q")
    pane.wait(lambda s: "top exited 0" in s, "the exit")


def test_top_on_the_embedded_default_sees_another_process_register(
    tmp_path: Path, panes: list[Pane]
) -> None:
    """No --url: the SQLite file under .corral/ (corral init's); a node another
    process registers shows within a second; a resized window is drawn again to its
    new width."""
    assert CORRAL is not None
    subprocess.run([CORRAL, "init"], cwd=tmp_path, check=True, capture_output=True)
    pane = Pane(_top_command(options=("--panel", "nodes")), tmp_path)
    panes.append(pane)
    pane.wait(lambda s: "Nodes — 0 live" in s, "the Nodes panel")
    with corral.connect(f"sqlite:///{tmp_path / '.corral' / 'corral.db'}") as c:
        c.register_node("Node-E1", "architect")
        took = pane.wait(lambda s: "Node-E1" in s, "the new node")
    assert took < SEEN_WITHIN, f"the node showed after {took:.2f}s"

    def box_width(screen: str) -> int:
        return max((len(line) for line in screen.splitlines() if line.startswith("╭")), default=0)

    assert box_width(pane.screen()) == 120
    pane.resize(90, 30)  # drawn again for the new size (SIGWINCH), events or not
    took = pane.wait(lambda s: box_width(s) == 90, "the panel at 90 columns")
    assert took < SEEN_WITHIN, f"redrawn after {took:.2f}s"
    pane.keys("q")
    pane.wait(lambda s: "top exited 0, terminal restored: yes" in s, "the exit")


def test_top_without_a_terminal_exits_2_naming_it(tmp_path: Path) -> None:
    assert CORRAL is not None
    subprocess.run([CORRAL, "init"], cwd=tmp_path, check=True, capture_output=True)
    done = subprocess.run(
        [CORRAL, "top"], cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: top: corral top needs a terminal (corral status prints the same tables)\n"
    )


def test_keys_are_parsed_from_what_the_terminal_sends() -> None:
    assert parse_keys("2\t\x1b[Z\x1b[A\x1b[Bq\x1b[5~x") == [
        "2",
        "tab",
        "backtab",
        "up",
        "down",
        "q",
        "x",
    ]


def test_an_action_key_on_another_panel_says_where_it_acts(tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        top = Top(c, "x", "nodes")
        top.press("c")
        assert top.message == "'c' acts on the Tasks panel (3)"
        top.press("r")
        assert top.message == "'r' acts on the Processes panel (4)"


def test_task_import_on_a_terminal_draws_a_progress_bar(tmp_path: Path, panes: list[Pane]) -> None:
    """On a terminal ``corral task import`` shows a bar counting the tasks sent (and
    no line per batch), then the summary."""
    assert CORRAL is not None
    subprocess.run([CORRAL, "init"], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "tasks.jsonl").write_text(
        "".join(f'{{"title": "Task {i}"}}\n' for i in range(250)) + "not json\n"
    )
    command = shlex.join([CORRAL, "task", "import", "tasks.jsonl", "--batch-size", "100"])
    pane = Pane(f"{command}; echo import exited $?; sleep 60", tmp_path)
    panes.append(pane)
    pane.wait(lambda s: "import exited 1" in s, "the import's end")
    screen = pane.screen()
    assert "importing" in screen and "250/250" in screen
    assert "tasks added" not in screen
    assert "imported 250 tasks from tasks.jsonl: lines 1-250, ids 1-250" in screen
    assert "  line 251: not JSON: " in screen


def test_the_rows_shown_follow_the_selection_without_jumping(tmp_path: Path) -> None:
    """Moving down past the last row shown scrolls one row; moving back up keeps the
    rows shown until the selection leaves them at the top."""
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        top = Top(c, "x", "tasks")
        top.selected["tasks"] = 12
        assert top.window("tasks", 10) == (3, 13)
        top.selected["tasks"] = 8  # still among the rows shown: they stay
        assert top.window("tasks", 10) == (3, 13)
        top.selected["tasks"] = 1
        assert top.window("tasks", 10) == (1, 11)
