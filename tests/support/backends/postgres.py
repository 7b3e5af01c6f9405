"""The shared backend: a fresh PostgreSQL database per test.

A template database with the schema is built once per test session; each test gets
``CREATE DATABASE … TEMPLATE`` (milliseconds) and the database is dropped after it.
The server is ``$CORRAL_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
used only to create and drop databases). An unreachable server FAILS the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import corral
from corral.clock import FakeClock
from corral.store.postgres import PostgresStore

ADMIN_URL = os.environ.get("CORRAL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

_template: str | None = None


def url_for(dbname: str) -> str:
    parts = urlsplit(ADMIN_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{dbname}", parts.query, ""))


def admin(sql: str) -> None:
    """Run one statement on the admin database (autocommit)."""
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is unreachable at {ADMIN_URL} ({exc}). Start it "
            "(pg_ctlcluster --skip-systemctl-redirect 15 main start) or set CORRAL_TEST_PG.",
            pytrace=False,
        )


def template(config: pytest.Config) -> str:
    """The session's template database (schema migrated), built on first use."""
    global _template
    if _template is None:
        name = f"corral_tpl_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin(f'CREATE DATABASE "{name}"')
        PostgresStore(url_for(name), pool_size=1).close()
        _template = name
        config.add_cleanup(lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    return _template


def fresh_database(request: pytest.FixtureRequest) -> str:
    """A new database cloned from the template, dropped when the test ends; its URL."""
    name = f"corral_t_{uuid.uuid4().hex[:12]}"
    admin(f'CREATE DATABASE "{name}" TEMPLATE "{template(request.config)}"')
    drop: Callable[[], None] = lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # noqa: E731
    request.addfinalizer(drop)
    return url_for(name)


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> corral.Cluster:
    client = corral.connect(fresh_database(request), clock=clock, pool_size=2)
    assert isinstance(client, corral.Cluster)  # a database URL gives the embedded client
    return client
