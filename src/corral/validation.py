"""Checks at the edge: ids, enums and sizes. Pure; raise ``InvalidInputError``.

Each check is also a ``Rule``: the check (its message says what the value must be,
naming the parameter), its JSON Schema and a line of help. A rule is the metadata of
an ``Annotated`` parameter type (``corral.types.NodeId = Annotated[str, ID]``); the
``Cluster`` methods declare their parameters with those types, and every surface
derives from the one rule: ``checked`` runs it at the edge of ``Cluster`` (so the
HTTP API, the MCP tools, the remote client and the CLI all answer its message), the
HTTP models, the OpenAPI document and the MCP input schemas state its schema
(pydantic reads it from the ``Annotated`` metadata), and the CLI's option types run
its check (``corral.cli._common.RuleType``).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from corral import defaults
from corral.errors import InvalidInputError

__all__ = [
    "CHECKPOINT",
    "EPOCH",
    "EVENT_TYPE",
    "ID",
    "LIMIT",
    "MAX_CHECKPOINT_BYTES",
    "OBJECT",
    "PAYLOAD",
    "POOL",
    "POSITIVE",
    "POSITIVE_INT",
    "RECORD_ID",
    "SEQ",
    "TASK_REF",
    "TOKEN_NAME",
    "USAGE",
    "USAGE_KEYS",
    "USAGE_MAX_COST",
    "USAGE_MAX_TOKENS",
    "Rule",
    "check_checkpoint",
    "check_choice",
    "check_event_type",
    "check_id",
    "check_limit",
    "check_payload",
    "check_pool",
    "check_positive",
    "check_record_id",
    "check_seconds",
    "check_seq",
    "check_task_id",
    "check_text",
    "check_usage",
    "checked",
    "one_of",
    "rule_of",
    "seconds",
    "text",
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
    if value is None:  # most calls leave it out: no encoder made for "null"
        return None
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{field} must be JSON data: {exc}", field=field) from None
    if len(encoded) > defaults.MAX_PAYLOAD_BYTES:
        raise InvalidInputError(
            f"{field} is larger than {defaults.MAX_PAYLOAD_BYTES} bytes", field=field
        )
    return value


def check_positive_id(value: Any, field: str) -> int:
    """A stored record's number (a lease epoch, an assignment): 1 to ``MAX_INT``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise InvalidInputError(f"{field} must be a positive integer", field=field)
    return value


def check_object(value: Any, field: str) -> dict[str, Any]:
    """A JSON object (``check_payload``'s size)."""
    if not isinstance(value, dict):
        raise InvalidInputError(f"{field} must be an object", field=field)
    return cast("dict[str, Any]", check_payload(value, field))


def check_flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{field} must be true or false", field=field)
    return value


