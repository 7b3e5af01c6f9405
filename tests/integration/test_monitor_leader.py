"""One monitor leads per SQLite file (an ``flock`` on ``<file>-monitor``): the others
only try again; the lead passes on when its holder closes or its process ends; while
the holder's process is stopped, another monitor stands in for it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import corral
from corral import Monitor
from corral.store.sqlite import SQLiteStore

_HOLDER = """
import sys, time
from corral.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
assert store.try_lead("child")
print("leading", flush=True)
time.sleep(120)
"""


def _wait(what: str, check, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_one_store_leads_and_the_lead_passes_on_when_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    a, b = SQLiteStore(db), SQLiteStore(db)
    try:
        assert a.try_lead("A") is True
        assert b.try_lead("B") is False
        assert a.try_lead("A") is True  # a leader stays one
        a.close()
        assert b.try_lead("B") is True
    finally:
        b.close()


def test_a_follower_monitor_does_nothing(tmp_path: Path) -> None:
    """A monitor that does not lead reports so and acts on nothing due."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as leader, corral.connect(url) as other:
        assert Monitor(leader).tick(time.time()).leader is True
        other.register_node("w1", "developer", heartbeat_interval=0.01)
        result = Monitor(other).tick(time.time() + 60)
        assert result.leader is False and result.events == []
        assert other.get_node("w1").status != "terminated"


def test_a_stopped_leader_is_stood_in_for_and_a_dead_one_replaced(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    SQLiteStore(db).close()
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    )
    store = SQLiteStore(db)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "leading"
        assert store.try_lead("me") is False
        child.send_signal(signal.SIGSTOP)
        _wait("the stand-in", lambda: store.try_lead("me"))
        child.send_signal(signal.SIGCONT)
        _wait("the leader back", lambda: not store.try_lead("me"))
        child.kill()
        child.wait(timeout=10)
        _wait("the lead", lambda: store.try_lead("me"))
        assert store.try_lead("me") is True
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
        store.close()
