"""Probe heartbeats (``heartbeat = { http | tcp | exec = ... }``) with a real
stand-in service: the first success makes a STARTING agent RUNNING, ``failures``
failures in a row make a RUNNING one UNHEALTHY (stopped, then restarted by its
policy), and a slow probe never holds up the supervisor's loop."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from corral.supervisor.manifest import ManifestError, Probe
from tests.integration.test_supervisor_daemon import (
    PY,
    make,
    manifest,
    st,
    supervise,
    transitions,
    until,
)

# A stand-in service: listens on 127.0.0.1:argv[1] after argv[2] seconds and answers
# GET with 200. Once the file argv[3] appears it removes it and, in mode "close"
# (argv[4]), closes its listener (alive, unreachable), in mode "500" answers 500.
SERVICE = (
    "import http.server, os, sys, threading, time\n"
    "port, delay, trigger, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]\n"
    "broken = False\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(500 if broken else 200); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "time.sleep(delay)\n"
    "srv = http.server.HTTPServer(('127.0.0.1', port), H)\n"
    "threading.Thread(target=srv.serve_forever, daemon=True).start()\n"
    "while not os.path.exists(trigger): time.sleep(0.02)\n"
    "os.unlink(trigger)\n"
    "broken = True\n"
    "if mode == 'close':\n"
    "    srv.shutdown(); srv.server_close()\n"
    "while True: time.sleep(1)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service(tmp_path: Path, port: int, mode: str, heartbeat: dict[str, Any]) -> dict[str, Any]:
    args = ["-c", SERVICE, str(port), "0.4", str(tmp_path / "break"), mode]
    return {"id": "svc", "restart": "always", "cmd": PY, "args": args, "heartbeat": heartbeat}


@pytest.mark.parametrize("kind", ["tcp", "http"])
def test_a_probe_makes_it_running_and_failures_in_a_row_restart_it(
    tmp_path: Path, kind: str
) -> None:
    """STARTING until the service listens (its first successful probe), RUNNING;
    then it stops answering (tcp: the listener closed; http: status 500) while its
    process lives: after 2 failed probes it is UNHEALTHY, stopped and restarted."""
    port = free_port()
    target = f"127.0.0.1:{port}" if kind == "tcp" else f"http://127.0.0.1:{port}/health"
    hb = {kind: target, "interval": 0.1, "timeout": 0.5, "failures": 2}
    mode = "close" if kind == "tcp" else "500"
    sup = make(tmp_path, manifest([service(tmp_path, port, mode, hb)], startup_timeout=10))

    async def scenario() -> None:
        await until(lambda: st(sup, "svc")["state"] == "STARTING", what="STARTING")
        first = st(sup, "svc")["pid"]
        await asyncio.sleep(0.2)  # not listening yet: still STARTING
        assert st(sup, "svc")["state"] == "STARTING"
        await until(lambda: st(sup, "svc")["state"] == "RUNNING", what="RUNNING")
        assert st(sup, "svc")["heartbeat"] == kind
        (tmp_path / "break").write_text("")
        await until(lambda: st(sup, "svc")["state"] == "UNHEALTHY", what="UNHEALTHY")
        await until(
            lambda: st(sup, "svc")["state"] == "RUNNING" and st(sup, "svc")["pid"] != first,
            what="restarted and RUNNING",
        )
        assert st(sup, "svc")["restarts"] == 1

    supervise(sup, scenario)
    reasons = [r["reason"] for r in transitions(tmp_path / "state", "svc")]
    assert reasons[:2] == ["spawn", "first heartbeat"]
    assert reasons[2].startswith("probe failed: ") and "(2 in a row)" in reasons[2]


def test_an_exec_probe_and_a_slow_one_never_blocks_the_loop(tmp_path: Path) -> None:
    """``exec``: RUNNING once the command exits 0. Each probe takes 0.3 s; the
    supervisor's loop (which runs this scenario too) never stalls meanwhile."""
    ready = tmp_path / "ready"
    check = (
        "import os, sys, time; time.sleep(0.3)\n"
        f"sys.exit(0 if os.path.exists({str(ready)!r}) else 1)"
    )
    hb = {"exec": [PY, "-c", check], "interval": 0.05, "timeout": 2, "failures": 3}
    agent = {"id": "db", "cmd": "sleep", "args": ["60"], "heartbeat": hb}
    sup = make(tmp_path, manifest([agent], startup_timeout=20))

    async def scenario() -> None:
        await until(lambda: st(sup, "db")["state"] == "STARTING", what="STARTING")
        gaps = []
        last = t0 = time.monotonic()
        while time.monotonic() - t0 < 1.2:  # several probes run meanwhile
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
        assert max(gaps) < 0.25, max(gaps)  # a probe waited on the loop: 0.3 s or more
        assert st(sup, "db")["state"] == "STARTING"
        ready.write_text("")
        await until(lambda: st(sup, "db")["state"] == "RUNNING", what="RUNNING")

    supervise(sup, scenario)


