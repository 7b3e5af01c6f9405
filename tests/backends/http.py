"""The HTTP backend: the real app on a real uvicorn server, over a fresh SQLite file.

One uvicorn server per test process (started on first use, on a free port of
127.0.0.1) serves each test's own app: a fresh cluster on the test's FakeClock.
The client is ``corral.connect("http://…", token=…)``, i.e. ``HttpClient``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.clock import FakeClock

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


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Any:
    from corral.server import create_app

    embedded = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    switch, port = _shared_server()
    switch.target = create_app(embedded, token=TOKEN, monitor=False, mcp=False)
    request.addfinalizer(embedded.close)
    return corral.connect(f"http://127.0.0.1:{port}", token=TOKEN)


@contextmanager
def serving(tmp_path: Path, *, clock: Any = None, **options: Any) -> Iterator[tuple[str, Any]]:
    """A dedicated server for one test: ``(base_url, embedded_cluster)``. ``options``
    go to ``create_app`` (monitor and MCP are off unless asked for)."""
    from corral.server import create_app

    embedded = corral.connect(f"sqlite:///{tmp_path / 'served.db'}", clock=clock)
    options = {"token": TOKEN, "monitor": False, "mcp": False, "sse_poll": 0.05, **options}
    port = free_port()
    server, thread = start_uvicorn(create_app(embedded, **options), port,
                                   timeout_graceful_shutdown=1)  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", embedded
    finally:
        stop_uvicorn(server, thread)
        embedded.close()
