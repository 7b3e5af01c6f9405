"""The operations' parameter types: each is ``Annotated`` with its rule
(``corral.validation.Rule``: its check and message, its JSON Schema).

The ``Cluster`` methods declare their parameters with these types, and everything
else follows from the one rule: ``corral.validation.checked`` runs it at the edge of
``Cluster`` (so the HTTP API, the MCP tools, the remote client and the CLI answer its
message); pydantic states its schema in the HTTP models, the OpenAPI document and the
MCP tools' input schemas; the CLI's option types run its check. To a type checker
each is its plain type (``NodeId`` is ``str``).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias, get_args

from corral import defaults
from corral.budgets import SCOPE_SCHEMA, WINDOWS, check_scope
from corral.errors import InvalidInputError
from corral.types import NodeStatus, Priority, ProcessAction, SpawnStatus, Strength, TaskStatus
from corral.validation import (
    CHECKPOINT,
    EPOCH,
    EVENT_TYPE,
    FLAG,
    ID,
    LIMIT,
    OBJECT,
    PAYLOAD,
    POOL,
    POSITIVE,
    POSITIVE_INT,
    RECORD_ID,
    SEQ,
    TASK_REF,
    TOKEN_NAME,
    USAGE,
    Rule,
    check_task_id,
    one_of,
    seconds,
    text,
)
from corral.workflows.model import FINISHED, HANDLER_STATUSES

__all__ = [
    "DESCRIPTION",
    "HOST_STATES",
    "PRIORITY",
    "ROLE",
    "TASK_IDS",
    "TASK_TIME",
    "TITLE",
    "ActorName",
    "Checkpoint",
    "Epoch",
    "EventType",
    "Flag",
    "HandlerStatusName",
    "HostName",
    "HostState",
    "JsonObject",
    "JsonValue",
    "Limit",
    "Message",
    "ModelName",
    "NodeId",
    "NodeStatusName",
    "PoolName",
    "PositiveInt",
    "PriorityName",
    "ProcessActionName",
    "Reason",
    "RecordId",
    "RoleName",
    "RunError",
    "RunReason",
    "Seconds",
    "SecondsFromZero",
    "Seq",
    "SpawnStatusName",
    "StrengthName",
    "TaskAge",
    "TaskCancelStatus",
    "TaskIds",
    "TaskRef",
    "TaskRequeueStatus",
    "TaskStatusName",
    "TaskTime",
    "Text",
    "Title",
    "TokenName",
    "TokenRoleName",
    "Usage",
    "UsageScope",
    "UsageWindow",
    "Wait",
]

NodeId: TypeAlias = Annotated[str, ID]
"""An id (a node's, a host's, an agent's, a role claimed as): 1-64 characters, any
but control characters, no leading or trailing spaces (``validation.ID``)."""
TaskRef: TypeAlias = Annotated[int | str, TASK_REF]
"""A task id as callers may pass it: ``3``, ``"3"`` or ``"task-3"``."""
Limit: TypeAlias = Annotated[int, LIMIT]
"""A page size: a positive integer; at most 10,000 rows are returned."""
Seq: TypeAlias = Annotated[int, SEQ]
"""An event number to read after: 0 to 2**63-1."""
Epoch: TypeAlias = Annotated[int, EPOCH]
"""A lease epoch (or another number the cluster gave): a positive integer."""
PositiveInt: TypeAlias = Annotated[int, POSITIVE_INT]
Seconds: TypeAlias = Annotated[float, POSITIVE]
"""A positive number of seconds."""
Wait: TypeAlias = Annotated[float, seconds(defaults.MAX_CLAIM_WAIT)]
"""How long a claim may wait for a task: 0 to ``MAX_CLAIM_WAIT`` seconds."""
Flag: TypeAlias = Annotated[bool, FLAG]
TITLE = text(defaults.MAX_TITLE, empty=False)
DESCRIPTION = text(defaults.MAX_DESCRIPTION)
PRIORITY = one_of(*get_args(Priority))
Title: TypeAlias = Annotated[str, TITLE]
Text: TypeAlias = Annotated[str, DESCRIPTION]
Message: TypeAlias = Annotated[str, text(defaults.MAX_DESCRIPTION, empty=False)]
ModelName: TypeAlias = Annotated[str, text(200)]
HostName: TypeAlias = Annotated[str, text(255)]
SCOPE_DOC = "cluster, or role:R, model:M, pool:P, node:N or task:T"
Reason: TypeAlias = Annotated[str, text(500)]
JsonValue: TypeAlias = Annotated[Any, PAYLOAD]
"""Free-form JSON data (at most ``MAX_PAYLOAD_BYTES`` encoded)."""
JsonObject: TypeAlias = Annotated[dict[str, Any], OBJECT]
Usage: TypeAlias = Annotated[dict[str, Any], USAGE]
"""A usage report's deltas: ``{input_tokens, output_tokens, cost_usd}``."""
UsageScope: TypeAlias = Annotated[str, Rule(check_scope, SCOPE_SCHEMA, SCOPE_DOC)]
"""What usage is summed for: ``cluster``, ``role:R``, ``model:M``, ``pool:P``,
``node:N`` or ``task:T``."""
UsageWindow: TypeAlias = Annotated[str, one_of(*WINDOWS)]
NodeStatusName: TypeAlias = Annotated[str, one_of(*get_args(NodeStatus))]
TaskStatusName: TypeAlias = Annotated[str, one_of(*get_args(TaskStatus))]
TaskCancelStatus: TypeAlias = Annotated[
    str, one_of("pending", "in_progress", "scheduled", "blocked")
]
"""The statuses a task is cancelled from (``cancel_tasks``' status filter)."""
TaskRequeueStatus: TypeAlias = Annotated[str, one_of("failed", "in_progress")]
"""The statuses a task is requeued from (``requeue_tasks``' status filter)."""
TaskAge: TypeAlias = Annotated[float, seconds(defaults.MAX_TASK_AGE)]
"""A task's age in seconds (a bulk action's ``min_age``): 0 to ``MAX_TASK_AGE``."""
ROLE = Rule(
    ID.check,
    {**ID.schema, "x-corral-role": True},
    "one of the cluster's roles (checked against its settings)",
)
"""A role: an id whose schema the OpenAPI document turns into the cluster's roles
(``x-corral-role``); the operation checks it against the settings."""
RoleName: TypeAlias = Annotated[str, ROLE]
PriorityName: TypeAlias = Annotated[str, PRIORITY]
StrengthName: TypeAlias = Annotated[str, one_of(*get_args(Strength))]
ProcessActionName: TypeAlias = Annotated[str, one_of(*get_args(ProcessAction))]
TokenName: TypeAlias = Annotated[str, TOKEN_NAME]
"""A named token's name: 1-64 letters, digits, '.', '_' or '-'; not ``operator``."""
TokenRoleName: TypeAlias = Annotated[str, one_of("operator", "viewer")]
"""A named token's role: ``operator`` (may do everything) or ``viewer`` (reads only)."""
ActorName: TypeAlias = Annotated[str, text(200, empty=False)]
"""Who did something, as events record it: ``operator``, ``token:NAME``, ``node:ID``."""
PoolName: TypeAlias = Annotated[str, POOL]
"""A pool's name, as the fleet manifest names it: 1-64 letters, digits, '.', '_' or
'-', starting with a letter or digit (``validation.POOL``)."""
RecordId: TypeAlias = Annotated[int, RECORD_ID]
"""A stored record's number (a spawn request's): a positive integer (its digits too, as a
URL's path segment gives it)."""
SpawnStatusName: TypeAlias = Annotated[SpawnStatus, one_of(*get_args(SpawnStatus))]
"""A spawn request's status: pending, accepted, declined or withdrawn."""
SecondsFromZero: TypeAlias = Annotated[float, seconds(defaults.MAX_TASK_AGE)]
"""A duration in seconds: 0 to ``MAX_TASK_AGE`` (1e9 s, about 31 years; a bound a JSON
number holds exactly, so a larger one is refused rather than rounded into range)."""
HOST_STATES = ("idle", "busy", "resident", *FINISHED)
"""What a host reports of a workflow run: idle (with its waits), busy, resident (idle
but not releasable, with the reason), or finished (completed, failed, cancelled)."""
HandlerStatusName: TypeAlias = Annotated[str, one_of(*HANDLER_STATUSES)]
"""A workflow run's status: running, released, completed, failed or cancelled."""
HostState: TypeAlias = Annotated[str, one_of(*HOST_STATES)]
"""What a host reports of a workflow run (``HOST_STATES``)."""
EventType: TypeAlias = Annotated[str, EVENT_TYPE]
"""An event class's name (``Answer``): letters, digits and ``_``, at most 200."""
Checkpoint: TypeAlias = Annotated[dict[str, Any], CHECKPOINT]
"""A workflow run's serialized state: a JSON object of at most 16 MiB encoded."""
RunError: TypeAlias = Annotated[str, text(20_000)]
"""A failed workflow run's error: text of at most 20,000 characters."""
RunReason: TypeAlias = Annotated[str, text(2000, empty=False)]
"""Why a resident workflow run cannot be released: text of at most 2,000 characters."""


def _check_time(value: Any, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= defaults.MAX_TIMESTAMP
    ):
        raise InvalidInputError(
            f"{field} must be a time in seconds since the epoch (0 to {defaults.MAX_TIMESTAMP:g})",
            field=field,
        )
    return float(value)


TASK_TIME = Rule(
    _check_time,
    {"type": "number", "minimum": 0, "maximum": defaults.MAX_TIMESTAMP},
    "a time in seconds since the epoch (a task's not_before)",
)
TaskTime: TypeAlias = Annotated[float, TASK_TIME]
"""A moment, in seconds since the epoch (``not_before``): 0 to ``MAX_TIMESTAMP``."""


def _check_task_ids(value: Any, field: str) -> list[int]:
    if not isinstance(value, list) or len(value) > defaults.MAX_DEPENDENCIES:
        raise InvalidInputError(
            f"{field} must be a list of at most {defaults.MAX_DEPENDENCIES} task ids",
            field=field,
        )
    ids: list[int] = []
    for i, item in enumerate(value):
        ref = check_task_id(item, f"{field}[{i}]")
        if ref not in ids:
            ids.append(ref)
    return ids


TASK_IDS = Rule(
    _check_task_ids,
    {"type": "array", "items": TASK_REF.schema, "maxItems": defaults.MAX_DEPENDENCIES},
    f"a list of at most {defaults.MAX_DEPENDENCIES} task ids (3 or 'task-3')",
)
TaskIds: TypeAlias = Annotated[list[int | str], TASK_IDS]
"""Task ids (``depends_on``): a list of at most ``MAX_DEPENDENCIES``, each as
``TaskRef`` takes it; the same id twice counts once."""
