"""A node's record says what the node is doing (issue: a node's record drifts from
the truth): finishing its last task returns it to idle, ``pid`` is recorded only by
the node's own process, and a node that never heartbeated is shown as such."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import corral
from corral import ConflictError, Monitor
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.defaults import MANAGER_ROLE
from corral.lifecycle import status_after_finishing
from corral.model import Task
from corral.types import Client


def _task(task: Task | None) -> Task:
    """A claim's task, which the test knows is there."""
    assert task is not None
    return task


def _line(c: Client, node_id: str) -> str:
    text = c.read_state().text
    return next(x for x in text.splitlines() if f" {node_id}: " in x)


# --- completion -----------------------------------------------------------------------
def test_completing_the_only_task_returns_the_node_to_idle(
    cluster: Client, clock: FakeClock
) -> None:
    """The README's walk-through: after its only task the node is idle, with no
    current task, idle since the completion (on every backend)."""
    cluster.register_node("W", "developer", "claude-sonnet-4-5")
    cluster.add_task("Implement user authentication", priority="high")
    task = cluster.claim_best_task("W", "developer")
    assert task is not None
    assert cluster.get_node("W").status == "working"
    clock.advance(2)
    cluster.complete_task(task.id, "W", epoch=task.epoch)
    node = cluster.get_node("W")
    assert (node.status, node.current_task_id, node.idle_since) == ("idle", None, clock.now())
    line = _line(cluster, "W")
    assert "[idle]" in line and "Task:" not in line, line


def test_a_node_that_holds_another_task_keeps_working_on_it(
    cluster: Client, clock: FakeClock
) -> None:
    cluster.register_node("W", "developer")
    cluster.add_tasks([{"title": "Implement a", "priority": "high"}, {"title": "Implement b"}])
    a = cluster.claim_best_task("W", "developer")
    assert a is not None
    clock.advance(1)
    b = cluster.claim_best_task("W", "developer")
    assert b is not None
    cluster.complete_task(b.id, "W", b.epoch)
    node = cluster.get_node("W")
    assert (node.status, node.current_task_id, node.idle_since) == ("working", a.id, None)
    assert f"| Task: task-{a.id}" in _line(cluster, "W")


def test_complete_and_claim_stays_working_only_when_it_claimed(
    cluster: Client, clock: FakeClock
) -> None:
    """A worker's step: working on the next task; idle when there was none."""
    cluster.register_node("W", "developer")
    cluster.add_tasks([{"title": "Implement a"}, {"title": "Implement b"}])
    a = cluster.claim_best_task("W", "developer")
    assert a is not None
    clock.advance(1)
    _, b = cluster.complete_and_claim(a.id, "W", "developer", a.epoch)
    assert b is not None
    node = cluster.get_node("W")
    assert (node.status, node.current_task_id, node.idle_since) == ("working", b.id, None)
    clock.advance(1)
    _, nothing = cluster.complete_and_claim(b.id, "W", "developer", b.epoch)
    assert nothing is None
    node = cluster.get_node("W")
    assert (node.status, node.current_task_id, node.idle_since) == ("idle", None, clock.now())


