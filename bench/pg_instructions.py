"""Instructions per job in the PostgreSQL backend that serves a corral worker's loop,
counted by callgrind (a steady measure of the server's side, where times and `/proc`
CPU samples on a shared machine are not).

The script makes its own PostgreSQL cluster in a temporary directory (``initdb``, as
the ``postgres`` user when run as root) and starts its postmaster under callgrind on
``--port``; every backend is then counted, and writes its count when it exits. For
each tree (this one, and ``--tree DIR``'s, e.g. a ``git worktree`` of an older
commit), a board is loaded by that tree's own code (``bench/pg_throughput.py``'s
loader), one worker runs the loop, and its backend's total is read. Two runs, of
``--jobs`` and of ``--jobs`` + ``--step`` jobs (1,000), make the count per job: their
difference over the step, so the session's start (connecting, planning, caches) is
left out.
``--sql`` runs statements on this tree's board before the loop (an experiment: an
index dropped, a trigger changed), ``--tree-sql`` on ``--tree``'s (e.g. an older
tree's board given a later schema's indexes). Needs valgrind and PostgreSQL's server binaries
(``--pg-bin``, default the newest ``/usr/lib/postgresql/*/bin``).

    python bench/pg_instructions.py                            # this tree, worker's loop
    python bench/pg_instructions.py --tree /tmp/base-caeb9f8   # and an older tree's
    python bench/pg_instructions.py --sql "DROP INDEX tasks_ready_at"

``--out`` names the results file (default ``bench/results/pg_instructions.json``).
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import RESULTS_DIR, machine_info, write_json  # noqa: E402

LOOPS = {"cc": "corral_cc", "two": "corral"}  # pg_throughput's systems


def _pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql: --pg-bin")
    return found[-1]


def _as_postgres(cmd: list[str]) -> list[str]:
    """``cmd`` as the postgres user when this runs as root (the server refuses root)."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


class Server:
    """A throwaway cluster whose postmaster runs under callgrind (each backend's count
    goes to ``dumps/cg.<pid>`` when it exits)."""

    def __init__(self, pg_bin: str, port: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="corral-pginstr-"))
        self.dumps = self.dir / "dumps"
        self.dumps.mkdir()
        if os.geteuid() == 0:
            uid = pwd.getpwnam("postgres").pw_uid
            for p in (self.dir, self.dumps):
                os.chown(p, uid, -1)
        self.port = port
        subprocess.run(
            _as_postgres(
                [f"{pg_bin}/initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres"]
            ),
            check=True,
            capture_output=True,
        )
        self.proc = subprocess.Popen(
            _as_postgres(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={self.dumps}/cg.%p",
                    f"{pg_bin}/postgres",
                    "-D",
                    str(self.dir / "data"),
                    "-p",
                    str(port),
                    "-k",
                    str(self.dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "autovacuum=off",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.admin = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 120
        while subprocess.run(
            ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)], check=False
        ).returncode:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("the postmaster under callgrind did not start")
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()  # SIGTERM: the postmaster's smart shutdown
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _total(dump: str) -> int:
    for line in Path(dump).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    return 0


def backend_count(server: Server, system: str, jobs: int, base: str | None, sql: list[str]) -> int:
    """The instructions of the backend that served one worker running ``system``'s loop
    over a ``jobs``-task board (loaded by ``base``'s corral, or this tree's)."""
    import psycopg

    import pg_throughput as pt

    pt.ADMIN = server.admin
    db = f"pginstr_{uuid.uuid4().hex[:8]}"
    pt._admin(f'CREATE DATABASE "{db}"')
    try:
        url = pt._url(db)
        if base is None:
            pt._load(system.replace("corral_cc", "corral"), url, jobs)
        else:
            loader = pt.CTX.Process(target=pt._load_base, args=(url, jobs, base))
            loader.start()
            loader.join()
            if loader.exitcode != 0:
                raise RuntimeError(f"loading the board with {base} failed")
        if sql:
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in sql:
                    conn.execute(statement)
        time.sleep(2)  # the loader's backends write their dumps as they exit
        before = set(glob.glob(f"{server.dumps}/cg.*"))
        barrier, out = pt.CTX.Barrier(1), pt.CTX.Queue()
        name = f"{system}_base" if base else system
        worker = pt.CTX.Process(target=pt._work, args=(name, url, "w0", barrier, out, base))
        worker.start()
        count = out.get(timeout=3600)[0]
        worker.join()
        if count != jobs:
            raise RuntimeError(f"the worker did {count} jobs of {jobs}")
        deadline = time.monotonic() + 60
        while True:  # the worker's backend: the one new dump with the most instructions
            new = set(glob.glob(f"{server.dumps}/cg.*")) - before
            if new and all(_total(d) for d in new):
                return max(_total(d) for d in new)
            if time.monotonic() > deadline:
                raise RuntimeError("the worker's backend wrote no count")
            time.sleep(0.5)
    finally:
        pt._admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default=None, help="also count this checkout's corral (DIR/src)")
    p.add_argument("--jobs", type=int, default=200, help="the shorter run's jobs")
    p.add_argument("--step", type=int, default=1000, help="the longer run's extra jobs")
    p.add_argument("--loops", default="cc", help="cc (complete_and_claim), two, or both")
    p.add_argument("--sql", action="append", default=[], help="run on this tree's board")
    p.add_argument("--tree-sql", action="append", default=[], help="run on --tree's board")
    p.add_argument("--port", type=int, default=5439)
    p.add_argument("--pg-bin", default=None)
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "pg_instructions.json")
    args = p.parse_args()
    loops = args.loops.split(",")
    unknown = [loop for loop in loops if loop not in LOOPS]
    if unknown:
        p.error(f"--loops: unknown loop {unknown[0]!r} (cc, two)")
    if args.jobs < 1 or args.step < 1:
        p.error("--jobs and --step must be at least 1")
    server = Server(args.pg_bin or _pg_bin(), args.port)
    rows = []
    try:
        trees: list[str | None] = [None]
        if args.tree:
            trees.append(os.path.abspath(args.tree))
        for loop in loops:
            for tree in trees:
                sql = args.sql if tree is None else args.tree_sql
                counts = [
                    backend_count(server, LOOPS[loop], n, tree, sql)
                    for n in (args.jobs, args.jobs + args.step)
                ]
                per_job = (counts[1] - counts[0]) / args.step
                label = tree or str(HERE.parent)
                print(f"{label} {loop}: {per_job:,.0f} backend instructions per job", flush=True)
                rows.append({"tree": label, "loop": loop, "counts": counts, "per_job": per_job})
    finally:
        server.stop()
    write_json(
        args.out,
        {
            "bench": "pg_instructions",
            "machine": machine_info(),
            "jobs": [args.jobs, args.jobs + args.step],
            "sql": args.sql,
            "tree_sql": args.tree_sql,
            "results": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
