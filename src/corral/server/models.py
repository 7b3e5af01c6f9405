"""The HTTP API's pydantic models: request bodies and query strings are parsed with
them, and the OpenAPI document is generated from them (requests and responses).

The models check shapes and types; the service (``Cluster``) checks meaning (roles,
ranges, sizes) and answers ``InvalidInputError`` exactly as the embedded client does.
Responses are the service's records (``corral.model``) as JSON; the response models
here describe them field for field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model

from corral import defaults
from corral.config import TYPES
from corral.defaults import MAX_CLAIM_WAIT
from corral.model import Assessment, CatchUp, Event, Node, Process, Registered, State, Task
from corral.params import HostName, Message, ModelName, Text, Title
from corral.spawning import SpawnRequest
from corral.types import (
    HealthStatus,
    NodeStatus,
    Priority,
    ProcessAction,
    Strength,
    TaskStatus,
)
from corral.validation import (
    ID,
    MAX_FLOAT,
    MAX_INT,
    MAX_LIMIT,
    MAX_SEQ,
    POSITIVE_INT,
    TASK_REF,
    text,
)

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
    "ProcessAckIn",
    "ProcessActionIn",
    "ProcessOut",
    "RegisterIn",
    "RegisteredOut",
    "ReportProcessesIn",
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

# What the OpenAPI document states for the values the service checks itself: the
# models parse types; the service runs the parameter's rule (``corral.validation``),
# whose schema pydantic writes from the ``Annotated`` metadata.
ID_SCHEMA: dict[str, Any] = ID.json_schema()
TASK_ID_SCHEMA: dict[str, Any] = TASK_REF.json_schema()["anyOf"][1]
_POSITIVE_INT = POSITIVE_INT.json_schema()


def _whole(value: Any) -> Any:
    """JSON Schema's integers include ``3.0``: take a whole float as its int."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
        return int(value)
    return value


def _exact(value: Any) -> Any:
    """A number field is a float: an integer past ``MAX_FLOAT`` would round into
    range, so it is refused here as the service refuses it."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_FLOAT:
        raise ValueError(f"must be a number up to {MAX_FLOAT}")
    return value


def _item_whole(value: Any) -> Any:
    """A batch item's ``max_attempts`` is an integer as ``AddTaskIn``'s is (``_whole``)."""
    if isinstance(value, dict) and "max_attempts" in value:
        return {**value, "max_attempts": _whole(value["max_attempts"])}
    return value


Int = Annotated[int, BeforeValidator(_whole)]
Number = Annotated[float, BeforeValidator(_exact)]
NodeId = Annotated[str, ID]
PositiveInt = Annotated[int, BeforeValidator(_whole), POSITIVE_INT]
TaskRef = Annotated[int | str, BeforeValidator(_whole), TASK_REF]
# An item of a list the service checks whole (it names the list, not the item).
TaskRefItem = Annotated[Any, BeforeValidator(_whole), TASK_REF]

Role = Annotated[str, WithJsonSchema({**ID_SCHEMA, "x-corral-role": True})]
IdempotencyKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="A key per call, the same when the call is sent again: a claim "
        "retried after its answer was lost returns what that answer held "
        "(docs/worker.md, riding out an outage).",
    ),
]


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
    role: Role = Field(description="bootstrap_manager or a role of the cluster's role_keywords.")
    model: ModelName | None = Field(None, description="Model name; strength is derived from it.")
    strength: Strength | None = None
    heartbeat_interval: Number | None = Field(
        None,
        description="Seconds between heartbeats.",
        json_schema_extra={"exclusiveMinimum": 0, "maximum": MAX_FLOAT},
    )
    host: HostName | None = None
    pid: PositiveInt | None = None


class StatusIn(_In):
    status: NodeStatus
    current_task_id: TaskRef | None = None


class HeartbeatIn(BaseModel):
    """A heartbeat's payload: ``health_status``, ``current_tasks``,
    ``capacity_available`` and ``metrics``; any other field is kept as given."""

    model_config = ConfigDict(extra="allow", strict=True)

    health_status: HealthStatus | None = None
    current_tasks: list[TaskRefItem] | None = None
    capacity_available: (
        Annotated[int, BeforeValidator(_whole), WithJsonSchema({"type": "integer", "minimum": 0})]
        | None
    ) = None
    metrics: dict[str, Any] | None = None


class AddTaskIn(_In):
    title: Title
    description: Text = ""
    priority: Priority = "medium"
    role: Role | None = None
    max_attempts: PositiveInt | None = None


class AddTasksIn(_In):
    # Items are checked by the service, which names the bad field of the bad item.
    tasks: list[Annotated[Any, BeforeValidator(_item_whole)]] = Field(
        description="Items with add_task's fields: title, description, priority, role, "
        "max_attempts. One bad item refuses the batch.",
        json_schema_extra={"maxItems": 100_000},
    )


class ClaimIn(_In):
    role: Role | None = Field(None, description="Claim as this role (default: the node's).")
    wait: float = Field(
        0,
        ge=0,
        le=MAX_CLAIM_WAIT,
        description="Seconds to wait for a task when none is pending; a caller that "
        "disconnects meanwhile is given none.",
    )
    idempotency_key: IdempotencyKey | None = None


class AlertIn(_In):
    message: Message
    node_id: NodeId | None = Field(None, description="The node it concerns (a node token: itself).")
    data: dict[str, Any] = Field(default_factory=dict)


class SampleIn(_In):
    sample: dict[str, Any]
    keep: PositiveInt | None = Field(None, description="Keep only the newest this many samples.")


class SeriesQuery(_Query):
    limit: int = Field(100, json_schema_extra={"minimum": 1, "maximum": MAX_INT})


class TouchOut(_Out):
    touched: bool


class CompleteIn(_In):
    node_id: NodeId
    epoch: PositiveInt | None = Field(None, description="The lease epoch the claim returned.")
    result: Any = None


class CompleteAndClaimIn(_In):
    node_id: NodeId
    role: Role = Field(description="Claim the next task as this role.")
    epoch: PositiveInt | None = Field(None, description="The lease epoch the claim returned.")
    result: Any = None
    idempotency_key: IdempotencyKey | None = None


class FailIn(_In):
    node_id: NodeId
    epoch: PositiveInt | None = None
    error: Text = ""
    retry: bool = True


class CatchUpIn(_In):
    since: (
        Annotated[
            int,
            BeforeValidator(_whole),
            WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_SEQ}),
        ]
        | None
    ) = Field(None, description="Start after this event (default: the cursor).")
    limit: Int = Field(1000, json_schema_extra={"minimum": 1, "maximum": MAX_INT})


class BroadcastIn(_In):
    message: Message
    node_id: NodeId | None = Field(None, description="Sender (a node token sends as itself).")


class ListNodesQuery(_Query):
    status: NodeStatus | None = None
    role: Role | None = None


class ListTasksQuery(_Query):
    status: TaskStatus | None = None
    assigned_to: NodeId | None = None
    limit: int = Field(100, json_schema_extra={"minimum": 1, "maximum": MAX_INT})


class StateQuery(_Query):
    node_id: NodeId | None = None
    limit: int = Field(50, ge=1, le=MAX_LIMIT)


class EventsQuery(_Query):
    since: int = Field(0, ge=0, le=MAX_SEQ, description="Events after this sequence number.")
    limit: int = Field(1000, ge=1, le=MAX_LIMIT)
    kind: str | None = Field(None, description="Comma-separated event kinds to keep.")
    node: str | None = Field(None, description="Comma-separated node ids to keep.")


def _process_whole(value: Any) -> Any:
    """A process item's ``pid`` and ``restarts`` are integers as elsewhere (``_whole``)."""
    if isinstance(value, dict):
        return {k: _whole(v) if k in ("pid", "restarts") else v for k, v in value.items()}
    return value


