"""A userspace TCP proxy that delays, drops and freezes the connections it relays,
on command: the harness's stand-in for ``tc netem``, which this kernel lacks
("Specified qdisc kind is unknown").

One asyncio loop in a thread of the harness runs every ``Proxy``. Each accepted
connection gets a connection to the target and two pumps. The faults apply to every
chunk a pump forwards while they last:

- ``delay(seconds, for_)``: each chunk waits ``seconds`` before it is forwarded, so a
  round trip takes twice that longer;
- ``freeze(for_)``: nothing is forwarded until it ends (a stall: the connections stay
  open, their data waits);
- ``drop(p, for_)``: each chunk ends its connection (both sides closed) with
  probability ``p`` -- a userspace proxy cannot lose a TCP segment and let TCP resend
  it, so "loss" here is what lasting loss does to a session: the connection breaks.

The accepted side keeps the database server's own dead-peer settings (keepalives
idle 10 s, 3 probes 2 s apart, ``TCP_USER_TIMEOUT`` 16 s): when a host is cut off by
its link going down, the proxy closes the upstream connection when PostgreSQL itself
would have noticed, so the server ends that host's sessions (and releases its
advisory locks) at the same bound as without the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any

__all__ = ["KEEPALIVE", "Proxy", "ProxyLoop"]

# (idle, interval, count, user timeout ms): PostgreSQL's tcp_keepalives_* in the
# harness's cluster match these.
KEEPALIVE = (10, 2, 3, 16_000)


def _keepalive(sock: socket.socket) -> None:
    idle, interval, count, user_timeout = KEEPALIVE
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout)


class ProxyLoop:
    """The asyncio loop (in a daemon thread) that every proxy runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="chaos-proxy", daemon=True
        )
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Cancel every relay (each closes its connections), then stop and close."""

        async def cancel() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.call(cancel())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Proxy:
    """Relays ``listen`` (host, port) to ``target`` (host, port); see the module."""

    def __init__(
        self, loop: ProxyLoop, name: str, listen: tuple[str, int], target: tuple[str, int]
    ) -> None:
        self.loop = loop
        self.name = name
        self.listen = listen
        self.target = target
        self._delay = (0.0, 0.0)  # (seconds per chunk, until monotonic)
        self._freeze_until = 0.0
        self._drop = (0.0, 0.0)  # (probability per chunk, until)
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self.relayed = 0  # connections accepted
        self.dropped = 0  # connections ended by a drop
        loop.call(self._start())

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.listen[0], self.listen[1], reuse_address=True
        )

    def delay(self, seconds: float, for_: float) -> None:
        self._delay = (seconds, time.monotonic() + for_)

    def freeze(self, for_: float) -> None:
        self._freeze_until = time.monotonic() + for_

    def drop(self, probability: float, for_: float) -> None:
        self._drop = (probability, time.monotonic() + for_)

    def clear(self) -> None:
        self._delay = (0.0, 0.0)
        self._freeze_until = 0.0
        self._drop = (0.0, 0.0)

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            for w in list(self._conns):
                w.close()

        with contextlib.suppress(Exception):
            self.loop.call(stop())

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            _keepalive(sock)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), timeout=5
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        self.relayed += 1
        self._conns |= {writer, up_writer}
        ends = (writer, up_writer)
        await asyncio.gather(
            self._pump(reader, up_writer, ends), self._pump(up_reader, writer, ends)
        )
        self._conns -= {writer, up_writer}

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        ends: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await src.read(65536):
                while time.monotonic() < self._freeze_until:
                    await asyncio.sleep(0.02)
                seconds, until = self._delay
                if seconds and time.monotonic() < until:
                    await asyncio.sleep(seconds)
                p, until = self._drop
                if p and time.monotonic() < until and random.random() < p:
                    self.dropped += 1
                    break
                dst.write(data)
                await dst.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            for w in ends:  # one side ends: the other does too
                with contextlib.suppress(Exception):
                    w.close()
