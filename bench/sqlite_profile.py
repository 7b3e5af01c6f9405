"""Where a claim + complete spends its time, statement by statement (SQLite, one process).

Wraps the SQLite store's connection so every statement it runs is timed, then runs
claim + complete pairs on a loaded board. Per operation it prints: the time of each
named query (and BEGIN / COMMIT), the time the write lock is held (BEGIN IMMEDIATE
to the end of COMMIT: what other processes wait for), and the Python time around it.
It also counts the pages each commit writes to the WAL, for corral and for the bare
loop of ``sqlite_throughput.py``: a COMMIT costs about in proportion to them.
It reads private attributes (the store's ``_conn``, ``_hot`` and ``_rows``); it is a
diagnosis tool.

    python bench/sqlite_profile.py [--tasks 20000] [--pairs 5000] [--cprofile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import corral
from _common import RESULTS_DIR, machine_info, table, write_json
from corral.store.queries import load_queries
from corral.store.sqlite.store import _TASK_COMPLETE_QUIET
from sqlite_throughput import _BARE_CLAIM, _BARE_COMPLETE, _load_bare

ROLE = "developer"
NODE = "bench-profile"
ROUNDS = 5


class TimedConnection:
    """A stand-in for ``sqlite3.Connection`` that times ``execute`` by query name."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._names = {sql: name for name, sql in load_queries("sqlite").items()}
        self._names[_TASK_COMPLETE_QUIET] = "task_complete (no RETURNING)"
        self.op = "setup"
        self.stats: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        self.held: dict[str, float] = defaultdict(float)
        self._t_begin: float | None = None

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.timed(self._conn, sql, params)

    def timed(self, target: Any, sql: str, params: Any) -> Any:
        """Run ``sql`` on ``target`` (this connection, or a cursor of it), timed."""
        name = self._names.get(sql) or " ".join(sql.split())[:48]
        t0 = time.perf_counter()
        cur = target.execute(sql, params)
        rows = cur.fetchall() if cur.description is not None else None
        t1 = time.perf_counter()
        s = self.stats[(self.op, name)]
        s[0] += 1
        s[1] += t1 - t0
        if name == "BEGIN IMMEDIATE":
            self._t_begin = t0
        elif name in ("COMMIT", "ROLLBACK") and self._t_begin is not None:
            self.held[self.op] += t1 - self._t_begin
            self._t_begin = None
        return _Result(cur, rows)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._conn, attr)


class TimedCursor:
    """The store's cursor for its hot statements, timed by a ``TimedConnection``."""

    def __init__(self, cur: Any, timer: TimedConnection) -> None:
        self._cur = cur
        self._timer = timer

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._timer.timed(self._cur, sql, params)


class _Result:
    """The executed cursor, with its rows already fetched (inside the timing)."""

    def __init__(self, cur: Any, rows: list[Any] | None) -> None:
        self._cur = cur
        self._rows = rows or []
        self.rowcount = cur.rowcount

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


def corral_ops(c: Any) -> tuple[Any, Any]:
    def claim() -> Any:
        return c.claim_best_task(NODE, ROLE)

    def complete(task: Any) -> None:
        c.complete_task(task.id, NODE, task.epoch)

    return claim, complete


def bare_ops(conn: sqlite3.Connection) -> tuple[Any, Any]:
    def tx(sql: str, *params: Any) -> Any:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(sql, params).fetchone()
        conn.execute("COMMIT")
        return row

    def claim() -> Any:
        return tx(_BARE_CLAIM, "h")

    def complete(row: Any) -> None:
        tx(_BARE_COMPLETE, row[0], "h", row[1])

    return claim, complete


