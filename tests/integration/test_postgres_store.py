"""The PostgreSQL adapter's own guarantees (the shared behaviour runs in every test
that uses the ``cluster`` fixture)."""

from __future__ import annotations

import multiprocessing as mp
import re
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corral
from corral.cluster import Cluster
from corral.errors import ConflictError, StoreUnavailableError
from corral.scoring import best_order
from corral.store.postgres import PostgresStore
from corral.store.postgres.session import Sessions
from corral.store.queries import migrations, schema
from corral.store.rows import TASK_COLUMNS, TASK_TAIL
from tests.support import pg_procs, procs
from tests.support.backends import postgres as pg
from tests.support.worker_app import wait_for
from tests.unit.test_claim_order import boards, claim_sequence

CTX = mp.get_context("spawn")


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    return pg.fresh_database(request)


def _scratch_database() -> str:
    name = f"corral_s_{uuid.uuid4().hex[:12]}"
    pg.admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg._template}"')
    return name


def test_migrations_produce_exactly_the_schema(request: pytest.FixtureRequest) -> None:
    """A database migrated from nothing has the columns, indexes and functions of
    schema.sql."""
    migrated = pg.fresh_database(request)  # cloned from the migrated template
    name = f"corral_schema_{uuid.uuid4().hex[:10]}"
    pg.admin(f'CREATE DATABASE "{name}"')
    request.addfinalizer(lambda: pg.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    with psycopg.connect(pg.url_for(name), autocommit=True) as conn:
        conn.execute(schema("postgres"))

    def shape(url: str) -> tuple[Any, Any, Any]:
        with psycopg.connect(url) as conn:
            cols = conn.execute(
                "SELECT table_name, column_name, data_type, is_nullable, column_default"
                " FROM information_schema.columns WHERE table_schema = 'public'"
                " AND table_name <> 'corral_migrations' ORDER BY 1, 2"
            ).fetchall()
            idx = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
                " AND tablename <> 'corral_migrations' ORDER BY 1"
            ).fetchall()
            funcs = conn.execute(
                "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
                " JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'public' ORDER BY 1"
            ).fetchall()
        return cols, idx, funcs

    assert shape(migrated) == shape(pg.url_for(name))


