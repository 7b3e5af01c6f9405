"""Probes: the heartbeat of a service that prints no ``HEARTBEAT`` line.

An agent whose ``heartbeat`` is a table (``{ http = URL }``, ``{ tcp = "host:port" }``
or ``{ exec = [argv...] }``, with ``interval``, ``timeout`` and ``failures``) is
probed by the supervisor every ``interval`` seconds from its spawn:

- ``http``: a ``GET`` of the URL (``http://`` or ``https://``) answered with a status
  below 400 within ``timeout``;
- ``tcp``: a connection to ``host:port`` accepted within ``timeout``;
- ``exec``: the command (in the agent's working directory and its own session,
  with the supervisor's environment, no input, output discarded) exits 0 within
  ``timeout`` (else its group is killed).

A success is a beat: a STARTING agent becomes RUNNING at its first one (no success
within ``startup_timeout``: UNHEALTHY, as for the other heartbeat kinds);
``failures`` consecutive failures of a RUNNING (or WAITING) agent make it UNHEALTHY,
and its process is stopped and goes through the restart policy.

Every probe is a coroutine on the supervisor's loop: sockets through asyncio's
streams, the ``exec`` command's exit through a pidfd reader (no thread, no asyncio
child watcher); nothing waits on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from corral.supervisor import process as proc
from corral.supervisor.manifest import Probe

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["Probes", "check"]


async def check(
    probe: Probe, *, cwd: str | None = None, env: dict[str, str] | None = None
) -> str | None:
    """Run ``probe`` once: ``None`` when it succeeded, else why it failed."""
    try:
        async with asyncio.timeout(probe.timeout):
            if probe.kind == "http":
                return await _http(str(probe.target))
            if probe.kind == "tcp":
                host, _, port = str(probe.target).rpartition(":")
                _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return None
            return await _exec(tuple(probe.target), cwd=cwd, env=env)
    except TimeoutError:
        return f"no answer within {probe.timeout:g} s"
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        return f"{type(e).__name__}: {e}"


async def _http(url: str) -> str | None:
    u = urlsplit(url)
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    reader, writer = await asyncio.open_connection(u.hostname, port, ssl=tls or None)
    try:
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.netloc.rpartition("@")[2]
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: corral-probe\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    parts = line.decode("latin-1").split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return f"not an HTTP answer: {line[:80]!r}"
    status = int(parts[1])
    return None if status < 400 else f"HTTP {status}"


async def _exec(
    argv: tuple[str, ...], *, cwd: str | None, env: dict[str, str] | None
) -> str | None:
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    _RUNNING.add(popen.pid)
    pidfd = os.pidfd_open(popen.pid)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(pidfd, exited)
    status: int | None = None

    def reap() -> None:
        nonlocal status
        loop.remove_reader(pidfd)
        with contextlib.suppress(ChildProcessError):
            res = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
            if res is not None:
                status = res.si_status if res.si_code == os.CLD_EXITED else -res.si_status
        popen.returncode = -1 if status is None else status  # Popen must not wait again
        os.close(pidfd)
        _RUNNING.discard(popen.pid)

    try:
        await ended
    finally:
        loop.remove_reader(pidfd)
        if ended.done():
            reap()
        else:  # timed out or cancelled: kill its group, reap it when it is gone
            proc.signal_group(popen.pid, signal.SIGKILL)
            loop.add_reader(pidfd, reap)
    return None if status == 0 else f"{argv[0]} exited {status}"


_RUNNING: set[int] = set()  # exec probes in flight (the subreaper must not reap them)


class Probes:
    """The probe loops of one supervisor's agents (one task per probed process)."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def pids(self) -> set[int]:
        """The probe commands running now."""
        return set(_RUNNING)

    def start(self, a: _Agent, child: proc.Child) -> None:
        """Probe ``a``'s process ``child`` until it is no longer ``a``'s."""
        old = self._tasks.pop(a.spec.id, None)
        if old is not None:
            old.cancel()
        if a.spec.probe is None or self.sup.loop is None:
            return
        self._tasks[a.spec.id] = asyncio.ensure_future(self._loop(a, child))

    def close(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        self._tasks.clear()

    async def _loop(self, a: _Agent, child: proc.Child) -> None:
        probe = a.spec.probe
        assert probe is not None
        cwd = a.spec.cwd  # an exec probe runs where the agent runs
        if cwd is not None and not os.path.isabs(cwd):
            cwd = os.path.join(os.path.dirname(os.path.abspath(self.sup.manifest.path)), cwd)
        while a.child is child:
            why = await check(probe, cwd=cwd)
            if a.child is not child:
                return
            if why is None:
                a.probe_failures = 0
                self.sup.beat(a, self.sup.clock(), "probe ok")
                self.sup.kick()
            else:
                a.probe_failures += 1
                a.beat_status = f"probe failed: {why}"
                if a.probe_failures >= probe.failures:
                    self.sup.probe_failed(a, f"{why} ({a.probe_failures} in a row)")
            await asyncio.sleep(probe.interval)
