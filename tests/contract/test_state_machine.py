"""A model-based test of the cluster's rules (issue 32), on every backend.

A hypothesis ``RuleBasedStateMachine`` drives the public client (register, status,
heartbeats, tasks, claims, completions, failures, the clock, the assessment) against
``Model``, a plain restatement of docs/core.md's rules written apart from corral's
code. After every step it checks:

- the live non-manager nodes are at most ``max_agents``;
- every in-progress task is held by exactly one live node, at the model's epoch;
- no task is done twice (one ``task_completed`` event per done task at most);
- every answer is the record read back (``get_node``, ``get_task``), every record
  is the model's (status, current task, idle_since, health, roles, epochs), and the
  board view (``read_state``) shows the records;
- the assessment is the reference decision for the model's counts;
- a refused call changes nothing.

Each example runs on a fresh cluster of the backend (a new SQLite file, a
PostgreSQL database in the template's state, a new app behind the HTTP server). The fast
tier runs a few examples; the full suite (``-m slow`` included) runs many more;
``CORRAL_STATEFUL_EXAMPLES`` overrides either.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from corral import CapacityError, ConflictError, LeaseError, NotFoundError
from corral.clock import FakeClock
from corral.model import Event
from corral.types import Client
from tests.conftest import BACKENDS
from tests.contract._world import T0, world

OPERATIONS = (
    "configure",
    "register_node",
    "set_agent_status",
    "terminate_node",
    "heartbeat",
    "add_task",
    "claim_best_task",
    "complete_task",
    "complete_and_claim",
    "fail_task",
    "assess_workload",
    "get_node",
    "get_task",
    "list_nodes",
    "list_tasks",
    "events",
    "read_state",
)

MANAGER = "bootstrap_manager"
NODES = ("n0", "n1", "n2", "n3")
ROLES = ("developer", "architect", MANAGER)
WORDS = ("Implement", "Design", "Plan", "Review", "latest", "Testing", "docs", "Architecture")
KEYWORDS = {
    "architect": ("design", "architect", "plan"),
    "developer": ("implement", "code", "test"),
}
POINTS = {"high": 30, "medium": 20, "low": 10}
MAX_ATTEMPTS = 2

_EXAMPLES = os.environ.get("CORRAL_STATEFUL_EXAMPLES")


# --- the reference model ----------------------------------------------------------------
@dataclass
class MNode:
    role: str
    status: str
    idle_since: float | None
    incarnation: int
    health: str | None = None
    named: int | None = None  # the current task it named with set_agent_status

    @property
    def live(self) -> bool:
        return self.status != "terminated"


@dataclass
class MTask:
    id: int
    priority: str
    roles: tuple[str, ...]
    created_at: float
    status: str = "pending"
    holder: str | None = None
    epoch: int = 0
    attempts: int = 0
    claimed_at: float = 0.0


@dataclass
class Model:
    """The cluster's rules, restated: what each call must answer and leave behind."""

    max_agents: int
    nodes: dict[str, MNode] = field(default_factory=dict)
    tasks: dict[int, MTask] = field(default_factory=dict)

    def live(self) -> list[str]:
        return [n for n, m in self.nodes.items() if m.live]

    def held(self, node: str) -> list[MTask]:
        """The tasks ``node`` holds, newest claim first."""
        mine = [t for t in self.tasks.values() if t.status == "in_progress" and t.holder == node]
        return sorted(mine, key=lambda t: (t.claimed_at, t.id), reverse=True)

    def current_task(self, node: str) -> int | None:
        """The task the node named, else the newest it holds."""
        m = self.nodes[node]
        if m.named is not None:
            return m.named
        held = self.held(node)
        return held[0].id if held and m.status in ("working", "waiting") else None

    def may_register(self, node: str, role: str) -> bool:
        live = len(self.live())
        old = self.nodes.get(node)
        if old is not None and old.live:  # keeps its place, unless a manager turns counted
            return old.role != MANAGER or role == MANAGER or live - 1 < self.max_agents
        return role == MANAGER or live < self.max_agents

    def register(self, node: str, role: str, now: float, incarnation: int) -> None:
        """``incarnation``: the row the store answered (a new one only for a new node,
        above any the id had)."""
        old = self.nodes.get(node)
        if old is not None and old.live:
            if role != old.role and not self.held(node):
                status = "working" if role == MANAGER else "idle"
                if status != "idle":
                    old.idle_since = None
                elif old.status != "idle" or old.idle_since is None:
                    old.idle_since = now
                old.status = status
            old.role = role
            assert incarnation == old.incarnation
            return
        assert old is None or incarnation > old.incarnation
        first = role == MANAGER
        self.nodes[node] = MNode(
            role=role,
            status="working" if first else "idle",
            idle_since=None if first else now,
            incarnation=incarnation,
        )

    def set_status(self, node: str, status: str, now: float, named: int | None = None) -> None:
        m = self.nodes[node]
        m.named = named
        if status == "idle":
            m.idle_since = m.idle_since if m.status == "idle" else now
        else:
            m.idle_since = None
        m.status = status
        if status == "terminated":
            for t in self.held(node):
                t.status, t.holder = "pending", None

    def best(self, role: str) -> MTask | None:
        """score = points + 15 if the role matches + age in minutes; ties: the older
        task, then the lower id (in seconds: 60 x points + 900 x match - created_at)."""
        pending = [t for t in self.tasks.values() if t.status == "pending"]
        if not pending:
            return None
        return max(
            pending,
            key=lambda t: (
                60 * POINTS[t.priority] + (900 if role in t.roles else 0) - t.created_at,
                -t.created_at,
                -t.id,
            ),
        )

    def claim(self, node: str, now: float) -> MTask | None:
        task = self.best(self.nodes[node].role)
        if task is not None:
            task.status, task.holder = "in_progress", node
            task.epoch += 1
            task.attempts += 1
            task.claimed_at = now
            m = self.nodes[node]
            m.status, m.idle_since, m.named = "working", None, None
        return task

    def may_finish(self, task_id: int, node: str, epoch: int | None) -> bool:
        t = self.tasks[task_id]
        return (
            t.status == "in_progress"
            and t.holder == node
            and (epoch is None or epoch == t.epoch)
            and self.nodes[node].live
        )

    def finish(self, task_id: int, outcome: str, now: float) -> None:
        """Done, failed or back to pending; the holder idle if it was working on
        nothing else (a manager stays working, a waiting node waiting)."""
        t = self.tasks[task_id]
        node = t.holder
        assert node is not None
        t.status = outcome
        t.holder = None if outcome == "pending" else node
        m = self.nodes[node]
        if m.named == task_id:
            m.named = None
        if m.status == "working" and m.role != MANAGER and not self.held(node):
            m.status, m.idle_since, m.named = "idle", now, None

    def heartbeat(self, node: str, health: str | None, cpu: float | None) -> str | None:
        """The node's health after a beat: told, else from the metrics, else kept."""
        m = self.nodes[node]
        if health is None and cpu is not None:
            health = "unhealthy" if cpu > 90 else "degraded" if cpu > 70 else "healthy"
        m.health = m.health if health is None else health
        return m.health

    def assessment(self) -> dict[str, Any]:
        """docs/core.md "Assessment", first match wins."""
        pending = [t for t in self.tasks.values() if t.status == "pending"]
        in_progress = sum(t.status == "in_progress" for t in self.tasks.values())
        live = [self.nodes[n] for n in self.live()]
        working = sum(m.status == "working" and m.role != MANAGER for m in live)
        idle = sum(m.status == "idle" for m in live)
        architect_only = sum(t.roles == ("architect",) for t in pending)
        room = len(live) < self.max_agents
        if not pending and not in_progress:
            decision = ("idle", "terminate_idle")
        elif room and (len(pending) >= 3 or (pending and working == 0)):
            spawn = "spawn_architect" if 2 * architect_only > len(pending) else "spawn_developer"
            decision = ("overloaded", spawn)
        elif len(pending) <= 1 and len(live) > 1 and idle > 0:
            decision = ("underutilized", "terminate_idle")
        else:
            decision = ("balanced", "maintain")
        return {
            "status": decision[0],
            "recommendation": decision[1],
            "max_agents": self.max_agents,
            "active_count": len(live),
            "idle_count": idle,
            "working_count": working,
            "pending_tasks": len(pending),
            "in_progress": in_progress,
            "architect_only_pending": architect_only,
        }


