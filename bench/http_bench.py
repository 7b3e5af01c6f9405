"""HTTP server throughput and latency: corral serve vs a floor vs the embedded client.

- heartbeats/s and claim+complete/s over HTTP with 32 concurrent keep-alive
  connections (an asyncio load client speaking raw HTTP/1.1, so the client is not
  the bottleneck), p50/p99 per request;
- the floor: a minimal Starlette app whose one route updates one SQLite row, under
  the same uvicorn settings (uvloop + httptools, no access log), same load client;
- the embedded client (``Cluster`` over SQLite) doing the same operations, and the
  single-connection HTTP latency next to it.

Each server runs in its own process. Run: ``python bench/http_bench.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

CONNECTIONS = 32
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


def serve(kind: str, port: int, db: str) -> None:
    import uvicorn

    if kind == "floor":
        app = floor_app(db)
    else:
        from corral.server import create_app

        app = create_app(corral.connect(f"sqlite:///{db}"), token=TOKEN, monitor=False, mcp=False)
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


def embedded_latency(db: str, n: int) -> dict[str, Any]:
    c = corral.connect(f"sqlite:///{db}")
    hb, cc = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        c.heartbeat("n0", health_status="healthy")
        hb.append(time.perf_counter() - t0)
    for _ in range(n):
        t0 = time.perf_counter()
        t = c.claim_best_task("n0", "developer")
        assert t is not None
        c.complete_task(t.id, "n0", t.epoch)
        cc.append(time.perf_counter() - t0)
    c.close()
    return {"heartbeat": percentiles(hb), "claim_complete": percentiles(cc)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tasks", type=int, default=60_000)
    ap.add_argument("--serve", choices=["floor", "corral"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--db")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.db)
        return
    tmp = Path(tempfile.mkdtemp(prefix="corral-http-bench-"))
    results: dict[str, Any] = {
        "machine": machine_info(),
        "connections": CONNECTIONS,
        "seconds": args.seconds,
        "uvicorn": UVICORN,
    }
    floor = Server("floor", str(tmp / "floor.db"))
    try:
        results["floor"] = load(floor.port, [None] * CONNECTIONS, args.seconds, floor_op)
    finally:
        floor.stop()
    db = str(tmp / "corral.db")
    seed(db, args.tasks)
    srv = Server("corral", db)
    try:
        admin = corral.connect(f"http://127.0.0.1:{srv.port}", token=TOKEN)
        tokens: list[str | None] = []
        for i in range(CONNECTIONS):
            admin.register_node(f"n{i}", "developer", heartbeat_interval=3600)
            tokens.append(admin.node_tokens[f"n{i}"])
        results["heartbeat"] = load(srv.port, tokens, args.seconds, heartbeat_op)
        results["claim_complete"] = load(srv.port, tokens, args.seconds, claim_complete_op)
        # single-connection latency over HTTP (the remote client), next to embedded
        w0 = admin.for_node("n0")
        hb, cc = [], []
        for _ in range(2000):
            t0 = time.perf_counter()
            w0.heartbeat("n0", health_status="healthy")
            hb.append(time.perf_counter() - t0)
        for _ in range(2000):
            t0 = time.perf_counter()
            t = w0.claim_best_task("n0", "developer")
            assert t is not None
            w0.complete_task(t.id, "n0", t.epoch)
            cc.append(time.perf_counter() - t0)
        results["http_single"] = {"heartbeat": percentiles(hb), "claim_complete": percentiles(cc)}
        w0.close()
        admin.close()
    finally:
        srv.stop()
    results["embedded"] = embedded_latency(db, 2000)

    f, hbr, ccr = results["floor"], results["heartbeat"], results["claim_complete"]
    emb, one = results["embedded"], results["http_single"]
    results["ratios"] = {
        "heartbeat_vs_floor_rate": hbr["ops_per_s"] / f["ops_per_s"],
        "heartbeat_http_vs_embedded_p50": one["heartbeat"]["p50"] / emb["heartbeat"]["p50"],
        "claim_complete_http_vs_embedded_p50": one["claim_complete"]["p50"]
        / emb["claim_complete"]["p50"],
    }
    print(f"HTTP, {CONNECTIONS} connections, {args.seconds:g}s each (uvloop + httptools)\n")
    print(
        table(
            ["workload", "ops/s", "p50 ms", "p99 ms"],
            [
                [
                    "floor: Starlette + 1 SQLite row UPDATE",
                    f["ops_per_s"],
                    f["p50_ms"],
                    f["p99_ms"],
                ],
                [
                    "corral heartbeat (node token, validated)",
                    hbr["ops_per_s"],
                    hbr["p50_ms"],
                    hbr["p99_ms"],
                ],
                [
                    "corral claim + complete (2 requests)",
                    ccr["ops_per_s"],
                    ccr["p50_ms"],
                    ccr["p99_ms"],
                ],
            ],
        )
    )
    print("\nOne caller, sequential: HTTP client vs embedded client (ms)\n")
    heads = ["operation", "embedded p50", "embedded p99", "HTTP p50", "HTTP p99", "ratio p50"]
    print(
        table(
            heads,
            [
                [
                    op,
                    emb[op]["p50"] * 1e3,
                    emb[op]["p99"] * 1e3,
                    one[op]["p50"] * 1e3,
                    one[op]["p99"] * 1e3,
                    one[op]["p50"] / emb[op]["p50"],
                ]
                for op in ("heartbeat", "claim_complete")
            ],
        )
    )
    r = results["ratios"]
    print(f"\nheartbeat rate / floor rate: {r['heartbeat_vs_floor_rate']:.2f} (target >= 0.50)")
    write_json(RESULTS_DIR / "http_bench.json", results)
    print(f"wrote {RESULTS_DIR / 'http_bench.json'}")


if __name__ == "__main__":
    main()
