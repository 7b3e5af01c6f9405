"""The main job: ``corral demo`` runs the scripted fleet to the end."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.demo import _describe
from corral.model import Event

_LINE = re.compile(r"^ *(-?\d+\.\d\d)s  (.*)$")


@pytest.fixture(scope="module")
def demo_run() -> tuple[str, dict[str, Any], list[Event]]:
    """One demo run, its database kept: (stdout, summary, events in seq order)."""
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "demo", "--json", "--keep"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(next(x for x in reversed(lines) if x.startswith("{")))
    kept = Path(lines[-1].removeprefix("database kept at "))
    try:
        with corral.connect(f"sqlite:///{kept}") as c:
            events = c.events(limit=10_000)
    finally:
        shutil.rmtree(kept.parent)
    return proc.stdout, summary, events


def test_demo_runs_the_whole_lifecycle(demo_run: tuple[str, dict[str, Any], list[Event]]) -> None:
    """Spawn to capacity, one refusal, a crash recovered by the monitor, idle retirement."""
    stdout, summary, _ = demo_run
    assert summary["tasks_done"] == summary["tasks_total"] == 10
    assert summary["refused_registrations"] == 1
    assert summary["lease_recoveries"] == 1
    # The cap (four nodes) was filled: the manager and three developers at least. Every
    # developer but the one that crashed (declared dead, not retired) retired: itself
    # when idle, or the monitor's doing (Dev-3, which stays).
    assert summary["developers"] >= 3
    assert summary["retired"] == summary["developers"] - 1
    # Retired at its idle timeout (3 s in the demo), never before; shown to a tenth of
    # a second (the event keeps milliseconds, and a real clock wakes a little late).
    retired = re.search(r"monitor: Dev-3 retired after (\d+\.\d)s idle\n", stdout)
    assert retired, stdout
    assert float(retired.group(1)) >= 3.0


def test_demo_prints_the_events_in_cursor_order(
    demo_run: tuple[str, dict[str, Any], list[Event]],
) -> None:
    """Every line of the run is an event, in seq order (a batch of task_added is one
    line), but for the capacity refusal, which is no event."""
    stdout, _, events = demo_run
    expected: list[str] = []
    for e in events:
        if e.kind == "task_added":
            if not expected or not expected[-1].startswith("manager added"):
                expected.append("manager added 0 tasks")
            n = int(expected[-1].split()[2]) + 1
            expected[-1] = f"manager added {n} tasks"
        elif (line := _describe(e)) is not None:
            expected.append(line)
    printed = [m[2] for x in stdout.split("\n\n")[1].splitlines() if (m := _LINE.match(x))]
    refusals = [x for x in printed if x.startswith("the cap at work:")]
    assert [x for x in printed if x not in refusals] == expected
    assert printed[:3] == [
        "Node-BM registered as bootstrap_manager",
        "manager added 10 tasks",
        "assessment of 10 pending, 1 live: overloaded -> spawn_developer",
    ]


def test_every_assessment_describes_the_board_before_it(
    demo_run: tuple[str, dict[str, Any], list[Event]],
) -> None:
    """Replaying the events up to each assessment gives the pending count it reports:
    the monitor never assesses a board that is about to be filled."""
    _, _, events = demo_run
    pending = 0
    assessments = 0
    for e in events:
        if e.kind == "task_added":
            pending += 1
        elif e.kind == "task_claimed":
            pending -= 1
        elif e.data.get("outcome") == "pending":  # a lease recovered or released
            pending += 1
        elif e.kind == "assessment":
            assessments += 1
            assert e.data["pending"] == pending, e
            assert pending > 0 or assessments > 1, "the first assessment saw an empty board"
    assert assessments >= 2


def test_the_capacity_refusal_is_shown_as_the_point(
    demo_run: tuple[str, dict[str, Any], list[Event]],
) -> None:
    """The refusal is introduced as the cap doing its job, not as a failure."""
    stdout, _, _ = demo_run
    line = next(x for x in stdout.splitlines() if "Registration rejected" in x)
    assert re.fullmatch(
        r" *\d+\.\d\ds  the cap at work: Dev-extra asked to join a full cluster and was"
        r" turned away: ERROR: Cluster at capacity \(4 nodes\)\. Registration rejected\.",
        line,
    ), line
