"""What a fleet's size costs corral: registration, the monitor's wake, a dead node's
recovery, heartbeats through ``corral serve`` with and without its monitor, a paced
10,000-node fleet, and ``--workers 2`` against 1, side by side in one run, on SQLite
and PostgreSQL.

Fleets are loaded with one INSERT (live nodes that registered now), then measured
through corral's own calls: registration and the monitor embedded, the rest through
a real ``corral serve`` process driven by a load client of minimal cost (asyncio,
hand-written keep-alive HTTP/1.1, one process; its CPU is reported).

The ``--workers`` comparison runs, in the same rounds on the same fleet and
connections, its floor (bench/floor_app.py): a minimal app served the same way, 1
process against 2, doing the one write a heartbeat needs on that backend
(``floor_*``) or none (``bare_*``). A target the floor misses here is out of reach
of corral's design on this machine, not only of its code.

    python bench/fleet_size.py                  # the full run (~14 min)
    python bench/fleet_size.py --quick          # a smoke run in seconds
    python bench/fleet_size.py --only workers   # one phase (comma list) again
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json
from corral.monitor import Monitor

TOKEN = "fleet-bench-token"
PG_ADMIN = os.environ.get("CORRAL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
QUIET = 200.0  # a loaded node's declared interval: its window is the 600 s stale cap
PERIOD = 5.0  # the paced fleet's heartbeat interval


# --- stores and fleets ------------------------------------------------------------------
class Db:
    """A fresh database of one backend: a SQLite file or a PostgreSQL database."""

    def __init__(self, backend: str, tmp: Path, name: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.url = f"sqlite:///{tmp / (name + '.db')}"
            self.pg_name = None
        else:
            import psycopg

            self.pg_name = f"corral_fleet_{name}_{uuid.uuid4().hex[:6]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.pg_name}"')
            base = PG_ADMIN.rsplit("/", 1)[0]
            self.url = f"{base}/{self.pg_name}"
        with corral.connect(self.url) as c:
            c.configure(max_agents=1_000_000, idle_timeout_seconds=10_000_000.0)

    def load(self, n: int, interval: float, prefix: str = "f") -> None:
        """Add ``n`` live idle nodes that registered now, with ``interval`` declared."""
        window = min(3 * interval, 600.0)
        now = time.time()
        sql = (
            "INSERT INTO nodes (id, role, status, idle_since, last_activity,"
            " heartbeat_interval, live_window, dead_at, registered_at)"
            f" SELECT '{prefix}' || g, 'developer', 'idle', {now}, {now}, {interval},"
            f" {window}, {now + window}, {now} FROM s"
        )
        if self.backend == "sqlite":
            import sqlite3

            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < {n - 1})"
                + sql
            )
            conn.execute("COMMIT")
            conn.close()
        else:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"WITH s(g) AS (SELECT generate_series(0, {n - 1}))" + sql)
                conn.execute("ANALYZE nodes")

    def backend_cpu(self) -> dict[int, float]:
        """PostgreSQL: CPU seconds of each server backend connected to this database
        now (the server runs on this machine); SQLite: none."""
        if self.pg_name is None:
            return {}
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            sql = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            pids = [r[0] for r in conn.execute(sql, (self.pg_name,))]
        return {pid: cpu for pid in pids if (cpu := _cpu(pid)) is not None}

    def drop(self) -> None:
        if self.pg_name is not None:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')


def _us(samples: list[float]) -> dict[str, float]:
    p = percentiles(samples)
    return {k: (v * 1e6 if k != "n" else v) for k, v in p.items()}


# --- registration and the monitor's wake (embedded) -----------------------------------
def registration_and_wake(db: Db, n: int, samples: int) -> dict[str, Any]:
    db.load(n, QUIET)
    reg: list[float] = []
    with corral.connect(db.url) as c:
        for k in range(samples):
            t0 = time.perf_counter()
            c.register_node(f"r{k}", "developer", heartbeat_interval=QUIET)
            reg.append(time.perf_counter() - t0)
        store = c.store
        reads: list[float] = []
        for _ in range(samples * 2):
            t0 = time.perf_counter()
            store.deadlines()
            reads.append(time.perf_counter() - t0)
        mon = Monitor(c)
        mon.tick()  # the first pass assesses and prunes; then nothing is due for 25 s
        ticks: list[float] = []
        for _ in range(samples):
            t0 = time.perf_counter()
            result = mon.tick()
            ticks.append(time.perf_counter() - t0)
            assert not result.events and result.assessment is None
    return {
        "fleet": n,
        "register_us": _us(reg),
        "deadlines_us": _us(reads),
        "idle_tick_us": _us(ticks),
    }


# --- a silent node's lease recovered (embedded monitor thread, own connection) ---------
# The PostgreSQL observer: a process of its own (no GIL shared with the monitor thread
# it times), waiting on the channel the reaping commit rings, reading the status when
# it rings; it answers each task id with the time it first saw the task not held.
_PG_OBSERVER = """
import sys, time, psycopg
pg = psycopg.connect(sys.argv[1], autocommit=True, prepare_threshold=0)
pg.execute("LISTEN corral_ready")
print("ready", flush=True)
for line in sys.stdin:
    task_id, end = int(line), time.time() + 10
    while pg.execute("SELECT status FROM tasks WHERE id = %s", (task_id,)).fetchone()[0] == (
        "in_progress"
    ):
        if time.time() > end:
            print("timeout", flush=True)
            break
        for _ in pg.notifies(timeout=0.05, stop_after=1):
            pass
    else:
        print(repr(time.time()), flush=True)
