"""The shared backend: a fresh PostgreSQL database per test.

A template database with the schema is built once per test session; each test gets
``CREATE DATABASE … TEMPLATE`` and the database is dropped after it. That clone is
0.1-0.5 s of the server's work (its ~9 MB of catalogs go through the WAL), paid by
each of the ~560 tests on PostgreSQL: the contract suite's clients (``make``) take
instead a database of this process's pool, put back after the test in the template's
very state (see ``_reset``), and created from the template only when the pool is
empty. ``fresh_database`` (the tests whose processes may outlive a client) always
clones and drops. The server is ``$CORRAL_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``, used only to create, reset and drop
databases). An unreachable server FAILS the test.
"""

from __future__ import annotations

import contextlib
import os
import time
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
# The pool: databases in the template's state, not in use (at most _IDLE_MAX kept).
_idle: list[str] = []
_IDLE_MAX = 8
# The template's state (``_state``), and what ``_reset`` puts back: the rows of its
# tables that are not empty (COPY's text), and the tables referencing each table.
_template_state: str | None = None
_seeded: dict[str, bytes] = {}
_referenced_by: dict[str, set[str]] = {}


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


# Everything a test can leave in a database that a fresh clone of the template would
# not have: the schema (tables, columns and defaults, indexes, constraints, functions,
# triggers, types, views, rules, schemas, extensions, privileges, the database's own
# settings), each table's rows and physical state (its size, the planner's statistics),
# the sequences, large objects and prepared transactions. One digest of it all.
_STATE_SQL = """
SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM (
  SELECT 'rel ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
         || coalesce(c.relacl::text, '') || ' ' || c.relrowsecurity::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL
  SELECT 'col ' || a.attrelid::regclass || ' ' || a.attname || ' '
         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' '
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'idx ' || pg_get_indexdef(i.indexrelid) FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'con ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'fn ' || p.oid::regprocedure || ' ' || md5(p.prosrc) FROM pg_proc p
  WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT 'trg ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'type ' || t.oid::regtype FROM pg_type t
  WHERE t.typnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace,
                               'pg_toast'::regnamespace)
  UNION ALL
  SELECT 'enum ' || enumtypid::regtype || ' ' || enumlabel FROM pg_enum
  UNION ALL
  SELECT 'view ' || c.oid::regclass || ' ' || pg_get_viewdef(c.oid) FROM pg_class c
  WHERE c.relkind IN ('v', 'm') AND c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'rule ' || schemaname || '.' || tablename || ' ' || rulename FROM pg_rules
  UNION ALL
  SELECT 'policy ' || schemaname || '.' || tablename || ' ' || policyname FROM pg_policies
  UNION ALL
  SELECT 'nsp ' || nspname || ' ' || coalesce(nspacl::text, '') FROM pg_namespace
  WHERE nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'
  UNION ALL
  SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 'set ' || array_to_string(setconfig, ',') FROM pg_db_role_setting
  WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT 'size ' || c.oid::regclass || ' ' || pg_relation_size(c.oid) || ' ' || c.reltuples::text
         || ' ' || c.relpages
  FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'stats ' || count(*) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid
  WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'extstats ' || count(*) FROM pg_statistic_ext
  UNION ALL
  SELECT 'lo ' || count(*) FROM pg_largeobject_metadata
  UNION ALL
  SELECT 'prepared ' || count(*) FROM pg_prepared_xacts WHERE database = current_database()
) AS state(x)
"""


