"""The error envelope: ``{"error": {"code", "message", "field"}}`` with a 4xx status.

corral's own errors carry their status (``corral.errors``); the remote client maps the
codes back to the same exceptions.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from corral.errors import CorralError, InvalidInputError

__all__ = ["STATUS_BY_CODE", "ApiError", "envelope", "from_exception", "from_validation"]

# Statuses of the envelope codes that are not a ``CorralError``'s own (those carry
# their ``status``).
STATUS_BY_CODE: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "method_not_allowed": 405,
    "too_large": 413,
    "unsupported_media_type": 415,
}


class ApiError(Exception):
    """An answer other than success, raised anywhere in a request's handling."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def envelope(code: str, message: str, field: str | None = None) -> bytes:
    body = {"error": {"code": code, "message": message, "field": field}}
    return json.dumps(body, ensure_ascii=False).encode()


def from_exception(exc: CorralError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, exc.field)


def _loc(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if not (isinstance(p, str) and p.startswith("function-"))]
    return ".".join(parts) or None


def from_validation(exc: ValidationError, where: str) -> ApiError:
    """The first problem pydantic found, as one envelope (400 for malformed JSON)."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return ApiError(422, InvalidInputError.code, f"invalid {where}")
    first = errors[0]
    if first["type"] == "json_invalid":
        return ApiError(400, "bad_request", f"the {where} is not valid JSON: {first['msg']}")
    field = _loc(first["loc"])
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    prefix = f"{field}: " if field else f"{where}: "
    return ApiError(422, InvalidInputError.code, f"{prefix}{first['msg']}{more}", field)
