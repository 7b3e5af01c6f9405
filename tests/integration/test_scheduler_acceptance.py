"""The activation scheduler against its specification's scenarios: the 09:00-09:10
timeline, fairness over a simulated day, runner modes, a cron override and the daily
caps on the injected clock; real runner processes racing on SQLite and PostgreSQL; a
SIGKILLed runner's activation expiring at its TTL."""

from __future__ import annotations

import heapq
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import corral
from corral import InvalidInputError, LeaseError
from corral.clock import FakeClock
from corral.monitor import Monitor

DAY0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC
HOUR = 3600.0


def at(hh: int, mm: int = 0) -> float:
    return DAY0 + hh * HOUR + mm * 60


def _activate(c: Any, clock: FakeClock, agent: str, when: float) -> None:
    """Give ``agent`` an activation ending at ``when`` (through its inbox)."""
    clock.set(when)
    c.notify(agent, "setup")
    a = c.get_assignment("setup", "notification")
    assert a.agent_id == agent
    c.release_assignment(a.id, "setup", a.epoch)


def test_the_documents_timeline(embedded: Any, clock: FakeClock) -> None:
    """09:00 Runner 1 gets A (3 inbox items); 09:05 Runner 2 gets C (stalest, A is
    busy); 09:10 Runner 1 finishes A and gets B (C is busy, A just ran)."""
    c = embedded
    for r in ("Runner 1", "Runner 2", "setup"):
        c.register_node(r, "runner", heartbeat_interval=3600)
    for agent in ("A", "B", "C"):
        c.add_agent(agent)
    _activate(c, clock, "C", at(5))  # last ran 4 hours before 09:00
    _activate(c, clock, "B", at(7))  # 2 hours before
    _activate(c, clock, "A", at(8, 30))
    clock.set(at(8, 59))
    for i in range(3):
        c.notify("A", {"mention": i})

    clock.set(at(9))
    one = c.get_assignment("Runner 1")
    assert (one.agent_id, one.kind, len(one.inbox)) == ("A", "inbox", 3)

    clock.set(at(9, 5))
    two = c.get_assignment("Runner 2")
    assert (two.agent_id, two.kind) == ("C", "discovery")

    clock.set(at(9, 10))
    a = c.release_assignment(one.id, "Runner 1", one.epoch, {"inbox_read": 3})
    assert (a.unread, a.last_activated_at) == (0, at(9, 10))
    three = c.get_assignment("Runner 1")
    assert (three.agent_id, three.kind) == ("B", "discovery")
    # A ran just now: with no minimum interval it is still the one free agent left
    last = c.get_assignment("setup")
    assert (last.agent_id, last.kind) == ("A", "discovery")


def _simulate(
    c: Any,
    clock: FakeClock,
    runners: dict[str, str],
    hours: float,
    notify_every: float | None,
    seed: int,
) -> dict[str, Any]:
    """Runners that each hold an activation for 5 minutes, then release it and ask
    again at once (staggered starts); notifications at random times."""
    rng = random.Random(seed)
    end = clock.now() + hours * HOUR
    queue: list[tuple[float, int, str, Any]] = []
    for i, r in enumerate(sorted(runners)):
        heapq.heappush(queue, (clock.now() + i * 100.0, i, "free", r))
    if notify_every:
        t = clock.now()
        while (t := t + rng.expovariate(1 / notify_every)) < end:
            heapq.heappush(queue, (t, -1, "notify", f"agent-{rng.randrange(10)}"))
    held: dict[str, Any] = {}
    starts: dict[str, list[float]] = defaultdict(list)
    waits: list[float] = []
    sent: dict[int, float] = {}
    kinds: dict[str, set[str]] = defaultdict(set)
    while queue:
        when, order, what, who = heapq.heappop(queue)
        if when >= end:
            break
        clock.set(when)
        if what == "notify":
            sent[c.notify(who, {"at": when}).id] = when
            continue
        if who in held:
            a = held.pop(who)
            c.release_assignment(a.id, who, a.epoch)
        a = c.get_assignment(who, runners[who])
        if a is None:
            heapq.heappush(queue, (when + 60.0, order, "free", who))
            continue
        held[who] = a
        kinds[runners[who]].add(a.kind)
        starts[a.agent_id].append(when)
        waits += [when - sent[n.id] for n in a.inbox]
        heapq.heappush(queue, (when + 300.0, order, "free", who))
    return {"starts": starts, "waits": waits, "kinds": kinds, "sent": len(sent)}


