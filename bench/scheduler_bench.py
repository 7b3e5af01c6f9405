"""The activation scheduler: ``get_assignment`` + ``release_assignment`` latency with
1k, 10k and 100k agents and 1M notifications, on SQLite and on PostgreSQL, against
the query shape of the scheduling design corral started from, on the same data.

Each backend and size gets a fresh database: the agents (1% never activated, the rest
activated at random times in the last day) and the notifications (5% unread, spread
over every agent) are generated in SQL, then the unread counts are set from them and
the planner's statistics refreshed. A hybrid runner node then takes and releases
``--samples`` activations (inbox work), and an exploration runner as many (discovery:
the staleness index) (each pair timed as one sample: two write transactions; an
inbox activation's agent is notified again, untimed, so the inbox keeps its depth).
On the same data, before that, the bench times the original shape's two reads per
assignment —
``SELECT a.id, COUNT(n.id) … JOIN notifications … WHERE unread GROUP BY a.id ORDER BY
inbox_count DESC`` and the staleness query ``… WHERE id NOT IN (SELECT agent_id FROM
<locks>) ORDER BY last_activated_at ASC NULLS FIRST LIMIT 10`` — without any claim
or release write. Targets: corral's p99 at 100k agents within 2x of its p99 at 1k;
the ratio of the original shape's time to corral's at 100k.

    python bench/scheduler_bench.py             # 1k, 10k, 100k agents; 1M notifications
    python bench/scheduler_bench.py --quick     # 100 and 1k agents; 10k notifications
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

ADMIN = os.environ.get("CORRAL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
T0 = 1_700_000_000.0
WARMUP = 50  # untimed pairs first: the connection's caches and the interpreter warm

SQLITE_LOAD = [
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})
    INSERT INTO agents (id, config, last_activated_at, activation_count, created_at, updated_at)
    SELECT printf('agent-%07d', i), '{{}}',
           CASE WHEN i % 100 = 0 THEN NULL ELSE {t0} - abs(random() % 86400) END,
           1, {t0}, {t0} FROM s""",
    """WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {m})
    INSERT INTO notifications (agent_id, payload, created_at, read_at)
    SELECT printf('agent-%07d', 1 + abs(random() % {n})), '{{"n":1}}', {t0} - {m} + i,
           CASE WHEN i % 20 = 0 THEN NULL ELSE {t0} END FROM s""",
    """UPDATE agents SET unread = (SELECT count(*) FROM notifications n
        WHERE n.agent_id = agents.id AND n.read_at IS NULL)""",
    "ANALYZE",
]
PG_LOAD = [
    """INSERT INTO agents (id, config, last_activated_at, activation_count, created_at,
                           updated_at)
    SELECT 'agent-' || lpad(i::text, 7, '0'), '{{}}',
           CASE WHEN i % 100 = 0 THEN NULL ELSE {t0} - floor(random() * 86400) END,
           1, {t0}, {t0} FROM generate_series(1, {n}) i""",
    """INSERT INTO notifications (agent_id, payload, created_at, read_at)
    SELECT 'agent-' || lpad((1 + floor(random() * {n}))::int::text, 7, '0'), '{{"n":1}}',
           {t0} - {m} + i, CASE WHEN i % 20 = 0 THEN NULL ELSE {t0} END
    FROM generate_series(1, {m}) i""",
    """UPDATE agents a SET unread = c.k FROM (SELECT agent_id, count(*) AS k
        FROM notifications WHERE read_at IS NULL GROUP BY agent_id) c
        WHERE a.id = c.agent_id""",
]
# The original shape, on corral's tables (recipient -> agent_id, read -> read_at,
# agent_locks -> activations).
ORIGINAL_INBOX = """SELECT a.id, COUNT(n.id) AS inbox_count
    FROM agents a JOIN notifications n ON n.agent_id = a.id
    WHERE n.read_at IS NULL
    GROUP BY a.id
    ORDER BY inbox_count DESC"""
ORIGINAL_STALE = """SELECT id, last_activated_at FROM agents
    WHERE id NOT IN (SELECT agent_id FROM activations)
    ORDER BY last_activated_at ASC NULLS FIRST
    LIMIT 10"""


