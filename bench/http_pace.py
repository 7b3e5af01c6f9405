"""One caller at a worker's pace: latency of each operation, embedded and over HTTP,
when calls are spaced the way a worker spaces them.

``http_bench.py`` times one caller calling back to back. A worker does not: it
heartbeats every few seconds, claims after its last task's work, completes after
this one's. Between two calls the machine runs other things, and a call finds its
code and data out of the CPU's caches. This script times the same operations one
at a time after a pause (0, 1, 10 and 100 ms by default), on both sides:

- **embedded**: ``corral.connect("sqlite:///...")`` in this process;
- **HTTP**: ``corral.connect("http://...")`` against ``corral serve``'s app on
  uvicorn (uvloop + httptools, as ``http_bench.py`` runs it), a node token, its own
  fresh board seeded like the embedded one;
- **floor**: one request to ``http_bench.py``'s floor app (a Starlette route that
  updates one SQLite row), what one HTTP round trip costs at best here.

Operations: heartbeat; claim_best_task; complete_task; complete_and_claim (a
worker's step in one call). The sides take turns call by call in a shuffled order
(seeded), each call after its own pause, so a burst of machine load hits every
side alike; latency is the call alone, the pause excluded. Ratios are HTTP /
embedded p50 (and p99) per operation and pause, taken within a round, median over
``--repeat`` rounds. Run: ``python bench/http_pace.py [--repeat 3] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.remote import _ENCODER, HttpClient
from http_bench import TOKEN, Server, _median, seed

PAUSES_MS = (0.0, 1.0, 10.0, 100.0)
# Samples per (side, operation) at each pause: about 25 s of pauses at 100 ms.
SAMPLES = {0.0: 2000, 1.0: 1000, 10.0: 300, 100.0: 30}
OPS = ("heartbeat", "claim", "complete", "complete_and_claim")
NODE = "n0"
HAND_NODE = "n1"  # the hand-written transport's node, on the same server


# --- the baseline: the hand-written transport corral used before urllib3 ------------
# Kept here only, to time it side by side with the library (``--transports``): a
# minimal HTTP/1.1 client over a socket with TCP_NODELAY that writes each request in
# one ``send`` and reads just what the server sends. One connection per thread.
_MAX_HEAD = 64 * 1024
# The response header fields that frame the body or end the connection: (name, value).
_FRAMING = re.compile(
    r"(?:\A|\r\n)[ \t]*(content-length|transfer-encoding|connection)[ \t]*:([^\r]*)"
)


class _Closed(Exception):
    """The connection ended before a whole response arrived."""

    def __init__(self, message: str, *, partial: bool) -> None:
        super().__init__(message)
        self.partial = partial  # some of the response had arrived


class _Connection:
    """One keep-alive HTTP/1.1 connection (plain or TLS), ``TCP_NODELAY`` set."""

    def __init__(self, host: str, port: int, timeout: float, *, tls: bool = False) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buf = bytearray()
        self.timeout = timeout

    def close(self) -> None:
        self.sock.close()

    def _fill(self, got: bool) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Closed("the server closed the connection", partial=got or bool(self.buf))
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill(True)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            self._fill(True)
        out = bytes(self.buf[:i])
        del self.buf[: i + 2]
        return out

    def roundtrip(self, message: bytes, timeout: float) -> tuple[int, bytes, bool]:
        """Send one request; return (status, body, whether the server will close)."""
        if timeout != self.timeout:
            self.sock.settimeout(timeout)
            self.timeout = timeout
        try:
            self.sock.sendall(message)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Closed(str(exc), partial=False) from None
        try:
            while True:
                while (end := self.buf.find(b"\r\n\r\n")) < 0:
                    if len(self.buf) > _MAX_HEAD:
                        raise _Closed("response headers too large", partial=True)
                    self._fill(False)
                head = self.buf[:end].decode("latin-1")
                del self.buf[: end + 4]
                line, _, fields = head.partition("\r\n")
                parts = line.split(" ", 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                    raise _Closed(f"not an HTTP response: {line[:80]!r}", partial=True)
                status = int(parts[1])
                if status >= 200:
                    break  # 1xx: an interim response, the real one follows
            length: int | None = None
            chunked = False
            close = parts[0] == "HTTP/1.0"
            # Only these three fields matter here; names are case-insensitive.
            for name, value in _FRAMING.findall(fields.lower()):
                if name == "content-length":
                    length = int(value.strip())
                elif name == "transfer-encoding":
                    chunked = "chunked" in value
                else:
                    value = value.strip()
                    close = "close" in value or (close and "keep-alive" not in value)
            if chunked:
                body = bytearray()
                while True:
                    size = int(self._line().split(b";", 1)[0], 16)
                    if size == 0:
                        while self._line():
                            pass  # trailers
                        break
                    body += self._take(size)
                    self._take(2)
                return status, bytes(body), close
            if length is not None:
                return status, self._take(length), close
            body = bytearray(self.buf)  # no length: the body runs to the end
            self.buf.clear()
            while chunk := self.sock.recv(65536):
                body += chunk
            return status, bytes(body), True
        except ConnectionResetError as exc:
            raise _Closed(str(exc), partial=bool(self.buf)) from None
        except ValueError as exc:
            raise _Closed(f"malformed response: {exc}", partial=True) from None


class HandWrittenClient(HttpClient):
    """``HttpClient`` with the hand-written transport (the baseline)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(url, token=token, timeout=timeout)
        self._local = threading.local()
        self._conns: list[_Connection] = []
        host = f"[{self._host}]" if ":" in self._host else self._host
        if self._port != (443 if self._https else 80):
            host = f"{host}:{self._port}"
        head = f"Host: {host}\r\nAccept: application/json\r\n"
        if self.token:
            head += f"Authorization: Bearer {self.token}\r\n"
        self._head = head.encode("latin-1")
        self._head_json = self._head + b"Content-Type: application/json\r\n"

    def close(self) -> None:
        super().close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def _conn(self) -> tuple[_Connection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = _Connection(self._host, self._port, self.timeout, tls=self._https)
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        return conn, False

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON (or text when ``raw``)."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = b""
        extra = self._head
        if body is not None:
            try:
                data = _ENCODER.encode(body).encode()
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"arguments must be JSON data: {exc}") from None
            extra = self._head_json
        try:
            line = f"{method} {target} HTTP/1.1\r\n".encode("ascii")
        except UnicodeEncodeError:
            raise InvalidInputError(f"not an ASCII request target: {target!r}") from None
        message = b"".join((line, extra, b"Content-Length: %d\r\n\r\n" % len(data), data))
        for attempt in (0, 1):
            try:
                conn, reused = self._conn()
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot reach {self.url}: {exc}; is corral serve running?"
                ) from None
            try:
                status, payload, close = conn.roundtrip(message, timeout or self.timeout)
            except _Closed as exc:
                self._drop(conn)
                if reused and attempt == 0 and not exc.partial:
                    continue  # the server closed an idle keep-alive connection
                raise StoreUnavailableError(f"lost the connection to {self.url}: {exc}") from None
            except OSError as exc:
                self._drop(conn)
                raise StoreUnavailableError(
                    f"cannot reach {self.url}: {exc}; is corral serve running?"
                ) from None
            if close:
                self._drop(conn)
            break
        if status >= 400:
            raise self._error(status, payload)
        if raw:
            return payload.decode()
        return json.loads(payload.decode())


