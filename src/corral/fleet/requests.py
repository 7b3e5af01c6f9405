"""Ask mode at run time: the pools' side of the cluster's spawn requests
(``corral.spawning``). A pool in ``ask`` mode asks (one request per member it
wants), and spawns a member for each request an operator accepted, once; a decline
counts as the pool's last change, so it asks again only after its cooldown. A
pending request its pool no longer wants (:func:`unwanted`: the board drained, the
recommendation changed) is withdrawn, with the reason, newest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.scaling import FleetView, PoolLimits, PoolState

__all__ = ["Look", "Requests", "unwanted"]


@dataclass(frozen=True, slots=True)
class Look:
    """The requests of the pools in ask mode, by pool: ``accepted`` and not yet
    spawned, ``pending`` (ids, oldest first), and the last decline's time."""

    accepted: dict[str, list[int]] = field(default_factory=dict)
    pending: dict[str, list[int]] = field(default_factory=dict)
    declined: dict[str, float] = field(default_factory=dict)


def unwanted(role: str, limits: PoolLimits, pool: PoolState, fleet: FleetView, pending: int) -> int:
    """How many of a pool's ``pending`` requests are no longer wanted. Pure.

    A request is asked for a pending task no idle or starting member will take; it
    stays wanted while such tasks remain (up to the pool's ``max``), whatever the
    cooldown, ``max_agents`` (an accepted request waits for room) or a passing
    ``maintain`` while members work. Once the tasks are served, or the cluster
    recommends ``terminate_idle``, the rest are not. ``pool.requested`` counts only
    the accepted requests not yet spawned."""
    if limits.scale != "ask" or pending <= 0:
        return 0
    if fleet.recommendation == "terminate_idle":
        return pending
    planned = pool.members + pool.requested
    unserved = fleet.pending - pool.idle - pool.requested
    wanted = max(0, min(limits.max - planned, unserved))
    return max(0, pending - wanted)


class Requests:
    """The spawn requests of the pools of one ``corral up`` (blocking calls)."""

    def __init__(self, client: Any, pools: set[str]) -> None:
        self.client = client
        self.pools = pools  # the pools in ask mode

    def look(self) -> Look:
        """What the pools' decisions need of their requests."""
        out = Look()
        for r in self.client.spawn_requests(limit=10_000):
            if r.pool not in self.pools:
                continue
            if r.status == "pending":
                out.pending.setdefault(r.pool, []).append(r.id)
            elif r.status == "accepted" and r.member is None:
                out.accepted.setdefault(r.pool, []).append(r.id)
            elif r.status == "declined" and r.decided_at is not None:
                out.declined[r.pool] = max(out.declined.get(r.pool, 0.0), r.decided_at)
        return out

    def ask(self, pool: str, role: str, reason: str) -> None:
        self.client.request_spawn(pool, role, reason[:500], "pool")

    def withdraw(self, request_id: int, reason: str) -> None:
        self.client.withdraw_spawn_request(request_id, reason[:500], "pool")

    def fulfilled(self, request_id: int, member: str) -> None:
        self.client.fulfil_spawn_request(request_id, member)
