"""A tiny loader for named SQL: ``-- name: X`` starts query X.

Statements that share a piece (the PostgreSQL claim's index heads, say) keep it once:
``-- part: P`` starts a part instead of a query, and a line ``-- include: P`` in a
query stands for that part's text (its own comment lines left out). A rule of the
hot path (``lifecycle.stamp_due``, ``lifecycle.status_after_finishing``) is written
once per dialect the same way, as ``-- rule: R``: an expression that queries and
parts include, so changing the rule changes ``queries.sql`` only. Parts do not
include parts, rules include nothing; every part and rule is used, and every include
names one."""

from __future__ import annotations

import re
from importlib import resources

from corral.errors import ConflictError

__all__ = ["load_queries", "migrations", "parse_queries"]

_HEAD = re.compile(r"^--\s*(name|part|rule):\s*(\w+)\s*$", re.MULTILINE)
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
    rules: dict[str, str] = {}
    kinds = {"name": (queries, "query"), "part": (parts, "part"), "rule": (rules, "rule")}
    for kind, name, body in zip(split[1::3], split[2::3], split[3::3], strict=True):
        found, what = kinds[kind]
        if kind == "name":
            body = body.strip().rstrip(";").strip()
        if name in queries or name in parts or name in rules:
            raise ValueError(f"{what} {name!r} is defined twice ({where})")
        found[name] = body
    for name, body in rules.items():
        if _INCLUDE.search(body):
            raise ValueError(f"rule {name!r} includes something ({where}): rules are whole")
        rules[name] = _COMMENT_LINE.sub("", body).strip("\n").rstrip()
    used: set[str] = set()

    def rule(m: re.Match[str]) -> str:
        if m[1] in parts:
            raise ValueError(f"a part includes part {m[1]!r} ({where}): parts do not nest")
        if m[1] not in rules:
            raise ValueError(f"no part {m[1]!r} to include ({where})")
        used.add(m[1])
        return rules[m[1]]

    for name, body in parts.items():
        # Kept as written, indentation too: the include's line is replaced by it.
        parts[name] = _COMMENT_LINE.sub("", _INCLUDE.sub(rule, body)).strip("\n").rstrip()

    def include(m: re.Match[str]) -> str:
        if m[1] in rules:
            return rule(m)
        if m[1] not in parts:
            raise ValueError(f"no part {m[1]!r} to include ({where})")
        used.add(m[1])
        return parts[m[1]]

    for name, sql in queries.items():
        sql = _INCLUDE.sub(include, sql)
        if pyformat:
            sql = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        queries[name] = sql
    if unused := sorted((parts.keys() | rules.keys()) - used):
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


def refuse_newer(found: int, dialect: str, where: str) -> None:
    """``ConflictError`` when the store at ``where`` holds a migration (``found``, its
    latest) newer than any of this corral's: a newer corral wrote it, and this one
    would miss the rules its schema carries. Nothing is changed."""
    known = migrations(dialect)[-1][0]
    if found > known:
        raise ConflictError(
            f"the store at {where} has schema version {found}, newer than this corral's"
            f" {known}: a newer corral wrote it; upgrade corral to use it",
            field="url",
        )


def schema(dialect: str) -> str:
    return resources.files("corral.store").joinpath("sql", dialect, "schema.sql").read_text()
