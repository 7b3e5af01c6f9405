"""The fleet in the cluster, as real processes: `corral supervise --url` reports its
processes to the cluster (embedded SQLite, and through a real `corral serve`), and a
restart requested through the cluster (the HTTP client, `corral --url http://…
process restart`) reaches the supervisor: the child is replaced (new pid, the old
one gone), the request is acknowledged as a `process_action_done` event, and the
restart count the cluster shows counts it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import corral
from corral.model import Event
from corral.types import Client
from tests.integration import test_supervisor_e2e as e2e
from tests.integration.test_supervisor_e2e import Supervise, alive, env, wait_for
from tests.support.backends.http import free_port

PY = sys.executable
state = e2e.state  # the fixture: the state dir, nothing of it left running afterwards
HOST = socket.gethostname()
TOKEN = "fleet-operator-token"


def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(
        "[supervisor]\nbackoff_base = 0.05\nbackoff_cap = 0.05\nbackoff_jitter = 0\n"
        '[[agents]]\nid = "web"\ncmd = "sleep"\nargs = ["1000"]\nheartbeat = "none"\n'
        'restart = "always"\nstop_timeout = 5\n'
        '[[agents]]\nid = "db"\ncmd = "sleep"\nargs = ["1000"]\nheartbeat = "none"\n'
        'restart = "never"\n'
    )
    return path


class ClusterSupervise(Supervise):
    """`corral --url URL supervise MANIFEST --state-dir STATE`, the operator token in
    its environment."""

    def __init__(self, url: str, manifest: Path, state: Path) -> None:
        self.state = state
        self.sock = state / "control.sock"
        self.out = open(state.parent / "supervise.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                PY,
                "-m",
                "corral",
                "--url",
                url,
                "supervise",
                str(manifest),
                "--state-dir",
                str(state),
            ],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env={**env(), "CORRAL_TOKEN": TOKEN},
            start_new_session=True,
        )


def running_pid(c: Client, agent: str, other_than: int | None = None) -> int | None:
    """The pid the cluster shows for ``agent`` once RUNNING (and not ``other_than``)."""
    for p in c.list_processes(HOST):
        if p.agent == agent and p.state == "RUNNING" and p.pid and p.pid != other_than:
            return int(p.pid)
    return None


def acked(c: Client, request: Event) -> Event | None:
    for e in c.events(since=request.seq, limit=10_000):
        if e.kind == "process_action_done" and e.data["request"] == request.seq:
            return e
    return None


def restart_reaches_the_supervisor(c: Client, sup: Supervise, request: Any) -> int:
    """``request()`` asks for a restart of web; returns web's new pid once the
    cluster and the supervisor agree on it and the request is acknowledged."""
    old = wait_for(lambda: running_pid(c, "web"), what="web RUNNING in the cluster")
    assert sup.status()["web"]["pid"] == old
    req = request()
    assert (req.kind, req.data) == (
        "process_action_requested",
        {"host": HOST, "agent": "web", "action": "restart", "actor": "operator"},
    )
    done = wait_for(lambda: acked(c, req), what="the acknowledgement")
    assert done.data["ok"] is True and done.data["action"] == "restart"
    new: int = wait_for(lambda: running_pid(c, "web", other_than=old), what="web's new pid")
    assert sup.status()["web"]["pid"] == new  # the supervisor's own child
    assert alive(new)
    wait_for(lambda: not alive(old), what="the old process gone")
    changes = [
        (e.data["from"], e.data["to"])
        for e in c.events(since=req.seq, limit=10_000)
        if e.kind == "process_state" and e.data["agent"] == "web"
    ]
    assert ("RUNNING", "STOPPED") in changes and changes[-1][1] == "RUNNING"
    return new


def test_a_restart_through_an_embedded_cluster_reaches_the_supervisor(
    tmp_path: Path, state: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    c = corral.connect(url)
    sup = ClusterSupervise(url, manifest(tmp_path), state)
    try:
        wait_for(lambda: running_pid(c, "db"), what="db reported")
        procs = {p.agent: p for p in c.list_processes()}
        assert set(procs) == {"web", "db"} and {p.host for p in procs.values()} == {HOST}
        assert procs["web"].started_at is not None and procs["web"].restarts == 0
        restart_reaches_the_supervisor(
            c, sup, lambda: c.request_process_action(HOST, "web", "restart")
        )
        # A stop through the cluster: STOPPED there too, and it stays stopped.
        db = running_pid(c, "db")
        req = c.request_process_action(HOST, "db", "stop")
        wait_for(lambda: acked(c, req), what="the stop acknowledged")
        wait_for(
            lambda: [p.state for p in c.list_processes(HOST) if p.agent == "db"] == ["STOPPED"],
            what="db STOPPED in the cluster",
        )
        assert db is not None and not alive(db) and sup.status()["db"]["state"] == "STOPPED"
    finally:
        sup.close()
        c.close()
    # A clean shutdown reports every process STOPPED.
    assert {p.state for p in corral.connect(url).list_processes()} == {"STOPPED"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A real `corral serve` over a fresh SQLite file, operator token ``TOKEN``."""
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        proc = _serve_on(tmp_path, port, log)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "corral", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env(), "CORRAL_TOKEN": TOKEN},
    )


