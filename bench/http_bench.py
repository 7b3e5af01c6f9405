"""HTTP server throughput and latency: corral serve vs a floor vs the embedded client.

- heartbeats/s and claim+complete/s over HTTP with 32 concurrent keep-alive
  connections (an asyncio load client speaking raw HTTP/1.1, so the client is not
  the bottleneck), p50/p99 per request;
- the floor: a minimal Starlette app whose one route updates one SQLite row, under
  the same uvicorn settings (uvloop + httptools, no access log), same load client;
- corral twice: as shipped (short operations on the event loop under the store's
  ``nowait``) and with ``inline=False`` (one thread hop per operation), to show
  what the hop costs; and once more with the service call stubbed (``heartbeat``
  answers a fixed node without the store: auth, routing, validation, the handler,
  the answer and the metrics as usual), to split the server's cost per request
  into its request path and the store call;
- one caller, sequential: the embedded client (``Cluster`` over SQLite), the remote
  client (``HttpClient``) against corral, and the same client against the floor
  (what one HTTP round trip costs at best here).
- the embedded client under the same load: 32 callers, each its own OS process with
  its own ``corral.connect`` (default durability) and its own node, released together
  by a barrier, looping for the same seconds over the same operations (heartbeat with
  the same payload; claim + complete as one op) on a fresh database seeded like the
  HTTP run's; per-op latency, ops/s and the callers' CPU per op. HTTP's p50/p99 over
  these are the like-for-like reading of "within 3x of the embedded client's
  latency". ``--embedded32 process,thread`` adds the same 32 callers as threads of
  one process (each its own connect), to see whether the fork matters.

Each server runs in its own process, on its own fresh database. Everything runs
``--repeat`` times, interleaved; the tables show medians over the rounds (ratios
are taken within a round, then the median). Run:
``python bench/http_bench.py [--seconds 4] [--repeat 3] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

CONNECTIONS = 32
EMBEDDED32 = {"process": "embedded32", "thread": "embedded32_thread"}  # mode -> JSON key
TOKEN = "bench-token"
UVICORN = {"loop": "uvloop", "http": "httptools", "access_log": False, "log_level": "warning"}


# --- servers (run in child processes) ---------------------------------------------------
def floor_app(db: str) -> Any:
    import sqlite3

    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, n INTEGER, ts REAL)")
    conn.execute("INSERT OR IGNORE INTO t VALUES (1, 0, 0)")

    async def hit(request: Any) -> Response:
        conn.execute("UPDATE t SET n = n + 1, ts = ? WHERE id = 1", (time.time(),))
        return Response(b'{"ok":true}', media_type="application/json")

    return Starlette(routes=[Route("/hb", hit, methods=["POST"])])


class FixedHeartbeat:
    """The cluster with ``heartbeat`` answered without the store (the node of the
    first beat, every time): what corral's request path costs around the service
    call (auth, routing, validation, the handler, the answer, metrics)."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self.store = cluster.store
        self._node: Any = None

    def heartbeat(self, node_id: str, **payload: Any) -> Any:
        if self._node is None:
            self._node = self._cluster.heartbeat(node_id, **payload)
        return self._node

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


def serve(kind: str, port: int, db: str) -> None:
    import uvicorn

    if kind == "floor":
        app = floor_app(db)
    else:
        from corral.server import create_app

        cluster: Any = corral.connect(f"sqlite:///{db}")
        if kind == "corral-stub":
            cluster = FixedHeartbeat(cluster)
        inline = kind != "corral-hop"
        app = create_app(cluster, token=TOKEN, monitor=False, mcp=False, inline=inline)
    uvicorn.run(app, host="127.0.0.1", port=port, **UVICORN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, kind: str, db: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, "--port", str(self.port), "--db", db]
        )
        end = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    raise RuntimeError(f"{kind} server did not start") from None
                time.sleep(0.05)

    def switches(self) -> tuple[int, int]:
        """The server's voluntary and involuntary context switches so far (Linux),
        summed over its threads."""
        vol = invol = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
        return vol, invol

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (Linux /proc)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

    def load(self, tokens: list[str | None], seconds: float, op: Any) -> dict[str, Any]:
        """``load`` against this server, plus its CPU time per request: less noisy
        than the rate on a shared machine, and what the server itself costs."""
        before, client, sw = self.cpu_seconds(), time.process_time(), self.switches()
        out = load(self.port, tokens, seconds, op)
        out["server_cpu_us_per_op"] = (self.cpu_seconds() - before) / out["n"] * 1e6
        sw1 = self.switches()
        out["server_voluntary_switches_per_op"] = (sw1[0] - sw[0]) / out["n"]
        out["server_involuntary_switches_per_op"] = (sw1[1] - sw[1]) / out["n"]
        # The load client (this process) on the same 2 cores: what HTTP's load costs
        # besides the server, to set against the embedded callers' CPU per op.
        out["client_cpu_us_per_op"] = (time.process_time() - client) / out["n"] * 1e6
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


