"""Spawn requests (docs/fleet.md, "Ask mode"): a pool asks for one member per
request; an operator or a manager agent accepts or declines it, once; the pool
records the member an accepted request became. Every step is an event with its
actor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral import InvalidInputError, NotFoundError
from corral.clock import FakeClock
from corral.types import Client
from tests.contract._world import T0, kinds, world

OPERATIONS = (
    "request_spawn",
    "spawn_requests",
    "accept_spawn_request",
    "decline_spawn_request",
    "withdraw_spawn_request",
    "fulfil_spawn_request",
)
BAD_INPUT = OPERATIONS


def _spawns(c: Client) -> list[dict[str, Any]]:
    return [r.to_dict() for r in c.spawn_requests(limit=10_000)]


def test_a_request_is_pending_until_decided_and_each_step_is_an_event(
    cluster: Client, clock: FakeClock
) -> None:
    r = cluster.request_spawn("dev", "developer", "spawn_developer")
    assert (r.pool, r.role, r.status, r.reason, r.requested_by) == (
        "dev",
        "developer",
        "pending",
        "spawn_developer",
        "pool",
    )
    assert (r.decided_by, r.member, r.created_at, r.decided_at) == (None, None, T0, None)
    clock.advance(2)
    other = cluster.request_spawn("dev", "developer")
    assert other.id > r.id
    assert [x.id for x in cluster.spawn_requests(status="pending")] == [r.id, other.id]
    accepted = cluster.accept_spawn_request(r.id)
    assert (accepted.status, accepted.decided_by, accepted.decided_at) == (
        "accepted",
        "operator",
        T0 + 2,
    )
    declined = cluster.decline_spawn_request(other.id, "BM-1")
    assert (declined.status, declined.decided_by) == ("declined", "BM-1")
    done = cluster.fulfil_spawn_request(r.id, "dev-1")
    assert (done.member, done.spawned_at, done.status) == ("dev-1", T0 + 2, "accepted")
    assert [x.id for x in cluster.spawn_requests(status="pending")] == []
    assert [x.status for x in cluster.spawn_requests(pool="dev")] == ["accepted", "declined"]
    assert cluster.spawn_requests(pool="ops") == []
    assert len(cluster.spawn_requests(limit=1)) == 1
    events = [e for e in cluster.events() if e.kind.startswith("spawn_request")]
    assert [(e.kind, e.data["id"], e.data.get("actor")) for e in events] == [
        ("spawn_requested", r.id, "pool"),
        ("spawn_requested", other.id, "pool"),
        ("spawn_request_accepted", r.id, "operator"),
        ("spawn_request_declined", other.id, "BM-1"),
        ("spawn_request_fulfilled", r.id, None),
    ]
    assert events[-1].node_id == "dev-1"
    assert r.text == f"spawn request {r.id} (pool dev, developer): pending"


def test_a_withdrawn_request_says_why_and_is_never_decided_nor_spawned(
    cluster: Client, clock: FakeClock
) -> None:
    """A pool withdraws a pending request it no longer wants: status withdrawn, by
    the pool, an event with the reason; it can then be neither accepted, declined,
    withdrawn again nor spawned."""
    r = cluster.request_spawn("dev", "developer", "spawn_developer: 3 pending tasks")
    clock.advance(4)
    w = cluster.withdraw_spawn_request(r.id, "no longer wanted: terminate_idle, 0 pending")
    assert (w.status, w.decided_by, w.decided_at, w.reason) == (
        "withdrawn",
        "pool",
        T0 + 4,
        "spawn_developer: 3 pending tasks",
    )
    assert [x.id for x in cluster.spawn_requests(status="withdrawn")] == [r.id]
    assert cluster.spawn_requests(status="pending") == []
    e = [e for e in cluster.events() if e.kind == "spawn_request_withdrawn"]
    assert [(x.data["id"], x.data["actor"], x.data["reason"]) for x in e] == [
        (r.id, "pool", "no longer wanted: terminate_idle, 0 pending"),
    ]
    before = world(cluster), _spawns(cluster)
    call: Callable[[], object]
    for call in (
        lambda: cluster.accept_spawn_request(r.id),
        lambda: cluster.decline_spawn_request(r.id),
        lambda: cluster.withdraw_spawn_request(r.id, "again"),
        lambda: cluster.fulfil_spawn_request(r.id, "dev-1"),
    ):
        with pytest.raises(InvalidInputError) as exc:
            call()
        assert exc.value.field == "request_id"
    with pytest.raises(NotFoundError):
        cluster.withdraw_spawn_request(999, "gone")
    assert (world(cluster), _spawns(cluster)) == before


def test_a_decided_request_cannot_be_decided_again_nor_spawned_twice(cluster: Client) -> None:
    a = cluster.request_spawn("dev", "developer")
    b = cluster.request_spawn("dev", "developer")
    cluster.accept_spawn_request(a.id)
    cluster.decline_spawn_request(b.id)
    cluster.fulfil_spawn_request(a.id, "dev-1")
    before = world(cluster), _spawns(cluster)
    call: Callable[[], object]
    for call in (
        lambda: cluster.accept_spawn_request(a.id),
        lambda: cluster.decline_spawn_request(a.id),
        lambda: cluster.accept_spawn_request(b.id),
        lambda: cluster.fulfil_spawn_request(a.id, "dev-2"),  # one request, one spawn
        lambda: cluster.fulfil_spawn_request(b.id, "dev-2"),  # declined: never spawned
    ):
        with pytest.raises(InvalidInputError) as exc:
            call()
        assert exc.value.field == "request_id"
    for call in (
        lambda: cluster.accept_spawn_request(999),
        lambda: cluster.decline_spawn_request(999),
        lambda: cluster.fulfil_spawn_request(999, "dev-1"),
    ):
        with pytest.raises(NotFoundError) as missing:
            call()
        assert missing.value.field == "request_id"
    assert (world(cluster), _spawns(cluster)) == before


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.request_spawn("", "developer"), "pool"),
        (lambda c: c.request_spawn("a b", "developer"), "pool"),
        (lambda c: c.request_spawn("dev", "astronaut"), "role"),
        (lambda c: c.request_spawn("dev", "developer", 3), "reason"),
        (lambda c: c.request_spawn("dev", "developer", "x" * 501), "reason"),
        (lambda c: c.request_spawn("dev", "developer", "", ""), "requested_by"),
        (lambda c: c.spawn_requests(status="open"), "status"),
        (lambda c: c.spawn_requests(pool="a/b"), "pool"),
        (lambda c: c.spawn_requests(limit=0), "limit"),
        (lambda c: c.accept_spawn_request(0), "request_id"),
        (lambda c: c.accept_spawn_request("one"), "request_id"),
        (lambda c: c.accept_spawn_request("\u00b2"), "request_id"),  # a digit, not ASCII
        (lambda c: c.accept_spawn_request(1, ""), "actor"),
        (lambda c: c.decline_spawn_request(-1), "request_id"),
        (lambda c: c.decline_spawn_request(True), "request_id"),
        (lambda c: c.decline_spawn_request(1, 5), "actor"),
        (lambda c: c.withdraw_spawn_request(0, "why"), "request_id"),
        (lambda c: c.withdraw_spawn_request(1, 5), "reason"),
        (lambda c: c.withdraw_spawn_request(1, "x" * 501), "reason"),
        (lambda c: c.withdraw_spawn_request(1, "why", ""), "actor"),
        (lambda c: c.fulfil_spawn_request(1.5, "dev-1"), "request_id"),
        (lambda c: c.fulfil_spawn_request(1, ""), "member"),
    ],
)
def test_spawn_request_operations_refuse_bad_input(
    cluster: Client, call: Callable[[Client], object], field: str
) -> None:
    r = cluster.request_spawn("dev", "developer")
    cluster.accept_spawn_request(r.id)
    before = world(cluster), _spawns(cluster)
    with pytest.raises(InvalidInputError) as exc:
        call(cluster)
    assert exc.value.field == field
    assert (world(cluster), _spawns(cluster)) == before
    assert kinds(cluster)[-1] == "spawn_request_accepted"
