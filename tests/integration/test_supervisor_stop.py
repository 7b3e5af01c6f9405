"""Stopping and idling, with real processes and signals: the stop signal goes to the
agent's group and descendants that escaped it are swept by the environment marker;
SIGINT / SIGTERM to a real `corral supervise` stops the agents in reverse dependency
order; and an idle supervisor has one thread and does not wake up (exits are events,
not polls)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.errors import StoreUnavailableError
from corral.supervisor.control import request
from corral.supervisor.process import find_marked
from tests.integration.test_supervisor_daemon import (
    make,
    manifest,
    st,
    supervise,
    transitions,
    until,
)
from tests.integration.test_supervisor_e2e import env, wait_for

PY = sys.executable


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# The agent: notes its stop signal, and starts a descendant that leaves the agent's
# process group and session (setsid) but keeps the environment, marker included.
ESCAPER = (
    "import signal, subprocess, sys, time\n"
    "out = sys.argv[1]\n"
    "def bye(sig, frame):\n"
    "    open(out, 'a').write(signal.Signals(sig).name + '\\n'); sys.exit(0)\n"
    "signal.signal(signal.SIGINT, bye)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "open(out + '.pid', 'w').write(str(p.pid))\n"
    "while True: time.sleep(1)\n"
)


def test_stop_signal_to_the_group_then_escaped_descendants_are_swept(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    agent = {
        "id": "a",
        "cmd": PY,
        "args": ["-c", ESCAPER, str(notes)],
        "stop_signal": "INT",
        "heartbeat": "none",
    }
    sup = make(tmp_path, manifest([agent]))
    escaped: list[int] = []

    async def scenario() -> None:
        pidfile = Path(f"{notes}.pid")
        await until(lambda: pidfile.exists() and pidfile.read_text(), what="descendant started")
        escaped.append(int(pidfile.read_text()))
        pid = st(sup, "a")["pid"]
        assert os.getsid(escaped[0]) != os.getsid(pid)  # out of the agent's session and group
        assert psutil.Process(escaped[0]).environ()["CORRAL_AGENT_ID"] == "a"
        s = await sup.stop("a")
        assert s["state"] == "STOPPED" and s["last_exit"]["describe"] == "exit code 0"
        assert notes.read_text() == "SIGINT\n"  # the manifest's stop_signal, not SIGTERM
        await until(lambda: gone(escaped[0]), what="the escaped descendant killed")

    try:
        supervise(sup, scenario)
    finally:
        for pid in escaped:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
    own = (tmp_path / "state/logs/supervisor/supervisor.log").read_text().splitlines()
    swept = [json.loads(x) for x in own if "killing escaped descendant" in x]
    assert [(r["agent"], r["pid"]) for r in swept] == [("a", escaped[0])]


# ---- a real `corral supervise` ------------------------------------------------------------

NOTE_TERM = (
    "import signal, sys, time\n"
    "def bye(sig, frame):\n"
    "    open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "open(sys.argv[1] + '.up', 'a').write(sys.argv[2] + '\\n')\n"
    "while True: time.sleep(1)\n"
)


class Run:
    """`corral supervise` as a real process (its own session), stopped at the end."""

    def __init__(self, tmp_path: Path, body: str) -> None:
        self.manifest = tmp_path / "fleet.toml"
        self.manifest.write_text(body)
        self.state = tmp_path / "state"
        self.out = tmp_path / "supervise.out"
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen(
                [
                    PY,
                    "-m",
                    "corral",
                    "supervise",
                    str(self.manifest),
                    "--state-dir",
                    str(self.state),
                ],
                env=env(),
                start_new_session=True,
                stdout=f,
                stderr=subprocess.STDOUT,
            )

    def status(self) -> list[dict[str, Any]]:
        assert self.proc.poll() is None, self.out.read_text()
        try:
            return list(request(self.state / "control.sock", "status", timeout=10))
        except StoreUnavailableError:
            return []

    def all_running(self) -> list[dict[str, Any]]:
        rows = self.status()
        return rows if rows and all(r["state"] == "RUNNING" for r in rows) else []

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for p in find_marked(self.state):  # agents outlive a killed supervisor
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int((self.state / "logd.pid").read_text().split()[0]), signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_corral_supervise_stops_in_reverse_dependency_order(
    tmp_path: Path, sig: signal.Signals
) -> None:
    order = tmp_path / "order"

    def agent(agent_id: str, deps: list[str]) -> str:
        args = json.dumps(["-c", NOTE_TERM, str(order), agent_id])
        return (
            f'[[agents]]\nid = "{agent_id}"\ncmd = {json.dumps(PY)}\nargs = {args}\n'
            f"depends_on = {json.dumps(deps)}\n"
        )

    run = Run(tmp_path, agent("app", ["mid"]) + agent("infra", []) + agent("mid", ["infra"]))
    try:
        up = Path(f"{order}.up")
        wait_for(lambda: up.exists() and len(up.read_text().split()) == 3, what="all up")
        spawned = [r["agent"] for r in transitions(run.state) if r["to"] == "STARTING"]
        assert spawned == ["infra", "mid", "app"]  # dependency order
        run.proc.send_signal(sig)
        assert run.proc.wait(30) == 0
        assert order.read_text().split() == ["app", "mid", "infra"]
        states = {r["agent"]: r["to"] for r in transitions(run.state)}
        assert set(states.values()) == {"STOPPED"}
    finally:
        run.close()


@pytest.mark.slow
def test_an_idle_supervisor_has_one_thread_and_does_not_wake_up(tmp_path: Path) -> None:
    n = 20
    body = "".join(
        f'[[agents]]\nid = "s{i}"\ncmd = "sleep"\nargs = ["600"]\nheartbeat = "none"\n'
        for i in range(n)
    )
    run = Run(tmp_path, body)
    try:
        rows = wait_for(run.all_running, what="20 agents RUNNING")
        assert len(rows) == n
        sup = psutil.Process(run.proc.pid)
        logd = psutil.Process(int((run.state / "logd.pid").read_text().split()[0]))
        # no thread per child (exits are pidfds on the event loop), none in logd either
        assert (sup.num_threads(), logd.num_threads()) == (1, 1)

        def switches() -> list[int]:
            return [p.num_ctx_switches().voluntary for p in (sup, logd)]

        # what starting left to do (answering status, a last pids.json write) is done
        # once two looks 0.5 s apart see the same counts
        seen = [switches()]

        def quiet() -> bool:
            time.sleep(0.5)
            seen.append(switches())
            return seen[-1] == seen[-2]

        wait_for(quiet, timeout=15, what="the supervisor quiet")
        before = switches()
        cpu = [sum(p.cpu_times()[:2]) for p in (sup, logd)]
        time.sleep(3.0)  # the window observed: nothing happens, nothing should run
        # a process that never wakes makes no voluntary context switch
        assert switches() == before
        assert [sum(p.cpu_times()[:2]) for p in (sup, logd)] == cpu
        assert [r["pid"] for r in run.status()] == [r["pid"] for r in rows]  # still answers
    finally:
        run.close()
