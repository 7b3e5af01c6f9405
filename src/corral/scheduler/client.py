"""The scheduler's part of the ``corral.types.Client`` protocol: its operations, as
``Cluster`` (``corral.scheduler.ops``) and ``HttpClient``
(``corral.scheduler.remote``) offer them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from corral.scheduler.records import Agent, Assignment, Notification

__all__ = ["SchedulerClient"]


class SchedulerClient(Protocol):
    def add_agent(self, agent_id: str, config: dict[str, Any] | None = None) -> Agent: ...

    def get_agent(self, agent_id: str) -> Agent: ...

    def list_agents(self, after: str = "", limit: int = 100) -> list[Agent]: ...

    def notify(self, agent_id: str, payload: Any) -> Notification: ...

    def read_inbox(self, agent_id: str, limit: int = 100) -> list[Notification]: ...

    def get_assignment(self, runner_id: str, mode: str = "hybrid") -> Assignment | None: ...

    def release_assignment(
        self,
        assignment_id: int,
        runner_id: str,
        epoch: int,
        outcome: dict[str, Any] | None = None,
    ) -> Agent: ...

    def list_assignments(self, limit: int = 100) -> list[Assignment]: ...
