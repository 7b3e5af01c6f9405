"""The fleet's history in the cluster's events: one ``pool_scaled`` event per change of
a pool's size, down to 0 when its members retire themselves, and no event for a
change that is none (a node set to the status it already has)."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet_up import Up, copy_example, marked, wait_for


def test_a_status_set_again_is_no_event(sqlite_cluster: Any) -> None:
    """``set_agent_status`` to the status (and task) a node already has stamps its
    activity but records no ``node_status`` event (``idle -> idle`` was recorded)."""
    c = sqlite_cluster
    c.register_node("A", "developer")  # a new node is idle
    c.set_agent_status("A", "idle")
    task = c.add_task("t")
    c.set_agent_status("A", "working", task.id)
    c.set_agent_status("A", "working", task.id)
    c.set_agent_status("A", "idle")
    c.set_agent_status("A", "idle")
    moves = [(e.data["old"], e.data["new"]) for e in c.events() if e.kind == "node_status"]
    assert moves == [("idle", "working"), ("working", "idle")]


@pytest.mark.slow
def test_the_pool_history_is_every_size_change_down_to_zero(tmp_path: Path) -> None:
    """The fleet example grows to 3 workers and its workers retire themselves: the
    pool's events chain from 0 up to 3 and back to 0, each from the last one's size
    (only ``3 -> 2`` was recorded of the way down), and no node_status event is a
    non-change."""
    copy_example(tmp_path)
    up = Up(tmp_path)
    try:
        wait_for(lambda: up.done() == 12, 60, "every seeded task done")
        wait_for(lambda: any(e.data["to"] == 0 for e in up.scaled("worker")), 30, "pool at 0")
        sizes = [(e.data["from"], e.data["to"]) for e in up.scaled("worker")]
        assert sizes[0][0] == 0 and sizes[-1][1] == 0, sizes
        assert max(to for _, to in sizes) == 3, sizes
        for (_, to), (frm, _) in itertools.pairwise(sizes):
            assert frm == to, sizes  # every change recorded, each once
        assert all(frm != to for frm, to in sizes), sizes
        causes = {e.data["cause"] for e in up.scaled("worker")}
        assert causes <= {"decision", "exit"}
        moves = [(e.data["old"], e.data["new"]) for e in up.events("node_status")]
        assert moves and all(old != new for old, new in moves), moves
        wait_for(
            lambda: "scaled" in {x["event"] for x in up.lines if "-> 0" in x.get("text", "")},
            5,
            "the printed line of the pool at 0",
        )
    finally:
        assert up.stop(signal.SIGINT) == 0
    wait_for(lambda: not marked(tmp_path), 10, "no process left")
