"""Issue 16 defect 12: a library user whose PostgreSQL session is dropped gets a
retryable error, not psycopg-pool's "discarding closed connection" warning on stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.backends import postgres as pg

SCRIPT = textwrap.dedent(
    """
    import sys
    import psycopg
    import corral

    url = sys.argv[1]
    c = corral.connect(url, pool_size=1)
    c.add_task("before")
    for _ in range(3):  # drop the session under the pool, three times
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        try:
            c.list_tasks()
        except corral.StoreUnavailableError:
            print("unavailable")
        c.list_tasks()
    c.close()
    print("ok")
    """
)


def test_a_dropped_session_prints_no_pool_warning(request: pytest.FixtureRequest) -> None:
    url = pg.fresh_database(request)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, url], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["unavailable"] * 3 + ["ok"]
    assert "discarding closed connection" not in run.stderr
    assert run.stderr == ""
