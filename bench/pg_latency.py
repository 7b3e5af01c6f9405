"""Claim latency on PostgreSQL with 1k, 100k and 1M pending tasks.

Each size gets a fresh database loaded with ``Cluster.add_tasks`` in batches of
10,000 (a third of the titles match the developer keywords, so both index heads are
used); then one node claims (timed) and completes (untimed) ``--claims`` tasks. The
target: p99 at 1M within 2x of p99 at 1k (the claim reads index heads, no sort).

    python bench/pg_latency.py            # 1k, 100k, 1M (loading 1M takes minutes)
    python bench/pg_latency.py --quick    # 1k and 10k
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any
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


def measure(pending: int, claims: int) -> dict[str, Any]:
    db = f"corral_lat_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{db}"')
    try:
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
        with corral.connect(url, pool_size=1) as c:
            c.register_node("N", "developer", heartbeat_interval=600)
            samples = []
            for _ in range(claims):
                t0 = time.perf_counter()
                task = c.claim_best_task("N", "developer")
                samples.append(time.perf_counter() - t0)
                assert task is not None
                c.complete_task(task.id, "N", task.epoch)
        stats = percentiles(samples)
        return {"pending": pending, "claims": claims, "load_seconds": load_s, **stats}
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (1_000, 100_000, 1_000_000)
    rows = []
    for n in sizes:
        r = measure(n, min(args.claims, n // 2))
        rows.append(r)
        print(f"{n:>9} pending: p50 {r['p50'] * 1e3:.2f} ms, p99 {r['p99'] * 1e3:.2f} ms "
              f"(loaded in {r['load_seconds']:.1f}s)", flush=True)  # fmt: skip
    base = rows[0]["p99"]
    print(table(["pending", "p50 ms", "p99 ms", "max ms", "p99 / p99(1k)"],
                [[r["pending"], f"{r['p50'] * 1e3:.2f}", f"{r['p99'] * 1e3:.2f}",
                  f"{r['max'] * 1e3:.2f}", f"{r['p99'] / base:.2f}"] for r in rows]))  # fmt: skip
    write_json(RESULTS_DIR / "pg_latency.json", {"machine": machine_info(), "runs": rows})


if __name__ == "__main__":
    main()
