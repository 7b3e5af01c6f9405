"""What the chaos campaign (bench/chaos.py) found about the monitor's leadership on
PostgreSQL, at the lowest tier that shows it: a leader whose process is stopped
(SIGSTOP, a paused VM) keeps the session advisory lock for as long as it is stopped,
since the kernel still answers for its socket, so no monitor recovers any lease
meanwhile. On SQLite another monitor stands in for a stopped leader
(tests/integration/test_monitor_leader.py); on PostgreSQL the server must end the stopped
leader's session once it has sent nothing for a bound (the leader's session's
``idle_session_timeout``), so that another monitor leads within that bound plus a
tick."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import corral
from corral.monitor import Duty, Monitor
from corral.store.postgres import PostgresStore
from tests.support.backends import postgres as pg

# A monitor that leads: try_lead at every tick (MONITOR_MAX_SLEEP apart), as
# Monitor.run does.
HOLDER = """
import sys, time
from corral.store.postgres import PostgresStore
store = PostgresStore(sys.argv[1], pool_size=1)
assert store.try_lead("child")
print("leading", flush=True)
while True:
    store.try_lead("child")
    time.sleep(0.5)
"""
BOUND = 3.5  # the stopped leader's session ended (2 s idle), then the next tick, with margin


def test_a_stopped_postgres_leader_is_stood_in_for(request: pytest.FixtureRequest) -> None:
    url = pg.fresh_database(request)
    child = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True)
    store = PostgresStore(url, pool_size=1)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "leading"
        assert store.try_lead("me") is False
        child.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        while not store.try_lead("me"):
            assert time.monotonic() - stopped < BOUND, (
                f"no other monitor leads {BOUND}s after the leader was stopped"
            )
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(10)
        assert child.stdout is not None
        child.stdout.close()
        store.close()


def test_a_leading_monitor_renews_its_lead_whatever_its_max_sleep(tmp_path: Path) -> None:
    """A leader ticks (renews its lead) at least every ``LEAD_RENEW`` even with a long
    ``max_sleep`` and nothing due, so that a store ending a leader silent past a bound
    (the stopped-leader fix above) never ends a healthy one that is merely asleep; a
    follower still sleeps its ``max_sleep``."""
    ticks: list[float] = []

    def due(store: object, deadlines: object, last: float | None) -> float | None:
        ticks.append(time.monotonic())  # asked at every leading tick
        return None

    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        monitor = Monitor(c, max_sleep=30, duties=[Duty("count", due, lambda s, now: None)])
        thread = monitor.start_thread()
        try:
            # A pass reads its duties twice: 8 reads are the first pass and 3 renewals,
            # due within about 2 s. Asleep for its max_sleep (30 s), the monitor would
            # not get there before the deadline.
            deadline = time.monotonic() + 20
            while len(ticks) < 8:
                assert time.monotonic() < deadline, ticks
                time.sleep(0.05)
        finally:
            monitor.stop()
            thread.join(5)