def test_two_stores_opening_at_once_migrate_once(request: pytest.FixtureRequest) -> None:
    """Coordinators starting together: the advisory lock lets one migrate, the other waits."""
    name = f"corral_m_{uuid.uuid4().hex[:10]}"
    pg.admin(f'CREATE DATABASE "{name}"')
    request.addfinalizer(lambda: pg.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresStore(pg.url_for(name), pool_size=1).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(pg.url_for(name)) as conn:
        done = conn.execute("SELECT version FROM corral_migrations ORDER BY 1").fetchall()
        assert done == [(v,) for v, _ in migrations("postgres")]


def test_a_database_of_a_newer_schema_is_refused_and_left_alone(pg_url: str) -> None:
    """A database a newer corral migrated (a migration past this corral's last) is
    refused with a ConflictError naming both versions; nothing in it changes."""
    newer = max(v for v, _ in migrations("postgres")) + 1
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO corral_migrations (version) VALUES (%s)", [newer])
        before = conn.execute("SELECT version FROM corral_migrations ORDER BY 1").fetchall()
    with pytest.raises(ConflictError) as exc:
        PostgresStore(pg_url, pool_size=1)
    assert exc.value.field == "url"
    assert f"schema version {newer}, newer than this corral's {newer - 1}" in exc.value.message
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM corral_migrations ORDER BY 1").fetchall() == before


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(board=boards, role=st.sampled_from(["architect", "developer"]))
def test_postgres_claim_order_equals_scoring(board: Any, role: str) -> None:
    """On random boards, PostgreSQL's claim order is ``best_order``'s (as SQLite's)."""
    name = _scratch_database()
    try:
        claimed, cands, now = claim_sequence(pg.url_for(name), board, role)
    finally:
        pg.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert claimed == best_order(cands, role, now)


def test_waiting_claim_is_woken_by_add_task(pg_url: str) -> None:
    """An idle worker waiting in claim_best_task takes each task added, woken by the
    commit's NOTIFY: every one of 100 waits ends with the new task, seconds before its
    30 s wait would have run out (nothing else wakes it: there is no polling). How soon
    it wakes is a performance figure (p99 within 50 ms), measured by bench/pg_wake.py,
    not asserted here, where the machine may be loaded."""
    trials = 100
    wait = 30.0
    adder = corral.connect(pg_url)
    waiter = corral.connect(pg_url)
    assert isinstance(waiter, Cluster)  # a database URL gives the embedded client
    waiting = waiter.store
    assert isinstance(waiting, PostgresStore)
    waiter.register_node("W", "developer", heartbeat_interval=60)
    waiter.claim_best_task("W", "developer", wait=0.01)  # start LISTENing
    ready = threading.Event()
    got: list[tuple[int, float]] = []

    def wait_loop() -> None:
        for _ in range(trials):
            ready.set()
            task = waiter.claim_best_task("W", "developer", wait=wait)
            got.append((task.id if task else -1, time.perf_counter()))
            if task is not None:
                waiter.complete_task(task.id, "W", task.epoch)

    thread = threading.Thread(target=wait_loop)
    thread.start()
    latencies = []
    try:
        for i in range(trials):
            assert ready.wait(10)
            ready.clear()
            # the claim must be blocked in its wait (a claim before it is faster)
            wait_for(lambda: waiting._ready.waiters > 0, timeout=10, what="waiting claim")
            start = time.perf_counter()
            task = adder.add_task(f"job {i}")

            def answered(n: int = i) -> bool:
                return len(got) > n

            wait_for(answered, timeout=wait + 10, what="the waiting claim's answer")
            assert got[i][0] == task.id  # woken with the task, not timed out empty
            latencies.append(got[i][1] - start)
    finally:
        thread.join(timeout=wait + 10)
        adder.close()
        waiter.close()
    assert max(latencies) < wait / 6, latencies  # long before the wait ran out


def test_unreachable_server_is_a_clear_retryable_error() -> None:
    """No server at the address: StoreUnavailableError within the connect timeout."""
    start = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        corral.connect("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
    assert time.monotonic() - start < 5
    assert "retry" in str(info.value)


def test_a_statement_stuck_on_a_lock_times_out_as_unavailable(pg_url: str) -> None:
    """A call blocked past statement_timeout gets a retryable error, not a hang."""
    c = corral.connect(pg_url + "?statement_timeout=0.5")
    c.register_node("N", "developer")
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT * FROM nodes WHERE id = 'N' FOR UPDATE")
        start = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            c.heartbeat("N")
        assert time.monotonic() - start < 3
    assert c.heartbeat("N").id == "N"  # the pool recovered
    c.close()


def test_a_dropped_connection_is_unavailable_then_recovers(pg_url: str) -> None:
    """Server-side termination of the pool's connections: one retryable error, then
    the next call works on a fresh connection."""
    c = corral.connect(pg_url, pool_size=1)
    c.register_node("N", "developer")
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [dbname],
        )
    deadline = time.monotonic() + 10
    while True:
        try:
            assert c.heartbeat("N").id == "N"
            break
        except StoreUnavailableError as exc:
            assert "retry" in str(exc)
            assert time.monotonic() < deadline
    c.close()


def _left_idle_until_ended(conn: psycopg.Connection[Any]) -> None:
    """Open a transaction on ``conn``, leave it idle until the server has ended the
    session, then send the next statement (which fails)."""
    conn.execute("BEGIN")
    row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
    assert row is not None

    def ended() -> bool:
        with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
            alive = admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [row["pid"]]
            ).fetchone()
        return alive is None

    wait_for(ended, timeout=10, what="the server to end the idle transaction")
    conn.execute("SELECT 1")


def test_a_session_ended_idle_in_a_transaction_is_unavailable_then_recovers(
    pg_url: str,
) -> None:
    """A transaction left idle past ``idle_in_transaction_timeout`` (a client starved
    of CPU between two statements): the server ends the session with an
    ``InternalError``, which reaches the caller as the retryable StoreUnavailableError
    (it escaped as psycopg's own error, and ended a reader's thread under load); the
    next call works on a fresh connection."""
    sessions = Sessions(pg_url, pool_size=1, idle_in_transaction_timeout=0.2)
    try:
        with pytest.raises(StoreUnavailableError) as info, sessions.connection() as conn:
            _left_idle_until_ended(conn)
        assert "retry" in str(info.value)
        with sessions.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        sessions.close()


def test_a_read_only_transaction_outlives_the_idle_bound_of_a_writing_one(
    pg_url: str,
) -> None:
    """A read (``Sessions.read``) holds no row lock, so a reader starved of CPU between
    two statements keeps its snapshot: it is still served after the server has ended
    a writing transaction left idle as long, with the same 0.2 s bound."""
    sessions = Sessions(pg_url, pool_size=2, idle_in_transaction_timeout=0.2)
    try:
        with sessions.read("BEGIN READ ONLY") as tx:
            assert tx.one("event_get", seq=1) is None
            with pytest.raises(StoreUnavailableError), sessions.connection() as conn:
                _left_idle_until_ended(conn)
            assert tx.one("event_get", seq=1) is None  # the reader, idle as long: served
    finally:
        sessions.close()


