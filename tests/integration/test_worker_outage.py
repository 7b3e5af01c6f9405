"""Workers ride out a store that blinks (issue 26, defect 7), as real processes.

``corral worker`` processes and an SDK worker process against a real ``corral serve``
that is SIGKILLed and started again on the same port 1 s later, and against
PostgreSQL whose every session is ended with ``pg_terminate_backend``: no worker
exits, no lease is recovered, every task is done once. A claim whose answer is lost
(the server SIGKILLed after its commit, before its reply) is answered again with the
same task. The policy itself, with an injected clock: ``tests/unit/test_outage.py``; the
longer run: ``bench/worker_outage.py``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.outage import tolerant
from tests.support.backends import postgres as pg
from tests.support.backends.http import free_port
from tests.support.outage_procs import (
    Fleet,
    Partition,
    Serve,
    add_board,
    check_done_once,
    env_for,
    tally,
    terminate_sessions,
    wait_for,
)


@pytest.fixture
def sqlite_serve(tmp_path: Path) -> Iterator[Serve]:
    serve = Serve(f"sqlite:///{tmp_path / 'board.db'}", tmp_path)
    serve.start()
    yield serve
    serve.stop()


def test_workers_ride_out_a_sigkill_and_restart_of_corral_serve(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """The issue's reproduction: three ``corral worker`` processes and an SDK worker on
    ``corral serve`` (its monitor on, workers beating every 2 s: dead after 6 s),
    the server SIGKILLed with tasks in flight and started on the same port 1 s later.
    Every worker stays up, no lease is recovered, and every task is run and done once
    (the task processes in flight finish and their completions are accepted)."""
    serve = sqlite_serve
    n = 24
    client = corral.connect(serve.url, token=serve.token)
    add_board(client, n)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=0.4)
    try:
        for i in range(3):
            fleet.cli(f"w{i}", serve.url)
        fleet.sdk_worker("sdk", serve.url)
        done: Callable[[], int] = lambda: len(client.list_tasks(status="done", limit=n))  # noqa: E731
        wait_for("tasks in flight", lambda: done() >= 4)
        serve.kill()
        time.sleep(1.0)  # the scenario: the server is back 1 s later
        assert fleet.exited() == {}, "a worker exited while the server was down"
        serve.start()
        client.close()
        wait_for("every task done", lambda: done() == n)
        assert fleet.exited() == {}
        check_done_once(client, fleet, n)
    finally:
        codes = fleet.stop()
        client.close()
    assert codes == dict.fromkeys(fleet.procs, 0)
    assert all("unreachable" in fleet.log(node) for node in fleet.procs)


def test_a_long_task_keeps_its_lease_through_an_outage_longer_than_a_beat(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """While a long task runs, only heartbeats keep its lease. The network to the
    server is cut for 2.6 s, longer than a beat (2 s; the node's window is 3 beats),
    while the server and its monitor run on. With the default destination retries
    (3 tries, 5 s apart) the beat that failed was tried again 5 s later, past the
    window: the monitor recovered the lease and the completion was refused. The
    cluster's destination now fits its tries within one beat (0.67 s apart), so the
    lease is kept."""
    serve = sqlite_serve
    client = corral.connect(serve.url, token=serve.token)
    add_board(client, 1)
    net = Partition(serve.port)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=7.0)
    argv = [
        sys.executable,
        "-m",
        "corral",
        "--url",
        net.url,
        "worker",
        "--id",
        "w0",
        "--role",
        "developer",
        "--heartbeat-interval",
        "2",
        "--idle-timeout",
        "60",
        "--max-tasks",
        "1",
        "--",
        str(fleet.script),
    ]
    fleet.start("w0", argv)
    try:
        wait_for("the task running", lambda: fleet.runs_per_task() != Counter())
        net.cut(2.6)
        proc = fleet.procs["w0"]
        assert proc.wait(30) == 0, fleet.log("w0")
        counts = tally(client, fleet, 1)
    finally:
        fleet.stop()
        net.close()
        client.close()
    assert counts["lease_recoveries"] == 0, fleet.log("w0")
    assert (counts["done"], counts["run_twice"]) == (1, 0)


def test_a_worker_exits_3_once_the_window_is_spent_its_task_left_to_finish(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """With the server gone for good: the task process in flight runs to its end (its
    completion is what is retried), heartbeats fail and alert after 3 in a row, and
    the worker exits 3 only once ``--outage-tolerance`` has passed."""
    serve = sqlite_serve
    with corral.connect(serve.url, token=serve.token) as client:
        add_board(client, 1)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=1.0)
    fleet.cli("w0", serve.url, "--outage-tolerance", "3", "--heartbeat-interval", "0.2")
    wait_for("the task running", lambda: fleet.runs_per_task() != Counter())
    serve.kill()
    gone = time.monotonic()
    proc = fleet.procs["w0"]
    proc.wait(30)
    waited = time.monotonic() - gone
    log = fleet.log("w0")
    assert proc.returncode == 3, log
    assert waited >= 3.0, waited
    assert "heartbeat destination cluster failed 3 times in a row" in log
    assert "giving up" in log
    # The task's process ran to its end: its completion is the call that was retried.
    assert "complete_and_claim: the store is unreachable" in log, log


def test_a_completion_after_the_lease_was_recovered_is_refused(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """Back after the node's window (beats every 0.3 s: dead after 0.9 s), the
    restarted server's monitor recovers the lease; the worker's completion, sent when
    its task ends, is refused (fenced), and the task is pending again. The worker
    reaches the server through a proxy that stays cut until the lease is recovered:
    its first beat to the restarted server must not race the monitor's first look
    (under load the beat came first, and the node was alive again)."""
    serve = sqlite_serve
    client = corral.connect(serve.url, token=serve.token)
    add_board(client, 1)
    link = Partition(serve.port)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=6.0)
    fleet.cli("w0", link.url, "--heartbeat-interval", "0.3")
    wait_for("the task running", lambda: fleet.runs_per_task() != Counter())
    link.cut(3600)
    serve.kill()
    time.sleep(1.5)  # longer than the node's window
    serve.start()
    client.close()
    wait_for("the lease recovered", lambda: client.list_tasks()[0].status == "pending")
    link.cut(0)  # the worker reaches the server again
    proc = fleet.procs["w0"]
    proc.wait(30)
    log = fleet.log("w0")
    assert "completion of task 1 refused (lease lost)" in log, log
    assert proc.returncode == 1  # terminated by the cluster: its node was dead
    task = client.list_tasks()[0]
    client.close()
    link.close()
    assert (task.status, task.result) == ("pending", None)


# --- a claim whose answer was lost ------------------------------------------------------
class KillAfterClaim:
    """A TCP proxy in front of ``serve`` that relays everything, except that the
    first claim's answer is never delivered: once the server has sent it (the claim
    committed), the server is SIGKILLed, the client's connection closed, and the server
    started again 1 s later."""

    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.armed = True
        self.restarted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_one, args=(client,), daemon=True).start()

    def _serve_one(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.serve.port))
        except OSError:
            client.close()  # the server is down: the client sees the connection end
            return
        held = threading.Event()  # the claim went up: its answer is not relayed
        answered = threading.Event()  # ... and the server sent it: it is committed
        threading.Thread(
            target=self._down, args=(upstream, client, held, answered), daemon=True
        ).start()
        try:
            while data := client.recv(65536):
                if self.armed and b"/claim " in data:
                    self.armed = False
                    held.set()
                    upstream.sendall(data)
                    wait_for("the claim's answer", answered.is_set, 10)
                    self.serve.kill()
                    break
                upstream.sendall(data)
        except OSError:
            pass
        client.close()
        upstream.close()
        if held.is_set():
            time.sleep(1.0)  # the scenario: the server is back 1 s later
            self.serve.start()
            self.restarted.set()

    @staticmethod
    def _down(upstream: socket.socket, client: socket.socket, held: Any, answered: Any) -> None:
        try:
            while data := upstream.recv(65536):
                if held.is_set():
                    answered.set()
                    continue
                client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(params=["sqlite", "postgres"])
def any_serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Serve]:
    if request.param == "postgres":
        db_url = pg.fresh_database(request)
    else:
        db_url = f"sqlite:///{tmp_path / 'board.db'}"
    serve = Serve(db_url, tmp_path)
    serve.start()
    yield serve
    serve.stop()


def test_a_claim_whose_answer_was_lost_returns_the_same_task_when_sent_again(
    any_serve: Serve,
) -> None:
    """The server is SIGKILLed after the claim's commit, before its reply reaches the
    client; the client sends the claim again (to the restarted server) and gets the
    task the lost answer held. The node holds that one task and nothing else: no
    task is left held by a live node that never got it."""
    serve = any_serve
    direct = corral.connect(serve.url, token=serve.token)
    direct.register_node("w1", "developer")
    add_board(direct, 3)
    proxy = KillAfterClaim(serve)
    client = tolerant(corral.connect(proxy.url, token=serve.token), 30)
    try:
        task = client.claim_best_task("w1", "developer")
        wait_for("the server's restart (the claim's answer lost)", proxy.restarted.is_set, 30)
    finally:
        proxy.close()
        client.close()
    direct.close()  # (its connection died with the server)
    held = direct.list_tasks(status="in_progress")
    direct.close()
    assert task is not None
    assert [(t.id, t.epoch, t.assigned_to) for t in held] == [(task.id, task.epoch, "w1")]
    assert client.retries >= 1


# --- PostgreSQL: every session terminated ----------------------------------------------
def test_workers_ride_out_pg_terminate_backend_of_every_session(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Workers straight on PostgreSQL (two ``corral worker``, one SDK worker) and one
    through ``corral serve`` (whose monitor runs on the same database): every session
    of the database is terminated three times while tasks run. No worker exits, no
    lease is recovered, every task is done once."""
    db_url = pg.fresh_database(request)
    serve = Serve(db_url, tmp_path)
    serve.start()
    n = 24
    client = tolerant(corral.connect(db_url), 30)  # its sessions are terminated too
    add_board(client, n)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=0.4)
    try:
        fleet.cli("w0", db_url)
        fleet.cli("w1", db_url)
        fleet.sdk_worker("sdk", db_url)
        fleet.cli("h0", serve.url)
        done: Callable[[], int] = lambda: len(client.list_tasks(status="done", limit=n))  # noqa: E731
        killed = []
        for at in (3, 9, 15):

            def reached(at: int = at) -> bool:
                return done() >= at

            wait_for(f"{at} tasks done", reached)
            killed.append(terminate_sessions(db_url, pg.ADMIN_URL))
        wait_for("every task done", lambda: done() == n)
        assert fleet.exited() == {}
        assert min(killed) >= 4  # the workers' sessions and the server's at least
        check_done_once(client, fleet, n)
    finally:
        codes = fleet.stop()
        serve.stop()
        client.close()
    assert codes == dict.fromkeys(fleet.procs, 0)