def test_the_rule_on_every_case_equals_lifecycle(embedded: Cluster, clock: FakeClock) -> None:
    """Every case of the rule, on each store's SQL (the rule idle_after_finishing of
    each queries.sql, as SQLite's node_now_idle and node_done_with and PostgreSQL's
    completion statements, lean and full, include it): the status a
    node has after finishing is ``lifecycle.status_after_finishing``; a node that goes
    idle has no current task and is idle since then, an idle node keeps its
    idle_since, and a claim in the same call makes it working."""
    embedded.configure(max_agents=100)
    ways = ("complete", "complete_twice", "chain_empty", "chain_next", "fail", "fail_final")
    for n, (status, role, other, way) in enumerate(
        itertools.product(
            ("working", "idle", "waiting"), ("developer", MANAGER_ROLE), (False, True), ways
        )
    ):
        node = f"N{n}"
        embedded.register_node(node, role)
        embedded.add_tasks([{"title": f"Implement {node} {i}"} for i in range(1 + other)])
        held = [embedded.claim_best_task(node, "developer") for _ in range(1 + other)]
        if way == "complete_twice":  # the task of the node's previous lean claim
            embedded.complete_task(_task(held[0]).id, node, _task(held[0]).epoch)
            embedded.add_task(f"Implement {node} again")
            held[0] = embedded.claim_best_task(node, "developer")
        if status == "idle":  # a node that holds a task cannot say idle (docs/core.md)
            before = embedded.get_node(node)
            with pytest.raises(ConflictError):
                embedded.set_agent_status(node, status)
            assert embedded.get_node(node) == before
            embedded.set_agent_status(node, "terminated")
            continue
        if status != "working":
            embedded.set_agent_status(node, status)
        before = embedded.get_node(node)
        if way == "chain_next":
            embedded.add_task(f"Implement {node} next")
        clock.advance(1)
        t = held[0]
        assert t is not None
        nxt = None
        if way in ("complete", "complete_twice"):
            embedded.complete_task(t.id, node, t.epoch)
        elif way.startswith("chain"):
            _, nxt = embedded.complete_and_claim(t.id, node, "developer", t.epoch)
        else:
            embedded.fail_task(t.id, node, t.epoch, error="no", retry=way == "fail")
        got = embedded.get_node(node)
        case = (status, role, other, way)
        if nxt is not None:
            want_next = ("working", nxt.id, None)
            assert (got.status, got.current_task_id, got.idle_since) == want_next, case
            continue
        want = status_after_finishing(status, role, other)
        assert got.status == want, case
        if want == "idle" and status != "idle":
            assert (got.current_task_id, got.idle_since) == (None, clock.now()), case
        else:
            assert got.idle_since == before.idle_since, case
        if want == "working":
            assert got.current_task_id == (_task(held[1]).id if other else None), case
        for task in (nxt, *held):
            if task is not None:
                embedded.get_task(task.id)  # still there
        embedded.set_agent_status(node, "terminated")


def test_a_node_idle_after_its_last_task_is_retired_at_its_idle_limit(
    embedded: Cluster, clock: FakeClock
) -> None:
    """Idle since its completion, the node is retired by the monitor at its limit."""
    embedded.register_node("W", "developer", heartbeat_interval=100)
    embedded.add_task("Implement it")
    task = embedded.claim_best_task("W", "developer")
    assert task is not None
    clock.advance(5)
    embedded.complete_task(task.id, "W", task.epoch)
    limit = embedded.settings().idle_limit
    monitor = Monitor(embedded)
    clock.advance(limit - 0.5)
    embedded.heartbeat("W")
    assert [e.kind for e in monitor.tick(clock.now()).events] == []
    clock.advance(0.5)
    assert [e.kind for e in monitor.tick(clock.now()).events] == ["node_retired"]


def test_the_manager_stays_working_after_its_task(cluster: Client) -> None:
    cluster.register_node("BM", MANAGER_ROLE)
    cluster.add_task("Plan the release")
    task = cluster.claim_best_task("BM", "architect")
    assert task is not None
    cluster.complete_task(task.id, "BM", task.epoch)
    node = cluster.get_node("BM")
    assert (node.status, node.current_task_id) == ("working", None)


# --- pid -------------------------------------------------------------------------------
def test_a_registration_names_a_pid_only_when_the_caller_gives_one(cluster: Client) -> None:
    """A process registering on behalf of a node (the server, the MCP tools, the
    CLI) records no pid; a node's own process names its own."""
    assert cluster.register_node("A", "developer").pid is None
    assert cluster.get_node("A").pid is None
    assert cluster.register_node("B", "developer", pid=4242).pid == 4242
    assert cluster.get_node("B").pid == 4242