def test_fairness_over_a_simulated_day(embedded: Any, clock: FakeClock) -> None:
    """10 agents, 3 runners, 5-minute activations for 24 hours: each agent's mean
    interval is within 20% of N*T/R (about 17 minutes), and an inbox item waits at
    most one activation slot (5 minutes)."""
    c = embedded
    clock.set(DAY0)
    runners = {f"runner-{i}": "hybrid" for i in range(3)}
    for r in runners:
        c.register_node(r, "runner", heartbeat_interval=86_400)
    for i in range(10):
        c.add_agent(f"agent-{i}")
    out = _simulate(c, clock, runners, 24, notify_every=1800.0, seed=7)
    target = 10 * 5 / 3 * 60
    for agent, starts in sorted(out["starts"].items()):
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        mean = sum(gaps) / len(gaps)
        assert abs(mean - target) <= 0.2 * target, (agent, mean / 60)
    assert len(out["starts"]) == 10
    # every item but those sent in the last slot was delivered, each within one slot
    assert out["sent"] > 20 and len(out["waits"]) >= out["sent"] - 3
    assert max(out["waits"]) <= 300.0


def test_runner_modes_keep_to_their_kinds(sqlite_cluster: Any, clock: FakeClock) -> None:
    c = sqlite_cluster
    clock.set(DAY0)
    runners = {"n1": "notification", "n2": "notification", "e1": "exploration", "h1": "hybrid"}
    for r in runners:
        c.register_node(r, "runner", heartbeat_interval=86_400)
    for i in range(10):
        c.add_agent(f"agent-{i}", {"schedule_override": [{"cron": "@hourly", "task": "t"}]})
    out = _simulate(c, clock, runners, 6, notify_every=300.0, seed=3)
    assert out["kinds"]["notification"] == {"inbox"}
    assert out["kinds"]["exploration"] == {"scheduled", "discovery"}
    assert out["kinds"]["hybrid"] >= {"inbox"}


def test_a_cron_override_due_at_nine_is_assigned_at_nine(
    sqlite_cluster: Any, clock: FakeClock
) -> None:
    c = sqlite_cluster
    clock.set(at(8))
    c.register_node("r", "runner", heartbeat_interval=86_400)
    c.add_agent("never-ran")
    c.add_agent("standup", {"schedule_override": [{"cron": "0 9 * * *", "task": "daily_standup"}]})
    _activate_via = c.get_assignment("r", "exploration")  # 08:00: the stalest (never ran)
    c.release_assignment(_activate_via.id, "r", _activate_via.epoch)
    clock.set(
        at(
            8,
            59,
        )
    )
    assert c.get_assignment("r", "exploration").kind == "discovery"  # not due yet
    for a in c.list_assignments():
        c.release_assignment(a.id, "r", a.epoch)
    clock.set(at(9))
    s = c.get_assignment("r", "exploration")
    assert (s.agent_id, s.kind, s.task, s.due_at) == (
        "standup",
        "scheduled",
        "daily_standup",
        at(9),
    )
    c.release_assignment(s.id, "r", s.epoch)
    assert c.get_agent("standup").next_due_at == at(9) + 86_400


def test_daily_caps_stop_a_sixth_post(sqlite_cluster: Any, clock: FakeClock) -> None:
    """A runner posts whenever its assignment allows: five posts in the day, and a
    sixth reported post is refused; the next day allows five again."""
    c = sqlite_cluster
    clock.set(DAY0)
    c.register_node("r", "runner", heartbeat_interval=86_400)
    c.add_agent("poster", {"max_daily_posts": 5, "max_daily_comments": 50})
    posts = 0
    for _ in range(12):
        clock.advance(600)
        a = c.get_assignment("r")
        if a.allowance["posts"]:
            c.release_assignment(a.id, "r", a.epoch, {"posts": 1})
            posts += 1
            continue
        with pytest.raises(InvalidInputError) as e:
            c.release_assignment(a.id, "r", a.epoch, {"posts": 1})
        assert e.value.field == "outcome.posts"
        c.release_assignment(a.id, "r", a.epoch, {"posts": 0})
    assert posts == 5 and c.get_agent("poster").posts_today == 5
    clock.set(DAY0 + 86_400)
    assert c.get_assignment("r").allowance["posts"] == 5