# --- the load client ---------------------------------------------------------------------
class Conn:
    """One keep-alive HTTP/1.1 connection speaking just enough of the protocol."""

    def __init__(self, port: int, token: str | None) -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n" if token else ""

    async def open(self) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.w.write(
            f"POST {path} HTTP/1.1\r\nHost: b\r\n{self.auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await self.r.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.r.readexactly(length)

    def close(self) -> None:
        self.w.close()


async def _drive(port: int, tokens: list[str | None], seconds: float, op: Any) -> dict[str, Any]:
    conns = [Conn(port, t) for t in tokens]
    await asyncio.gather(*(c.open() for c in conns))
    lat: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def worker(i: int, c: Conn) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await op(i, c)
            lat.append(time.perf_counter() - t0)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    p = percentiles(lat)
    return {
        "ops_per_s": done / elapsed,
        "p50_ms": p["p50"] * 1e3,
        "p99_ms": p["p99"] * 1e3,
        "p90_ms": p["p90"] * 1e3,
        "mean_ms": p["mean"] * 1e3,
        "max_ms": p["max"] * 1e3,
        "n": done,
    }


def load(port: int, tokens: list[str | None], seconds: float, op: Any) -> dict[str, Any]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_drive(port, tokens, seconds, op))


async def _ok(coro: Any) -> bytes:
    status, body = await coro
    if status >= 400:
        raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
    return body


def floor_op(i: int, c: Conn) -> Any:
    return _ok(c.post("/hb", b"{}"))


def heartbeat_op(i: int, c: Conn) -> Any:
    return _ok(c.post(f"/v1/nodes/n{i}/heartbeat", b'{"health_status":"healthy"}'))


async def claim_complete_op(i: int, c: Conn) -> None:
    d = json.loads(await _ok(c.post(f"/v1/nodes/n{i}/claim", b'{"role":"developer"}')))
    t = d["task"]
    if t is None:
        raise RuntimeError("board ran out of tasks; raise --tasks")
    body = json.dumps({"node_id": f"n{i}", "epoch": t["epoch"]}).encode()
    await _ok(c.post(f"/v1/tasks/{t['id']}/complete", body))


# --- setup and the embedded side -------------------------------------------------------
def seed(db: str, tasks: int) -> None:
    c = corral.connect(f"sqlite:///{db}")
    c.configure(max_agents=CONNECTIONS + 4)
    for i in range(CONNECTIONS):
        c.register_node(f"n{i}", "developer", heartbeat_interval=3600)
    for start in range(0, tasks, 10_000):
        c.add_tasks([{"title": f"implement {j}"} for j in range(start, min(tasks, start + 10_000))])
    c.close()


def _timed(n: int, fn: Any) -> dict[str, Any]:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return percentiles(lat)


def client_latency(c: Any, n: int) -> dict[str, Any]:
    """heartbeat, claim + complete, and complete_and_claim (a worker's step in one
    call), one caller, sequential (embedded or remote)."""

    def claim_complete() -> None:
        t = c.claim_best_task("n0", "developer")
        assert t is not None
        c.complete_task(t.id, "n0", t.epoch)

    held = [c.claim_best_task("n0", "developer")]

    def complete_and_claim() -> None:
        t = held[0]
        _, held[0] = c.complete_and_claim(t.id, "n0", "developer", epoch=t.epoch)
        assert held[0] is not None

    out = {
        "heartbeat": _timed(n, lambda: c.heartbeat("n0", health_status="healthy")),
        "claim_complete": _timed(n, claim_complete),
        "complete_and_claim": _timed(n, complete_and_claim),
    }
    t = held[0]
    c.complete_task(t.id, "n0", t.epoch)
    return out


