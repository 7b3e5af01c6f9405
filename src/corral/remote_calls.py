"""What the remote client's operations share: calling an operation at its route, and
building the ``Cluster`` method's result from the answer.

``RemoteCalls._invoke(name, args)`` is the whole convention of the HTTP API
(``corral.server.generic`` reads it back the same way): the operation's path
parameters (``corral.operations``) are taken from ``args`` into its path, and the rest
go in the query string of a ``GET``, else in the JSON body, each under its
parameter's name; a ``**kwargs`` parameter's items go beside them, or in one object
field of its name when the operation adds it (``adds["http"]``). The answer (the
field the operation declares with ``answer``, or its protocol exception's) becomes
the method's return type: records built field by field, nested ones too.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import quote

from corral.errors import InvalidInputError
from corral.model import unfrozen_twin
from corral.operations import Operation, operation
from corral.validation import FLAG, Rule, check_id, check_task_id

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["RemoteCalls", "build", "segment"]

_T = TypeVar("_T", bound="DataclassInstance")

_FIELDS: dict[type, frozenset[str]] = {}
_MISSING = dataclasses.MISSING


class _Filling(typing.NamedTuple):
    """How ``build`` fills a record of a slotted dataclass without its ``__init__``:
    its ``model.unfrozen_twin`` to set the fields on, then the record's class given
    to it; each field's name, default and default factory; ``fill``, ``_filler``'s
    function for an object that has every field."""

    building: type
    fields: tuple[tuple[str, Any, Any], ...]
    fill: Callable[[dict[str, Any]], Any]


_FILLINGS: dict[type, _Filling | None] = {}


def _filling(cls: type) -> _Filling | None:
    """``cls``'s ``_Filling``, or None when it must be built by its ``__init__`` (it
    has no ``model.unfrozen_twin``)."""
    try:
        return _FILLINGS[cls]
    except KeyError:
        pass
    found = None
    building = unfrozen_twin(cls)
    if building is not None:
        spec = tuple((f.name, f.default, f.default_factory) for f in fields(cls))
        found = _Filling(building, spec, _filler(cls, building, {}))
    _FILLINGS[cls] = found
    return found


def _filler(
    cls: type, building: type, convert: dict[str, Callable[[Any], Any]]
) -> Callable[[dict[str, Any]], Any]:
    """A function that makes a ``cls`` record from an answer's object that has every
    field (those of ``convert`` converted), by one plain attribute store per field on
    ``cls``'s ``building`` twin, written out once per class as dataclasses writes an
    ``__init__``; it returns None when a field is absent (``build`` then gives the
    absent ones their defaults). A server answers with every field, so this is the
    path taken, and a store per field costs far less than a ``setattr`` call."""
    names = [f.name for f in fields(cls)]  # identifiers: a dataclass's fields
    lines = ["def fill(d):", "    try:"]
    lines += [f"        v{i} = d[{name!r}]" for i, name in enumerate(names)]
    lines += ["    except KeyError:", "        return None", "    r = new(building)"]
    for i, name in enumerate(names):
        lines.append(
            f"    r.{name} = convert_{name}(v{i})" if name in convert else f"    r.{name} = v{i}"
        )
    lines += ["    r.__class__ = cls", "    return r"]
    env: dict[str, Any] = {"new": object.__new__, "building": building, "cls": cls}
    env.update((f"convert_{name}", f) for name, f in convert.items())
    exec("\n".join(lines), env)  # the text is made here, of field names
    fill: Callable[[dict[str, Any]], Any] = env["fill"]
    return fill


def build(cls: type[_T], d: dict[str, Any]) -> _T:
    """``cls`` from a response object, ignoring fields this client does not know (a
    newer server may send more).

    A record's fields are set on its slots (``_filler``'s function when ``d`` has
    them all, else one by one with the defaults), then it is given its class, when it
    is a plain slotted dataclass: a JSON object's keys are not the interned strings
    of ``__init__``'s parameters, so ``cls(**d)`` matches each keyword by comparing
    strings with every parameter before it, which for a task's 27 fields cost more
    than the rest of building it."""
    filling = _filling(cls)
    if filling is not None:
        done = filling.fill(d)
        if done is not None:
            built_at_once: _T = done
            return built_at_once
        record: Any = object.__new__(filling.building)
        for name, default, factory in filling.fields:
            value = d.get(name, _MISSING)
            if value is _MISSING:
                if default is not _MISSING:
                    value = default
                elif factory is not _MISSING:
                    value = factory()
                else:
                    break  # a required field absent: __init__ says which
            setattr(record, name, value)
        else:
            record.__class__ = cls
            built: _T = record
            return built
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    if names.issuperset(d):
        return cls(**d)
    return cls(**{k: v for k, v in d.items() if k in names})


def _as_is(value: Any) -> Any:
    return value


@functools.cache
def converter(t: Any) -> Callable[[Any], Any]:
    """How an answer's JSON value becomes type ``t``: a record from its object (its
    ``from_dict`` when it has one, else field by field, nested records and tuples
    too), a list item by item, ``None`` as it is."""
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return converter(typing.get_args(t)[0])
    if origin in (typing.Union, types.UnionType):
        parts = [converter(a) for a in typing.get_args(t) if a is not type(None)]
        if len(parts) == 1 and parts[0] is not _as_is:
            one = parts[0]
            return lambda v: None if v is None else one(v)
        return _as_is
    if origin is list:
        item = converter(typing.get_args(t)[0])
        return _as_is if item is _as_is else lambda v: [item(x) for x in v]
    if origin is tuple:
        args = typing.get_args(t)
        if len(args) == 2 and args[1] is Ellipsis:
            return lambda v: tuple(v)
        each = [converter(a) for a in args]
        return lambda v: tuple(f(x) for f, x in zip(each, v, strict=True))
    if not (isinstance(t, type) and dataclasses.is_dataclass(t)):
        return _as_is
    from_dict = getattr(t, "from_dict", None)
    if from_dict is not None:
        return from_dict  # type: ignore[no-any-return]
    hints = typing.get_type_hints(t)
    inner = {f.name: converter(hints[f.name]) for f in fields(t)}
    inner = {n: f for n, f in inner.items() if f is not _as_is}
    if not inner:
        return lambda v: build(t, v)

    filling = _filling(t)
    fill = None if filling is None else _filler(t, filling.building, inner)

    def record(value: dict[str, Any]) -> Any:
        if fill is not None:
            done = fill(value)
            if done is not None:
                return done
        d = dict(value)
        for name, convert in inner.items():
            if name in d:
                d[name] = convert(d[name])
        return build(t, d)

    return record


_SEGMENTS: dict[tuple[str, str], str] = {}


def segment(name: str, value: Any, *, integer: bool = False) -> str:
    """``value`` of path parameter ``name`` as one path segment (checked, quoted;
    remembered once checked): a task id, a positive integer when ``integer``, else
    an id."""
    if type(value) is str:
        known = _SEGMENTS.get((name, value))
        if known is not None:
            return known
    elif type(value) is int and (integer or name == "task_id") and 1 <= value < 10**18:
        return str(value)
    if name == "task_id":
        return str(check_task_id(value))
    if integer:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 10**18:
            raise InvalidInputError(f"{name} must be a positive integer", field=name)
        return str(value)
    path = quote(check_id(value, name), safe="").replace(".", "%2E")
    if len(_SEGMENTS) >= 4096:
        _SEGMENTS.clear()
    _SEGMENTS[(name, value)] = path
    return path


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How the remote client calls one operation (built once per operation)."""

    op: Operation
    method: str
    path: str
    path_params: tuple[str, ...]
    get: bool
    rules: tuple[tuple[str, Rule, bool], ...]  # checked here: a GET's, the path's
    params: frozenset[str]  # the method's named parameters
    kwargs: str | None  # its ``**kwargs`` parameter
    nested: bool  # whose items are one object field of its name
    ints: frozenset[str]  # path parameters that are integers
    result: Callable[[Any], Any]  # the answer as the method's result
    body_field: str | None  # the argument a body JSON cannot carry names
    raw: bool  # a text answer


