"""Claim + complete throughput on one SQLite file with 1, 2, 4 and 8 processes.

Three systems run side by side in the same run, each on its own fresh file in WAL
mode with the same ``synchronous`` setting and the same fixed number of no-op jobs:

- ``corral``: each process opens ``corral.connect``, registers its own node and loops
  ``claim_best_task`` + ``complete_task`` until the board is empty (the full
  operation: node update and events included);
- ``corral_cc``: the same, but the worker loop uses ``complete_and_claim`` (finish the
  task and take the next in one transaction, one commit per job instead of two);
- ``bare``: the floor — ``BEGIN IMMEDIATE; UPDATE … RETURNING; COMMIT`` to claim, and
  a second ``BEGIN IMMEDIATE; UPDATE; COMMIT`` to complete (fenced by holder and epoch);
- ``huey``: huey's ``SqliteHuey`` consumer step (``dequeue`` + ``execute``) on a
  no-op task. huey's own ``fsync`` option only knows FULL (True) and OFF (False), so
  for NORMAL its connection gets ``PRAGMA synchronous=NORMAL`` like the others.

Then a run with ``--locked-procs`` (16) processes counts every "database is locked"
error that reaches a caller; the target is none.

``--baseline DIR`` adds ``corral_base`` and ``corral_cc_base``: the same two loops with
the ``corral`` package of another checkout (``DIR/src``, e.g. a ``git worktree`` of an
older commit), loaded and run in spawned processes, interleaved with the rest, so a
change is measured side by side with the tree before it.

    python bench/sqlite_throughput.py            # the full run (a few minutes)
    python bench/sqlite_throughput.py --quick    # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

SYSTEMS = ("bare", "corral", "corral_cc", "huey")
BASE_SYSTEMS = ("corral_base", "corral_cc_base")  # with --baseline DIR
ROLE = "developer"
HUEY_QUEUE = "bench"
_PRIORITIES = ("high", "medium", "low")


# --- setup: one fresh file per run, loaded with ``jobs`` pending jobs ------------------
def _load_corral(path: Path, jobs: int, sync: str) -> None:
    import corral

    with corral.connect(f"sqlite:///{path}", synchronous=sync) as c:
        c.configure(max_agents=10_000)
        for start in range(0, jobs, 10_000):
            batch = range(start, min(jobs, start + 10_000))
            # Every third title matches the developer keywords, so claims use both
            # index heads (role match and all tasks).
            c.add_tasks(
                [
                    {
                        "title": f"implement part {i}" if i % 3 == 0 else f"job {i}",
                        "priority": _PRIORITIES[i % 3],
                    }
                    for i in batch
                ]
            )


_BARE_SCHEMA = """
CREATE TABLE jobs (
    id       INTEGER PRIMARY KEY,
    payload  TEXT NOT NULL,
    sort_key REAL NOT NULL,
    status   TEXT NOT NULL,
    holder   TEXT,
    epoch    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_pending ON jobs (sort_key, id) WHERE status = 'pending';
"""
_BARE_CLAIM = """
UPDATE jobs SET status = 'running', holder = ?, epoch = epoch + 1
WHERE id = (SELECT id FROM jobs WHERE status = 'pending' ORDER BY sort_key, id LIMIT 1)
RETURNING id, epoch
"""
_BARE_COMPLETE = "UPDATE jobs SET status = 'done' WHERE id = ? AND holder = ? AND epoch = ?"


def _load_bare(path: Path, jobs: int, sync: str, page_size: int | None = None) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if page_size is not None:  # before anything is written
        conn.execute(f"PRAGMA page_size={page_size}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.executescript(_BARE_SCHEMA)
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO jobs (payload, sort_key, status) VALUES (?, ?, 'pending')",
        ((f"job {i}", now + i * 1e-3 - 60 * (30 - 10 * (i % 3))) for i in range(jobs)),
    )
    conn.execute("COMMIT")
    conn.close()


class _Huey:
    """huey's SQLite backend at a given ``synchronous`` setting, with a no-op task."""

    def __init__(self, path: Path, sync: str) -> None:
        from huey import SqliteHuey
        from huey.storage import SqliteStorage

        class Storage(SqliteStorage):
            def _create_connection(self) -> sqlite3.Connection:
                conn = super()._create_connection()
                conn.execute(f"PRAGMA synchronous={sync}")
                return conn

        if sync == "FULL":  # huey's own option for full durability
            self.huey = SqliteHuey(HUEY_QUEUE, filename=str(path), fsync=True)
        elif sync == "OFF":
            self.huey = SqliteHuey(HUEY_QUEUE, filename=str(path), fsync=False)
        else:
            self.huey = SqliteHuey(HUEY_QUEUE, filename=str(path), storage_class=Storage)
        self.noop = self.huey.task(name="bench.noop")(_noop)


def _noop() -> None:
    return None


# huey names a task after its function's module, which is "__mp_main__" in a spawned
# child but "__main__" in the parent: fix the name so both agree.
_noop.__module__ = "corral_bench"


def _load_huey(path: Path, jobs: int, sync: str) -> None:
    # Loading is not measured: enqueue without syncing, in one transaction.
    h = _Huey(path, "OFF")
    storage = h.huey.storage
    datas = [h.huey.serialize_task(h.noop.s()) for _ in range(jobs)]
    with storage.db(commit=True) as curs:
        curs.executemany(
            "INSERT INTO task (queue, data, priority) VALUES (?, ?, ?)",
            ((storage.name, storage.to_blob(d), 0) for d in datas),
        )
    storage.close()


_LOADERS = {
    "corral": _load_corral,
    "corral_cc": _load_corral,
    "bare": _load_bare,
    "huey": _load_huey,
}


# --- workers ---------------------------------------------------------------------------
def _is_locked(exc: BaseException) -> bool:
    return "locked" in str(exc).lower() or "busy" in str(exc).lower()


def _use_base(system: str, base: str | None) -> str:
    """For a ``_base`` system (in a spawned process, before corral is imported): put
    the baseline checkout's package first; the system's plain name."""
    if not system.endswith("_base"):
        return system
    if base is None or "corral" in sys.modules:
        raise RuntimeError(f"{system} needs --baseline and a fresh (spawned) process")
    sys.path.insert(0, os.path.join(base, "src"))
    import corral

    if not corral.__file__ or not corral.__file__.startswith(os.path.join(base, "src")):
        raise RuntimeError(f"{system}: corral imported from {corral.__file__}, not {base}")
    return system.removesuffix("_base")


def _load_base(system: str, path: str, jobs: int, sync: str, base: str) -> None:
    """A ``_base`` system's board, loaded by the baseline's own code (its schema)."""
    _LOADERS[_use_base(system, base)](Path(path), jobs, sync)


def _worker(
    system: str, path: str, sync: str, wid: int, barrier: Any, out: Any, base: str | None = None
) -> None:  # pragma: no cover - runs in a child process
    report: dict[str, Any] = {"wid": wid, "jobs": 0, "locked": 0, "error": None, "steps_us": []}
    try:
        system = _use_base(system, base)
        step, close = _setup(system, Path(path), sync, wid, report)
        barrier.wait(timeout=120)
        report["t0"] = time.monotonic()
        cpu0 = time.process_time()
        clock = time.perf_counter
        steps = report["steps_us"]
        t = clock()
        while step():
            now = clock()
            steps.append((now - t) * 1e6)
            t = now
            report["jobs"] += 1
        report["t1"] = time.monotonic()
        # The worker process's CPU (its store's checkpoint thread included): steadier
        # than its rate on a busy machine.
        report["cpu_s"] = time.process_time() - cpu0
        close()
    except BaseException as exc:  # report, never hang the parent
        report["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        report.setdefault("t0", time.monotonic())
        report["t1"] = time.monotonic()
    out.put(report)


def _retrying(fn: Any, report: dict[str, Any]) -> Any:
    """Call ``fn``; a "database is locked" reaching us is counted, then retried."""
    while True:
        try:
            return fn()
        except Exception as exc:
            if not _is_locked(exc):
                raise
            report["locked"] += 1
            if report["locked"] > 1000:
                raise


def _setup(system: str, path: Path, sync: str, wid: int, report: dict[str, Any]) -> Any:
    if system == "corral":
        import corral

        c = corral.connect(f"sqlite:///{path}", synchronous=sync)
        node = f"bench-{wid}"
        c.register_node(node, ROLE)

        def step() -> bool:
            task = _retrying(lambda: c.claim_best_task(node, ROLE), report)
            if task is None:
                return False
            _retrying(lambda: c.complete_task(task.id, node, task.epoch), report)
            return True

        return step, c.close

    if system == "corral_cc":
        import corral

        c = corral.connect(f"sqlite:///{path}", synchronous=sync)
        node = f"bench-{wid}"
        c.register_node(node, ROLE)
        held: list[Any] = []

        def step() -> bool:
            if not held:  # the first claim; then each call finishes one and takes the next
                held.append(_retrying(lambda: c.claim_best_task(node, ROLE), report))
            task = held[-1]
            if task is None:
                return False
            _, held[-1] = _retrying(
                lambda: c.complete_and_claim(task.id, node, ROLE, task.epoch), report
            )
            return True

        return step, c.close

    if system == "bare":
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        conn.execute(f"PRAGMA synchronous={sync}")
        holder = f"bench-{wid}"

        def tx(sql: str, *params: Any) -> Any:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(sql, params).fetchone()
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return row

        def step() -> bool:
            row = _retrying(lambda: tx(_BARE_CLAIM, holder), report)
            if row is None:
                return False
            _retrying(lambda: tx(_BARE_COMPLETE, row[0], holder, row[1]), report)
            return True

        return step, conn.close

    if system == "huey":
        h = _Huey(path, sync).huey

        def step() -> bool:
            task = _retrying(h.dequeue, report)
            if task is None:
                return False
            _retrying(lambda: h.execute(task), report)
            return True

        return step, h.storage.close

    raise ValueError(system)


def _verify(system: str, path: Path, jobs: int) -> str | None:
    """None when every job was done exactly once, else what is wrong."""
    conn = sqlite3.connect(path)
    try:
        if system.startswith("corral"):
            q = "SELECT status, count(*) FROM tasks GROUP BY status"
        elif system == "bare":
            q = "SELECT status, count(*) FROM jobs GROUP BY status"
        else:
            q = "SELECT 'pending', count(*) FROM task"
        counts = dict(conn.execute(q).fetchall())
    finally:
        conn.close()
    left = counts.get("pending", 0) + counts.get("in_progress", 0) + counts.get("running", 0)
    if left:
        return f"{left} jobs not done: {counts}"
    if system != "huey" and counts.get("done", 0) != jobs:
        return f"expected {jobs} done: {counts}"
    return None


def run_once(
    system: str, procs: int, jobs: int, sync: str, workdir: Path, ctx: Any, base: str | None = None
) -> dict[str, Any]:
    """One measured run: a fresh file, ``jobs`` pending, ``procs`` workers. A ``_base``
    system loads and runs in spawned processes with the package in ``base``."""
    rundir = Path(tempfile.mkdtemp(prefix=f"{system}-{procs}-", dir=workdir))
    path = rundir / "bench.db"
    if system.endswith("_base"):
        ctx = mp.get_context("spawn")
        loader = ctx.Process(target=_load_base, args=(system, str(path), jobs, sync, base))
        loader.start()
        loader.join()
        if loader.exitcode != 0:
            raise RuntimeError(f"loading {system} with {base} failed")
    else:
        _LOADERS[system](path, jobs, sync)
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(system, str(path), sync, i, barrier, out, base))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    reports = []
    for _ in workers:
        try:
            reports.append(out.get(timeout=600))
        except Exception:  # a worker died without reporting
            break
    for w in workers:
        w.join(timeout=30)
        if w.is_alive():
            w.kill()
            w.join()
    errors = [r["error"] for r in reports if r["error"]]
    if len(reports) < procs:
        errors.append(f"{procs - len(reports)} workers died without reporting")
    done = sum(r["jobs"] for r in reports)
    wrong = None if errors else _verify(system.removesuffix("_base"), path, jobs)
    if wrong:
        errors.append(wrong)
    if done != jobs and not errors:
        errors.append(f"workers reported {done} jobs, expected {jobs}")
    steps = [x for r in reports for x in r["steps_us"]]
    seconds = (max(r["t1"] for r in reports) - min(r["t0"] for r in reports)) if reports else 0.0
    shutil.rmtree(rundir, ignore_errors=True)
    return {
        "system": system,
        "synchronous": sync,
        "procs": procs,
        "jobs": done,
        "seconds": seconds,
        "jobs_per_s": done / seconds if seconds > 0 else 0.0,
        "locked_errors": sum(r["locked"] for r in reports),
        # One job (claim + complete) as a worker saw it: waiting for the lock included.
        "job_us": {k: v for k, v in percentiles(steps).items() if k in ("p50", "p99", "max")},
        "jobs_over_10ms": sum(x > 10_000 for x in steps),
        "cpu_us_per_job": sum(r.get("cpu_s", 0.0) for r in reports) / done * 1e6 if done else 0.0,
        "errors": errors,
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if not r["errors"]] or runs
    rates = [r["jobs_per_s"] for r in ok]
    best = dict(min(ok, key=lambda r: abs(r["jobs_per_s"] - statistics.median(rates))))
    best["jobs_per_s"] = statistics.median(rates)
    best["repeats"] = [round(r["jobs_per_s"], 1) for r in runs]
    best["cpu_us_per_job"] = statistics.median(r.get("cpu_us_per_job", 0.0) for r in ok)
    best["locked_errors"] = sum(r["locked_errors"] for r in runs)
    best["errors"] = [e for r in runs for e in r["errors"]]
    return best


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20,000)")
    p.add_argument("--procs", default="1,2,4,8", help="process counts (default 1,2,4,8)")
    p.add_argument(
        "--locked-procs",
        type=int,
        default=16,
        help="processes for the 'database is locked' run (0: skip)",
    )
    p.add_argument(
        "--synchronous",
        default="NORMAL,FULL",
        help="synchronous settings to compare (default NORMAL,FULL)",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="which systems to run")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run corral_base and corral_cc_base with the corral package in DIR/src",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per cell; the median counts")
    p.add_argument(
        "--start-method",
        default=None,
        choices=("fork", "spawn", "forkserver"),
        help="how worker processes start (default fork; spawn with --baseline, whose"
        " systems always run in spawned processes: both trees start alike)",
    )
    p.add_argument("--dir", type=Path, default=None, help="where the database files go")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "sqlite_throughput.json")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    p.add_argument(
        "--render", type=Path, default=None, help="only print the tables of an earlier results file"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.procs, args.locked_procs = 200, "1,2", 4
        args.synchronous, args.repeat = "NORMAL", 1
    if args.start_method is None:
        args.start_method = "spawn" if args.baseline else "fork"
    args.procs = [int(x) for x in str(args.procs).split(",") if x]
    args.synchronous = [x.strip().upper() for x in args.synchronous.split(",") if x.strip()]
    args.systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    for s in args.systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown system {s!r} (choose from {', '.join(SYSTEMS)})")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        if not (args.baseline / "src" / "corral" / "__init__.py").is_file():
            p.error(f"--baseline: no corral package in {args.baseline / 'src'}")
        args.systems += [f"{s}_base" for s in ("corral", "corral_cc") if s in args.systems]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    ctx = mp.get_context(args.start_method)
    base = str(args.baseline) if args.baseline else None
    info = machine_info()
    workdir = Path(tempfile.mkdtemp(prefix="corral-bench-", dir=args.dir))
    print(
        f"# SQLite claim+complete throughput: {args.jobs} no-op jobs per run, "
        f"{info['usable_cores']} cores, SQLite {info['sqlite']}, files in {workdir}"
    )
    cells: list[dict[str, Any]] = []
    try:
        for sync in args.synchronous:
            for procs in args.procs:
                runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.systems}
                for _ in range(args.repeat):  # interleaved: every system sees the same load
                    for system in args.systems:
                        runs[system].append(
                            run_once(system, procs, args.jobs, sync, workdir, ctx, base)
                        )
                for system in args.systems:
                    cell = _median_run(runs[system])
                    cells.append(cell)
                    _progress(cell, f"runs {cell['repeats']}  locked {cell['locked_errors']}")
        locked: list[dict[str, Any]] = []
        if args.locked_procs:
            sync = args.synchronous[0]
            for system in args.systems:
                r = run_once(system, args.locked_procs, args.jobs, sync, workdir, ctx, base)
                locked.append(r)
                _progress(r, f"'database is locked' reaching a caller: {r['locked_errors']}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summary = _summary(cells, args)
    result = {
        "bench": "sqlite_throughput",
        "machine": {**info, "loadavg_end": list(os.getloadavg())},
        "params": {
            "jobs": args.jobs,
            "procs": args.procs,
            "locked_procs": args.locked_procs,
            "synchronous": args.synchronous,
            "systems": args.systems,
            "repeat": args.repeat,
            "start_method": args.start_method,
            "quick": args.quick,
            "baseline": base,
        },
        "runs": cells,
        "summary": summary,
        "locked": locked,
        "targets": _targets(summary, locked),
    }
    print()
    print(render(result))
    write_json(args.out, result)
    print(f"\nwrote {args.out}")
    failed = [c for c in (*cells, *locked) if c["errors"]]
    return 1 if failed else 0


def _progress(r: dict[str, Any], note: str) -> None:
    rate = f"{r['jobs_per_s']:>9,.0f} jobs/s"
    line = f"  {r['synchronous']:6} {r['procs']:2} procs {r['system']:6} {rate}"
    errors = f"  ERRORS {r['errors'][:1]}" if r["errors"] else ""
    p99 = r["job_us"].get("p99", 0.0) / 1000
    cpu = r.get("cpu_us_per_job", 0.0)
    print(f"{line}  job p99 {p99:.2f} ms  CPU {cpu:.0f} us/job  {note}{errors}", flush=True)


def _summary(cells: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for sync in args.synchronous:
        for procs in args.procs:
            rate = {
                c["system"]: c["jobs_per_s"]
                for c in cells
                if c["synchronous"] == sync and c["procs"] == procs
            }
            corral, bare, huey = rate.get("corral"), rate.get("bare"), rate.get("huey")
            cc = rate.get("corral_cc")
            cpu = {
                c["system"]: c.get("cpu_us_per_job")
                for c in cells
                if c["synchronous"] == sync and c["procs"] == procs
            }
            row_base = {
                f"{name}_base_vs_new": rate[name] / rate[f"{name}_base"]
                for name in ("corral", "corral_cc")
                if rate.get(name) and rate.get(f"{name}_base")
            }
            row_base.update(
                {
                    f"{name}_base": rate[f"{name}_base"]
                    for name in ("corral", "corral_cc")
                    if rate.get(f"{name}_base")
                }
            )
            # CPU per job (the workers' own), baseline / this tree: above 1 is less work.
            row_base.update(
                {
                    f"{name}_base_vs_new_cpu": cpu[f"{name}_base"] / cpu[name]
                    for name in ("corral", "corral_cc")
                    if cpu.get(name) and cpu.get(f"{name}_base")
                }
            )
            rows.append(
                {
                    **row_base,
                    "synchronous": sync,
                    "procs": procs,
                    "corral": corral,
                    "corral_cc": cc,
                    "bare": bare,
                    "huey": huey,
                    "corral_vs_bare": corral / bare if corral and bare else None,
                    "corral_vs_huey": corral / huey if corral and huey else None,
                    "corral_cc_vs_bare": cc / bare if cc and bare else None,
                    "corral_cc_vs_huey": cc / huey if cc and huey else None,
                }
            )
    return rows


def _targets(summary: list[dict[str, Any]], locked: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, judged on the worst cell, for each corral loop."""
    out: dict[str, Any] = {"corral_vs_bare_target": 0.5}
    for name in ("corral", "corral_cc"):
        vs_bare = [r[f"{name}_vs_bare"] for r in summary if r.get(f"{name}_vs_bare")]
        vs_huey = [r[f"{name}_vs_huey"] for r in summary if r.get(f"{name}_vs_huey")]
        out[f"{name}_vs_bare_min"] = min(vs_bare) if vs_bare else None
        out[f"{name}_vs_bare_met"] = bool(vs_bare) and min(vs_bare) >= 0.5
        out[f"{name}_vs_huey_min"] = min(vs_huey) if vs_huey else None
        out[f"{name}_vs_huey_met"] = bool(vs_huey) and min(vs_huey) > 1.0
        runs = [r for r in locked if r["system"] == name]
        out[f"{name}_locked_errors"] = runs[0]["locked_errors"] if runs else None
        out[f"{name}_locked_met"] = (  # None: the run was skipped (--locked-procs 0)
            (runs[0]["locked_errors"] == 0 and not runs[0]["errors"]) if runs else None
        )
    return out


def render(result: dict[str, Any]) -> str:
    """The Markdown tables for docs/performance.md."""
    cc = any(r.get("corral_cc") for r in result["summary"])
    rows = [
        [
            r["synchronous"],
            r["procs"],
            r["bare"],
            r["huey"],
            r["corral"],
            _ratio(r["corral_vs_bare"]),
            _ratio(r["corral_vs_huey"]),
            *(
                [r["corral_cc"], _ratio(r["corral_cc_vs_bare"]), _ratio(r["corral_cc_vs_huey"])]
                if cc
                else []
            ),
        ]
        for r in result["summary"]
    ]
    out = table(
        [
            "synchronous",
            "processes",
            "bare loop jobs/s",
            "huey jobs/s",
            "corral jobs/s",
            "corral / bare",
            "corral / huey",
            *(["corral c&c jobs/s", "c&c / bare", "c&c / huey"] if cc else []),
        ],
        rows,
    )
    if result["params"].get("baseline"):
        out += f"\n\nSide by side with the baseline ({result['params']['baseline']}):\n\n"
        out += table(
            [
                "synchronous",
                "processes",
                "loop",
                "baseline jobs/s",
                "this tree jobs/s",
                "ratio",
                "CPU per job ratio",
            ],
            [
                [
                    r["synchronous"],
                    r["procs"],
                    name,
                    r[f"{name}_base"],
                    r[name],
                    _ratio(r[f"{name}_base_vs_new"]),
                    _ratio(r.get(f"{name}_base_vs_new_cpu")),
                ]
                for r in result["summary"]
                for name in ("corral", "corral_cc")
                if r.get(f"{name}_base_vs_new")
            ],
        )
    if result["locked"]:
        out += "\n\n" + table(
            [
                "system",
                "processes",
                "synchronous",
                "jobs/s",
                "job p99 ms",
                "jobs > 10 ms",
                "'database is locked' at caller",
                "other errors",
            ],
            [
                [
                    r["system"],
                    r["procs"],
                    r["synchronous"],
                    r["jobs_per_s"],
                    r["job_us"].get("p99", 0.0) / 1000,
                    r.get("jobs_over_10ms"),
                    r["locked_errors"],
                    len(r["errors"]),
                ]
                for r in result["locked"]
            ],
        )
    t = result["targets"]
    out += "\n"
    for name in ("corral", "corral_cc"):
        if t.get(f"{name}_vs_bare_min") is None:
            continue
        out += (
            f"\ntargets for {name}: >= 0.5x bare: {_ratio(t[f'{name}_vs_bare_min'])} (worst cell) "
            f"{_met(t[f'{name}_vs_bare_met'])}; ahead of huey: {_ratio(t[f'{name}_vs_huey_min'])} "
            f"(worst cell) {_met(t[f'{name}_vs_huey_met'])}; no 'database is locked' with "
            f"{result['params']['locked_procs']} processes: {_met(t[f'{name}_locked_met'])}"
        )
    return out


def _met(ok: bool | None) -> str:
    return "not run" if ok is None else "met" if ok else "MISSED"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