def _tables(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    rows = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c"
        " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


def _sequences_and_rows(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """Each sequence's state and each table's rows, as one digest (one query)."""
    rels = conn.execute(
        "SELECT c.oid::regclass::text, c.relkind::text FROM pg_class c"
        " WHERE c.relkind IN ('r', 'S') AND c.relnamespace = 'public'::regnamespace"
    ).fetchall()
    parts = [
        f"SELECT '{rel}' || ' ' || last_value || ' ' || is_called FROM {rel}"
        if kind == "S"
        else f"SELECT '{rel}' || ' ' || count(*) || ' '"
        f" || coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '') FROM {rel} t"
        for rel, kind in rels
    ]
    row = conn.execute(
        f"SELECT string_agg(x, E'\\n' ORDER BY x) FROM ({' UNION ALL '.join(parts)}) AS r(x)"
    ).fetchone()
    return str(row[0] if row else None)


def _state(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute(_STATE_SQL).fetchone()
    assert row is not None
    return f"{row[0]}\n{_sequences_and_rows(conn)}"


def _learn_template(name: str) -> None:
    """The template's state, its rows and its references, for ``_reset``."""
    global _template_state
    with psycopg.connect(url_for(name), autocommit=True) as conn:
        _template_state = _state(conn)
        for table in _tables(conn):
            with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
                data = b"".join(bytes(block) for block in copy)
            if data:
                _seeded[table] = data
        refs = conn.execute(
            "SELECT confrelid::regclass::text, conrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND connamespace = 'public'::regnamespace"
        ).fetchall()
    for target, source in refs:
        _referenced_by.setdefault(str(target), set()).add(str(source))


def _reset(name: str) -> str | None:
    """``name``, its sessions ended, under a new name and in the template's state; or
    None (then dropped) when that state cannot be shown. The new name keeps out any
    process of the last test that would connect again."""
    new = f"corral_t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            deadline = time.monotonic() + 5
            while conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise psycopg.OperationalError(f"sessions of {name} did not end")
                time.sleep(0.002)
            conn.execute(f'ALTER DATABASE "{name}" RENAME TO "{new}"')
    except psycopg.Error:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return None
    # A state that cannot be shown (an error on the way) is dropped below.
    with contextlib.suppress(psycopg.Error), psycopg.connect(url_for(new), autocommit=True) as conn:
        dirty = {
            str(table)
            for table, size, tuples in conn.execute(
                "SELECT c.oid::regclass::text, pg_relation_size(c.oid), c.reltuples"
                " FROM pg_class c"
                " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace"
            ).fetchall()
            if (size, tuples) != (0, -1) or str(table) in _seeded
        }
        todo, dirty = list(dirty), set()
        while todo:  # and every table referencing one of them (TRUNCATE's rule)
            table = todo.pop()
            if table not in dirty:
                dirty.add(table)
                todo += _referenced_by.get(table, ())
        with conn.transaction():
            if dirty:
                conn.execute(f"TRUNCATE {', '.join(sorted(dirty))} RESTART IDENTITY")
            for table in sorted(dirty & set(_seeded)):
                with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                    copy.write(_seeded[table])
            conn.execute(
                "DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class"
                " WHERE relnamespace = 'public'::regnamespace)"
            )
        if _state(conn) == _template_state:
            return new
    admin(f'DROP DATABASE IF EXISTS "{new}" WITH (FORCE)')
    return None


def pooled_database(request: pytest.FixtureRequest) -> str:
    """A database in the template's state, this test's alone, for clients of this
    process only (put back in the pool after the test: a process of the test still
    running then would find it gone, as if dropped); its URL."""
    template(request.config)
    if _template_state is None:
        _learn_template(template(request.config))
        request.config.add_cleanup(_drop_idle)
    if _idle:
        name = _idle.pop()
    else:
        name = f"corral_t_{uuid.uuid4().hex[:12]}"
        admin(f'CREATE DATABASE "{name}" TEMPLATE "{template(request.config)}"')

    def release() -> None:
        reset = _reset(name)
        if reset is not None:
            if len(_idle) < _IDLE_MAX:
                _idle.append(reset)
            else:
                admin(f'DROP DATABASE IF EXISTS "{reset}" WITH (FORCE)')

    request.addfinalizer(release)
    return url_for(name)


def _drop_idle() -> None:
    while _idle:
        admin(f'DROP DATABASE IF EXISTS "{_idle.pop()}" WITH (FORCE)')


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> corral.Cluster:
    client = corral.connect(pooled_database(request), clock=clock, pool_size=2)
    assert isinstance(client, corral.Cluster)  # a database URL gives the embedded client
    return client
