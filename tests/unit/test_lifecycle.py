"""Node lifecycle rules, and the SQL that encodes them for speed."""

from __future__ import annotations

import itertools
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

import corral
from corral import Monitor
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.lifecycle import (
    STAMP_FRACTION,
    idle_expired,
    next_idle_since,
    registration_allowed,
    reregistration_allowed,
    stamp_due,
    status_allowed,
    status_on_reregistering,
)
from corral.model import Node, Settings
from corral.store.queries import load_queries, schema

times = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(dead_at=times, window=st.floats(min_value=0.01, max_value=1e4), now=times)
def test_sql_stamp_condition_equals_stamp_due(dead_at: float, window: float, now: float) -> None:
    """node_done_with's stamp condition computes exactly lifecycle.stamp_due: run on a
    node row that nothing else would change (it is waiting, names no task)."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema("sqlite"))
    conn.execute(
        "INSERT INTO nodes (id, role, status, last_activity, live_window, dead_at,"
        " registered_at) VALUES ('W', 'developer', 'waiting', 0, :w, :d, 0)",
        {"w": window, "d": dead_at},
    )
    written = conn.execute(
        load_queries("sqlite")["node_done_with"],
        {"node_id": "W", "id": 1, "now": now, "stamp": 1 - STAMP_FRACTION},
    ).rowcount
    assert bool(written) == stamp_due(dead_at, window, now)


_NODE_STATUSES = st.sampled_from(["working", "idle", "waiting", "terminated"])
_ROLES = st.sampled_from(["developer", "architect", "bootstrap_manager"])
_SECONDS = st.floats(min_value=0.001, max_value=1e5, allow_nan=False, allow_infinity=False)


@given(
    nodes=st.lists(
        st.tuples(_NODE_STATUSES, _ROLES, st.one_of(st.none(), times)), min_size=1, max_size=8
    ),
    idle_timeout=_SECONDS,
    grace=_SECONDS,
    now=times,
)
def test_idle_expired_equals_its_sql(
    nodes: list[tuple[str, str, float | None]], idle_timeout: float, grace: float, now: float
) -> None:
    """The monitor retires exactly the nodes ``lifecycle.idle_expired`` names: the
    SQL query nodes_idle_expired (run on random rows, as the monitor runs it) and the
    pure rule agree on every node."""
    settings = Settings(idle_timeout_seconds=idle_timeout, grace_period_seconds=grace)
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema("sqlite"))
    for i, (status, role, idle_since) in enumerate(nodes):
        conn.execute(
            "INSERT INTO nodes (id, role, status, idle_since, last_activity, live_window,"
            " dead_at, registered_at) VALUES (:id, :role, :status, :idle_since, 0, 1, 1, 0)",
            {"id": f"N{i}", "role": role, "status": status, "idle_since": idle_since},
        )
    sql = load_queries("sqlite")["nodes_idle_expired"]
    params = {"cutoff": now - settings.idle_limit, "limit": 100}
    got = {r[0] for r in conn.execute(sql.replace("SELECT *", "SELECT id"), params)}
    want = {
        f"N{i}"
        for i, (status, role, idle_since) in enumerate(nodes)
        if idle_expired(
            Node(id=f"N{i}", role=role, status=status, idle_since=idle_since), settings, now
        )
    }
    assert got == want


def test_idle_expired_sql_is_the_same_on_postgres() -> None:
    """PostgreSQL's nodes_idle_expired selects by the same condition (it adds a row
    lock), so the property above holds for it too."""

    def condition(dialect: str) -> str:
        sql = load_queries(dialect)["nodes_idle_expired"]
        return " ".join(sql.split("WHERE", 1)[1].split("ORDER BY")[0].split())

    assert condition("postgres") == condition("sqlite")


def test_idle_since_rule() -> None:
    assert next_idle_since("working", None, "idle", 5.0) == 5.0
    assert next_idle_since("idle", 3.0, "idle", 5.0) == 3.0
    assert next_idle_since("idle", 3.0, "working", 5.0) is None
    assert next_idle_since("waiting", None, "idle", 7.0) == 7.0


def test_claims_and_completions_keep_a_silent_node_alive(
    embedded: Cluster, clock: FakeClock
) -> None:
    """A node that never heartbeats but keeps claiming and completing is not dead:
    its calls re-stamp it whenever a tenth of its window has passed."""
    embedded.register_node("W", "developer", heartbeat_interval=1)  # window 3 s
    monitor = Monitor(embedded)
    for i in range(40):
        embedded.add_task(f"Implement step {i}")
        task = embedded.claim_best_task("W", "developer")
        assert task is not None
        clock.advance(0.5)
        embedded.complete_task(task.id, "W", task.epoch)
        assert [e.kind for e in monitor.tick(clock.now()).events] == []
    assert embedded.get_node("W").status == "idle"  # its last task done
    clock.advance(3)
    assert [e.kind for e in monitor.tick(clock.now()).events] == ["node_dead"]


def test_current_task_is_the_newest_held(embedded: Cluster, clock: FakeClock) -> None:
    embedded.register_node("W", "developer")
    a = embedded.add_task("Implement a", priority="high")
    b = embedded.add_task("Implement b", priority="low")
    embedded.claim_best_task("W", "developer")
    clock.advance(1)
    embedded.claim_best_task("W", "developer")
    assert embedded.get_node("W").current_task_id == b.id
    embedded.complete_task(b.id, "W")
    assert embedded.get_node("W").current_task_id == a.id
    embedded.complete_task(a.id, "W")
    assert embedded.get_node("W").current_task_id is None
    named = embedded.set_agent_status("W", "working", a.id)
    assert named.current_task_id == a.id


def test_the_stamp_rule_is_written_once_per_dialect() -> None:
    """lifecycle.stamp_due is the rule stamp_due of each queries.sql, written once
    there; the SQLite triggers that re-stamp a claim's and a completion's holder take
    it with the fraction written in (SQLite takes no parameters in a trigger)."""
    import re
    from importlib import resources

    from corral.store.sqlite.store import _BOOKKEEPING

    for dialect in ("sqlite", "postgres"):
        sql = resources.files("corral.store").joinpath("sql", dialect, "queries.sql")
        assert sql.read_text().count("live_window * :stamp") == 1, dialect
    factors = re.findall(r"< live_window \* ([0-9.]+)", "".join(_BOOKKEEPING))
    assert len(factors) == 2  # the claim's and the completion's
    assert {float(f) for f in factors} == {1 - STAMP_FRACTION}


def test_claims_and_completions_stamp_only_when_due(embedded: Cluster, clock: FakeClock) -> None:
    """A node's row is re-stamped by its claims and completions only once a tenth of
    its window has passed, whatever its status does (a flip idle -> working or
    working -> idle alone does not re-stamp); events are recorded every time."""
    reg = embedded.register_node("W", "developer", heartbeat_interval=10)  # window 30 s
    for i in range(4):
        embedded.add_task(f"Implement step {i}")
    clock.advance(30 * STAMP_FRACTION * 0.5)  # not due
    first = embedded.claim_best_task("W", "developer")  # idle -> working: not stamped
    assert first is not None
    node = embedded.get_node("W")
    assert (node.status, node.dead_at, node.last_activity) == (
        "working",
        reg.dead_at,
        reg.last_activity,
    )
    second = embedded.claim_best_task("W", "developer")  # still working
    assert second is not None
    embedded.complete_task(second.id, "W", second.epoch)  # still holds the first
    assert embedded.get_node("W").dead_at == reg.dead_at
    clock.advance(30 * STAMP_FRACTION)  # due
    embedded.complete_task(first.id, "W", first.epoch)  # working -> idle, and due
    node = embedded.get_node("W")
    assert (node.status, node.idle_since) == ("idle", clock.now())
    assert (node.dead_at, node.last_activity) == (clock.now() + 30, clock.now())
    stamped = node.dead_at
    clock.advance(1)  # not due
    third = embedded.claim_best_task("W", "developer")  # idle -> working: not stamped
    assert third is not None
    embedded.complete_task(third.id, "W", third.epoch)  # working -> idle: not stamped
    node = embedded.get_node("W")
    assert (node.status, node.idle_since, node.dead_at) == ("idle", clock.now(), stamped)
    kinds = [e.kind for e in embedded.events() if e.kind.startswith("task_")]
    assert kinds.count("task_claimed") == 3 and kinds.count("task_completed") == 3
    claimed = [e for e in embedded.events() if e.kind == "task_claimed"][-1]
    assert claimed.data == {
        "epoch": 1,
        "role": "developer",
        "attempt": 1,
        "created_at": third.created_at,
    }


def test_the_short_paths_give_way_when_the_node_row_must_change(
    embedded: Cluster, clock: FakeClock
) -> None:
    """The stores' short statements (claim and completion without the node update,
    completion without RETURNING) hand over to the full ones whenever the holder's
    row must change: a claim whose stamp is due, a completion of the task the node
    names as its current one, a worker's step from waiting, a step after a settings
    change; and a stale epoch on the short path is refused and changes nothing."""
    embedded.register_node("W", "developer", heartbeat_interval=10)  # window 30 s
    for i in range(8):
        embedded.add_task(f"Implement step {i}")
    a = embedded.claim_best_task("W", "developer")
    assert a is not None
    embedded.complete_task(a.id, "W", a.epoch)
    clock.advance(30 * STAMP_FRACTION * 1.5)  # due: the claim itself re-stamps
    b = embedded.claim_best_task("W", "developer")
    assert b is not None
    assert embedded.get_node("W").dead_at == clock.now() + 30

    embedded.set_agent_status("W", "working", b.id)  # names b as its current task
    embedded.complete_task(b.id, "W", b.epoch)
    node = embedded.get_node("W")
    assert node.current_task_id is None and node.status == "idle"  # nothing else held

    c = embedded.claim_best_task("W", "developer")
    assert c is not None
    embedded.set_agent_status("W", "waiting")  # a call of its own: stamped
    stamped = embedded.get_node("W").dead_at
    clock.advance(1)
    done, d = embedded.complete_and_claim(c.id, "W", "developer", c.epoch)
    node = embedded.get_node("W")
    assert done.status == "done" and d is not None and d.assigned_to == "W"
    assert node.status == "working" and node.idle_since is None
    assert node.dead_at == stamped  # the flip alone does not re-stamp

    embedded.configure(max_agents=9)  # a new settings version between two steps
    done, e = embedded.complete_and_claim(d.id, "W", "developer", d.epoch)
    assert done.status == "done" and done.result is None and e is not None

    embedded.fail_task(e.id, "W", e.epoch, error="retry it")
    e = embedded.claim_best_task("W", "developer")  # the same task again, epoch 2
    assert e is not None
    assert e.epoch == 2
    before = (embedded.get_task(e.id), embedded.get_node("W"), embedded.events())
    with pytest.raises(corral.LeaseError):
        embedded.complete_task(e.id, "W", e.epoch - 1)
    with pytest.raises(corral.LeaseError):
        embedded.complete_and_claim(e.id, "W", "developer", e.epoch + 1)
    assert (embedded.get_task(e.id), embedded.get_node("W"), embedded.events()) == before
    finished = embedded.complete_task(e.id, "W", e.epoch, result={"ok": True})
    assert finished.status == "done" and finished.result == {"ok": True}
    assert embedded.get_task(e.id) == finished


def test_last_seen_is_computed_in_one_place() -> None:
    """A node's last sign of life is ``corral.model.last_seen`` and nothing else:
    no other module of ``src/corral`` computes ``max(...)`` over the node's
    ``last_activity`` / ``last_heartbeat`` / ``registered_at``."""
    import ast
    from pathlib import Path

    src = Path(corral.__file__).parent
    fields = {"last_activity", "last_heartbeat", "registered_at"}
    found = []
    for path in sorted(src.rglob("*.py")):
        if path == src / "model.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "max"
                and any(f in ast.unparse(node) for f in fields)
            ):
                found.append(f"{path.relative_to(src)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
    assert (
        Node(
            id="N",
            role="developer",
            status="idle",
            last_activity=5.0,
            last_heartbeat=7.0,
            registered_at=1.0,
        ).last_seen
        == 7.0
    )


# --- re-registration and idle (issue 32) ------------------------------------------------
def test_reregistration_allowed_is_a_new_claim_only_for_a_manager_turning_counted() -> None:
    """Every case: a live node keeps its place unless it leaves a manager's role for a
    counted one; then it fits as a new node would beside the others (live - 1)."""
    roles = ("developer", "architect", "bootstrap_manager")
    for old, new, live, cap in itertools.product(roles, roles, range(1, 7), range(1, 6)):
        turning = old == "bootstrap_manager" and new != "bootstrap_manager"
        want = (live - 1 < cap) if turning else True
        assert reregistration_allowed(old, new, live, cap) == want, (old, new, live, cap)
        if turning:
            assert want == registration_allowed(new, live - 1, cap)


def test_status_on_reregistering_every_case() -> None:
    roles = ("developer", "architect", "bootstrap_manager")
    statuses = ("working", "idle", "waiting")
    for status, old, new, holds in itertools.product(statuses, roles, roles, (False, True)):
        got = status_on_reregistering(status, old, new, holds)
        if old == new or holds:
            assert got == status
        else:
            assert got == ("working" if new == "bootstrap_manager" else "idle")


def test_only_idle_is_refused_to_a_node_that_holds_a_task() -> None:
    for status in ("working", "idle", "waiting", "terminated"):
        assert status_allowed(status, holds_task=False)
        assert status_allowed(status, holds_task=True) == (status != "idle")
