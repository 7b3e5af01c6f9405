"""The PostgreSQL backend's pool (tests/support/backends/postgres.py): a database a test
used goes back to the next test in the template's very state, or is dropped."""

from __future__ import annotations

import uuid

import psycopg
import pytest

import corral
from tests.support.backends import postgres as pg


def _clone(request: pytest.FixtureRequest) -> str:
    pg.pooled_database(request)  # the template and its state, learned once
    name = f"corral_t_{uuid.uuid4().hex[:12]}"
    pg.admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg.template(request.config)}"')
    return name


def _exists(name: str) -> bool:
    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        return row.fetchone() == (1,)


def _drop(name: str) -> None:
    pg.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_used_database_comes_back_in_the_templates_state_under_a_new_name(
    request: pytest.FixtureRequest,
) -> None:
    name = _clone(request)
    with psycopg.connect(pg.url_for(name), autocommit=True) as conn:
        fresh = pg._state(conn)
    c = corral.connect(pg.url_for(name))
    c.register_node("n1", "developer")
    for i in range(5):
        c.add_task(f"t{i}")
    assert c.claim_best_task("n1", "developer") is not None
    c.close()
    with psycopg.connect(pg.url_for(name), autocommit=True) as conn:
        conn.execute("ANALYZE")  # the planner's statistics go too
        assert pg._state(conn) != fresh
        held = psycopg.connect(pg.url_for(name))  # a session left open: ended
    reset = pg._reset(name)
    held.close()
    assert reset is not None and reset != name
    try:
        assert not _exists(name)  # the old name reaches nothing
        with psycopg.connect(pg.url_for(reset), autocommit=True) as conn:
            assert pg._state(conn) == fresh
        with corral.connect(pg.url_for(reset)) as again:
            assert again.list_tasks() == [] and again.list_nodes() == []
            assert again.add_task("first").id == 1  # the sequences start again
    finally:
        _drop(reset)


def test_a_database_whose_schema_changed_is_dropped_not_reused(
    request: pytest.FixtureRequest,
) -> None:
    name = _clone(request)
    with psycopg.connect(pg.url_for(name), autocommit=True) as conn:
        conn.execute("ALTER TABLE tasks ADD COLUMN extra int")
    try:
        assert pg._reset(name) is None
        assert not _exists(name)
        assert not [d for d in pg._idle if not _exists(d)]  # the pool holds live ones only
    finally:
        _drop(name)
