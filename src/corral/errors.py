"""One exception root for everything corral raises on purpose."""

from __future__ import annotations

__all__ = [
    "CapacityError",
    "CorralError",
    "InvalidInputError",
    "LeaseError",
    "NotFoundError",
    "StoreUnavailableError",
]


class CorralError(Exception):
    """Root of corral's errors. ``code`` is a stable machine-readable name."""

    code = "corral_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInputError(CorralError, ValueError):
    """An argument was malformed or out of range; nothing was written."""

    code = "invalid_input"


class NotFoundError(CorralError):
    """The named node or task does not exist (or is terminated)."""

    code = "not_found"


class CapacityError(CorralError):
    """The cluster is at ``max_agents``; the registration was rejected."""

    code = "capacity"


class LeaseError(CorralError):
    """The caller does not hold the task's lease (or names an older epoch)."""

    code = "lease"


class StoreUnavailableError(CorralError):
    """The store could not be reached or stayed locked; the call may be retried."""

    code = "unavailable"
