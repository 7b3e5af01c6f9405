"""The event log (docs/core.md "read_state and catch_up"): events, catch_up and
broadcast, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, world

OPERATIONS = ("events", "catch_up", "broadcast")
BAD_INPUT = OPERATIONS


def test_events_are_numbered_and_paged_after_since(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    for i in range(4):
        clock.advance(1)
        cluster.add_task(f"Implement {i}")
    every = cluster.events()
    assert [e.kind for e in every] == ["node_registered"] + ["task_added"] * 4
    seqs = [e.seq for e in every]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert [e.ts for e in every] == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    assert cluster.events(since=seqs[1], limit=2) == every[2:4]
    assert cluster.events(since=seqs[-1]) == []
    assert cluster.events(limit=1) == every[:1]


def test_events_refuse_a_bad_page(cluster: Any) -> None:
    cluster.add_task("Implement a")
    for kwargs, field in (
        ({"since": -1}, "since"),
        ({"since": 1.5}, "since"),
        ({"since": None}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": "10"}, "limit"),
    ):
        with pytest.raises(InvalidInputError) as exc:
            cluster.events(**kwargs)
        assert exc.value.field == field


def test_catch_up_starts_at_registration_and_moves_the_cursor(
    cluster: Any, clock: FakeClock
) -> None:
    """A new node's first catch-up returns its own registration and what followed;
    the cursor is kept by the cluster, so the next call returns only what is new."""
    cluster.add_task("Implement before")
    reg_seq = cluster.events()[-1].seq
    cluster.register_node("A", "developer")
    clock.advance(2)
    cluster.add_task("Implement after")
    first = cluster.catch_up("A")
    assert [e.kind for e in first.events] == ["node_registered", "task_added"]
    assert first.events[0].seq > reg_seq
    assert first.events[0].node_id == "A"
    assert first.cursor == first.events[-1].seq
    assert cluster.get_node("A").cursor == first.cursor
    assert cluster.catch_up("A") == type(first)(events=[], cursor=first.cursor)
    cluster.broadcast("hello")
    cluster.add_task("Implement more")
    page = cluster.catch_up("A", limit=1)
    assert [e.kind for e in page.events] == ["broadcast"]
    rest = cluster.catch_up("A")
    assert [e.kind for e in rest.events] == ["task_added"]
    again = cluster.catch_up("A", since=0)
    assert [e.kind for e in again.events] == [e.kind for e in cluster.events()]
    assert again.cursor == cluster.events()[-1].seq


def test_catch_up_refusals_change_nothing(cluster: Any) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("T", "developer")
    cluster.terminate_node("T")
    before = world(cluster)
    for bad in ("Ghost", "T"):
        with pytest.raises(NotFoundError):
            cluster.catch_up(bad)
    for kwargs, field in (({"since": "1"}, "since"), ({"limit": 0}, "limit")):
        with pytest.raises(InvalidInputError) as exc:
            cluster.catch_up("A", **kwargs)
        assert exc.value.field == field
    assert world(cluster) == before
    assert cluster.get_node("A").cursor == 0


def test_broadcast_is_an_event_every_node_sees(cluster: Any, clock: FakeClock) -> None:
    cluster.register_node("A", "developer")
    cluster.register_node("B", "developer")
    clock.advance(9)
    ev = cluster.broadcast("Node A terminating due to lack of work", node_id="A")
    assert (ev.kind, ev.node_id, ev.task_id, ev.ts) == ("broadcast", "A", None, T0 + 9)
    assert ev.data == {"message": "Node A terminating due to lack of work"}
    assert cluster.events()[-1] == ev
    assert cluster.get_node("A").last_activity == T0 + 9  # the sender is seen
    assert cluster.catch_up("B").events[-1] == ev
    anon = cluster.broadcast("from the operator")
    assert (anon.node_id, anon.data) == (None, {"message": "from the operator"})
    assert anon.seq > ev.seq


def test_a_terminated_node_may_still_say_goodbye(cluster: Any) -> None:
    """anti-idle.md's worker broadcasts its farewell right after terminating."""
    cluster.register_node("A", "developer")
    cluster.terminate_node("A")
    assert cluster.broadcast("bye", node_id="A").node_id == "A"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("",), "message"),
        (("   ",), "message"),
        ((None,), "message"),
        (("m" * 20_001,), "message"),
        (("hi", ""), "node_id"),
        (("hi", "x" * 65), "node_id"),
    ],
)
def test_broadcast_refuses_bad_input(cluster: Any, args: tuple[Any, ...], field: str) -> None:
    cluster.register_node("A", "developer")
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        cluster.broadcast(*args)
    assert exc.value.field == field
    assert world(cluster) == before
