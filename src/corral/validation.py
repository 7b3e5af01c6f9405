"""Checks at the edge: ids, enums and sizes. Pure; raise ``InvalidInputError``."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any, cast

from corral import defaults
from corral.errors import InvalidInputError

__all__ = [
    "check_choice",
    "check_id",
    "check_limit",
    "check_payload",
    "check_positive",
    "check_seq",
    "check_task_id",
    "check_text",
]

MAX_INT = 2**63 - 1  # the largest integer a store column holds (64 bits, signed)
MAX_SEQ = MAX_INT  # the largest event number
# The largest float below 2**63: a number setting (a float) holds at most this; an
# integer above it would round into range, so it is refused as the float 2**63 is.
MAX_FLOAT = 9223372036854774784
MAX_LIMIT = 10_000  # the most rows one read returns (a larger limit is capped)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_TASK_ID = re.compile(r"^(?:task-)?(\d{1,18})$")


# Ids that passed ``check_id`` (the check depends on the text alone): a fleet uses a
# few ids over and over, and a claim or a heartbeat should not re-scan them each call.
_CHECKED_IDS: set[str] = set()
_CHECKED_IDS_MAX = 4096


def check_id(value: Any, field: str = "node_id") -> str:
    """A node id: 1-64 characters, no control characters, no surrounding spaces."""
    if value.__class__ is str and value in _CHECKED_IDS:
        return value
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string", field=field)
    if not value:
        raise InvalidInputError(f"{field} must not be empty", field=field)
    if len(value) > defaults.MAX_ID_LENGTH:
        raise InvalidInputError(
            f"{field} is longer than {defaults.MAX_ID_LENGTH} characters", field=field
        )
    if _CONTROL.search(value):
        raise InvalidInputError(f"{field} contains control characters", field=field)
    if value != value.strip():
        raise InvalidInputError(f"{field} has leading or trailing spaces", field=field)
    if value.__class__ is str:
        if len(_CHECKED_IDS) >= _CHECKED_IDS_MAX:
            _CHECKED_IDS.clear()
        _CHECKED_IDS.add(value)
    return value


def check_task_id(value: Any, field: str = "task_id") -> int:
    """A task id: a positive integer, or its decimal text (``"3"``, ``"task-3"``)."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{field} must be a task number", field=field)
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and (m := _TASK_ID.match(value.strip())):
        n = int(m.group(1))
    else:
        raise InvalidInputError(f"{field} must be a task number, got {value!r:.40}", field=field)
    if n <= 0 or n >= 2**63:
        raise InvalidInputError(f"{field} must be a positive task number", field=field)
    return n


def check_seq(value: Any, field: str = "since") -> int:
    """An event number to read after: an integer from 0 to ``MAX_SEQ``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise InvalidInputError(
            f"{field} must be an event number from 0 to {MAX_SEQ}; got {value!r:.40}",
            field=field,
        )
    return value


def check_choice(value: Any, choices: Iterable[str], field: str) -> str:
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise InvalidInputError(
            f"{field} must be one of {', '.join(options)}; got {value!r:.40}", field=field
        )
    return value


def check_text(value: Any, field: str, *, max_len: int, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string", field=field)
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{field} must not be empty", field=field)
    if len(value) > max_len:
        raise InvalidInputError(f"{field} is longer than {max_len} characters", field=field)
    if "\x00" in value:
        raise InvalidInputError(f"{field} contains a NUL character", field=field)
    return value


def check_positive(value: Any, field: str, *, integer: bool = False) -> float:
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    kind = "a positive integer" if integer else "a positive number"
    if (
        isinstance(value, bool)
        or not ok_type
        or (isinstance(value, float) and not math.isfinite(value))
        or value <= 0
    ):
        raise InvalidInputError(f"{field} must be {kind}; got {value!r:.40}", field=field)
    top = MAX_INT if integer else MAX_FLOAT
    if value > top:  # an int past a float's range, too
        raise InvalidInputError(
            f"{field} must be {kind} up to {top}; got {value!r:.40}", field=field
        )
    return cast("float", value)  # the int or float itself: no rounding of large ints


def check_limit(value: Any, field: str = "limit") -> int:
    """A page size: a positive integer (``check_positive``), capped at ``MAX_LIMIT``."""
    return min(int(check_positive(value, field, integer=True)), MAX_LIMIT)


def check_payload(value: Any, field: str) -> Any:
    """Free-form JSON data, at most ``MAX_PAYLOAD_BYTES`` once encoded."""
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{field} must be JSON data: {exc}", field=field) from None
    if len(encoded) > defaults.MAX_PAYLOAD_BYTES:
        raise InvalidInputError(
            f"{field} is larger than {defaults.MAX_PAYLOAD_BYTES} bytes", field=field
        )
    return value
