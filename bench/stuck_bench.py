"""Stuck detection at scale: how long after a stuck task's deadline the monitor has
taken it back, with 10,000 other tasks in progress (each with a stuck deadline of its
own, far off), on SQLite and PostgreSQL; the lease-recovery phase of
bench/fleet_size.py is its model, and its target is the same: the deadline + 5 ms.

Each round: a node (alive: it declared a long heartbeat interval) claims a task whose
``progress_timeout`` is 1.5 s (longer than the monitor's longest sleep, so the
deadline is read before it falls due, as a real one is) and reports nothing; the
cluster's ``stuck_action`` is ``requeue``, so at the deadline the task is pending
again. ``committed_after_deadline_ms``: when an observer on a connection of its own
(fleet_size's) first saw it pending, less the deadline; ``woke_after_deadline_ms``:
the ``task_stuck`` event's time less the deadline. In the same run, on the same
backend, fleet_size's lease-recovery phase with a fleet of the same size: a dead node's
lease, the target's model, measured the same way.

    python bench/stuck_bench.py            # 10,000 tasks in progress, 20 rounds
    python bench/stuck_bench.py --quick    # a smoke run in seconds
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json
from corral.monitor import Monitor
from fleet_size import QUIET, Db, _status_reader, recovery

TIMEOUT = 1.5  # each round's task's progress_timeout, seconds


def load_in_progress(db: Db, n: int, nodes: int) -> None:
    """``n`` tasks in progress, held by the ``nodes`` loaded nodes, each with a stuck
    deadline a day away (in the index the monitor reads its next deadline from)."""
    now = time.time()
    sql = (
        "INSERT INTO tasks (title, priority, roles, status, assigned_to, epoch, attempts,"
        " max_attempts, sort_key, created_at, claimed_at, updated_at, stuck_at)"
        f" SELECT 'Implement held ' || g, 'medium', 'developer', 'in_progress',"
        f" 'f' || (g % {nodes}), 1, 1, 3, {now}, {now}, {now}, {now}, {now + 86_400.0} FROM s"
    )
    if db.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(db.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < {n - 1})"
            + sql
        )
        conn.execute("COMMIT")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(f"WITH s(g) AS (SELECT generate_series(0, {n - 1}))" + sql)
            conn.execute("ANALYZE tasks")


def stuck(db: Db, n: int, rounds: int) -> dict[str, Any]:
    nodes = max(1, n // 10)
    db.load(nodes, QUIET)
    load_in_progress(db, n, nodes)
    with corral.connect(db.url) as c:
        c.configure(stuck_action="requeue")
    wait_pending, close_reader = _status_reader(db)
    mon_client = corral.connect(db.url)
    mon = Monitor(mon_client)
    thread = mon.start_thread()
    lags, wakes = [], []
    try:
        with corral.connect(db.url) as c:
            c.register_node("silent", "developer", heartbeat_interval=QUIET)
            for r in range(rounds):
                c.add_task(f"Implement piece {r}", progress_timeout=TIMEOUT, max_attempts=1_000)
                task = c.claim_best_task("silent", "developer")
                assert task is not None and task.claimed_at is not None
                assert task.progress_timeout == TIMEOUT, "a loaded task was claimed"
                deadline = task.claimed_at + TIMEOUT
                lags.append(wait_pending(task.id) - deadline)
                event = next(
                    e
                    for e in reversed(c.events(0, 100_000))
                    if e.kind == "task_stuck" and e.task_id == task.id
                )
                assert event.data["stuck_since"] == deadline
                wakes.append(event.ts - deadline)
                c.cancel_task(task.id, reason="measured")  # off the board for the next round
    finally:
        mon.stop()
        thread.join(timeout=5)
        mon_client.close()
        close_reader()
    return {
        "in_progress": n,
        "committed_after_deadline_ms": percentiles([x * 1e3 for x in lags]),
        "woke_after_deadline_ms": percentiles([x * 1e3 for x in wakes]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in-progress", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--quick", action="store_true", help="100 tasks, 2 rounds")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "stuck_bench.json")
    a = ap.parse_args()
    if a.quick:
        a.in_progress, a.rounds = 100, 2
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in a.backends.split(","):
            db = Db(backend, Path(tmp), "stuck")
            try:
                results[backend] = stuck(db, a.in_progress, a.rounds)
            finally:
                db.drop()
            # Side by side, in the same run: a dead node's lease recovery in a fleet of
            # the same size (bench/fleet_size.py's phase), the target's model.
            db = Db(backend, Path(tmp), "recovery")
            try:
                results[backend]["lease_recovery"] = recovery(db, a.in_progress, a.rounds)
            finally:
                db.drop()
    worst = {b: r["committed_after_deadline_ms"]["max"] for b, r in results.items()}
    data = {
        "bench": "stuck_bench",
        "machine": machine_info(),
        "params": {"in_progress": a.in_progress, "rounds": a.rounds, "timeout_s": TIMEOUT},
        "results": results,
        "met": {"within_deadline_plus_5ms": all(v <= 5 for v in worst.values())},
    }
    write_json(a.out, data)
    rows = [
        [
            b,
            r["in_progress"],
            r["committed_after_deadline_ms"]["p50"],
            r["committed_after_deadline_ms"]["p99"],
            r["committed_after_deadline_ms"]["max"],
            r["woke_after_deadline_ms"]["max"],
            r["lease_recovery"]["committed_after_threshold_ms"]["p50"],
            r["lease_recovery"]["committed_after_threshold_ms"]["max"],
        ]
        for b, r in results.items()
    ]
    heads = ["backend", "in progress", "p50 ms", "p99 ms", "max ms", "woke max ms"]
    print(table([*heads, "recovery p50 ms", "recovery max ms"], rows))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