def embedded_latency(db: str, n: int) -> dict[str, Any]:
    """``client_latency`` embedded, back to back; and heartbeats that each follow a
    0.1 ms pause, as a server's calls follow a round trip (this machine's CPU comes
    back from even a short idle gap with much of the store's path no longer cached)."""
    c = corral.connect(f"sqlite:///{db}")
    try:
        out = client_latency(c, n)

        def paused() -> None:
            time.sleep(0.0001)
            t0 = time.perf_counter()
            c.heartbeat("n0", health_status="healthy")
            lat.append(time.perf_counter() - t0)

        lat: list[float] = []
        for _ in range(n):
            paused()
        out["heartbeat_paused"] = percentiles(lat)
        return out
    finally:
        c.close()


# --- the embedded client under the HTTP load's concurrency ------------------------------
def _embedded_step(c: Any, node: str, op: str) -> Any:
    """One op of the HTTP load, embedded: the same heartbeat payload; claim + complete
    as one op, as ``claim_complete_op`` sends it (role in the body, no result)."""
    if op == "heartbeat":
        return lambda: c.heartbeat(node, health_status="healthy")

    def claim_complete() -> None:
        t = c.claim_best_task(node, "developer")
        if t is None:
            raise RuntimeError("board ran out of tasks; raise --tasks")
        c.complete_task(t.id, node, t.epoch)

    return claim_complete


def _usage() -> tuple[int, int, int]:
    """This process's CPU (ns, all its threads) and context switches so far
    (voluntary: it waited; involuntary: the scheduler took the core away)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time_ns(), ru.ru_nvcsw, ru.ru_nivcsw


def _embedded_caller(db: str, i: int, op: str, seconds: float, barrier: Any) -> dict[str, Any]:
    """One caller: its own connect and node; one untimed op (the HTTP server is warm
    from the registrations), the barrier, then ops until ``seconds`` have passed."""
    c = corral.connect(f"sqlite:///{db}")
    try:
        step = _embedded_step(c, f"n{i}", op)
        step()
        barrier.wait()
        lat: list[int] = []
        clock = time.perf_counter_ns
        u0 = _usage()
        start = clock()
        stop = start + int(seconds * 1e9)
        while True:
            t0 = clock()
            if t0 >= stop:
                break
            step()
            lat.append(clock() - t0)
        end = clock()
        return {
            "start": start,
            "end": end,
            "lat": lat,
            "u0": u0,
            "u1": _usage(),
        }
    finally:
        c.close()


def _embedded_process(db: str, i: int, op: str, seconds: float, barrier: Any, q: Any) -> None:
    try:
        out = _embedded_caller(db, i, op, seconds, barrier)
        out["usage"] = [b - a for a, b in zip(out["u0"], out["u1"], strict=True)]
        q.put(out)
    except BaseException as exc:
        barrier.abort()
        q.put({"error": repr(exc)})


def _embedded_threads(db: str, op: str, seconds: float, q: Any) -> None:
    """All the callers as threads of this one process, each its own connect."""
    barrier = threading.Barrier(CONNECTIONS)
    results: list[dict[str, Any]] = []

    def run(i: int) -> None:
        try:
            results.append(_embedded_caller(db, i, op, seconds, barrier))
        except BaseException as exc:
            barrier.abort()
            results.append({"error": repr(exc)})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [r for r in results if "error" not in r]
    # One process: its usage from the first caller's release to the last one's end.
    usage = [
        max(r["u1"][k] for r in ok) - min(r["u0"][k] for r in ok) if ok else 0 for k in range(3)
    ]
    for r in results:
        r["usage"] = [u / len(results) for u in usage]
        q.put(r)


def embedded_load(db: str, op: str, seconds: float, mode: str) -> dict[str, Any]:
    """``CONNECTIONS`` embedded callers at once (``mode``: one OS process each, or
    threads of one process), in the shape of ``load``'s answer: ops/s over the span
    from the first caller's release to the last one's end, p50/p99 of every op, and
    the callers' CPU per op (``perf_counter_ns`` is CLOCK_MONOTONIC: comparable across
    processes)."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    if mode == "process":
        barrier = ctx.Barrier(CONNECTIONS)
        procs = [
            ctx.Process(target=_embedded_process, args=(db, i, op, seconds, barrier, q))
            for i in range(CONNECTIONS)
        ]
    else:
        procs = [ctx.Process(target=_embedded_threads, args=(db, op, seconds, q))]
    for proc in procs:
        proc.start()
    parts = [q.get(timeout=seconds + 120) for _ in range(CONNECTIONS)]  # before join
    for proc in procs:
        proc.join()
    errors = [p["error"] for p in parts if "error" in p]
    if errors:
        raise RuntimeError(f"embedded {mode} {op}: {errors[0]}")
    lat = [x / 1e9 for p in parts for x in p["lat"]]
    elapsed = (max(p["end"] for p in parts) - min(p["start"] for p in parts)) / 1e9
    pc = percentiles(lat)
    return {
        "ops_per_s": len(lat) / elapsed,
        "p50_ms": pc["p50"] * 1e3,
        "p99_ms": pc["p99"] * 1e3,
        "p90_ms": pc["p90"] * 1e3,
        "mean_ms": pc["mean"] * 1e3,
        "max_ms": pc["max"] * 1e3,
        "n": len(lat),
        "cpu_us_per_op": sum(p["usage"][0] for p in parts) / len(lat) / 1e3,
        "voluntary_switches_per_op": sum(p["usage"][1] for p in parts) / len(lat),
        "involuntary_switches_per_op": sum(p["usage"][2] for p in parts) / len(lat),
        "release_spread_ms": (max(p["start"] for p in parts) - min(p["start"] for p in parts))
        / 1e6,
    }


