"""Event cursors on PostgreSQL under concurrent writers: a reader that follows
``events(since=cursor)`` or ``catch_up`` sees every committed event exactly once, in
``seq`` order — even though concurrent transactions commit in any order."""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

import corral
from corral.model import Event
from tests import pg_procs
from tests.backends import postgres as pg

CTX = mp.get_context("spawn")
WRITERS = 4
ROUNDS = 150


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    return pg.fresh_database(request)


def _tail(read: object, stop: threading.Event, seen: list[Event]) -> None:
    """Follow the events from cursor 0 until ``stop``, then drain what is left."""
    cursor = 0
    draining = False
    while True:
        batch = read(cursor)  # type: ignore[operator]
        seen.extend(batch)
        if batch:
            cursor = batch[-1].seq
        elif draining:
            return
        elif stop.is_set():
            draining = True  # one more empty read after the writers are done


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
    by_events: list[Event] = []
    by_catch_up: list[Event] = []
    tails = [
        threading.Thread(target=_tail, args=(lambda s: reader.events(s, 50), stop, by_events)),
        threading.Thread(
            target=_tail,
            args=(lambda s: reader.catch_up("R", s, limit=50).events, stop, by_catch_up),
        ),
    ]
    barrier.wait(timeout=60)
    for t in tails:
        t.start()
    try:
        finished = [out.get(timeout=300) for _ in writers]
    finally:
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
