"""Where a PostgreSQL job's time goes: CPU and WAL per claim + complete, one process.

For the bare SKIP LOCKED loop, corral's claim + complete (two statements) and
corral's ``complete_and_claim`` (one statement per job), on the same server in fresh
databases: the client's CPU (user + system) and the server backend's CPU per job
(from ``/proc``, so run it on the database host), the WAL bytes per job, and the
rows each table received. On a 2-core machine where client and server share the
cores, throughput under load is bounded by the sum of the two CPU columns.

    python bench/pg_profile.py            # 3,000 jobs per system
    python bench/pg_profile.py --jobs 500
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import corral
from _common import RESULTS_DIR, machine_info, table, write_json

ADMIN = os.environ.get("CORRAL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
BARE_CLAIM = (
    "UPDATE jobs SET status = 'doing', worker = %s WHERE id = (SELECT id FROM jobs"
    " WHERE status = 'todo' ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)


def _url(db: str) -> str:
    p = urlsplit(ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{db}", p.query, ""))


def _backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _writes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's own counts
    rows = conn.execute(
        "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables"
    ).fetchall()
    return {name: n for name, n in rows}


def profile(system: str, jobs: int) -> dict[str, Any]:
    db = f"corral_prof_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
    url = _url(db)
    try:
        with psycopg.connect(url, autocommit=True) as stats:
            if system == "bare":
                stats.execute(
                    "CREATE TABLE jobs (id bigserial PRIMARY KEY, priority int NOT NULL,"
                    " status text NOT NULL DEFAULT 'todo', worker text)"
                )
                stats.execute("CREATE INDEX jobs_todo ON jobs (priority, id) WHERE status = 'todo'")
                stats.execute(
                    "INSERT INTO jobs (priority) SELECT i %% 3 FROM generate_series(1, %s) i",
                    [jobs + 10],
                )
            else:
                with corral.connect(url) as c:
                    c.configure(max_agents=100)
                    c.add_tasks(
                        [
                            {"title": f"job {i}", "priority": ("high", "medium", "low")[i % 3]}
                            for i in range(jobs + 10)
                        ]
                    )
            stats.execute("VACUUM ANALYZE")
            time.sleep(1)  # let the statistics collector catch up
            if system == "bare":
                conn = psycopg.connect(url, autocommit=True)
                pid = conn.info.backend_pid
                for _ in range(10):  # warm up (prepared statements)
                    row = conn.execute(BARE_CLAIM, ["w"]).fetchone()
                    conn.execute("UPDATE jobs SET status = 'done' WHERE id = %s", [row[0]])
            else:
                client = corral.connect(url, pool_size=1)
                client.register_node("N", "developer", heartbeat_interval=600)
                with client.store._sessions.pool.connection() as pooled:  # type: ignore[attr-defined]
                    pid = pooled.info.backend_pid
                for _ in range(10):
                    task = client.claim_best_task("N", "developer")
                    client.complete_task(task.id, "N", task.epoch)
            time.sleep(1)
            before = _writes(stats)
            lsn0 = stats.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            cpu0, server0, wall0 = _client_cpu(), _backend_cpu(pid), time.perf_counter()
            if system == "bare":
                for _ in range(jobs):
                    row = conn.execute(BARE_CLAIM, ["w"]).fetchone()
                    conn.execute("UPDATE jobs SET status = 'done' WHERE id = %s", [row[0]])
            elif system == "corral":
                for _ in range(jobs):
                    task = client.claim_best_task("N", "developer")
                    client.complete_task(task.id, "N", task.epoch)
            else:
                task = client.claim_best_task("N", "developer")
                for _ in range(jobs):
                    _, task = client.complete_and_claim(task.id, "N", "developer", task.epoch)
            wall = time.perf_counter() - wall0
            cpu, server = _client_cpu() - cpu0, _backend_cpu(pid) - server0
            lsn1 = stats.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            wal = stats.execute("SELECT pg_wal_lsn_diff(%s, %s)", [lsn1, lsn0]).fetchone()[0]
            (conn if system == "bare" else client).close()
            time.sleep(1)
            after = _writes(stats)
        rows = {t: round((after[t] - before.get(t, 0)) / jobs, 2) for t in after}
        return {
            "system": system,
            "jobs": jobs,
            "jobs_per_s": jobs / wall,
            "client_cpu_us": cpu / jobs * 1e6,
            "server_cpu_us": server / jobs * 1e6,
            "wal_bytes": float(wal) / jobs,
            "rows_written": {t: n for t, n in rows.items() if n},
        }
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    args = parser.parse_args()
    runs = [profile(s, args.jobs) for s in ("bare", "corral", "corral_cc")]
    print(
        table(
            [
                "system",
                "jobs/s",
                "client CPU µs/job",
                "server CPU µs/job",
                "WAL B/job",
                "rows written per job",
            ],
            [
                [
                    r["system"],
                    f"{r['jobs_per_s']:.0f}",
                    f"{r['client_cpu_us']:.0f}",
                    f"{r['server_cpu_us']:.0f}",
                    f"{r['wal_bytes']:.0f}",
                    ", ".join(f"{t} {n:g}" for t, n in sorted(r["rows_written"].items())),
                ]
                for r in runs
            ],
        )
    )
    write_json(RESULTS_DIR / "pg_profile.json", {"machine": machine_info(), "runs": runs})


if __name__ == "__main__":
    main()
