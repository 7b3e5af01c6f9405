"""``corral ctl status --watch``: the processes table (the one ``corral top`` and
``corral status`` draw) again as the supervisor's agents change, in place on a
terminal (tmux) and printed again otherwise; ``--watch`` with ``--json`` is a usage
error."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.supervisor.control import request
from tests.integration.test_supervisor_control import Served, TableSupervisor, corral

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Served]:
    s = Served(TableSupervisor(["relay", "user0"]), tmp_path / "state")
    yield s
    s.stop()


def _row(text: str, agent: str) -> list[str]:
    """The cells of ``agent``'s row in a table's text ([] while it is not there)."""
    return next((line.split() for line in text.splitlines() if line.split()[:1] == [agent]), [])


def test_watch_prints_the_table_again_when_an_agent_changes(supervisor: Served) -> None:
    """Output not a terminal: a time line and the table, then another when user0 is
    stopped (and none while nothing changes); SIGINT ends it with status 0, also when
    it was started with SIGINT ignored (as a shell's background job is: Python keeps
    an ignored SIGINT ignored, and the watch never ended)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("CORRAL_SUPERVISOR", None)
    ignoring = ["sh", "-c", 'trap "" INT; exec "$0" "$@"']
    argv = [*ignoring, sys.executable, "-m", "corral", "ctl", "--state-dir"]
    argv.append(str(supervisor.state_dir))
    proc = subprocess.Popen(
        [*argv, "status", "--watch", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()

    def tables() -> list[str]:
        """The tables printed so far (each starts with its HH:MM:SS line)."""
        text = "".join(lines)
        chunks = [c for c in text.split("\n") if c]
        starts = [i for i, c in enumerate(chunks) if len(c) == 8 and c[2] == c[5] == ":"]
        return ["\n".join(chunks[a:b]) for a, b in zip(starts, [*starts[1:], None], strict=False)]

    def until(check: Callable[[list[str]], bool], what: str) -> list[str]:
        """The tables once ``check`` holds of them (each read in whole lines as written:
        a table may show up before its last rows)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if check(shown := tables()):
                return shown
            time.sleep(0.02)
        raise AssertionError(f"{what}: {tables()}")

    try:
        [first] = until(lambda t: len(t) == 1 and _row(t[0], "user0") != [], "the first table")
        assert _row(first, "user0")[:2] == ["user0", "RUNNING"]
        time.sleep(0.5)  # five more looks, nothing changed: nothing printed
        assert len(tables()) == 1
        request(supervisor.sock, "stop", id="user0")
        second = until(lambda t: len(t) == 2 and "user0: last exit" in t[1], "the second")[1]
        assert _row(second, "user0")[:3] == ["user0", "STOPPED", "—"]
        assert "user0: last exit: killed by signal 15" in second
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(10)
        reader.join(10)
        proc.stdout.close()
    assert code == 0  # Ctrl-C ends a watch: not an error


def test_watch_on_a_terminal_redraws_in_place(supervisor: Served, tmp_path: Path) -> None:
    """Under tmux: one table on the screen, its row changing when user0 stops."""
    from tests.integration.test_cli_top import Pane

    argv = [sys.executable, "-m", "corral", "ctl", "--state-dir", str(supervisor.state_dir)]
    command = shlex.join([*argv, "status", "--watch", "--interval", "0.1"])
    pane = Pane(f"PYTHONPATH={shlex.quote(str(SRC))} {command}; sleep 60", tmp_path)
    try:
        pane.wait(lambda s: "user0" in s and "RUNNING" in _row(s, "user0"), "the table")
        request(supervisor.sock, "stop", id="user0")
        pane.wait(lambda s: _row(s, "user0")[1:2] == ["STOPPED"], "user0 stopped")
        assert pane.screen().count("AGENT") == 1  # redrawn in place, not printed again
    finally:
        pane.close()


def test_watch_takes_no_json(supervisor: Served) -> None:
    r = corral("ctl", "--state-dir", str(supervisor.state_dir), "status", "--watch", "--json")
    assert r.returncode == 2
    assert r.stderr == "error: --watch draws the table: it takes no --json\n"
