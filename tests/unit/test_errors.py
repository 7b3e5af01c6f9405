"""One error family: what corral raises at a caller is a ``CorralError``.

A ``raise`` of a built-in exception in ``src/corral`` is allowed only where it is not
an answer to a caller's input: invariants checked at import (the route table, the
named SQL), a programming error inside corral, pydantic validators (pydantic turns
their ``ValueError`` into the field's error), and a module's ``__getattr__``.
``corral/supervisor/`` is checked by its own tests.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import corral

SRC = Path(corral.__file__).parent
BUILTIN = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
# (module, exception): why it is not an answer to a caller's input.
ALLOWED = {
    ("__init__.py", "AttributeError"): "module __getattr__: Python's own protocol",
    ("server/__init__.py", "AttributeError"): "module __getattr__",
    ("server/dispatch.py", "ValueError"): "the route table checked when the app is built",
    ("server/generic.py", "RuntimeError"): "the route table checked at import",
    ("signatures.py", "LookupError"): "the developer's generator: an annotation it cannot import",
    ("remote_calls.py", "AttributeError"): "__getattr__ of an unknown name: Python's own protocol",
    ("server/openapi.py", "RuntimeError"): "the document's models checked when it is built",
    ("server/models.py", "ValueError"): "a pydantic validator (becomes the field's 422)",
    ("store/queries.py", "ValueError"): "the named SQL checked when loaded",
    ("store/base.py", "NotImplementedError"): "an adapter lacking a port method",
    ("store/sqlite/store.py", "RuntimeError"): "invariants of corral's own SQL",
    ("store/postgres/store.py", "RuntimeError"): "corral's own SQL, rewritten at import",
    ("store/postgres/session.py", "RuntimeError"): "corral's own SQL, rewritten at import",
    ("store/sqlite/store.py", "ValueError"): "a migration file of corral's own",
    ("store/rows.py", "RuntimeError"): "an invariant of corral's own row layout",
    ("mcp/server.py", "LookupError"): "an operation declared without its rendering",
    ("cli/supervise.py", "FileNotFoundError"): "control flow caught a few lines below",
}


def _raised(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BUILTIN:
                found.append((exc.id, node.lineno))
    return found


def test_corral_raises_no_builtin_exception_at_a_caller() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("supervisor/"):
            continue
        for name, line in _raised(path):
            if (rel, name) not in ALLOWED:
                wrong.append(f"{rel}:{line}: raise {name}")
    assert wrong == [], "raise a CorralError (corral.errors) instead: " + "; ".join(wrong)


def test_every_allowance_is_still_used() -> None:
    used = {
        (path.relative_to(SRC).as_posix(), name)
        for path in SRC.rglob("*.py")
        for name, _ in _raised(path)
    }
    assert set(ALLOWED) - used == set()
