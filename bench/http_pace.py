"""One caller at a worker's pace: latency of each operation, embedded and over HTTP,
when calls are spaced the way a worker spaces them.

``http_bench.py`` times one caller calling back to back. A worker does not: it
heartbeats every few seconds, claims after its last task's work, completes after
this one's. Between two calls the machine runs other things, and a call finds its
code and data out of the CPU's caches. This script times the same operations one
at a time after a pause (0, 1, 10 and 100 ms by default), on both sides:

- **embedded**: ``corral.connect("sqlite:///...")`` in this process;
- **HTTP**: the remote client against ``corral serve``'s app on uvicorn (uvloop +
  httptools, as ``http_bench.py`` runs it), a node token, its own fresh board seeded
  like the embedded one;
- **floor**: one request to ``http_bench.py``'s floor app (a Starlette route that
  updates one SQLite row), what one HTTP round trip costs at best here.

The HTTP and floor sides run once per transport of the remote client
(``--transports``, default ``hand,library``): **hand** is corral's ``HttpClient``
(its hand-written HTTP/1.1 transport), **library** the same client on urllib3's
pool (``LibraryClient`` below, the candidate that issue asked for). Both call the
same server and board, each as its own node; the first named is the ``http`` and
``floor`` side, the other ``http_library`` and ``floor_library``.

Operations: heartbeat; claim_best_task; complete_task; complete_and_claim (a
worker's step in one call). The sides take turns call by call in a shuffled order
(seeded), each call after its own pause, so a burst of machine load hits every
side alike; latency is the call alone, the pause excluded. Ratios are HTTP /
embedded p50 (and p99) per operation and pause, and library / hand-written, taken
within a round, median over ``--repeat`` rounds. Run: ``python bench/http_pace.py
[--repeat 3] [--scale 0.5] [--transports hand,library] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError, NewConnectionError, ProtocolError, ReadTimeoutError
from urllib3.util import Timeout

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


# --- the candidate: the same client on urllib3 ----------------------------------------
# A pool of keep-alive connections (TCP_NODELAY) shared by the client's threads, no
# urllib3 retries or redirects; the one re-send of the hand-written client (a request
# on a reused connection that ended before any byte of the answer) kept exactly.

# Connections a client keeps open between calls (one per thread that calls at once;
# a thread beyond them opens its own and closes it after its call).
_LIB_POOL_SIZE = 32
# The errors of a connection the server closed before any of the answer arrived.
_CLOSED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_lib_sent = threading.local()  # .reused: whether this thread's last request reused a connection


class _LibConnection(HTTPConnection):
    """urllib3's connection with two changes. It counts the requests sent since it
    (re)connected, so a failed request knows whether it went out on a reused
    connection. And it writes a request with a body in one ``send`` (urllib3 writes
    the head, then the body), as the hand-written client does."""

    sent = 0
    _head: bytes | None = None  # the request head held back until its body is sent

    def request(self, method: str, url: str, body: Any = None, *args: Any, **kw: Any) -> None:
        _lib_sent.reused = self.sent > 0
        self.sent += 1
        self._head = b"" if body else None
        try:
            super().request(method, url, body, *args, **kw)
        finally:
            self._head = None

    def send(self, data: Any) -> None:
        head = self._head
        if head is not None:
            if not head:  # the head: hold it for the body
                self._head = bytes(data)
                return
            self._head = None
            data = head + data  # the body: both in one write
        super().send(data)

    def close(self) -> None:
        self.sent = 0
        super().close()


class _LibTLSConnection(_LibConnection, HTTPSConnection):
    """The same over TLS (the system's trusted certificates, the host name checked)."""


class _Pool(HTTPConnectionPool):
    ConnectionCls = _LibConnection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _LibTLSConnection


class LibraryClient(HttpClient):
    """``HttpClient`` with urllib3's pooled transport (the candidate)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(url, token=token, timeout=timeout)
        self._timeout = Timeout(timeout)
        headers = {"Accept": "application/json", "User-Agent": "corral"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._headers = headers
        self._headers_json = {**headers, "Content-Type": "application/json"}
        self._pool = self._new_pool()

    def _new_pool(self) -> HTTPConnectionPool:
        """A pool of keep-alive connections: thread-safe, never blocking (a thread
        that finds no idle connection opens one), no retries, no redirects."""
        kw: dict[str, Any] = {"maxsize": _LIB_POOL_SIZE, "block": False, "retries": False}
        if self._https:
            import ssl

            return _TLSPool(self._host, self._port, ssl_context=ssl.create_default_context(), **kw)
        return _Pool(self._host, self._port, **kw)

    def close(self) -> None:
        """Close the idle connections (one in use closes when its call ends); a later
        call opens new ones."""
        super().close()
        with self._lock:
            pool, self._pool = self._pool, self._new_pool()
        pool.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        timeout: float | None = None,
        body_field: str | None = None,  # names a bad argument in errors (not needed here)
    ) -> Any:
        """One API call; returns the decoded JSON (or text when ``raw``)."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        if not target.isascii():
            raise InvalidInputError(f"not an ASCII request target: {target!r}")
        data = None
        headers = self._headers
        if body is not None:
            try:
                data = _ENCODER.encode(body).encode()
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"arguments must be JSON data: {exc}") from None
            headers = self._headers_json
        limit = self._timeout if timeout is None else Timeout(timeout)
        for attempt in (0, 1):
            _lib_sent.reused = False
            try:
                resp = self._pool.urlopen(
                    method,
                    target,
                    body=data,
                    headers=headers,
                    retries=False,
                    redirect=False,
                    assert_same_host=False,
                    timeout=limit,
                    preload_content=False,
                )
                break
            except ProtocolError as exc:  # the connection ended before the answer's head
                cause = exc.args[1] if len(exc.args) > 1 else exc
                if attempt == 0 and _lib_sent.reused and isinstance(cause, _CLOSED):
                    continue  # the server closed an idle keep-alive connection
                raise self._lost(cause) from None
            except (HTTPError, OSError) as exc:
                raise self._unreachable(exc) from None
        try:
            payload = resp.data  # the body, the connection back in the pool once read
        except ProtocolError as exc:
            raise self._lost(exc.args[1] if len(exc.args) > 1 else exc) from None
        except (HTTPError, OSError) as exc:
            raise self._unreachable(exc) from None
        status = resp.status
        if status >= 400:
            raise self._error(status, payload)
        if raw:
            return payload.decode()
        return json.loads(payload.decode())

    def _lost(self, cause: object) -> StoreUnavailableError:
        return StoreUnavailableError(f"lost the connection to {self.url}: {cause}")

    def _unreachable(self, exc: BaseException) -> StoreUnavailableError:
        if isinstance(exc, ReadTimeoutError):
            reason: object = "timed out waiting for the answer"
        elif isinstance(exc, NewConnectionError) and exc.__cause__ is not None:
            reason = exc.__cause__  # the socket's error, e.g. connection refused
        else:
            reason = exc
        return StoreUnavailableError(f"cannot reach {self.url}: {reason}; is corral serve running?")


