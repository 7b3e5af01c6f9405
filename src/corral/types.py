"""corral's shared types: the status Literals, the id aliases and the ``Client``
Protocol.

Each Literal is the one set of its values: ``corral.defaults`` derives its tuples
from them (``typing.get_args``), and validation and the API models use those.

``Client`` is every public operation of ``corral.Cluster`` (the embedded client); the
remote ``corral.remote.HttpClient`` has the same methods with the same signatures
(``tests/test_types.py`` checks it), so ``corral.connect()`` returns a ``Client``
whatever the backend, and the worker SDK takes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, TypeAlias

from corral.scheduler.client import SchedulerClient
from corral.workflows.protocol import WorkflowClient

if TYPE_CHECKING:
    from corral.model import (
        Assessment,
        CatchUp,
        Event,
        Node,
        Process,
        Registered,
        Settings,
        State,
        Task,
    )
    from corral.spawning import SpawnRequest
    from corral.store.stats import ClusterStats

__all__ = [
    "Client",
    "HealthStatus",
    "NodeId",
    "NodeStatus",
    "Priority",
    "ProcessAction",
    "ProcessState",
    "Strength",
    "TaskId",
    "TaskRef",
    "TaskStatus",
    "WorkloadStatus",
]

NodeStatus: TypeAlias = Literal["working", "idle", "waiting", "terminated"]
TaskStatus: TypeAlias = Literal["pending", "in_progress", "done", "failed", "cancelled"]
HealthStatus: TypeAlias = Literal["healthy", "degraded", "unhealthy"]
Priority: TypeAlias = Literal["high", "medium", "low"]
Strength: TypeAlias = Literal["high", "medium", "low"]
# A supervised process's state (corral.supervisor.policy.State) and what an operator
# may ask of it through the cluster.
ProcessState: TypeAlias = Literal["STOPPED", "STARTING", "RUNNING", "UNHEALTHY", "WAITING"]
ProcessAction: TypeAlias = Literal["start", "stop", "restart"]
# What assess_workload finds (corral.assessment.decide).
WorkloadStatus: TypeAlias = Literal["idle", "overloaded", "balanced", "underutilized"]

NodeId: TypeAlias = str
"""A node's id (``check_id``: 1-128 characters of letters, digits, ``._:@-``)."""
TaskId: TypeAlias = int
"""A task's id as the store assigns it."""
TaskRef: TypeAlias = int | str
"""A task id as callers may pass it (``"42"`` is accepted and checked)."""


class Client(WorkflowClient, SchedulerClient, Protocol):
    """What every corral client offers: the embedded ``Cluster`` and the remote
    ``HttpClient``. Arguments are validated by the implementation; a bad one raises
    ``corral.errors.InvalidInputError`` and changes nothing."""

    @property
    def url(self) -> str | None:
        """Where the cluster is (``sqlite:///…``, ``postgresql://…``, ``http://…``)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...

    # --- settings ------------------------------------------------------------------
    def settings(self) -> Settings: ...

    def configure(self, **changes: Any) -> Settings: ...

    # --- nodes ---------------------------------------------------------------------
    def register_node(
        self,
        node_id: NodeId,
        role: str,
        model: str | None = None,
        strength: str | None = None,
        heartbeat_interval: float | None = None,
        *,
        host: str | None = None,
        pid: int | None = None,
    ) -> Registered: ...

    def get_node(self, node_id: NodeId) -> Node: ...

    def list_nodes(self, status: str | None = None, role: str | None = None) -> list[Node]: ...

    def set_agent_status(
        self, node_id: NodeId, status: str, current_task_id: TaskRef | None = None
    ) -> Node: ...

    def terminate_node(self, node_id: NodeId) -> Node: ...

    def heartbeat(self, node_id: NodeId, **payload: Any) -> Node: ...

    def touch(self, node_id: NodeId) -> bool: ...

    # --- tasks ---------------------------------------------------------------------
    def add_task(
        self,
        title: str,
        description: str = "",
        priority: str = "medium",
        role: str | None = None,
        *,
        max_attempts: int | None = None,
    ) -> Task: ...

    def add_tasks(self, tasks: list[dict[str, Any]]) -> list[Task]: ...

    def get_task(self, task_id: TaskRef) -> Task: ...

    def list_tasks(
        self, status: str | None = None, assigned_to: NodeId | None = None, limit: int = 100
    ) -> list[Task]: ...

    def claim_best_task(self, node_id: NodeId, role: str, *, wait: float = 0) -> Task | None: ...

    def complete_task(
        self, task_id: TaskRef, node_id: NodeId, epoch: int | None = None, result: Any = None
    ) -> Task: ...

    def complete_and_claim(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        role: str,
        epoch: int | None = None,
        result: Any = None,
    ) -> tuple[Task, Task | None]: ...

    def fail_task(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: int | None = None,
        error: str = "",
        retry: bool = True,
    ) -> Task: ...

    # --- views ---------------------------------------------------------------------
    def assess_workload(self) -> Assessment: ...

    def read_state(self, node_id: NodeId | None = None, *, limit: int = 50) -> State: ...
    def read_state_text(self, node_id: NodeId | None = None, *, limit: int = 50) -> str: ...

    def catch_up(
        self, node_id: NodeId, since: int | None = None, *, limit: int = 1000
    ) -> CatchUp: ...

    def events(self, since: int = 0, limit: int = 1000) -> list[Event]: ...

    def broadcast(self, message: str, node_id: NodeId | None = None) -> Event: ...

    # --- alerts and heartbeat metrics ----------------------------------------------
    def alert(self, message: str, node_id: NodeId | None = None, **data: Any) -> Event: ...

    def record_metrics(
        self, node_id: NodeId, sample: dict[str, Any], *, keep: int | None = None
    ) -> Event: ...

    def metrics_series(self, node_id: NodeId, limit: int = 100) -> list[Event]: ...

    def stats(self) -> ClusterStats: ...

    # --- supervised processes ------------------------------------------------------
    def report_processes(self, host: str, processes: list[dict[str, Any]]) -> list[Process]: ...

    def list_processes(self, host: str | None = None) -> list[Process]: ...

    def request_process_action(self, host: str, agent: str, action: str) -> Event: ...

    def process_actions(self, host: str, since: int = 0, limit: int = 1000) -> list[Event]: ...

    def ack_process_action(
        self, host: str, request_seq: int, ok: bool, message: str = ""
    ) -> Event: ...

    # --- spawn requests (corral.spawning) ---------------------------------------------
    def request_spawn(
        self, pool: str, role: str, reason: str = "", requested_by: str = "pool"
    ) -> SpawnRequest: ...

    def spawn_requests(
        self, status: str | None = None, pool: str | None = None, limit: int = 100
    ) -> list[SpawnRequest]: ...

    def accept_spawn_request(self, request_id: int, actor: str | None = None) -> SpawnRequest: ...

    def decline_spawn_request(self, request_id: int, actor: str | None = None) -> SpawnRequest: ...

    def fulfil_spawn_request(self, request_id: int, member: str) -> SpawnRequest: ...
