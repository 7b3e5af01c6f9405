"""Acknowledged writes against other processes opening the database, then kill -9.

For ``corral serve`` and ``corral up`` on the embedded store, and for each of the
three ordinary openers (``corral status``, an embedded client, the ``sqlite3``
shell): N writes of mixed operations over HTTP (register, add, claim, complete,
fail, heartbeat), with M opens and closes of the file by new processes of that
opener spread among them; each write must be visible to a new reader (a separate
process, a new connection per query) within 100 ms of its acknowledgement, and the
WAL and shared-memory files must stay. Then ``kill -9`` of the server, and a new
reader looks for every acknowledged write in the file. Counted per run: writes not
seen in time, openings after which a side file was gone, writes missing after the
kill.

    python bench/wal_cross_process.py                 # N = 1,000, M = 100, six runs
    python bench/wal_cross_process.py --quick         # N = 100, M = 10
    PYTHONPATH=OLD/src python bench/wal_cross_process.py --quick   # another tree's corral

Results: bench/results/wal_cross_process.json (this tree, N = 1,000),
wal_cross_process_before_fix.json (the tree before the fix, --quick: the new reader's
own opens and closes are enough to lose the WAL there).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/support/wal_procs.py

from tests.support.backends.http import free_port
from tests.support.wal_procs import (
    TRIGGERS,
    FreshReader,
    Served,
    Upped,
    Workload,
    interleave,
    missing,
)

from _common import RESULTS_DIR, machine_info, table, write_json


def one_run(role: str, trigger: str, writes: int, openings: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"corral-wal-{role}-") as d:
        directory = Path(d)
        if role == "serve":
            db = directory / "c.db"
            process: Served | Upped = Served(db, free_port())
        else:
            process = Upped(directory)
            db = process.db
        reader = FreshReader(db)
        started = time.monotonic()
        try:
            work = Workload(process.client, seed=seed)
            run = interleave(
                work, reader, db, writes, openings, triggers=(trigger,), alive=process.alive
            )
            process.kill()
            lost = missing(reader, work.expected)
            integrity = reader.rows("PRAGMA integrity_check")
        finally:
            if process.alive():
                process.kill()
            reader.close()
        return {
            "role": role,
            "trigger": trigger,
            "writes_acknowledged": run.acked,
            "openings": run.openings,
            "invisible_within_100ms": len(run.invisible),
            "side_files_gone": len(run.side_files_gone),
            "states_checked_after_kill": len(work.expected),
            "lost_after_kill": len(lost),
            "integrity": integrity[0][0] if integrity else None,
            "slowest_visible_ms": round(run.slowest * 1000, 2),
            "seconds": round(time.monotonic() - started, 1),
            "first_problems": (run.invisible + run.side_files_gone + lost)[:3],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--openings", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="100 writes, 10 openings")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "wal_cross_process.json")
    args = parser.parse_args()
    if args.quick:
        args.writes, args.openings = 100, 10
    runs = []
    for i, (role, trigger) in enumerate((r, t) for r in ("serve", "up") for t in TRIGGERS):
        result = one_run(role, trigger, args.writes, args.openings, seed=i)
        runs.append(result)
        print(f"{role} / {trigger}: {result}", flush=True)
    print(
        table(
            [
                "process",
                "opener",
                "acked",
                "openings",
                "not seen in 100 ms",
                "WAL/shm gone",
                "lost after kill -9",
                "slowest seen (ms)",
            ],
            [
                [
                    r["role"],
                    r["trigger"],
                    r["writes_acknowledged"],
                    r["openings"],
                    r["invisible_within_100ms"],
                    r["side_files_gone"],
                    r["lost_after_kill"],
                    r["slowest_visible_ms"],
                ]
                for r in runs
            ],
        )
    )
    import corral

    write_json(
        args.out,
        {
            "machine": machine_info(),
            "writes": args.writes,
            "openings": args.openings,
            # the corral the servers ran (PYTHONPATH=<old tree>/src runs another)
            "corral_under_test": str(Path(corral.__file__).parent),
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
