"""What a model-based test found (issue 32), one regression test each, on every
backend: the cap holds through a manager's re-registration in a counted role, a node
cannot go idle while it holds a lease (and a waiting one shows its task in every
answer), a heartbeat without metrics keeps the node's health (every change an event
with the true old value), and the monitor's manager-recovery task gets its roles by
the rule every added task does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import corral
from corral import CapacityError, ConflictError, Monitor
from corral.clock import FakeClock
from corral.defaults import MANAGER_ROLE
from corral.scoring import matched_roles
from tests.contract._world import world
from tests.support.backends.http import TOKEN, serving

OPERATIONS = (
    "register_node",
    "set_agent_status",
    "heartbeat",
    "get_node",
    "list_nodes",
    "assess_workload",
    "add_task",
    "configure",
)
BAD_INPUT = ("register_node", "set_agent_status")


def _as_node(answer: Any) -> dict[str, Any]:
    """An answer as the node record it describes (a ``Registered`` less its capacity)."""
    d = dict(answer.to_dict())
    d.pop("active_nodes", None)
    d.pop("max_agents", None)
    return d


def _record(c: Any, node_id: str) -> dict[str, Any]:
    """The node read back by ``get_node``, after checking ``list_nodes`` agrees."""
    node = c.get_node(node_id)
    listed = [n for n in c.list_nodes() if n.id == node_id]
    assert listed == [node]
    return _as_node(node)


# --- 1. the cap through re-registration -------------------------------------------------
def test_a_manager_registering_again_in_a_counted_role_must_fit_the_cap(
    cluster: Any, clock: FakeClock
) -> None:
    """max_agents=1 with d1 a developer: d2 may join as a manager (managers always
    fit), but re-registering as a developer is a new claim on a place: refused with
    the capacity line, nothing changed. Once d1 is gone it fits, and it is idle (it
    holds nothing), not working with no task."""
    cluster.configure(max_agents=1)
    cluster.register_node("d1", "developer", "claude-opus-4")
    with pytest.raises(CapacityError):
        cluster.register_node("d2", "developer", "claude-opus-4")
    manager = cluster.register_node("d2", MANAGER_ROLE, "claude-opus-4")
    assert (manager.status, manager.current_task_id) == ("working", None)
    before = world(cluster)
    with pytest.raises(CapacityError) as exc:
        cluster.register_node("d2", "developer", "claude-opus-4")
    assert str(exc.value) == "ERROR: Cluster at capacity (1 nodes). Registration rejected."
    assert world(cluster) == before
    assert cluster.assess_workload().active_count == 2  # d1 and the manager d2

    cluster.terminate_node("d1")
    clock.advance(3)
    again = cluster.register_node("d2", "developer", "claude-opus-4")
    assert (again.role, again.status, again.current_task_id, again.idle_since) == (
        "developer",
        "idle",
        None,
        clock.now(),
    )
    assert (again.active_nodes, again.max_agents) == (1, 1)
    assert _as_node(again) == _record(cluster, "d2")
    last = [e for e in cluster.events() if e.kind == "node_status"][-1]
    assert (last.node_id, last.data["old"], last.data["new"]) == ("d2", "working", "idle")


def test_a_counted_node_keeps_its_place_whatever_counted_role_it_takes(cluster: Any) -> None:
    """At the cap, a developer re-registering as an architect, or as a manager and
    back, keeps the place it holds; a manager that holds a task keeps working on it."""
    cluster.configure(max_agents=1)
    cluster.register_node("A", "developer")
    assert cluster.register_node("A", "architect").role == "architect"
    assert cluster.register_node("A", MANAGER_ROLE).status == "working"
    back = cluster.register_node("A", "developer")
    assert (back.role, back.status) == ("developer", "idle")

    cluster.configure(max_agents=2)
    cluster.register_node("M", MANAGER_ROLE)
    task = cluster.add_task("Implement it")
    assert cluster.claim_best_task("M", MANAGER_ROLE) is not None
    moved = cluster.register_node("M", "developer")
    assert (moved.status, moved.current_task_id) == ("working", task.id)
    assert _as_node(moved) == _record(cluster, "M")


def _register_at_once(racers: list[tuple[Any, str]], role: str) -> dict[str, str]:
    """Each (client, node) registers ``role`` in a thread of its own, released
    together; each node's outcome, ``ok`` or ``capacity``."""
    barrier = threading.Barrier(len(racers))
    results: dict[str, str] = {}

    def go(client: Any, node: str) -> None:
        barrier.wait()
        try:
            client.register_node(node, role)
            results[node] = "ok"
        except CapacityError:
            results[node] = "capacity"

    threads = [threading.Thread(target=go, args=racer) for racer in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_managers_turning_counted_and_new_nodes_race_within_the_cap(
    embedded: Any, clock: FakeClock
) -> None:
    """Three managers re-register as developers while three new developers register,
    all at once from two clients, one place left (max_agents=4, three live managers):
    each manager keeps its place (the others, two, are fewer than four), exactly one
    new developer gets the last place, and the live non-managers never pass the cap.
    The count and the write are one transaction under the registration lock."""
    other = corral.connect(embedded.url, clock=clock)
    try:
        for r in range(5):
            embedded.configure(max_agents=4 + 4 * r)
            for i in range(4 * r):
                embedded.register_node(f"W{r}-{i}", "developer")
            managers = [f"M{r}-{i}" for i in range(3)]
            for m in managers:
                embedded.register_node(m, MANAGER_ROLE)
            racers = [(embedded if i % 2 else other, m) for i, m in enumerate(managers)]
            racers += [(other if i % 2 else embedded, f"N{r}-{i}") for i in range(3)]
            results = _register_at_once(racers, "developer")
            assert [results[m] for m in managers] == ["ok"] * 3, (r, results)
            assert sorted(results[f"N{r}-{i}"] for i in range(3)) == ["capacity"] * 2 + ["ok"]
            live = [n for n in embedded.list_nodes() if n.status != "terminated"]
            assert sum(n.role != MANAGER_ROLE for n in live) == 4 + 4 * r
            for n in live:
                embedded.terminate_node(n.id)
    finally:
        other.close()


# --- 2. idle while holding a lease -----------------------------------------------------
def test_going_idle_while_holding_a_task_is_refused_naming_it(cluster: Any) -> None:
    """A node that holds a lease cannot say idle: the refusal names the task and what
    to do (finish it, give it up, or say waiting), and nothing changes."""
    cluster.register_node("A", "developer")
    cluster.add_task("Implement it")
    task = cluster.claim_best_task("A", "developer")
    before = world(cluster)
    with pytest.raises(ConflictError) as exc:
        cluster.set_agent_status("A", "idle")
    assert exc.value.field == "status"
    message = str(exc.value)
    assert f"task {task.id}" in message and "complete_task" in message, message
    assert "fail_task" in message and "waiting" in message, message
    assert world(cluster) == before


def test_an_idle_node_names_no_current_task(cluster: Any) -> None:
    """idle with a current_task_id is a contradiction: refused, nothing changed."""
    cluster.register_node("A", "developer")
    task = cluster.add_task("Implement it")
    before = world(cluster)
    with pytest.raises(ConflictError) as exc:
        cluster.set_agent_status("A", "idle", task.id)
    assert exc.value.field == "current_task_id"
    assert world(cluster) == before


def test_a_waiting_node_shows_the_task_it_holds_in_every_answer(
    cluster: Any, clock: FakeClock
) -> None:
    """waiting keeps the lease: set_agent_status, heartbeat and register_node answer
    the task the node holds, as get_node and list_nodes say; once it is finished the
    node says waiting with no task."""
    cluster.register_node("A", "developer")
    cluster.add_task("Implement it")
    task = cluster.claim_best_task("A", "developer")
    waiting = cluster.set_agent_status("A", "waiting")
    assert (waiting.status, waiting.current_task_id) == ("waiting", task.id)
    assert _as_node(waiting) == _record(cluster, "A")
    clock.advance(1)
    assert _as_node(cluster.heartbeat("A")) == _record(cluster, "A")
    clock.advance(1)
    again = cluster.register_node("A", "developer")
    assert (again.status, again.current_task_id) == ("waiting", task.id)
    assert _as_node(again) == _record(cluster, "A")
    assert cluster.get_task(task.id).assigned_to == "A"
    cluster.complete_task(task.id, "A", task.epoch)
    done = cluster.get_node("A")
    assert (done.status, done.current_task_id) == ("waiting", None)


# --- 3. health --------------------------------------------------------------------------
def test_a_heartbeat_without_metrics_keeps_the_health_and_every_change_is_an_event(
    cluster: Any, clock: FakeClock
) -> None:
    """degraded, then a beat with no metrics (health kept, no event), then healthy:
    the node_health events are exactly the changes, each with the true old value."""
    cluster.register_node("A", "developer")
    first = cluster.heartbeat("A", metrics={"cpu_usage": 80.0})
    assert first.health == "degraded"
    clock.advance(1)
    plain = cluster.heartbeat("A", capacity_available=1)
    assert plain.health == "degraded"
    assert _as_node(plain) == _record(cluster, "A")
    clock.advance(1)
    healthy = cluster.heartbeat("A", metrics={"cpu_usage": 5.0})
    assert healthy.health == "healthy"
    clock.advance(1)
    cluster.heartbeat("A")
    told = cluster.heartbeat("A", health_status="unhealthy")
    assert _as_node(told) == _record(cluster, "A")
    changes = [(e.data["old"], e.data["new"]) for e in cluster.events() if e.kind == "node_health"]
    assert changes == [(None, "degraded"), ("degraded", "healthy"), ("healthy", "unhealthy")]


# --- 4. the manager-recovery task's roles -----------------------------------------------
def _recovery_roles_follow_the_rule(observer: Any, embedded: Any, clock: FakeClock) -> None:
    embedded.register_node("plan-b", MANAGER_ROLE, heartbeat_interval=20)
    clock.advance(60)
    Monitor(embedded).tick(clock.now())
    [recovery] = observer.list_tasks(status="pending")
    assert recovery.title == "Recover bootstrap manager plan-b (silent 60s)"
    keywords = observer.settings().role_keywords
    want = matched_roles(f"{recovery.title}\n{recovery.description}", keywords, MANAGER_ROLE)
    assert want == ("architect", MANAGER_ROLE)  # "plan" is an architect's keyword
    assert recovery.roles == want
    added = observer.add_task(recovery.title, recovery.description, "high", MANAGER_ROLE)
    assert added.roles == recovery.roles
    observer.configure(role_keywords={**keywords, "developer": [*keywords["developer"], "qa"]})
    assert observer.get_task(recovery.id).roles == want  # re-indexing changes nothing
    assert [e.data["roles"] for e in observer.events() if e.kind == "task_added"] == [
        list(want),
        list(want),
    ]


def test_the_manager_recovery_task_gets_its_roles_by_the_keyword_rule(
    embedded: Any, clock: FakeClock
) -> None:
    """The monitor's "Recover bootstrap manager plan-b" matches the architect's
    keyword "plan" as well as the manager's role, as the same task added by hand does,
    and a role_keywords change re-indexes it to the same roles (SQLite, PostgreSQL)."""
    _recovery_roles_follow_the_rule(embedded, embedded, clock)


def test_the_manager_recovery_task_over_http_has_the_keyword_roles(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The same, read and written over HTTP while the served store's monitor acts."""
    with serving(tmp_path, clock=clock) as (url, embedded):
        client = corral.connect(url, token=TOKEN)
        try:
            _recovery_roles_follow_the_rule(client, embedded, clock)
        finally:
            client.close()