def test_a_restart_through_corral_serve_reaches_the_supervisor(
    tmp_path: Path, state: Path, server: str
) -> None:
    c = corral.connect(server, token=TOKEN)
    sup = ClusterSupervise(server, manifest(tmp_path), state)
    try:
        wait_for(lambda: running_pid(c, "db"), what="db reported through HTTP")
        # The HTTP client asks.
        pid = restart_reaches_the_supervisor(
            c, sup, lambda: c.request_process_action(HOST, "web", "restart")
        )
        # The CLI asks (the host is the only one reporting web).
        asked: list[Event] = []

        def by_cli() -> Event:
            r = cli(server, "process", "restart", "web", "--json")
            assert r.returncode == 0, r.stderr
            asked.append(Event(**json.loads(r.stdout)))
            return asked[-1]

        assert restart_reaches_the_supervisor(c, sup, by_cli) != pid
        listed = cli(server, "process", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {r["agent"]: r for r in json.loads(listed.stdout)}
        assert rows["web"]["pid"] == sup.status()["web"]["pid"]
        assert rows["web"]["restarts"] == sup.status()["web"]["restarts"] == 2  # the two asked
        # Every surface's read_state shows the host's processes.
        text = cli(server, "status").stdout
        lines = [line.split() for line in text.split("\nProcesses\n")[1].splitlines()]
        assert [HOST, "web", "RUNNING"] in [r[:3] for r in lines]
        assert {p.agent for p in c.read_state().processes} == {"web", "db"}
        # An agent no host reports: exit 2, one line naming it; nothing requested.
        before = c.events(limit=10_000)
        bad = cli(server, "process", "restart", "ghost")
        assert bad.returncode == 2 and bad.stderr.splitlines() == [
            "error: agent: no host reports agent ghost"
        ]
        assert c.events(limit=10_000) == before
    finally:
        sup.close()
        c.close()
    assert os.path.exists(state / "cluster.cursor")


def test_a_supervised_sdk_worker_joins_through_its_environment(
    tmp_path: Path, state: Path, server: str
) -> None:
    """A `corral worker` given only its id and role finds the cluster and its node
    token in the environment the supervisor gave it, registers and heartbeats, and
    those beats (heartbeat = "cluster") make it RUNNING."""
    path = tmp_path / "fleet.toml"
    args = json.dumps(
        [
            "-m",
            "corral",
            "worker",
            "--id",
            "w1",
            "--role",
            "developer",
            "--heartbeat-interval",
            "0.2",
            "--",
            "true",
        ]
    )
    path.write_text(
        "[supervisor]\nheartbeat_interval = 0.2\nheartbeat_timeout = 10\n"
        f'[[agents]]\nid = "w1"\ncmd = {json.dumps(PY)}\nargs = {args}\nheartbeat = "cluster"\n'
    )
    c = corral.connect(server, token=TOKEN)
    sup = ClusterSupervise(server, path, state)
    try:
        wait_for(lambda: sup.running("w1"), what="w1 RUNNING by its cluster heartbeat")
        node = c.get_node("w1")
        assert node.role == "developer" and node.last_heartbeat is not None
        reasons = [t["reason"] for t in e2e.transitions(state, "w1")]
        assert reasons[:2] == ["spawn", "first heartbeat"]
        pid = sup.status()["w1"]["pid"]
        environ = psutil.Process(pid).environ()
        assert environ["CORRAL_URL"] == server and environ["CORRAL_AGENT_ID"] == "w1"
        assert environ["CORRAL_TOKEN"] != TOKEN  # a node token for w1, not the operator's
    finally:
        sup.close()
        c.close()


def _serve_on(tmp_path: Path, port: int, log: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """`corral serve` over ``served.db`` on ``port`` (stderr to ``log``), once it answers."""
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "corral",
            "--url",
            f"sqlite:///{tmp_path / 'served.db'}",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env={**env(), "CORRAL_TOKEN": TOKEN},
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        log_text = (tmp_path / "serve.log").read_text() if log is not subprocess.DEVNULL else ""
        assert proc.poll() is None, f"corral serve exited: {log_text}"
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, what="corral serve healthy")
    return proc


def test_a_cluster_that_cannot_be_reached_is_no_silence_of_its_agents(
    tmp_path: Path, state: Path
) -> None:
    """An agent whose heartbeat is the cluster's, and `corral serve` SIGKILLed for
    three times the agent's heartbeat timeout: nobody can tell whether it beats, so it
    stays RUNNING, the same process. Once the cluster is back, its silence counts
    again: with no beat it goes UNHEALTHY one timeout later."""
    timeout = 1.5
    path = tmp_path / "fleet.toml"
    path.write_text(
        f"[supervisor]\nheartbeat_interval = 0.2\nheartbeat_timeout = {timeout}\n"
        '[[agents]]\nid = "n1"\ncmd = "sleep"\nargs = ["1000"]\nheartbeat = "cluster"\n'
        'restart = "never"\n'
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = _serve_on(tmp_path, port)
    c = corral.connect(url, token=TOKEN)
    c.register_node("n1", "developer", heartbeat_interval=60)
    sup = ClusterSupervise(url, path, state)
    try:
        wait_for(lambda: c.heartbeat("n1") and sup.running("n1"), what="n1 RUNNING")
        pid = sup.status()["n1"]["pid"]
        serve.kill()
        serve.wait(10)
        down = time.monotonic()
        wait_for(lambda: time.monotonic() - down > 3 * timeout, what="an outage of 3 timeouts")
        assert sup.status()["n1"]["state"] == "RUNNING"
        assert sup.status()["n1"]["pid"] == pid
        serve = _serve_on(tmp_path, port)
        wait_for(
            lambda: sup.status()["n1"]["state"] == "UNHEALTHY" or not alive(pid),
            what="n1 judged silent once the cluster is back",
        )
        states = [(t["from"], t["to"]) for t in e2e.transitions(state, "n1")]
        assert states.count(("RUNNING", "UNHEALTHY")) == 1, states
    finally:
        sup.close()
        c.close()
        serve.send_signal(signal.SIGTERM)
        serve.wait(20)