_NULLABLE_TIME = {
    "anyOf": [{"type": "number", "minimum": 0, "exclusiveMaximum": 1e12}, {"type": "null"}]
}
_PROCESS_ITEM = {
    "type": "object",
    "required": ["agent", "state"],
    "additionalProperties": False,
    "properties": {
        "agent": ID_SCHEMA,
        "state": {"type": "string", "enum": list(defaults.PROCESS_STATES)},
        "pid": {"anyOf": [_POSITIVE_INT, {"type": "null"}]},
        "restarts": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
        "started_at": _NULLABLE_TIME,
        "last_beat": _NULLABLE_TIME,
        "flags": {
            "type": "array",
            "maxItems": 32,
            "items": {"type": "string", "minLength": 1, "maxLength": 64},
        },
        "last_exit": {"anyOf": [{"type": "object"}, {"type": "null"}]},
    },
}
ProcessItem = Annotated[Any, BeforeValidator(_process_whole), WithJsonSchema(_PROCESS_ITEM)]


class ReportProcessesIn(_In):
    host: NodeId = Field(description="The supervisor's host (1-64 characters).")
    # Items are checked by the service, which names the bad item and key.
    processes: list[ProcessItem] = Field(
        description="The host's every process: agent, state (STOPPED, STARTING, RUNNING, "
        "UNHEALTHY, WAITING), pid, restarts, started_at, last_beat, flags, last_exit.",
        json_schema_extra={"maxItems": defaults.MAX_PROCESSES},
    )


class ProcessActionIn(_In):
    host: NodeId
    agent: NodeId
    action: ProcessAction


class ProcessAckIn(_In):
    host: NodeId
    request_seq: Annotated[
        int,
        BeforeValidator(_whole),
        WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_SEQ}),
    ] = Field(description="The request's event number.")
    ok: bool
    message: Text = ""


# A pool's id: the manifest's id rule (corral.spawning checks the same).
PoolId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"})
]

