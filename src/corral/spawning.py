"""Spawn requests: a pool in ``ask`` mode does not spawn above its floor by itself;
each member it wants waits as a request that an operator or a manager agent accepts
or declines. One request is one spawn. Each step is an event naming its actor.

:class:`SpawnRequestsMixin` is the part of ``corral.Cluster`` that holds these
operations: their parameters carry their rules (``corral.params``, run by
``@checked``), the body checks the role against the cluster's roles, then one store
transaction each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, get_args

from corral.params import Limit, NodeId, PoolName, Reason, RecordId, SpawnStatusName
from corral.types import SpawnStatus
from corral.validation import (
    checked,
)

if TYPE_CHECKING:
    from corral.clock import Clock
    from corral.store import Store

__all__ = ["SPAWN_STATUSES", "SpawnRequest", "SpawnRequestsMixin"]

SPAWN_STATUSES: tuple[str, ...] = get_args(SpawnStatus)
OPERATOR = "operator"  # the actor of a decision made with the operator's token


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """A member a pool wants. ``status`` is pending, accepted, declined or withdrawn
    (its pool no longer wants it); ``reason`` why it was asked; ``member`` the agent
    it became once spawned."""

    id: int
    pool: str
    role: str
    status: str
    reason: str = ""
    requested_by: str = ""
    decided_by: str | None = None
    member: str | None = None
    created_at: float = 0.0
    decided_at: float | None = None
    spawned_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def text(self) -> str:
        """One line: ``spawn request 3 (pool dev, developer): accepted by operator``."""
        who = f" by {self.decided_by}" if self.decided_by else ""
        spawned = f", spawned {self.member}" if self.member else ""
        return (
            f"spawn request {self.id} (pool {self.pool}, {self.role}): {self.status}{who}{spawned}"
        )


class _SpawnStore(Protocol):
    def request_spawn(
        self, pool: str, role: str, reason: str, requested_by: str, now: float
    ) -> SpawnRequest: ...
    def spawn_requests(
        self, status: str | None, pool: str | None, limit: int
    ) -> list[SpawnRequest]: ...
    def decide_spawn_request(
        self, request_id: int, status: str, actor: str, now: float, reason: str | None = None
    ) -> SpawnRequest: ...
    def fulfil_spawn_request(self, request_id: int, member: str, now: float) -> SpawnRequest: ...


class SpawnRequestsMixin:
    """The spawn request operations of ``corral.Cluster``."""

    if TYPE_CHECKING:
        store: Store
        clock: Clock

        def _role(self, role: Any, field: str = "role") -> str: ...

    @property
    def _spawns(self) -> _SpawnStore:
        return cast("_SpawnStore", self.store)  # SQLStore's SpawnMixin

    @checked
    def request_spawn(
        self, pool: PoolName, role: str, reason: Reason = "", requested_by: NodeId = "pool"
    ) -> SpawnRequest:
        """Ask for one new member of ``pool`` (a worker of ``role``): a pending
        request and a ``spawn_requested`` event; an operator or a manager agent
        accepts or declines it (``accept_spawn_request``, ``decline_spawn_request``)."""
        return self._spawns.request_spawn(
            pool, self._role(role), reason, requested_by, self.clock.now()
        )

    @checked
    def spawn_requests(
        self,
        status: SpawnStatusName | None = None,
        pool: PoolName | None = None,
        limit: Limit = 100,
    ) -> list[SpawnRequest]:
        """Spawn requests, oldest first, filtered by ``status`` (pending, accepted,
        declined, withdrawn) and ``pool`` (at most ``limit``)."""
        return self._spawns.spawn_requests(status, pool, limit)

    @checked
    def accept_spawn_request(
        self, request_id: RecordId, actor: NodeId | None = None
    ) -> SpawnRequest:
        """Accept a pending spawn request: its pool spawns one member for it. A
        ``spawn_request_accepted`` event names the actor (``operator`` when none is
        given). A request already decided is refused."""
        return self._decide(request_id, "accepted", actor)

    @checked
    def decline_spawn_request(
        self, request_id: RecordId, actor: NodeId | None = None
    ) -> SpawnRequest:
        """Decline a pending spawn request: nothing is spawned for it. A
        ``spawn_request_declined`` event names the actor (``operator`` when none is
        given). A request already decided is refused."""
        return self._decide(request_id, "declined", actor)

    @checked
    def withdraw_spawn_request(
        self, request_id: RecordId, reason: Reason, actor: NodeId = "pool"
    ) -> SpawnRequest:
        """Withdraw a pending spawn request its pool no longer wants (the board
        drained, the recommendation changed): status ``withdrawn``, nothing spawned,
        and a ``spawn_request_withdrawn`` event with the ``reason``. A request already
        decided is refused."""
        return self._spawns.decide_spawn_request(
            request_id, "withdrawn", actor, self.clock.now(), reason
        )

    @checked
    def fulfil_spawn_request(self, request_id: RecordId, member: NodeId) -> SpawnRequest:
        """Record the member an accepted request was spawned as (its pool calls this
        once): a ``spawn_request_fulfilled`` event. Refused for a request that is not
        accepted or already spawned."""
        return self._spawns.fulfil_spawn_request(request_id, member, self.clock.now())

    def _decide(self, request_id: int, status: str, actor: str | None) -> SpawnRequest:
        # ``request_id`` and ``actor`` have passed their rules (``@checked``).
        return self._spawns.decide_spawn_request(
            request_id, status, OPERATOR if actor is None else actor, self.clock.now()
        )
