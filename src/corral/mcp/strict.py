"""Strict tool arguments: a call must fit the tool's published input schema exactly.

The SDK validates a call's arguments with pydantic in lax mode, which converts
(``"1"``, ``1.0`` and ``true`` pass as the integer 1) and drops arguments it does not
know. corral checks the arguments against the tool's own JSON schema first, with the
JSON types taken literally:

- ``integer``: a JSON number without a fraction part written as such; not a boolean,
  a string or a float (``1.0`` is refused);
- ``number``: an integer or a float; not a boolean or a string;
- ``string``, ``boolean``, ``array``, ``object``, ``null``: only that JSON type;
- an argument the schema does not name is refused (the schema is closed: its
  ``additionalProperties`` is false unless it says otherwise).

Nothing here knows a tool: ``problems(schema, arguments)`` works from the schema
alone, so every tool however registered gets the same rule. ``close(schema)`` marks a
schema closed for the clients that read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators

__all__ = ["close", "json_type", "problems"]

_MAX_SHOWN = 40


def _is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int | float) and not isinstance(instance, bool)


_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_integer, "number": _is_number}
)


def _stated(*_args: Any) -> None:
    """A value's bounds (a rule's schema: pattern, lengths, range, choices) are stated
    for the client but checked by the operation, which answers its rule's own message
    (``corral.validation``), the same on every surface."""


_BOUNDS = "pattern minLength maxLength minimum maximum exclusiveMinimum exclusiveMaximum enum"
# The jsonschema stubs leave ``extend`` unannotated (its result is a validator class).
_Strict = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, validators=dict.fromkeys(_BOUNDS.split(), _stated), type_checker=_TYPES
)


def close(schema: dict[str, Any]) -> dict[str, Any]:
    """Mark an object schema closed (no argument it does not name); in place."""
    schema.setdefault("additionalProperties", False)
    return schema


def json_type(value: Any) -> str:
    """The JSON type of a decoded JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a (sub)schema admits, in its own order."""
    out: list[str] = []
    declared = schema.get("type")
    if isinstance(declared, str):
        out.append(declared)
    elif isinstance(declared, list):
        out.extend(str(t) for t in declared)
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, ()):
            if isinstance(branch, dict):
                out.extend(t for t in _types(branch) if t not in out)
    return out


def _where(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(
    error: ValidationError, schema: dict[str, Any], arguments: dict[str, Any]
) -> list[str]:
    kind = error.validator
    where = _where(error)
    if kind == "additionalProperties" and not where:
        known = list(schema.get("properties", {}))
        takes = ", ".join(known) if known else "no arguments"
        return [
            f"{name}: unknown argument (this tool takes {takes})"
            for name in arguments
            if name not in known
        ]
    if kind == "required":
        names = error.validator_value if isinstance(error.validator_value, list) else []
        given = error.instance if isinstance(error.instance, dict) else {}
        missing = [n for n in names if n not in given]
        prefix = f"{where}." if where else ""
        return [f"{prefix}{name}: required argument missing" for name in missing]
    if kind in ("type", "anyOf", "oneOf"):
        expected = _types(error.schema) if isinstance(error.schema, dict) else []
        got_type = json_type(error.instance)
        fits = got_type in expected or (got_type == "integer" and "number" in expected)
        if kind != "type" and fits and error.context:
            # The value has a right type: what is wrong is inside it (an array's item).
            depth = len(error.absolute_path)
            inner = [
                e
                for e in error.context
                if not (e.validator == "type" and len(e.absolute_path) == depth)
            ]
            if inner:
                return [line for e in inner for line in _describe(e, schema, arguments)]
        if expected:
            wanted = " or ".join(expected)
            got = f"{json_type(error.instance)} {_shown(error.instance)}"
            return [f"{where or 'arguments'}: expected {wanted}, got {got}"]
    message = error.message
    if len(message) > 120:
        message = message[:119] + "…"
    return [f"{where or 'arguments'}: {message}"]


def problems(schema: dict[str, Any], arguments: Any) -> list[str]:
    """What is wrong with ``arguments`` for ``schema`` (empty when they fit), one
    entry per argument, each naming it: ``task_id: expected integer or string, got
    boolean true``; ``prority: unknown argument (this tool takes …)``."""
    if not isinstance(arguments, dict):
        return [f"arguments: expected object, got {json_type(arguments)}"]
    closed = close(dict(schema))
    errors: Iterable[ValidationError] = _Strict(closed).iter_errors(arguments)
    out: list[str] = []
    for error in errors:
        for line in _describe(error, closed, arguments):
            if line not in out:
                out.append(line)
    return sorted(out)