# The wire type of a parameter by its name, wherever it appears: an operation served
# by the generic handler (corral.server.generic) gets its bounds and its schema from
# here, its type otherwise from its Cluster method's annotation.
PARAM_TYPES: dict[str, Any] = {
    **dict.fromkeys(
        ("node_id", "host", "agent", "member", "actor", "runner_id", "agent_id"), NodeId
    ),
    "pool": PoolId,
    "limit": Annotated[int, Field(ge=1, le=MAX_LIMIT)],
    "since": Annotated[int, Field(ge=0, le=MAX_SEQ)],
}


class SpawnRequestIn(_In):
    pool: PoolId
    role: Role
    reason: Annotated[str, text(500)] = ""
    requested_by: NodeId = "pool"


class SpawnDecisionIn(_In):
    actor: NodeId | None = Field(None, description="Who decides (a node token: itself).")


# --- responses ------------------------------------------------------------------------
# The answer models of records are built from the records' fields (their one
# declaration): every field required, a Literal written as a string, a tuple as a list
# and a record as its own answer model.
_ANSWERS: dict[type, type[BaseModel]] = {}
_LIST: Any = list  # ``list[model]`` of a model made at run time


def _answer_type(t: Any) -> Any:
    origin = typing.get_origin(t)
    if origin is Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        parts = tuple(_answer_type(a) for a in typing.get_args(t))
        return typing.Union[parts]  # noqa: UP007 - built from a tuple
    if origin in (list, tuple):
        return _LIST[_answer_type(typing.get_args(t)[0])]
    return _ANSWERS.get(t, t)


def record_model(name: str, record: type, **fields: Any) -> Any:
    """The answer model ``name`` of ``record`` (a dataclass), with ``fields``
    (``name=(type, default or FieldInfo)``) replacing or following its own."""
    hints = typing.get_type_hints(record)
    own = {f.name: (_answer_type(hints[f.name]), ...) for f in dataclasses.fields(record)}
    model: type[BaseModel] = create_model(name, __base__=_Out, **{**own, **fields})
    _ANSWERS.setdefault(record, model)
    return model


NodeOut = record_model("NodeOut", Node)
RegisteredOut = record_model(
    "RegisteredOut",
    Registered,
    text=(
        str,
        Field(
            description="The one-line answer, e.g. 'Node Node-X9J2 registered as developer "
            "(high). Active nodes: 3/4'."
        ),
    ),
    token=(str, Field(description="This node's own bearer token.")),
)
TaskOut = record_model("TaskOut", Task)


ClaimOut = create_model("ClaimOut", __base__=_Out, task=(TaskOut | None, ...), text=(str, ...))


CompleteAndClaimOut = create_model(
    "CompleteAndClaimOut",
    __base__=_Out,
    done=(TaskOut, ...),
    next=(TaskOut | None, ...),
    text=(str, Field(description="The claim's one-line answer for the next task.")),
)


EventOut = record_model("EventOut", Event)
CatchUpOut = record_model("CatchUpOut", CatchUp)


def settings_model(name: str, *, changes: bool, doc: str) -> type[BaseModel]:
    """A pydantic model of the cluster settings, built from ``model.Settings``'s fields
    (their one declaration): every field required (an answer), or every field optional
    and strict (a change; unknown keys refused)."""
    if changes:
        # Numbers as elsewhere in the API: a whole float is an integer (``_whole``);
        # an integer past a float's exact range is refused (``_exact``).
        parse = {float: Number, int: Int}
        fields: dict[str, Any] = {n: (parse.get(t, t) | None, None) for n, t in TYPES.items()}
        config = ConfigDict(extra="forbid", strict=True)
    else:
        fields = {n: (t, ...) for n, t in TYPES.items()}
        config = _Out.model_config
    return create_model(name, __config__=config, __doc__=doc, **fields)


SettingsOut = settings_model("SettingsOut", changes=False, doc="The cluster's settings.")
AssessmentOut = record_model("AssessmentOut", Assessment, text=(str, ...))
ProcessOut = record_model("ProcessOut", Process)
StateOut = record_model(
    "StateOut",
    State,
    processes=(_LIST[ProcessOut], Field(description="Every host's supervised processes.")),
    text=(str, ...),
)


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
    write_lock_timeouts: int = Field(
        description="This server's writes that gave up waiting for the store's write lock."
    )
    write_lock_holder: dict[str, Any] | None = Field(
        description="The process holding the write lock now (pid, stopped), if any (SQLite)."
    )


class HealthOut(_Out):
    status: Literal["ok"]
    version: str


class ErrorBody(_Out):
    code: str = Field(description="invalid_input, not_found, capacity, lease, unauthorized, …")
    message: str
    field: str | None


class ErrorOut(_Out):
    error: ErrorBody


SpawnRequestOut = record_model("SpawnRequestOut", SpawnRequest)
