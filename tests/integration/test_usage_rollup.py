"""SQLite keeps a completion's usage on its task's row (its sums and the completion's
report), and adds it to its node's hour later, in batches (docs/guardrails.md, "Usage
and spend"): every read counts the reports not rolled up yet, so the sums are exact
before, during and after a roll-up; the node's role and model are those it had when it
completed (a registration that changes them rolls up first); the monitor rolls up
(without waking for it), the pruning of events rolls up first, a reader that finds many
rolls them up, and with budgets set the completion rolls up at once (its budgets are
announced from the exact sums)."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest

import corral
from corral.clock import FakeClock
from corral.monitor import Monitor
from corral.store import sqlusage
from corral.store.queries import migrations
from tests.support import usage_procs

CTX = mp.get_context("spawn")
T0 = 1_700_000_000.0
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}


def _hours(path: Path) -> list[tuple[object, ...]]:
    """usage_hours as another connection reads it."""
    with sqlite3.connect(path) as raw:
        return raw.execute(
            "SELECT start, node_id, role, model, pool, input_tokens, output_tokens,"
            " cost_micros, reports FROM usage_hours ORDER BY start, node_id"
        ).fetchall()


def _connect(path: Path, clock: FakeClock | None = None) -> corral.Cluster:
    c = corral.connect(f"sqlite:///{path}", clock=clock)
    assert isinstance(c, corral.Cluster)  # the embedded store: its roll-up is called
    return c


def _complete(c: corral.Cluster, node: str, n: int = 1) -> None:
    for _ in range(n):
        c.add_task("Implement the report")
        task = c.claim_best_task(node, "developer")
        assert task is not None
        c.complete_task(task.id, node, epoch=task.epoch, usage=USAGE)


def _totals(c: corral.Cluster, scope: str) -> tuple[int, int, float, int]:
    u = c.usage(scope, "1d")
    return (u.input_tokens, u.output_tokens, u.cost_usd, u.reports)


def test_a_completion_s_usage_is_read_exactly_before_and_after_its_roll_up(
    tmp_path: Path,
) -> None:
    path = tmp_path / "u.db"
    clock = FakeClock(T0)
    with _connect(path, clock) as c:
        c.register_node("dev-1", "developer", model="opus")
        _complete(c, "dev-1", 2)
        assert _hours(path) == []  # the completions wrote no hour
        done = [e for e in c.events() if e.kind == "task_completed"]
        assert len(done) == 2 and all("usage" not in e.data for e in done)  # as without
        with sqlite3.connect(path) as raw:  # the reports on their tasks' rows
            assert (
                raw.execute(
                    "SELECT usage_last_input, usage_last_output, usage_last_micros,"
                    " usage_input_tokens, usage_reports FROM tasks ORDER BY id"
                ).fetchall()
                == [(1200, 300, 12300, 1200, 1)] * 2
            )
        expected = (2400, 600, 0.0246, 2)
        for scope in ("cluster", "node:dev-1", "role:developer", "model:opus", "pool:dev"):
            assert _totals(c, scope) == expected, scope
        assert _totals(c, "role:tester") == (0, 0, 0.0, 0)
        # The node leaves before the roll-up: its reports keep its role and model.
        c.terminate_node("dev-1")
        assert c.store.roll_up_usage(clock.now()) == 2
        assert _hours(path) == [
            (1_699_999_200.0, "dev-1", "developer", "opus", "dev", 2400, 600, 24600, 2)
        ]
        for scope in ("cluster", "node:dev-1", "role:developer", "model:opus", "pool:dev"):
            assert _totals(c, scope) == expected, scope
        assert c.store.roll_up_usage(clock.now()) == 0  # nothing left: nothing added twice
        assert _hours(path)[0][-1] == 2
        # An hour later: the window's earlier hour from the table, the new one pending.
        clock.advance(3600)
        c.register_node("dev-1", "developer", model="opus")
        _complete(c, "dev-1")
        assert _totals(c, "cluster") == (3600, 900, 0.0369, 3)
        assert c.usage("cluster", "1h").reports == 1


def test_the_monitor_rolls_up_without_waking_for_it_and_pruning_rolls_up_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "u.db"
    clock = FakeClock(T0)
    with _connect(path, clock) as c:
        c.configure(event_retention_seconds=60)
        c.register_node("dev-1", "developer", model="opus", heartbeat_interval=3600)
        monitor = Monitor(c)
        first = monitor.tick()
        _complete(c, "dev-1")
        assert monitor.tick().next_deadline == first.next_deadline  # no deadline of its own
        assert _hours(path) == []  # due again a second later
        clock.advance(1.0)
        monitor.tick()
        assert [r[-1] for r in _hours(path)] == [1]
        _complete(c, "dev-1")  # pending when the events are pruned
        clock.advance(120)
        c.register_node("dev-2", "developer")  # an event to keep (the last one is kept)
        assert c.store.prune_events(clock.now()) > 0
        assert not any(e.kind == "task_completed" for e in c.events())
        assert [r[-1] for r in _hours(path)] == [2]
        assert _totals(c, "role:developer") == (2400, 600, 0.0246, 2)


def test_a_reader_that_finds_many_rolls_them_up_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlusage, "READER_ROLLS", 3)
    monkeypatch.setattr(sqlusage, "ROLL_BATCH", 2)
    path = tmp_path / "u.db"
    with _connect(path, FakeClock(T0)) as c:
        c.register_node("dev-1", "developer")
        _complete(c, "dev-1", 2)
        assert _totals(c, "cluster")[3] == 2
        assert _hours(path) == []  # two: read, not rolled up
        _complete(c, "dev-1", 3)
        assert _totals(c, "cluster") == (6000, 1500, 0.0615, 5)
        assert [r[-1] for r in _hours(path)] == [5]  # three batches
        assert _totals(c, "cluster") == (6000, 1500, 0.0615, 5)
        assert c.store.usage_by_scope(T0 - 3600, T0 + 3600)[0]["reports"] == 5


def test_with_budgets_set_a_completion_rolls_up_and_announces_from_the_exact_sums(
    tmp_path: Path,
) -> None:
    path = tmp_path / "u.db"
    with _connect(path, FakeClock(T0)) as c:
        c.register_node("dev-1", "developer")
        _complete(c, "dev-1", 3)  # no budgets: pending
        assert _hours(path) == []
        c.configure(budgets=[{"scope": "role:developer", "window": "1d", "tokens": 7000}])
        _complete(c, "dev-1")  # 6000 of 7000: past 80%
        assert [r[-1] for r in _hours(path)] == [4]
        warned = [e for e in c.events() if e.kind == "budget_warning"]
        assert [e.data["used"] for e in warned] == [round(6000 / 7000, 4)]


def test_a_registration_that_changes_the_role_or_model_rolls_up_first(tmp_path: Path) -> None:
    """The reports not rolled up yet keep the role and model their node had when it
    completed: registering again as another role, or as a new incarnation of another
    model, rolls them up first; registering again as the same one does not."""
    path = tmp_path / "u.db"
    with _connect(path, FakeClock(T0)) as c:
        c.register_node("dev-1", "developer", model="opus")
        _complete(c, "dev-1")
        c.register_node("dev-1", "developer", model="opus")  # the same: nothing moves
        assert _hours(path) == []
        c.register_node("dev-1", "architect", model="opus")  # live, another role
        assert [r[2:4] + r[-1:] for r in _hours(path)] == [("developer", "opus", 1)]
        _complete(c, "dev-1")  # as an architect now (it claims as a developer)
        c.terminate_node("dev-1")
        c.register_node("dev-1", "architect", model="sonnet")  # a new row, another model
        assert sorted(r[2:4] + r[-1:] for r in _hours(path)) == [
            ("architect", "opus", 1),
            ("developer", "opus", 1),
        ]
        _complete(c, "dev-1")  # pending: read with the node's latest row
        assert _totals(c, "model:sonnet") == (1200, 300, 0.0123, 1)
        assert _totals(c, "role:architect") == (2400, 600, 0.0246, 2)
        assert _totals(c, "role:developer") == (1200, 300, 0.0123, 1)
        assert _totals(c, "cluster") == (3600, 900, 0.0369, 3)


@pytest.mark.slow
def test_completions_from_8_processes_sum_exactly_while_the_monitor_rolls_up(
    tmp_path: Path,
) -> None:
    path = tmp_path / "u.db"
    url = f"sqlite:///{path}"
    procs, jobs = 8, 1600
    with corral.connect(url) as c:
        c.configure(max_agents=procs + 4)
        c.add_tasks([{"title": f"Implement item {i}"} for i in range(jobs)])
    barrier, out = CTX.Barrier(procs), CTX.Queue()
    workers = [
        CTX.Process(target=usage_procs.completer, args=(url, f"dev-{i}", barrier, out))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    seen: list[int] = []
    with _connect(path) as c:
        while any(w.is_alive() for w in workers) and len(seen) < 10_000:
            c.store.roll_up_usage(0.0)
            seen.append(c.usage("cluster", "1d").reports)
        results = [out.get(timeout=300) for _ in workers]
        for w in workers:
            w.join(timeout=30)
        assert all(errors == [] for _, _, errors in results), results
        assert sum(done for _, done, _ in results) == jobs
        assert seen == sorted(seen) and seen[-1] <= jobs  # never counted twice
        u = usage_procs.USAGE
        c.store.roll_up_usage(0.0)
        for scope in ("cluster", "role:developer", "model:opus", "pool:dev"):
            total = c.usage(scope, "1d")
            assert (total.reports, total.input_tokens, total.output_tokens) == (
                jobs,
                jobs * u["input_tokens"],
                jobs * u["output_tokens"],
            ), scope
            assert round(total.cost_usd * 1_000_000) == jobs * 7, scope
        with sqlite3.connect(path) as raw:  # all in the hours now
            assert raw.execute("SELECT sum(reports) FROM usage_hours").fetchone() == (jobs,)


def test_migration_0023_starts_the_mark_past_the_events_already_written(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path, isolation_level=None)
    for version, sql in migrations("sqlite"):
        if version < 23:
            raw.executescript(sql)
            raw.execute(f"PRAGMA user_version={version}")
    for i in range(3):  # events of the version before: none carries a report
        raw.execute(
            "INSERT INTO events (ts, kind, node_id, data) VALUES (?, 'node_registered', 'x', '{}')",
            (T0 + i,),
        )
    raw.close()
    with _connect(path, FakeClock(T0)) as c:
        with sqlite3.connect(path) as other:
            mark = other.execute("SELECT value FROM meta WHERE key = 'usage_rolled'").fetchone()
        assert mark == ("3",)
        c.register_node("dev-1", "developer")
        _complete(c, "dev-1")
        assert _totals(c, "cluster") == (1200, 300, 0.0123, 1)
        assert c.store.roll_up_usage(T0) == 1
        assert [r[-1] for r in _hours(path)] == [1]


def test_migration_0024_moves_the_reports_left_on_events_to_their_tasks(tmp_path: Path) -> None:
    """The version before left a completion's report on its event: the reports past the
    roll-up's mark move to their tasks' rows and are read and rolled up as new ones;
    those before the mark (in usage_hours already) stay out."""
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path, isolation_level=None)
    for version, sql in migrations("sqlite"):
        if version < 24:
            raw.executescript(sql)
            raw.execute(f"PRAGMA user_version={version}")
    raw.execute(
        "INSERT INTO nodes (id, role, model, status, last_activity, heartbeat_interval,"
        " live_window, dead_at, registered_at) VALUES ('dev-1', 'developer', 'opus', 'idle',"
        " ?, 30, 90, ?, ?)",
        (T0, T0 + 90, T0),
    )
    report = json.dumps(
        {
            "epoch": 1,
            "claimed_at": T0,
            "usage": {
                "input_tokens": 1200,
                "output_tokens": 300,
                "cost_micros": 12300,
                "role": "developer",
                "model": "opus",
            },
        }
    )
    for task_id in (1, 2):
        raw.execute(
            "INSERT INTO tasks (id, title, priority, status, assigned_to, max_attempts,"
            " sort_key, created_at, updated_at, finished_at) VALUES"
            " (?, 'Implement it', 'medium', 'done', 'dev-1', 3, ?, ?, ?, ?)",
            (task_id, T0, T0, T0, T0),
        )
        raw.execute(
            "INSERT INTO events (ts, kind, node_id, task_id, data)"
            " VALUES (?, 'task_completed', 'dev-1', ?, ?)",
            (T0, task_id, report),
        )
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'usage_rolled'")  # 1 rolled up
    raw.close()
    with _connect(path, FakeClock(T0)) as c:
        with sqlite3.connect(path) as other:
            moved = other.execute(
                "SELECT id, usage_last_input, usage_last_output, usage_last_micros FROM tasks"
                " ORDER BY id"
            ).fetchall()
        assert moved == [(1, None, None, None), (2, 1200, 300, 12300)]
        assert _totals(c, "model:opus") == (1200, 300, 0.0123, 1)  # usage_hours is empty
        assert c.store.roll_up_usage(T0) == 1
        assert _hours(path) == [
            (1_699_999_200.0, "dev-1", "developer", "opus", "dev", 1200, 300, 12300, 1)
        ]
