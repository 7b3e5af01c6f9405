"""The supervisor's link to the cluster: every transition published as an event
(an ``alert`` event carrying the transition, for now), and the ``cluster``
heartbeat: the node of the same id as the agent, its ``last_heartbeat`` read through
``client.get_node`` at the heartbeat interval (off the loop, in a worker thread)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["check_cluster", "publish"]


def publish(sup: Supervisor, rec: dict[str, Any]) -> None:
    """The transition as an event in the cluster (an ``alert`` event for now)."""
    client = sup.client
    if client is None or sup._loop is None:
        return
    msg = f"supervisor: {rec['agent']} {rec['from']} -> {rec['to']} ({rec['reason']})"

    async def send() -> None:
        try:
            await asyncio.to_thread(client.alert, msg[:500], None, supervisor=rec)
        except Exception as e:  # the cluster being down must not stop supervision
            sup._log("warning", "cannot publish event", error=repr(e))

    sup._spawn_task(send)


def check_cluster(sup: Supervisor, a: _Agent) -> None:
    """Ask the cluster for the node named like the agent; its last heartbeat
    after the spawn counts as a beat."""
    a.checking = True
    a.next_check = None
    client, child = sup.client, a.child

    async def check() -> None:
        seen = None
        try:
            node = await asyncio.to_thread(client.get_node, a.spec.id)
            seen = getattr(node, "last_heartbeat", None)
        except Exception as e:  # unknown node yet, or the cluster unreachable
            sup._log("debug", "cluster heartbeat check", agent=a.spec.id, error=repr(e))
        a.checking = False
        if a.child is not child:
            return
        since = a.last_beat if a.last_beat is not None else (a.started_at or 0)
        if seen is not None and seen > since:
            sup._beat(a, min(seen, sup.clock()), None)
        a.next_check = sup.clock() + a.spec.heartbeat_interval
        sup._kick()

    sup._spawn_task(check)