def task_roles(title: str, role: str | None) -> tuple[str, ...]:
    """A role matches when one of its keywords starts a word of the title."""
    words = [w.lower() for w in title.split()]
    found = {r for r, kws in KEYWORDS.items() if any(w.startswith(k) for w in words for k in kws)}
    return tuple(sorted(found | ({role} if role else set())))


# --- the machine ------------------------------------------------------------------------
def _as_node(answer: Any) -> dict[str, Any]:
    d = dict(answer.to_dict())
    d.pop("active_nodes", None)
    d.pop("max_agents", None)
    return d


class ClusterMachine(RuleBasedStateMachine):
    """Set ``fresh`` (clock -> client) on a subclass per backend."""

    fresh: Callable[[FakeClock], Client]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(T0)
        self.c = type(self).fresh(self.clock)
        self.model = Model(max_agents=4)
        self.seq = 0  # events seen so far

    def teardown(self) -> None:
        self.c.close()

    # -- helpers ---------------------------------------------------------------------
    def refused(
        self, errors: type[Exception] | tuple[type[Exception], ...], call: Callable[[], Any]
    ) -> Exception:
        """``call`` raises one of ``errors`` and changes nothing."""
        before = world(self.c)
        with pytest.raises(errors) as exc:
            call()
        assert world(self.c) == before
        return exc.value

    def new_events(self) -> list[Event]:
        events = self.c.events(since=self.seq, limit=10_000)
        if events:
            self.seq = events[-1].seq
        return events

    def node_is_record(self, answer: Any) -> None:
        assert _as_node(answer) == _as_node(self.c.get_node(answer.id))

    def task_is_record(self, answer: Any) -> None:
        assert answer.to_dict() == self.c.get_task(answer.id).to_dict()

    # -- rules -------------------------------------------------------------------------
    @initialize(cap=st.integers(1, 3))
    def cap(self, cap: int) -> None:
        self.c.configure(max_agents=cap, max_attempts=MAX_ATTEMPTS)
        self.model.max_agents = cap
        self.new_events()

    @rule(seconds=st.integers(0, 200))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(node=st.sampled_from(NODES), role=st.sampled_from(ROLES))
    def register(self, node: str, role: str) -> None:
        if not self.model.may_register(node, role):
            self.refused(CapacityError, lambda: self.c.register_node(node, role))
            return
        answer = self.c.register_node(node, role)
        self.model.register(node, role, self.clock.now(), answer.incarnation)
        self.node_is_record(answer)
        assert (answer.active_nodes, answer.max_agents) == (
            len(self.model.live()),
            self.model.max_agents,
        )

    def pick(self, data: st.DataObject, prefer: list[str] | None = None) -> str:
        """A node id: half the time a live node (or one of ``prefer``), else any."""
        anyone = st.sampled_from(NODES)
        first = prefer or self.model.live()
        return data.draw(st.sampled_from(first) | anyone if first else anyone)

    @rule(data=st.data(), status=st.sampled_from(("working", "idle", "waiting")))
    def set_status(self, data: st.DataObject, status: str) -> None:
        holders = [n for n in self.model.live() if self.model.held(n)]
        node = self.pick(data, holders)
        m = self.model.nodes.get(node)
        if m is None or not m.live:
            self.refused(NotFoundError, lambda: self.c.set_agent_status(node, status))
            return
        if status == "idle" and self.model.held(node):
            err = self.refused(ConflictError, lambda: self.c.set_agent_status(node, status))
            assert f"task {self.model.held(node)[0].id}" in str(err)
            return
        answer = self.c.set_agent_status(node, status)
        self.model.set_status(node, status, self.clock.now())
        self.node_is_record(answer)

    @precondition(lambda self: any(self.model.held(n) for n in self.model.live()))
    @rule(data=st.data(), status=st.sampled_from(("working", "waiting")))
    def name_current_task(self, data: st.DataObject, status: str) -> None:
        """A node says which of its tasks it works on (or waits on)."""
        node = data.draw(st.sampled_from([n for n in self.model.live() if self.model.held(n)]))
        task = data.draw(st.sampled_from([t.id for t in self.model.held(node)]))
        answer = self.c.set_agent_status(node, status, task)
        self.model.set_status(node, status, self.clock.now(), named=task)
        assert answer.current_task_id == task
        self.node_is_record(answer)

    @rule(data=st.data())
    def terminate(self, data: st.DataObject) -> None:
        node = self.pick(data)
        m = self.model.nodes.get(node)
        if m is None or not m.live:
            self.refused(NotFoundError, lambda: self.c.terminate_node(node))
            return
        answer = self.c.terminate_node(node)
        self.model.set_status(node, "terminated", self.clock.now())
        self.node_is_record(answer)

    @rule(
        data=st.data(),
        told=st.sampled_from((None, "healthy", "degraded", "unhealthy")),
        cpu=st.sampled_from((None, 5.0, 75.0, 95.0)),
    )
    def heartbeat(self, data: st.DataObject, told: str | None, cpu: float | None) -> None:
        self.beat(self.pick(data), told, cpu)

    @rule(data=st.data())
    def plain_heartbeat(self, data: st.DataObject) -> None:
        """A beat that says nothing about health (it keeps the node's)."""
        self.beat(self.pick(data), None, None)

    def beat(self, node: str, told: str | None, cpu: float | None) -> None:
        payload: dict[str, Any] = {}
        if told is not None:
            payload["health_status"] = told
        if cpu is not None:
            payload["metrics"] = {"cpu_usage": cpu}
        m = self.model.nodes.get(node)
        if m is None or not m.live:
            self.refused(NotFoundError, lambda: self.c.heartbeat(node, **payload))
            return
        self.new_events()
        old = m.health
        answer = self.c.heartbeat(node, **payload)
        new = self.model.heartbeat(node, told, cpu)
        assert answer.health == new
        self.node_is_record(answer)
        changes = [
            (e.data["old"], e.data["new"]) for e in self.new_events() if e.kind == "node_health"
        ]
        assert changes == ([] if new == old else [(old, new)])

    @rule(
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        priority=st.sampled_from(tuple(POINTS)),
        role=st.sampled_from((None, *ROLES)),
    )
    def add_task(self, words: list[str], priority: str, role: str | None) -> None:
        title = " ".join(words)
        answer = self.c.add_task(title, priority=priority, role=role)
        assert answer.id not in self.model.tasks
        self.model.tasks[answer.id] = MTask(
            id=answer.id,
            priority=priority,
            roles=task_roles(title, role),
            created_at=self.clock.now(),
        )
        self.task_is_record(answer)

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        node = self.pick(data)
        m = self.model.nodes.get(node)
        if m is None or not m.live:
            self.refused(NotFoundError, lambda: self.c.claim_best_task(node, "developer"))
            return
        answer = self.c.claim_best_task(node, m.role)
        want = self.model.claim(node, self.clock.now())
        assert (answer and answer.id) == (want and want.id)
        if answer is not None:
            self.task_is_record(answer)

    def _finisher(self, data: st.DataObject) -> tuple[int, str, int | None, bool]:
        """A task, a node (mostly its holder), an epoch (mostly right): and whether the
        model lets that node finish it."""
        task = self.model.tasks[data.draw(st.sampled_from(sorted(self.model.tasks)))]
        nodes = sorted(self.model.nodes)
        anyone = st.sampled_from(nodes)
        node = data.draw(st.just(task.holder) | anyone if task.holder in nodes else anyone)
        epoch = data.draw(st.sampled_from((None, task.epoch, task.epoch, task.epoch - 1)))
        epoch = None if epoch is not None and epoch < 1 else epoch
        return task.id, node, epoch, self.model.may_finish(task.id, node, epoch)

    @precondition(lambda self: self.model.tasks and self.model.nodes)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        task_id, node, epoch, ok = self._finisher(data)
        if not ok:
            self.refused(
                (LeaseError, NotFoundError), lambda: self.c.complete_task(task_id, node, epoch)
            )
            return
        answer = self.c.complete_task(task_id, node, epoch)
        self.model.finish(task_id, "done", self.clock.now())
        assert (answer.status, answer.assigned_to) == ("done", node)
        self.task_is_record(answer)

    @precondition(lambda self: self.model.tasks and self.model.nodes)
    @rule(data=st.data())
    def complete_and_claim(self, data: st.DataObject) -> None:
        task_id, node, epoch, ok = self._finisher(data)
        role = self.model.nodes[node].role
        if not ok:
            self.refused(
                (LeaseError, NotFoundError),
                lambda: self.c.complete_and_claim(task_id, node, role, epoch),
            )
            return
        done, nxt = self.c.complete_and_claim(task_id, node, role, epoch)
        now = self.clock.now()
        self.model.finish(task_id, "done", now)
        want = self.model.claim(node, now)
        assert (nxt and nxt.id) == (want and want.id)
        self.task_is_record(done)
        if nxt is not None:
            self.task_is_record(nxt)

    @precondition(lambda self: self.model.tasks and self.model.nodes)
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: st.DataObject, retry: bool) -> None:
        task_id, node, epoch, ok = self._finisher(data)
        if not ok:
            self.refused(
                (LeaseError, NotFoundError),
                lambda: self.c.fail_task(task_id, node, epoch, error="no", retry=retry),
            )
            return
        answer = self.c.fail_task(task_id, node, epoch, error="no", retry=retry)
        t = self.model.tasks[task_id]
        outcome = "pending" if retry and t.attempts < MAX_ATTEMPTS else "failed"
        self.model.finish(task_id, outcome, self.clock.now())
        assert answer.status == outcome
        self.task_is_record(answer)

    @rule()
    def assess(self) -> None:
        got = self.c.assess_workload().to_dict()
        want = self.model.assessment()
        assert {k: got[k] for k in want} == want

    # -- invariants --------------------------------------------------------------------
    @invariant()
    def records_are_the_model(self) -> None:
        nodes = {n.id: n for n in self.c.list_nodes()}
        assert set(nodes) == set(self.model.nodes)
        for node_id, m in self.model.nodes.items():
            got = nodes[node_id]
            assert (got.role, got.status, got.idle_since, got.incarnation) == (
                m.role,
                m.status,
                m.idle_since,
                m.incarnation,
            ), node_id
            assert got.current_task_id == self.model.current_task(node_id), node_id
            assert got.health == m.health, node_id
        tasks = {t.id: t for t in self.c.list_tasks(limit=10_000)}
        assert set(tasks) == set(self.model.tasks)
        for task_id, mt in self.model.tasks.items():
            got_task = tasks[task_id]
            assert (got_task.status, got_task.epoch, got_task.attempts, got_task.roles) == (
                mt.status,
                mt.epoch,
                mt.attempts,
                mt.roles,
            ), task_id
            if mt.status == "in_progress":
                assert got_task.assigned_to == mt.holder, task_id

    @invariant()
    def the_board_view_is_the_records(self) -> None:
        """read_state shows the live nodes as get_node does, the tasks in progress,
        then the pending ones in claim order (no role bonus)."""
        state = self.c.read_state()
        live = [n.to_dict() for n in self.c.list_nodes() if n.status != "terminated"]
        assert [n.to_dict() for n in state.nodes] == live
        tasks = self.model.tasks.values()
        in_progress = sorted(t.id for t in tasks if t.status == "in_progress")
        pending = sorted(
            (t for t in tasks if t.status == "pending"),
            key=lambda t: (t.created_at - 60 * POINTS[t.priority], t.created_at, t.id),
        )
        assert [t.id for t in state.tasks] == (in_progress + [t.id for t in pending])[:50]
        assert (state.pending_tasks, state.in_progress) == (len(pending), len(in_progress))

    @invariant()
    def live_non_managers_fit_the_cap(self) -> None:
        live = [n for n in self.c.list_nodes() if n.status != "terminated"]
        assert sum(n.role != MANAGER for n in live) <= self.model.max_agents

    @invariant()
    def each_lease_is_held_by_one_live_node_at_its_epoch(self) -> None:
        live = {n.id for n in self.c.list_nodes() if n.status != "terminated"}
        for t in self.c.list_tasks(status="in_progress", limit=10_000):
            assert t.assigned_to in live, t
            assert t.epoch == self.model.tasks[t.id].epoch, t
        idle = [n for n in self.c.list_nodes() if n.status == "idle"]
        assert all(n.current_task_id is None for n in idle)

    @invariant()
    def no_task_is_done_twice(self) -> None:
        done = [e.task_id for e in self.c.events(limit=10_000) if e.kind == "task_completed"]
        assert len(done) == len(set(done))
        assert set(done) == {t.id for t in self.model.tasks.values() if t.status == "done"}


