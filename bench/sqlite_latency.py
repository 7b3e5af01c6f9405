"""Claim + complete latency on one process, by number of pending tasks.

For each board size (1k, 100k, 1M pending tasks by default) an SQLite file is loaded
once with ``Cluster.add_tasks`` in batches and cached (``--cache-dir`` keeps the
files between runs; they are keyed by corral's source, so a code change reloads).
Each measurement works on a copy. One node claims and completes, one operation at a
time; before each sample one task is added (not timed), so the board keeps its size.
The boards are measured in interleaved rounds, so background load on a shared machine
hits them alike. The target: claim p99 at the largest size within 2x of the smallest.

Each size is measured twice (``--checkpoint``): as shipped (``auto``: the store's
background thread checkpoints the WAL every 200 commits, beside the timed calls), and
with checkpoints taken between samples by a second connection, untimed (``between``:
the board-size effect alone).

    python bench/sqlite_latency.py             # 1k, 100k, 1M (loading 1M takes ~1 min)
    python bench/sqlite_latency.py --quick     # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

ROLE = "developer"
NODE = "bench-latency"
_PRIORITIES = ("high", "medium", "low")


def _fingerprint() -> str:
    """Changes whenever corral's code or SQL changes (what a board holds depends on both)."""
    root = Path(corral.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted([*root.rglob("*.py"), *root.rglob("*.sql")]):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _task(i: int) -> dict[str, Any]:
    # Every third title matches the developer keywords, so both index heads matter.
    title = f"implement part {i}" if i % 3 == 0 else f"job {i}"
    return {"title": title, "priority": _PRIORITIES[i % 3]}


def load(path: Path, size: int, batch: int, sync: str) -> float:
    """A file with ``size`` pending tasks; returns the seconds loading took."""
    tmp = path.with_suffix(".loading")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    start = time.perf_counter()
    with corral.connect(f"sqlite:///{tmp}", synchronous=sync) as c:
        c.configure(max_agents=10_000)
        step = max(1, size // batch // 10)
        for n, first in enumerate(range(0, size, batch)):
            c.add_tasks([_task(i) for i in range(first, min(size, first + batch))])
            if size >= 100_000 and (n + 1) % step == 0:
                done = min(size, first + batch)
                rate = done / (time.perf_counter() - start)
                print(f"    loaded {done:>9,} / {size:,} ({rate:,.0f} tasks/s)", flush=True)
    seconds = time.perf_counter() - start
    # Fold the WAL into the file so the cached copy is one self-contained file.
    conn = sqlite3.connect(tmp)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tmp.replace(path)
    for p in (Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    return seconds


class Board:
    """One open cluster at a fixed board size, measured in rounds.

    ``checkpoint`` is ``"auto"`` (as shipped: the store's background thread
    checkpoints the WAL while the calls run) or ``"between"`` (a second connection
    checkpoints every ``CHECKPOINT_EVERY`` steps, untimed: the board-size effect
    alone)."""

    CHECKPOINT_EVERY = 20

    def __init__(self, size: int, path: Path, sync: str, checkpoint: str) -> None:
        self.size = size
        self.checkpoint = checkpoint
        self.client = corral.connect(f"sqlite:///{path}", synchronous=sync)
        self.client.register_node(NODE, ROLE)
        self._ckpt = (
            sqlite3.connect(path, isolation_level=None) if checkpoint == "between" else None
        )
        self.claim_us: list[float] = []
        self.complete_us: list[float] = []
        self._next = size
        self._path = path

    def step(self, record: bool = True) -> None:
        c = self.client
        c.add_task(**_task(self._next))
        self._next += 1
        t0 = time.perf_counter()
        task = c.claim_best_task(NODE, ROLE)
        t1 = time.perf_counter()
        c.complete_task(task.id, NODE, task.epoch)
        t2 = time.perf_counter()
        if record:
            self.claim_us.append((t1 - t0) * 1e6)
            self.complete_us.append((t2 - t1) * 1e6)
        if self._ckpt is not None and self._next % self.CHECKPOINT_EVERY == 0:
            self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def pending(self) -> int:
        conn = sqlite3.connect(self._path)
        try:
            return conn.execute("SELECT count(*) FROM tasks WHERE status = 'pending'").fetchone()[0]
        finally:
            conn.close()

    def close(self) -> None:
        self.client.close()
        if self._ckpt is not None:
            self._ckpt.close()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,100000,1000000", help="pending tasks per board")
    p.add_argument("--samples", type=int, default=5000, help="claim+complete pairs per board")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    p.add_argument("--warmup", type=int, default=300, help="untimed pairs per board first")
    p.add_argument("--batch", type=int, default=10_000, help="tasks per add_tasks call")
    p.add_argument("--synchronous", default="NORMAL", help="SQLite synchronous setting")
    p.add_argument(
        "--checkpoint",
        default="auto,between",
        help="WAL checkpoint modes to measure: auto (as shipped), between (untimed)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="keep loaded boards here between runs (default: a temp dir, removed)",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "sqlite_latency.json")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    p.add_argument(
        "--render", type=Path, default=None, help="only print the tables of an earlier results file"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.samples, args.rounds, args.warmup, args.batch = "200,2000", 60, 2, 10, 500
    args.sizes = sorted({int(x) for x in str(args.sizes).split(",") if x})
    args.synchronous = args.synchronous.upper()
    args.checkpoint = [m.strip() for m in args.checkpoint.split(",") if m.strip()]
    for m in args.checkpoint:
        if m not in ("auto", "between"):
            p.error(f"--checkpoint: unknown mode {m!r} (auto, between)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    info = machine_info()
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="corral-latency-cache-"))
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="corral-latency-"))
    fp = _fingerprint()
    print(
        f"# SQLite claim+complete latency, one process: sizes {args.sizes}, "
        f"{args.samples} samples each, synchronous={args.synchronous}, "
        f"checkpoint modes {args.checkpoint}, SQLite {info['sqlite']}"
    )
    boards: list[Board] = []
    loads: dict[int, float | None] = {}
    try:
        for size in args.sizes:
            cached = cache / f"board-{size}-{fp}.db"
            if cached.exists():
                print(f"  {size:,} pending: cached board {cached}", flush=True)
                loads[size] = None
            else:
                print(f"  {size:,} pending: loading ...", flush=True)
                loads[size] = load(cached, size, args.batch, args.synchronous)
                print(f"  {size:,} pending: loaded in {loads[size]:.1f} s", flush=True)
            for mode in args.checkpoint:
                copy = work / f"{mode}-{cached.name}"
                shutil.copyfile(cached, copy)
                boards.append(Board(size, copy, args.synchronous, mode))
        for b in boards:
            for _ in range(args.warmup):
                b.step(record=False)
        per_round = -(-args.samples // args.rounds)
        for r in range(args.rounds):
            for b in boards:
                for _ in range(min(per_round, args.samples - len(b.claim_us))):
                    b.step()
            print(f"  round {r + 1}/{args.rounds} done", flush=True)
        results = [
            {
                "checkpoint": b.checkpoint,
                "pending": b.size,
                "pending_at_end": b.pending(),
                "load_seconds": loads[b.size],
                "claim_us": percentiles(b.claim_us),
                "complete_us": percentiles(b.complete_us),
                "claims_over_1ms": sum(x > 1000 for x in b.claim_us),
            }
            for b in boards
        ]
    finally:
        for b in boards:
            b.close()
        shutil.rmtree(work, ignore_errors=True)
        if args.cache_dir is None:
            shutil.rmtree(cache, ignore_errors=True)

    result = {
        "bench": "sqlite_latency",
        "machine": {**info, "loadavg_end": list(os.getloadavg())},
        "params": {
            "sizes": args.sizes,
            "samples": args.samples,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "batch": args.batch,
            "synchronous": args.synchronous,
            "checkpoint": args.checkpoint,
            "checkpoint_every": Board.CHECKPOINT_EVERY,
            "quick": args.quick,
        },
        "results": results,
        "ratios": [_ratios(results, mode) for mode in args.checkpoint],
    }
    print()
    print(render(result))
    write_json(args.out, result)
    print(f"\nwrote {args.out}")
    return 0


def _ratios(results: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """The largest board against the smallest, in one checkpoint mode."""
    rows = [r for r in results if r["checkpoint"] == mode]
    small, large = rows[0], rows[-1]
    claim = large["claim_us"]["p99"] / small["claim_us"]["p99"]
    return {
        "checkpoint": mode,
        "smallest": small["pending"],
        "largest": large["pending"],
        "claim_p99_largest_over_smallest": claim,
        "claim_p50_largest_over_smallest": large["claim_us"]["p50"] / small["claim_us"]["p50"],
        "complete_p99_largest_over_smallest": large["complete_us"]["p99"]
        / small["complete_us"]["p99"],
        "target": 2.0,
        "met": claim <= 2.0,
    }


def render(result: dict[str, Any]) -> str:
    """The Markdown table for docs/performance.md."""
    smallest = {r["checkpoint"]: r for r in reversed(result["results"])}
    rows = []
    modes = result["params"]["checkpoint"]
    for r in sorted(result["results"], key=lambda r: (modes.index(r["checkpoint"]), r["pending"])):
        c, d, s = r["claim_us"], r["complete_us"], smallest[r["checkpoint"]]
        rows.append(
            [
                r["checkpoint"],
                r["pending"],
                c["p50"],
                c["p99"],
                f"{c['p99'] / s['claim_us']['p99']:.2f}x",
                c["max"],
                r["claims_over_1ms"],
                d["p50"],
                d["p99"],
                f"{d['p99'] / s['complete_us']['p99']:.2f}x",
            ]
        )
    out = table(
        [
            "WAL checkpoint",
            "pending tasks",
            "claim p50 µs",
            "claim p99 µs",
            "claim p99 vs smallest",
            "claim max µs",
            "claims > 1 ms",
            "complete p50 µs",
            "complete p99 µs",
            "complete p99 vs smallest",
        ],
        rows,
    )
    for q in result["ratios"]:
        out += (
            f"\ntarget ({q['checkpoint']} checkpoints): claim p99 at {q['largest']:,} within "
            f"{q['target']:.0f}x of {q['smallest']:,}: {q['claim_p99_largest_over_smallest']:.2f}x "
            f"{'met' if q['met'] else 'MISSED'}"
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