# The answer's fields that hold the result, by protocol exception.
_RESULT_FIELDS = {"waiting_claim": ("task",), "keyed_claim": ("done", "next")}


@functools.cache
def _plan(name: str) -> _Plan:
    from corral.cluster import Cluster
    from corral.signatures import method_types

    op = operation(name)
    method = getattr(Cluster, name)
    optional: frozenset[str] = getattr(method, "optional", frozenset())
    ruled: dict[str, Rule] = dict(getattr(method, "rules", {}))
    sig = inspect.signature(method).parameters.values()
    hints = method_types(op, extras=False)
    get = op.method == "GET"
    for p in sig:  # a query string's "yes" would be true: a plain bool is a flag
        flag = hints.get(p.name) in (bool, bool | None)
        if get and p.name not in ruled and flag:
            ruled[p.name] = FLAG
            optional |= {p.name}
    # Checked here: a GET's arguments (a query string would turn "3" into 3) and the
    # path's (a path would name another route); the server checks a body's.
    rules = tuple((p, r, p in optional) for p, r in ruled.items() if get or p in op.path_params)
    kwargs = next((p.name for p in sig if p.kind is p.VAR_KEYWORD), None)
    ints = frozenset(  # (a task id is its own rule's)
        p
        for p in op.path_params
        if p != "task_id" and (hints.get(p) is int or int in typing.get_args(hints.get(p)))
    )
    build_it = converter(hints.get("return"))
    picked = _RESULT_FIELDS.get(op.exception or "") or ((op.answer,) if op.answer else ())
    if len(picked) == 1:
        key = picked[0]
        result = lambda d: build_it(d[key])  # noqa: E731
    elif picked:
        result = lambda d: build_it([d[k] for k in picked])  # noqa: E731
    else:
        result = build_it
    named = frozenset(p.name for p in sig if p.name != "self" and p.kind is not p.VAR_KEYWORD)
    adds = op.adds.get("http", {})
    # A body JSON cannot carry names the argument: the **kwargs parameter by the name
    # HTTP gives it (``Operation.names``), else the offending key.
    field = op.names.get("http", {}).get(kwargs or "")
    raw = op.exception == "text_answer"
    plan = (op.method, op.path, op.path_params, get, rules, named, kwargs, kwargs in adds, ints)
    return _Plan(op, *plan, result, field, raw)