def test_one_leader_and_handover_when_its_connection_drops(pg_url: str) -> None:
    """One store leads; when the leader's session ends the other takes over at once."""
    a = PostgresStore(pg_url, pool_size=1)
    b = PostgresStore(pg_url, pool_size=1)
    try:
        assert a.try_lead("A") is True
        assert b.try_lead("B") is False
        assert a.try_lead("A") is True
        # A's session only: this test's database (others may run a monitor named A),
        # and gone before B tries (pg_terminate_backend only signals the backend).
        dbname = urlsplit(pg_url).path.lstrip("/")
        with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
            pids = [
                r[0]
                for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE application_name = 'corral monitor A' AND datname = %s",
                    [dbname],
                )
            ]
            assert len(pids) == 1
            admin.execute("SELECT pg_terminate_backend(%s)", pids)
            deadline = time.monotonic() + 10
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", pids).fetchone():
                assert time.monotonic() < deadline, "the leader's backend did not exit"
                time.sleep(0.01)
        assert b.try_lead("B") is True
        with pytest.raises(StoreUnavailableError):
            a.try_lead("A")  # A learns it lost the lead
        assert a.try_lead("A") is False
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_capacity_holds_across_processes(pg_url: str) -> None:
    """Eight processes register at the same instant with room for four: four succeed."""
    with corral.connect(pg_url) as c:
        c.configure(max_agents=4)
    barrier = CTX.Barrier(8)
    out = CTX.Queue()
    racers = [
        CTX.Process(target=procs.register_when_released, args=(pg_url, f"R{i}", barrier, out))
        for i in range(8)
    ]
    for p in racers:
        p.start()
    results = dict(out.get(timeout=60) for _ in racers)
    for p in racers:
        p.join(timeout=30)
    assert sorted(results.values()) == ["capacity"] * 4 + ["ok"] * 4, results
    with corral.connect(pg_url) as c:
        assert len(c.list_nodes(status="working")) + len(c.list_nodes(status="idle")) == 4


@pytest.mark.slow
def test_concurrent_settings_changes_get_distinct_versions(pg_url: str) -> None:
    """Two processes change two different settings 40 times each at once: every
    change is its own version (the counter ends at 80, one settings_changed event
    each) — two changes sharing a version would let a cached role check pass on stale
    roles. (Different keys: the same key's row lock would serialize them anyway.)"""
    times = 40
    barrier = CTX.Barrier(2)
    out = CTX.Queue()
    racers = [
        CTX.Process(target=pg_procs.configure_many, args=(pg_url, n, times, barrier, out))
        for n in ("max_agents", "max_attempts")
    ]
    for p in racers:
        p.start()
    results = dict(out.get(timeout=120) for _ in racers)
    for p in racers:
        p.join(timeout=30)
    assert results == {"max_agents": [], "max_attempts": []}
    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'settings_version'").fetchone()
        changes = conn.execute(
            "SELECT count(*) FROM events WHERE kind = 'settings_changed'"
        ).fetchone()
    assert changes == (2 * times,)
    assert version == (str(2 * times),)


