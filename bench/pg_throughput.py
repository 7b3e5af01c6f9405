"""Claim + complete throughput on PostgreSQL with 1, 4 and 16 processes.

Three systems side by side in the same run, each in its own fresh database loaded
with the same number of no-op jobs and then ``ANALYZE``d, on the same server
(``synchronous_commit`` as configured, normally on):

- ``bare``: the floor — ``UPDATE … WHERE id = (SELECT … ORDER BY priority, id LIMIT 1
  FOR UPDATE SKIP LOCKED) RETURNING id`` to claim, ``UPDATE … SET status = 'done'``
  to complete, each one autocommit statement;
- ``corral``: ``corral.connect("postgresql://…")``, its own node per process,
  ``claim_best_task`` + ``complete_task`` (node update and events included): two
  statements and two commits per job, like the bare loop;
- ``corral_cc``: the same workers finishing with ``complete_and_claim`` (one
  statement and one commit per job: the completion and the next claim together);
- ``procrastinate``: procrastinate 3.x workers (``run_worker(wait=False)``,
  concurrency 1 per process) on a no-op task.

Each (system, processes) pair runs ``--repeat`` times, the systems taking turns, and
the median counts: a burst of load on this shared machine then hits every system
alike instead of deciding a ratio.

``--baseline DIR`` adds ``corral_base`` and ``corral_cc_base``: the ``corral`` and
``corral_cc`` loops on the corral package found in ``DIR/src`` (an older tree, e.g.
``git worktree add DIR <commit>``), each board loaded by that package too (its own
schema), taking their turns with the others: before/after measured side by side.
``--baseline-sql SQL`` (repeatable) runs statements on each baseline board once it is
loaded: the older tree's loop on a board given a later schema's columns, indexes and
triggers (what later features cost every loop), as ``bench/pg_instructions.py
--tree-sql`` does.
``--systems`` runs a subset (the ratios need ``bare`` and ``procrastinate``);
``--out`` names the results file.

    python bench/pg_throughput.py            # the full run
    python bench/pg_throughput.py --quick    # a smoke run
Server: ``$CORRAL_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
used only to create and drop the bench databases).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from _common import RESULTS_DIR, machine_info, table, write_json

ADMIN = os.environ.get("CORRAL_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
SYSTEMS = ("bare", "corral", "corral_cc", "procrastinate")
CTX = mp.get_context("spawn")


def _url(db: str) -> str:
    p = urlsplit(ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{db}", p.query, ""))


def _admin(sql: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


# --- loading --------------------------------------------------------------------------
def _load(system: str, url: str, jobs: int) -> None:
    if system == "bare":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE jobs (id bigserial PRIMARY KEY, priority int NOT NULL,"
                " status text NOT NULL DEFAULT 'todo', worker text)"
            )
            conn.execute("CREATE INDEX jobs_todo ON jobs (priority, id) WHERE status = 'todo'")
            conn.execute(
                "INSERT INTO jobs (priority) SELECT i %% 3 FROM generate_series(1, %s) i", [jobs]
            )
    elif system in ("corral", "corral_cc"):
        import corral

        with corral.connect(url) as c:
            c.configure(max_agents=1000)
            for start in range(0, jobs, 10_000):
                c.add_tasks(
                    [
                        {"title": f"job {i}", "priority": ("high", "medium", "low")[i % 3]}
                        for i in range(start, min(jobs, start + 10_000))
                    ]
                )
    else:
        app, noop = _procrastinate_app(url)
        with app.open():
            app.schema_manager.apply_schema()
            for start in range(0, jobs, 5000):
                noop.batch_defer(*[{} for _ in range(start, min(jobs, start + 5000))])
    # Every system starts with planner statistics, as autovacuum would give it (a
    # fresh table has none: the planner guesses, and a cached generic plan keeps the
    # guess — corral's role-head join then scans every pending task per claim).
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _load_base(url: str, jobs: int, base: str) -> None:
    """A ``_base`` system's board, loaded by the baseline's own code in a spawned
    process: its own schema (a board migrated by the newer tree carries that tree's
    indexes and triggers, which the baseline's statements would then pay for)."""
    sys.path.insert(0, os.path.join(base, "src"))
    import corral

    assert corral.__file__ and corral.__file__.startswith(os.path.abspath(base)), corral.__file__
    _load("corral", url, jobs)


def _procrastinate_app(url: str) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        return None

    return app, noop


# --- workers --------------------------------------------------------------------------
def _work(system: str, url: str, name: str, barrier: Any, out: Any, base: str | None) -> None:
    count = 0
    if system.endswith("_base"):  # a fresh spawned process: corral is not imported yet
        sys.path.insert(0, os.path.join(base or "", "src"))
        system = system.removesuffix("_base")
    if system == "bare":
        with psycopg.connect(url, autocommit=True) as conn:
            barrier.wait()
            start = time.perf_counter()
            cpu0 = time.process_time()
            while True:
                row = conn.execute(
                    "UPDATE jobs SET status = 'doing', worker = %s WHERE id = (SELECT id FROM jobs"
                    " WHERE status = 'todo' ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
                    " RETURNING id",
                    [name],
                ).fetchone()
                if row is None:
                    break
                conn.execute("UPDATE jobs SET status = 'done' WHERE id = %s", [row[0]])
                count += 1
    elif system == "corral":
        import corral

        if base is not None:
            assert corral.__file__.startswith(os.path.abspath(base)), corral.__file__
        c = corral.connect(url, pool_size=1)
        c.register_node(name, "developer", heartbeat_interval=600)
        barrier.wait()
        start = time.perf_counter()
        cpu0 = time.process_time()
        while (task := c.claim_best_task(name, "developer")) is not None:
            c.complete_task(task.id, name, task.epoch)
            count += 1
        c.close()
    elif system == "corral_cc":
        import corral

        if base is not None:
            assert corral.__file__.startswith(os.path.abspath(base)), corral.__file__
        c = corral.connect(url, pool_size=1)
        c.register_node(name, "developer", heartbeat_interval=600)
        barrier.wait()
        start = time.perf_counter()
        cpu0 = time.process_time()
        task = c.claim_best_task(name, "developer")
        while task is not None:
            _, task = c.complete_and_claim(task.id, name, "developer", task.epoch)
            count += 1
        c.close()
    else:
        app, _ = _procrastinate_app(url)
        with app.open():
            barrier.wait()
            start = time.perf_counter()
            cpu0 = time.process_time()
            app.run_worker(
                queues=["bench"],
                wait=False,
                concurrency=1,
                install_signal_handlers=False,
                listen_notify=False,
            )
    # The worker's own CPU (the client side of each job): steadier than its rate.
    out.put((count, start, time.perf_counter(), time.process_time() - cpu0))


def run(
    system: str, procs: int, jobs: int, base: str | None = None, base_sql: Sequence[str] = ()
) -> dict[str, Any]:
    db = f"corral_bench_{system}_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{db}"')
    try:
        url = _url(db)
        mine = base if system.endswith("_base") else None
        if mine is None:
            _load(system.replace("corral_cc", "corral"), url, jobs)
        else:
            loader = CTX.Process(target=_load_base, args=(url, jobs, mine))
            loader.start()
            loader.join()
            if loader.exitcode != 0:
                raise RuntimeError(f"loading {system} with {mine} failed")
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in base_sql:
                    conn.execute(statement)
        barrier = CTX.Barrier(procs)
        out = CTX.Queue()
        ps = [
            CTX.Process(target=_work, args=(system, url, f"w{i}", barrier, out, mine))
            for i in range(procs)
        ]
        for p in ps:
            p.start()
        results = [out.get(timeout=900) for _ in ps]
        for p in ps:
            p.join(timeout=60)
        elapsed = max(r[2] for r in results) - min(r[1] for r in results)
        return {
            "system": system,
            "procs": procs,
            "jobs": jobs,
            "seconds": elapsed,
            "jobs_per_s": jobs / elapsed,
            "client_cpu_us_per_job": sum(r[3] for r in results) / jobs * 1e6,
        }
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--procs", type=int, nargs="+", default=None, help="process counts")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="also run corral_base and corral_cc_base: the corral package in DIR/src",
    )
    parser.add_argument(
        "--baseline-sql",
        action="append",
        default=[],
        metavar="SQL",
        help="run on each baseline board once it is loaded (repeatable)",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        default=None,
        choices=SYSTEMS,
        help="run only these (and the baselines)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "pg_throughput.json")
    args = parser.parse_args()
    base = os.path.abspath(args.baseline) if args.baseline else None
    mine = tuple(args.systems) if args.systems else SYSTEMS
    systems = mine + (("corral_base", "corral_cc_base") if base else ())
    repeat = args.repeat or (1 if args.quick else 3)
    jobs = args.jobs or (300 if args.quick else 6000)
    procs_list = args.procs or ((1, 4) if args.quick else (1, 4, 16))
    rows = []
    for procs in procs_list:
        for _ in range(repeat):
            for system in systems:
                # procrastinate is ~10x slower: fewer jobs keep the run short, same rate.
                n = jobs if system != "procrastinate" else max(200, jobs // 4)
                r = run(system, procs, n, base, args.baseline_sql)
                rows.append(r)
                print(
                    f"{system:>13} x{procs:<2} {r['jobs_per_s']:8.0f} jobs/s"
                    f"  client CPU {r['client_cpu_us_per_job']:5.0f} us/job",
                    flush=True,
                )
    by = {
        (s, p): statistics.median(
            r["jobs_per_s"] for r in rows if r["system"] == s and r["procs"] == p
        )
        for s in systems
        for p in procs_list
    }
    if set(SYSTEMS) <= set(systems):
        summary = []
        for procs in procs_list:
            c, b, p = by["corral", procs], by["bare", procs], by["procrastinate", procs]
            cc = by["corral_cc", procs]
            summary.append(
                [
                    procs,
                    f"{b:.0f}",
                    f"{c:.0f}",
                    f"{cc:.0f}",
                    f"{p:.0f}",
                    f"{c / b:.0%}",
                    f"{c / p:.1f}x",
                    f"{cc / b:.0%}",
                    f"{cc / p:.1f}x",
                ]
            )
        print(
            table(
                [
                    "procs",
                    "bare/s",
                    "corral/s",
                    "corral_cc/s",
                    "procrastinate/s",
                    "corral/bare",
                    "corral/procr.",
                    "cc/bare",
                    "cc/procr.",
                ],
                summary,
            )
        )
    if base and set(SYSTEMS) <= set(systems):
        print(f"\ncorral_base, corral_cc_base: {base}")
        for loop in ("corral", "corral_cc"):
            print(
                table(
                    [
                        "procs",
                        "bare/s",
                        f"{loop}_base/s",
                        f"{loop}/s",
                        "base/bare",
                        "new/bare",
                        "new/base",
                        "base/procr.",
                        "new/procr.",
                    ],
                    [
                        [
                            p,
                            f"{(b := by['bare', p]):.0f}",
                            f"{(o := by[f'{loop}_base', p]):.0f}",
                            f"{(c := by[loop, p]):.0f}",
                            f"{o / b:.0%}",
                            f"{c / b:.0%}",
                            f"{c / o:.2f}x",
                            f"{o / (q := by['procrastinate', p]):.1f}x",
                            f"{c / q:.1f}x",
                        ]
                        for p in procs_list
                    ],
                )
            )
    with psycopg.connect(ADMIN) as conn:
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        version = conn.execute("SHOW server_version").fetchone()[0]
    write_json(
        args.out,
        {
            "machine": machine_info(),
            "postgres": version,
            "synchronous_commit": sync,
            "baseline": base,
            "baseline_sql": args.baseline_sql,
            "jobs": jobs,
            "repeat": repeat,
            "median_jobs_per_s": {f"{s} x{p}": v for (s, p), v in by.items()},
            "median_client_cpu_us_per_job": {
                f"{s} x{p}": statistics.median(
                    r["client_cpu_us_per_job"] for r in rows if r["system"] == s and r["procs"] == p
                )
                for s in systems
                for p in procs_list
            },
            "runs": rows,
        },
    )


if __name__ == "__main__":
    main()