ACTIVATE = """#!/bin/sh
# one activation: its agent on a line of the runs file, then a little work
echo "$CORRAL_AGENT_ID" >> "{runs}"
sleep 0.3
echo '{{"comments": 1}}'
"""


def test_corral_runner_rides_out_a_sigkill_and_restart_of_corral_serve(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """``corral runner`` (notification mode) with an inbox item for each of 12 agents:
    the server is SIGKILLed mid-run and back 1 s later; the runner stays up and every
    agent is activated once."""
    serve = sqlite_serve
    agents = [f"a{i}" for i in range(12)]
    client = corral.connect(serve.url, token=serve.token)
    for agent in agents:
        client.add_agent(agent)
        client.notify(agent, {"mention": agent})
    runs = tmp_path / "runs"
    runs.touch()
    script = tmp_path / "activate.sh"
    script.write_text(ACTIVATE.format(runs=runs))
    script.chmod(0o755)
    log = (tmp_path / "runner.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "--url",
            serve.url,
            "runner",
            "--id",
            "r1",
            "--mode",
            "notification",
            "--no-retire",
            "--heartbeat-interval",
            "2",
            "--poll-interval",
            "0.2",
            "--",
            str(script),
        ],
        env=env_for(serve.token),
        stderr=log,
    )
    log.close()
    ran: Callable[[], Counter[str]] = lambda: Counter(runs.read_text().split())  # noqa: E731
    try:
        wait_for("activations under way", lambda: sum(ran().values()) >= 3)
        serve.kill()
        time.sleep(1.0)
        assert proc.poll() is None, "the runner exited while the server was down"
        serve.start()
        client.close()
        wait_for("every agent activated", lambda: set(ran()) == set(agents))
        wait_for("every activation released", lambda: client.list_assignments() == [])
        assert proc.poll() is None
        assert set(ran().values()) == {1}, ran()
        assert {client.get_agent(a).activation_count for a in agents} == {1}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
        client.close()
    assert code == 0, (tmp_path / "runner.log").read_text()


