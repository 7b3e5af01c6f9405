"""The named-SQL loader: queries, and the parts several queries share."""

import re
from pathlib import Path

import pytest

import corral.store
from corral.store.queries import load_queries, parse_queries

STORE = Path(corral.store.__file__).parent
SHARED = (
    "sqldb.py",
    "sqlnodes.py",
    "sqltasks.py",
    "sqlviews.py",
    "sqlduties.py",
    "sqlprocs.py",
    "sqlworkflows.py",
    "stats.py",
    "signal.py",
    "sqlsched.py",
    "sqlspawn.py",
    "claimkeys.py",
    "sqlprogress.py",
    "sqltokens.py",
    "sqlusage.py",
)


def _code(*files: str) -> str:
    return "".join((STORE / f).read_text() for f in files)


def _adapter(dialect: str) -> tuple[str, ...]:
    """An adapter's modules: ``<dialect>.py`` or the package ``<dialect>/``."""
    files = [f"{dialect}.py"] if (STORE / f"{dialect}.py").is_file() else []
    files += [str(p.relative_to(STORE)) for p in sorted((STORE / dialect).glob("*.py"))]
    assert files, f"no adapter for {dialect}"
    return tuple(files)


TEXT = """\
-- name: one
SELECT 1;

-- part: cols
-- what the part is for (left out where it is included)
    a, b,
    c

-- name: two
SELECT
    -- include: cols
FROM t WHERE x = :x;
"""


def test_a_part_stands_where_it_is_included_without_its_comments() -> None:
    queries = parse_queries(TEXT)
    assert queries == {"one": "SELECT 1", "two": "SELECT\n    a, b,\n    c\nFROM t WHERE x = :x"}
    assert parse_queries(TEXT, pyformat=True)["two"].endswith("x = %(x)s")


@pytest.mark.parametrize(
    "text, message",
    [
        (TEXT + "-- name: one\nSELECT 2;\n", "query 'one' is defined twice"),
        (TEXT + "-- part: cols\nd\n", "part 'cols' is defined twice"),
        (TEXT.replace("include: cols", "include: colz"), "no part 'colz' to include"),
        (TEXT + "-- part: spare\nd\n", "parts never included (here): spare"),
        (TEXT.replace("    c\n", "    -- include: cols\n"), "parts do not nest"),
    ],
)
def test_a_broken_queries_file_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_queries(text, where="here")


def test_the_postgres_claims_share_their_parts() -> None:
    """claim_full, claim_lean and the two complete-and-claim statements take the task
    the same way: the heads and the pick are one text, included in each."""
    queries = load_queries("postgres")
    heads = "FOR UPDATE OF t SKIP LOCKED"
    takers = [name for name, sql in queries.items() if heads in sql]
    assert sorted(takers) == [
        "claim_full",
        "claim_lean",
        "complete_claim_full",
        "complete_claim_lean_quiet",
    ]
    assert not any("-- include:" in sql for sql in queries.values())


def test_the_shared_code_finds_its_queries_in_both_dialects() -> None:
    text = _code(*SHARED)
    used = set(re.findall(r'tx\.(?:one|all|run)\(\s*"(\w+)"', text))
    used |= set(re.findall(r'live\(tx, \w+, "(\w+)"\)', text))
    assert len(used) > 30
    for dialect in ("sqlite", "postgres"):
        assert used - set(load_queries(dialect)) == set(), dialect


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_no_query_is_left_unused(dialect: str) -> None:
    """Every named query is run by the shared code or by its dialect's adapter: SQL
    that nothing runs is not kept (and not kept in step with the schema)."""
    text = _code(*SHARED, *_adapter(dialect))
    unused = {name for name in load_queries(dialect) if f'"{name}"' not in text}
    assert unused == set()
