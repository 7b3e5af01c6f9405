"""corral: keeps a fleet of agents alive, busy and bounded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.client import connect
from corral.clock import FakeClock, SystemClock
from corral.cluster import Cluster
from corral.errors import (
    AuthError,
    BudgetError,
    CapacityError,
    ConflictError,
    CorralError,
    InvalidInputError,
    LeaseError,
    NotFoundError,
    StoreUnavailableError,
    TaskCancelledError,
)
from corral.model import Assessment, CatchUp, Event, Node, Registered, Settings, State, Task
from corral.monitor import Monitor
from corral.types import Client

if TYPE_CHECKING:  # loaded lazily at run time (below), seen as the classes by a checker
    from corral.scheduler.runner import Runner
    from corral.worker.heartbeat import HeartbeatMonitor
    from corral.worker.worker import Worker

__all__ = [
    "Assessment",
    "AuthError",
    "BudgetError",
    "CapacityError",
    "CatchUp",
    "Client",
    "Cluster",
    "ConflictError",
    "CorralError",
    "Event",
    "FakeClock",
    "HeartbeatMonitor",
    "InvalidInputError",
    "LeaseError",
    "Monitor",
    "Node",
    "NotFoundError",
    "Registered",
    "Runner",
    "Settings",
    "State",
    "StoreUnavailableError",
    "SystemClock",
    "Task",
    "TaskCancelledError",
    "Worker",
    "connect",
]

__version__ = "0.2.0"

_LAZY = {
    "HeartbeatMonitor": "corral.worker.heartbeat",
    "Runner": "corral.scheduler.runner",
    "Worker": "corral.worker.worker",
}


def __getattr__(name: str) -> object:
    # The worker SDK (and psutil) load on first use: ``import corral`` stays light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'corral' has no attribute {name!r}")
