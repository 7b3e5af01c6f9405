"""The supervisor's link to the cluster (when it has a client: ``corral supervise
--url``).

- **Its processes, reported.** At start and after every transition the supervisor
  sends its full view (``report_processes(host, ...)``): agent, state, pid, restarts,
  started_at, last_beat, flags, last_exit (with the last 50 lines of that run's
  stderr, :func:`cluster_tail`). Reports are coalesced: at most one is in
  flight, and the one sent next carries the state of that moment (the latest wins).
  The cluster records a ``process_state`` event per changed agent. A report that
  failed (the cluster unreachable) is sent again at the next poll.
- **Operators' requests, followed.** ``process_actions(host, since)`` is polled every
  ``POLL_INTERVAL`` (1 s): the link's only periodic wake-up. Each request
  (start/stop/restart) runs like the ``corral ctl`` command of the same name and is
  acknowledged with ``ack_process_action`` (a ``process_action_done`` event). The
  cursor is kept in ``<state dir>/cluster.cursor``, so a supervisor started again
  runs the requests made while it was down; a first start skips older requests.
- **The ``cluster`` heartbeat**: the node of the same id as the agent, its
  ``last_heartbeat`` read through ``client.get_node`` at the heartbeat interval.

Every call to the cluster runs in a worker thread (``asyncio.to_thread``), off the
loop; the cluster being down never stops supervision.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from typing import TYPE_CHECKING, Any

from corral.errors import StoreUnavailableError
from corral.supervisor.agent import STDERR_TAIL

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["POLL_INTERVAL", "ClusterLink", "check_cluster", "cluster_tail", "process_report"]

POLL_INTERVAL = 1.0  # seconds between looks at the cluster for operators' requests
# The cluster's copy of a last exit's stderr tail: its last 50 lines (the panel's
# promise, the supervisor's own tail, STDERR_TAIL), each cut to 300 characters, and
# older lines dropped while the tail's JSON is over 32 KiB (escaped non-ASCII text),
# so a report's last_exit stays within the cluster's payload limit.
_TAIL_LINES = STDERR_TAIL
_TAIL_CHARS = 300
_TAIL_BYTES = 32 * 1024


def cluster_tail(lines: list[str]) -> list[str]:
    """A stderr tail as the cluster keeps it (see ``_TAIL_LINES``)."""
    tail = [line[:_TAIL_CHARS] for line in lines[-_TAIL_LINES:]]
    while tail and len(json.dumps(tail)) > _TAIL_BYTES:
        tail = tail[1:]
    return tail


def process_report(sup: Supervisor) -> list[dict[str, Any]]:
    """The supervisor's processes as ``report_processes`` takes them."""
    out = []
    for st in sup.status():
        a = sup.agents[st["agent"]]
        last_exit = st["last_exit"]
        if last_exit is not None:  # bounded: the cluster keeps a short tail
            tail = cluster_tail(last_exit.get("stderr_tail", []))
            last_exit = {**last_exit, "stderr_tail": tail}
        out.append(
            {
                "agent": st["agent"],
                "state": st["state"],
                "pid": st["pid"],
                "restarts": st["restarts"],
                "started_at": a.started_at if st["pid"] else None,
                "last_beat": st["last_beat"],
                "flags": st["flags"],
                "last_exit": last_exit,
            }
        )
    return out


