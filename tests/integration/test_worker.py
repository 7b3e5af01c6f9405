"""The Worker SDK in-process (claim, complete, fail, fencing) and ``corral worker``
as a real process (the idle protocol of anti-idle.md STEP 1.5, SIGTERM, bad input)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.cluster import Cluster
from corral.model import Task
from corral.worker import TaskFailed, Worker
from tests.support.worker_app import wait_for

SRC = str(Path(__file__).resolve().parents[2] / "src")
CORRAL = [sys.executable, "-c", "from corral.cli import main; main()"]


# --- in process -----------------------------------------------------------------------
@pytest.fixture
def worker(sqlite_cluster: corral.Cluster) -> Iterator[Worker]:
    w = Worker(
        "W1",
        "developer",
        cluster=sqlite_cluster,
        heartbeat_interval=60,
        idle_timeout_seconds=0.1,
        handle_signals=False,
    )
    yield w
    w.close()


def test_id_and_role_come_from_the_supervisors_environment(
    sqlite_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started by corral supervise or corral up finds its node id and role in
    $CORRAL_AGENT_ID and $CORRAL_ROLE; without them, the missing one is named."""
    monkeypatch.setenv("CORRAL_AGENT_ID", "pool-1")
    monkeypatch.setenv("CORRAL_ROLE", "architect")
    w = Worker(cluster=sqlite_cluster, heartbeat_interval=60, handle_signals=False)
    try:
        w.register()
        node = sqlite_cluster.get_node("pool-1")
        assert (node.id, node.role) == ("pool-1", "architect")
    finally:
        w.close()
    monkeypatch.delenv("CORRAL_ROLE")
    with pytest.raises(corral.InvalidInputError, match=r"role: .*\$CORRAL_ROLE") as err:
        Worker(cluster=sqlite_cluster, handle_signals=False)
    assert err.value.field == "role"


def test_claim_completes_with_the_result_set_in_the_block(
    sqlite_cluster: Cluster, worker: Worker
) -> None:
    task = sqlite_cluster.add_task("implement x")
    with worker.claim() as held:
        assert held is not None and held.id == task.id and held.epoch == 1
        assert worker.monitor.current_tasks == [str(task.id)]
        held.result = {"ok": True}
    done = sqlite_cluster.get_task(task.id)
    assert done.status == "done" and done.result == {"ok": True}
    assert worker.monitor.current_tasks == [] and worker.completed == 1
    assert worker.monitor.get_metrics()["tasks_completed"] == 1


def test_claim_fails_the_task_with_the_error_on_an_exception(
    sqlite_cluster: Cluster, worker: Worker
) -> None:
    task = sqlite_cluster.add_task("implement x")
    with worker.claim() as held:
        assert held is not None
        raise TaskFailed("disk full")
    failed = sqlite_cluster.get_task(task.id)
    assert failed.status == "pending" and failed.error == "disk full"  # retried later
    assert worker.failed == 1 and worker.monitor.get_metrics()["tasks_failed"] == 1


def test_claim_yields_none_after_waiting_when_nothing_is_pending(worker: Worker) -> None:
    start = time.monotonic()
    with worker.claim(wait=0.2) as held:
        assert held is None
    assert time.monotonic() - start >= 0.2


def test_claim_with_wait_takes_a_task_added_meanwhile(
    sqlite_cluster: Cluster, worker: Worker
) -> None:
    worker.register()
    other = corral.connect(sqlite_cluster.url)
    try:
        timer = __import__("threading").Timer(0.2, lambda: other.add_task("implement y"))
        timer.start()
        with worker.claim(wait=5) as held:
            assert held is not None and held.title == "implement y"
        timer.join()
    finally:
        other.close()