# --- rules ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """One parameter rule: ``check(value, field)`` returns the value to use (an id as
    given, ``"task-3"`` as 3, a limit capped) or raises ``InvalidInputError`` with the
    rule's message naming ``field``; ``schema`` is the JSON Schema of the values it
    accepts; ``doc`` says it in words (help texts)."""

    check: Callable[[Any, str], Any]
    schema: Mapping[str, Any]
    doc: str

    def json_schema(self) -> dict[str, Any]:
        """A fresh copy of ``schema`` (callers may change theirs)."""
        copied: dict[str, Any] = json.loads(json.dumps(self.schema))
        return copied

    # pydantic reads a rule in ``Annotated`` metadata as its field's JSON Schema: the
    # HTTP models, the OpenAPI document and the MCP tools' input schemas state it.
    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return self.json_schema()


_SPACE_OR_CONTROL = r"\s\x00-\x1f\x7f-\x9f"
ID = Rule(
    check_id,
    {
        "type": "string",
        "minLength": 1,
        "maxLength": defaults.MAX_ID_LENGTH,
        "pattern": rf"^[^{_SPACE_OR_CONTROL}](?:[^\x00-\x1f\x7f-\x9f]*[^{_SPACE_OR_CONTROL}])?$",
    },
    f"1-{defaults.MAX_ID_LENGTH} characters, no control characters, no leading or trailing spaces",
)
TASK_REF = Rule(
    check_task_id,
    {
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": 10**18 - 1},
            {"type": "string", "pattern": r"^(task-)?[1-9][0-9]{0,17}$"},
        ]
    },
    'a task number: 3, or its text "3" or "task-3"',
)
SEQ = Rule(
    check_seq,
    {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
    f"an event number from 0 to {MAX_SEQ}",
)
LIMIT = Rule(
    check_limit,
    {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    f"a positive integer (at most {MAX_LIMIT} rows are returned)",
)
POSITIVE_INT = Rule(
    lambda v, f: int(check_positive(v, f, integer=True)),
    {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    "a positive integer",
)
POSITIVE = Rule(
    lambda v, f: float(check_positive(v, f)),
    {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FLOAT},
    "a positive number",
)
EPOCH = Rule(
    check_positive_id,
    {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    "a positive integer (a number the cluster gave)",
)
PAYLOAD = Rule(check_payload, {}, f"JSON data, at most {defaults.MAX_PAYLOAD_BYTES} bytes")
OBJECT = Rule(
    check_object,
    {"type": "object"},
    f"a JSON object, at most {defaults.MAX_PAYLOAD_BYTES} bytes",
)
FLAG = Rule(check_flag, {"type": "boolean"}, "true or false")

USAGE_KEYS = ("input_tokens", "output_tokens", "cost_usd")
USAGE_MAX_TOKENS = 10**12  # the most tokens one usage report (or budget) names
USAGE_MAX_COST = 1e9  # the most US dollars one usage report (or budget) names


def check_usage(value: Any, field: str = "usage") -> dict[str, Any]:
    """A usage report (deltas): ``input_tokens`` and ``output_tokens`` non-negative
    integers, ``cost_usd`` a non-negative number, each optional (0), no other key.

    The common report, a dict of the three with whole tokens and a float cost, is
    checked in a few comparisons and returned as it is: a worker's loop may report on
    every completion, and the ABC ``isinstance`` and a new dict cost it more than the
    checks."""
    if type(value) is dict and len(value) == 3:
        i, o, c = value.get("input_tokens"), value.get("output_tokens"), value.get("cost_usd")
        if (
            type(i) is int
            and type(o) is int
            and type(c) is float
            and 0 <= i <= USAGE_MAX_TOKENS
            and 0 <= o <= USAGE_MAX_TOKENS
            and 0.0 <= c <= USAGE_MAX_COST
        ):
            return value
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{field} must be an object of input_tokens, output_tokens and cost_usd",
            field=field,
        )
    unknown = sorted(set(value) - set(USAGE_KEYS))
    if unknown:
        raise InvalidInputError(
            f"{field} has unknown keys {unknown}; known: {', '.join(USAGE_KEYS)}", field=field
        )
    out: dict[str, Any] = {}
    for key in USAGE_KEYS:
        v = value.get(key, 0)
        integer = key != "cost_usd"
        most = USAGE_MAX_TOKENS if integer else USAGE_MAX_COST
        ok = (
            not isinstance(v, bool)
            and isinstance(v, int | float)
            and math.isfinite(v)
            and 0 <= v <= most
            and (not integer or isinstance(v, int) or v.is_integer())
        )
        if not ok:
            kind = "a non-negative integer" if integer else "a non-negative number"
            raise InvalidInputError(
                f"{field}.{key} must be {kind} up to {most:g}; got {v!r:.40}", field=field
            )
        out[key] = int(v) if integer else float(v)
    return out


USAGE = Rule(
    check_usage,
    {
        "type": "object",
        "properties": {
            "input_tokens": {"type": "integer", "minimum": 0, "maximum": USAGE_MAX_TOKENS},
            "output_tokens": {"type": "integer", "minimum": 0, "maximum": USAGE_MAX_TOKENS},
            "cost_usd": {"type": "number", "minimum": 0, "maximum": USAGE_MAX_COST},
        },
        "additionalProperties": False,
    },
    "usage deltas: input_tokens, output_tokens (integers), cost_usd (a number), none negative",
)


@functools.cache
def text(max_len: int, *, empty: bool = True) -> Rule:
    """Text of at most ``max_len`` characters with no NUL (not blank unless ``empty``)."""
    pattern = "^[^\\x00]*$" if empty else "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
    return Rule(
        lambda v, f: check_text(v, f, max_len=max_len, allow_empty=empty),
        {"type": "string", "maxLength": max_len, "pattern": pattern},
        f"text of at most {max_len} characters" + ("" if empty else ", not blank"),
    )


@functools.cache
def one_of(*options: str) -> Rule:
    """One of ``options``."""
    return Rule(
        lambda v, f: check_choice(v, options, f),
        {"type": "string", "enum": list(options)},
        f"one of {', '.join(options)}",
    )


@functools.cache
def seconds(most: float) -> Rule:
    """A number of seconds from 0 to ``most``."""

    def check(value: Any, field: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (0 <= value <= most)
        ):
            raise InvalidInputError(
                f"{field} must be a number of seconds from 0 to {most:g}", field=field
            )
        return value

    return Rule(check, {"type": "number", "minimum": 0, "maximum": most}, f"0 to {most:g} s")


def rule_of(annotation: Any) -> tuple[Rule | None, bool]:
    """The rule an annotation carries (``Annotated[str, ID]``, ``… | None``), and
    whether ``None`` is allowed besides."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return None, optional
        annotation = rest[0]
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in annotation.__metadata__:
            if isinstance(meta, Rule):
                return meta, optional
    return None, optional


