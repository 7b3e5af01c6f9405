"""The floor of ``corral serve``'s heartbeat: a minimal app served the way corral serves.

It answers ``POST /v1/nodes/{id}/heartbeat`` (and ``GET /healthz``, for the bench's
start check) with the least work there is, so ``bench/fleet_size.py`` can measure it
exactly as it measures ``corral serve``: same load client, connections and machine,
in the same rounds. What one heartbeat minimally needs, per ``--store``:

- ``none``: nothing; the answer only (the HTTP stack's own cost and scaling);
- ``sqlite``: one ``UPDATE nodes SET last_heartbeat=? WHERE id=?`` committed on its
  own, on the event loop (as corral's SQLite short calls run), in WAL mode with
  ``synchronous=NORMAL`` (corral's store's pragmas), the processes taking turns at
  writing through an ``flock`` on a file next to the database (as corral's writers
  queue on ``<file>-lock``; SQLite's own busy handler would sleep milliseconds);
- ``postgres``: the same UPDATE, autocommit, through psycopg (async, on the loop),
  on one of 4 connections per process (corral's API thread pool is 4 threads).

No auth, no routing table, no validation, no reading the row back: the answer is a
JSON object of the size of corral's ``NodeOut`` (385 bytes) with the id and the time
filled in. Served as ``corral serve`` serves (src/corral/cli/serve.py): uvicorn
(uvloop and httptools, its "auto" choices), the parent binding the port, then one
process serving it, or ``--workers N`` processes forked by corral's own
``run_workers``, each accepting on the inherited socket.

    python bench/floor_app.py --port 7071 --workers 2 --store sqlite --url sqlite:///f.db
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import signal
import socket
import sqlite3
import sys
import time
from typing import Any

# corral's answer to a heartbeat, its values aside (385 bytes for a short id).
_ANSWER = (
    '{{"id":"{id}","role":"developer","status":"idle","model":null,"strength":null,'
    '"current_task_id":null,"idle_since":{t:.6f},"last_activity":{t:.6f},'
    '"last_heartbeat":{t:.6f},"heartbeat_interval":200,"health":null,"heartbeat":{{}},'
    '"host":null,"pid":null,"registered_at":{t:.6f},"terminated_at":null,'
    '"dead_at":{t:.6f},"incarnation":2,"cursor":0}}'
)
_TYPE = (b"content-type", b"application/json")
_SQL = "UPDATE nodes SET last_heartbeat = {} WHERE id = {}"
_PG_CONNS = 4


class SqliteWrite:
    """One autocommit UPDATE per beat, writers queued on an ``flock``."""

    def __init__(self, url: str) -> None:
        path = url.removeprefix("sqlite:///")
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.lock = open(path + "-floorlock", "a")  # noqa: SIM115  # held for the process's life
        self.sql = _SQL.format("?", "?")

    async def open(self) -> None:
        pass

    async def beat(self, node: str, now: float) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            self.conn.execute(self.sql, (now, node))
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)


class PgWrite:
    """One autocommit UPDATE per beat on one of a few async connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.free: asyncio.Queue[Any] = asyncio.Queue()
        self.sql = _SQL.format("%s", "%s")

    async def open(self) -> None:  # in the worker's loop, after the fork
        import psycopg

        for _ in range(_PG_CONNS):
            self.free.put_nowait(await psycopg.AsyncConnection.connect(self.url, autocommit=True))

    async def beat(self, node: str, now: float) -> None:
        conn = await self.free.get()
        try:
            await conn.execute(self.sql, (now, node))
        finally:
            self.free.put_nowait(conn)


class NoWrite:
    async def open(self) -> None:
        pass

    async def beat(self, node: str, now: float) -> None:
        pass


def make_app(store: str, url: str) -> Any:
    """The ASGI app; its store is opened at lifespan startup, in the serving process."""
    write: Any = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal write
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    write = {"none": NoWrite, "sqlite": SqliteWrite, "postgres": PgWrite}[store]
                    write = write() if store == "none" else write(url)
                    await write.open()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = scope["path"]
        if scope["method"] == "POST" and path.endswith("/heartbeat"):
            while (await receive()).get("more_body"):  # the body ({}), unread
                pass
            node = path[10:-10]  # /v1/nodes/{id}/heartbeat
            now = time.time()
            await write.beat(node, now)
            status, body = 200, _ANSWER.format(id=node, t=now).encode()
        elif path == "/healthz":
            status, body = 200, b'{"ok":true}'
        else:
            status, body = 404, b'{"error":"not_found"}'
        # Its length given (as corral gives it): uvicorn would send chunks otherwise.
        headers = [(b"content-length", str(len(body)).encode()), _TYPE]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def serve_one(sock: socket.socket, store: str, url: str) -> int:
    import uvicorn

    config = uvicorn.Config(make_app(store, url), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--store", choices=("none", "sqlite", "postgres"), default="none")
    ap.add_argument("--url", default="")
    a = ap.parse_args()
    # As corral serve's _listen: bound and listening before any process serves it.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(2048)
    if a.workers == 1:
        serve_one(sock, a.store, a.url)
        return
    from corral.cli.workers import run_workers

    stopped_by = run_workers(a.workers, lambda: serve_one(sock, a.store, a.url))
    if stopped_by is not None:
        signal.signal(stopped_by, signal.SIG_DFL)
        signal.raise_signal(stopped_by)
    sys.exit(3)


if __name__ == "__main__":
    main()