def test_a_stale_epoch_completion_is_refused_and_counted(
    sqlite_cluster: Cluster, worker: Worker
) -> None:
    task = sqlite_cluster.add_task("implement x")
    with worker.claim() as held:
        assert held is not None
        # Another claim of the same task happens behind this worker's back.
        sqlite_cluster.set_agent_status("W1", "terminated")
        sqlite_cluster.register_node("W2", "developer")
        again = sqlite_cluster.claim_best_task("W2", "developer")
        assert again is not None and again.epoch == 2
        held.result = "late"
    assert worker.refused == 1 and worker.completed == 0
    assert sqlite_cluster.get_task(task.id).assigned_to == "W2"


def test_run_with_handler_then_idle_retirement(sqlite_cluster: Cluster, worker: Worker) -> None:
    sqlite_cluster.add_tasks([{"title": "implement a"}, {"title": "implement b"}])
    seen: list[int] = []

    def handle(t: Task) -> dict[str, int]:
        seen.append(t.id)
        return {"n": t.id}

    assert worker.run(handle) == 0
    assert seen == [1, 2] and worker.exit_reason == "idle"
    assert [sqlite_cluster.get_task(i).result for i in (1, 2)] == [{"n": 1}, {"n": 2}]
    assert sqlite_cluster.get_node("W1").status == "terminated"


def test_run_finishes_and_takes_the_next_task_in_one_call(
    sqlite_cluster: Cluster, worker: Worker
) -> None:
    """The loop chains: each completion and the next claim are one transaction (their
    events are adjacent, with one timestamp); the last allowed task is not chained."""
    sqlite_cluster.add_tasks([{"title": f"implement {i}"} for i in range(4)])
    assert worker.run(lambda t: t.id, max_tasks=3) == 0
    events = [e for e in sqlite_cluster.events(limit=1000) if e.kind.startswith("task_")]
    pairs = [
        (a, b)
        for a, b in itertools.pairwise(events)
        if a.kind == "task_completed" and b.kind == "task_claimed"
    ]
    assert len(pairs) == 2
    assert all(b.seq == a.seq + 1 and b.ts == a.ts for a, b in pairs)
    assert [t.status for t in sqlite_cluster.list_tasks(limit=10)][::-1] == [
        "done",
        "done",
        "done",
        "pending",
    ]