"""


def _status_reader(db: Db) -> tuple[Any, Any]:
    """A lean observer of a task's status on a connection of its own. Returns
    (wait_recovered(task_id) -> the time it first saw the task no longer held, close).

    SQLite: one autocommit statement every 0.5 ms. PostgreSQL: a process of its own
    that waits on ``LISTEN corral_ready`` (the channel a commit that makes a task
    pending rings, as waiting workers do) and reads the status when it rings, so it
    takes no CPU and no GIL from the monitor it times (polling there, with the
    client's ``get_task`` or one statement every 0.5 ms, made the reaping 2-3 ms
    slower on this 2-core machine; a LISTEN in this process saw some commits 10-15 ms
    late, waiting for the interpreter)."""
    if db.backend == "sqlite":
        import sqlite3

        sql = "SELECT status FROM tasks WHERE id = ?"
        conn: Any = sqlite3.connect(db.url.removeprefix("sqlite:///"), isolation_level=None)

        def wait(task_id: int) -> float:
            end = time.time() + 10
            while conn.execute(sql, (task_id,)).fetchone()[0] == "in_progress":
                assert time.time() < end, "the lease was not recovered"
                time.sleep(0.0005)
            return time.time()

        return wait, conn.close
    proc = subprocess.Popen(
        [sys.executable, "-c", _PG_OBSERVER, db.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"

    def wait_pg(task_id: int) -> float:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{task_id}\n")
        proc.stdin.flush()
        answer = proc.stdout.readline().strip()
        assert answer not in ("", "timeout"), "the lease was not recovered"
        return float(answer)

    def close() -> None:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=5)

    return wait_pg, close


def recovery(db: Db, n: int, rounds: int) -> dict[str, Any]:
    db.load(n, QUIET)
    wait_recovered, close_reader = _status_reader(db)
    mon_client = corral.connect(db.url)
    mon = Monitor(mon_client)
    thread = mon.start_thread()
    lags, wakes = [], []
    try:
        with corral.connect(db.url) as c:
            for r in range(rounds):
                node = f"silent{r}"
                # Dead 1.5 s after its claim: longer than the monitor's longest sleep
                # (0.5 s), so its deadline is read before it falls due, as a real
                # node's is (the monitor learns of other processes' writes by reading).
                c.register_node(node, "developer", heartbeat_interval=0.5)
                # Enough attempts that every recovery returns a task to pending (the
                # claims take the oldest pending task, a recovered one after the first
                # round: with the default 3 attempts, a third recovery fails the task,
                # which rings no waiting worker and is no recovery).
                c.add_task(f"Implement piece {r}", max_attempts=1_000)
                task = c.claim_best_task(node, "developer")
                assert task is not None
                dead_at = c.get_node(node).dead_at
                assert dead_at is not None
                lags.append(wait_recovered(task.id) - dead_at)
                event = next(
                    e
                    for e in reversed(c.events(0, 100_000))
                    if e.kind == "lease_recovered" and e.node_id == node
                )
                wakes.append(event.ts - dead_at)
    finally:
        mon.stop()
        thread.join(timeout=5)
        mon_client.close()
        close_reader()
    return {
        "fleet": n,
        "committed_after_threshold_ms": percentiles([x * 1e3 for x in lags]),
        "woke_after_threshold_ms": percentiles([x * 1e3 for x in wakes]),
    }


# --- corral serve and the load client ---------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a process so far; None if it is gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return None


class Serve:
    """A ``corral serve`` process (and its workers), or with ``floor`` ("none",
    "sqlite", "postgres") the minimal app of bench/floor_app.py served the same way."""

    def __init__(
        self, url: str, workers: int = 1, monitor: bool = True, floor: str | None = None
    ) -> None:
        self.port = free_port()
        if floor is None:
            argv = [
                sys.executable,
                "-m",
                "corral",
                "serve",
                "--port",
                str(self.port),
                "--workers",
                str(workers),
                "--log-level",
                "warning",
            ]
            if not monitor:
                argv.append("--no-monitor")
        else:
            argv = [
                sys.executable,
                str(Path(__file__).resolve().parent / "floor_app.py"),
                "--port",
                str(self.port),
                "--workers",
                str(workers),
                "--store",
                floor,
                "--url",
                url,
            ]
        env = {**os.environ, "CORRAL_URL": url, "CORRAL_TOKEN": TOKEN}
        self.proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            if time.monotonic() > end or self.proc.poll() is not None:
                raise RuntimeError(f"{argv[1:4]} did not start")
            time.sleep(0.05)
        if workers > 1:  # every worker up (each answers /healthz once its app runs)
            time.sleep(1.0)

    def pids(self) -> list[int]:
        found = [self.proc.pid]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[1]) == self.proc.pid:
                        found.append(int(entry))
        return found

    def cpu_seconds(self) -> float:
        return sum(c for pid in self.pids() if (c := _cpu(pid)) is not None)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Conn:
    """One keep-alive HTTP/1.1 connection, just enough of the protocol."""

    async def open(self, port: int) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", port)
        self.head = (
            f"Host: b\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        )

    async def beat(self, node: str) -> int:
        line = f"POST /v1/nodes/{node}/heartbeat HTTP/1.1\r\n"
        self.w.write(f"{line}{self.head}Content-Length: 2\r\n\r\n{{}}".encode())
        head = await self.r.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.r.readexactly(length)
        return int(head[9:12])


def _run_client(coro: Any) -> Any:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(coro)


async def _saturate(port: int, fleet: int, conns: int, seconds: float) -> dict[str, Any]:
    """``conns`` connections beating the fleet's nodes back to back."""
    pool = [Conn() for _ in range(conns)]
    await asyncio.gather(*(c.open(port) for c in pool))
    lat: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def run(i: int, c: Conn) -> None:
        nonlocal errors
        k = i
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            if await c.beat(f"f{k % fleet}") != 200:
                errors += 1
            lat.append(time.perf_counter() - t0)
            k += conns

    t0 = time.perf_counter()
    await asyncio.gather(*(run(i, c) for i, c in enumerate(pool)))
    elapsed = time.perf_counter() - t0
    for c in pool:
        c.w.close()
    p = percentiles(lat)
    return {
        "beats_per_s": len(lat) / elapsed,
        "p50_ms": p["p50"] * 1e3,
        "p99_ms": p["p99"] * 1e3,
        "n": len(lat),
        "errors": errors,
    }