def run_embedded32(db: str, tasks: int, seconds: float, mode: str) -> dict[str, Any]:
    """The HTTP load's two workloads, embedded, on a fresh database seeded like the
    HTTP run's, in the same order (heartbeats, then claim + complete)."""
    seed(db, tasks)
    return {op: embedded_load(db, op, seconds, mode) for op in ("heartbeat", "claim_complete")}


def register_nodes(admin: Any) -> list[str | None]:
    """One node per connection (n0, n1, …); their tokens, in order."""
    for i in range(CONNECTIONS):
        admin.register_node(f"n{i}", "developer", heartbeat_interval=3600)
    return [admin.node_tokens[f"n{i}"] for i in range(CONNECTIONS)]


def run_corral(kind: str, db: str, seconds: float, n: int) -> dict[str, Any]:
    srv = Server(kind, db)
    try:
        admin = corral.connect(f"http://127.0.0.1:{srv.port}", token=TOKEN)
        tokens = register_nodes(admin)
        out = {
            "heartbeat": srv.load(tokens, seconds, heartbeat_op),
            "claim_complete": srv.load(tokens, seconds, claim_complete_op),
        }
        w0 = admin.for_node("n0")
        out["single"] = client_latency(w0, n)
        w0.close()
        admin.close()
        return out
    finally:
        srv.stop()


def run_stub(db: str, seconds: float, n: int) -> dict[str, Any]:
    """Heartbeats against corral with the service call answered without the store."""
    srv = Server("corral-stub", db)
    try:
        admin = corral.connect(f"http://127.0.0.1:{srv.port}", token=TOKEN)
        tokens = register_nodes(admin)
        out = {"heartbeat": srv.load(tokens, seconds, heartbeat_op)}
        w0 = admin.for_node("n0")
        out["single"] = {
            "heartbeat": _timed(n, lambda: w0.heartbeat("n0", health_status="healthy"))
        }
        w0.close()
        admin.close()
        return out
    finally:
        srv.stop()