# --- the runs ---------------------------------------------------------------------------
class _Example:
    """The request as the backend sees it for one example: what it leaves to run after
    the example (a PostgreSQL database back to the pool, the HTTP backend's store
    closed) runs once the example is over (its client closed by its teardown), when
    the next example starts or the test ends: one database serves every example in
    turn, where each took a new one."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.config = request.config
        self._after: list[Callable[[], object]] = []

    def addfinalizer(self, finalizer: Callable[[], object]) -> None:
        self._after.append(finalizer)

    def finish(self) -> None:
        while self._after:
            self._after.pop()()


@pytest.fixture(params=BACKENDS)
def fresh(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[FakeClock], Client]]:
    """A factory of fresh clusters on the backend, one per example (each closed by
    its machine's teardown; what its backend leaves to do after it done before the
    next example's)."""
    backend = importlib.import_module(f"tests.support.backends.{request.param}")
    numbers = itertools.count()
    example = _Example(request)

    def make(clock: FakeClock) -> Client:
        example.finish()  # the last example's: its machine's teardown closed its client
        where = tmp_path / f"example-{next(numbers)}"
        where.mkdir()
        client: Client = backend.make(example, where, clock)
        return client

    try:
        yield make
    finally:
        example.finish()


def _run(fresh: Callable[[FakeClock], Client], examples: int, steps: int) -> None:
    machine = type("Machine", (ClusterMachine,), {"fresh": staticmethod(fresh)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=int(_EXAMPLES) if _EXAMPLES else examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_the_cluster_follows_the_model(fresh: Callable[[FakeClock], Client]) -> None:
    """The fast tier: a few short histories per backend."""
    _run(fresh, examples=6, steps=30)


@pytest.mark.slow
def test_the_cluster_follows_the_model_at_length(fresh: Callable[[FakeClock], Client]) -> None:
    """The full suite: many longer histories per backend."""
    _run(fresh, examples=60, steps=50)
