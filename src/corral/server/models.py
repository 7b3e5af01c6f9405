"""The HTTP API's pydantic models: request bodies and query strings are parsed with
them, and the OpenAPI document is generated from them (requests and responses).

The models check shapes and types; the service (``Cluster``) checks meaning (roles,
ranges, sizes) and answers ``InvalidInputError`` exactly as the embedded client does.
Responses are the service's records (``corral.model``) as JSON; the response models
here describe them field for field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from corral.config import TYPES
from corral.validation import MAX_LIMIT, MAX_SEQ

__all__ = [
    "AddTaskIn",
    "AddTasksIn",
    "AlertIn",
    "AssessmentOut",
    "BroadcastIn",
    "CatchUpIn",
    "CatchUpOut",
    "ClaimIn",
    "ClaimOut",
    "CompleteAndClaimIn",
    "CompleteAndClaimOut",
    "CompleteIn",
    "ErrorOut",
    "EventOut",
    "EventsQuery",
    "FailIn",
    "HealthOut",
    "HeartbeatIn",
    "ListNodesQuery",
    "ListTasksQuery",
    "NodeOut",
    "RegisterIn",
    "RegisteredOut",
    "SampleIn",
    "SeriesQuery",
    "SettingsOut",
    "StateOut",
    "StateQuery",
    "StatsOut",
    "StatusIn",
    "TaskOut",
    "TouchOut",
    "settings_model",
]

NodeStatus = Literal["working", "idle", "waiting", "terminated"]
TaskStatus = Literal["pending", "in_progress", "done", "failed", "cancelled"]
Priority = Literal["high", "medium", "low"]
Strength = Literal["high", "medium", "low"]
NodeId = str
TaskRef = int | str


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Query(BaseModel):
    # Query strings are text: numbers are parsed from it (lax mode).
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- requests -------------------------------------------------------------------------
class RegisterIn(_In):
    node_id: NodeId = Field(description="The node's id (1-64 characters).")
    role: str = Field(description="bootstrap_manager or a role of the cluster's role_keywords.")
    model: str | None = Field(None, description="Model name; strength is derived from it.")
    strength: Strength | None = None
    heartbeat_interval: float | None = Field(None, description="Seconds between heartbeats.")
    host: str | None = None
    pid: int | None = None


class StatusIn(_In):
    status: NodeStatus
    current_task_id: TaskRef | None = None


class HeartbeatIn(BaseModel):
    """heartbeat-protocol.md's fields; any other field is kept as given."""

    model_config = ConfigDict(extra="allow", strict=True)

    health_status: Literal["healthy", "degraded", "unhealthy"] | None = None
    current_tasks: list[TaskRef] | None = None
    capacity_available: int | None = None
    metrics: dict[str, Any] | None = None


class AddTaskIn(_In):
    title: str
    description: str = ""
    priority: Priority = "medium"
    role: str | None = None
    max_attempts: int | None = None


class AddTasksIn(_In):
    # Items are checked by the service, which names the bad field of the bad item.
    tasks: list[dict[str, Any]] = Field(
        description="Items with add_task's fields: title, description, priority, role, "
        "max_attempts. One bad item refuses the batch."
    )


class ClaimIn(_In):
    role: str | None = Field(None, description="Claim as this role (default: the node's).")
    wait: float = Field(0, description="Seconds to wait for a task when none is pending.")


class AlertIn(_In):
    message: str
    node_id: NodeId | None = Field(None, description="The node it concerns (a node token: itself).")
    data: dict[str, Any] = Field(default_factory=dict)


class SampleIn(_In):
    sample: dict[str, Any]
    keep: int | None = Field(None, description="Keep only the newest this many samples.")


class SeriesQuery(_Query):
    limit: int = 100


class TouchOut(_Out):
    touched: bool


class CompleteIn(_In):
    node_id: NodeId
    epoch: int | None = Field(None, description="The lease epoch the claim returned.")
    result: Any = None


class CompleteAndClaimIn(_In):
    node_id: NodeId
    role: str = Field(description="Claim the next task as this role.")
    epoch: int | None = Field(None, description="The lease epoch the claim returned.")
    result: Any = None


class FailIn(_In):
    node_id: NodeId
    epoch: int | None = None
    error: str = ""
    retry: bool = True


class CatchUpIn(_In):
    since: int | None = Field(
        None, ge=0, le=MAX_SEQ, description="Start after this event (default: the cursor)."
    )
    limit: int = 1000


