"""The activation scheduler's operations (docs/scheduler.md) on every backend: agents,
inboxes, assignments in the documented order, releases with fencing, and refusals
that change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError, LeaseError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, kinds, world

OPERATIONS = (
    "add_agent",
    "get_agent",
    "list_agents",
    "notify",
    "read_inbox",
    "get_assignment",
    "release_assignment",
    "list_assignments",
)
BAD_INPUT = OPERATIONS


def sched_world(c: Any) -> tuple[Any, ...]:
    """Everything observable, the scheduler's state included."""
    return (
        world(c),
        [a.to_dict() for a in c.list_agents(limit=1000)],
        [a.to_dict() for a in c.list_assignments(limit=1000)],
    )


def _setup(c: Any, *agents: str) -> None:
    c.register_node("r1", "runner")
    c.register_node("r2", "runner")
    for a in agents:
        c.add_agent(a)


# --- behaviour -------------------------------------------------------------------------
def test_agents_are_added_listed_and_updated(cluster: Any, clock: FakeClock) -> None:
    config = {
        "interests": ["rust"],
        "max_daily_posts": 5,
        "schedule_override": [{"cron": "0 9 * * *", "task": "standup"}],
    }
    a = cluster.add_agent("claude-code-1", config)
    assert (a.id, a.unread, a.last_activated_at, a.activation_count, a.held_by) == (
        "claude-code-1",
        0,
        None,
        0,
        None,
    )
    assert a.config["schedule_override"] == [{"cron": "0 9 * * *", "task": "standup", "tz": "UTC"}]
    assert a.next_due_task == "standup" and a.next_due_at is not None and a.next_due_at > T0
    cluster.add_agent("b")
    assert [x.id for x in cluster.list_agents()] == ["b", "claude-code-1"]
    assert [x.id for x in cluster.list_agents(after="b")] == ["claude-code-1"]
    assert [x.id for x in cluster.list_agents(limit=1)] == ["b"]
    cluster.notify("b", {"text": "hi"})
    again = cluster.add_agent("b", {"interests": ["go"]})
    assert again.unread == 1 and again.config == {"interests": ["go"]}
    assert cluster.get_agent("b") == again
    assert "agent_added" in kinds(cluster)


def test_the_inbox_counts_unread_and_reads_oldest_first(cluster: Any, clock: FakeClock) -> None:
    _setup(cluster, "a")
    first = cluster.notify("a", {"n": 1})
    clock.advance(1)
    cluster.notify("a", "two")
    cluster.notify("a", [3])
    got_first = (first.agent_id, first.payload, first.created_at, first.read_at)
    assert got_first == ("a", {"n": 1}, T0, None)
    assert cluster.get_agent("a").unread == 3
    got = cluster.read_inbox("a", limit=2)
    assert [n.payload for n in got] == [{"n": 1}, "two"]
    assert cluster.get_agent("a").unread == 1
    assert [n.payload for n in cluster.read_inbox("a")] == [[3]]
    assert cluster.read_inbox("a") == []
    assert cluster.get_agent("a").unread == 0


def test_assignments_follow_the_documented_order(cluster: Any, clock: FakeClock) -> None:
    """Inbox by unread count, then the stalest (never activated first); held agents
    are skipped; modes keep to their kinds."""
    _setup(cluster, "a", "b", "c")
    cluster.notify("b", 1)
    cluster.notify("c", 1)
    cluster.notify("c", 2)
    assert cluster.get_assignment("r1", "exploration").agent_id == "a"  # no inbox
    first = cluster.get_assignment("r1", "notification")
    assert (first.agent_id, first.kind, [n.payload for n in first.inbox]) == ("c", "inbox", [1, 2])
    second = cluster.get_assignment("r2", "hybrid")
    assert (second.agent_id, second.kind) == ("b", "inbox")
    assert cluster.get_assignment("r2", "hybrid") is None  # everyone is held
    assert cluster.get_assignment("r2", "notification") is None
    assert sorted(a.agent_id for a in cluster.list_assignments()) == ["a", "b", "c"]
    assert cluster.get_agent("c").held_by == "r1"