# --- the store's half of the keys, on both stores ---------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def embedded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "postgres":
        url = pg.fresh_database(request)
    else:
        url = f"sqlite:///{tmp_path / 'c.db'}"
    c = corral.connect(url)
    c.register_node("w1", "developer")
    yield c
    c.close()


def test_a_keyed_claim_sent_again_takes_nothing_more(embedded: Any) -> None:
    """Claim and complete-and-claim sent again with their keys answer what the first
    took; a key whose task the node no longer holds answers None; a key that took
    nothing is a new try; concurrent sends of one key take one task."""
    c, store = embedded, embedded.store
    add_board(c, 4)
    now = c.clock.now()
    first = store.claim("w1", "developer", now, key="k1")
    assert store.claim("w1", "developer", now, key="k1") == first
    done, nxt = store.complete_and_claim(
        first.id, "w1", first.epoch, None, "developer", now, key="k2"
    )
    assert store.complete_and_claim(
        first.id, "w1", first.epoch, None, "developer", now, key="k2"
    ) == (done, nxt)
    assert done.status == "done" and nxt is not None
    c.fail_task(nxt.id, "w1", nxt.epoch, "no", retry=True)  # no longer held
    assert store.claim("w1", "developer", now, key="k2") is None
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: store.claim("w1", "developer", now, key="k3"), range(4)))
    assert got[0] is not None and all(g == got[0] for g in got)
    held = c.list_tasks(status="in_progress", assigned_to="w1")
    assert [t.id for t in held] == [got[0].id]


