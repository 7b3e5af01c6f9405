"""What a worker's step costs on SQLite, piece by piece, without corral's Python.

Three readings, one process, ``synchronous=NORMAL``:

- **WAL frames per job by table**: the pages each commit writes, attributed to the
  table or index that owns them (``dbstat``), for corral's worker step
  (``complete_and_claim``), its two-call loop and the bare loop of
  ``sqlite_throughput.py``.
- **Raw SQL per job**: corral's own hot statements (``task_complete`` without
  RETURNING, then ``claim_take``, in one ``BEGIN IMMEDIATE … COMMIT``) run straight on
  ``sqlite3`` beside the bare loop, as they are and with one thing changed: no event
  inserts in the triggers; 2 KB pages; two connections taking turns (every step
  finds the other's commit, as with several processes).
- **Python per job**: the same step through ``corral.connect``.

Each variant runs on a fresh copy of one loaded file; rounds interleave the variants
and the median round counts. It reads the store's SQL and triggers from the package;
it is a diagnosis tool (``docs/performance.md``, "The remaining gap, taken apart").

    python bench/sqlite_anatomy.py [--tasks 30000] [--steps 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import sqlite3
import statistics
import struct
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import corral
from _common import RESULTS_DIR, machine_info, table, write_json
from corral import scoring
from corral.store.queries import schema
from corral.store.rows import TaskRow
from corral.store.sqlite.store import _BOOKKEEPING, _CLAIM_TAKE, _TASK_COMPLETE_QUIET
from sqlite_throughput import _BARE_CLAIM, _BARE_COMPLETE, _load_bare, _load_corral

NODE = "anatomy"
ROLE = "developer"


def _without_event_inserts() -> tuple[str, ...]:
    """The schema's triggers again, without their event inserts (the "no events"
    variant): statements that drop and re-create them."""
    triggers = re.findall(r"CREATE TRIGGER .*?\nEND;", schema("sqlite"), re.S)
    assert len(triggers) >= 2, "the schema's triggers moved"
    names = [re.search(r"CREATE TRIGGER (\w+)", t)[1] for t in triggers]  # type: ignore[index]
    # each event insert is one statement: VALUES (...) or INSERT ... SELECT, to its ';'
    bare = [re.sub(r"\n *INSERT INTO events .*?;(?=\n)", "", t, flags=re.S) for t in triggers]
    assert all("events" not in t for t in bare)
    return (*(f"DROP TRIGGER {name}" for name in names), *bare)


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-lock", "-sync"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _load(folder: Path, tasks: int, page_size: int) -> tuple[Path, Path]:
    """A corral file and a bare-loop file (``sqlite_throughput.py``'s boards) with
    ``tasks`` pending, at ``page_size``."""
    src = folder / f"corral-{page_size}.db"
    with sqlite3.connect(src) as k:  # the page size is fixed when the file is made
        k.execute(f"PRAGMA page_size={page_size}")
        k.execute("PRAGMA journal_mode=WAL")
    _load_corral(src, tasks, "NORMAL")
    with corral.connect(f"sqlite:///{src}") as c:
        c.register_node(NODE, ROLE)
    bare = folder / f"bare-{page_size}.db"
    _load_bare(bare, tasks, "NORMAL", page_size)
    return src, bare


def _copy(src: Path, folder: Path) -> Path:
    db = folder / "run.db"
    _remove(db)
    shutil.copy(src, db)
    return db


# The rows the claim's trigger hands over (``corral_claimed``), as the store keeps them.
_CLAIMED: list[tuple[Any, ...]] = []


def _claimed(*row: Any) -> None:
    _CLAIMED.append(row)


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    # The store's triggers call it when a statement makes a waiting task claimable
    # (corral's connection rings its ready signal); a raw connection has nothing to ring.
    conn.create_function("corral_woken", 0, lambda: None)
    # The claim's trigger hands the claimed row to its store (TaskRow's columns).
    conn.create_function("corral_claimed", len(TaskRow._fields), _claimed)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _corral_steps(conns: list[sqlite3.Connection]) -> Callable[[int], None]:
    """``n`` worker steps in raw SQL, the connections taking turns."""
    params = {"role": ROLE, "node_id": NODE, "bonus": scoring.ROLE_BONUS_SECONDS}
    first = conns[0]
    first.execute("BEGIN IMMEDIATE")
    first_claim = {**params, "now": time.time(), "session_id": str(uuid.uuid4())}
    _CLAIMED.clear()
    first.execute(_CLAIM_TAKE, first_claim)
    held = [_CLAIMED.pop()]
    first.execute("COMMIT")

    def steps(n: int) -> None:
        for i in range(n):
            conn = conns[i % len(conns)]
            now = time.time()
            session = str(uuid.uuid4())  # as the store: made before the write lock
            row = held[0]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                _TASK_COMPLETE_QUIET,
                {"id": row[0], "node_id": NODE, "epoch": row[8], "result": None, "now": now},
            )
            claim = {**params, "now": now, "session_id": session}
            conn.execute(_CLAIM_TAKE, claim)
            held[0] = _CLAIMED.pop()
            conn.execute("COMMIT")

    return steps


def _bare_steps(conns: list[sqlite3.Connection]) -> Callable[[int], None]:
    def steps(n: int) -> None:
        for i in range(n):
            conn = conns[i % len(conns)]
            conn.execute("BEGIN IMMEDIATE")
            job, epoch = conn.execute(_BARE_CLAIM, ("h",)).fetchone()
            conn.execute("COMMIT")
            conn = conns[(i + 1) % len(conns)]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_BARE_COMPLETE, (job, "h", epoch))
            conn.execute("COMMIT")

    return steps


def _raw(src: Path, folder: Path, steps: int, kind: str, conns: int, schema: tuple = ()) -> float:
    """µs per job of ``steps`` raw steps on a fresh copy of ``src``."""
    db = _copy(src, folder)
    opened = [_connect(db) for _ in range(conns)]
    try:
        if kind == "corral":  # the claim's and completion's bookkeeping, as corral's own
            for conn in opened:
                for trigger in _BOOKKEEPING:
                    conn.execute(trigger)
        for statement in schema:
            opened[0].execute(statement)
        run = (_corral_steps if kind == "corral" else _bare_steps)(opened)
        t0 = time.perf_counter()
        run(steps)
        return (time.perf_counter() - t0) / steps * 1e6
    finally:
        for conn in opened:
            conn.close()


def _through_corral(src: Path, folder: Path, steps: int) -> float:
    """µs per job of ``complete_and_claim`` through ``corral.connect``."""
    db = _copy(src, folder)
    with corral.connect(f"sqlite:///{db}") as c:
        task = c.claim_best_task(NODE, ROLE)
        t0 = time.perf_counter()
        for _ in range(steps):
            _, task = c.complete_and_claim(task.id, NODE, ROLE, task.epoch)
        return (time.perf_counter() - t0) / steps * 1e6


def _frames(src: Path, folder: Path, kind: str, k: int) -> dict[str, float]:
    """WAL frames per job over ``k`` jobs, by the table or index owning each page."""
    db = _copy(src, folder)
    probe = sqlite3.connect(db, isolation_level=None)
    if kind == "bare":
        conn = _connect(db)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        run = _bare_steps([conn])
        closer: Callable[[], None] = conn.close
    else:
        c = corral.connect(f"sqlite:///{db}")
        store: Any = c.store
        store._checkpoints.close()  # no background checkpoint while counting
        store._conn.execute("PRAGMA wal_autocheckpoint=0")
        held = [c.claim_best_task(NODE, ROLE)]

        def run(n: int) -> None:
            for _ in range(n):
                t = held[0]
                if kind == "corral_cc":
                    _, held[0] = c.complete_and_claim(t.id, NODE, ROLE, t.epoch)
                else:
                    c.complete_task(t.id, NODE, t.epoch)
                    held[0] = c.claim_best_task(NODE, ROLE)

        closer = c.close
    try:
        run(50)  # past the first pages' growth
        busy = probe.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        assert busy == 0, "the WAL could not be reset"
        run(k)
        wal = Path(f"{db}-wal").read_bytes()
    finally:
        closer()
    page_size = struct.unpack(">I", wal[8:12])[0]
    pages = [
        struct.unpack(">I", wal[off : off + 4])[0]
        for off in range(32, len(wal) - page_size - 23, 24 + page_size)
    ]
    owner = dict(probe.execute("SELECT pageno, name FROM dbstat").fetchall())
    probe.close()
    counts = collections.Counter(owner.get(p, "(new pages)") for p in pages)
    return {"total": len(pages) / k, **{name: n / k for name, n in counts.most_common()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=30_000, help="pending tasks loaded")
    p.add_argument("--steps", type=int, default=4000, help="jobs per variant per round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "sqlite_anatomy.json")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.steps, args.rounds = 600, 100, 1
    folder = Path(tempfile.mkdtemp(prefix="corral-anatomy-"))
    try:
        src4, bare4 = _load(folder, args.tasks, 4096)
        src2, bare2 = _load(folder, args.tasks, 2048)
        k = min(args.steps, 200)
        frames = {kind: _frames(src4, folder, kind, k) for kind in ("corral_cc", "corral")}
        frames["bare"] = _frames(bare4, folder, "bare", k)

        variants: dict[str, Callable[[], float]] = {
            "bare loop": lambda: _raw(bare4, folder, args.steps, "bare", 1),
            "worker step, SQL only": lambda: _raw(src4, folder, args.steps, "corral", 1),
            "worker step, SQL only, no event inserts": lambda: _raw(
                src4, folder, args.steps, "corral", 1, _without_event_inserts()
            ),
            "bare loop, 2 KB pages": lambda: _raw(bare2, folder, args.steps, "bare", 1),
            "worker step, SQL only, 2 KB pages": lambda: _raw(
                src2, folder, args.steps, "corral", 1
            ),
            "bare loop, two connections in turn": lambda: _raw(
                bare4, folder, args.steps, "bare", 2
            ),
            "worker step, SQL only, two connections in turn": lambda: _raw(
                src4, folder, args.steps, "corral", 2
            ),
            "worker step through corral.connect": lambda: _through_corral(src4, folder, args.steps),
        }
        rounds: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, run in variants.items():
                rounds[name].append(run())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    us = {name: statistics.median(values) for name, values in rounds.items()}
    bare = us["bare loop"]

    print(f"# one process, NORMAL, {args.tasks:,} pending, {args.steps:,} jobs x {args.rounds}")
    print(
        table(
            ["variant", "µs per job", "x the bare loop"],
            [[name, v, f"{v / bare:.2f}x"] for name, v in us.items()],
        )
    )
    print()
    names = sorted({n for f in frames.values() for n in f} - {"total"})
    print(
        table(
            ["WAL frames per job", "total", *names],
            [[kind, f["total"], *(f.get(n, 0.0) for n in names)] for kind, f in frames.items()],
        )
    )
    write_json(
        args.out,
        {
            "bench": "sqlite_anatomy",
            "machine": machine_info(),
            "params": {
                "tasks": args.tasks,
                "steps": args.steps,
                "rounds": args.rounds,
                "quick": args.quick,
            },
            "us_per_job": us,
            "rounds": rounds,
            "frames_per_job": frames,
        },
    )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
