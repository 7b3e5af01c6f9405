"""Alerts end to end: real conditions in a real store, a real monitor (or
``corral serve``), and a real webhook receiver (``http.server`` in a thread) that gets
exactly one POST per alert subject within the rate limit.

The timing rules (the rate limit's window, the spawn request's threshold, the crash
loop's window) run on the fake clock: the alerter's ``step(now)`` and the monitor's
``tick(now)`` take it; only the POSTs are real."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import corral
from corral import Monitor
from corral.alerter import Alerter
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.fleet.up import EventPrinter
from corral.model import Event
from tests.integration.test_mcp_transports import Server, serve_argv
from tests.support.backends.http import TOKEN, free_port
from tests.support.worker_app import wait_for

T0 = 1_700_000_000.0


class Receiver:
    """A webhook: records each JSON POST; answers 500 to the first ``fail_first``."""

    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[dict[str, Any]] = []
        self.refused = 0
        self.fail_first = fail_first
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.cond:
                    if receiver.refused < receiver.fail_first:
                        receiver.refused += 1
                        status = 500
                    else:
                        receiver.posts.append(body)
                        status = 200
                    receiver.cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                """Quiet: the test says what it received."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The POSTs once there are at least ``n`` (fails after ``timeout``)."""
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.posts) >= n, timeout):
                raise AssertionError(f"{len(self.posts)} POSTs after {timeout}s, not {n}")
            return list(self.posts)

    def subjects(self) -> list[str]:
        with self.cond:
            return [p["subject"] for p in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def faked(tmp_path: Path) -> Iterator[tuple[Cluster, FakeClock]]:
    clock = FakeClock(T0)
    c = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    assert isinstance(c, Cluster)
    try:
        yield c, clock
    finally:
        c.close()


def _locked(path: Path) -> bool:
    """Whether another process holds the ``flock`` on ``path`` (a monitor leads)."""
    if not path.exists():
        return False
    with path.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _read_past(alerter: Alerter, seq: int) -> bool:
    return alerter.cursor is not None and alerter.cursor >= seq


def _alerts(c: Cluster) -> list[Event]:
    return [e for e in c.events(0, 10_000) if e.kind == "alert"]


def _die_holding(c: Cluster, clock: FakeClock, monitor: Monitor) -> None:
    """Node w1 (a new incarnation) claims the task and goes silent; the monitor takes
    the task back at its deadline."""
    c.register_node("w1", "developer", heartbeat_interval=10)
    assert c.claim_best_task("w1", "developer") is not None
    clock.advance(30)
    assert "lease_recovered" in [e.kind for e in monitor.tick(clock.now()).events]


def test_one_post_per_subject_within_the_rate_limit(
    embedded: Cluster, clock: FakeClock, receiver: Receiver
) -> None:
    """A node that dies holding a task three times: the first recovery is POSTed, the
    second (within ``alert_rate_limit_seconds``) is held back, the third (after the
    window) is POSTed again, saying one was held back. Every alert is an event. On
    SQLite and PostgreSQL."""
    c = embedded
    c.configure(alert_webhooks=[receiver.url], alert_rate_limit_seconds=100)
    monitor = Monitor(c, alerts=True)
    alerter = monitor.alerter
    assert alerter is not None
    c.add_task("implement it", max_attempts=10)

    _die_holding(c, clock, monitor)
    (first,) = alerter.step(clock.now(), leading=True)
    _die_holding(c, clock, monitor)  # 30 s later: within the window
    assert alerter.step(clock.now(), leading=True) == []
    clock.advance(100)
    _die_holding(c, clock, monitor)
    (third,) = alerter.step(clock.now(), leading=True)
    assert alerter.sender.flush(20)

    posts = receiver.wait(2)
    assert [p["subject"] for p in posts] == ["node:w1", "node:w1"]
    assert [p["condition"] for p in posts] == ["node_dead_with_lease"] * 2
    assert [p["held_back"] for p in posts] == [0, 1]
    assert [p["seq"] for p in posts] == [first.seq, third.seq]
    assert [e.seq for e in _alerts(c)] == [first.seq, third.seq]
    assert first.data["condition"] == "node_dead_with_lease"
    assert first.data["subject"] == "node:w1"
    assert first.node_id == "w1"


def test_a_real_monitor_posts_once_per_subject(tmp_path: Path, receiver: Receiver) -> None:
    """The monitor's own loop (real time): a node beating every 0.2 s dies holding two
    tasks with one attempt each. Its leases are recovered and both tasks fail for
    good: three subjects (the node and the two tasks), three POSTs, though the node's
    subject came up twice."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    with corral.connect(url) as c:
        assert isinstance(c, Cluster)
        c.configure(alert_webhooks=[receiver.url], alert_retry_delay=0.05)
        monitor = Monitor(corral.connect(url), alerts=True, max_sleep=0.05)
        assert monitor.alerter is not None
        thread = monitor.start_thread()
        try:
            c.register_node("w1", "developer", heartbeat_interval=0.2)
            a = c.add_task("implement a", max_attempts=1)
            b = c.add_task("implement b", max_attempts=1)
            assert c.claim_best_task("w1", "developer") is not None
            assert c.claim_best_task("w1", "developer") is not None
            receiver.wait(3)
            # everything the alerter will ever see has been seen, and sent
            last = int(
                wait_for(lambda: len(_alerts(c)) == 3 and _alerts(c)[-1].seq, 20.0, what="3 alerts")
            )
            alerter = monitor.alerter
            assert alerter is not None
            wait_for(lambda: (alerter.cursor or 0) >= last, 20.0, what="the cursor")
            assert alerter.sender.flush(20)
        finally:
            monitor.stop()
            thread.join(10)
            monitor.cluster.close()
        assert sorted(receiver.subjects()) == sorted(["node:w1", f"task:{a.id}", f"task:{b.id}"])
        node_alert = next(e for e in _alerts(c) if e.data["subject"] == "node:w1")
        assert node_alert.data["held_back"] == 0
        assert {e.data["condition"] for e in _alerts(c)} == {"node_dead_with_lease", "task_failed"}


def test_a_failing_webhook_is_retried(faked: tuple[Cluster, FakeClock]) -> None:
    """The webhook answers 500 once: the alert is POSTed again (the heartbeat
    destinations' retries, ``alert_retry_attempts`` tries ``alert_retry_delay`` apart)."""
    c, clock = faked
    r = Receiver(fail_first=1)
    try:
        c.configure(alert_webhooks=[r.url], alert_retry_delay=0.01, alert_retry_attempts=2)
        alerter = Alerter(c)
        c.register_node("w1", "developer")
        c.add_task("implement a", max_attempts=1)
        t = c.claim_best_task("w1", "developer")
        assert t is not None
        c.fail_task(t.id, "w1", t.epoch, "boom", retry=False)
        (event,) = alerter.step(clock.now(), leading=True)
        assert alerter.sender.flush(20)
        assert r.refused == 1
        assert [p["seq"] for p in r.posts] == [event.seq]
        assert r.posts[0]["message"] == f"task {t.id} failed for good (boom)"
        assert r.posts[0]["text"] == f"corral alert: task {t.id} failed for good (boom)"
    finally:
        r.close()


def test_a_standby_alerts_nothing_but_knows_what_was_alerted(
    faked: tuple[Cluster, FakeClock], receiver: Receiver
) -> None:
    """Two alerters over one cluster: only the leading one records and POSTs; the
    standby, reading the same events, counts the leader's alert against the subject
    when it takes over within the window."""
    c, clock = faked
    c.configure(alert_webhooks=[receiver.url])
    leader, standby = Alerter(c), Alerter(c)
    c.register_node("w1", "developer")
    c.add_task("implement a", max_attempts=1)
    t = c.claim_best_task("w1", "developer")
    assert t is not None
    c.fail_task(t.id, "w1", t.epoch, "boom", retry=False)
    assert len(leader.step(clock.now(), leading=True)) == 1
    assert standby.step(clock.now(), leading=False) == []
    assert standby.limit.take(f"task:{t.id}", clock.now() + 1, 300.0) is None
    assert leader.sender.flush(20)
    assert receiver.subjects() == [f"task:{t.id}"]


def test_process_conditions_spawn_requests_and_idle_runs(
    faked: tuple[Cluster, FakeClock], receiver: Receiver
) -> None:
    """A crash loop (5 restarts within 600 s), ``restart-exhausted``, a spawn request
    pending past ``alert_spawn_pending_seconds`` and an idle run past its waiter's
    deadline: one POST each, not repeated while the condition lasts."""
    c, clock = faked
    c.configure(alert_webhooks=[receiver.url], alert_spawn_pending_seconds=60)
    alerter = Alerter(c, state_interval=0.0)

    def report(restarts: int, flags: list[str]) -> None:
        c.report_processes(
            "host1",
            [{"agent": "relay", "state": "RUNNING", "restarts": restarts, "flags": flags}],
        )

    report(0, [])
    assert alerter.step(clock.now(), leading=True) == []
    for n in (2, 4):
        clock.advance(60)
        report(n, [])
        assert alerter.step(clock.now(), leading=True) == []
    clock.advance(60)
    report(5, [])
    (loop,) = alerter.step(clock.now(), leading=True)
    assert loop.data["condition"] == "crash_loop"
    assert loop.data["restarts_in_window"] == 5
    clock.advance(400)  # still in a loop: no second alert
    report(6, ["restart-exhausted"])
    (exhausted,) = alerter.step(clock.now(), leading=True)
    assert exhausted.data["condition"] == "restart_exhausted"

    req = c.request_spawn("dev", "developer", reason="backlog")
    clock.advance(60)
    assert alerter.step(clock.now(), leading=True) == []  # 60 s is not longer than 60
    clock.advance(1)
    (pending,) = alerter.step(clock.now(), leading=True)
    assert pending.data["subject"] == f"spawn_request:{req.id}"

    c.serve_workflows("h1", [{"name": "hitl"}])
    handler_id = c.run_workflow("hitl")
    c.take_workflow_work("h1")
    deadline = clock.now() + 30
    waiter = {"step": "ask", "event_type": "Answer", "waiter_id": "w1", "deadline": deadline}
    c.report_handler("h1", handler_id, "idle", [waiter])
    assert alerter.step(clock.now(), leading=True) == []
    clock.advance(31)
    (late,) = alerter.step(clock.now(), leading=True)
    assert late.data["condition"] == "workflow_past_deadline"
    clock.advance(1000)
    assert alerter.step(clock.now(), leading=True) == []  # told once per deadline

    assert alerter.sender.flush(20)
    assert receiver.subjects() == [
        "process:host1/relay",
        "process:host1/relay",
        f"spawn_request:{req.id}",
        f"workflow_run:{handler_id}",
    ]


def test_corral_serve_posts_a_task_failed_for_good(tmp_path: Path, receiver: Receiver) -> None:
    """``corral serve`` runs the alerter with its monitor: a task failed for good over
    the HTTP API is POSTed to the webhook set in the cluster settings, once; a second
    task's failure is POSTed after it, and nothing else."""
    db = f"sqlite:///{tmp_path / 'corral.db'}"
    with corral.connect(db) as setup:
        setup.configure(alert_webhooks=[receiver.url])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(serve_argv(db, port, token_file), port, env)
    server.start()
    try:
        with corral.connect(f"http://127.0.0.1:{port}", token=TOKEN) as c:
            c.register_node("w1", "developer")
            ids = []
            for title in ("implement a", "implement b"):
                c.add_task(title, max_attempts=1)
                t = c.claim_best_task("w1", "developer")
                assert t is not None
                c.fail_task(t.id, "w1", t.epoch, "boom", retry=False)
                ids.append(t.id)
                receiver.wait(len(ids))
        posts = receiver.wait(2)
        assert [p["subject"] for p in posts] == [f"task:{i}" for i in ids]
        assert {p["condition"] for p in posts} == {"task_failed"}
    finally:
        server.kill()


def test_bad_alert_settings_exit_2_naming_the_field(tmp_path: Path) -> None:
    """``corral config set`` and ``corral up``'s ``[alerts]``: one line naming the
    field, exit 2, nothing started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    corral_cmd = [sys.executable, "-m", "corral"]
    db = f"sqlite:///{tmp_path / 'corral.db'}"
    for key, value in (("alert_webhooks", '["ftp://x"]'), ("alert_crash_loop_window", "-5")):
        out = subprocess.run(
            [*corral_cmd, "--url", db, "config", "set", key, value],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().startswith(f"error: {key}: {key} must"), out.stderr
    manifest = tmp_path / "fleet.toml"
    for table, where in (
        ('webhooks = ["not a url"]', "fleet.toml: alerts.webhooks: must hold http://"),
        ("crash_loop_window = -5", "fleet.toml: alerts.crash_loop_window: must be a positive"),
        ("colour = 1", "fleet.toml: alerts.colour: unknown key"),
    ):
        manifest.write_text(f'[[agents]]\nid = "a"\ncmd = "true"\n\n[alerts]\n{table}\n')
        out = subprocess.run(
            [*corral_cmd, "up", "fleet.toml", "--port", "0"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, out.stderr
        err = out.stderr.strip().splitlines()
        assert len(err) == 1 and where in err[0], out.stderr
        assert not (tmp_path / ".corral").exists()  # nothing started


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_monitors_send_one_alert(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, receiver: Receiver
) -> None:
    """Two monitors over one store (two ``corral serve`` processes, or ``--workers``),
    each with its alerter, in their own loops: only the one that leads sends, so a
    dead node's recovered lease is one POST and one ``alert`` event; the other
    follows the events past it without sending."""
    if backend == "postgres":
        from tests.support.backends.postgres import fresh_database

        url = fresh_database(request)
    else:
        url = f"sqlite:///{tmp_path / 'corral.db'}"
    with corral.connect(url) as c:
        assert isinstance(c, Cluster)
        c.configure(alert_webhooks=[receiver.url])
        monitors = [
            Monitor(corral.connect(url), alerts=True, max_sleep=0.05, name=f"m{i}") for i in (1, 2)
        ]
        threads = [m.start_thread() for m in monitors]
        try:
            c.register_node("w1", "developer", heartbeat_interval=0.2)
            c.add_task("implement a")
            assert c.claim_best_task("w1", "developer") is not None
            (post,) = receiver.wait(1)
            assert post["subject"] == "node:w1"
            seq = post["seq"]
            for m in monitors:  # both have read past the alert: neither sends it again
                alerter = m.alerter
                assert alerter is not None
                wait_for(
                    functools.partial(_read_past, alerter, seq), 20.0, what=f"{m.name}'s cursor"
                )
                assert alerter.sender.flush(20)
        finally:
            for m in monitors:
                m.stop()
            for t in threads:
                t.join(10)
            for m in monitors:
                m.cluster.close()
        assert receiver.subjects() == ["node:w1"]
        assert [e.data["subject"] for e in _alerts(c)] == ["node:w1"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_only_the_leading_monitor_alerts(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, receiver: Receiver
) -> None:
    """Step by step on the fake clock: of two monitors over one store, the one whose
    tick led alerts; the other's pass, even when it reads the recovered lease before
    any alert of it exists, sends nothing."""
    if backend == "postgres":
        from tests.support.backends.postgres import fresh_database

        url = fresh_database(request)
    else:
        url = f"sqlite:///{tmp_path / 'corral.db'}"
    clock = FakeClock(T0)
    clusters = [corral.connect(url, clock=clock) for _ in range(2)]
    try:
        c = clusters[0]
        assert isinstance(c, Cluster)
        c.configure(alert_webhooks=[receiver.url])
        m1, m2 = (Monitor(k, alerts=True, name=f"m{i}") for i, k in enumerate(clusters))
        c.register_node("w1", "developer", heartbeat_interval=10)
        c.add_task("implement a")
        assert c.claim_best_task("w1", "developer") is not None
        clock.advance(30)
        first = m1.tick(clock.now())
        second = m2.tick(clock.now())
        assert (first.leader, second.leader) == (True, False)
        assert [e.kind for e in first.events][:1] == ["lease_recovered"]
        assert m2.alert_pass(second) == []  # the standby reads the recovery first
        (alert,) = m1.alert_pass(first)
        assert m2.alert_pass(m2.tick(clock.now())) == []
        for m in (m1, m2):
            assert m.alerter is not None and m.alerter.sender.flush(20)
        assert receiver.subjects() == ["node:w1"]
        assert [e.seq for e in _alerts(c)] == [alert.seq]
    finally:
        for k in clusters:
            k.close()


def test_corral_up_prints_an_alert_line(faked: tuple[Cluster, FakeClock]) -> None:
    """``corral up``'s event lines (``EventPrinter``) show each alert."""
    c, clock = faked
    lines: list[str] = []
    printer = EventPrinter(c, lines.append, as_json=False)
    alerter = Alerter(c)
    c.register_node("w1", "developer")
    c.add_task("implement a", max_attempts=1)
    t = c.claim_best_task("w1", "developer")
    assert t is not None
    c.fail_task(t.id, "w1", t.epoch, "boom", retry=False)
    alerter.step(clock.now(), leading=True)
    printer.drain()
    texts = [line.split(" ", 1)[1] for line in lines]
    assert texts[-1] == f"alert: task {t.id} failed for good (boom)"


def test_corral_mcp_over_a_database_alerts(tmp_path: Path, receiver: Receiver) -> None:
    """``corral mcp`` on a database URL runs the monitor, and so the alerter: a task
    failed for good by another process is POSTed while the MCP server waits on stdin."""
    db = f"sqlite:///{tmp_path / 'corral.db'}"
    with corral.connect(db) as c:
        c.configure(alert_webhooks=[receiver.url])
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral", "--url", db, "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            # the alerter starts with the events after its start: wait for its lead
            lock = Path(f"{tmp_path / 'corral.db'}-monitor")  # the SQLite monitors' lead
            wait_for(lambda: _locked(lock), 20.0, what="corral mcp's monitor to lead")
            c.register_node("w1", "developer")
            c.add_task("implement a", max_attempts=1)
            t = c.claim_best_task("w1", "developer")
            assert t is not None
            c.fail_task(t.id, "w1", t.epoch, "boom", retry=False)
            (post,) = receiver.wait(1)
            assert (post["condition"], post["subject"]) == ("task_failed", f"task:{t.id}")
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.terminate()
            proc.wait(10)