class BroadcastIn(_In):
    message: str
    node_id: NodeId | None = Field(None, description="Sender (a node token sends as itself).")


class ListNodesQuery(_Query):
    status: NodeStatus | None = None
    role: str | None = None


class ListTasksQuery(_Query):
    status: TaskStatus | None = None
    assigned_to: NodeId | None = None
    limit: int = 100


class StateQuery(_Query):
    node_id: NodeId | None = None
    limit: int = Field(50, ge=1, le=MAX_LIMIT)


class EventsQuery(_Query):
    since: int = Field(0, ge=0, le=MAX_SEQ, description="Events after this sequence number.")
    limit: int = Field(1000, ge=1, le=MAX_LIMIT)
    kind: str | None = Field(None, description="Comma-separated event kinds to keep.")
    node: str | None = Field(None, description="Comma-separated node ids to keep.")


# --- responses ------------------------------------------------------------------------
class NodeOut(_Out):
    id: str
    role: str
    status: str
    model: str | None
    strength: str | None
    current_task_id: int | None
    idle_since: float | None
    last_activity: float
    last_heartbeat: float | None
    heartbeat_interval: float | None
    health: str | None
    heartbeat: dict[str, Any]
    host: str | None
    pid: int | None
    registered_at: float
    terminated_at: float | None
    dead_at: float | None
    incarnation: int
    cursor: int


class RegisteredOut(NodeOut):
    active_nodes: int
    max_agents: int
    text: str = Field(description="The one-line answer of anti-idle.md.")
    token: str = Field(description="This node's own bearer token.")


class TaskOut(_Out):
    id: int
    title: str
    priority: str
    status: str
    description: str
    role: str | None
    roles: list[str]
    assigned_to: str | None
    epoch: int
    attempts: int
    max_attempts: int
    created_at: float
    claimed_at: float | None
    updated_at: float
    finished_at: float | None
    result: Any
    error: str | None


class ClaimOut(_Out):
    task: TaskOut | None
    text: str


class CompleteAndClaimOut(_Out):
    done: TaskOut
    next: TaskOut | None
    text: str = Field(description="The claim's one-line answer for the next task.")


class EventOut(_Out):
    seq: int
    ts: float
    kind: str
    node_id: str | None
    task_id: int | None
    data: dict[str, Any]


class CatchUpOut(_Out):
    events: list[EventOut]
    cursor: int


def settings_model(name: str, *, changes: bool, doc: str) -> type[BaseModel]:
    """A pydantic model of the cluster settings, built from ``model.Settings``'s fields
    (their one declaration): every field required (an answer), or every field optional
    and strict (a change; unknown keys refused)."""
    if changes:
        fields: dict[str, Any] = {n: (t | None, None) for n, t in TYPES.items()}
        config = ConfigDict(extra="forbid", strict=True)
    else:
        fields = {n: (t, ...) for n, t in TYPES.items()}
        config = _Out.model_config
    return create_model(name, __config__=config, __doc__=doc, **fields)


SettingsOut = settings_model("SettingsOut", changes=False, doc="The cluster's settings.")


class AssessmentOut(_Out):
    status: str
    recommendation: str
    max_agents: int
    active_count: int
    idle_count: int
    working_count: int
    pending_tasks: int
    in_progress: int
    architect_only_pending: int
    manager_id: str | None
    assessed_at: float
    text: str


class StateOut(_Out):
    now: float
    summary: str
    tasks: list[TaskOut]
    tasks_omitted: int
    nodes: list[NodeOut]
    max_agents: int
    pending_tasks: int
    in_progress: int
    metadata: dict[str, Any]
    work_distribution: dict[str, Any]
    last_event_ts: float | None
    last_heartbeat: float | None
    liveness_window: float
    text: str


class StatsOut(_Out):
    nodes: dict[str, dict[str, int]] = Field(description="Node count by status, then role.")
    tasks: dict[str, int] = Field(description="Task count by status.")
    claims: int
    completions: int
    lease_recoveries: int
    last_event: int
    max_agents: int
    assessment: dict[str, Any]
    live_nodes: list[dict[str, Any]]


class HealthOut(_Out):
    status: Literal["ok"]
    version: str


class ErrorBody(_Out):
    code: str = Field(description="invalid_input, not_found, capacity, lease, unauthorized, …")
    message: str
    field: str | None


class ErrorOut(_Out):
    error: ErrorBody
