"""A tiny loader for named SQL: ``-- name: X`` starts query X.

Statements that share a piece (the PostgreSQL claim's index heads, say) keep it once:
``-- part: P`` starts a part instead of a query, and a line ``-- include: P`` in a
query stands for that part's text (its own comment lines left out). Parts do not
include parts; every part is used, and every include names a part."""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["load_queries", "migrations", "parse_queries"]

_HEAD = re.compile(r"^--\s*(name|part):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^[ \t]*--\s*include:\s*(\w+)[ \t]*$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^[ \t]*--.*\n?", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def load_queries(dialect: str, *, pyformat: bool = False) -> dict[str, str]:
    """The queries of ``sql/<dialect>/queries.sql``; ``pyformat`` turns ``:x`` into
    ``%(x)s`` (psycopg's style)."""
    text = resources.files("corral.store").joinpath("sql", dialect, "queries.sql").read_text()
    return parse_queries(text, pyformat=pyformat, where=dialect)


def parse_queries(text: str, *, pyformat: bool = False, where: str = "") -> dict[str, str]:
    """``load_queries`` on a text; ``where`` names it in errors (``ValueError``)."""
    split = _HEAD.split(text)
    queries: dict[str, str] = {}
    parts: dict[str, str] = {}
    for kind, name, body in zip(split[1::3], split[2::3], split[3::3], strict=True):
        if kind == "name":
            found, what, body = queries, "query", body.strip().rstrip(";").strip()
        else:
            found, what = parts, "part"
        if name in found:
            raise ValueError(f"{what} {name!r} is defined twice ({where})")
        found[name] = body
    for name, body in parts.items():
        if _INCLUDE.search(body):
            raise ValueError(f"part {name!r} includes a part ({where}): parts do not nest")
        # Kept as written, indentation too: the include's line is replaced by it.
        parts[name] = _COMMENT_LINE.sub("", body).strip("\n").rstrip()
    used: set[str] = set()

    def include(m: re.Match[str]) -> str:
        if m[1] not in parts:
            raise ValueError(f"no part {m[1]!r} to include ({where})")
        used.add(m[1])
        return parts[m[1]]

    for name, sql in queries.items():
        sql = _INCLUDE.sub(include, sql)
        if pyformat:
            sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        queries[name] = sql
    if unused := sorted(parts.keys() - used):
        raise ValueError(f"parts never included ({where}): {', '.join(unused)}")
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
