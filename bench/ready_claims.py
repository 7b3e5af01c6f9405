"""Claim latency with a tenth of the board not ready, against the same board without it,
on SQLite and PostgreSQL side by side.

Each backend gets two boards with the same ``--pending`` pending tasks (loaded with
``Cluster.add_tasks`` in batches of 10,000; a third of the titles match the developer
keywords, so both index heads are used): ``plain``, and ``not-ready``, which also holds
as many tasks again as make ``--share`` (10%) of its board that no claim may take: half
``scheduled`` (a ``not_before`` a year ahead), half ``blocked`` (``depends_on`` a task
another node holds). One node per board claims (timed), completes and replaces
(untimed: the pending count stays put) ``--claims`` tasks in ``--rounds`` rounds that
interleave the four boards, so a burst of load on this shared machine hits them alike.
The target: on each backend, p99 with the not-ready tasks within 2x of p99 without
(a task not ready is outside the claim's indexes: docs/core.md, "Tasks with time and
order").

    python bench/ready_claims.py            # 1M pending (loading takes minutes)
    python bench/ready_claims.py --quick    # 20k pending (seconds)
"""

from __future__ import annotations

import argparse
import os
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
ROLE = "developer"
NODE = "bench"
BATCH = 10_000
YEAR = 365 * 86400.0


def _pg_url(db: str) -> str:
    p = urlsplit(ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{db}", p.query, ""))


def _admin(sql: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def _options(url: str) -> dict[str, Any]:
    """A shared machine may stall this process for seconds inside a transaction: on
    PostgreSQL, allow it (the store's own bound is 1 s)."""
    return {"idle_in_transaction_timeout": 60} if url.startswith("postgresql") else {}


def _task(i: int, **extra: Any) -> dict[str, Any]:
    title = f"implement part {i}" if i % 3 == 0 else f"job {i}"
    return {"title": title, "priority": ("high", "medium", "low")[i % 3], **extra}


def _add(c: Any, count: int, make: Any, label: str) -> None:
    """``count`` tasks ``make(i)`` in batches of ``BATCH`` (built batch by batch)."""
    for first in range(0, count, BATCH):
        c.add_tasks([make(i) for i in range(first, min(count, first + BATCH))])
        done = min(count, first + BATCH)
        if count >= 100_000 and done % (BATCH * 10) == 0:
            print(f"      {label}: {done:,} / {count:,}", flush=True)


def load(url: str, pending: int, not_ready: int) -> float:
    """``pending`` pending tasks, then ``not_ready`` more (half scheduled, half
    blocked on a task node ``gate`` holds); the seconds it took."""
    start = time.perf_counter()
    with corral.connect(url, **_options(url)) as c:
        c.configure(max_agents=100)
        gate = None
        if not_ready:
            c.register_node("gate", ROLE, heartbeat_interval=3600)
            gate = c.add_task("the gate", priority="high")
            held = c.claim_best_task("gate", ROLE)
            assert held is not None and held.id == gate.id
        _add(c, pending, _task, "pending")
        later = time.time() + YEAR
        half = not_ready // 2
        _add(c, half, lambda i: _task(i, not_before=later), "scheduled")
        if gate is not None:
            gate_id = gate.id
            _add(c, not_ready - half, lambda i: _task(i, depends_on=[gate_id]), "blocked")
        counts = {s: len(c.list_tasks(status=s, limit=1)) for s in ("scheduled", "blocked")}
        assert not not_ready or counts == {"scheduled": 1, "blocked": 1}, counts
    return time.perf_counter() - start


class Board:
    def __init__(self, backend: str, kind: str, url: str, load_s: float) -> None:
        self.backend, self.kind, self.url, self.load_s = backend, kind, url, load_s
        self.client: Any = corral.connect(url, **_options(url))
        self.client.register_node(NODE, ROLE, heartbeat_interval=3600)
        self.samples: list[float] = []

    def step(self, record: bool = True) -> None:
        c = self.client
        t0 = time.perf_counter()
        task = c.claim_best_task(NODE, ROLE)
        elapsed = time.perf_counter() - t0
        assert task is not None and task.status == "in_progress"
        c.complete_task(task.id, NODE, task.epoch)
        c.add_task(f"job {task.id} again", priority=task.priority)  # the board keeps its size
        if record:
            self.samples.append(elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--share", type=float, default=0.1, help="not-ready share of the board")
    parser.add_argument("--claims", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    if args.quick:
        args.pending, args.claims = 20_000, 600
    not_ready = round(args.pending * args.share / (1 - args.share))
    tmp = Path(tempfile.mkdtemp(prefix="corral-ready-"))
    dbs: list[str] = []
    boards: list[Board] = []
    try:
        for backend in args.backends.split(","):
            for kind, extra in (("plain", 0), ("not-ready", not_ready)):
                if backend == "sqlite":
                    url = f"sqlite:///{tmp / f'{kind}.db'}"
                else:
                    db = f"corral_ready_{uuid.uuid4().hex[:8]}"
                    _admin(f'CREATE DATABASE "{db}"')
                    dbs.append(db)
                    url = _pg_url(db)
                print(f"{backend} {kind}: loading {args.pending:,} + {extra:,}", flush=True)
                load_s = load(url, args.pending, extra)
                if backend == "postgres":
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("VACUUM ANALYZE")
                print(f"    loaded in {load_s:.1f}s", flush=True)
                boards.append(Board(backend, kind, url, load_s))
        if dbs:
            _admin("CHECKPOINT")
        for b in boards:
            for _ in range(args.warmup):
                b.step(record=False)
        per_round = max(1, args.claims // args.rounds)
        for _ in range(args.rounds):  # interleaved: the machine's load hits every board
            for b in boards:
                for _ in range(per_round):
                    b.step()
    finally:
        for b in boards:
            b.client.close()
        for db in dbs:
            _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    rows = [
        {
            "backend": b.backend,
            "board": b.kind,
            "pending": args.pending,
            "not_ready": not_ready if b.kind == "not-ready" else 0,
            "claims": len(b.samples),
            "load_seconds": round(b.load_s, 1),
            **percentiles(b.samples),
        }
        for b in boards
    ]
    plain = {r["backend"]: r["p99"] for r in rows if r["board"] == "plain"}
    print(
        table(
            [
                "backend",
                "board",
                "pending",
                "not ready",
                "p50 ms",
                "p99 ms",
                "max ms",
                "p99 / plain",
            ],
            [
                [
                    r["backend"],
                    r["board"],
                    f"{r['pending']:,}",
                    f"{r['not_ready']:,}",
                    f"{r['p50'] * 1e3:.3f}",
                    f"{r['p99'] * 1e3:.3f}",
                    f"{r['max'] * 1e3:.3f}",
                    f"{r['p99'] / plain[r['backend']]:.2f}",
                ]
                for r in rows
            ],
        )
    )
    write_json(RESULTS_DIR / "ready_claims.json", {"machine": machine_info(), "runs": rows})


if __name__ == "__main__":
    main()