def test_corral_node_register_does_not_record_its_own_pid(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "corral", "--url", url, "node", "register", "N1", "developer"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    with corral.connect(url) as c:
        assert c.get_node("N1").pid is None


def test_a_worker_records_its_own_pid(sqlite_cluster: Cluster) -> None:
    w = corral.Worker("W1", "developer", cluster=sqlite_cluster, handle_signals=False)
    w.register()
    try:
        assert sqlite_cluster.get_node("W1").pid == os.getpid()
    finally:
        w.close()


# --- heartbeat -------------------------------------------------------------------------
def test_a_node_that_never_heartbeated_is_not_shown_green(
    cluster: Client, clock: FakeClock
) -> None:
    """⚪ and said in words until its first heartbeat; 🟢 while it beats; 🔴 once
    silent past its window."""
    cluster.register_node("W", "developer", heartbeat_interval=10)  # window 30 s
    line = _line(cluster, "W")
    assert line.startswith("⚪ W: developer [idle]") and line.endswith("| no heartbeat yet")
    assert "**Node Heartbeat:** ⚪ NONE" in cluster.read_state().text
    cluster.heartbeat("W")
    assert _line(cluster, "W") == "🟢 W: developer [idle] (unknown model - unknown)"
    clock.advance(31)
    assert _line(cluster, "W").startswith("🔴 W: ")


def test_a_call_that_counts_as_a_heartbeat_is_one(cluster: Client, clock: FakeClock) -> None:
    """The MCP tools count each call by a node as its heartbeat (``touch``): it is
    shown as one."""
    cluster.register_node("W", "developer")
    clock.advance(3)
    assert cluster.touch("W")
    node = cluster.get_node("W")
    assert node.last_heartbeat == clock.now() == node.last_seen
    assert _line(cluster, "W").startswith("🟢 W: ")


def _undo_sqlite_migrations_after(raw: sqlite3.Connection, version: int) -> None:
    """Undo what the SQLite migrations after ``version`` add that cannot be added twice
    (their triggers, indexes, tables and columns), so that marking the file at
    ``version`` again re-runs them as on a file that never had them."""
    import re

    from corral.store.queries import migrations

    later = "\n".join(sql for v, sql in migrations("sqlite") if v > version)
    for kind in ("TRIGGER", "INDEX", "TABLE"):
        for name in re.findall(rf"CREATE {kind} (?:IF NOT EXISTS )?(\w+)", later):
            raw.execute(f"DROP {kind} IF EXISTS {name}")
    for table, column in re.findall(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", later):
        raw.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def _rewind_to_an_idle_holder(url: str, node_id: str) -> None:
    """Make ``node_id`` idle while it holds its task, as set_agent_status could before
    migration 11 (SQLite) / 12 (PostgreSQL), and mark that migration not yet applied."""
    if url.startswith("sqlite:///"):
        raw = sqlite3.connect(url.removeprefix("sqlite:///"))
        with raw:
            raw.execute("UPDATE nodes SET status = 'idle', idle_since = 1 WHERE id = ?", [node_id])
            _undo_sqlite_migrations_after(raw, 11)
            raw.execute("PRAGMA user_version = 10")
        raw.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("UPDATE nodes SET status = 'idle', idle_since = 1 WHERE id = %s", [node_id])
            pg.execute("DELETE FROM corral_migrations WHERE version = 12")


def test_an_idle_node_that_holds_a_task_works_on_it_once_migrated(
    embedded: Cluster, clock: FakeClock
) -> None:
    """A database written before the rule (an idle node holding a lease) is repaired
    when a store opens it: the holder is working on its task, with a node_status
    event; an idle node that holds nothing stays idle."""
    embedded.register_node("W", "developer")
    embedded.register_node("I", "developer")
    embedded.add_task("Implement it")
    task = embedded.claim_best_task("W", "developer")
    assert task is not None
    assert embedded.url is not None
    _rewind_to_an_idle_holder(embedded.url, "W")
    with corral.connect(embedded.url, clock=clock) as c:
        node = c.get_node("W")
        assert (node.status, node.current_task_id, node.idle_since) == ("working", task.id, None)
        assert c.heartbeat("W").current_task_id == task.id
        assert c.get_node("I").status == "idle"
        last = [e for e in c.events() if e.kind == "node_status"][-1]
        assert (last.node_id, last.task_id, last.data["old"], last.data["new"]) == (
            "W",
            task.id,
            "idle",
            "working",
        )
