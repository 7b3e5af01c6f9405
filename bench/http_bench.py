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

Each server runs in its own process, on its own fresh database. Everything runs
``--repeat`` times, interleaved; the tables show medians over the rounds (ratios
are taken within a round, then the median). Run:
``python bench/http_bench.py [--seconds 4] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
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

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (Linux /proc)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

    def load(self, tokens: list[str | None], seconds: float, op: Any) -> dict[str, Any]:
        """``load`` against this server, plus its CPU time per request: less noisy
        than the rate on a shared machine, and what the server itself costs."""
        before = self.cpu_seconds()
        out = load(self.port, tokens, seconds, op)
        out["server_cpu_us_per_op"] = (self.cpu_seconds() - before) / out["n"] * 1e6
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


def run_corral(kind: str, db: str, seconds: float, n: int) -> dict[str, Any]:
    srv = Server(kind, db)
    try:
        admin = corral.connect(f"http://127.0.0.1:{srv.port}", token=TOKEN)
        tokens: list[str | None] = []
        for i in range(CONNECTIONS):
            admin.register_node(f"n{i}", "developer", heartbeat_interval=3600)
            tokens.append(admin.node_tokens[f"n{i}"])
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
        tokens: list[str | None] = []
        for i in range(CONNECTIONS):
            admin.register_node(f"n{i}", "developer", heartbeat_interval=3600)
            tokens.append(admin.node_tokens[f"n{i}"])
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
    ap.add_argument("--tasks", type=int, default=30_000)
    ap.add_argument("--serve", choices=["floor", "corral", "corral-hop", "corral-stub"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--db")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.db)
        return
    tmp = Path(tempfile.mkdtemp(prefix="corral-http-bench-"))
    rounds = []
    for r in range(args.repeat):
        rounds.append(one_round(tmp, r, args))
        rr = rounds[-1]["ratios"]
        print(
            f"round {r + 1}/{args.repeat}: heartbeat/floor {rr['heartbeat_vs_floor_rate']:.2f}, "
            f"HTTP/embedded heartbeat {rr['heartbeat_http_vs_embedded_p50']:.1f}x, "
            f"claim+complete {rr['claim_complete_http_vs_embedded_p50']:.1f}x",
            flush=True,
        )

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
                k: med(*p, k) for k in ("ops_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_op")
            }
            for _, p in loads
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
        "median": summary,
        "rounds": rounds,
    }
    print(f"\nHTTP, {CONNECTIONS} connections, {args.seconds:g}s each (uvloop + httptools), "
          f"median of {args.repeat} rounds\n")  # fmt: skip
    rows = []
    for label, p in loads:
        d = summary["load"]["/".join(p)]
        rows.append([label, d["ops_per_s"], d["p50_ms"], d["p99_ms"], d["server_cpu_us_per_op"]])
    print(table(["workload", "ops/s", "p50 ms", "p99 ms", "server CPU µs/op"], rows))
    print("\nOne caller, sequential (ms)\n")
    rows = [[op, who, d["p50"], d["p99"]] for (op, who, _), d in
            zip(singles, summary["single"].values(), strict=True)]  # fmt: skip
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
    write_json(RESULTS_DIR / "http_bench.json", results)
    print(f"wrote {RESULTS_DIR / 'http_bench.json'}")


if __name__ == "__main__":
    main()