class RemoteCalls:
    """The generic call of an operation; needs ``request`` (``HttpClient``'s)."""

    if TYPE_CHECKING:

        def request(
            self,
            method: str,
            path: str,
            body: Any = None,
            *,
            query: dict[str, Any] | None = None,
            raw: bool = False,
            timeout: float | None = None,
            body_field: str | None = None,
        ) -> Any: ...

    # Per protocol exception, what the client does around the call (``HttpClient``).
    _around: ClassVar[dict[str, Callable[..., Any]]] = {}

    def _invoke(self, name: str, args: dict[str, Any], *, records: bool = True) -> Any:
        """Operation ``name`` with the arguments of its ``Cluster`` method (a GET's
        and the path's checked here by that method's rules first: a query string
        would turn ``"3"`` into 3, a path would name another route; the server checks
        a body's with the same rules and messages); the answer as the method's
        result (as JSON data without ``records``)."""
        plan = _plan(name)
        result = plan.result if records else _as_is
        op = plan.op
        if op.actor is not None:
            args.pop(op.actor, None)  # the server's: the caller's token
        for param, rule, optional in plan.rules:
            if param in args:
                value = args[param]
                if value is not None or not optional:
                    args[param] = rule.check(value, param)
        get = plan.get
        if get:
            args = {k: str(v).lower() if isinstance(v, bool) else v for k, v in args.items()}
        path = plan.path
        for param in plan.path_params:
            seg = segment(param, args.pop(param), integer=param in plan.ints)
            path = path.replace(f"{{{param}}}", seg)
        if plan.nested:
            more = {k: args.pop(k) for k in list(args) if k not in plan.params}
            args[str(plan.kwargs)] = more
        if op.exception is not None:
            around = self._around.get(op.exception)
            if around is not None:
                return result(around(self, op, path, args))
        if get:
            return result(self.request(plan.method, path, query=args, raw=plan.raw))
        return result(
            self.request(plan.method, path, args, raw=plan.raw, body_field=plan.body_field)
        )

    if not TYPE_CHECKING:  # a checker sees only the generated methods

        def __getattr__(self, name: str) -> Any:
            """An operation of the registry that has no generated method yet (added at
            run time, or before ``tools/codegen.py`` was run): its ``Cluster`` method's
            signature, called at its route; the answer as JSON data."""
            try:
                operation(name)
            except KeyError:
                raise AttributeError(name) from None
            return functools.partial(_call_operation, self, name)


def _call_operation(client: RemoteCalls, name: str, *args: Any, **kwargs: Any) -> Any:
    """Operation ``name`` with the arguments of its ``Cluster`` method, bound as that
    method binds them."""
    from corral.cluster import Cluster

    bound = inspect.signature(getattr(Cluster, name)).bind(None, *args, **kwargs)
    out: dict[str, Any] = {}
    for pname, value in list(bound.arguments.items())[1:]:
        kind = bound.signature.parameters[pname].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[pname] = value
    return client._invoke(name, out, records=False)