# --- real processes ----------------------------------------------------------------------
def _check_no_double_hold(events: list[Any], *, commit_order: bool) -> int:
    """Per agent, assignments and their ends alternate; returns how many assignments.

    With ``commit_order`` (SQLite: one writer, so ``seq`` is commit order) the log is
    read in ``seq`` order. On PostgreSQL ``seq`` follows transaction ids, so two
    transactions on one agent may appear in either order (a runner that locked its
    node before another runner's whole assign and release): the log is read per agent
    in the order of the agent's epoch, which each assignment raises under the agent's
    row lock, and every assignment must end, by its holder, before the next epoch's.
    """
    if not commit_order:
        ends = {
            (e.data["agent"], e.data["assignment"]): e
            for e in events
            if e.kind in ("activation_released", "activation_expired")
        }
        by_agent: dict[str, list[Any]] = {}
        for e in events:
            if e.kind == "activation_assigned":
                by_agent.setdefault(e.data["agent"], []).append(e)
        ordered: list[Any] = []
        for agent, taken in by_agent.items():
            epochs = [e.data["epoch"] for e in taken]
            assert len(set(epochs)) == len(epochs), (agent, sorted(epochs))
            for e in sorted(taken, key=lambda e: e.data["epoch"]):
                ordered.append(e)
                end = ends.pop((agent, e.data["assignment"]), None)
                assert end is not None, ("never ended", e)
                ordered.append(end)
        assert ends == {}, ("ended but never assigned", ends)
        events = ordered
    holder: dict[str, tuple[int, str]] = {}
    assigned = 0
    for e in events:
        if e.kind == "activation_assigned":
            agent = e.data["agent"]
            assert agent not in holder, (agent, holder.get(agent), e)
            holder[agent] = (e.data["assignment"], e.node_id)
            assigned += 1
        elif e.kind in ("activation_released", "activation_expired"):
            agent = e.data["agent"]
            assert holder.pop(agent) == (e.data["assignment"], e.node_id), e
    assert holder == {}
    return assigned


def _all_events(c: Any) -> list[Any]:
    out, since = [], 0
    while batch := c.events(since=since, limit=10_000):
        out += batch
        since = batch[-1].seq
    return out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_eight_runner_processes_never_hold_an_agent_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import multiprocessing as mp

    from tests.support import sched_procs
    from tests.support.backends import postgres as pg

    url = f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else pg.fresh_database(request)
    with corral.connect(url) as c:
        c.configure(max_agents=20)
        for i in range(40):
            c.add_agent(f"agent-{i:02d}")
        for i in range(300):
            c.notify(f"agent-{i % 13:02d}", {"n": i})
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(target=sched_procs.assign_and_release, args=(url, f"R{i}", 250, barrier, out))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[2] for r in results] == [[]] * 8, results
    assert sum(r[1] for r in results) == 2000
    with corral.connect(url) as c:
        events = _all_events(c)
        assert _check_no_double_hold(events, commit_order=backend == "sqlite") == 2000
        assert sum(e.kind == "activation_released" for e in events) == 2000  # none lost
        assert c.list_assignments() == []
        assert sum(a.unread for a in c.list_agents()) == 0  # every inbox item read once


@pytest.mark.slow
def test_a_killed_runners_activation_expires_at_its_ttl(tmp_path: Path) -> None:
    """A runner SIGKILLed while holding an activation: the monitor ends it at its
    TTL, the agent is assigned again, and the dead runner's late release is refused."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    ttl = 2.0
    with corral.connect(url) as c:
        c.configure(activation_ttl=ttl)
        c.add_agent("solo")
        c.register_node("other", "runner", heartbeat_interval=120)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.sched_procs", url, "doomed"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        line = child.stdout.readline().split() if child.stdout else []
        assignment_id, epoch, agent = int(line[0]), int(line[1]), line[2]
        assert agent == "solo"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        if child.stdout:
            child.stdout.close()
    with corral.connect(url) as c:
        held = c.list_assignments()
        assert [(a.id, a.runner_id) for a in held] == [(assignment_id, "doomed")]
        monitor = Monitor(c, max_sleep=0.05)
        deadline = time.monotonic() + 10
        expired: list[Any] = []
        while not expired and time.monotonic() < deadline:
            result = monitor.tick()
            expired = [e for e in result.events if e.kind == "activation_expired"]
            if not expired:
                time.sleep(min(0.05, max(0.0, (result.next_deadline or 0) - time.time())))
        assert expired, "the activation did not expire"
        e = expired[0]
        assert (e.data["assignment"], e.data["reason"], e.node_id) == (
            assignment_id,
            "ttl",
            "doomed",
        )
        assert e.ts - held[0].claimed_at == pytest.approx(ttl, abs=0.5)
        again = c.get_assignment("other")
        assert again is not None and again.agent_id == "solo" and again.epoch == epoch + 1
        with pytest.raises(LeaseError):
            c.release_assignment(assignment_id, "doomed", epoch)
        assert c.get_agent("solo").held_by == "other"