def test_release_stamps_counts_and_reads_the_delivered_items(
    cluster: Any, clock: FakeClock
) -> None:
    _setup(cluster, "a", "b")
    cluster.notify("a", "x")
    a = cluster.get_assignment("r1")
    assert (a.kind, a.epoch, a.runner_id, a.mode, a.claimed_at) == ("inbox", 1, "r1", "hybrid", T0)
    assert a.expires_at == T0 + cluster.settings().activation_ttl
    cluster.notify("a", "late")  # arrives during the activation: stays unread
    clock.advance(300)
    done = cluster.release_assignment(
        a.id, "r1", a.epoch, {"posts": 1, "comments": 2, "mood": "ok"}
    )
    assert (done.last_activated_at, done.activation_count, done.held_by, done.unread) == (
        T0 + 300,
        1,
        None,
        1,
    )
    assert (done.posts_today, done.comments_today) == (1, 2)
    assert cluster.list_assignments() == []
    ev = [e for e in cluster.events() if e.kind == "activation_released"][-1]
    assert ev.node_id == "r1" and ev.data["agent"] == "a" and ev.data["epoch"] == 1
    assert ev.data["outcome"] == {"posts": 1, "comments": 2, "mood": "ok", "inbox_read": 1}
    # the late item makes "a" an inbox agent again, ahead of never-activated "b"
    nxt = cluster.get_assignment("r2")
    assert (nxt.agent_id, nxt.kind, nxt.epoch, [n.payload for n in nxt.inbox]) == (
        "a",
        "inbox",
        2,
        ["late"],
    )
    assert cluster.get_assignment("r2").agent_id == "b"
    assert kinds(cluster).count("activation_assigned") == 3


def test_a_release_not_held_is_refused_and_changes_nothing(cluster: Any, clock: FakeClock) -> None:
    """Fencing: another runner's, an epoch never issued, or after the agent moved on."""
    _setup(cluster, "a")
    a = cluster.get_assignment("r1")
    before = sched_world(cluster)
    with pytest.raises(LeaseError) as e:
        cluster.release_assignment(a.id, "r2", a.epoch)
    assert e.value.field == "runner_id"
    with pytest.raises(LeaseError) as e:
        cluster.release_assignment(a.id, "r1", a.epoch + 1)
    assert e.value.field == "epoch"
    with pytest.raises(LeaseError) as e:
        cluster.release_assignment(a.id + 1, "r1", a.epoch)
    assert e.value.field == "assignment_id"
    assert sched_world(cluster) == before
    cluster.release_assignment(a.id, "r1", a.epoch)
    after = sched_world(cluster)
    with pytest.raises(LeaseError):
        cluster.release_assignment(a.id, "r1", a.epoch)  # released already
    assert sched_world(cluster) == after


def test_min_activation_interval_holds_back_discovery_only(cluster: Any, clock: FakeClock) -> None:
    _setup(cluster, "a")
    cluster.add_agent("own", {"min_activation_interval": 60})
    for _ in range(2):
        x = cluster.get_assignment("r1", "exploration")
        cluster.release_assignment(x.id, "r1", x.epoch)
    # off unless set: "a" (cluster-wide off) comes again; "own" waits its 60 s
    assert cluster.get_assignment("r1", "exploration").agent_id == "a"
    assert cluster.get_assignment("r2", "exploration") is None
    cluster.notify("own", "ping")  # the inbox is never held back
    assert cluster.get_assignment("r2", "notification").agent_id == "own"
    cluster.configure(min_activation_interval=600)
    assert cluster.settings().min_activation_interval == 600
    cluster.configure(min_activation_interval=0)


