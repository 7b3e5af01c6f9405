"""A tiny loader for named SQL: ``-- name: X`` starts query X."""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["load_queries", "migrations"]

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def load_queries(dialect: str, *, pyformat: bool = False) -> dict[str, str]:
    """The queries of ``sql/<dialect>/queries.sql``; ``pyformat`` turns ``:x`` into
    ``%(x)s`` (psycopg's style)."""
    text = resources.files("corral.store").joinpath("sql", dialect, "queries.sql").read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sql = body.strip().rstrip(";").strip()
        if pyformat:
            sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice for {dialect}")
        queries[name] = sql
    return queries


def migrations(dialect: str) -> list[tuple[int, str]]:
    """``(version, sql)`` for each ``sql/<dialect>/migrations/NNNN_*.sql``, in order."""
    folder = resources.files("corral.store").joinpath("sql", dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return sorted(found)


def schema(dialect: str) -> str:
    return resources.files("corral.store").joinpath("sql", dialect, "schema.sql").read_text()
