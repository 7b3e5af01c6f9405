"""A dependency's outage and a supervisor's crash, with real processes and signals:
a dependent restarted while its dependency is down waits for it (WAITING, then
started once it is RUNNING); a supervisor started again adopts everything before
any policy runs, so a dependency that died meanwhile pauses its adopted dependents;
the backoff step, the due restart and the restarts in the window survive the crash;
and the state log says adoption from the recorded state, each transition a legal one."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral.cli.supervise import status_table
from corral.supervisor.policy import State, can_transition
from tests.integration.test_supervisor_daemon import (
    PY,
    Daemon,
    alive,
    make,
    manifest,
    st,
    supervise,
    transitions,
    until,
    wait_for,
)

# Notes SIGUSR1 / SIGUSR2 and each start (with its time) in the file argv[1].
USER = (
    "import signal, sys, time\n"
    "out = sys.argv[1]\n"
    "def note(sig, frame):\n"
    "    open(out, 'a').write(signal.Signals(sig).name + '\\n')\n"
    "signal.signal(signal.SIGUSR1, note)\n"
    "signal.signal(signal.SIGUSR2, note)\n"
    "open(out, 'a').write(f'up {time.time()}\\n')\n"
    "while True: time.sleep(1)\n"
)
# A pipe-heartbeat service that needs argv[1] seconds before its first beat.
SLOW = (
    "import sys, time\n"
    "time.sleep(float(sys.argv[1]))\n"
    "while True:\n"
    "    print(f'HEARTBEAT {time.time()} healthy', flush=True)\n"
    "    time.sleep(0.1)\n"
)


def notes(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def starts(path: Path) -> list[float]:
    return [float(n.split()[1]) for n in notes(path) if n.startswith("up ")]


def legal(recs: list[dict[str, Any]]) -> None:
    """Every transition line is one the state table allows; adoptions are marked."""
    for r in recs:
        if r.get("adopted"):
            continue
        old, new = State(r["from"]), State(r["to"])
        assert can_transition(old, new), r


def test_a_dependent_restarted_during_its_dependencys_outage_waits_for_it(
    tmp_path: Path,
) -> None:
    """Kill -9 the relay and its user at the same moment: the user's backoff ends
    while the relay is still STARTING, so the user is held WAITING on the relay, and
    spawned only once the relay is RUNNING (issue 26, defect 1)."""
    user_notes = tmp_path / "user"
    agents: list[dict[str, Any]] = [
        {
            "id": "relay",
            "restart": "always",
            "heartbeat": "pipe",
            "startup_timeout": 20,
            "cmd": PY,
            "args": ["-c", SLOW, "1.0"],
        },
        {"id": "user", "depends_on": ["relay"], "cmd": PY, "args": ["-c", USER, str(user_notes)]},
    ]
    sup = make(tmp_path, manifest(agents, backoff_base=0.1, backoff_cap=0.1))
    state = tmp_path / "state"

    async def scenario() -> None:
        await until(lambda: starts(user_notes), what="user up")
        relay, user = st(sup, "relay")["pid"], st(sup, "user")["pid"]
        os.killpg(user, signal.SIGKILL)
        os.killpg(relay, signal.SIGKILL)
        await until(lambda: st(sup, "user")["state"] == "WAITING" and not st(sup, "user")["pid"])
        assert st(sup, "user")["waiting_on"] == ["relay"]
        assert st(sup, "relay")["state"] in ("UNHEALTHY", "STARTING")
        await until(lambda: len(starts(user_notes)) == 2, what="user started again")
        assert st(sup, "relay")["state"] == "RUNNING"

    supervise(sup, scenario)
    relay_running = [r["ts"] for r in transitions(state, "relay") if r["to"] == "RUNNING"][-1]
    user_spawns = [r["ts"] for r in transitions(state, "user") if r["to"] == "STARTING"]
    assert user_spawns[-1] >= relay_running
    assert starts(user_notes)[-1] >= relay_running
    user = [(r["from"], r["to"]) for r in transitions(state, "user")]
    assert ("UNHEALTHY", "WAITING") in user and ("WAITING", "STARTING") in user
    legal(transitions(state))


def test_an_operator_start_waits_for_a_stopped_dependency(tmp_path: Path) -> None:
    """``ctl start`` of a dependent whose dependency is STOPPED holds it WAITING
    (no process) until the dependency runs again."""
    user_notes = tmp_path / "user"
    agents: list[dict[str, Any]] = [
        {"id": "relay", **{"cmd": "sleep", "args": ["60"]}},
        {"id": "user", "depends_on": ["relay"], "cmd": PY, "args": ["-c", USER, str(user_notes)]},
    ]
    sup = make(tmp_path, manifest(agents))

    async def scenario() -> None:
        await until(lambda: starts(user_notes), what="user up")
        await sup.stop("user")
        await sup.stop("relay")
        s = await sup.start("user")
        assert s["state"] == "WAITING" and s["pid"] is None and s["waiting_on"] == ["relay"]
        assert "\nuser: waiting on relay;" in status_table(sup.status())
        await sup.start("relay")
        await until(lambda: len(starts(user_notes)) == 2, what="user started")
        assert st(sup, "user")["state"] == "RUNNING"

    supervise(sup, scenario)
    legal(transitions(tmp_path / "state"))


def write_fleet(tmp_path: Path, users: int, **settings: Any) -> Path:
    script = tmp_path / "user.py"
    script.write_text(USER)
    lines = ["[supervisor]", *(f"{k} = {v}" for k, v in settings.items())]
    lines += ["[[agents]]", 'id = "relay"', 'cmd = "sleep"', 'args = ["60"]', 'restart = "always"']
    for i in range(users):
        lines += ["[[agents]]", f'id = "user{i}"', f'cmd = "{PY}"']
        lines += [f'args = ["{script}", "{tmp_path / f"user{i}.notes"}"]', 'depends_on = ["relay"]']
    path = tmp_path / "fleet.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_adopted_dependents_pause_when_their_dependency_died_meanwhile(tmp_path: Path) -> None:
    """kill -9 the supervisor, kill -9 the relay, start the supervisor again: every
    adopted user gets SIGUSR1 (WAITING on relay) and SIGUSR2 once the relay runs
    again; the state log says ``adopted`` from the recorded state and holds only
    legal transitions (issue 26, defects 2 and 4)."""
    state = tmp_path / "state"
    m = write_fleet(tmp_path, 3, backoff_base=0.5, backoff_cap=0.5, backoff_jitter=0)
    users = [f"user{i}" for i in range(3)]
    first = Daemon(m, state)
    try:
        pids = wait_for(lambda: first.running("relay", *users), what="first run")
    finally:
        first.kill()
    os.killpg(pids["relay"], signal.SIGKILL)
    wait_for(lambda: not alive(pids["relay"]), what="relay gone")
    lines_before = len(transitions(state))
    second = Daemon(m, state)
    try:
        now = wait_for(
            lambda: (r := second.running("relay", *users)) and r["relay"] != pids["relay"] and r,
            what="relay restarted",
        )
        assert {u: now[u] for u in users} == {u: pids[u] for u in users}  # adopted
        for u in users:

            def resumed(u: str = u) -> bool:
                return notes(tmp_path / f"{u}.notes")[1:] == ["SIGUSR1", "SIGUSR2"]

            wait_for(resumed, what=f"{u} paused and resumed")
    finally:
        assert second.stop() == 0
    recs = transitions(state)[lines_before:]
    legal(recs)
    adopted = [r for r in recs if r.get("adopted")]
    assert sorted(r["agent"] for r in adopted) == users
    assert all(r["from"] == r["to"] == "RUNNING" for r in adopted)
    relay = [r for r in recs if r["agent"] == "relay"]
    assert (relay[0]["from"], relay[0]["to"]) == ("RUNNING", "UNHEALTHY")
    assert relay[0]["restart_in"] == 0.5  # the restart granted, with its delay
    for u in users:
        seen = [(r["from"], r["to"]) for r in recs if r["agent"] == u and not r.get("adopted")]
        assert seen[:2] == [("RUNNING", "WAITING"), ("WAITING", "RUNNING")], (u, seen)


@pytest.mark.slow
def test_backoff_and_restart_budget_survive_a_supervisor_crash(tmp_path: Path) -> None:
    """An agent crash-looping with backoff 0.5, 1, 2, 4 s and a limit of 4
    restarts: the supervisor is killed while the third restart waits 2 s. The new
    one starts it no earlier than it was due, gives the next crash 4 s, and the
    crash after the fourth restart exhausts it (issue 26, defect 3)."""
    state = tmp_path / "state"
    path = tmp_path / "fleet.toml"
    path.write_text(
        "[supervisor]\nbackoff_base = 0.5\nbackoff_cap = 16\nbackoff_jitter = 0\n"
        "restart_limit = 4\nrestart_window = 300\n"
        '[[agents]]\nid = "loop"\ncmd = "sh"\nargs = ["-c", "sleep 0.05; exit 1"]\n'
    )
    first = Daemon(path, state)
    try:
        wait_for(
            lambda: (
                (r := first.pids().get("loop")) and r["restarts"] == 3 and r["state"] == "UNHEALTHY"
            ),
            what="third restart waiting",
        )
    finally:
        first.kill()
    third = [r for r in transitions(state, "loop") if r["to"] == "UNHEALTHY"][-1]
    due = third["ts"] + third["restart_in"] - 0.05  # the exit was seen just before
    second = Daemon(path, state)
    try:
        wait_for(
            lambda: (r := second.pids().get("loop")) and EXHAUSTED in r["flags"],
            timeout=30,
            what="restart-exhausted",
        )
        final = second.pids()["loop"]
    finally:
        assert second.stop() == 0
    recs = transitions(state, "loop")
    later = [r for r in recs if r["ts"] > third["ts"]]  # from the third restart's wait
    spawns = [r["ts"] for r in later if r["to"] == "STARTING"]
    assert spawns and spawns[0] >= due - 0.01  # not before it was due
    delays = [r.get("restart_in") for r in recs if r["to"] == "UNHEALTHY"]
    assert delays == [0.5, 1.0, 2.0, 4.0, None], delays
    assert final["restarts"] == 4 and final["state"] == "STOPPED"
    legal(recs)


EXHAUSTED = "restart-exhausted"


def test_a_crash_tail_holds_that_runs_stderr_only(tmp_path: Path) -> None:
    """The stderr tail recorded for an exit is the lines that run wrote, not those
    of the runs before it in the same ``stderr.log`` (issue 26, defect 11)."""
    count = tmp_path / "count"
    code = (
        "import os, sys\n"
        f"p = {str(count)!r}\n"
        "n = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\n"
        "for i in range(5 if n == 0 else 1): print(f'run {n} line {i}', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    agent = {"id": "a", "restart": "on-failure", "cmd": PY, "args": ["-c", code]}
    sup = make(tmp_path, manifest([agent], restart_limit=1, backoff_base=0.05))

    async def scenario() -> None:
        await until(lambda: EXHAUSTED in st(sup, "a")["flags"], what="exhausted")
        await until(lambda: (st(sup, "a")["last_exit"] or {}).get("stderr_tail"), what="tail")
        assert st(sup, "a")["last_exit"]["stderr_tail"] == ["run 1 line 0"]

    supervise(sup, scenario)
    log = (tmp_path / "state/logs/a/stderr.log").read_text().splitlines()
    assert len(log) == 6  # both runs are in the file


def test_status_says_why_a_program_could_not_start(tmp_path: Path) -> None:
    """``ctl status`` of an agent whose program cannot be started shows the reason,
    not only ``exit code 127`` (issue 26, defect 11)."""
    agent = {"id": "ghost", "cmd": "/nonexistent/prog", "restart": "never"}
    sup = make(tmp_path, manifest([agent]))

    async def scenario() -> None:
        await until(lambda: st(sup, "ghost")["last_exit"], what="spawn failed")

    supervise(sup, scenario)
    text = status_table(json.loads(json.dumps(sup.status())), now=time.time())
    assert "ghost: last exit: cannot start '/nonexistent/prog': No such file or directory" in text
    assert sys.executable  # the table is the CLI's own rendering
