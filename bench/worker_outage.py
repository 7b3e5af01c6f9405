"""Issue 26's Acceptance line, run longer: workers through a blinking store.

Two runs, each with three ``corral worker`` processes and an SDK worker (tasks of
``--task-seconds`` each, heartbeats every 2 s: a node is dead after 6 s):

- **serve**: the workers on ``corral serve`` (SQLite, its monitor on); the server is
  SIGKILLed ``--blinks`` times, spread over the board, each time started again on the
  same port 1 s later;
- **postgres**: two workers straight on PostgreSQL, the SDK worker too, one through a
  ``corral serve`` on the same database (its monitor on); ``pg_terminate_backend`` of
  every session of the database, ``--blinks`` times.

Counted per run (the Acceptance line: each must be 0 but ``done``): worker exits,
lease recoveries, tasks not done, claimed twice, run twice, never run; and how long
the board took.

    python bench/worker_outage.py                     # 240 tasks, 5 blinks per run
    python bench/worker_outage.py --quick             # 40 tasks, 2 blinks
    python bench/worker_outage.py --tolerance 0 --out bench/results/worker_outage_tolerance0.json
        # the workers as they were before: no outage tolerance

Results: bench/results/worker_outage.json (``--tolerance 0``: the failure it fixes,
worker_outage_tolerance0.json). The store at PostgreSQL is ``$CORRAL_TEST_PG``
(default ``postgresql://postgres@127.0.0.1:5432/test``), used to create and drop a
database.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/support/outage_procs.py

import psycopg
from tests.support.outage_procs import (
    Fleet,
    Serve,
    add_board,
    env_for,
    tally,
    terminate_sessions,
    wait_for,
)

import corral
from _common import RESULTS_DIR, machine_info, table, write_json
from corral.outage import tolerant

ADMIN_URL = os.environ.get("CORRAL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _drain(client: Any, fleet: Fleet, n: int, deadline: float) -> bool:
    """Wait until every task is done or every worker has exited; True when done."""
    try:
        wait_for(
            "the board drained",
            lambda: (
                len(client.list_tasks(status="done", limit=n)) == n
                or len(fleet.exited()) == len(fleet.procs)
            ),
            deadline,
        )
    except AssertionError:
        return False
    if len(client.list_tasks(status="done", limit=n)) == n:
        return True
    # Every worker exited: give the monitor the nodes' window (3 s) to recover what
    # they held, so the recoveries are counted.
    with contextlib.suppress(AssertionError):
        wait_for("the leases recovered", lambda: not client.list_tasks(status="in_progress"), 10)
    return False


def _reach(client: Any, fleet: Fleet, at: int, n: int) -> bool:
    """Wait until ``at`` tasks are done (True) or every worker has exited (False)."""
    wait_for(
        f"{at} tasks done",
        lambda: (
            len(client.list_tasks(status="done", limit=n)) >= at
            or len(fleet.exited()) == len(fleet.procs)
        ),
        120,
    )
    return len(client.list_tasks(status="done", limit=n)) >= at


def _blink_points(n: int, blinks: int) -> list[int]:
    return [n * (i + 1) // (blinks + 1) for i in range(blinks)]


def run_serve(n: int, blinks: int, seconds: float, tolerance: float | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="corral-outage-serve-") as d:
        tmp = Path(d)
        serve = Serve(f"sqlite:///{tmp / 'board.db'}", tmp)
        serve.start()
        client = tolerant(corral.connect(serve.url, token=serve.token), 60)
        add_board(client, n)
        fleet = Fleet(tmp, env_for(serve.token), seconds, tolerance=tolerance)
        started = time.monotonic()
        for i in range(3):
            fleet.cli(f"w{i}", serve.url)
        fleet.sdk_worker("sdk", serve.url)
        downtimes = []
        try:
            for at in _blink_points(n, blinks):
                if not _reach(client, fleet, at, n):
                    break  # every worker has exited
                serve.kill()
                down = time.monotonic()
                time.sleep(1.0)
                serve.start()
                downtimes.append(round(time.monotonic() - down, 3))
            drained = _drain(client, fleet, n, 120)
            elapsed = time.monotonic() - started
            counts = tally(client, fleet, n)
        finally:
            codes = fleet.stop()
            serve.stop()
            client.close()
    return {
        "run": "serve",
        "tasks": n,
        "blinks": blinks,
        "downtime_s": downtimes,
        "drained": drained,
        "seconds": round(elapsed, 2),
        **counts,
        "exit_codes_at_stop": codes,
    }


def run_postgres(n: int, blinks: int, seconds: float, tolerance: float | None) -> dict[str, Any]:
    name = f"corral_outage_{uuid.uuid4().hex[:10]}"
    base = ADMIN_URL.rsplit("/", 1)[0]
    db_url = f"{base}/{name}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with tempfile.TemporaryDirectory(prefix="corral-outage-pg-") as d:
            tmp = Path(d)
            serve = Serve(db_url, tmp)
            serve.start()
            client = tolerant(corral.connect(db_url), 60)  # its sessions are ended too
            add_board(client, n)
            fleet = Fleet(tmp, env_for(serve.token), seconds, tolerance=tolerance)
            started = time.monotonic()
            fleet.cli("w0", db_url)
            fleet.cli("w1", db_url)
            fleet.sdk_worker("sdk", db_url)
            fleet.cli("h0", serve.url)
            ended = []
            try:
                for at in _blink_points(n, blinks):
                    if not _reach(client, fleet, at, n):
                        break  # every worker has exited
                    ended.append(terminate_sessions(db_url, ADMIN_URL))
                drained = _drain(client, fleet, n, 120)
                elapsed = time.monotonic() - started
                counts = tally(client, fleet, n)
            finally:
                codes = fleet.stop()
                serve.stop()
                client.close()
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {
        "run": "postgres",
        "tasks": n,
        "blinks": blinks,
        "sessions_ended": ended,
        "drained": drained,
        "seconds": round(elapsed, 2),
        **counts,
        "exit_codes_at_stop": codes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 tasks, 2 blinks per run")
    parser.add_argument("--tasks", type=int, default=240)
    parser.add_argument("--blinks", type=int, default=5)
    parser.add_argument("--task-seconds", type=float, default=0.2)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="the workers' --outage-tolerance (default: theirs, 60 s)",
    )
    parser.add_argument("--runs", default="serve,postgres")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "worker_outage.json")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.blinks = 40, 2
    results = []
    for run in args.runs.split(","):
        fn = run_serve if run == "serve" else run_postgres
        result = fn(args.tasks, args.blinks, args.task_seconds, args.tolerance)
        results.append(result)
        print(f"{run}: {result}", flush=True)
    keys = [
        "run",
        "tasks",
        "done",
        "worker_exits",
        "lease_recoveries",
        "not_done",
        "claimed_twice",
        "run_twice",
        "never_run",
        "seconds",
    ]
    print(table(keys, [[r[k] for k in keys] for r in results]))
    write_json(
        args.out,
        {
            "bench": "worker_outage",
            "machine": machine_info(),
            "params": {
                "tasks": args.tasks,
                "blinks": args.blinks,
                "task_seconds": args.task_seconds,
                "tolerance": args.tolerance,
                "workers": "3 corral worker + 1 SDK worker, heartbeat 2 s",
            },
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