# --- `corral worker` as a real process -------------------------------------------------
def _corral_worker(url: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CORRAL_URL": url, "PYTHONPATH": SRC}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*CORRAL, "worker", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    client = corral.connect(url)
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = _corral_worker(url, tmp_path / "worker.log", *args)
        procs.append(proc)
        return proc

    yield {"c": client, "start": start, "dir": tmp_path, "log": tmp_path / "worker.log"}
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    client.close()


def _status(c: corral.Cluster, node_id: str) -> str | None:
    try:
        return c.get_node(node_id).status
    except corral.NotFoundError:
        return None  # not registered yet


def _kinds(c: corral.Cluster, node_id: str) -> list[str]:
    return [
        f"{e.kind}:{e.data.get('new', '')}"
        for e in c.events(0, 10_000)
        if e.node_id == node_id or e.kind == "broadcast"
    ]


def test_idle_worker_terminates_after_the_grace_period(cli: dict[str, Any]) -> None:
    c = cli["c"]
    start = time.monotonic()
    proc = cli["start"](
        "--id",
        "W1",
        "--role",
        "developer",
        "--heartbeat-interval",
        "0.2",
        "--idle-timeout",
        "1.0",
        "--",
        "true",
    )
    assert proc.wait(15) == 0
    assert time.monotonic() - start >= 1.0
    node = c.get_node("W1")
    assert node.status == "terminated"
    # A new node is idle when it registers: the worker's own step into idle is no
    # change, so no event (node_status events are changes only).
    events = [
        e for e in c.events(0, 10_000) if e.kind in ("node_registered", "node_status", "broadcast")
    ]
    assert [e.data.get("new") or e.data.get("message") or e.kind for e in events] == [
        "node_registered",
        "terminated",
        "Node W1 terminating due to lack of work",
    ]
    # The idle spell lasted the grace period before termination: not before it, and
    # not stuck after it (a loaded machine may delay the worker's next try by seconds;
    # the monitor's exact 60 s rule is tested with an injected clock in test_monitor).
    idle, terminated = events[0].ts, events[1].ts
    assert 1.0 <= terminated - idle < 8.0


def test_task_arriving_during_the_grace_period_cancels_termination(cli: dict[str, Any]) -> None:
    c = cli["c"]
    echo = "echo '{\"ok\": 1}'"
    proc = cli["start"](
        "--id",
        "W1",
        "--role",
        "developer",
        "--heartbeat-interval",
        "0.2",
        "--idle-timeout",
        "3.0",
        "--",
        "sh",
        "-c",
        echo,
    )
    # A new node is already idle when it registers (its own step into idle, STEP 1.5,
    # is no change and no event): wait for the worker's line saying it is idle, so the
    # task really arrives during the grace period.
    wait_for(lambda: "idle; retiring in" in cli["log"].read_text(), what="W1 went idle")
    task = c.add_task("implement it")
    done = wait_for(lambda: (t := c.get_task(task.id)).status == "done" and t, what="done")
    log = cli["log"]
    assert done.assigned_to == "W1" and done.result == {"ok": 1}
    assert proc.poll() is None, log.read_text()  # still alive: termination was cancelled
    assert proc.wait(15) == 0, log.read_text()  # and it retires after a fresh grace period
    kinds = [k for k in _kinds(c, "W1") if k.startswith(("node_status", "task_", "broadcast"))]
    assert kinds == ["task_claimed:", "task_completed:", "node_status:terminated", "broadcast:"]


def test_a_bootstrap_manager_never_retires(cli: dict[str, Any]) -> None:
    c = cli["c"]
    proc = cli["start"](
        "--id",
        "M1",
        "--role",
        "bootstrap_manager",
        "--heartbeat-interval",
        "0.2",
        "--idle-timeout",
        "0.2",
        "--",
        "true",
    )
    wait_for(lambda: _status(c, "M1") == "idle", what="M1 idle")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(2.0)  # ten idle timeouts
    assert c.get_node("M1").status == "idle"
    task = c.add_task("Recover something", role="bootstrap_manager")
    wait_for(lambda: c.get_task(task.id).status == "done", what="the manager to work")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0
    assert not [e for e in c.events(0, 10_000) if e.kind == "broadcast"]


def test_cli_worker_sigterm_stops_the_command_and_returns_the_task(cli: dict[str, Any]) -> None:
    c, d = cli["c"], cli["dir"]
    task = c.add_task("implement it")
    script = f"echo $$ > {d}/child.pid; cat > {d}/stdin.json; sleep 60"
    proc = cli["start"](
        "--id", "W1", "--role", "developer", "--heartbeat-interval", "5", "--", "sh", "-c", script
    )
    wait_for(
        lambda: (d / "stdin.json").exists() and (d / "stdin.json").stat().st_size,
        what="the command to read its task",
    )
    assert json.loads((d / "stdin.json").read_text())["id"] == task.id
    child = int((d / "child.pid").read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    t = c.get_task(task.id)
    assert t.status == "pending" and t.assigned_to is None
    assert c.get_node("W1").heartbeat["status"] == "shutting-down"
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_cli_worker_fails_the_task_with_the_stderr_tail(cli: dict[str, Any]) -> None:
    c = cli["c"]
    task = c.add_task("implement it", max_attempts=1)
    proc = cli["start"](
        "--id",
        "W1",
        "--role",
        "developer",
        "--idle-timeout",
        "0.1",
        "--",
        "sh",
        "-c",
        "echo first >&2; echo 'last words' >&2; exit 7",
    )
    assert proc.wait(15) == 0
    t = c.get_task(task.id)
    assert t.status == "failed"
    assert t.error.startswith("sh exited with 7") and t.error.endswith("last words")


def test_cli_worker_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_URL": f"sqlite:///{tmp_path / 'c.db'}", "PYTHONPATH": SRC}
    r = subprocess.run(
        [
            *CORRAL,
            "worker",
            "--id",
            "W1",
            "--role",
            "developer",
            "--github-repo",
            "a/b",
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--github-issue" in r.stderr