def test_complete_and_claim_statement_equals_complete_then_claim(
    request: pytest.FixtureRequest, tmp_path: Any, clock: Any
) -> None:
    """PostgreSQL's one-statement complete_and_claim leaves the node, the tasks and
    the events as complete_task then claim_best_task do: with the stamp not due, due,
    and with the node naming its task as current. (Activity stamps differ in when
    they are written: a lone completion makes the node idle, a change of state that
    stamps it; each node is stamped within a tenth of its window.)"""
    c = pg.make(request, tmp_path, clock)
    for node in ("A", "B"):
        c.register_node(node, "developer", heartbeat_interval=10)  # window 30 s
    c.add_tasks([{"title": f"job {i}"} for i in range(10)])
    held = {n: c.claim_best_task(n, "developer") for n in ("A", "B")}

    def step(advance: float, name_current: bool = False) -> None:
        clock.advance(advance)
        if name_current:
            for n in ("A", "B"):
                task = held[n]
                assert task is not None
                c.set_agent_status(n, "working", task.id)
        a = held["A"]
        assert a is not None
        c.complete_task(a.id, "A", a.epoch, result={"n": 1})
        held["A"] = c.claim_best_task("A", "developer")
        b = held["B"]
        assert b is not None
        _, held["B"] = c.complete_and_claim(b.id, "B", "developer", b.epoch, result={"n": 1})

    for advance, name_current in ((0.5, False), (4.0, False), (0.5, True), (0.1, False)):
        step(advance, name_current)
        a, b = c.get_node("A"), c.get_node("B")
        fields = ("status", "current_task_id", "idle_since")
        got_a = [getattr(a, f) for f in fields]
        got_b = [getattr(b, f) for f in fields]
        held_a, held_b = held["A"], held["B"]
        assert held_a is not None and held_b is not None
        got_a[1] = got_a[1] == held_a.id
        got_b[1] = got_b[1] == held_b.id
        assert got_a == got_b
        for seen in (a, b):
            assert clock.now() - seen.last_activity < 0.1 * 30
            assert seen.dead_at == seen.last_activity + 30
    events = c.events(0, 1000)
    for node in ("A", "B"):
        mine = [(e.kind, sorted(e.data)) for e in events if e.node_id == node]
        assert [k for k, _ in mine].count("task_completed") == 4
        assert mine[-2:] == [
            ("task_completed", ["claimed_at", "epoch"]),
            ("task_claimed", ["attempt", "created_at", "epoch", "role"]),
        ]
    kinds = {n: [e.kind for e in events if e.node_id == n] for n in ("A", "B")}
    assert kinds["A"] == kinds["B"]


def test_task_columns_are_the_tasks_table_in_order(pg_url: str) -> None:
    """The hot statements' rows are read as ``TaskRow``s made from the column list:
    TASK_COLUMNS must be the tasks table's leading columns in table order (what
    RETURNING * gives), and the ``TASK_TAIL`` columns added since are among the rest."""
    with psycopg.connect(pg_url) as conn:
        cols = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = 'tasks' ORDER BY ordinal_position"
        ).fetchall()
    names = tuple(c for (c,) in cols)
    assert names[: len(TASK_COLUMNS)] == TASK_COLUMNS
    assert set(TASK_TAIL) <= set(names[len(TASK_COLUMNS) :])


def test_the_claim_returns_the_task_row_columns(pg_url: str) -> None:
    """The take (claim_pick) and complete_claim_full's completion return ``TaskRow``'s
    columns in its order (the store reads them by position), and the tasks they make,
    with a progress deadline from the cached settings, equal the tasks read back."""
    from corral.store.queries import load_queries
    from corral.store.rows import TaskRow

    sql = load_queries("postgres")
    lists = re.findall(r"RETURNING (id, title,[^)]*?ready_at)\b", sql["complete_claim_full"])
    assert len(lists) == 2, lists
    for text in lists:
        assert tuple(c.strip() for c in text.split(",")) == TaskRow._fields
    c = corral.connect(pg_url)
    c.configure(progress_timeout=30)
    c.register_node("N", "developer")
    c.add_tasks([{"title": "one"}, {"title": "two", "progress_timeout": 5}, {"title": "three"}])

    def deadline(task_id: int) -> float:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT stuck_at - claimed_at FROM tasks WHERE id = %s", (task_id,)
            ).fetchone()
        assert row is not None
        return float(row[0])

    task = c.claim_best_task("N", "developer")
    assert task is not None and task == c.get_task(task.id)
    assert deadline(task.id) == pytest.approx(30)  # the cluster's setting
    deadlines = []
    for _ in range(2):  # the lean statement, then the full one after a settings change
        done, task = c.complete_and_claim(task.id, "N", "developer", task.epoch)
        assert done == c.get_task(done.id) and done.status == "done"
        assert task is not None and task == c.get_task(task.id)
        deadlines.append(deadline(task.id))
        c.configure(progress_timeout=60)
    assert deadlines == [pytest.approx(5), pytest.approx(60)]  # the task's own, then the new
    c.close()