def run_floor(db: str, seconds: float, n: int) -> dict[str, Any]:
    from corral.remote import HttpClient

    srv = Server("floor", db)
    try:
        out = srv.load([None] * CONNECTIONS, seconds, floor_op)
        with HttpClient(f"http://127.0.0.1:{srv.port}", token=None) as c:
            out["single"] = {"request": _timed(n, lambda: c.request("POST", "/hb", {}))}
        return out
    finally:
        srv.stop()


def one_round(tmp: Path, r: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"floor": run_floor(str(tmp / f"floor{r}.db"), args.seconds, args.n)}
    for kind in ("corral", "corral-hop"):
        db = str(tmp / f"{kind}{r}.db")
        seed(db, args.tasks)
        out[kind] = run_corral(kind, db, args.seconds, args.n)
        if kind == "corral":  # the embedded side of the same load, next to it in time
            for mode in args.embedded32:
                db = str(tmp / f"{EMBEDDED32[mode]}-{r}.db")
                out[EMBEDDED32[mode]] = run_embedded32(db, args.tasks, args.seconds, mode)
    db = str(tmp / f"corral-stub{r}.db")
    seed(db, 0)
    out["corral-stub"] = run_stub(db, args.seconds, args.n)
    out["embedded"] = embedded_latency(str(tmp / f"corral{r}.db"), args.n)
    f, c, h, e = out["floor"], out["corral"], out["corral-hop"], out["embedded"]
    stub = out["corral-stub"]
    single = c["single"]
    out["ratios"] = {
        "heartbeat_vs_floor_rate": c["heartbeat"]["ops_per_s"] / f["ops_per_s"],
        "hop_heartbeat_vs_floor_rate": h["heartbeat"]["ops_per_s"] / f["ops_per_s"],
        "stub_heartbeat_vs_floor_rate": stub["heartbeat"]["ops_per_s"] / f["ops_per_s"],
        "floor_vs_heartbeat_server_cpu": f["server_cpu_us_per_op"]
        / c["heartbeat"]["server_cpu_us_per_op"],
        "stub_vs_heartbeat_server_cpu": stub["heartbeat"]["server_cpu_us_per_op"]
        / c["heartbeat"]["server_cpu_us_per_op"],
        "heartbeat_http_vs_embedded_p50": single["heartbeat"]["p50"] / e["heartbeat"]["p50"],
        "claim_complete_http_vs_embedded_p50": single["claim_complete"]["p50"]
        / e["claim_complete"]["p50"],
        "complete_and_claim_http_vs_embedded_p50": single["complete_and_claim"]["p50"]
        / e["complete_and_claim"]["p50"],
        "floor_request_vs_embedded_heartbeat_p50": f["single"]["request"]["p50"]
        / e["heartbeat"]["p50"],
        "heartbeat_http_vs_embedded_paused_p50": single["heartbeat"]["p50"]
        / e["heartbeat_paused"]["p50"],
        "heartbeat_http_vs_floor_request_p50": single["heartbeat"]["p50"]
        / f["single"]["request"]["p50"],
        "stub_heartbeat_http_vs_floor_request_p50": stub["single"]["heartbeat"]["p50"]
        / f["single"]["request"]["p50"],
    }
    # HTTP with 32 connections over the embedded client with 32 callers: the same ops,
    # the same concurrency, the same seconds, the same round.
    for mode in args.embedded32:
        key, e32 = EMBEDDED32[mode], out[EMBEDDED32[mode]]
        for op in ("heartbeat", "claim_complete"):
            for q in ("p50", "p99", "mean"):
                out["ratios"][f"{op}_http_vs_{key}_{q}"] = c[op][f"{q}_ms"] / e32[op][f"{q}_ms"]
            out["ratios"][f"{op}_http_vs_{key}_rate"] = c[op]["ops_per_s"] / e32[op]["ops_per_s"]
        # The floor app under the same load, over the embedded heartbeat: how far the
        # do-nothing HTTP route alone is from the embedded client, percentile by percentile.
        for q in ("p50", "p99", "mean"):
            out["ratios"][f"floor_vs_{key}_heartbeat_{q}"] = (
                f[f"{q}_ms"] / e32["heartbeat"][f"{q}_ms"]
            )
    if {"process", "thread"} <= set(args.embedded32):
        t, pr = out[EMBEDDED32["thread"]], out[EMBEDDED32["process"]]
        for op in ("heartbeat", "claim_complete"):
            for q in ("p50_ms", "p99_ms", "mean_ms", "ops_per_s"):
                out["ratios"][f"{op}_embedded32_thread_vs_process_{q.split('_')[0]}"] = (
                    t[op][q] / pr[op][q]
                )
    return out


