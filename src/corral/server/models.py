"""What the HTTP API says about a parameter beyond its ``Cluster`` annotation, by the
parameter's name, and the few answer models that are not a record's fields.

The request and answer models of every operation are built from its ``Cluster``
method (``corral.server.generic``): a parameter typed with a rule (``corral.params``)
is the rule's schema, checked by the rule in ``Cluster`` with its message. The table
``PARAM_TYPES`` here is for what no rule carries yet: the cluster's roles, a pool's
id, the shape of a batch's items, a process report, an agent config, a workflow
host's reports (``"operation.parameter"`` keys name one operation's parameter). Each
states the schema the service checks, so the OpenAPI document is exact.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model

from corral import defaults
from corral.config import TYPES
from corral.model import Registered, Settings
from corral.params import Usage
from corral.types import HealthStatus
from corral.validation import ID, LIMIT, MAX_FLOAT, MAX_INT, POSITIVE_INT, TASK_REF
from corral.workflows.model import Handler

__all__ = [
    "ANSWERS",
    "ID_SCHEMA",
    "KWARGS",
    "PARAM_TYPES",
    "ErrorOut",
    "HealthOut",
    "In",
    "Query",
    "settings_model",
    "whole",
    "wholes",
]

ID_SCHEMA: dict[str, Any] = ID.json_schema()


def whole(value: Any) -> Any:
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


def wholes(value: Any) -> Any:
    """``whole`` of a value, or of each item of a list of them."""
    return [whole(v) for v in value] if isinstance(value, list) else whole(value)


def _keys_whole(*keys: str) -> BeforeValidator:
    """An object's integer ``keys`` (or lists of integers) as ``whole`` takes them."""

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: wholes(v) if k in keys else v for k, v in value.items()}
        return value

    return BeforeValidator(fix)


Int = Annotated[int, BeforeValidator(whole)]
Number = Annotated[float, BeforeValidator(_exact)]


class In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class InMore(BaseModel):
    """A body whose fields beyond the method's named parameters go to its ``**kwargs``."""

    model_config = ConfigDict(extra="allow", strict=True)


class Query(BaseModel):
    # Query strings are text: numbers are parsed from it (lax mode).
    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _schema(schema: dict[str, Any], base: Any = Any, *more: Any) -> Any:
    return Annotated[base, *more, WithJsonSchema(schema)]


