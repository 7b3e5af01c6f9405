"""One exception root for everything corral raises on purpose.

Each class states what it means on every surface: ``code`` (the stable name in the
HTTP error envelope and in logs), ``status`` (the HTTP status), ``exit_code`` (the
CLI's: 1 refused, 2 bad input, 3 unavailable); ``hint`` (what to do next, which the
MCP tools' ``ERROR:`` answers end with). The server, the remote client, the
MCP tools and the CLI look these up instead of keeping tables of their own.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "BudgetError",
    "CapacityError",
    "ConflictError",
    "CorralError",
    "InvalidInputError",
    "LeaseError",
    "NotFoundError",
    "StoreUnavailableError",
    "TaskCancelledError",
    "error_class",
]


class CorralError(Exception):
    """Root of corral's errors. ``code`` is a stable machine-readable name."""

    code = "corral_error"
    status = 400
    exit_code = 1
    hint = "Nothing was changed."

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInputError(CorralError, ValueError):
    """An argument was malformed or out of range; nothing was written."""

    code = "invalid_input"
    status = 422
    exit_code = 2
    hint = "Fix that argument and call again."


class NotFoundError(CorralError):
    """The named node or task does not exist (or is terminated)."""

    code = "not_found"
    status = 404
    exit_code = 2
    hint = "Call read_state to see the nodes and tasks that exist."


class CapacityError(CorralError):
    """The cluster is at ``max_agents``; the registration was rejected."""

    code = "capacity"
    status = 409
    exit_code = 1
    hint = "Wait for a node to retire, or raise max_agents."


class LeaseError(CorralError):
    """The caller does not hold the task's lease (or names an older epoch)."""

    code = "lease"
    status = 409
    exit_code = 1
    hint = "You no longer hold that task: call claim_best_task for new work."


class ConflictError(CorralError):
    """The call contradicts the cluster's state or itself (a node that holds a task
    cannot go idle); nothing was written."""

    code = "conflict"
    status = 409
    exit_code = 1
    hint = "Nothing was changed: do what the message says first, then call again."


class TaskCancelledError(LeaseError, ConflictError):
    """The task was cancelled by the operator: its holder's completion or failure is
    refused (a ``LeaseError``, and a conflict with the cluster's state)."""

    code = "cancelled"
    status = 409
    exit_code = 1
    hint = "The operator cancelled that task: stop working on it and claim another."


class BudgetError(CorralError):
    """A budget of the cluster's ``budgets`` is spent: a claim by a node in its scope
    is refused until its window rolls over (the message names the budget and when it
    frees)."""

    code = "budget"
    status = 429
    exit_code = 1
    hint = "Wait until the budget's window frees it, or raise the budget."


class AuthError(CorralError):
    """The server refused the token (401) or what it may do (403)."""

    code = "unauthorized"
    status = 401
    exit_code = 1
    hint = "Use a token that may make this call."


class StoreUnavailableError(CorralError):
    """The store could not be reached or stayed locked; the call may be retried."""

    code = "unavailable"
    status = 503
    exit_code = 3
    hint = "Nothing was changed; retry in a few seconds."


# Envelope codes the server sends that are not a class's own ``code``.
_ALIASES: dict[str, type[CorralError]] = {
    "bad_request": InvalidInputError,
    "too_large": InvalidInputError,
    "forbidden": AuthError,
}


def error_class(code: str, status: int = 400) -> type[CorralError]:
    """The exception class for an error envelope's ``code`` (the remote client's
    mapping back); unknown codes are ``StoreUnavailableError`` for a 5xx, else
    ``CorralError``."""
    for cls in (
        TaskCancelledError,
        InvalidInputError,
        NotFoundError,
        CapacityError,
        BudgetError,
        LeaseError,
        ConflictError,
        AuthError,
        StoreUnavailableError,
    ):
        if cls.code == code:
            return cls
    alias = _ALIASES.get(code)
    if alias is not None:
        return alias
    return StoreUnavailableError if status >= 500 else CorralError
