"""Claim latency on PostgreSQL with 1k, 100k and 1M pending tasks.

Each size gets a fresh database loaded with ``Cluster.add_tasks`` in batches of
10,000 (a third of the titles match the developer keywords, so both index heads are
used), then ``VACUUM ANALYZE`` and one ``CHECKPOINT`` for all. One node per database
claims (timed), completes and replaces (untimed, so the pending count stays put)
``--claims`` tasks in ``--rounds`` rounds that interleave the sizes, so a burst of
load on this shared machine hits every size alike. The target: p99 at 1M within 2x
of p99 at 1k (the claim reads index heads, no sort).

    python bench/pg_latency.py            # 1k, 100k, 1M (loading 1M takes minutes)
    python bench/pg_latency.py --quick    # 1k and 10k
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

ADMIN = os.environ.get("CORRAL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _url(db: str) -> str:
    p = urlsplit(ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{db}", p.query, ""))


def _admin(sql: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def load(pending: int) -> tuple[str, str, float]:
    """A fresh database with ``pending`` tasks; its name, URL and load time."""
    db = f"corral_lat_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{db}"')
    url = _url(db)
    with corral.connect(url) as c:
        c.configure(max_agents=100)
        load_start = time.perf_counter()
        for start in range(0, pending, 10_000):
            c.add_tasks(
                [
                    {
                        "title": f"implement part {i}" if i % 3 == 0 else f"job {i}",
                        "priority": ("high", "medium", "low")[i % 3],
                    }
                    for i in range(start, min(pending, start + 10_000))
                ]
            )
        load_s = time.perf_counter() - load_start
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return db, url, load_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--claims", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (1_000, 100_000, 1_000_000)
    loaded = {}
    try:
        for n in sizes:
            loaded[n] = load(n)
            print(f"{n:>9} pending loaded in {loaded[n][2]:.1f}s", flush=True)
        _admin("CHECKPOINT")  # the loads' WAL is written out before the timing starts
        clients = {}
        for n, (_, url, _) in loaded.items():
            clients[n] = corral.connect(url, pool_size=1)
            clients[n].register_node("N", "developer", heartbeat_interval=600)
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        per_round = max(1, args.claims // args.rounds)
        for _ in range(args.rounds):  # sizes interleaved: the machine's load hits all alike
            for n in sizes:
                c = clients[n]
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    task = c.claim_best_task("N", "developer")
                    samples[n].append(time.perf_counter() - t0)
                    assert task is not None
                    c.complete_task(task.id, "N", task.epoch)
                    c.add_task(f"job {task.id} again", priority=task.priority)  # n stays n
        for c in clients.values():
            c.close()
    finally:
        for db, _, _ in loaded.values():
            _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    rows = [
        {
            "pending": n,
            "claims": len(samples[n]),
            "load_seconds": loaded[n][2],
            **percentiles(samples[n]),
        }
        for n in sizes
    ]
    base = rows[0]["p99"]
    print(
        table(
            ["pending", "p50 ms", "p99 ms", "max ms", "p99 / p99(1k)"],
            [
                [
                    r["pending"],
                    f"{r['p50'] * 1e3:.2f}",
                    f"{r['p99'] * 1e3:.2f}",
                    f"{r['max'] * 1e3:.2f}",
                    f"{r['p99'] / base:.2f}",
                ]
                for r in rows
            ],
        )
    )
    write_json(RESULTS_DIR / "pg_latency.json", {"machine": machine_info(), "runs": rows})


if __name__ == "__main__":
    main()
