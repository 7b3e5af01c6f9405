"""Stuck tasks on the fake clock: the pure rule (``deadlines.progress_deadline``,
``deadlines.stuck_due``) and the store's encoding of it (the rule
``progress_deadline`` of queries.sql, the index head the monitor reads, its pass)
agree after random histories of claims, progress reports, completions and setting
changes; and the monitor flags a task at its deadline, not a millisecond before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corral
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.deadlines import progress_deadline, stuck_due
from corral.errors import CorralError
from corral.model import Settings
from corral.monitor import Monitor

T0 = 1_700_000_000.0


def test_progress_deadline_is_the_tasks_own_limit_else_the_clusters() -> None:
    on = Settings(progress_timeout=60.0)
    off = Settings()
    assert progress_deadline(100.0, None, on) == 160.0
    assert progress_deadline(100.0, 5.0, on) == 105.0
    assert progress_deadline(100.0, 5.0, off) == 105.0
    assert progress_deadline(100.0, None, off) is None  # off by default


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    clock = FakeClock(T0)
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}", clock=clock)
    assert isinstance(c, Cluster)
    yield c, clock
    c.close()


def test_flagged_at_the_deadline_not_before(cluster: Any) -> None:
    """With progress_timeout 90: at the deadline minus 1 ms nothing is stuck; at the
    deadline the task is, with ``stuck_since`` the deadline itself (the index head the
    monitor sleeps until)."""
    c, _ = cluster
    c.configure(progress_timeout=90)
    c.register_node("A", "developer", heartbeat_interval=600)
    c.add_task("Implement it")
    task = c.claim_best_task("A", "developer")
    monitor = Monitor(c, name="unit")
    assert c.store.stuck_deadline() == T0 + 90
    assert monitor.tick(T0 + 90 - 0.001).events == []
    [event] = monitor.tick(T0 + 90).events
    assert (event.kind, event.task_id, event.data["stuck_since"]) == (
        "task_stuck",
        task.id,
        T0 + 90,
    )
    assert c.get_task(task.id).stuck_since == T0 + 90
    assert c.store.stuck_deadline() is None  # flagged: out of the index until progress


IDS = ["A", "B", "C"]
step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from([None, 2.0, 7.5])),
    st.tuples(st.just("claim"), st.sampled_from(IDS)),
    st.tuples(st.just("progress"), st.sampled_from(IDS)),
    st.tuples(st.just("complete"), st.sampled_from(IDS)),
    st.tuples(st.just("configure"), st.sampled_from([0.0, 3.0, 10.0])),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 2.5, 6.0])),
    st.tuples(st.just("tick")),
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, max_size=40))
def test_the_store_and_the_pure_rule_agree(tmp_path_factory: Any, steps: list[Any]) -> None:
    """The model: each attempt's deadline is ``progress_deadline`` of its claim or last
    report, under the settings in force then (a setting change applies from the next
    claim or report). After every step the monitor's index head is the earliest
    deadline of an attempt not flagged yet; each tick flags exactly the attempts
    ``stuck_due`` names, each with ``stuck_since`` its deadline."""
    clock = FakeClock(T0)
    c = corral.connect(f"sqlite:///{tmp_path_factory.mktemp('stuck') / 'c.db'}", clock=clock)
    assert isinstance(c, Cluster)
    monitor = Monitor(c, name="unit")
    # task id -> (its own limit, its last claim or report, the cluster's limit then)
    model: dict[int, tuple[float | None, float, float]] = {}
    try:
        for node in IDS:
            c.register_node(node, "developer", heartbeat_interval=600)
        for op in steps:
            kind, now = op[0], clock.now()
            try:
                if kind == "add":
                    c.add_task("Implement a step", progress_timeout=op[1])
                elif kind == "claim":
                    got = c.claim_best_task(op[1], "developer")
                    if got is not None:
                        limit = c.settings().progress_timeout
                        model[got.id] = (got.progress_timeout, now, limit)
                elif kind in ("progress", "complete"):
                    held = c.list_tasks(status="in_progress", assigned_to=op[1], limit=1)
                    if held and kind == "progress":
                        t = c.report_progress(held[0].id, op[1], epoch=held[0].epoch)
                        model[t.id] = (t.progress_timeout, now, c.settings().progress_timeout)
                    elif held:
                        c.complete_task(held[0].id, op[1], held[0].epoch)
                        model.pop(held[0].id, None)
                elif kind == "configure":
                    c.configure(progress_timeout=op[1])
                elif kind == "advance":
                    clock.advance(op[1])
            except CorralError:
                pass
            deadlines = {
                i: at
                for i, (own, last, limit) in model.items()
                if (at := progress_deadline(last, own, Settings(progress_timeout=limit)))
                is not None
            }
            assert c.store.stuck_deadline() == min(deadlines.values(), default=None)
            if kind != "tick":
                continue
            # The tasks with a deadline, as the pure rule sees them: their last progress
            # is the model's (the claim or the last report), under the limit then.
            expected: set[int] = set()
            for t in c.list_tasks(status="in_progress", limit=1000):
                if t.id in model:
                    _, last, limit = model[t.id]
                    at_then = replace(t, progress_at=last)
                    expected |= stuck_due([at_then], Settings(progress_timeout=limit), now)
            flagged: dict[int, Any] = {}
            for e in monitor.tick(now).events:
                if e.kind == "task_stuck" and e.task_id is not None:
                    flagged[e.task_id] = e
            assert set(flagged) == expected
            for i, event in flagged.items():
                assert event.data["stuck_since"] == deadlines[i]
                assert c.get_task(i).stuck_since == deadlines[i]
                del model[i]  # flagged: no deadline until its next report
    finally:
        c.close()


def test_the_stuck_reads_use_their_index_without_statistics(tmp_path: Path) -> None:
    """The monitor's stuck reads (the next deadline, the tasks past it) are index heads
    and ranges of tasks_stuck_at however many tasks are in progress, on a file never
    analyzed (SQLite then chose tasks_open's tasks in progress and sorted them)."""
    import re
    import sqlite3

    from corral.store.queries import load_queries

    corral.connect(f"sqlite:///{tmp_path / 'plan.db'}").close()
    conn = sqlite3.connect(tmp_path / "plan.db")
    conn.execute(
        "WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < 999)"
        " INSERT INTO tasks (title, priority, roles, status, assigned_to, max_attempts,"
        " sort_key, created_at, updated_at, stuck_at) SELECT 'held', 'medium', 'developer',"
        " 'in_progress', 'f' || (g % 10), 3, 1, 1, 1, 1e12 FROM s"
    )
    queries = load_queries("sqlite")
    for name in ("deadline_heads", "stuck_head", "tasks_stuck"):
        sql = queries[name]
        params = {p: 1 for p in re.findall(r":(\w+)", sql)}
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING INDEX tasks_stuck_at" in plan, (name, plan)
        assert "TEMP B-TREE" not in plan, (name, plan)
    conn.close()