async def _paced(port: int, fleet: int, conns: int, seconds: float) -> dict[str, Any]:
    """Every node beats once per ``PERIOD``, node j at phase j/fleet of it; node j on
    connection j % conns. A send waits for the connection's previous answer: its lag
    is how late it goes out against its schedule."""
    pool = [Conn() for _ in range(conns)]
    await asyncio.gather(*(c.open(port) for c in pool))
    lat: list[float] = []
    lags: list[float] = []
    errors = 0
    start = time.perf_counter() + 0.2

    async def run(i: int, c: Conn) -> None:
        nonlocal errors
        mine = range(i, fleet, conns)
        cycle = 0
        while True:
            for j in mine:
                due = start + cycle * PERIOD + j / fleet * PERIOD
                if due - start >= seconds:
                    return
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                t0 = time.perf_counter()
                lags.append(t0 - due)
                if await c.beat(f"f{j}") != 200:
                    errors += 1
                lat.append(time.perf_counter() - t0)
            cycle += 1

    await asyncio.gather(*(run(i, c) for i, c in enumerate(pool)))
    elapsed = time.perf_counter() - start
    for c in pool:
        c.w.close()
    p, q = percentiles(lat), percentiles(lags)
    return {
        "beats_per_s_offered": fleet / PERIOD,
        "beats_per_s": len(lat) / elapsed,
        "p50_ms": p["p50"] * 1e3,
        "p99_ms": p["p99"] * 1e3,
        "max_ms": p["max"] * 1e3,
        "send_lag_p99_ms": q["p99"] * 1e3,
        "send_lag_max_ms": q["max"] * 1e3,
        "n": len(lat),
        "errors": errors,
    }