def test_probe_tables_in_the_manifest() -> None:
    """A probe table: exactly one of http/tcp/exec, with interval, timeout and
    failures (defaults: the heartbeat interval, 2 s, 3); anything else is refused
    naming the field."""
    m = manifest(
        [
            {"id": "mint", "cmd": "x", "heartbeat": {"http": "http://127.0.0.1:3338/v1/info"}},
            {"id": "relay", "cmd": "x", "heartbeat": {"tcp": "127.0.0.1:7777", "failures": 5}},
            {"id": "pg", "cmd": "x", "heartbeat": {"exec": ["pg_isready"], "interval": 1}},
        ],
        heartbeat_interval=4,
    )
    mint, relay, pg = m.agents
    assert (mint.heartbeat, mint.probe) == (
        "http",
        Probe("http", "http://127.0.0.1:3338/v1/info", interval=4, timeout=2, failures=3),
    )
    assert relay.heartbeat == "tcp" and relay.probe == Probe("tcp", "127.0.0.1:7777", 4, 2, 5)
    assert pg.probe == Probe("exec", ("pg_isready",), interval=1, timeout=2, failures=3)
    bad = {
        "heartbeat": {"tcp": "x:1", "http": "http://a"},
        "heartbeat.tcp": {"tcp": "no-port"},
        "heartbeat.http": {"http": "ftp://a"},
        "heartbeat.exec": {"exec": []},
        "heartbeat.failures": {"tcp": "a:1", "failures": 0},
        "heartbeat.every": {"tcp": "a:1", "every": 1},
    }
    for field, hb in bad.items():
        with pytest.raises(ManifestError) as e:
            manifest([{"id": "a", "cmd": "x", "heartbeat": hb}])
        assert e.value.field == field, (field, e.value)


def test_a_probed_agents_deadline_is_its_startup_timeout_only() -> None:
    """A probed agent's state changes at a probe's answer, not at a timeout after
    its last beat: STARTING wakes the supervisor at its startup timeout; RUNNING
    has no heartbeat deadline (failures in a row decide)."""
    from corral.supervisor.agent import Agent
    from corral.supervisor.policy import RestartTracker, State
    from corral.supervisor.process import Child

    spec = manifest(
        [{"id": "a", "cmd": "x", "heartbeat": {"tcp": "h:1"}}], startup_timeout=7
    ).agents[0]
    a = Agent(spec, RestartTracker())
    a.child = Child(pid=1, start_time=0.0, pidfd=-1)
    a.state, a.started_at, a.last_beat = State.STARTING, 100.0, None
    assert a.deadline() == 107.0
    a.state, a.last_beat = State.RUNNING, 105.0
    assert a.deadline() is None
    a.restart_at, a.child = 120.0, None
    assert a.deadline() == 120.0