def time_pairs(ops: tuple[Any, Any], n: int) -> dict[str, float]:
    """Wall and CPU µs per claim + complete over ``n`` pairs."""
    claim, complete = ops
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        complete(claim())
    return {
        "wall_us": (time.perf_counter() - w0) / n * 1e6,
        "cpu_us": (time.process_time() - c0) / n * 1e6,
    }


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def wal_frames(conn: Any, path: Path, k: int, ops: tuple[Any, Any]) -> dict[str, float]:
    """Pages written to the WAL per claim commit and per complete commit (the WAL's
    frame count over ``k`` of each, automatic checkpoints off meanwhile)."""
    claim, complete = ops
    probe = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    try:

        def frames_after(fn: Any) -> int:
            busy = probe.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            assert busy == 0, "the WAL could not be reset"
            fn()
            return probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]

        held: list[Any] = []
        f_claim = frames_after(lambda: held.extend(claim() for _ in range(k)))
        f_complete = frames_after(lambda: [complete(x) for x in held])
        f_pair = frames_after(lambda: [complete(claim()) for _ in range(k)])
    finally:
        conn.execute("PRAGMA wal_autocheckpoint=1000")  # bare's default; corral's store closes next
        probe.close()
    return {"claim": f_claim / k, "complete": f_complete / k, "pair": f_pair / k}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20_000, help="pending tasks (at least)")
    p.add_argument("--pairs", type=int, default=5000, help="claim+complete pairs measured")
    p.add_argument("--synchronous", default="NORMAL")
    p.add_argument("--cprofile", action="store_true", help="also print cProfile's top 25")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "sqlite_profile.json")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.pairs = 500, 100

    with tempfile.TemporaryDirectory(prefix="corral-profile-") as d:
        c = corral.connect(f"sqlite:///{Path(d) / 'p.db'}", synchronous=args.synchronous)
        c.configure(max_agents=1000)
        total = args.tasks + 4 * args.pairs + 300  # the board never drops below --tasks
        for first in range(0, total, 10_000):
            c.add_tasks(
                [
                    {
                        "title": f"implement part {i}" if i % 3 == 0 else f"job {i}",
                        "priority": ("high", "medium", "low")[i % 3],
                    }
                    for i in range(first, min(total, first + 10_000))
                ]
            )
        c.register_node(NODE, ROLE)

        def pairs(n: int, timed: TimedConnection | None = None) -> None:
            for _ in range(n):
                if timed:
                    timed.op = "claim"
                task = c.claim_best_task(NODE, ROLE)
                if timed:
                    timed.op = "complete"
                c.complete_task(task.id, NODE, task.epoch)

        pairs(300)
        bare_path = Path(d) / "bare.db"
        _load_bare(bare_path, total, args.synchronous)
        bare = sqlite3.connect(bare_path, isolation_level=None)
        bare.execute(f"PRAGMA synchronous={args.synchronous}")
        time_pairs(bare_ops(bare), 300)
        # Unwrapped, side by side: wall time, and CPU time (robust to a busy machine).
        # Interleaved rounds, the median round per system: a busy machine hits both alike.
        rounds: dict[str, list[dict[str, float]]] = {"corral": [], "bare": []}
        for _ in range(ROUNDS):
            rounds["corral"].append(time_pairs(corral_ops(c), args.pairs // ROUNDS))
            rounds["bare"].append(time_pairs(bare_ops(bare), args.pairs // ROUNDS))
        unwrapped = {
            name: {k: statistics.median(r[k] for r in rs) for k in ("wall_us", "cpu_us")}
            for name, rs in rounds.items()
        }
        for t in c.list_tasks(status="in_progress", limit=10_000):
            c.complete_task(t.id, NODE, t.epoch)

        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            pairs(args.pairs)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)

        store: Any = c.store
        timed = TimedConnection(store._conn)
        store._conn = timed
        hot, rows = store._hot, store._rows
        store._hot = TimedCursor(hot, timed)
        store._rows = TimedCursor(rows, timed)
        t_op: dict[str, float] = defaultdict(float)
        for _ in range(args.pairs):
            timed.op = "claim"
            t0 = time.perf_counter()
            task = c.claim_best_task(NODE, ROLE)
            t1 = time.perf_counter()
            timed.op = "complete"
            c.complete_task(task.id, NODE, task.epoch)
            t2 = time.perf_counter()
            t_op["claim"] += t1 - t0
            t_op["complete"] += t2 - t1
        store._conn = timed._conn
        store._hot, store._rows = hot, rows
        k = min(args.pairs, 100)
        store._checkpoints.close()  # no background checkpoint while counting frames
        frames = {"corral": wal_frames(store._conn, Path(d) / "p.db", k, corral_ops(c))}
        c.close()
        frames["bare"] = wal_frames(bare, bare_path, k, bare_ops(bare))
        bare.close()

    n = args.pairs
    rows = []
    ops: dict[str, Any] = {}
    for op in ("claim", "complete"):
        stmts = {name: s for (o, name), s in timed.stats.items() if o == op}
        in_sql = sum(s[1] for s in stmts.values())
        for name, (count, secs) in sorted(stmts.items(), key=lambda kv: -kv[1][1]):
            rows.append([op, name, count / n, secs / n * 1e6, f"{secs / t_op[op]:.0%}"])
        ops[op] = {
            "total_us": t_op[op] / n * 1e6,
            "lock_held_us": timed.held[op] / n * 1e6,
            "sql_us": in_sql / n * 1e6,
            "python_us": (t_op[op] - in_sql) / n * 1e6,
            "statements": {
                name: {"per_op": s[0] / n, "us": s[1] / n * 1e6} for name, s in stmts.items()
            },
        }
        rows.append(
            [
                op,
                "(python, outside statements)",
                "",
                ops[op]["python_us"],
                f"{(t_op[op] - in_sql) / t_op[op]:.0%}",
            ]
        )
    print(f"# claim + complete, {args.tasks:,} pending, {n} pairs, synchronous={args.synchronous}")
    print(
        table(
            ["claim + complete (unwrapped)", "wall µs", "CPU µs"],
            [
                *[[name, u["wall_us"], u["cpu_us"]] for name, u in unwrapped.items()],
                [
                    "corral / bare",
                    _x(unwrapped["corral"]["wall_us"] / unwrapped["bare"]["wall_us"]),
                    _x(unwrapped["corral"]["cpu_us"] / unwrapped["bare"]["cpu_us"]),
                ],
            ],
        )
    )
    print()
    print(table(["operation", "statement", "per op", "µs per op", "share"], rows))
    print()
    print(
        table(
            ["operation", "total µs", "write lock held µs", "in SQLite µs", "Python µs"],
            [
                [op, v["total_us"], v["lock_held_us"], v["sql_us"], v["python_us"]]
                for op, v in ops.items()
            ],
        )
    )
    write_json(
        args.out,
        {
            "bench": "sqlite_profile",
            "machine": machine_info(),
            "params": {
                "tasks": args.tasks,
                "pairs": n,
                "synchronous": args.synchronous,
                "quick": args.quick,
            },
            "unwrapped": unwrapped,
            "ops": ops,
            "wal_frames": frames,
        },
    )
    print()
    print(
        table(
            ["pages written to the WAL", "per claim", "per complete", "per claim + complete"],
            [[name, f["claim"], f["complete"], f["pair"]] for name, f in frames.items()],
        )
    )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
