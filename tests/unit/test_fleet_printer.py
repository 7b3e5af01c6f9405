"""What ``corral up`` prints for its agents' process events: a restart names the exit
it follows and the last line the process wrote to stderr, which the process_state
event carries from the host's report."""

from __future__ import annotations

from typing import Any

from corral.fleet.up import EventPrinter

CRASH = {
    "code": 1,
    "signal": None,
    "at": 5.0,  # before the fake clock's start: before every restart
    "describe": "exit code 1",
    "stderr_tail": [
        "Traceback (most recent call last):",
        "ModuleNotFoundError: No module named 'corral'",
        "",
    ],
}


def _report(cluster: Any, state: str, restarts: int, last_exit: Any, pid: int) -> None:
    cluster.report_processes(
        "h1",
        [
            {
                "agent": "worker-1",
                "state": state,
                "pid": pid,
                "restarts": restarts,
                "started_at": None,
                "last_beat": None,
                "flags": [],
                "last_exit": last_exit,
            }
        ],
    )


def test_a_restart_line_names_the_last_exit_and_its_last_stderr_line(sqlite_cluster: Any) -> None:
    lines: list[str] = []
    printer = EventPrinter(sqlite_cluster, lines.append, as_json=False)
    _report(sqlite_cluster, "RUNNING", 0, None, 101)
    _report(sqlite_cluster, "UNHEALTHY", 0, {**CRASH, "stderr_tail": []}, 101)
    _report(sqlite_cluster, "STARTING", 1, CRASH, 102)  # the tail is known by now
    printer.drain()
    restart = [e for e in sqlite_cluster.events() if e.kind == "process_state"][-1]
    assert (restart.data["exit"], restart.data["stderr"]) == (
        "exit code 1",
        "ModuleNotFoundError: No module named 'corral'",
    )
    texts = [line.split(" ", 1)[1] for line in lines]
    assert texts == [
        "spawned worker-1 (pid 101)",
        "worker-1 unhealthy",
        "restarted worker-1 (pid 102); last exit: exit code 1,"
        " stderr: ModuleNotFoundError: No module named 'corral'",
    ]


def test_a_restart_names_only_an_exit_from_before_it(sqlite_cluster: Any, clock: Any) -> None:
    """A restart after a heartbeat timeout (no exit reported) says no more; an exit the
    host reports after a restart is not that restart's cause."""
    lines: list[str] = []
    printer = EventPrinter(sqlite_cluster, lines.append, as_json=False)
    _report(sqlite_cluster, "UNHEALTHY", 0, None, 101)  # a heartbeat timeout: no exit
    _report(sqlite_cluster, "STARTING", 1, None, 102)
    clock.advance(10)
    later = {**CRASH, "at": clock.now(), "stderr_tail": ["  "]}
    _report(sqlite_cluster, "UNHEALTHY", 1, later, 102)
    clock.advance(1)
    _report(sqlite_cluster, "RUNNING", 2, later, 103)
    printer.drain()  # after every report: the first restart's lookup sees the later exit
    texts = [line.split(" ", 1)[1] for line in lines]
    assert texts[1] == "restarted worker-1 (pid 102)"
    assert texts[3] == "restarted worker-1 (pid 103); last exit: exit code 1"


def test_the_events_exit_fields_are_one_bounded_printable_line_each(
    sqlite_cluster: Any,
) -> None:
    """Whatever a host reports as its last exit, the event carries one printable line
    of at most 200 characters for each field (no newline or terminal escape reaches
    a reader's terminal), and nothing for a report without an exit."""
    odd = {
        "describe": "exit code 1\n" + "x" * 60_000,
        "stderr_tail": ["fine", "\x1b[31mboom\x1b[0m\r", "\x07\n"],
    }
    _report(sqlite_cluster, "RUNNING", 0, None, 101)
    _report(sqlite_cluster, "UNHEALTHY", 0, odd, 101)
    _report(sqlite_cluster, "STARTING", 1, {"describe": 7, "stderr_tail": "no list"}, 102)
    first, down, up = [e.data for e in sqlite_cluster.events() if e.kind == "process_state"]
    assert "exit" not in first and "stderr" not in first
    assert down["exit"] == "exit code 1 " + "x" * 188
    assert down["stderr"] == "[31mboom [0m"
    assert (up["exit"], up["stderr"]) == ("unknown", None)
