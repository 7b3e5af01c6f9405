"""What an operation's ``Cluster`` method says: its resolved annotations.

The surfaces built at run time (the generic HTTP handler, the MCP tools, the CLI's
commands of operations) and the code generator (``scripts/codegen.py``, a
development tool that nothing imports at run time) read an operation's parameters
and their types here: names its module imports only for the type checker resolve
too, and with ``extras`` each parameter keeps its rule (``corral.params``).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import sys
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from corral.operations import Operation

__all__ = ["method_types", "resolve"]


# Names an annotation may use without an import.
_BUILTIN = frozenset(n for n in dir(builtins) if not n.startswith("_")) | {"None"}


def _method(op: Operation) -> Callable[..., Any]:
    from corral.cluster import Cluster

    fn: Callable[..., Any] = getattr(Cluster, op.name)
    return fn


@cache
def _imports(module: str) -> dict[str, tuple[str, str]]:
    """What each name imported or defined in ``module`` is: ``{name: (module, name)}``,
    the imports under ``TYPE_CHECKING`` included."""
    mod = sys.modules[module]
    tree = ast.parse(Path(inspect.getfile(mod)).read_text())
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef) and node in tree.body:
            out[node.name] = (module, node.name)
        elif isinstance(node, ast.AnnAssign | ast.Assign) and node in tree.body:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = (module, t.id)
    return out


def _names(annotation: str) -> set[str]:
    tree = ast.parse(annotation, mode="eval")
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - _BUILTIN


def resolve(op: Operation, annotation: str) -> dict[str, tuple[str, str]]:
    """Where each name in ``annotation`` (of ``op``'s method) comes from."""
    fn = _method(op)
    where = _imports(fn.__module__)
    out = {}
    for name in _names(annotation):
        if name not in where:
            raise LookupError(
                f"{fn.__module__}.{fn.__qualname__}: cannot tell where {name!r} of its "
                f"annotation {annotation!r} comes from (import it by name in that module)"
            )
        out[name] = where[name]
    return out


def method_types(op: Operation, *, extras: bool = False) -> dict[str, Any]:
    """The resolved annotations of ``op``'s ``Cluster`` method (``return`` included),
    names imported only for the type checker too; with ``extras``, a parameter's
    ``Annotated`` metadata (its rule, ``corral.params``) is kept."""
    fn = _method(op)
    names: dict[str, Any] = {}
    for key, annotation in fn.__annotations__.items():
        if isinstance(annotation, str) and key != "self":
            for name, (module, real) in resolve(op, annotation).items():
                names[name] = getattr(importlib.import_module(module), real)
    resolved: dict[str, Any] = typing.get_type_hints(fn, localns=names, include_extras=extras)
    return resolved
