"""The HTTP side of the workflow operations: request and answer models, and the
handler of ``run_workflow`` (its answer wraps the id); the others are served by the
generic handler with these models (``corral.server.routes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from corral.server.models import (
    ID_SCHEMA,
    Int,
    NodeId,
    Number,
    PositiveInt,
    _In,
    _Out,
    _Query,
    record_model,
)
from corral.validation import MAX_FLOAT
from corral.workflows.model import WorkflowHost

if TYPE_CHECKING:
    from corral.server.routes import Call

__all__ = [
    "HandlerOut",
    "HandlerReleaseIn",
    "ListHandlersQuery",
    "ReportIn",
    "RunIn",
    "RunOut",
    "SendEventIn",
    "ServeIn",
    "StepsIn",
    "TakeWorkIn",
    "WorkOut",
    "WorkflowHostOut",
]

# What the OpenAPI document states for the values the service checks itself.
_NOT_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
_SECONDS = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FLOAT}
_SERVED = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": ID_SCHEMA,
        "idle_release_after": {"anyOf": [_SECONDS, {"type": "null"}]},
    },
}
_WAITER_PROPS: dict[str, Any] = {
    "step": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": _NOT_BLANK},
    "event_type": {"type": "string", "maxLength": 400, "pattern": "^[^\\x00]*$"},
    "waiter_id": {"type": "string", "maxLength": 400, "pattern": "^[^\\x00]*$"},
    "deadline": {
        "anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_FLOAT}, {"type": "null"}]
    },
}
_WAITER = {
    "type": "object",
    "required": ["step", "event_type"],
    "additionalProperties": False,
    "properties": _WAITER_PROPS,
}
_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**31}
_STEP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "queue": _COUNT,
        "in_progress": _COUNT,
        "backoff": _COUNT,
        "waiters": {
            "type": "array",
            "maxItems": 1000,
            "items": {
                "type": "object",
                "required": ["event_type"],
                "additionalProperties": False,
                "properties": {k: v for k, v in _WAITER_PROPS.items() if k != "step"},
            },
        },
    },
}
_STEPS = {
    "type": "object",
    "maxProperties": 1000,
    "propertyNames": {"minLength": 1, "maxLength": 200, "pattern": _NOT_BLANK},
    "additionalProperties": _STEP,
}
EventType = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,199}$"})
]
Served = Annotated[Any, WithJsonSchema(_SERVED)]
WaiterItem = Annotated[Any, WithJsonSchema(_WAITER)]
ErrorText = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 20_000, "pattern": "^[^\\x00]*$"})
]
Reason = Annotated[
    str, WithJsonSchema({"type": "string", "maxLength": 2000, "pattern": _NOT_BLANK})
]

HandlerStatus = Literal["running", "released", "completed", "failed", "cancelled"]
HostState = Literal["idle", "busy", "resident", "completed", "failed", "cancelled"]


# --- requests ---------------------------------------------------------------------------
class RunIn(_In):
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="The start event's fields (keyword arguments)."
    )


class ListHandlersQuery(_Query):
    status: HandlerStatus | None = None
    idle: bool | None = Field(None, description="Only idle runs (true) or only busy ones.")
    idle_duration_gt: Number | None = Field(
        None, ge=0, le=MAX_FLOAT, description="Only runs idle for more than this many seconds."
    )
    workflow: NodeId | None = None
    host: NodeId | None = None
    limit: int = Field(100, json_schema_extra={"minimum": 1})


class SendEventIn(_In):
    event_type: EventType = Field(description="The event class's name, e.g. Answer.")
    data: dict[str, Any] | None = Field(None, description="The event's fields.")


class ServeIn(_In):
    workflows: list[Served] = Field(
        description="Each served workflow: name and optionally idle_release_after (seconds)."
    )


class TakeWorkIn(_In):
    limit: PositiveInt = 100


class ReportIn(_In):
    host: NodeId
    state: HostState
    waiters: list[WaiterItem] | None = Field(None, json_schema_extra={"maxItems": 1000})
    result: Any = None
    error: ErrorText | None = None
    reason: Reason | None = None


class StepsIn(_In):
    host: NodeId
    steps: Annotated[dict[str, Any], WithJsonSchema(_STEPS)] = Field(
        description="Each step's queue, in_progress and backoff counts and its waiters."
    )


class HandlerReleaseIn(_In):
    host: NodeId
    checkpoint: dict[str, Any]


# --- answers ----------------------------------------------------------------------------
class RunOut(_Out):
    handler_id: str


class HandlerOut(_Out):
    handler_id: str
    workflow: str
    status: str
    host: str | None
    idle_since: str | None = Field(description="When the run became idle (ISO 8601, UTC).")
    idle_since_unix: float | None
    active_waiters: list[dict[str, Any]]
    wake_at: float | None
    result: Any
    error: str | None
    resident_reason: str | None
    resumes: Int
    created_at: float
    updated_at: float
    released_at: float | None
    finished_at: float | None


WorkflowHostOut = record_model("WorkflowHostOut", WorkflowHost)


class _RunOut(_Out):
    handler: HandlerOut
    start: dict[str, Any]
    checkpoint: dict[str, Any] | None
    release_after: float | None


class _DeliveryOut(_Out):
    seq: int
    handler_id: str
    event_type: str
    data: dict[str, Any]
    sent_at: float


class WorkOut(_Out):
    runs: list[_RunOut]
    deliveries: list[_DeliveryOut]
    release: list[str]
    now: float


# --- handlers ---------------------------------------------------------------------------
def run_workflow(c: Call) -> Any:
    return {"handler_id": c.cluster.run_workflow(c.path["workflow"], **c.body.kwargs)}
