"""The monitor's activation duty, on the injected clock and both embedded backends:
an activation ends at its TTL or when its runner's node ends, at that deadline, with
an ``activation_expired`` event; the agent is assignable again."""

from __future__ import annotations

from typing import Any

from corral.clock import FakeClock
from corral.monitor import Monitor

T0 = 1_700_000_000.0


def _expired(result: Any) -> list[Any]:
    return [e for e in result.events if e.kind == "activation_expired"]


def test_an_activation_expires_at_its_ttl(embedded: Any, clock: FakeClock) -> None:
    c = embedded
    c.configure(activation_ttl=120)
    c.register_node("r1", "runner", heartbeat_interval=3600)
    c.add_agent("a")
    a = c.get_assignment("r1")
    monitor = Monitor(c)
    early = monitor.tick(T0 + 119)
    assert _expired(early) == [] and early.next_deadline == T0 + 120
    clock.set(T0 + 120)
    (e,) = _expired(monitor.tick(T0 + 120))
    assert (e.node_id, e.data["agent"], e.data["assignment"], e.data["reason"]) == (
        "r1",
        "a",
        a.id,
        "ttl",
    )
    assert e.ts == T0 + 120 and e.data["monitor"] == monitor.name
    c.register_node("r2", "runner", heartbeat_interval=3600)
    again = c.get_assignment("r2")
    assert (again.agent_id, again.epoch) == ("a", a.epoch + 1)


def test_a_dead_runners_activation_ends_with_it(embedded: Any, clock: FakeClock) -> None:
    c = embedded
    c.register_node("r1", "runner", heartbeat_interval=10)  # dead after 3 silent beats
    c.add_agent("a")
    c.get_assignment("r1")
    monitor = Monitor(c)
    assert monitor.tick(T0 + 29).next_deadline == T0 + 30
    clock.set(T0 + 30)
    result = monitor.tick(T0 + 30)
    kinds = [e.kind for e in result.events]
    assert kinds.index("node_dead") < kinds.index("activation_expired")
    assert _expired(result)[0].data["reason"] == "runner_gone"
    c.register_node("r2", "runner", heartbeat_interval=3600)
    assert c.get_assignment("r2").agent_id == "a"


def test_a_terminated_runners_activation_ends_at_the_next_pass(
    embedded: Any, clock: FakeClock
) -> None:
    c = embedded
    c.register_node("r1", "runner", heartbeat_interval=3600)
    c.add_agent("a")
    c.get_assignment("r1")
    clock.advance(7)
    c.terminate_node("r1")
    monitor = Monitor(c)
    (e,) = _expired(monitor.tick(T0 + 8))
    assert e.data["reason"] == "runner_gone"
    assert c.list_assignments() == [] and c.get_agent("a").held_by is None


def test_read_inbox_items_are_pruned_with_old_events(embedded: Any, clock: FakeClock) -> None:
    c = embedded
    c.add_agent("a")
    c.notify("a", "old")
    c.read_inbox("a")
    c.notify("a", "unread, kept")
    retention = c.settings().event_retention_seconds
    assert Monitor(c).tick(T0 + retention - 1) is not None
    c.notify("a", "read late, kept")
    clock.set(T0 + retention + 1)
    assert c.store.prune_notifications(T0 + retention + 1) == 1
    assert [n.payload for n in c.read_inbox("a")] == ["unread, kept", "read late, kept"]
