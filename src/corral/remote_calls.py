"""What the remote client's operations share: calling an operation at its route, and
building records from the answers.

``RemoteCalls._invoke(name, args)`` is the whole convention of the HTTP API: the
operation's path parameters (``corral.operations``) are taken from ``args`` into its
path, and the rest go in the query string of a ``GET``, else in the JSON body, each
under its parameter's name. The server's generic handler (``corral.server.routes``)
reads them back the same way.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import quote

from corral.errors import InvalidInputError
from corral.model import Task
from corral.operations import operation
from corral.validation import Rule, check_id, check_task_id

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["RemoteCalls", "build", "many", "maybe", "one", "segment"]

_T = TypeVar("_T", bound="DataclassInstance")

_FIELDS: dict[type, frozenset[str]] = {}


def build(cls: type[_T], d: dict[str, Any]) -> _T:
    """``cls`` from a response object, ignoring fields this client does not know (a
    newer server may send more)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    if names.issuperset(d):
        return cls(**d)
    return cls(**{k: v for k, v in d.items() if k in names})


def one(cls: type[_T], d: dict[str, Any]) -> _T:
    """The record ``cls`` from its JSON form: its ``from_dict`` when it has one (a
    record with nested records), else field for field."""
    if cls is Task:
        t = dict(d)
        t["roles"] = tuple(t.get("roles") or ())
        return build(cls, t)
    from_dict = getattr(cls, "from_dict", None)
    if from_dict is not None:
        made: _T = from_dict(d)
        return made
    return build(cls, d)


def many(cls: type[_T], rows: list[dict[str, Any]]) -> list[_T]:
    return [one(cls, d) for d in rows]


def maybe(cls: type[_T], d: dict[str, Any] | None) -> _T | None:
    return None if d is None else one(cls, d)


def segment(name: str, value: Any, *, integer: bool = False) -> str:
    """``value`` of path parameter ``name`` as one path segment (checked, quoted):
    a task id, a positive integer when ``integer``, else an id."""
    if name == "task_id":
        return str(check_task_id(value))
    if integer:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 10**18:
            raise InvalidInputError(f"{name} must be a positive integer", field=name)
        return str(value)
    return quote(check_id(value, name), safe="").replace(".", "%2E")


_RULES: dict[str, tuple[tuple[str, Rule, bool], ...]] = {}


def _rules(name: str) -> tuple[tuple[str, Rule, bool], ...]:
    """The rules of operation ``name``'s parameters (``corral.validation.checked``)."""
    found = _RULES.get(name)
    if found is None:
        from corral.cluster import Cluster

        method = getattr(Cluster, name)
        optional: frozenset[str] = getattr(method, "optional", frozenset())
        rules = getattr(method, "rules", {}).items()
        found = _RULES[name] = tuple((p, r, p in optional) for p, r in rules)
    return found


def _call_operation(client: RemoteCalls, name: str, *args: Any, **kwargs: Any) -> Any:
    """Operation ``name`` with the arguments of its ``Cluster`` method, bound as that
    method binds them (``_invoke`` checks them by its rules)."""
    from corral.cluster import Cluster

    bound = inspect.signature(getattr(Cluster, name)).bind(None, *args, **kwargs)
    out: dict[str, Any] = {}
    for pname, value in list(bound.arguments.items())[1:]:
        kind = bound.signature.parameters[pname].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[pname] = value
    return client._invoke(name, out)


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

    # Per operation, its path parameters that are integers (the others are ids).
    _int_paths: ClassVar[dict[str, frozenset[str]]] = {}

    def _invoke(self, name: str, args: dict[str, Any]) -> Any:
        """Operation ``name`` with the arguments of its ``Cluster`` method, checked
        here by that method's rules first (the embedded client's messages; a query
        string would turn ``"3"`` into 3)."""
        op = operation(name)
        for param, rule, optional in _rules(name):
            value = args.get(param)
            if param in args and (value is not None or not optional):
                args[param] = rule.check(value, param)
        path = op.path
        ints = self._int_paths.get(name, frozenset())
        for param in op.path_params:
            seg = segment(param, args.pop(param), integer=param in ints)
            path = path.replace(f"{{{param}}}", seg)
        raw = op.exception == "text_answer"
        if op.method == "GET":
            return self.request(op.method, path, query=args, raw=raw)
        return self.request(op.method, path, args, raw=raw)

    if not TYPE_CHECKING:  # a checker sees only the generated methods

        def __getattr__(self, name: str) -> Any:
            """An operation of the registry that has no generated method yet (added at
            run time, or before ``python -m corral.codegen`` was run): its ``Cluster``
            method's signature, called at its route; the answer as JSON data."""
            try:
                operation(name)
            except KeyError:
                raise AttributeError(name) from None
            return functools.partial(_call_operation, self, name)
