"""The supervisor's side of the log daemon (:mod:`corral.supervisor.logd`).

Every child's stdout and stderr are pipes. The supervisor spawns the child with the
write ends, hands each read end to logd (:meth:`Output.attach`, which then closes
the supervisor's copy), so only logd reads them: output keeps flowing into
``logs/<agent>/<stream>.log``, rotated at ``log_max_bytes`` keeping ``log_keep``,
while no supervisor runs. logd tells the connected supervisor about the lines
starting with ``HEARTBEAT `` (the pipe heartbeat) and about each stream's end; the
supervisor reads those events on its loop (``loop.add_reader`` on the client's
socket), matching them to agents by pid.

After a supervisor restart, :meth:`Output.connect` reads logd's ``attached`` list up
to ``synced`` before adoption, so :attr:`Output.held` tells which adopted children's
streams logd still holds: an adopted pipe-heartbeat agent whose stdout logd holds
keeps being read (and timed out when it stops beating).

The crash record's last stderr lines are read from ``stderr.log`` (and the files
it rotated into since) once logd has drained the dead child's stderr (its ``eof``
event), or after :data:`TAIL_GRACE` seconds when a descendant still holds the pipe;
they are that run's only: they start where ``stderr.log`` ended when it was spawned.

If logd dies (the event socket closes while the supervisor did not ask it to stop),
it is logged as critical and a new logd is started for the children spawned from
then on. The children attached to the dead one keep their pipes, which nobody
reads any more: their next write gets EPIPE (SIGPIPE, which kills a process that
does not ignore it); a pipe-heartbeat agent among them is restarted by its
heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError, StoreUnavailableError
from corral.supervisor.agent import stderr_tail
from corral.supervisor.logd import LogdClient, ensure_logd

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["TAIL_GRACE", "Output"]

TAIL_GRACE = 2.0  # seconds to wait for logd to drain a dead child's stderr
SYNC_TIMEOUT = 10.0  # seconds to wait for logd's attached list on connect


class Output:
    """The supervisor's connection to its log daemon."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.client: LogdClient | None = None
        self.held: set[tuple[str, str, int | None]] = set()  # (agent, stream, pid)
        self._fd = -1
        self._closing = False
        self._pending: dict[tuple[str, int], tuple[asyncio.TimerHandle, Callable[[], None]]] = {}

    # ---- connection ---------------------------------------------------------------

    def connect(self, *, sync: bool = True) -> LogdClient:
        """Connect to the state dir's logd, starting it when none runs; with
        ``sync``, read the streams it still holds before returning. Raises
        ``StoreUnavailableError`` when logd cannot be started."""
        client = ensure_logd(self.sup.state_dir)
        events: list[dict[str, Any]] = []
        if sync:
            deadline = time.monotonic() + SYNC_TIMEOUT
            while not any(e.get("kind") in ("synced", "disconnected") for e in events):
                left = deadline - time.monotonic()
                if left <= 0:
                    self.sup.log("warning", "log daemon: no synced event", timeout=SYNC_TIMEOUT)
                    break
                events.extend(client.read_events(timeout=left))
        self.client = client
        loop = self.sup.loop
        if loop is not None and not client.closed:
            self._fd = client.fileno()
            loop.add_reader(self._fd, self._readable)
        self.sup.log("info", "log daemon connected", socket=str(client.socket_path))
        self._handle(events)
        return client

    def _ensure(self) -> LogdClient:
        if self.client is None or self.client.closed:
            return self.connect(sync=False)
        return self.client

    def _unwatch(self) -> None:
        if self._fd >= 0 and self.sup.loop is not None:
            self.sup.loop.remove_reader(self._fd)
        self._fd = -1

    def _lost(self, why: str) -> None:
        """logd went away without being asked: say so loudly, start a new one."""
        self._unwatch()
        if self.client is not None:
            self.client.close()
        self.client = None
        if self._closing:
            return
        streams = sorted({a for a, _s, _p in self.held})
        self.held.clear()
        self.sup.log(
            "critical",
            "log daemon lost: output of the running children now goes nowhere (their "
            "writes get EPIPE); starting a new one for the children spawned from now on",
            why=why,
            agents=streams,
        )
        try:
            self.connect(sync=False)
        except CorralError as e:
            self.sup.log("critical", "cannot restart the log daemon", error=e.message)

    # ---- attaching ----------------------------------------------------------------

    def attach(self, a: _Agent, pid: int, fds: dict[str, int]) -> None:
        """Hand the read ends ``{"stdout": fd, "stderr": fd}`` of ``a``'s child
        ``pid`` to logd; every fd is closed here, handed over or not."""
        try:
            for stream, fd in fds.items():
                self._attach_one(a, pid, stream, fd)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _attach_one(self, a: _Agent, pid: int, stream: str, fd: int) -> None:
        spec = a.spec
        for attempt in (1, 2):
            try:
                self._ensure().attach(
                    spec.id, stream, fd, max_bytes=spec.log_max_bytes, keep=spec.log_keep, pid=pid
                )
                self.held.add((spec.id, stream, pid))
                return
            except StoreUnavailableError as e:
                if attempt == 1:  # logd died since the last event: start another, retry
                    self._lost(f"attach failed: {e.message}")
                    continue
                err = e.message
            except CorralError as e:
                err = e.message
            self.sup.log(
                "critical",
                "cannot hand the output to the log daemon: the child's writes get EPIPE",
                agent=spec.id,
                stream=stream,
                pid=pid,
                error=err,
            )
            return

    # ---- events -------------------------------------------------------------------

    def _readable(self) -> None:
        if self.client is None:
            self._unwatch()
            return
        self._handle(self.client.read_events())

    def _handle(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            kind = ev.get("kind")
            key = (str(ev.get("agent")), str(ev.get("stream")), ev.get("pid"))
            if kind == "line":
                self.sup.on_line(key[0], key[1], ev.get("pid"), str(ev.get("line", "")))
            elif kind == "attached":
                self.held.add(key)
            elif kind == "eof":
                self.held.discard(key)
                if key[1] == "stderr" and isinstance(key[2], int):
                    self._stderr_done(key[0], key[2])
            elif kind == "dropped":
                self.sup.log("warning", "log daemon dropped events", count=ev.get("count"))
            elif kind == "shutdown" and not self._closing:
                self.sup.log("critical", "log daemon is shutting down (not asked by us)")
            elif kind == "disconnected":
                self._lost("event connection closed")
                return

    # ---- the stderr tail of a crash -----------------------------------------------

    def after_drain(self, a: _Agent, pid: int | None, then: Callable[[list[str]], None]) -> None:
        """Call ``then(last stderr lines)`` once logd has written everything the
        dead child ``pid`` wrote to stderr (at once when that is already so)."""
        agent = a.spec.id
        path = self.sup.logs_dir / agent / "stderr.log"
        since = a.run_start  # this run's lines only (a restart may begin meanwhile)

        def done() -> None:
            if pid is not None:
                self._pending.pop((agent, pid), None)
            then(stderr_tail(path, since=since))

        loop = self.sup.loop
        if pid is None or loop is None or (agent, "stderr", pid) not in self.held:
            done()  # nothing to wait for: no pipe, or logd already drained it (eof)
            return
        self._pending[(agent, pid)] = (loop.call_later(TAIL_GRACE, done), done)

    def _stderr_done(self, agent: str, pid: int) -> None:
        pending = self._pending.pop((agent, pid), None)
        if pending is not None:
            pending[0].cancel()
            pending[1]()

    # ---- commands -----------------------------------------------------------------

    def reopen(self) -> None:
        """Ask logd to reopen every agent's log files."""
        try:
            n = self._ensure().reopen()
            self.sup.log("info", "log daemon reopened the logs", files=n)
        except CorralError as e:
            self.sup.log("error", "log daemon: reopen failed", error=e.message)

    def shutdown(self) -> None:
        """Stop logd (after the children: it finishes every log and exits)."""
        self._closing = True
        self._flush_pending()
        self._unwatch()
        client, self.client = self.client, None
        if client is None:
            return
        try:
            client.shutdown()
            self.sup.log("info", "log daemon stopped")
        except CorralError as e:
            self.sup.log("error", "log daemon: shutdown failed", error=e.message)
            client.close()

    def close(self) -> None:
        """Disconnect, leaving logd running (the children's output keeps flowing)."""
        self._closing = True
        self._flush_pending()
        self._unwatch()
        if self.client is not None:
            self.client.close()
            self.client = None

    def _flush_pending(self) -> None:
        for timer, done in list(self._pending.values()):
            timer.cancel()
            done()
        self._pending.clear()