_F = TypeVar("_F", bound=Callable[..., Any])


def checked(fn: _F) -> _F:
    """Run the rules of ``fn``'s parameters (their ``Annotated`` types) on every call,
    before its body: a bad argument raises the rule's ``InvalidInputError`` naming
    the parameter, and the body sees each value as its rule returns it. ``None`` is
    let through where the annotation allows it; a default is not checked."""
    spots: list[tuple[int, str, Rule, bool]] = []
    params = list(inspect.signature(fn).parameters.values())
    for i, p in enumerate(params):
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        annotation = p.annotation
        if isinstance(annotation, str):
            try:
                # The annotation is text (PEP 563) naming what its own module imported.
                annotation = eval(annotation, fn.__globals__)
            except NameError:
                continue  # a name imported for the type checker only: no rule
        rule, optional = rule_of(annotation)
        if rule is not None:
            where = i if p.kind is p.POSITIONAL_OR_KEYWORD else 1 << 30
            spots.append((where, p.name, rule, optional))
    if not spots:
        return fn
    simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)
    run = _compiled(fn, params, spots) if simple else _looped(fn, spots)
    functools.update_wrapper(run, fn)
    run.rules = {name: rule for _, name, rule, _ in spots}  # type: ignore[attr-defined]
    run.optional = frozenset(name for _, name, _, opt in spots if opt)  # type: ignore[attr-defined]
    return cast("_F", run)


