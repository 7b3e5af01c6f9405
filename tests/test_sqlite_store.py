"""The SQLite adapter: schema, migrations, pragmas, opening races."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

import corral
from corral import InvalidInputError
from corral.store.queries import load_queries, migrations, schema
from corral.store.sqlite import SQLiteStore

CTX = mp.get_context("spawn")


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    return [(t, n, " ".join(s.split())) for t, n, s in rows]


def test_migrations_produce_schema_sql(tmp_path):
    """Applying every migration gives exactly the schema in schema.sql."""
    store = SQLiteStore(tmp_path / "migrated.db")
    migrated = _objects(store._conn)
    store.close()
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    fresh.executescript(schema("sqlite"))
    assert migrated == _objects(fresh)
    assert sqlite3.connect(tmp_path / "migrated.db").execute("PRAGMA user_version").fetchone()[
        0
    ] == max(v for v, _ in migrations("sqlite"))


def test_opening_is_idempotent_and_keeps_data(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_task("Implement persistence")
    for _ in range(3):
        with corral.connect(url) as c:
            assert [t.title for t in c.list_tasks()] == ["Implement persistence"]


def _open_and_add(url: str, barrier, out) -> None:
    barrier.wait(timeout=30)
    try:
        with corral.connect(url) as c:
            c.add_task("Implement from a racer")
        out.put("ok")
    except Exception as exc:
        out.put(repr(exc))


def test_two_processes_create_a_new_file_at_once(tmp_path):
    """Both open (and migrate) the same new file concurrently; both succeed."""
    for trial in range(5):
        url = f"sqlite:///{tmp_path / f'new-{trial}.db'}"
        barrier, out = CTX.Barrier(2), CTX.Queue()
        procs = [CTX.Process(target=_open_and_add, args=(url, barrier, out)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert results == ["ok", "ok"]
        with corral.connect(url) as c:
            assert len(c.list_tasks()) == 2


def test_pragmas_wal_and_durability(tmp_path):
    store = SQLiteStore(tmp_path / "a.db")
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    full = corral.connect(f"sqlite:///{tmp_path / 'b.db'}?synchronous=FULL")
    assert full.store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with pytest.raises(InvalidInputError, match="synchronous"):
        SQLiteStore(tmp_path / "c.db", synchronous="SOMETIMES")


def test_every_query_name_used_exists():
    """Each name sqlbase.py runs is defined in the SQLite queries, and each compiles."""
    import re
    from pathlib import Path

    import corral.store.sqlbase as base

    folder = Path(base.__file__).parent
    text = "".join((folder / f).read_text() for f in ("sqlbase.py", "sqlviews.py", "sqlduties.py"))
    used = set(re.findall(r'tx\.(?:one|all|run)\(\s*"(\w+)"', text))
    used |= set(re.findall(r'self\._live\(tx, \w+, "(\w+)"\)', text))
    assert len(used) > 30
    queries = load_queries("sqlite")
    assert used - set(queries) == set()
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema("sqlite"))
    for sql in queries.values():
        conn.execute("EXPLAIN " + sql, {p: None for p in re.findall(r":(\w+)", sql)})


def test_claim_plans_use_the_indexes(tmp_path):
    """The claim reads two index heads: no scan of the pending set, no sort of it."""
    store = SQLiteStore(tmp_path / "plan.db")
    sql = load_queries("sqlite")["claim_take"]
    plan = " | ".join(
        r[3]
        for r in store._conn.execute(
            "EXPLAIN QUERY PLAN " + sql,
            {"role": "developer", "node_id": "A", "now": 0.0, "bonus": 900},
        )
    )
    assert "SEARCH ready USING PRIMARY KEY (role=?)" in plan
    assert "SCAN tasks USING INDEX tasks_ready" in plan
    assert "SCAN tasks " not in plan.replace("SCAN tasks USING INDEX tasks_ready", "")


def test_bad_urls_are_refused():
    with pytest.raises(InvalidInputError, match="sqlite:///"):
        corral.connect("sqlite://relative.db")
    with pytest.raises(InvalidInputError, match="unsupported"):
        corral.connect("mysql://x")
