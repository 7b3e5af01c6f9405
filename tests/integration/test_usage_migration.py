"""Migration 0020 (usage kept per node and hour, and per task on the task's row) keeps
the sums recorded before it, on SQLite and PostgreSQL: each node's hourly rows carry
over with its live row's role and model and its pool, and each task's rows are summed
onto the task."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest

import corral
from corral.clock import FakeClock
from corral.store.queries import migrations
from tests.support.backends import postgres as pg

T0 = 1_700_000_000.0
HOUR = 1_699_999_200.0  # the hour holding T0
BEFORE = 20  # the migration under test: every earlier one makes the old store


def _old_rows(task_id: int) -> list[tuple[object, ...]]:
    """usage_buckets as migration 0018 kept them: two reports by dev-3 (role
    developer, model opus, pool dev) on the task, an hour apart, and one by a node no
    longer live."""
    task = f"#{task_id:018d}"
    sums: dict[tuple[str, float], list[int]] = {}
    reports = [(HOUR - 3600, "dev-3", 1), (HOUR, "dev-3", 2)]
    for start, node, n in reports:
        for scope in ("cluster", f"node:{node}", "role:developer", "model:opus", "pool:dev", task):
            acc = sums.setdefault((scope, start), [0, 0, 0, 0])
            for i, v in enumerate((100 * n, 10 * n, 5000 * n, n)):
                acc[i] += v
    for scope in ("cluster", "node:gone"):  # a report by a node no longer live
        acc = sums.setdefault((scope, HOUR), [0, 0, 0, 0])
        for i, v in enumerate((7, 0, 0, 1)):
            acc[i] += v
    return [(k[0], k[1], *v) for k, v in sums.items()]


def _check(url: str) -> None:
    clock = FakeClock(T0)
    with corral.connect(url, clock=clock) as c:
        tokens = {
            s: (c.usage(s, "1d").input_tokens, c.usage(s, "1d").reports)
            for s in ("cluster", "node:dev-3", "role:developer", "model:opus", "pool:dev")
        }
        assert tokens == {
            "cluster": (307, 4),
            "node:dev-3": (300, 3),
            "role:developer": (300, 3),
            "model:opus": (300, 3),
            "pool:dev": (300, 3),
        }
        assert c.usage("node:gone", "1d").input_tokens == 7
        assert c.usage("cluster", "1h").input_tokens == 207  # the hours stay apart
        u = c.usage("task:1", "1d")
        assert (u.input_tokens, u.output_tokens, u.cost_usd, u.reports) == (300, 30, 0.015, 3)
        # and the migrated store records new reports beside them
        c.heartbeat("dev-3", usage={"input_tokens": 1})
        assert c.usage("role:developer", "1h").input_tokens == 201


def test_sqlite_migration_keeps_the_sums(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for version, sql in migrations("sqlite"):
        if version < BEFORE:
            conn.executescript(sql)
            conn.execute(f"PRAGMA user_version={version}")
    conn.execute(
        "INSERT INTO nodes (id, role, model, status, last_activity, live_window, dead_at,"
        " registered_at) VALUES ('dev-3', 'developer', 'opus', 'idle', ?, 1e9, 2e9, ?)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO tasks (id, title, priority, status, max_attempts, sort_key, created_at,"
        " updated_at) VALUES (1, 'Implement it', 'medium', 'done', 3, 0, ?, ?)",
        (T0, T0),
    )
    conn.executemany(
        "INSERT INTO usage_buckets (scope, start, input_tokens, output_tokens, cost_micros,"
        " reports) VALUES (?, ?, ?, ?, ?, ?)",
        _old_rows(1),
    )
    conn.close()
    _check(f"sqlite:///{path}")


def test_postgres_migration_keeps_the_sums(request: pytest.FixtureRequest) -> None:
    name = f"corral_mig_{uuid.uuid4().hex[:10]}"
    pg.admin(f'CREATE DATABASE "{name}"')
    request.addfinalizer(lambda: pg.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    url = pg.url_for(name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE corral_migrations (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, sql in migrations("postgres"):
            if version < BEFORE:
                conn.execute(sql.encode())
                conn.execute("INSERT INTO corral_migrations (version) VALUES (%s)", [version])
        conn.execute(
            "INSERT INTO nodes (id, role, model, status, last_activity, live_window, dead_at,"
            " registered_at) VALUES ('dev-3', 'developer', 'opus', 'idle', %s, 1e9, 2e9, %s)",
            [T0, T0],
        )
        conn.execute(
            "INSERT INTO tasks (id, title, priority, status, max_attempts, sort_key,"
            " created_at, updated_at) VALUES (1, 'Implement it', 'medium', 'done', 3, 0, %s, %s)",
            [T0, T0],
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO usage_buckets (scope, start, input_tokens, output_tokens,"
                " cost_micros, reports) VALUES (%s, %s, %s, %s, %s, %s)",
                _old_rows(1),
            )
    _check(url)