class _Unset:
    """A checked parameter's default stand-in in a compiled wrapper: given, the value
    is checked; left out, the real default is passed on unchecked."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _compiled(
    fn: Callable[..., Any],
    params: list[inspect.Parameter],
    spots: list[tuple[int, str, Rule, bool]],
) -> Callable[..., Any]:
    """The wrapper of ``checked`` written out for ``fn``'s signature, as dataclasses
    writes ``__init__``: one line per checked parameter and a direct call, with no loop
    over the rules, no list of the arguments and no ``**kwargs`` (a claim and a
    completion go through it on every call of a worker's loop)."""
    ruled = {name: (rule, optional) for _, name, rule, optional in spots}
    scope: dict[str, Any] = {"_fn": fn, "_UNSET": _UNSET}
    heads: list[str] = []
    body: list[str] = []
    passed: list[str] = []
    star = False
    for p in params:
        name = p.name
        if p.kind is p.KEYWORD_ONLY and not star:
            heads.append("*")
            star = True
        if p.default is p.empty:
            heads.append(name)
        elif name in ruled:
            heads.append(f"{name}=_UNSET")
            scope[f"_d_{name}"] = p.default
        else:
            heads.append(f"{name}=_d_{name}")
            scope[f"_d_{name}"] = p.default
        passed.append(name if p.kind is p.POSITIONAL_OR_KEYWORD else f"{name}={name}")
        if name not in ruled:
            continue
        rule, optional = ruled[name]
        scope[f"_r_{name}"] = rule.check
        check = f"{name} = _r_{name}({name}, {name!r})"
        if p.default is not p.empty:
            body.append(f"    if {name} is _UNSET:\n        {name} = _d_{name}")
            body.append(
                f"    elif {name} is not None:\n        {check}"
                if optional
                else f"    else:\n        {check}"
            )
        elif optional:
            body.append(f"    if {name} is not None:\n        {check}")
        else:
            body.append(f"    {check}")
    source = (
        f"def {fn.__name__}({', '.join(heads)}):\n"
        + "\n".join(body)
        + f"\n    return _fn({', '.join(passed)})\n"
    )
    exec(compile(source, f"<checked {fn.__qualname__}>", "exec"), scope)
    made: Callable[..., Any] = scope[fn.__name__]
    return made


def _looped(fn: Callable[..., Any], spots: list[tuple[int, str, Rule, bool]]) -> Callable[..., Any]:
    """The wrapper of ``checked`` for a signature ``_compiled`` does not write out (a
    positional-only or a variadic parameter): the rules in a loop over the arguments."""

    def run(*given: Any, **kwargs: Any) -> Any:
        args = list(given)
        n = len(args)
        for where, name, rule, optional in spots:
            if where < n:
                value = args[where]
                if value is not None or not optional:
                    args[where] = rule.check(value, name)
            elif name in kwargs:
                value = kwargs[name]
                if value is not None or not optional:
                    kwargs[name] = rule.check(value, name)
        return fn(*args, **kwargs)

    return run


_TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RESERVED_TOKEN_NAME = "operator"  # the first-run operator token's


def check_token_name(value: Any, field: str = "name") -> str:
    """A named token's name: 1-64 letters, digits, '.', '_' or '-', starting with a
    letter or digit; not ``operator`` (the first-run token's name)."""
    if not isinstance(value, str) or not _TOKEN_NAME.fullmatch(value):
        raise InvalidInputError(
            f"{field} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter"
            f" or digit; got {str(value)[:40]!r}",
            field=field,
        )
    if value == _RESERVED_TOKEN_NAME:
        raise InvalidInputError(
            f"{field} {value!r} is the first-run operator token's; choose another", field=field
        )
    return value


TOKEN_NAME = Rule(
    check_token_name,
    {
        "type": "string",
        "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        "not": {"const": _RESERVED_TOKEN_NAME},
    },
    "1-64 letters, digits, '.', '_' or '-' (not operator)",
)


# --- spawn requests and workflow runs (corral.spawning, corral.workflows.service) -------
_POOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # the fleet manifest's id rule


def check_pool(value: Any, field: str = "pool") -> str:
    """A pool's name, as the fleet manifest names it: 1-64 letters, digits, '.', '_'
    or '-', starting with a letter or digit."""
    if not isinstance(value, str) or not _POOL.fullmatch(value):
        raise InvalidInputError(
            f"{field} must be 1-64 letters, digits, '.', '_' or '-'", field=field
        )
    return value


def check_record_id(value: Any, field: str) -> int:
    """A stored record's number as a caller may pass it: a positive integer, or its
    ASCII digits (a URL's path segment)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise InvalidInputError(f"{field} must be a positive integer", field=field)
    return value


def check_seconds(value: Any, field: str, *, zero: bool = False) -> float:
    """A finite number of seconds, positive (or 0 too when ``zero``), as a float."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
        or value > MAX_FLOAT
    ):
        what = "a non-negative" if zero else "a positive"
        raise InvalidInputError(f"{field} must be {what} number of seconds", field=field)
    return float(value)


_EVENT_TYPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")


def check_event_type(value: Any, field: str = "event_type") -> str:
    """An event class's name (``Answer``): a Python identifier of at most 200 ASCII
    characters."""
    if not isinstance(value, str) or not _EVENT_TYPE.match(value):
        raise InvalidInputError(
            f"{field} must be an event class's name (letters, digits, _)", field=field
        )
    return value


MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024  # a released workflow run's serialized state


def check_checkpoint(value: Any, field: str = "checkpoint") -> dict[str, Any]:
    """A workflow run's serialized state: a JSON object of at most
    ``MAX_CHECKPOINT_BYTES`` once encoded."""
    if not isinstance(value, dict):
        raise InvalidInputError(f"{field} must be an object", field=field)
    try:
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{field} must be JSON: {exc}", field=field) from None
    if size > MAX_CHECKPOINT_BYTES:
        raise InvalidInputError(f"{field} is larger than {MAX_CHECKPOINT_BYTES} bytes", field=field)
    return cast("dict[str, Any]", value)


POOL = Rule(
    check_pool,
    {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
    "1-64 letters, digits, '.', '_' or '-' (a pool's name in the fleet manifest)",
)
RECORD_ID = Rule(
    check_record_id,
    {
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            {"type": "string", "pattern": r"^[0-9]{1,19}$"},
        ]
    },
    "a positive integer (a number the cluster gave), or its digits",
)
EVENT_TYPE = Rule(
    check_event_type,
    {"type": "string", "pattern": _EVENT_TYPE.pattern},
    "an event class's name (letters, digits, _)",
)
CHECKPOINT = Rule(
    check_checkpoint,
    {"type": "object"},
    f"a JSON object, at most {MAX_CHECKPOINT_BYTES} bytes",
)