def test_a_due_cron_override_is_scheduled_ahead_of_staleness(
    cluster: Any, clock: FakeClock
) -> None:
    _setup(cluster, "never")
    cluster.add_agent("cron", {"schedule_override": [{"cron": "@hourly", "task": "tick"}]})
    due = cluster.get_agent("cron").next_due_at
    assert due == (T0 // 3600 + 1) * 3600
    clock.set(due)
    s = cluster.get_assignment("r1", "exploration")
    assert (s.agent_id, s.kind, s.task, s.due_at) == ("cron", "scheduled", "tick", due)
    assert cluster.get_assignment("r2", "notification") is None
    cluster.release_assignment(s.id, "r1", s.epoch)
    assert cluster.get_agent("cron").next_due_at == due + 3600
    assert cluster.get_assignment("r1", "exploration").agent_id == "never"


def test_daily_caps_are_carried_and_enforced(cluster: Any, clock: FakeClock) -> None:
    _setup(cluster)
    cluster.add_agent("poster", {"max_daily_posts": 2, "max_daily_comments": 1})
    a = cluster.get_assignment("r1")
    assert a.allowance == {"posts": 2, "comments": 1}
    cluster.release_assignment(a.id, "r1", a.epoch, {"posts": 2})
    b = cluster.get_assignment("r1")
    assert b.allowance == {"posts": 0, "comments": 1}
    before = sched_world(cluster)
    with pytest.raises(InvalidInputError) as e:
        cluster.release_assignment(b.id, "r1", b.epoch, {"posts": 1})
    assert e.value.field == "outcome.posts"
    assert sched_world(cluster) == before
    cluster.release_assignment(b.id, "r1", b.epoch, {"comments": 1})
    clock.advance(86_400)  # a new UTC day
    assert cluster.get_assignment("r1").allowance == {"posts": 2, "comments": 1}


# --- bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.add_agent("", {}), "agent_id"),
        (lambda c: c.add_agent("x", {"max_daily_posts": -1}), "max_daily_posts"),
        (
            lambda c: c.add_agent("x", {"schedule_override": [{"cron": "61 * * * *"}]}),
            "schedule_override[0].cron",
        ),
        (lambda c: c.add_agent("x", {"nope": 1}), "config"),
        (lambda c: c.get_agent(" x"), "agent_id"),
        (lambda c: c.list_agents(limit=0), "limit"),
        (lambda c: c.notify("a", "x" * 70_000), "payload"),
        (lambda c: c.notify("", 1), "agent_id"),
        (lambda c: c.read_inbox("a", limit=0), "limit"),
        (lambda c: c.get_assignment("r1", "sometimes"), "mode"),
        (lambda c: c.get_assignment("", "hybrid"), "runner_id"),
        (lambda c: c.release_assignment(0, "r1", 1), "assignment_id"),
        (lambda c: c.release_assignment(1, "r1", 0), "epoch"),
        (lambda c: c.release_assignment(1, "r1", 1, {"posts": -1}), "outcome.posts"),
        (lambda c: c.list_assignments(limit=0), "limit"),
    ],
)
def test_bad_input_is_refused_naming_the_field(cluster: Any, call: Any, field: str) -> None:
    _setup(cluster, "a")
    cluster.get_assignment("r1")
    before = sched_world(cluster)
    with pytest.raises(InvalidInputError) as e:
        call(cluster)
    assert e.value.field == field
    assert sched_world(cluster) == before


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.get_agent("ghost"), "agent_id"),
        (lambda c: c.notify("ghost", 1), "agent_id"),
        (lambda c: c.read_inbox("ghost"), "agent_id"),
        (lambda c: c.get_assignment("ghost", "hybrid"), "runner_id"),
    ],
)
def test_unknown_agents_and_runners_are_not_found(cluster: Any, call: Any, field: str) -> None:
    _setup(cluster, "a")
    before = sched_world(cluster)
    with pytest.raises(NotFoundError) as e:
        call(cluster)
    assert e.value.field == field
    assert sched_world(cluster) == before


def test_a_runner_is_working_while_it_holds_an_activation(cluster: Any, clock: FakeClock) -> None:
    """So the idle rule never retires a runner in the middle of an activation."""
    _setup(cluster, "a", "b")
    assert cluster.get_node("r1").status == "idle"
    first = cluster.get_assignment("r1")
    second = cluster.get_assignment("r1")
    assert cluster.get_node("r1").status == "working"
    cluster.release_assignment(first.id, "r1", first.epoch)
    assert cluster.get_node("r1").status == "working"  # still holds "b"
    clock.advance(5)
    cluster.release_assignment(second.id, "r1", second.epoch)
    node = cluster.get_node("r1")
    assert (node.status, node.idle_since) == ("idle", T0 + 5)


def test_a_release_after_the_ttl_is_refused_before_the_monitor_runs(
    cluster: Any, clock: FakeClock
) -> None:
    _setup(cluster, "a")
    a = cluster.get_assignment("r1")
    clock.advance(cluster.settings().activation_ttl)
    before = sched_world(cluster)
    with pytest.raises(LeaseError) as e:
        cluster.release_assignment(a.id, "r1", a.epoch)
    assert e.value.field == "assignment_id"
    assert sched_world(cluster) == before
