"""Ask mode at run time: the pools' side of the cluster's spawn requests
(``corral.spawning``). A pool in ``ask`` mode asks (one request per member it
wants), and spawns a member for each request an operator accepted, once; a decline
counts as the pool's last change, so it asks again only after its cooldown."""

from __future__ import annotations

from typing import Any

__all__ = ["Requests"]


class Requests:
    """The spawn requests of the pools of one ``corral up`` (blocking calls)."""

    def __init__(self, client: Any, pools: set[str]) -> None:
        self.client = client
        self.pools = pools  # the pools in ask mode

    def look(self) -> tuple[dict[str, list[int]], dict[str, int], dict[str, float]]:
        """(accepted and not yet spawned request ids, pending counts, last decline
        time), by pool."""
        accepted: dict[str, list[int]] = {}
        pending: dict[str, int] = {}
        declined: dict[str, float] = {}
        for r in self.client.spawn_requests(limit=10_000):
            if r.pool not in self.pools:
                continue
            if r.status == "pending":
                pending[r.pool] = pending.get(r.pool, 0) + 1
            elif r.status == "accepted" and r.member is None:
                accepted.setdefault(r.pool, []).append(r.id)
            elif r.status == "declined" and r.decided_at is not None:
                declined[r.pool] = max(declined.get(r.pool, 0.0), r.decided_at)
        return accepted, pending, declined

    def ask(self, pool: str, role: str, reason: str) -> None:
        self.client.request_spawn(pool, role, reason[:500], "pool")

    def fulfilled(self, request_id: int, member: str) -> None:
        self.client.fulfil_spawn_request(request_id, member)
