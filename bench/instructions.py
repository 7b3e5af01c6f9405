"""Instructions per job of the SQLite worker loop, counted by callgrind (a steady measure
where times on a shared machine are not).

One process per count: a 3,000-task board, 200 warm-up steps, then callgrind counts
only the ``--jobs`` steps of the loop (a client request turns it on and off around
them), the store's checkpoint thread stopped. ``--tree DIR`` counts another checkout's
``corral`` (``DIR/src``, e.g. a ``git worktree`` of an older commit). Needs valgrind,
its headers (``valgrind/callgrind.h``) and a C compiler.

    python bench/instructions.py                          # this tree, both loops
    python bench/instructions.py --tree /tmp/base-caeb9f8
    python bench/instructions.py --loops cc --usage       # usage on every completion
    python bench/instructions.py --pg postgresql://postgres@127.0.0.1:5432/test

``--pg URL`` counts the client against PostgreSQL instead: the board in a new database
on URL's server (dropped after), the client's process only (the server's side is
``bench/pg_instructions.py``'s).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

_HELPER = """#include <valgrind/callgrind.h>
void on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS; }
"""
ROLE = "developer"
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}  # usage_overhead's


def _loop(
    tree: str, loop: str, jobs: int, helper: str, usage: bool, pg: str | None
) -> None:  # under valgrind
    sys.path.insert(0, os.path.join(tree, "src"))
    import corral

    cg = ctypes.CDLL(helper)
    if pg is None:
        d = tempfile.mkdtemp(prefix="corral-instr-")
        c = corral.connect(f"sqlite:///{d}/i.db")
        c.store._checkpoints.close()  # no background thread in the count
    else:
        c = corral.connect(pg, pool_size=1)
    c.configure(max_agents=1000)
    c.add_tasks(
        [
            {"title": f"implement part {i}" if i % 3 == 0 else f"job {i}", "priority": p}
            for i, p in zip(range(3000), ("high", "medium", "low") * 1000, strict=True)
        ]
    )
    c.register_node("n1", ROLE)

    # Without --usage no usage argument at all: a tree from before usage has none.
    extra = {"usage": USAGE} if usage else {}

    def run(k: int) -> None:
        if loop == "cc":
            t = c.claim_best_task("n1", ROLE)
            for _ in range(k):
                t = c.complete_and_claim(t.id, "n1", ROLE, t.epoch, **extra)[1]
            c.complete_task(t.id, "n1", t.epoch)
        else:
            for _ in range(k):
                t = c.claim_best_task("n1", ROLE)
                c.complete_task(t.id, "n1", t.epoch)

    run(200)
    cg.on()
    run(jobs)
    cg.off()
    c.close()


def count(
    tree: str,
    loop: str,
    jobs: int,
    work: Path,
    helper: Path,
    usage: bool = False,
    pg: str | None = None,
) -> int:
    """Instructions per job of ``loop`` ("cc": complete_and_claim, "two": claim +
    complete) with the corral of ``tree`` (``usage``: a report on every completion of
    "cc"; ``pg``: on a new database of that PostgreSQL server, not SQLite)."""
    out = work / f"cg.{loop}"
    with _scratch_database(pg) as db_url:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--collect-atstart=no",
                f"--callgrind-out-file={out}.%p",
                sys.executable,
                __file__,
                "--child",
                loop,
                "--tree",
                tree,
                "--jobs",
                str(jobs),
                "--helper",
                str(helper),
                *(["--usage"] if usage else []),
                *(["--db", db_url] if db_url else []),
            ],
            check=True,
            capture_output=True,
        )
    [dump] = glob.glob(f"{out}.*.1")  # the dump the client request made
    for line in Path(dump).read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1]) // jobs
    raise RuntimeError(f"no totals in {dump}")


@contextmanager
def _scratch_database(pg: str | None) -> Iterator[str | None]:
    """A new database on ``pg``'s server, its URL, dropped after (None: SQLite)."""
    if pg is None:
        yield None
        return
    import psycopg

    name = f"corral_instr_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(pg)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--loops", default="cc,two")
    p.add_argument("--usage", action="store_true", help="usage on every completion (cc)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--helper", help=argparse.SUPPRESS)
    p.add_argument("--pg", help="a PostgreSQL server's URL: count the client against it")
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--keep", help="copy callgrind's dumps here (for callgrind_annotate)")
    args = p.parse_args()
    if args.child:
        _loop(args.tree, args.child, args.jobs, args.helper, args.usage, args.db)
        return 0
    with tempfile.TemporaryDirectory(prefix="corral-instr-") as d:
        work = Path(d)
        (work / "cg.c").write_text(_HELPER)
        helper = work / "cg.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", helper, work / "cg.c"], check=True)
        for loop in args.loops.split(","):
            n = count(args.tree, loop, args.jobs, work, helper, args.usage, args.pg)
            with_usage = " with usage" if args.usage else ""
            on = " on PostgreSQL (the client)" if args.pg else ""
            print(f"{args.tree} {loop}{with_usage}{on}: {n:,} instructions per job")
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for dump in glob.glob(str(work / "cg.*.*.1")):
                shutil.copy(dump, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
