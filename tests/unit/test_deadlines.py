"""The monitor's deadlines as each store reads them (index heads, index range scans)
equal the pure model in ``corral.deadlines`` after random histories: registrations
with and without a declared heartbeat interval, heartbeats, calls, status changes,
claims and completions, terminations, changes of the timing settings, and monitor
passes, on the fake clock. The store's SQL is probed at the model's own deadlines
(the boundary: due at the deadline, not a microsecond before) and around them."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral import Monitor
from corral.cluster import Cluster
from corral.deadlines import dead_due, death_at, idle_due, monitor_deadlines
from corral.errors import CorralError

IDS = [f"n{i}" for i in range(5)]

step = st.one_of(
    st.tuples(
        st.just("register"),
        st.sampled_from(IDS),
        st.sampled_from(["developer", "bootstrap_manager"]),
        st.sampled_from([None, 1.0, 2.5, 20.0]),
    ),
    st.tuples(st.just("heartbeat"), st.sampled_from(IDS)),
    st.tuples(st.just("touch"), st.sampled_from(IDS)),
    st.tuples(st.just("status"), st.sampled_from(IDS), st.sampled_from(["idle", "working"])),
    st.tuples(st.just("claim"), st.sampled_from(IDS)),
    st.tuples(st.just("complete"), st.sampled_from(IDS)),
    st.tuples(st.just("terminate"), st.sampled_from(IDS)),
    st.tuples(
        st.just("configure"),
        st.sampled_from(
            [
                {"missed_beats": 2},
                {"missed_beats": 3},
                {"stale_threshold": 4.0},
                {"stale_threshold": 600.0},
                {"heartbeat_interval": 3.0},
                {"idle_timeout_seconds": 5.0},
                {"grace_period_seconds": 1.5},
            ]
        ),
    ),
    st.tuples(st.just("advance"), st.sampled_from([0.25, 1.0, 3.0, 7.5, 40.0])),
    st.tuples(st.just("tick")),
)


def _live(c: Any) -> list[Any]:
    return [n for n in c.list_nodes() if n.status != "terminated"]


def _due_in_sql(store: Any, now: float, idle_limit: float) -> tuple[set[str], set[str]]:
    """The nodes the store's own queries (the monitor's range scans) find due at now
    (in a write transaction: PostgreSQL's lock the rows they return; nothing changes)."""
    with store._write() as tx:
        dead = {r["id"] for r in tx.all("nodes_dead", now=now, limit=10_000)}
        idle = {
            r["id"] for r in tx.all("nodes_idle_expired", cutoff=now - idle_limit, limit=10_000)
        }
    return dead, idle


def _check(c: Any) -> None:
    s = c.settings()
    nodes = _live(c)
    due = c.store.deadlines()
    model = monitor_deadlines(nodes, s, None)
    assert due.dead_at == model.dead_at
    assert due.idle_retire_at == model.idle_retire_at
    # Each stored deadline is the node's own (last sign of life + its window).
    for n in nodes:
        assert n.dead_at == death_at(n, s), n
    # Probe the range scans at now and at, just before, and after each deadline.
    now = c.clock.now()
    probes = {now, now + 1000.0}
    for n in nodes:
        for t in (death_at(n, s), n.idle_since and n.idle_since + s.idle_limit):
            if t:
                probes.update((t, t - 1e-6, t + 0.5))
    for t in sorted(probes):
        assert _due_in_sql(c.store, t, s.idle_limit) == (
            dead_due(nodes, s, t),
            idle_due(nodes, s, t),
        ), t


def _apply(c: Any, monitor: Monitor, op: tuple[Any, ...]) -> None:
    kind = op[0]
    try:
        if kind == "register":
            c.register_node(op[1], op[2], heartbeat_interval=op[3])
        elif kind == "heartbeat":
            c.heartbeat(op[1])
        elif kind == "touch":
            c.touch(op[1])
        elif kind == "status":
            c.set_agent_status(op[1], op[2])
        elif kind == "claim":
            c.add_task("Implement the parser")
            c.claim_best_task(op[1], "developer")
        elif kind == "complete":
            held = c.list_tasks(status="in_progress", assigned_to=op[1])
            if held:
                c.complete_task(held[0].id, op[1], epoch=held[0].epoch)
        elif kind == "terminate":
            c.terminate_node(op[1])
        elif kind == "configure":
            c.configure(**op[1])
        elif kind == "advance":
            c.clock.advance(op[1])
        else:
            _tick(c, monitor)
    except CorralError:
        pass  # unknown or terminated node, wrong role: nothing changed


def _tick(c: Any, monitor: Monitor) -> None:
    """A monitor pass does exactly what the model says is due: the dead nodes reaped
    (first), the idle ones past their limit retired."""
    s = c.settings()
    now = c.clock.now()
    before = _live(c)
    dead, idle = dead_due(before, s, now), idle_due(before, s, now)
    result = monitor.tick(now)
    assert {e.node_id for e in result.events if e.kind == "node_dead"} == dead
    assert {e.node_id for e in result.events if e.kind == "node_retired"} == idle - dead
    model = monitor_deadlines(_live(c), s, now)
    upcoming = [t for t in (model.dead_at, model.idle_retire_at, model.assess_at) if t]
    assert result.next_deadline is not None
    assert result.next_deadline <= min(upcoming)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=st.lists(step, min_size=1, max_size=30))
def test_store_deadlines_equal_the_model_after_any_history(
    embedded: Cluster, history: list[tuple[Any, ...]]
) -> None:
    """The fixture's cluster carries over between examples: each history starts from
    wherever the previous ones left the fleet and the settings."""
    embedded.configure(max_agents=len(IDS))
    monitor = Monitor(embedded)
    for op in history:
        _apply(embedded, monitor, op)
        _check(embedded)