class ClusterLink:
    """Reports and requests between one supervisor and its cluster."""

    def __init__(self, sup: Supervisor, host: str | None = None) -> None:
        self.sup = sup
        self.host = host or socket.gethostname()
        self.poll_interval = POLL_INTERVAL
        self._dirty = False  # a report is due
        self._sending = False  # a report is in flight
        self._failed = False  # the last report did not reach the cluster
        self._ready = False  # reports wait for the request cursor (see _follow)
        self._follower: asyncio.Task[None] | None = None

    @property
    def _cursor_file(self) -> str:
        return os.path.join(self.sup.state_dir, "cluster.cursor")

    def start(self) -> None:
        """Start following operators' requests; the first report follows the reading
        of the request cursor, so a request made once the processes show up in the
        cluster is never taken for an old one."""
        if self.sup.client is None:
            return
        self._follower = asyncio.ensure_future(self._follow())

    def stop(self) -> None:
        """Stop following requests (a report in flight still finishes)."""
        if self._follower is not None:
            self._follower.cancel()
            self._follower = None

    def changed(self) -> None:
        """A transition happened: send a report unless one is in flight (that one's
        sender sends again when it is done)."""
        if self.sup.client is None or self.sup.loop is None or not self._ready:
            return
        self._dirty = True
        if not self._sending:
            self._sending = True
            self.sup.spawn_task(self._send)

    async def _send(self) -> None:
        try:
            while self._dirty:
                self._dirty = False
                report = process_report(self.sup)  # the state of this moment
                try:
                    await asyncio.to_thread(self.sup.client.report_processes, self.host, report)
                    self._failed = False
                except Exception as e:  # the cluster being down must not stop supervision
                    self._failed = True
                    self.sup.log("warning", "cannot report processes", error=repr(e))
        finally:
            self._sending = False

    # ---- operators' requests ---------------------------------------------------------

    async def _follow(self) -> None:
        client = self.sup.client
        since = await asyncio.to_thread(self._initial_cursor)
        self._ready = True
        self.changed()
        while True:
            try:
                requests = await asyncio.to_thread(client.process_actions, self.host, since)
            except Exception as e:
                self.sup.log("warning", "cannot read process actions", error=repr(e))
                requests = []
            for req in requests:
                if self.sup.shutting_down:
                    return
                await self._run(req)
                since = req.seq
                await asyncio.to_thread(self._save_cursor, since)
            if self._failed and not self._sending:
                self.changed()
            if not requests:
                await asyncio.sleep(self.poll_interval)

    async def _run(self, req: Any) -> None:
        agent, action = req.data.get("agent"), req.data.get("action")
        self.sup.log("info", "cluster request", agent=agent, action=action, request=req.seq)
        try:
            run = {"start": self.sup.start, "stop": self.sup.stop, "restart": self.sup.restart}
            st = await run[action](agent)
            ok, message = True, f"{action}: {st['state']}, pid {st['pid']}"
        except Exception as e:  # an agent not in the manifest, an unknown action
            ok, message = False, f"{action} {agent}: {e}"
        try:
            await asyncio.to_thread(
                self.sup.client.ack_process_action, self.host, req.seq, ok, message[:500]
            )
        except Exception as e:
            self.sup.log("warning", "cannot acknowledge", request=req.seq, error=repr(e))

    def _initial_cursor(self) -> int:
        with contextlib.suppress(OSError, ValueError), open(self._cursor_file) as f:
            return int(f.read().strip())
        since = 0  # a first start: the requests made before it are not its own
        while True:
            try:
                page = self.sup.client.process_actions(self.host, since, 1000)
            except Exception:
                return since
            if page:
                since = page[-1].seq
            if len(page) < 1000:
                self._save_cursor(since)
                return since

    def _save_cursor(self, since: int) -> None:
        tmp = self._cursor_file + ".tmp"
        with contextlib.suppress(OSError):
            with open(tmp, "w") as f:
                f.write(str(since))
            os.replace(tmp, self._cursor_file)


def check_cluster(sup: Supervisor, a: _Agent) -> None:
    """Ask the cluster for the node named like the agent; its last heartbeat
    after the spawn counts as a beat. A cluster that cannot be reached tells nothing
    of the agent: its silence counts again from the cluster's return
    (``_Agent.silence_from``), so a blink of the cluster restarts no one."""
    a.checking = True
    a.next_check = None
    client, child = sup.client, a.child

    async def check() -> None:
        seen = None
        unreachable = False
        try:
            node = await asyncio.to_thread(client.get_node, a.spec.id)
            seen = getattr(node, "last_heartbeat", None)
        except StoreUnavailableError as e:
            unreachable = True
            sup.log("debug", "cluster unreachable", agent=a.spec.id, error=repr(e))
        except Exception as e:  # unknown node yet
            sup.log("debug", "cluster heartbeat check", agent=a.spec.id, error=repr(e))
        a.checking = False
        if a.child is not child:
            return
        if unreachable:
            a.cluster_unreachable_at = sup.clock()
        since = a.last_beat if a.last_beat is not None else (a.started_at or 0)
        if seen is not None and seen > since:
            sup.beat(a, min(seen, sup.clock()), None)
        a.next_check = sup.clock() + a.spec.heartbeat_interval
        sup.kick()

    sup.spawn_task(check)