TRANSPORTS = {"library": HttpClient, "hand": HandWrittenClient}
# The HTTP sides and floor sides of each transport.
HTTP_SIDE = {"library": "http", "hand": "http_hand"}
FLOOR_SIDE = {"library": "floor", "hand": "floor_hand"}


class Side:
    """One client and the lease it holds, timing each operation."""

    def __init__(self, client: Any, node: str = NODE) -> None:
        self.c = client
        self.node = node
        self.held: Any = None  # the task claimed by the last claim or step
        self.lat: dict[str, list[float]] = {op: [] for op in OPS}

    def reset(self) -> None:
        self.lat = {op: [] for op in OPS}

    def _timed(self, op: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        self.lat[op].append(time.perf_counter() - t0)
        return out

    def call(self, op: str) -> None:
        c, node = self.c, self.node
        if op == "heartbeat":
            self._timed(op, lambda: c.heartbeat(node, health_status="healthy"))
        elif op == "claim":
            if self.held is not None:  # let go of the lease a step left (untimed)
                c.complete_task(self.held.id, node, self.held.epoch)
            self.held = self._timed(op, lambda: c.claim_best_task(node, "developer"))
            assert self.held is not None, "board ran out of tasks"
        elif op == "complete":
            t = self.held
            if t is None:  # nothing held: claim one first (untimed)
                t = c.claim_best_task(node, "developer")
            self._timed(op, lambda: c.complete_task(t.id, node, t.epoch))
            self.held = None
        else:
            t = self.held if self.held is not None else c.claim_best_task(node, "developer")
            _, self.held = self._timed(
                op, lambda: c.complete_and_claim(t.id, node, "developer", epoch=t.epoch)
            )
            assert self.held is not None, "board ran out of tasks"


class FloorSide:
    """One request to the floor app, timed."""

    def __init__(self, client: HttpClient) -> None:
        self.c = client
        self.lat: dict[str, list[float]] = {"request": []}

    def reset(self) -> None:
        self.lat = {"request": []}

    def call(self, op: str) -> None:
        t0 = time.perf_counter()
        self.c.request("POST", "/hb", {})
        self.lat["request"].append(time.perf_counter() - t0)


def _pause(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def one_round(
    tmp: Path, r: int, pauses: list[float], scale: float, seed_: int, transports: list[str]
) -> dict[str, Any]:
    per_side = int(sum(SAMPLES.get(p, 100) for p in pauses) * 3 * scale)
    emb_db, http_db = str(tmp / f"embedded{r}.db"), str(tmp / f"http{r}.db")
    seed(emb_db, 5000 + per_side)
    seed(http_db, 5000 + per_side * len(transports))  # one board, each transport a node
    corral_srv = Server("corral", http_db)
    floor_srv = Server("floor", str(tmp / f"floor{r}.db"))
    embedded = corral.connect(f"sqlite:///{emb_db}")
    admin = corral.connect(f"http://127.0.0.1:{corral_srv.port}", token=TOKEN)
    clients: list[Any] = [embedded, admin]
    try:
        sides: dict[str, Any] = {"embedded": Side(embedded)}
        for name in transports:
            cls = TRANSPORTS[name]
            node = NODE if name == "library" else HAND_NODE
            admin.register_node(node, "developer", heartbeat_interval=3600)
            token = admin.node_tokens[node]
            http = cls(f"http://127.0.0.1:{corral_srv.port}", token=token)
            floor = cls(f"http://127.0.0.1:{floor_srv.port}", token=None)
            clients += [http, floor]
            sides[HTTP_SIDE[name]] = Side(http, node)
            sides[FLOOR_SIDE[name]] = FloorSide(floor)
        turns = [(name, op) for name, side in sides.items() for op in side.lat]
        rng = random.Random(seed_ + r)
        for side in sides.values():  # warm every path and connection up, untimed
            for op in list(side.lat):
                for _ in range(50):
                    side.call(op)
        out: dict[str, Any] = {}
        for pause_ms in pauses:
            for side in sides.values():
                side.reset()
            n = max(5, int(SAMPLES.get(pause_ms, 100) * scale))
            for _ in range(n):
                rng.shuffle(turns)
                for name, op in turns:
                    _pause(pause_ms / 1e3)
                    sides[name].call(op)
            res: dict[str, Any] = {
                name: {op: percentiles(lat) for op, lat in side.lat.items()}
                for name, side in sides.items()
            }
            res["ratios"] = _ratios(res, transports)
            out[f"{pause_ms:g}"] = res
        return out
    finally:
        for c in clients:
            c.close()
        corral_srv.stop()
        floor_srv.stop()


def _ratios(res: dict[str, Any], transports: list[str]) -> dict[str, float]:
    """HTTP / embedded per operation (the first transport's, and ``hand_…`` for the
    hand-written one when both ran), and library / hand-written when both ran."""
    ratios: dict[str, float] = {}
    emb = res["embedded"]
    for name in transports:
        pre = "" if name == transports[0] else f"{name}_"
        http, floor = res[HTTP_SIDE[name]], res[FLOOR_SIDE[name]]
        for op in OPS:
            for q in ("p50", "p99"):
                ratios[f"{pre}{op}_{q}"] = http[op][q] / emb[op][q]
        ratios[f"{pre}floor_vs_embedded_heartbeat_p50"] = (
            floor["request"]["p50"] / emb["heartbeat"]["p50"]
        )
        ratios[f"{pre}http_heartbeat_vs_floor_p50"] = (
            http["heartbeat"]["p50"] / floor["request"]["p50"]
        )
    if {"library", "hand"} <= set(transports):
        lib, hand = res["http"], res["http_hand"]
        for op in OPS:
            for q in ("p50", "p99"):
                ratios[f"library_vs_hand_{op}_{q}"] = lib[op][q] / hand[op][q]
        ratios["library_vs_hand_floor_p50"] = (
            res["floor"]["request"]["p50"] / res["floor_hand"]["request"]["p50"]
        )
    return ratios


def _transports(value: str) -> list[str]:
    names = [v for v in value.split(",") if v]
    bad = [v for v in names if v not in TRANSPORTS]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a comma-separated subset of {', '.join(TRANSPORTS)}")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--pauses",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=list(PAUSES_MS),
        help="milliseconds between calls, comma-separated (default 0,1,10,100)",
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the samples per pause")
    ap.add_argument(
        "--transports",
        type=_transports,
        default=list(TRANSPORTS),
        help="the remote client's transports timed side by side: library (urllib3, "
        "corral's) and hand (the hand-written baseline); default library,hand",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "http_pace.json")
    ap.add_argument("--quick", action="store_true", help="a short run (smoke)")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.pauses, args.scale = 1, [0.0, 1.0], 0.05
    both = {"library", "hand"} <= set(args.transports)
    tmp = Path(tempfile.mkdtemp(prefix="corral-http-pace-"))
    rounds = []
    try:
        for r in range(args.repeat):
            t0 = time.monotonic()
            rounds.append(one_round(tmp, r, args.pauses, args.scale, args.seed, args.transports))
            parts = []
            for k, v in rounds[-1].items():
                rt = v["ratios"]
                part = (
                    f"{k} ms: heartbeat {rt['heartbeat_p50']:.1f}x, "
                    f"step {rt['complete_and_claim_p50']:.1f}x"
                )
                if both:
                    step = rt["library_vs_hand_complete_and_claim_p50"]
                    part += f" (library/hand step {step:.2f})"
                parts.append(part)
            print(
                f"round {r + 1}/{args.repeat} ({time.monotonic() - t0:.0f} s): " + ", ".join(parts),
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(*path: str) -> float:
        return _median(rounds, *path)

    side_ops = [("embedded", OPS)]
    for name in args.transports:
        side_ops += [(HTTP_SIDE[name], OPS), (FLOOR_SIDE[name], ("request",))]
    summary: dict[str, Any] = {}
    for pause in rounds[0]:
        s: dict[str, Any] = {}
        for side, ops in side_ops:
            for op in ops:
                s[f"{side}/{op}"] = {q: med(pause, side, op, q) * 1e3 for q in ("p50", "p99")}
        s["ratios"] = {k: med(pause, "ratios", k) for k in rounds[0][pause]["ratios"]}
        summary[pause] = s
    write_json(
        args.out,
        {
            "bench": "http_pace",
            "machine": machine_info(),
            "repeat": args.repeat,
            "pauses_ms": args.pauses,
            "scale": args.scale,
            "transports": args.transports,
            "median": summary,
            "rounds": rounds,
        },
    )
    names = {
        "heartbeat": "heartbeat",
        "claim": "claim_best_task",
        "complete": "complete_task",
        "complete_and_claim": "complete_and_claim",
    }
    first = args.transports[0]
    http, floor = HTTP_SIDE[first], FLOOR_SIDE[first]
    print(f"\nOne caller, a pause before each call; ms, median of {args.repeat} rounds")
    print(f"HTTP: the {first} transport\n")
    rows = []
    for pause, s in summary.items():
        for op in OPS:
            e, h, r = s[f"embedded/{op}"], s[f"{http}/{op}"], s["ratios"]
            rows.append([pause, names[op], e["p50"], h["p50"], r[f"{op}_p50"], e["p99"],
                         h["p99"], r[f"{op}_p99"]])  # fmt: skip
        f = s[f"{floor}/request"]
        rows.append([pause, "floor request", None, f["p50"], s["ratios"]
                     ["floor_vs_embedded_heartbeat_p50"], None, f["p99"], None])  # fmt: skip
    heads = ["pause ms", "operation", "embedded p50", "HTTP p50", "HTTP/emb p50",
             "embedded p99", "HTTP p99", "HTTP/emb p99"]  # fmt: skip
    print(table(heads, rows))
    print("\n(floor request row: HTTP/emb p50 is one floor request over an embedded heartbeat)")
    if both:
        print("\nThe remote client's transport: library (urllib3) / hand-written; ms\n")
        rows = []
        for pause, s in summary.items():
            r = s["ratios"]
            for op in OPS:
                lib, hand = s[f"http/{op}"], s[f"http_hand/{op}"]
                rows.append([pause, names[op], hand["p50"], lib["p50"],
                             r[f"library_vs_hand_{op}_p50"], hand["p99"], lib["p99"],
                             r[f"library_vs_hand_{op}_p99"]])  # fmt: skip
            lib, hand = s["floor/request"], s["floor_hand/request"]
            ratio = r["library_vs_hand_floor_p50"]
            rows.append([pause, "floor request", hand["p50"], lib["p50"], ratio,
                         hand["p99"], lib["p99"], None])  # fmt: skip
        heads = ["pause ms", "operation", "hand p50", "library p50", "library/hand p50",
                 "hand p99", "library p99", "library/hand p99"]  # fmt: skip
        print(table(heads, rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