def _pg_url(db: str) -> str:
    p = urlsplit(ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{db}", p.query, ""))


def _pg_admin(sql: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


class Backend:
    """A fresh database of one backend, loaded; ``raw`` runs SQL outside corral."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.path = workdir / f"sched-{uuid.uuid4().hex[:8]}.db"
            self.url = f"sqlite:///{self.path}"
            self.db = ""
        else:
            self.db = f"corral_sched_{uuid.uuid4().hex[:8]}"
            _pg_admin(f'CREATE DATABASE "{self.db}"')
            self.url = _pg_url(self.db)

    def load(self, agents: int, notifications: int) -> float:
        start = time.perf_counter()
        corral.connect(self.url).close()  # migrate
        fmt = {"n": agents, "m": notifications, "t0": T0}
        if self.kind == "sqlite":
            with sqlite3.connect(self.path, isolation_level=None) as conn:
                for sql in SQLITE_LOAD:
                    conn.execute(sql.format(**fmt))
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                for sql in PG_LOAD:
                    conn.execute(sql.format(**fmt))
                conn.execute("VACUUM ANALYZE")
        return time.perf_counter() - start

    def original(self, samples: int) -> list[float]:
        """The original shape's two reads per assignment, timed together."""
        out = []
        if self.kind == "sqlite":
            conn: Any = sqlite3.connect(self.path, isolation_level=None)
        else:
            conn = psycopg.connect(self.url, autocommit=True)
        try:
            for _ in range(samples):
                t = time.perf_counter()
                conn.execute(ORIGINAL_INBOX).fetchone()
                conn.execute(ORIGINAL_STALE).fetchall()
                out.append(time.perf_counter() - t)
        finally:
            conn.close()
        return out

    def read_everything(self) -> None:
        sqls = [
            "UPDATE notifications SET read_at = 1 WHERE read_at IS NULL",
            "UPDATE agents SET unread = 0 WHERE unread <> 0",
        ]
        if self.kind == "sqlite":
            with sqlite3.connect(self.path, isolation_level=None) as conn:
                for sql in sqls:
                    conn.execute(sql)
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                for sql in sqls:
                    conn.execute(sql)

    def plan(self) -> str:
        """How the backend runs the inbox claim's head (no sort, one index)."""
        head = (
            "SELECT id FROM agents WHERE held_by IS NULL AND unread > 0 "
            "ORDER BY unread DESC, last_activated_at ASC NULLS FIRST, id LIMIT 1"
        )
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as conn:
                rows = conn.execute("EXPLAIN QUERY PLAN " + head).fetchall()
            return "; ".join(r[-1] for r in rows)
        with psycopg.connect(self.url) as conn:
            rows = conn.execute("EXPLAIN " + head).fetchall()
        return "; ".join(r[0].strip() for r in rows)

    def drop(self) -> None:
        if self.kind == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        else:
            _pg_admin(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')


def run_corral(url: str, samples: int, mode: str) -> tuple[list[float], dict[str, int]]:
    """``samples`` assignment + release pairs by one runner in ``mode``, timed each."""
    kinds: dict[str, int] = {}
    out = []
    runner = f"bench-{mode}"
    with corral.connect(url) as c:
        c.register_node(runner, "runner", heartbeat_interval=3600)
        for i in range(samples + WARMUP):
            t = time.perf_counter()
            a = c.get_assignment(runner, mode)
            assert a is not None
            c.release_assignment(a.id, runner, a.epoch, {"inbox_read": len(a.inbox)})
            if i >= WARMUP:
                out.append(time.perf_counter() - t)
                kinds[a.kind] = kinds.get(a.kind, 0) + 1
            if a.kind == "inbox":  # untimed: the inbox stays as deep as it was loaded
                c.notify(a.agent_id, {"n": 1})
    return out, kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--original-samples", type=int, default=None)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scheduler_bench.json")
    args = parser.parse_args()
    sizes = [100, 1_000] if args.quick else [1_000, 10_000, 100_000]
    notifications = 10_000 if args.quick else 1_000_000
    samples = args.samples or (100 if args.quick else 2_000)
    original_samples = args.original_samples or (10 if args.quick else 30)
    backends = [b for b in args.backends.split(",") if b]
    results = []
    with tempfile.TemporaryDirectory(prefix="corral-sched-bench-") as tmp:
        for kind in backends:
            for n in sizes:
                b = Backend(kind, Path(tmp))
                try:
                    load_s = b.load(n, notifications)
                    plan = b.plan()
                    theirs = b.original(original_samples)  # first: on the data as loaded
                    ours, kinds = run_corral(b.url, samples, "hybrid")
                    b.read_everything()  # discovery takes agents with an empty inbox
                    stale, _ = run_corral(b.url, samples, "exploration")
                finally:
                    b.drop()
                row = {
                    "backend": kind,
                    "agents": n,
                    "notifications": notifications,
                    "load_s": round(load_s, 2),
                    "corral": percentiles(ours),
                    "corral_discovery": percentiles(stale),
                    "original": percentiles(theirs),
                    "kinds": kinds,
                    "plan": plan,
                }
                results.append(row)
                print(
                    f"{kind} {n}: corral p50 {row['corral']['p50'] * 1e3:.3f} ms,"
                    f" original p50 {row['original']['p50'] * 1e3:.1f} ms",
                    flush=True,
                )
    summary = {}
    for kind in backends:
        rows = {r["agents"]: r for r in results if r["backend"] == kind}
        small, large = rows[sizes[0]], rows[sizes[-1]]
        summary[kind] = {
            "p99_ratio_largest_to_smallest": large["corral"]["p99"] / small["corral"]["p99"],
            "discovery_p99_ratio_largest_to_smallest": large["corral_discovery"]["p99"]
            / small["corral_discovery"]["p99"],
            "original_to_corral_p50_at_largest": large["original"]["p50"] / large["corral"]["p50"],
        }
    data = {
        "bench": "scheduler_bench",
        "machine": machine_info(),
        "params": {
            "sizes": sizes,
            "notifications": notifications,
            "samples": samples,
            "original_samples": original_samples,
            "backends": backends,
        },
        "results": results,
        "summary": summary,
    }
    write_json(args.out, data)
    headers = [
        "backend",
        "agents",
        "corral p50 ms",
        "corral p99 ms",
        "discovery p50 ms",
        "discovery p99 ms",
        "original p50 ms",
        "original/corral",
    ]
    rows_out = [
        [
            r["backend"],
            r["agents"],
            r["corral"]["p50"] * 1e3,
            r["corral"]["p99"] * 1e3,
            r["corral_discovery"]["p50"] * 1e3,
            r["corral_discovery"]["p99"] * 1e3,
            r["original"]["p50"] * 1e3,
            r["original"]["p50"] / r["corral"]["p50"],
        ]
        for r in results
    ]
    print(table(headers, rows_out))
    for kind, s in summary.items():
        print(
            f"{kind}: p99 at {sizes[-1]:,} / p99 at {sizes[0]:,} ="
            f" {s['p99_ratio_largest_to_smallest']:.2f}"
        )


if __name__ == "__main__":
    main()