def test_hot_statement_events_are_numbered_by_their_transaction(pg_url: str) -> None:
    """claim, complete and complete_and_claim number their events inline, as
    corral_event_seqs does: (the writing transaction's id << 20) + its n-th event,
    the first one 0 — each statement is its own transaction."""
    c = corral.connect(pg_url)
    c.register_node("N", "developer")
    c.add_tasks([{"title": "one"}, {"title": "two"}])
    first = c.claim_best_task("N", "developer")
    assert first is not None
    c.complete_and_claim(first.id, "N", "developer", first.epoch)
    second = c.list_tasks(status="in_progress")[0]
    c.complete_task(second.id, "N", second.epoch)
    c.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT kind, task_id, seq >> 20, seq & 1048575, xmin::text::bigint FROM events"
            " WHERE kind IN ('task_claimed', 'task_completed') ORDER BY seq"
        ).fetchall()
    assert [(k, t, n) for k, t, _, n, _ in rows] == [
        ("task_claimed", first.id, 0),
        ("task_completed", first.id, 0),
        ("task_claimed", second.id, 1),
        ("task_completed", second.id, 0),
    ]
    assert all(xid % 2**32 == xmin for _, _, xid, _, xmin in rows)
    assert rows[1][2] == rows[2][2]  # complete_and_claim: one transaction
    assert len({xid for _, _, xid, _, _ in rows}) == 3


def _drop_connections(pg_url: str) -> None:
    """End the sessions of ``pg_url``'s database and wait until they are gone."""
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [dbname],
        )
        wait_for(
            lambda: (
                admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname]
                ).fetchone()
                == (0,)
            ),
            timeout=10,
        )


def _until_served(call: Any) -> tuple[Any, int]:
    """``call()``'s answer once the store serves it, and the retryable errors before."""
    errors = 0
    deadline = time.monotonic() + 10
    while True:
        try:
            return call(), errors
        except StoreUnavailableError as exc:
            assert "retry" in str(exc)
            assert time.monotonic() < deadline
            errors += 1


def test_hot_statements_on_a_dropped_connection_are_unavailable_then_recover(
    pg_url: str,
) -> None:
    """claim and complete run on the pooled connection's kept cursor: when the server
    ends that connection, the call is a retryable error and the next one works."""
    c = corral.connect(pg_url, pool_size=1)
    c.register_node("N", "developer")
    c.add_tasks([{"title": "one"}, {"title": "two"}])
    _drop_connections(pg_url)
    task, errors = _until_served(lambda: c.claim_best_task("N", "developer"))
    assert task is not None and errors >= 1
    _drop_connections(pg_url)
    done, errors = _until_served(lambda: c.complete_task(task.id, "N", task.epoch))
    assert done.status == "done" and errors >= 1
    c.close()


def test_a_new_session_idles_the_node_its_last_completion_leaves_without_work(
    pg_url: str,
) -> None:
    """complete_and_claim's lean statement makes the node idle, when it takes nothing,
    through a function each pooled session makes as it opens: a session opened after
    the server ended the first one has it too. The node's row is read by another
    session."""
    c = corral.connect(pg_url, pool_size=1)
    c.register_node("N", "developer")
    [first, second] = c.add_tasks([{"title": "one"}, {"title": "two"}])
    task = c.claim_best_task("N", "developer")
    assert task is not None and task.id == first.id
    _drop_connections(pg_url)
    (done, nxt), errors = _until_served(
        lambda: c.complete_and_claim(task.id, "N", "developer", task.epoch)
    )
    assert errors >= 1 and done.status == "done" and nxt is not None and nxt.id == second.id
    _drop_connections(pg_url)
    _, errors = _until_served(lambda: c.heartbeat("N"))  # the session after: a new one
    assert errors >= 1
    done, nothing = c.complete_and_claim(nxt.id, "N", "developer", nxt.epoch)
    assert done.status == "done" and nothing is None
    with psycopg.connect(pg_url) as other:
        row = other.execute(
            "SELECT status, current_task_id, idle_since IS NOT NULL FROM nodes"
            " WHERE id = 'N' AND status <> 'terminated'"
        ).fetchone()
    assert row == ("idle", None, True)
    c.close()


def test_first_tasks_give_the_claim_tables_statistics(request: pytest.FixtureRequest) -> None:
    """A fresh cluster's first add_tasks analyzes the claim's tables, so no claim is
    planned without statistics until autovacuum gets to them."""
    url = pg.fresh_database(request)

    def unanalyzed() -> list[str]:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT relname FROM pg_class WHERE relname IN ('tasks', 'ready')"
                " AND reltuples < 0 ORDER BY relname"
            ).fetchall()
        return [r[0] for r in rows]

    assert unanalyzed() == ["ready", "tasks"]
    with corral.connect(url, pool_size=1) as c:
        c.add_tasks([{"title": f"Implement part {i}"} for i in range(20)])
        assert unanalyzed() == []
        c.register_node("W", "developer")
        claimed = c.claim_best_task("W", "developer")
        assert claimed is not None and claimed.title == "Implement part 0"
