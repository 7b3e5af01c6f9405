"""The HTTP backend: the real app on a real uvicorn server, over a fresh SQLite file.

One uvicorn server per test process (started on first use, on a free port of
127.0.0.1) serves each test's own app: a fresh cluster on the test's FakeClock.
The client is ``corral.connect("http://…", token=…)``, i.e. ``HttpClient``, wrapped in
``ReadBack``: after each write, a separate process reads the file and must see what the
server committed.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

import corral
from corral.clock import FakeClock
from corral.operations import OPERATIONS
from corral.types import Client
from tests.support.backends.readback import file_digest

TOKEN = "test-operator-token"


class _Switch:
    """An ASGI app that forwards to the current test's app."""

    def __init__(self) -> None:
        self.target: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await self.target(scope, receive, send)


_server: dict[str, Any] = {}
_lock = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_uvicorn(app: Any, port: int, **options: Any) -> tuple[Any, threading.Thread]:
    """Run ``app`` on uvicorn in a daemon thread; return once it accepts connections."""
    import uvicorn

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.01)
    return server, thread


def stop_uvicorn(server: Any, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=10)


def _shared_server() -> tuple[_Switch, int]:
    with _lock:
        if "switch" not in _server:
            switch = _Switch()
            port = free_port()
            start_uvicorn(switch, port)
            _server.update(switch=switch, port=port)
        return _server["switch"], _server["port"]


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Client:
    from corral.server import create_app

    db = tmp_path / "corral.db"
    embedded = corral.connect(f"sqlite:///{db}", clock=clock)
    switch, port = _shared_server()
    switch.target = create_app(embedded, token=TOKEN, monitor=False, mcp=False)
    request.addfinalizer(embedded.close)
    client = ReadBack(corral.connect(f"http://127.0.0.1:{port}", token=TOKEN), db)
    return cast("Client", client)  # ReadBack forwards every Client method (__getattr__)


# The operations that change the cluster: every call but a GET.
_WRITES = frozenset(op.name for op in OPERATIONS if op.method != "GET")


class _OtherProcess:
    """One process per test process (``tests.support.backends.readback``) that reads a
    database file on a new connection per request, as any new reader would."""

    _proc: subprocess.Popen[str] | None = None
    _lock = threading.Lock()  # one request at a time on its pipes

    @classmethod
    def digest(cls, db: Path) -> str:
        with cls._lock:
            return cls._digest(db)

    @classmethod
    def _digest(cls, db: Path) -> str:
        if cls._proc is None or cls._proc.poll() is not None:
            cls._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.backends.readback"],
                cwd=Path(__file__).resolve().parents[3],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        proc = cls._proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(str(db)) + "\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline() or '{"error": "the reader exited"}')
        if "error" in out:
            raise AssertionError(f"the other process could not read {db}: {out['error']}")
        return str(out["digest"])


class ReadBack:
    """The HTTP client, with each write read back from another process: after every
    call that can change the cluster, a new connection in a separate process must see
    the very database this process's server store sees (the same digest of every
    table). A server whose commits reach only its own connections (a WAL deleted
    under it, a lost lock) fails the call's test here, whatever it answered."""

    def __init__(self, client: Any, db: Path) -> None:
        self._client = client
        self._db = db

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in _WRITES:
            return attr

        def written(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self._check(name)

        return written

    def _check(self, name: str) -> None:
        # Another thread's call may commit between the two reads: the two must agree
        # once it has (at once, when nothing else runs).
        deadline = time.monotonic() + 2
        while True:
            try:
                here = file_digest(str(self._db))  # what this process's server committed
            except sqlite3.Error as exc:
                raise AssertionError(
                    f"after {name}: this process cannot read its server's database: {exc}"
                ) from exc
            if _OtherProcess.digest(self._db) == here:
                return
            assert time.monotonic() < deadline, (
                f"after {name}: another process reads a different database than the"
                f" server committed ({self._db})"
            )
            time.sleep(0.01)

    def close(self) -> None:
        self._client.close()


@contextmanager
def serving(tmp_path: Path, *, clock: Any = None, **options: Any) -> Iterator[tuple[str, Any]]:
    """A dedicated server for one test: ``(base_url, embedded_cluster)``. ``options``
    go to ``create_app`` (monitor and MCP are off unless asked for)."""
    from corral.server import create_app

    embedded = corral.connect(f"sqlite:///{tmp_path / 'served.db'}", clock=clock)
    options = {"token": TOKEN, "monitor": False, "mcp": False, "sse_poll": 0.05, **options}
    port = free_port()
    server, thread = start_uvicorn(
        create_app(embedded, **options), port, timeout_graceful_shutdown=1
    )
    try:
        yield f"http://127.0.0.1:{port}", embedded
    finally:
        stop_uvicorn(server, thread)
        embedded.close()