# corral's remote client (hand-written) and the candidate (urllib3). The first named
# in --transports is timed as "http" (and "floor"), the other as "http_<name>".
TRANSPORTS = {"hand": HttpClient, "library": LibraryClient}


def side_names(transports: list[str]) -> dict[str, tuple[str, str, str]]:
    """Each transport's HTTP side, floor side and node (on the shared board)."""
    return {
        name: ("http", "floor", NODE) if i == 0 else (f"http_{name}", f"floor_{name}", f"n{i}")
        for i, name in enumerate(transports)
    }


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
        for name, (http_side, floor_side, node) in side_names(transports).items():
            cls = TRANSPORTS[name]
            admin.register_node(node, "developer", heartbeat_interval=3600)
            token = admin.node_tokens[node]
            http = cls(f"http://127.0.0.1:{corral_srv.port}", token=token)
            floor = cls(f"http://127.0.0.1:{floor_srv.port}", token=None)
            clients += [http, floor]
            sides[http_side] = Side(http, node)
            sides[floor_side] = FloorSide(floor)
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
    names = side_names(transports)
    for name, (http_side, floor_side, _) in names.items():
        pre = "" if name == transports[0] else f"{name}_"
        http, floor = res[http_side], res[floor_side]
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
        lib, hand = res[names["library"][0]], res[names["hand"][0]]
        for op in OPS:
            for q in ("p50", "p99"):
                ratios[f"library_vs_hand_{op}_{q}"] = lib[op][q] / hand[op][q]
        ratios["library_vs_hand_floor_p50"] = (
            res[names["library"][1]]["request"]["p50"] / res[names["hand"][1]]["request"]["p50"]
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
        help="the remote client's transports timed side by side: hand (corral's "
        "hand-written one) and library (urllib3); default hand,library",
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
    names = side_names(args.transports)
    for http_side, floor_side, _ in names.values():
        side_ops += [(http_side, OPS), (floor_side, ("request",))]
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
    op_names = {
        "heartbeat": "heartbeat",
        "claim": "claim_best_task",
        "complete": "complete_task",
        "complete_and_claim": "complete_and_claim",
    }
    first = args.transports[0]
    http, floor, _ = names[first]
    print(f"\nOne caller, a pause before each call; ms, median of {args.repeat} rounds")
    print(f"HTTP: the {first} transport ({TRANSPORTS[first].__name__})\n")
    rows = []
    for pause, s in summary.items():
        for op in OPS:
            e, h, r = s[f"embedded/{op}"], s[f"{http}/{op}"], s["ratios"]
            rows.append(
                [
                    pause,
                    op_names[op],
                    e["p50"],
                    h["p50"],
                    r[f"{op}_p50"],
                    e["p99"],
                    h["p99"],
                    r[f"{op}_p99"],
                ]
            )
        f = s[f"{floor}/request"]
        rows.append(
            [
                pause,
                "floor request",
                None,
                f["p50"],
                s["ratios"]["floor_vs_embedded_heartbeat_p50"],
                None,
                f["p99"],
                None,
            ]
        )
    heads = [
        "pause ms",
        "operation",
        "embedded p50",
        "HTTP p50",
        "HTTP/emb p50",
        "embedded p99",
        "HTTP p99",
        "HTTP/emb p99",
    ]
    print(table(heads, rows))
    print("\n(floor request row: HTTP/emb p50 is one floor request over an embedded heartbeat)")
    if both:
        print("\nThe remote client's transport: library (urllib3) / hand-written; ms\n")
        rows = []
        for pause, s in summary.items():
            r = s["ratios"]
            for op in OPS:
                lib, hand = s[f"{names['library'][0]}/{op}"], s[f"{names['hand'][0]}/{op}"]
                rows.append(
                    [
                        pause,
                        op_names[op],
                        hand["p50"],
                        lib["p50"],
                        r[f"library_vs_hand_{op}_p50"],
                        hand["p99"],
                        lib["p99"],
                        r[f"library_vs_hand_{op}_p99"],
                    ]
                )
            lib = s[f"{names['library'][1]}/request"]
            hand = s[f"{names['hand'][1]}/request"]
            ratio = r["library_vs_hand_floor_p50"]
            rows.append(
                [
                    pause,
                    "floor request",
                    hand["p50"],
                    lib["p50"],
                    ratio,
                    hand["p99"],
                    lib["p99"],
                    None,
                ]
            )
        heads = [
            "pause ms",
            "operation",
            "hand p50",
            "library p50",
            "library/hand p50",
            "hand p99",
            "library p99",
            "library/hand p99",
        ]
        print(table(heads, rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
