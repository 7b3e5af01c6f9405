"""Event cursors on PostgreSQL under concurrent writers: a reader that follows
``events(since=cursor)`` or ``catch_up`` sees every committed event exactly once, in
``seq`` order — even though concurrent transactions commit in any order."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

import psycopg
import pytest

import corral
from corral.errors import StoreUnavailableError
from corral.model import Event
from tests.support import pg_procs
from tests.support.backends import postgres as pg

CTX = mp.get_context("spawn")
WRITERS = 4
ROUNDS = 150
READ_ROUNDS = 300


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    return pg.fresh_database(request)


def _tail(read: object, stop: threading.Event, last: list[int], seen: list[Event]) -> None:
    """Follow the events from cursor 0 until ``stop``, then until the cursor reaches
    ``last[0]`` (the database's last event once the writers are done; an empty read
    alone does not end it: a transaction of the other reader may still be in flight),
    at most 60 s. A read that loses its session (the server ends a transaction its
    thread, starved of CPU, left idle past the store's bound) is retried from the same
    cursor, as any follower retries a StoreUnavailableError."""
    cursor = 0
    deadline = None
    lost = 0
    while True:
        try:
            batch = read(cursor)  # type: ignore[operator]
        except StoreUnavailableError:
            lost += 1
            if lost > 20:  # not a lost session: an outage, which this test does not make
                raise
            continue
        lost = 0
        seen.extend(batch)
        if batch:
            cursor = batch[-1].seq
        elif stop.is_set():
            deadline = deadline or time.monotonic() + 60
            if cursor >= last[0] or time.monotonic() > deadline:
                return


@pytest.mark.slow
def test_concurrent_writers_tailing_reader_sees_each_event_once_in_order(pg_url: str) -> None:
    """4 writer processes (add, claim, complete, broadcast: four commits per round)
    race 2 readers, one tailing ``events(since=cursor)``, one tailing ``catch_up``.
    At the end each reader has every event of the database exactly once, in seq
    order (a reader that moved its cursor past a seq still in flight would miss it)."""
    with corral.connect(pg_url) as c:
        c.configure(max_agents=50)
    reader = corral.connect(pg_url, pool_size=2)
    reader.register_node("R", "developer", heartbeat_interval=600)
    barrier = CTX.Barrier(WRITERS + 1)
    out = CTX.Queue()
    writers = [
        CTX.Process(target=pg_procs.event_writer, args=(pg_url, f"W{i}", ROUNDS, barrier, out))
        for i in range(WRITERS)
    ]
    for p in writers:
        p.start()
    stop = threading.Event()
    last = [0]
    by_events: list[Event] = []
    by_catch_up: list[Event] = []
    tails = [
        threading.Thread(
            target=_tail, args=(lambda s: reader.events(s, 50), stop, last, by_events)
        ),
        threading.Thread(
            target=_tail,
            args=(lambda s: reader.catch_up("R", s, limit=50).events, stop, last, by_catch_up),
        ),
    ]
    barrier.wait(timeout=60)
    for t in tails:
        t.start()
    try:
        finished = [out.get(timeout=300) for _ in writers]
    finally:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT max(seq) FROM events").fetchone()
            assert row is not None
            last[0] = row[0]
        stop.set()
        for t in tails:
            t.join(timeout=60)
        for p in writers:
            p.join(timeout=30)
    assert sorted(finished) == [f"W{i}" for i in range(WRITERS)]
    everything = reader.events(0, 10_000)
    reader.close()
    written = [e.seq for e in everything if e.node_id and e.node_id.startswith("W")]
    assert len(written) >= WRITERS * ROUNDS * 3  # the race really happened
    want = [e.seq for e in everything]
    for name, seen in (("events", by_events), ("catch_up", by_catch_up)):
        got = [e.seq for e in seen]
        missing = sorted(set(want) - set(got))
        assert got == want, f"{name}: {len(missing)} missed, e.g. {missing[:5]}; " + (
            f"{len(got) - len(set(got))} repeated"
        )


# Server-side, so no client round trip paces it: a transaction id taken and committed
# at once, over and over, for at most 60 s (the test cancels it when done).
_CHURN = """DO $$ BEGIN
    WHILE clock_timestamp() < now() + interval '60 s' LOOP
        PERFORM pg_current_xact_id();
        COMMIT;
    END LOOP;
END $$"""


def _churn(conn: psycopg.Connection[Any], outcome: list[BaseException]) -> None:
    try:
        conn.execute(_CHURN)
    except BaseException as exc:
        outcome.append(exc)


def test_reads_see_their_own_writes_while_another_database_commits(pg_url: str) -> None:
    """Read-your-writes on a shared server: after ``broadcast`` returns, ``events``,
    ``process_actions``, ``stats`` and ``read_state`` see it, every time, while two
    sessions of ANOTHER database commit short transactions back to back. (A
    transaction of the other database that ended between the read's snapshot and its
    look at the running transactions once held the read's horizon below it: about 1
    read in 100 missed the event.)"""
    c = corral.connect(pg_url, pool_size=2)
    c.report_processes("h", [{"agent": "a", "state": "RUNNING", "pid": 100}])
    others = [psycopg.connect(pg.ADMIN_URL, autocommit=True) for _ in range(2)]
    outcome: list[BaseException] = []
    churns = [threading.Thread(target=_churn, args=(k, outcome)) for k in others]
    for t in churns:
        t.start()
    pids = [k.info.backend_pid for k in others]
    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
        deadline = time.monotonic() + 10

        def active() -> int:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'",
                [pids],
            ).fetchone()
            assert row is not None
            n: int = row[0]
            return n

        while active() < len(pids) and time.monotonic() < deadline:
            pass
    misses: list[str] = []
    try:
        for i in range(READ_ROUNDS):
            sent = c.broadcast(f"m{i}") if i % 2 else c.request_process_action("h", "a", "stop")
            if [e.seq for e in c.events(sent.seq - 1, 10)] != [sent.seq]:
                misses.append(f"events #{i}")
            asked = sent.kind == "process_action_requested"
            if asked and [e.seq for e in c.process_actions("h", sent.seq - 1)] != [sent.seq]:
                misses.append(f"process_actions #{i}")
            if c.stats().last_event != sent.seq:
                misses.append(f"stats #{i}")
            if c.read_state().last_event_ts != sent.ts:
                misses.append(f"read_state #{i}")
    finally:
        for k in others:
            k.cancel_safe()
        for t in churns:
            t.join(timeout=10)
        for k in others:
            k.close()
        c.close()
    # the other database committed all along: each churn ran until cancelled
    assert [type(e) for e in outcome] == [psycopg.errors.QueryCanceled] * len(others)
    assert misses == [], f"{len(misses)} stale reads of {READ_ROUNDS * 3.5:.0f}: {misses[:8]}"


def test_the_horizon_places_each_transaction_that_ended_after_the_snapshot(pg_url: str) -> None:
    """``corral_event_horizon(s)`` at READ COMMITTED, for transactions in flight in
    ``s`` that end before the call: one of another database is left out, one of
    this database that wrote no event is left out, one that committed events after
    ``s`` holds the horizon at its own events (the next read returns them)."""
    corral.connect(pg_url).close()  # the schema
    with (
        psycopg.connect(pg_url, autocommit=True) as reader,
        psycopg.connect(pg_url, autocommit=True) as ours,
        psycopg.connect(pg.ADMIN_URL, autocommit=True) as other,
        psycopg.connect(pg.ADMIN_URL, autocommit=True) as bump,
    ):

        def snapshot_while(conn: psycopg.Connection[Any], sql: str) -> tuple[str, int, int]:
            """A snapshot taken while ``conn`` runs ``sql`` in a transaction it then
            commits: (the snapshot, its xmax, that transaction's id, in the snapshot's
            list of transactions in flight)."""
            with conn.transaction():
                conn.execute(sql)
                row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
                assert row is not None
                xid: int = row[0]
                bump.execute("SELECT pg_current_xact_id()")  # a newer one ends: xid < xmax
                snap = reader.execute(
                    "SELECT s::text, pg_snapshot_xmax(s)::text::bigint"
                    " FROM pg_current_snapshot() AS s"
                ).fetchone()
                assert snap is not None
                s, xmax = snap
            return s, xmax, xid

        def horizon(s: str) -> int:
            row = reader.execute("SELECT corral_event_horizon(%s::pg_snapshot)", [s]).fetchone()
            assert row is not None
            seq: int = row[0]
            return seq

        for conn, sql in ((other, "SELECT 1"), (ours, "SELECT 1")):
            s, xmax, xid = snapshot_while(conn, sql)
            assert xid in _xip(reader, s)
            assert horizon(s) == xmax << 20  # nothing of ours in flight held it
        s, xmax, xid = snapshot_while(
            ours, "INSERT INTO events (ts, kind, data) VALUES (0, 'broadcast', '{}')"
        )
        assert xid < xmax and horizon(s) == xid << 20


def _xip(conn: psycopg.Connection[Any], s: str) -> list[int]:
    rows = conn.execute("SELECT x::text::bigint FROM pg_snapshot_xip(%s::pg_snapshot) AS x", [s])
    return [r[0] for r in rows.fetchall()]