def through_serve(srv: Serve, coro: Any, db: Db | None = None) -> dict[str, Any]:
    pg0 = db.backend_cpu() if db is not None else {}
    cpu0, client0, t0 = srv.cpu_seconds(), time.process_time(), time.perf_counter()
    out: dict[str, Any] = _run_client(coro)
    wall = time.perf_counter() - t0
    cpu = srv.cpu_seconds() - cpu0
    if db is not None and db.pg_name is not None:
        # The PostgreSQL backends serving this database (a backend that connected
        # during the run counts from its start).
        pg = sum(c - pg0.get(pid, 0.0) for pid, c in db.backend_cpu().items())
        out["db_cores"] = pg / wall
        out["db_us_per_beat"] = pg / max(1, out["n"]) * 1e6
    out["loadavg_1m"] = os.getloadavg()[0]
    out["server_cores"] = cpu / wall
    # CPU per beat: what serving costs, whatever share of the cores the machine's
    # other work left the server (the rate depends on that share; this does not).
    out["server_us_per_beat"] = cpu / max(1, out["n"]) * 1e6
    out["client_cores"] = (time.process_time() - client0) / wall
    out["client_us_per_beat"] = (time.process_time() - client0) / max(1, out["n"]) * 1e6
    return out


Config = tuple[str, int, bool, "str | None"]  # name, workers, monitor, floor (Serve's)


def serve_rounds(
    db: Db, fleet: int, configs: list[Config], rounds: int, seconds: float, conns: int
) -> dict[str, list[dict[str, Any]]]:
    """Saturating heartbeat runs, the configurations interleaved round by round, each
    round starting one configuration further on (none always runs first or last)."""
    out: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in configs}
    for r in range(rounds):
        for name, workers, monitor, floor in (
            configs[r % len(configs) :] + configs[: r % len(configs)]
        ):
            srv = Serve(db.url, workers, monitor, floor)
            try:
                out[name].append(through_serve(srv, _saturate(srv.port, fleet, conns, seconds), db))
            finally:
                srv.stop()
    return out


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


# --- the run ------------------------------------------------------------------------------
PHASES = ("wake", "recovery", "monitor", "workers", "paced")


def workers_configs(backend: str) -> list[Config]:
    """corral with 1 and 2 processes, and its floor (bench/floor_app.py) the same way:
    the minimal app doing the one write a heartbeat needs on this backend
    (``floor_*``), and doing none (``bare_*``)."""
    return [
        ("workers_1", 1, True, None),
        ("workers_2", 2, True, None),
        ("floor_1", 1, False, backend),
        ("floor_2", 2, False, backend),
        ("bare_1", 1, False, "none"),
        ("bare_2", 2, False, "none"),
    ]