FLEET = """
[cluster]
settings = {{ max_agents = 6, idle_timeout_seconds = 60 }}

[[pools]]
id = "worker"
cmd = "{python}"
args = ["{worker}"]
role = "developer"
min = 3
max = 3
scale = "auto"
"""


def test_corral_up_pools_ride_out_pg_terminate_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``corral up`` on PostgreSQL with a pool of three SDK workers
    (examples/fleet_worker.py): every session of the database, ``corral up``'s own
    among them, is terminated three times while the board drains. No member exits or
    is restarted, no lease is recovered, no task is claimed twice."""
    db_url = pg.fresh_database(request)
    worker = tmp_path / "fleet_worker.py"
    worker.write_text((Path(__file__).parents[2] / "examples" / "fleet_worker.py").read_text())
    (tmp_path / "fleet.toml").write_text(FLEET.format(python=sys.executable, worker=worker))
    env = env_for("")
    del env["CORRAL_TOKEN"]
    env["FLEET_WORK_SECONDS"] = "0.3"
    port = free_port()
    with (tmp_path / "up.log").open("wb") as log:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral",
                "--url",
                db_url,
                "up",
                "--port",
                str(port),
                "fleet.toml",
            ],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=log,
        )
    client = tolerant(corral.connect(db_url), 30)  # its sessions are terminated too
    n = 30
    try:
        add_board(client, n)
        done: Callable[[], int] = lambda: len(client.list_tasks(status="done", limit=n))  # noqa: E731
        for at in (5, 12, 20):

            def reached(at: int = at) -> bool:
                return done() >= at

            wait_for(f"{at} tasks done", reached)
            terminate_sessions(db_url, pg.ADMIN_URL)
        wait_for("every task done", lambda: done() == n)
        tasks = client.list_tasks(limit=n)
        recovered = [e for e in client.events(limit=100000) if e.kind == "lease_recovered"]
        assert up.poll() is None
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(60)
        client.close()
    printed = (tmp_path / "up.log").read_text()
    assert recovered == [] and {t.attempts for t in tasks} == {1}, printed
    assert " restarted " not in printed and " dead" not in printed, printed
    assert code == 0, printed


SUPERVISOR = """
[supervisor]
heartbeat_interval = 2
heartbeat_timeout = 15
"""

SUPERVISED = """
[[agents]]
id = "{node}"
cmd = "{python}"
args = ["-m", "corral", "worker", "--role", "developer", "--heartbeat-interval", "2",
        "--idle-timeout", "60", "--", "{script}"]
heartbeat = "cluster"
restart = "always"
"""


def test_corral_supervise_workers_ride_out_a_sigkill_and_restart_of_corral_serve(
    sqlite_serve: Serve, tmp_path: Path
) -> None:
    """``corral supervise --url`` running two ``corral worker`` agents whose heartbeat
    is the cluster's: ``corral serve`` SIGKILLed and back 1 s later. The supervisor's
    link rides it out (its calls fail, it tries again at its next poll), no agent is
    restarted, no lease is recovered, every task is done once."""
    serve = sqlite_serve
    n = 16
    client = corral.connect(serve.url, token=serve.token)
    add_board(client, n)
    fleet = Fleet(tmp_path, env_for(serve.token), task_seconds=0.4)
    manifest = tmp_path / "agents.toml"
    agents = [
        SUPERVISED.format(node=f"s{i}", python=sys.executable, script=fleet.script)
        for i in range(2)
    ]
    manifest.write_text(SUPERVISOR + "".join(agents))
    fleet.start(
        "supervise",
        [
            sys.executable,
            "-m",
            "corral",
            "--url",
            serve.url,
            "supervise",
            "--state-dir",
            str(tmp_path / "state"),
            str(manifest),
        ],
    )
    done: Callable[[], int] = lambda: len(client.list_tasks(status="done", limit=n))  # noqa: E731
    try:
        wait_for("tasks in flight", lambda: done() >= 3)
        serve.kill()
        time.sleep(1.0)
        serve.start()
        client.close()
        wait_for("every task done", lambda: done() == n)
        counts = tally(client, fleet, n)
    finally:
        fleet.stop()
        client.close()
    printed = fleet.log("supervise")
    assert "UNHEALTHY" not in printed, printed
    assert counts["lease_recoveries"] == 0 and counts["claimed_twice"] == 0, printed
    assert (counts["done"], counts["run_twice"], counts["worker_exits"]) == (n, 0, 0)