_LIST: Any = list  # ``list[type]`` of a type made at run time


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_NOT_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
_NO_NUL = "^[^\\x00]*$"
_TIME = _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 1e12})
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_SECONDS = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FLOAT}
_PROCESS = {
    "type": "object",
    "required": ["agent", "state"],
    "additionalProperties": False,
    "properties": {
        "agent": ID_SCHEMA,
        "state": {"type": "string", "enum": list(defaults.PROCESS_STATES)},
        "pid": _nullable(POSITIVE_INT.json_schema()),
        "restarts": _COUNT,
        "started_at": _TIME,
        "last_beat": _TIME,
        "flags": {
            "type": "array",
            "maxItems": 32,
            "items": {"type": "string", "minLength": 1, "maxLength": 64},
        },
        "last_exit": _nullable({"type": "object"}),
    },
}
# The agent config as the service checks it (corral.scheduler.agentconfig); a cron
# entry's expression and time zone are checked beyond their shape by the service.
_WORD = {"type": "string", "maxLength": 200, "pattern": _NOT_BLANK}
_WORDS = {"type": "array", "maxItems": 100, "items": _WORD}
_CRON = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cron"],
    "properties": {
        "cron": {"type": "string", "minLength": 1, "maxLength": 200},
        "task": ID_SCHEMA,
        "tz": {"type": "string", "minLength": 1, "maxLength": 64},
    },
}
_DISCOVERY = {
    "respond_to_questions": {"type": "boolean"},
    "respond_to_discussions": {"type": "boolean"},
    "min_confidence": {"type": "number", "minimum": 0, "maximum": 1},
}
_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **dict.fromkeys(("name", "type", "model"), _WORD),
        "interests": _WORDS,
        "watch_communities": _WORDS,
        "can_create_posts": {"type": "boolean"},
        **dict.fromkeys(("max_daily_posts", "max_daily_comments"), _nullable(_COUNT)),
        "discovery": {"type": "object", "additionalProperties": False, "properties": _DISCOVERY},
        "schedule_override": {"type": "array", "maxItems": 32, "items": _CRON},
        "min_activation_interval": _nullable({"type": "number", "minimum": 0, "maximum": 1e9}),
        "extra": {"type": "object"},
    },
}
_OUTCOME = {
    "type": "object",
    "properties": dict.fromkeys(("posts", "comments", "inbox_read"), _COUNT),
}
# A workflow host's reports (corral.workflows.service checks them).
_WAITER_PROPS: dict[str, Any] = {
    "step": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": _NOT_BLANK},
    "event_type": {"type": "string", "maxLength": 400, "pattern": _NO_NUL},
    "waiter_id": {"type": "string", "maxLength": 400, "pattern": _NO_NUL},
    "deadline": _nullable({"type": "number", "minimum": 0, "maximum": MAX_FLOAT}),
}
_WAITER = {
    "type": "object",
    "required": ["step", "event_type"],
    "additionalProperties": False,
    "properties": _WAITER_PROPS,
}
_STEP_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**31}
_STEP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **dict.fromkeys(("queue", "in_progress", "backoff"), _STEP_COUNT),
        "waiters": {
            "type": "array",
            "maxItems": 1000,
            "items": {
                **_WAITER,
                "required": ["event_type"],
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
_SERVED = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": ID_SCHEMA, "idle_release_after": _nullable(_SECONDS)},
}

NodeId = Annotated[Any, ID]
Role = _schema({**ID_SCHEMA, "x-corral-role": True}, str)
HandlerStatus = Literal["running", "released", "completed", "failed", "cancelled"]
HostState = Literal["idle", "busy", "resident", "completed", "failed", "cancelled"]
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

# The wire type of a parameter by its name (or "operation.name"), wherever it
# appears; see the module's docstring.
PARAM_TYPES: dict[str, Any] = {
    **dict.fromkeys(
        ("node_id", "host", "agent", "member", "actor", "runner_id", "agent_id", "workflow"),
        NodeId,
    ),
    "requested_by": NodeId,
    "role": Role,
    "pool": _schema({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}, str),
    "limit": Annotated[int, BeforeValidator(whole), WithJsonSchema(LIMIT.json_schema())],
    "after": Annotated[str, Field(max_length=64, description="Items after this id (a page).")],
    "tasks": Annotated[
        list[Annotated[Any, _keys_whole("max_attempts", "depends_on")]],
        Field(
            description="Items with add_task's fields: title, description, priority, role, "
            "max_attempts. One bad item refuses the batch.",
            json_schema_extra={"maxItems": 100_000},
        ),
    ],
    "processes": Annotated[
        _LIST[_schema(_PROCESS, Any, _keys_whole("pid", "restarts"))],
        Field(json_schema_extra={"maxItems": defaults.MAX_PROCESSES}),
    ],
    "config": _schema(
        _nullable(_CONFIG),
        dict[str, Any] | None,
        _keys_whole("max_daily_posts", "max_daily_comments"),
    ),
    "outcome": _schema(
        _nullable(_OUTCOME), dict[str, Any] | None, _keys_whole("posts", "comments", "inbox_read")
    ),
    "workflows": _LIST[_schema(_SERVED)],
    "event_type": _schema({"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,199}$"}, str),
    "steps": _schema(_STEPS, dict[str, Any]),
    "waiters": Annotated[_LIST[_schema(_WAITER)], Field(json_schema_extra={"maxItems": 1000})],
    "state": HostState,
    "idle_duration_gt": _schema(
        {"type": "number", "minimum": 0, "maximum": MAX_FLOAT},
        float,
        Field(ge=0, le=MAX_FLOAT),
        BeforeValidator(
            lambda v: _exact(whole(int(v))) if isinstance(v, str) and v.isdigit() else v
        ),
    ),
    "idempotency_key": IdempotencyKey,
    "kind": Annotated[str, Field(description="Comma-separated event kinds to keep.")],
    "node": Annotated[str, Field(description="Comma-separated node ids to keep.")],
    # roles an operation types as ids (its rule's schema) but checks as the cluster's
    **{f"{op}.role": Role for op in ("claim_best_task", "complete_and_claim")},
    "list_handlers.status": HandlerStatus,
    "report_handler.error": _schema(
        {"type": "string", "maxLength": 20_000, "pattern": _NO_NUL}, str
    ),
    "report_handler.reason": _schema(
        {"type": "string", "maxLength": 2000, "pattern": _NOT_BLANK}, str
    ),
}


Count = Annotated[int, BeforeValidator(whole), WithJsonSchema(_COUNT)]


class HeartbeatPayload(InMore):
    """A heartbeat's payload: ``health_status``, ``current_tasks``,
    ``capacity_available`` and ``metrics``; any other field is kept as given."""

    health_status: HealthStatus | None = Field(None, description="Your health.")
    # (each item as the task id rule states it; the service checks the list whole)
    current_tasks: list[Annotated[Any, BeforeValidator(whole), TASK_REF]] | None = Field(
        None, description="Ids of the tasks you work on."
    )
    capacity_available: Count | None = Field(
        None, description="How many more tasks you could take."
    )
    metrics: dict[str, Any] | None = Field(
        None, description="e.g. cpu_usage, memory_usage (0-100)."
    )
    usage: Usage | None = Field(
        None, description="Usage since your last report: input_tokens, output_tokens, cost_usd."
    )


def settings_model(name: str, *, changes: bool, doc: str) -> type[BaseModel]:
    """A pydantic model of the cluster settings, built from ``model.Settings``'s fields
    (their one declaration): every field required (an answer), or every field optional
    and strict (a change; unknown keys refused)."""
    if changes:
        parse = {float: Number, int: Int}
        fields: dict[str, Any] = {n: (parse.get(t, t) | None, None) for n, t in TYPES.items()}
        config = ConfigDict(extra="forbid", strict=True)
    else:
        fields = {n: (t, ...) for n, t in TYPES.items()}
        config = Out.model_config
    return create_model(name, __config__=config, __doc__=doc, **fields)


ConfigureIn = settings_model(
    "ConfigureIn", changes=True, doc="Settings to change; every field is optional."
)
SettingsOut = settings_model("SettingsOut", changes=False, doc="The cluster's settings.")

# The model of a ``**kwargs`` parameter's fields, by its name.
KWARGS: dict[str, type[BaseModel]] = {"payload": HeartbeatPayload, "changes": ConfigureIn}

# Answers that are not a record's fields: the record, and the fields that replace or
# follow its own (``corral.server.generic.record_model``), or the model itself.
ANSWERS: dict[type, Any] = {
    Settings: SettingsOut,
    Handler: {
        "idle_since": (str | None, Field(description="When the run became idle (ISO 8601, UTC).")),
        "idle_since_unix": (float | None, ...),
    },
    Registered: {
        "text": (
            str,
            Field(
                description="The one-line answer, e.g. 'Node Node-X9J2 registered as developer "
                "(high). Active nodes: 3/4'."
            ),
        ),
        "token": (str, Field(description="This node's own bearer token.")),
    },
}


class HealthOut(Out):
    status: Literal["ok"]
    version: str


class ErrorBody(Out):
    code: str = Field(description="invalid_input, not_found, capacity, lease, unauthorized, …")
    message: str
    field: str | None


class ErrorOut(Out):
    error: ErrorBody
