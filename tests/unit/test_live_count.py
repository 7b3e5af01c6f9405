"""The live-node count the store keeps (meta 'live_nodes', maintained by triggers in
the same transaction as each node change) equals a full recount after any history:
registrations (new, again while live, again after termination, refused at capacity),
terminations, heartbeats, idle spells, claims, and the monitor's reaping of dead nodes
and retirement of idle ones on the fake clock."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral import CapacityError, Monitor
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.errors import CorralError
from corral.lifecycle import registration_allowed, reregistration_allowed

IDS = [f"n{i}" for i in range(6)]
MAX_AGENTS = 3

step = st.one_of(
    st.tuples(
        st.just("register"),
        st.sampled_from(IDS),
        st.sampled_from(["developer", "architect", "bootstrap_manager"]),
        st.sampled_from([None, 5.0, 20.0]),
    ),
    st.tuples(st.just("terminate"), st.sampled_from(IDS)),
    st.tuples(st.just("heartbeat"), st.sampled_from(IDS)),
    st.tuples(st.just("idle"), st.sampled_from(IDS)),
    st.tuples(st.just("claim"), st.sampled_from(IDS)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 15.0, 31.0, 61.0, 700.0])),
)


def _counts(store: Any) -> tuple[int, int]:
    """(the kept counter, a full recount), read in one transaction."""
    with store._read() as tx:
        raw = tx._cur if hasattr(tx, "_cur") else tx._conn
        kept = tx.one("nodes_count_live")["n"]
        recount = raw.execute(
            "SELECT count(*) AS n FROM nodes WHERE status <> 'terminated'"
        ).fetchone()["n"]
    return int(kept), int(recount)


def _apply(c: Any, clock: Any, monitor: Monitor, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "register":
        _, node_id, role, interval = op
        live_before = _counts(c.store)[1]
        live = [n for n in c.list_nodes() if n.status != "terminated"]
        old = next((n for n in live if n.id == node_id), None)
        # Refused exactly when the recount leaves it no place: a new node as a new node,
        # a live one by the re-registration rule (a manager taking a counted role).
        fits = (
            registration_allowed(role, live_before, MAX_AGENTS)
            if old is None
            else reregistration_allowed(old.role, role, live_before, MAX_AGENTS)
        )
        try:
            reg = c.register_node(node_id, role, heartbeat_interval=interval)
        except CapacityError:
            assert not fits, (old, role, live_before)
            return
        assert fits, (old, role, live_before)
        assert reg.active_nodes == live_before + (0 if old is not None else 1)
        return
    try:
        if kind == "terminate":
            c.terminate_node(op[1])
        elif kind == "heartbeat":
            c.heartbeat(op[1])
        elif kind == "idle":
            c.set_agent_status(op[1], "idle")
        elif kind == "claim":
            c.add_task("Implement the parser")
            c.claim_best_task(op[1], "developer")
        else:
            clock.advance(op[1])
            monitor.tick(clock.now())
    except CorralError:
        pass  # unknown or terminated node, wrong role: nothing changed


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=st.lists(step, min_size=1, max_size=25))
def test_the_live_count_equals_a_recount_after_any_history(
    embedded: Cluster, clock: FakeClock, history: list[tuple[Any, ...]]
) -> None:
    """The fixture's cluster carries over from one example to the next: each history
    starts from wherever the previous ones left the fleet."""
    embedded.configure(max_agents=MAX_AGENTS)
    monitor = Monitor(embedded)
    for op in history:
        _apply(embedded, clock, monitor, op)
        kept, recount = _counts(embedded.store)
        assert kept == recount, op


def _rewind(store: Any) -> None:
    """Undo the counter's migration by hand (its triggers and row), as in a database
    last opened by the version before it."""
    with store._write() as tx:
        raw = tx._cur if hasattr(tx, "_cur") else tx._conn
        for trigger in ("nodes_live_insert", "nodes_live_update", "nodes_live_delete"):
            on = "" if hasattr(tx, "_cur") else " ON nodes"
            raw.execute(f"DROP TRIGGER {trigger}{on}")
        raw.execute("DELETE FROM meta WHERE key = 'live_nodes'")
        if hasattr(tx, "_cur"):
            # A database last opened before the counter lacks the later migrations too
            # (SQLite re-runs every migration past its user_version): the scheduler's
            # (0005), the workflow runs' (0006) and the claim keys' (0010).
            raw.execute("DROP TRIGGER nodes_end_activations")
            # It has the hot path's permanent triggers, which 0009 replaces and 0012 drops.
            for name in ("task_claimed", "task_completed"):
                raw.execute(f"CREATE TRIGGER {name} AFTER UPDATE ON tasks BEGIN SELECT 1; END")
            for table in ("agents", "notifications", "activations", "runners"):
                raw.execute(f"DROP TABLE {table}")
            for table in ("handler_inbox", "handlers", "workflow_hosts", "claim_keys"):
                raw.execute(f"DROP TABLE {table}")
            # Usage by node and hour (0020), which replaced 0018's buckets: 0018 makes
            # those again and 0020 carries them over.
            raw.execute("DROP TABLE usage_hours")
            # Tasks with time and order (0016) and progress and sessions (0017): their
            # trigger, table and indexes, then the columns they added to tasks.
            raw.execute("DROP TRIGGER tasks_release_dependents")
            raw.execute("DROP TABLE task_deps")
            raw.execute("DROP TABLE task_releases")  # and its trigger (0022)
            for index in ("tasks_ready_at", "tasks_timeout_at", "tasks_stuck_at"):
                raw.execute(f"DROP INDEX {index}")
            # This connection's claim and completion triggers read columns dropped
            # below (the claim's hands over 0016's and 0017's, the completion's reads
            # 0020's usage columns): they go first (the test claims and completes
            # nothing after the rewind).
            raw.execute("DROP TRIGGER temp.corral_task_claimed")
            raw.execute("DROP TRIGGER temp.corral_task_completed")
            columns = [r[1] for r in raw.execute("PRAGMA table_info(tasks)").fetchall()]
            for column in columns[columns.index("claimed_role") + 1 :]:
                raw.execute(f"ALTER TABLE tasks DROP COLUMN {column}")
            raw.execute("PRAGMA user_version = 3")
        else:
            raw.execute("DROP FUNCTION corral_live_nodes()")
            raw.execute("DELETE FROM corral_migrations WHERE version = 5")


def test_the_count_starts_from_a_recount_when_migrated(embedded: Cluster, clock: FakeClock) -> None:
    """A database whose nodes predate the counter gets it from a recount when the
    store opens it (the migration), and keeps it from there."""
    for node_id in ("A", "B", "C"):
        embedded.register_node(node_id, "developer")
    embedded.terminate_node("A")
    _rewind(embedded.store)
    store: Any = embedded.store  # the adapter's private migration, whichever it is
    (store._migrate if hasattr(store, "_migrate") else store._sessions._migrate)()
    assert _counts(embedded.store) == (2, 2)
    embedded.terminate_node("B")
    assert _counts(embedded.store) == (1, 1)
