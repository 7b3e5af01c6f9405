"""The worker's loop with ``usage`` on every completion against the same loop without
it, side by side in one run: issue 28's target is within 10%.

The loop is bench/sqlite_throughput.py's ``corral_cc`` (``complete_and_claim``: finish
one task and take the next in one transaction), on one SQLite file per run and, with
``--postgres URL``, on PostgreSQL. Runs alternate, in pairs whose order swaps from
one pair to the next (without, with; with, without; ...), so both variants meet the
same machine and neither always runs second; each run drains a fresh board of
``--jobs`` no-op tasks with ``--procs`` worker processes. A run's throughput is its jobs over
its wall time; the variant's figure is the median of its runs. With usage, every
completion reports ``{input_tokens, output_tokens, cost_usd}``: its task's sums in
the completion's own statement, and its node's row of the hour (on PostgreSQL in that
same statement; on SQLite the statement leaves the report on its task's row and the
hours get it later, in batches: docs/guardrails.md). Each cell also gives the
workers' CPU time per job (the median over its runs; the server's not counted on
PostgreSQL), which a machine busy with other work disturbs less than the wall time.

    python bench/usage_overhead.py                 # 4 runs of each, 1 and 4 processes
    python bench/usage_overhead.py --quick         # a smoke run in seconds
    python bench/usage_overhead.py --postgres postgresql://127.0.0.1/test
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, table, write_json

ROLE = "developer"
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}
CTX = mp.get_context("spawn")


def _worker(url: str, wid: int, with_usage: bool, barrier: Any, out: Any) -> None:
    c = corral.connect(url)
    node = f"bench-{wid}"
    c.register_node(node, ROLE)
    usage = USAGE if with_usage else None
    barrier.wait(timeout=120)
    t0, cpu0, jobs = time.monotonic(), time.process_time(), 0
    task = c.claim_best_task(node, ROLE)
    while task is not None:
        _, task = c.complete_and_claim(task.id, node, ROLE, task.epoch, usage=usage)
        jobs += 1
    out.put((jobs, t0, time.monotonic(), time.process_time() - cpu0))
    c.close()


def _board(url: str, jobs: int, procs: int) -> None:
    with corral.connect(url) as c:
        c.configure(max_agents=procs + 4)
        c.add_tasks([{"title": f"Implement item {i}"} for i in range(jobs)])


def run_once(url: str, jobs: int, procs: int, with_usage: bool) -> tuple[float, float]:
    """One run: the board loaded, then ``procs`` workers drain it; jobs per second,
    and the workers' CPU microseconds per job."""
    _board(url, jobs, procs)
    barrier, out = CTX.Barrier(procs), CTX.Queue()
    ws = [
        CTX.Process(target=_worker, args=(url, i, with_usage, barrier, out)) for i in range(procs)
    ]
    for w in ws:
        w.start()
    results = [out.get(timeout=600) for _ in ws]
    for w in ws:
        w.join(timeout=60)
    done = sum(r[0] for r in results)
    assert done == jobs, (done, jobs)
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    if with_usage:
        with corral.connect(url) as c:
            assert c.usage("cluster", "1d").reports == jobs
    return jobs / wall, sum(r[3] for r in results) / jobs * 1e6


def _pg_fresh(base: str, n: int) -> str:
    import psycopg

    name = f"corral_usage_bench_{n}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


def _pg_drop(base: str, n: int) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "corral_usage_bench_{n}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--postgres", default=None, help="a PostgreSQL URL to run on too")
    ap.add_argument("--only-postgres", action="store_true", help="skip SQLite")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.runs, args.procs = 300, 1, [1]
    backends = (["sqlite"] if not args.only_postgres else []) + (
        ["postgres"] if args.postgres else []
    )
    cells: list[dict[str, Any]] = []
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            for procs in args.procs:
                rates: dict[bool, list[float]] = {False: [], True: []}
                cpus: dict[bool, list[float]] = {False: [], True: []}
                for run in range(args.runs):
                    for with_usage in (False, True) if run % 2 == 0 else (True, False):
                        n += 1
                        if backend == "sqlite":
                            url = f"sqlite:///{Path(tmp) / f'run-{n}.db'}"
                        else:
                            url = _pg_fresh(args.postgres, n)
                        rate, cpu = run_once(url, args.jobs, procs, with_usage)
                        rates[with_usage].append(rate)
                        cpus[with_usage].append(cpu)
                        if backend == "postgres":
                            _pg_drop(args.postgres, n)
                without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
                cpu_without, cpu_with = (
                    statistics.median(cpus[False]),
                    statistics.median(cpus[True]),
                )
                cells.append(
                    {
                        "backend": backend,
                        "procs": procs,
                        "jobs": args.jobs,
                        "runs": args.runs,
                        "without_jobs_per_s": round(without, 1),
                        "with_usage_jobs_per_s": round(with_, 1),
                        "ratio": round(with_ / without, 3),
                        "within_10_percent": with_ >= 0.9 * without,
                        "runs_without": [round(r, 1) for r in rates[False]],
                        "runs_with": [round(r, 1) for r in rates[True]],
                        "cpu_us_per_job_without": round(cpu_without, 1),
                        "cpu_us_per_job_with_usage": round(cpu_with, 1),
                        "cpu_ratio": round(cpu_without / cpu_with, 3),
                    }
                )
    print(
        table(
            [
                "backend",
                "procs",
                "without (jobs/s)",
                "with usage (jobs/s)",
                "ratio",
                "<= 10%",
                "CPU us/job without",
                "with usage",
                "CPU ratio",
            ],
            [
                [
                    c["backend"],
                    c["procs"],
                    c["without_jobs_per_s"],
                    c["with_usage_jobs_per_s"],
                    c["ratio"],
                    c["within_10_percent"],
                    c["cpu_us_per_job_without"],
                    c["cpu_us_per_job_with_usage"],
                    c["cpu_ratio"],
                ]
                for c in cells
            ],
        )
    )
    if not args.quick:
        write_json(RESULTS_DIR / "usage_overhead.json", {"machine": machine_info(), "cells": cells})
    return 0 if all(c["within_10_percent"] for c in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