def _median(rounds: list[dict[str, Any]], *path: str) -> float:
    values = []
    for r in rounds:
        v: Any = r
        for key in path:
            v = v[key]
        values.append(v)
    return float(statistics.median(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=2000, help="sequential calls per latency sample")
    ap.add_argument(
        "--tasks",
        type=int,
        help="tasks on each claim + complete board (default: 20,000 per second of load; "
        "32 embedded callers complete more than 7,500 a second)",
    )
    ap.add_argument(
        "--embedded32",
        type=lambda v: [m for m in v.split(",") if m],
        default=["process"],
        help="how to run the 32 embedded callers: process (default), thread, or "
        "process,thread (both, side by side)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "http_bench.json")
    ap.add_argument("--quick", action="store_true", help="a short run (smoke)")
    ap.add_argument("--serve", choices=["floor", "corral", "corral-hop", "corral-stub"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--db")
    args = ap.parse_args()
    if bad := set(args.embedded32) - set(EMBEDDED32):
        ap.error(f"--embedded32: unknown mode {', '.join(sorted(bad))}")
    if args.quick:
        args.seconds, args.repeat, args.n = 0.5, 1, 200
    if args.tasks is None:
        args.tasks = max(10_000, int(20_000 * args.seconds))
    if args.serve:
        serve(args.serve, args.port, args.db)
        return
    tmp = Path(tempfile.mkdtemp(prefix="corral-http-bench-"))
    rounds = []
    try:
        for r in range(args.repeat):
            rounds.append(one_round(tmp, r, args))
            rr = rounds[-1]["ratios"]
            print(
                f"round {r + 1}/{args.repeat}: "
                f"heartbeat/floor {rr['heartbeat_vs_floor_rate']:.2f}, "
                f"HTTP/embedded heartbeat {rr['heartbeat_http_vs_embedded_p50']:.1f}x, "
                f"claim+complete {rr['claim_complete_http_vs_embedded_p50']:.1f}x; "
                + "; ".join(
                    f"HTTP/{EMBEDDED32[m]} p50 heartbeat "
                    f"{rr[f'heartbeat_http_vs_{EMBEDDED32[m]}_p50']:.2f}x, claim+complete "
                    f"{rr[f'claim_complete_http_vs_{EMBEDDED32[m]}_p50']:.2f}x"
                    for m in args.embedded32
                ),
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the boards: ~100 MB a round

    def med(*path: str) -> float:
        return _median(rounds, *path)

    loads = [
        ("floor: Starlette + 1 SQLite row UPDATE", ("floor",)),
        ("corral heartbeat (node token, validated)", ("corral", "heartbeat")),
        ("corral heartbeat, service call stubbed", ("corral-stub", "heartbeat")),
        ("corral claim + complete (2 requests)", ("corral", "claim_complete")),
        ("corral heartbeat, thread hop per op", ("corral-hop", "heartbeat")),
        ("corral claim + complete, thread hop per op", ("corral-hop", "claim_complete")),
    ]
    summary: dict[str, Any] = {
        "load": {
            "/".join(p): {
                k: med(*p, k)
                for k in (
                    "ops_per_s",
                    "p50_ms",
                    "p99_ms",
                    "p90_ms",
                    "mean_ms",
                    "server_cpu_us_per_op",
                    "client_cpu_us_per_op",
                    "server_voluntary_switches_per_op",
                    "server_involuntary_switches_per_op",
                )
            }
            for _, p in loads
        },
        "embedded32": {
            f"{EMBEDDED32[m]}/{op}": {
                k: med(EMBEDDED32[m], op, k)
                for k in (
                    "ops_per_s",
                    "p50_ms",
                    "p90_ms",
                    "p99_ms",
                    "mean_ms",
                    "cpu_us_per_op",
                    "voluntary_switches_per_op",
                    "involuntary_switches_per_op",
                )
            }
            for m in args.embedded32
            for op in ("heartbeat", "claim_complete")
        },
        "single": {},
        "ratios": {k: med("ratios", k) for k in rounds[0]["ratios"]},
    }
    singles = [
        ("heartbeat", "embedded", ("embedded", "heartbeat")),
        ("heartbeat", "embedded, 0.1 ms pause before each", ("embedded", "heartbeat_paused")),
        ("heartbeat", "HTTP corral", ("corral", "single", "heartbeat")),
        ("heartbeat", "HTTP corral, hop", ("corral-hop", "single", "heartbeat")),
        ("heartbeat", "HTTP corral, stubbed", ("corral-stub", "single", "heartbeat")),
        ("claim + complete", "embedded", ("embedded", "claim_complete")),
        ("claim + complete", "HTTP corral", ("corral", "single", "claim_complete")),
        ("claim + complete", "HTTP corral, hop", ("corral-hop", "single", "claim_complete")),
        ("complete_and_claim", "embedded", ("embedded", "complete_and_claim")),
        ("complete_and_claim", "HTTP corral", ("corral", "single", "complete_and_claim")),
        ("floor request", "HTTP floor", ("floor", "single", "request")),
    ]
    for op, who, p in singles:
        summary["single"][f"{op} / {who}"] = {k: med(*p, k) * 1e3 for k in ("p50", "p99")}
    results: dict[str, Any] = {
        "machine": machine_info(),
        "connections": CONNECTIONS,
        "seconds": args.seconds,
        "repeat": args.repeat,
        "uvicorn": UVICORN,
        "tasks": args.tasks,
        "embedded32_modes": args.embedded32,
        "median": summary,
        "rounds": rounds,
    }
    print(
        f"\nHTTP, {CONNECTIONS} connections, {args.seconds:g}s each (uvloop + httptools), "
        f"median of {args.repeat} rounds\n"
    )
    rows = []
    for label, p in loads:
        d = summary["load"]["/".join(p)]
        rows.append([label, d["ops_per_s"], d["p50_ms"], d["p99_ms"], d["server_cpu_us_per_op"]])
    print(table(["workload", "ops/s", "p50 ms", "p99 ms", "server CPU µs/op"], rows))
    print("\nOne caller, sequential (ms)\n")
    rows = [
        [op, who, d["p50"], d["p99"]]
        for (op, who, _), d in zip(singles, summary["single"].values(), strict=True)
    ]
    print(table(["operation", "client", "p50", "p99"], rows))
    r = summary["ratios"]
    print(
        f"\nheartbeat rate / floor rate: {r['heartbeat_vs_floor_rate']:.2f} (target >= 0.50; "
        f"with a thread hop per op {r['hop_heartbeat_vs_floor_rate']:.2f}; "
        f"service call stubbed {r['stub_heartbeat_vs_floor_rate']:.2f}); "
        f"server CPU per request, floor / heartbeat: {r['floor_vs_heartbeat_server_cpu']:.2f}, "
        f"stubbed / heartbeat: {r['stub_vs_heartbeat_server_cpu']:.2f}"
    )
    print(
        f"HTTP / embedded p50: heartbeat {r['heartbeat_http_vs_embedded_p50']:.1f}x, "
        f"claim + complete {r['claim_complete_http_vs_embedded_p50']:.1f}x, "
        f"complete_and_claim {r['complete_and_claim_http_vs_embedded_p50']:.1f}x (target <= 3x); "
        "one floor request / embedded heartbeat "
        f"{r['floor_request_vs_embedded_heartbeat_p50']:.1f}x; "
        f"HTTP heartbeat / embedded one after a 0.1 ms pause "
        f"{r['heartbeat_http_vs_embedded_paused_p50']:.1f}x; "
        f"HTTP heartbeat / floor request {r['heartbeat_http_vs_floor_request_p50']:.1f}x "
        f"(stubbed {r['stub_heartbeat_http_vs_floor_request_p50']:.1f}x)"
    )
    print_embedded32(args, summary, rounds)
    write_json(args.out, results)
    print(f"wrote {args.out}")


def print_embedded32(args: argparse.Namespace, summary: dict[str, Any], rounds: list[Any]) -> None:
    """HTTP with 32 connections next to the embedded client with 32 callers."""
    print(f"\n{CONNECTIONS} concurrent callers, HTTP vs embedded, median of {args.repeat} rounds\n")
    rows = []
    for op, label in (("heartbeat", "heartbeat"), ("claim_complete", "claim + complete")):
        d = summary["load"][f"corral/{op}"]
        rows.append(
            [
                label,
                f"HTTP, {CONNECTIONS} connections",
                d["ops_per_s"],
                d["p50_ms"],
                d["p90_ms"],
                d["p99_ms"],
                d["mean_ms"],
                CONNECTIONS / d["ops_per_s"] * 1e3,
                d["server_cpu_us_per_op"] + d["client_cpu_us_per_op"],
                d["server_voluntary_switches_per_op"],
                d["server_involuntary_switches_per_op"],
            ]
        )
        for m in args.embedded32:
            e = summary["embedded32"][f"{EMBEDDED32[m]}/{op}"]
            who = f"embedded, {CONNECTIONS} " + (
                "processes" if m == "process" else "threads, 1 process"
            )
            rows.append(
                [
                    label,
                    who,
                    e["ops_per_s"],
                    e["p50_ms"],
                    e["p90_ms"],
                    e["p99_ms"],
                    e["mean_ms"],
                    CONNECTIONS / e["ops_per_s"] * 1e3,
                    e["cpu_us_per_op"],
                    e["voluntary_switches_per_op"],
                    e["involuntary_switches_per_op"],
                ]
            )
    heads = [
        "operation",
        "callers",
        "ops/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "mean ms",
        f"{CONNECTIONS}/rate ms",
        "CPU µs/op",
        "vol sw/op",
        "invol sw/op",
    ]
    print(table(heads, rows))
    print(
        "(CPU per op: HTTP = server + load client, embedded = the callers' processes; "
        "switches: HTTP = the server's, embedded = the callers'; a closed loop of "
        f"{CONNECTIONS} callers has mean latency = {CONNECTIONS}/rate, Little's law)\n"
    )
    for m in args.embedded32:
        key = EMBEDDED32[m]
        names = [
            f"{op}_http_vs_{key}_{q}"
            for op in ("heartbeat", "claim_complete")
            for q in ("p50", "p99", "mean", "rate")
        ]
        rows = [[f"round {i + 1}", *(r["ratios"][k] for k in names)] for i, r in enumerate(rounds)]
        rows.append(["median", *(summary["ratios"][k] for k in names)])
        heads = [
            "HB p50",
            "HB p99",
            "HB mean",
            "HB rate",
            "C+C p50",
            "C+C p99",
            "C+C mean",
            "C+C rate",
        ]
        print(f"HTTP / {key}, per round (target: latency <= 3x)\n")
        print(table(["", *heads], rows))
        r = summary["ratios"]
        print(
            f"\nthe floor app / {key} heartbeat, same load: p50 "
            f"{r[f'floor_vs_{key}_heartbeat_p50']:.1f}x, p99 "
            f"{r[f'floor_vs_{key}_heartbeat_p99']:.2f}x, mean "
            f"{r[f'floor_vs_{key}_heartbeat_mean']:.2f}x\n"
        )
    if {"process", "thread"} <= set(args.embedded32):
        r = summary["ratios"]
        print(
            "embedded 32 threads / 32 processes: "
            + "; ".join(
                f"{label} p50 {r[f'{op}_embedded32_thread_vs_process_p50']:.2f}x, "
                f"p99 {r[f'{op}_embedded32_thread_vs_process_p99']:.2f}x, "
                f"mean {r[f'{op}_embedded32_thread_vs_process_mean']:.2f}x, "
                f"rate {r[f'{op}_embedded32_thread_vs_process_ops']:.2f}x"
                for op, label in (
                    ("heartbeat", "heartbeat"),
                    ("claim_complete", "claim + complete"),
                )
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
