"""corral's shared types: the status Literals, the task id alias and the ``Client``
Protocol.

Each Literal is the one set of its values: ``corral.defaults`` derives its tuples
from them (``typing.get_args``), and the rule of each status parameter is ``one_of``
them (``corral.params``: ``NodeStatusName``, ``TaskStatusName``, ``PriorityName``,
``StrengthName``, ``ProcessActionName``, ``SpawnStatusName``), which every surface's
check, message and schema follow. No rule lives here: the parameters' types and
their rules are ``corral.params``'.

``Client`` is every public operation of ``corral.Cluster`` (the embedded client); the
remote ``corral.remote.HttpClient`` has the same methods with the same signatures
(``tests/integration/test_types.py`` checks it), so ``corral.connect()`` returns a ``Client``
whatever the backend, and the worker SDK takes one. Its operations are generated
(``corral.client_ops``) from ``corral.operations`` and the ``Cluster`` methods.
"""

from __future__ import annotations

from typing import Literal, Protocol, Self, TypeAlias

from corral.client_ops import ClientOperations

__all__ = [
    "Client",
    "HealthStatus",
    "NodeStatus",
    "Priority",
    "ProcessAction",
    "ProcessState",
    "SpawnStatus",
    "Strength",
    "TaskId",
    "TaskStatus",
    "WorkloadStatus",
]

NodeStatus: TypeAlias = Literal["working", "idle", "waiting", "terminated"]
TaskStatus: TypeAlias = Literal[
    "pending", "in_progress", "done", "failed", "cancelled", "scheduled", "blocked"
]
HealthStatus: TypeAlias = Literal["healthy", "degraded", "unhealthy"]
Priority: TypeAlias = Literal["high", "medium", "low"]
Strength: TypeAlias = Literal["high", "medium", "low"]
# A supervised process's state (corral.supervisor.policy.State) and what an operator
# may ask of it through the cluster.
ProcessState: TypeAlias = Literal["STOPPED", "STARTING", "RUNNING", "UNHEALTHY", "WAITING"]
ProcessAction: TypeAlias = Literal["start", "stop", "restart"]
# A spawn request's status (corral.spawning; its rule: corral.params.SpawnStatusName).
SpawnStatus: TypeAlias = Literal["pending", "accepted", "declined", "withdrawn"]
# What assess_workload finds (corral.assessment.decide).
WorkloadStatus: TypeAlias = Literal["idle", "overloaded", "balanced", "underutilized"]

TaskId: TypeAlias = int
"""A task's id as the store assigns it. The types of the operations' parameters
(``NodeId``, ``TaskRef``, …), each carrying its rule, are in ``corral.params``."""


class Client(ClientOperations, Protocol):
    """What every corral client offers: the embedded ``Cluster`` and the remote
    ``HttpClient``. Its operations (``ClientOperations``) are generated from the
    registry and the ``Cluster`` methods (``python scripts/codegen.py``). Arguments are
    validated by the implementation; a bad one raises
    ``corral.errors.InvalidInputError`` and changes nothing."""

    @property
    def url(self) -> str | None:
        """Where the cluster is (``sqlite:///…``, ``postgresql://…``, ``http://…``)."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...
