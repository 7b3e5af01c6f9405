"""The scheduler's HTTP handlers and models (``corral.server.routes`` adds them to its
table): one handler per operation, each a single ``Cluster`` call."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, WithJsonSchema, create_model

from corral.scheduler.records import Agent, Assignment, Notification
from corral.server.models import (
    ID_SCHEMA,
    NodeId,
    PositiveInt,
    _In,
    _Out,
    _Query,
    _whole,
    record_model,
)
from corral.validation import MAX_INT, MAX_LIMIT

__all__ = ["LIST_RESPONSES", "ROUTES"]

Mode = Literal["notification", "exploration", "hybrid"]

# The agent config as the service checks it (corral.scheduler.agentconfig); a cron
# entry's expression and time zone are checked beyond their shape by the service.
_NOT_BLANK = {"type": "string", "maxLength": 200, "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$"}
_WORDS = {"type": "array", "maxItems": 100, "items": _NOT_BLANK}
_COUNT = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_INT}, {"type": "null"}]}
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": _NOT_BLANK,
        "type": _NOT_BLANK,
        "model": _NOT_BLANK,
        "interests": _WORDS,
        "watch_communities": _WORDS,
        "can_create_posts": {"type": "boolean"},
        "max_daily_posts": _COUNT,
        "max_daily_comments": _COUNT,
        "discovery": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "respond_to_questions": {"type": "boolean"},
                "respond_to_discussions": {"type": "boolean"},
                "min_confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "schedule_override": {
            "type": "array",
            "maxItems": 32,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["cron"],
                "properties": {
                    "cron": {"type": "string", "minLength": 1, "maxLength": 200},
                    "task": ID_SCHEMA,
                    "tz": {"type": "string", "minLength": 1, "maxLength": 64},
                },
            },
        },
        "min_activation_interval": {
            "anyOf": [{"type": "number", "minimum": 0, "maximum": 1e9}, {"type": "null"}]
        },
        "extra": {"type": "object"},
    },
}
_OUTCOME_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
OUTCOME_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {k: _OUTCOME_COUNT for k in ("posts", "comments", "inbox_read")},
        },
        {"type": "null"},
    ]
}


# --- requests ---------------------------------------------------------------------------
def _config_whole(value: Any) -> Any:
    """The config's daily caps are integers as elsewhere in the API: a whole float
    (JSON Schema's integers include ``5.0``) is taken as its int (``_whole``)."""
    if isinstance(value, dict):
        caps = ("max_daily_posts", "max_daily_comments")
        return {k: _whole(v) if k in caps else v for k, v in value.items()}
    return value


class AddAgentIn(_In):
    agent_id: NodeId = Field(description="The agent's id (1-64 characters).")
    config: Annotated[
        dict[str, Any] | None,
        BeforeValidator(_config_whole),
        WithJsonSchema({"anyOf": [CONFIG_SCHEMA, {"type": "null"}]}),
    ] = Field(
        None,
        description="interests, watch_communities, can_create_posts, max_daily_posts, "
        "max_daily_comments, discovery, schedule_override, min_activation_interval, extra.",
    )


class ListAgentsQuery(_Query):
    after: str = Field("", max_length=64, description="Agents after this id (a page).")
    limit: int = Field(100, ge=1, le=MAX_LIMIT)


class NotifyIn(_In):
    payload: Any = Field(description="The inbox item: JSON, at most 64 KiB.")


class ReadInboxIn(_In):
    limit: PositiveInt = Field(100, description="At most this many items.")


class AssignmentIn(_In):
    mode: Mode = "hybrid"


class AssignmentReleaseIn(_In):
    runner_id: NodeId
    epoch: PositiveInt
    outcome: Annotated[dict[str, Any] | None, WithJsonSchema(OUTCOME_SCHEMA)] = Field(
        None, description="Counts (posts, comments, inbox_read) and free-form fields."
    )


class ListAssignmentsQuery(_Query):
    limit: int = Field(100, ge=1, le=MAX_LIMIT)


# --- responses --------------------------------------------------------------------------
AgentOut = record_model("AgentOut", Agent)
NotificationOut = record_model("NotificationOut", Notification)
AssignmentOut = record_model(
    "AssignmentOut",
    Assignment,
    kind=(Literal["inbox", "scheduled", "discovery"], ...),
    mode=(Mode, ...),
)


AssignmentAnswer = create_model(
    "AssignmentAnswer", __base__=_Out, assignment=(AssignmentOut | None, ...), text=(str, ...)
)


# --- handlers ---------------------------------------------------------------------------


def get_assignment(c: Any) -> Any:
    runner_id = c.path["runner_id"]
    c.act_as(runner_id)
    mode = c.body.mode if c.body is not None else "hybrid"
    a = c.cluster.get_assignment(runner_id, mode)
    text = "No assignment: nothing is due for this mode." if a is None else a.text
    return {"assignment": a, "text": text}


# name: (handler, response, body, query): routes.py's _Http fields
ROUTES: dict[str, tuple[Any, type[BaseModel] | None, Any, Any]] = {
    "add_agent": (None, AgentOut, AddAgentIn, None),
    "get_agent": (None, AgentOut, None, None),
    "list_agents": (None, None, None, ListAgentsQuery),
    "notify": (None, NotificationOut, NotifyIn, None),
    "read_inbox": (None, None, ReadInboxIn, None),  # up to 10,000 items
    "get_assignment": (get_assignment, AssignmentAnswer, AssignmentIn, None),
    "release_assignment": (None, AgentOut, AssignmentReleaseIn, None),
    "list_assignments": (None, None, None, ListAssignmentsQuery),
}
LIST_RESPONSES: dict[str, type[BaseModel]] = {
    "list_agents": AgentOut,
    "read_inbox": NotificationOut,
    "list_assignments": AssignmentOut,
}