def run_backend(backend: str, tmp: Path, a: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"backend": backend}
    dbs: list[Db] = []

    def new(name: str) -> Db:
        dbs.append(Db(backend, tmp, f"{backend}_{name}"))
        return dbs[-1]

    try:
        if "wake" in a.only:
            print(f"[{backend}] registration and the monitor's wake", flush=True)
            res["wake"] = [registration_and_wake(new(f"w{n}"), n, a.samples) for n in a.sizes]
        if "recovery" in a.only:
            print(f"[{backend}] a silent node's lease recovered", flush=True)
            res["recovery"] = [recovery(new(f"r{n}"), n, a.recoveries) for n in a.recovery_sizes]
        if "monitor" in a.only or "workers" in a.only:
            db = new("serve")
            db.load(a.fleet, QUIET)
        if "monitor" in a.only:
            print(
                f"[{backend}] heartbeats through corral serve, monitor vs --no-monitor", flush=True
            )
            res["monitor"] = serve_rounds(
                db,
                a.fleet,
                [("monitor", 1, True, None), ("no_monitor", 1, False, None)],
                a.rounds,
                a.seconds,
                a.conns,
            )
        if "workers" in a.only:
            print(f"[{backend}] --workers 2 vs 1 and the floor's (saturation)", flush=True)
            res["workers"] = serve_rounds(
                db, a.fleet, workers_configs(backend), a.rounds, a.seconds, a.conns * 2
            )
        if "paced" in a.only:
            print(f"[{backend}] {a.fleet:,} nodes beating every {PERIOD:.0f} s", flush=True)
            res["paced"] = {}
            for workers in (1, 2):
                # A fleet of its own per run, loaded just before (a node is dead 15 s
                # after its last beat, and the monitor runs).
                paced = new(f"paced{workers}")
                paced.load(a.fleet, PERIOD)
                srv = Serve(paced.url, workers, True)
                try:
                    res["paced"][f"workers_{workers}"] = through_serve(
                        srv, _paced(srv.port, a.fleet, a.paced_conns, a.paced_seconds), paced
                    )
                finally:
                    srv.stop()
    finally:
        for d in dbs:
            d.drop()
    return res


def _ratio(runs: dict[str, list[dict[str, Any]]], top: str, bottom: str, key: str) -> float:
    return _median(runs[top], key) / _median(runs[bottom], key)


