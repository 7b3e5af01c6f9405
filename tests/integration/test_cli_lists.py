"""``corral node list`` and ``corral task list`` print a header over their rows (they
printed bare rows), and only the empty line when there is nothing to list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import corral


def _cli(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "corral", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_lists_have_a_header(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        assert _cli(url, "task", "list").strip() == "(no tasks)"
        c.register_node("Node-A1", "developer", "claude-sonnet-4-5")
        c.add_task("Write tests for login", priority="high")
        c.claim_best_task("Node-A1", "developer")
    nodes = _cli(url, "node", "list").splitlines()
    assert nodes[0].split() == ["NODE", "ROLE", "STATUS", "STRENGTH", "TASK"]
    assert nodes[1].split() == ["Node-A1", "developer", "working", "high", "task-1"]
    tasks = _cli(url, "task", "list").splitlines()
    assert tasks[0].split() == ["ID", "STATUS", "PRIO", "TITLE", "@HOLDER"]
    assert tasks[1].split() == [
        "1",
        "in_progress",
        "high",
        "Write",
        "tests",
        "for",
        "login",
        "@Node-A1",
    ]
    # the columns line up under their names
    assert nodes[1].index("developer") == nodes[0].index("ROLE")
    assert tasks[1].index("in_progress") == tasks[0].index("STATUS")
    assert nodes[1].index("task-1") == nodes[0].index("TASK")