def cpu_ceiling(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> float:
    """The most 2 processes can give over 1 on this machine's cores if every beat cost
    the CPU it cost here (server, PostgreSQL backends, load client: medians) and the
    cores were this run's alone: 1 process is capped by its one core or by the cores
    it shares with the client and the backends, 2 processes by the cores. A bound on
    the measured ratio when 1 process is CPU-bound; one that waits on something else
    (PostgreSQL's commits on a few connections) can gain more from a second."""
    cores = len(os.sched_getaffinity(0))

    def rate(runs: list[dict[str, Any]], procs: int) -> float:
        server = _median(runs, "server_us_per_beat")
        total = server + _median(runs, "client_us_per_beat")
        total += _median(runs, "db_us_per_beat") if "db_us_per_beat" in runs[0] else 0.0
        return min(procs / server, cores / total)

    return rate(two, 2) / rate(one, 1)


def summarize(res: dict[str, Any], a: argparse.Namespace) -> dict[str, Any]:
    """The ratios and targets of the phases that ran."""
    s: dict[str, Any] = {}
    met: dict[str, bool] = {}
    if "wake" in res:
        w = {r["fleet"]: r for r in res["wake"]}
        lo, hi = min(a.sizes), max(a.sizes)
        s["register_p99_ratio"] = w[hi]["register_us"]["p99"] / w[lo]["register_us"]["p99"]
        s["wake_read_p50_ratio"] = w[hi]["deadlines_us"]["p50"] / w[lo]["deadlines_us"]["p50"]
        s["wake_read_p99_ratio"] = w[hi]["deadlines_us"]["p99"] / w[lo]["deadlines_us"]["p99"]
        met["register_p99_within_2x"] = s["register_p99_ratio"] <= 2
        met["wake_read_within_2x"] = s["wake_read_p99_ratio"] <= 2
    if "recovery" in res:
        rec = {r["fleet"]: r for r in res["recovery"]}
        s["recovery_max_ms"] = {n: r["committed_after_threshold_ms"]["max"] for n, r in rec.items()}
        met["recovery_within_threshold_plus_5ms"] = all(
            v <= 5 for v in s["recovery_max_ms"].values()
        )
    if "monitor" in res:
        mon = res["monitor"]
        s["monitor_over_no_monitor"] = _ratio(mon, "monitor", "no_monitor", "beats_per_s")
        s["monitor_cpu_per_beat_ratio"] = _ratio(mon, "monitor", "no_monitor", "server_us_per_beat")
        met["monitor_at_least_0.9x"] = s["monitor_over_no_monitor"] >= 0.9
    if "workers" in res:
        wk = res["workers"]
        for kind in ("workers", "floor", "bare"):
            s[f"{kind}2_over_1"] = _ratio(wk, f"{kind}_2", f"{kind}_1", "beats_per_s")
            s[f"{kind}2_cpu_per_beat_ratio"] = _ratio(
                wk, f"{kind}_2", f"{kind}_1", "server_us_per_beat"
            )
            s[f"{kind}2_cpu_ceiling"] = cpu_ceiling(wk[f"{kind}_1"], wk[f"{kind}_2"])
            # Each round's own pair (run minutes apart at most): steadier than the
            # ratio of the medians when other work on the machine comes and goes.
            s[f"{kind}2_over_1_rounds"] = [
                y["beats_per_s"] / x["beats_per_s"]
                for x, y in zip(wk[f"{kind}_1"], wk[f"{kind}_2"], strict=True)
            ]
            s[f"{kind}2_over_1_rounds_median"] = statistics.median(s[f"{kind}2_over_1_rounds"])
        met["workers2_at_least_1.5x"] = s["workers2_over_1"] >= 1.5
        # Not a target of corral's: whether its floor can meet the one above here.
        s["floor2_at_least_1.5x"] = s["floor2_over_1"] >= 1.5
        s["bare2_at_least_1.5x"] = s["bare2_over_1"] >= 1.5
    if "paced" in res:
        p1 = res["paced"]["workers_1"]
        s["paced_met"] = p1["p99_ms"] <= 50 and p1["send_lag_max_ms"] <= 100 and p1["errors"] == 0
        met["paced_p99_50ms_lag_100ms"] = s["paced_met"]
    s["met"] = met
    return s


def render(res: dict[str, Any], s: dict[str, Any]) -> str:
    b = res["backend"]
    out = [f"### {b}"]
    if "wake" in res:
        out += [
            "",
            table(
                [
                    "fleet",
                    "register p50 µs",
                    "register p99 µs",
                    "wake read p50 µs",
                    "wake read p99 µs",
                    "idle tick p50 µs",
                    "idle tick p99 µs",
                ],
                [
                    [
                        r["fleet"],
                        r["register_us"]["p50"],
                        r["register_us"]["p99"],
                        r["deadlines_us"]["p50"],
                        r["deadlines_us"]["p99"],
                        r["idle_tick_us"]["p50"],
                        r["idle_tick_us"]["p99"],
                    ]
                    for r in res["wake"]
                ],
            ),
        ]
    if "recovery" in res:
        out += [
            "",
            table(
                [
                    "fleet",
                    "recovered after threshold p50 ms",
                    "max ms",
                    "monitor woke after, max ms",
                ],
                [
                    [
                        r["fleet"],
                        r["committed_after_threshold_ms"]["p50"],
                        r["committed_after_threshold_ms"]["max"],
                        r["woke_after_threshold_ms"]["max"],
                    ]
                    for r in res["recovery"]
                ],
            ),
        ]
    rows = []
    for group in ("monitor", "workers"):
        for name, runs in res.get(group, {}).items():
            db = (
                [_median(runs, "db_cores"), _median(runs, "db_us_per_beat")]
                if ("db_cores" in runs[0])
                else [None, None]
            )
            rows.append(
                [
                    name,
                    _median(runs, "beats_per_s"),
                    _median(runs, "p99_ms"),
                    _median(runs, "server_cores"),
                    _median(runs, "server_us_per_beat"),
                    *db,
                    _median(runs, "client_cores"),
                    _median(runs, "client_us_per_beat"),
                    sum(r["errors"] for r in runs),
                    _median(runs, "loadavg_1m"),
                ]
            )
    if rows:
        out += [
            "",
            table(
                [
                    "serve (medians)",
                    "beats/s",
                    "p99 ms",
                    "server cores",
                    "server µs/beat",
                    "PG backend cores",
                    "PG backend µs/beat",
                    "client cores",
                    "client µs/beat",
                    "errors",
                    "load 1m",
                ],
                rows,
            ),
        ]
    if "workers" in res:
        # Round by round: the ratio 2/1 of each round's own pair, next to the medians'.
        per_round = []
        for kind in ("workers", "floor", "bare"):
            per_round.append(
                [
                    kind,
                    " ".join(f"{x:.2f}" for x in s[f"{kind}2_over_1_rounds"]),
                    s[f"{kind}2_over_1_rounds_median"],
                    s[f"{kind}2_over_1"],
                    s[f"{kind}2_cpu_per_beat_ratio"],
                    s[f"{kind}2_cpu_ceiling"],
                ]
            )
        cores = len(os.sched_getaffinity(0))
        out += [
            "",
            table(
                [
                    "2 processes / 1",
                    "beats/s, each round",
                    "their median",
                    "beats/s, medians",
                    "server CPU per beat, medians",
                    f"ceiling if CPU-bound ({cores} cores, CPU per beat as here)",
                ],
                per_round,
            ),
        ]
    if "paced" in res:
        out += [
            "",
            table(
                [
                    "paced fleet",
                    "offered/s",
                    "done/s",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "send lag p99 ms",
                    "send lag max ms",
                    "server cores",
                    "client cores",
                    "errors",
                ],
                [
                    [
                        name,
                        r["beats_per_s_offered"],
                        r["beats_per_s"],
                        r["p50_ms"],
                        r["p99_ms"],
                        r["max_ms"],
                        r["send_lag_p99_ms"],
                        r["send_lag_max_ms"],
                        r["server_cores"],
                        r["client_cores"],
                        r["errors"],
                    ]
                    for name, r in res["paced"].items()
                ],
            ),
        ]
    ratios = [
        ("register p99, largest / smallest fleet", "register_p99_ratio"),
        ("wake read p99, largest / smallest", "wake_read_p99_ratio"),
        ("serve beats/s, monitor / --no-monitor", "monitor_over_no_monitor"),
        ("serve beats/s, --workers 2 / 1", "workers2_over_1"),
        ("floor beats/s (one write), 2 processes / 1", "floor2_over_1"),
        ("bare floor beats/s (no write), 2 processes / 1", "bare2_over_1"),
        ("server CPU per beat, monitor / --no-monitor", "monitor_cpu_per_beat_ratio"),
        ("server CPU per beat, --workers 2 / 1", "workers2_cpu_per_beat_ratio"),
    ]
    out += ["", table(["ratio", "value"], [[t, s[k]] for t, k in ratios if k in s])]
    out += [
        "",
        "targets met: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in s["met"].items()),
    ]
    if "floor2_at_least_1.5x" in s:
        out.append(
            "floor at 1.5x with 2 processes: "
            f"one write {'yes' if s['floor2_at_least_1.5x'] else 'NO'}, "
            f"no write {'yes' if s['bare2_at_least_1.5x'] else 'NO'}"
        )
    out.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--sizes", default="1000,50000", help="fleets for registration and wake")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--recovery-sizes", default="100,10000")
    ap.add_argument("--recoveries", type=int, default=10)
    ap.add_argument("--fleet", type=int, default=10_000, help="the fleet beating through serve")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--paced-conns", type=int, default=64)
    ap.add_argument("--paced-seconds", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "fleet_size.json")
    ap.add_argument("--quick", action="store_true", help="a smoke run in seconds")
    ap.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"the phases to run, a comma list of {','.join(PHASES)}",
    )
    a = ap.parse_args()
    a.only = [x for x in a.only.split(",") if x]
    if bad := set(a.only) - set(PHASES):
        ap.error(f"--only: unknown {', '.join(sorted(bad))}")
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.recovery_sizes = [int(x) for x in a.recovery_sizes.split(",")]
    backends = [b for b in a.backends.split(",") if b]
    if bad := set(backends) - {"sqlite", "postgres"}:
        ap.error(f"--backends: unknown {', '.join(sorted(bad))}")
    if a.quick:
        a.sizes, a.samples, a.recovery_sizes, a.recoveries = [100, 1000], 50, [10, 100], 2
        a.fleet, a.seconds, a.rounds, a.conns = 200, 0.5, 1, 4
        a.paced_conns, a.paced_seconds = 4, 1.0
    tmp = Path(tempfile.mkdtemp(prefix="corral-fleet-"))
    results, summaries = [], {}
    params = {k: v for k, v in vars(a).items() if k != "out"}
    params["out"] = str(a.out)
    for backend in backends:
        for attempt in (1, 2):
            try:
                res = run_backend(backend, tmp, a)
                break
            except corral.StoreUnavailableError as exc:
                # A shared server restarted under the run (other work on the machine):
                # that backend's part runs again, once.
                if attempt == 2:
                    raise
                print(f"[{backend}] the store went away ({exc}); running it again", flush=True)
        s = summarize(res, a)
        results.append(res)
        summaries[backend] = s
        print(render(res, s), flush=True)
        write_json(
            a.out,
            {
                "bench": "fleet_size",
                "machine": machine_info(),
                "params": params,
                "results": results,
                "summary": summaries,
            },
        )


if __name__ == "__main__":
    threading.current_thread().name = "fleet-bench"
    main()
