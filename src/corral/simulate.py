"""The simulator: a task trace replayed on a simulated clock through scaling policies.

A trace is JSON lines, one task each: ``arrival`` (seconds from the trace's start),
``role``, ``priority`` (high, medium, low) and ``duration`` (seconds of work). Each
policy runs the whole trace on its own simulated pool of workers, one pool per role:

- a worker pays from its spawn: ``startup`` seconds before it can claim (spawn to
  ready), then claims, works, idles, and at its stop ``stop`` seconds more;
- an idle worker claims the best pending task at once, in corral's claim order
  (:func:`corral.scoring.sort_key`, a task of the worker's role with the role bonus:
  a role is a preference, not a filter); the worker idle longest claims first;
- a scale-down never kills a busy worker: it stops idle workers first, then workers
  still starting, and a busy one only once its task is done (it claims nothing more);
- a worker that registers when ``max_agents`` nodes are live is refused
  (:func:`corral.lifecycle.registration_allowed`) and stops.

The policies (:data:`POLICIES`):

``corral``
    corral's own rules, called as the service calls them: the assessment
    (:func:`corral.assessment.decide`) and the pool decision
    (:func:`corral.scaling.decide`, with :func:`corral.scaling.count_members`, the
    members it retires named by :func:`corral.scaling.retiring`) at every look of the
    pools (``look``, every :data:`corral.fleet.pools.POOL_INTERVAL`), and the worker's
    idle rule (it retires itself once :func:`corral.scaling.idle_past_timeout`).
``fixed``
    ``max`` workers, warm from the start, never scaled.
``keda``
    KEDA-style: every ``keda_poll`` s, desired = ceil((queued + running) / target),
    up at once; down only to the highest desired count of the last ``keda_cooldown``
    seconds (the scale-down cooldown), min 0.
``dbos``
    DBOS Conductor's formula, ceil(queue depth / worker concurrency), queue depth
    being the tasks queued or running, applied at every look like corral's pools,
    with no cooldown.
``dask``
    Dask-adaptive-style: every ``dask_interval`` s, target = min(tasks queued or
    running, ceil(their remaining work / ``dask_target_duration``)); up at once; a
    worker is removed once suggested for removal ``dask_wait_count`` checks in a row.
``manager``
    the protocol corral was specified from, followed as written: a bootstrap manager
    assesses every ``assess_interval`` s with its decision logic and spawns one
    developer per ``spawn_*`` recommendation; a worker idle ``idle_timeout`` s with
    nothing pending and the last status ``idle`` or ``underutilized`` terminates;
    the monitor (every ``monitor_interval`` s) terminates a node idle past
    ``idle_timeout + grace_period``.
``oracle``
    not a policy anyone can deploy: a clairvoyant schedule that knows the whole trace
    (every arrival and every duration) and plans its workers offline
    (:func:`oracle_schedule`): a task takes a worker freed less than
    ``startup + stop`` seconds before it, else waits for a worker that will be free
    within ``oracle_wait`` seconds (DBOS's p95 wait on the same trace unless given),
    else gets a worker spawned ``startup`` seconds before it; a worker stops the moment
    its last task is done. It is a comparison point, built by a greedy plan, not run
    through the simulated claim. :func:`idle_lower_bound` is a true lower bound for
    every policy at a given p95 wait.

Every policy runs until its last task is done and ``drain`` seconds more; all are then
accounted to the same horizon (the longest run): a worker still alive pays to it.
Pure: no clock, no I/O but :func:`load_trace`; the same trace and parameters give
the same numbers.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corral.assessment import Counts
from corral.assessment import decide as assess
from corral.defaults import PRIORITIES
from corral.errors import InvalidInputError
from corral.fleet.pools import POOL_INTERVAL
from corral.lifecycle import registration_allowed
from corral.model import Settings
from corral.scaling import (
    IDLE_RESERVE,
    FleetView,
    PoolLimits,
    PoolState,
    count_members,
    idle_past_timeout,
    retiring,
)
from corral.scaling import decide as pool_decide
from corral.scoring import ROLE_BONUS_SECONDS, sort_key

__all__ = [
    "POLICIES",
    "Action",
    "Check",
    "Params",
    "Result",
    "Run",
    "Sim",
    "TraceTask",
    "acceptance",
    "idle_lower_bound",
    "load_trace",
    "manager_decision",
    "oracle_schedule",
    "parse_trace",
    "percentile",
    "plot",
    "reach_checks",
    "result",
    "simulate",
    "simulate_all",
]

POLICIES = ("corral", "fixed", "keda", "dbos", "dask", "manager", "oracle")

_SETTINGS = Settings()
_LIMITS = PoolLimits()


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One task of a trace; ``id`` is its line's order."""

    id: int
    arrival: float
    role: str
    priority: str
    duration: float


@dataclass(frozen=True, slots=True)
class Params:
    """What a simulated pool pays and each policy's knobs (see docs/economics.md)."""

    max: int = 8  # each pool's ceiling (KEDA maxReplicaCount, Dask maximum, fixed size)
    max_agents: int = 8  # the cluster's cap on live nodes
    startup: float = 10.0  # seconds from spawn to ready (claims)
    stop: float = 2.0  # seconds from the stop decision to the process's end
    price: float = 0.01  # per worker-minute
    drain: float = 900.0  # seconds run past each policy's last completion
    idle_timeout: float = _SETTINGS.idle_timeout_seconds
    reserve: int = IDLE_RESERVE  # idle members corral's pool keeps past its pending tasks
    grace_period: float = _SETTINGS.grace_period_seconds
    cooldown: float = _LIMITS.cooldown  # corral's pool cooldown (fleet.toml's default)
    look: float = POOL_INTERVAL  # seconds between two looks of corral's pools
    keda_target: float = 1.0
    keda_poll: float = 30.0
    keda_cooldown: float = 300.0
    dbos_concurrency: int = 1
    dask_interval: float = 1.0
    dask_wait_count: int = 3
    dask_target_duration: float = 5.0
    assess_interval: float = _SETTINGS.workload_assessment_interval
    monitor_interval: float = 5.0
    oracle_wait: float | None = None  # None: DBOS's p95 wait on the same trace


# ---- traces -------------------------------------------------------------------------


def _number(value: Any, *, positive: bool) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        return None
    return number


def parse_trace(lines: Iterable[str], source: str) -> list[TraceTask]:
    """The tasks of a trace's lines, by arrival (blank lines skipped). A bad line is
    an :class:`InvalidInputError` naming ``source``, the line and the field."""
    tasks: list[TraceTask] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{where}: not JSON ({exc.msg})", field=source) from None
        if not isinstance(row, dict):
            raise InvalidInputError(f"{where}: not a JSON object", field=source)
        arrival = _number(row.get("arrival"), positive=False)
        if arrival is None:
            raise InvalidInputError(
                f"{where}: arrival must be a number of seconds from 0; got {row.get('arrival')!r}",
                field=source,
            )
        duration = _number(row.get("duration"), positive=True)
        if duration is None:
            raise InvalidInputError(
                f"{where}: duration must be a number of seconds above 0; "
                f"got {row.get('duration')!r}",
                field=source,
            )
        role = row.get("role")
        if not isinstance(role, str) or not role.strip():
            raise InvalidInputError(f"{where}: role must be a non-empty string", field=source)
        priority = row.get("priority")
        if priority not in PRIORITIES:
            raise InvalidInputError(
                f"{where}: priority must be one of {', '.join(PRIORITIES)}; got {priority!r}",
                field=source,
            )
        tasks.append(TraceTask(len(tasks), arrival, role, str(priority), duration))
    if not tasks:
        raise InvalidInputError("no tasks in the trace", field=source)
    return sorted(tasks, key=lambda t: (t.arrival, t.id))


def load_trace(path: str | Path) -> list[TraceTask]:
    """The tasks of the trace file at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_trace(f, str(path))
    except FileNotFoundError:
        raise InvalidInputError("no such file", field=str(path)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InvalidInputError(
            f"cannot read it ({exc.__class__.__name__})", field=str(path)
        ) from None


# ---- the simulated pool -------------------------------------------------------------

# Event kinds, in the order they apply at one instant: a look sees the instant's
# completions, arrivals and workers ready.
_GONE, _FINISH, _READY, _ARRIVE, _IDLE, _TICK, _LOOK = range(7)


@dataclass(slots=True)
class _Worker:
    id: int
    role: str
    spawned: float
    ready_at: float
    state: str = "starting"  # starting | idle | busy | stopping
    idle_since: float | None = None
    draining: bool = False
    busy: float = 0.0
    gone_at: float | None = None
    stop_at: float | None = None  # when a stopping worker's process ends
    refused: bool = False


@dataclass(frozen=True, slots=True)
class Action:
    """A change of a pool's size: ``delta`` workers at ``at``, and why."""

    at: float
    role: str
    delta: int
    cause: str


@dataclass(slots=True)
class Run:
    """One policy's run of a trace: what happened, for the numbers and the plot."""

    policy: str
    cooldown: float
    end: float = 0.0
    waits: dict[str, list[float]] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    sizes: list[tuple[float, int]] = field(default_factory=list)  # (t, live workers)
    workers: list[_Worker] = field(default_factory=list)
    cap_breaches: int = 0
    refused: int = 0
    unfinished: int = 0


class Sim:
    """The simulated cluster one policy acts on (its pools, its board, its clock)."""

    def __init__(self, tasks: Sequence[TraceTask], params: Params, run: Run) -> None:
        self.p = params
        self.run = run
        self.tasks = tasks
        self.roles = sorted({t.role for t in tasks})
        self.now = 0.0
        self._events: list[tuple[float, int, int, Any]] = []  # (when, kind, seq, arg)
        self._seq = 0
        # The board: the pending tasks, and corral's two index heads (the best of all
        # tasks; the best of a role's tasks with its bonus), stale entries popped lazily
        self.waiting: set[int] = set()
        self._waiting_of = dict.fromkeys(self.roles, 0)
        self._best_all: list[tuple[float, float, int]] = []
        self._best_of: dict[str, list[tuple[float, float, int]]] = {r: [] for r in self.roles}
        self.workers: dict[int, _Worker] = {}  # alive (not gone)
        self.done = 0
        self.last_finish = 0.0
        self.running: dict[int, tuple[TraceTask, float]] = {}  # worker -> (task, finishes)
        self.on_change: Callable[[], None] = lambda: None
        self.on_idle: Callable[[_Worker], None] = lambda w: None
        self.on_tick: Callable[[int], None] = lambda tag: None
        self.on_look: Callable[[], None] = lambda: None
        self._look_at: float | None = None
        self.tasks_by_id = {t.id: t for t in tasks}
        for t in tasks:
            self.at(t.arrival, _ARRIVE, t)

    # -- events -------------------------------------------------------------------
    def at(self, when: float, kind: int, arg: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, kind, self._seq, arg))

    def look_soon(self, after: float) -> None:
        """A look at the first instant of the pools' grid at or after ``after`` (one
        pending at a time: the earliest)."""
        k = math.ceil(after / self.p.look)
        t = k * self.p.look
        if t < after:
            t = (k + 1) * self.p.look
        if self._look_at is None or t < self._look_at:
            self._look_at = t
            self.at(t, _LOOK, t)

    def every(self, interval: float, tag: int) -> None:
        """``on_tick(tag)`` at 0, ``interval``, 2 ``interval``, … until the run ends."""
        self.at(0.0, _TICK, (tag, interval, 0))

    def horizon(self) -> float:
        last_arrival = self.tasks[-1].arrival
        return max(last_arrival, self.last_finish) + self.p.drain

    def loop(self) -> None:
        total = len(self.tasks)
        while self._events:
            when, kind, _, arg = self._events[0]
            if when > self.horizon() and (self.done == total or not self.running):
                break
            heapq.heappop(self._events)
            self.now = when
            if kind == _ARRIVE:
                self._add(arg)
                self._dispatch()
                self.on_change()
            elif kind == _FINISH:
                self._finish(arg)
                self.on_change()
            elif kind == _READY:
                self._ready(arg)
                self.on_change()
            elif kind == _GONE:
                self.workers.pop(arg).gone_at = when
            elif kind == _IDLE:
                found = self.workers.get(arg[0])
                if found is not None and found.state == "idle" and found.idle_since == arg[1]:
                    self.on_idle(found)
            elif kind == _TICK:
                tag, interval, n = arg
                self.on_tick(tag)
                self.at((n + 1) * interval, _TICK, (tag, interval, n + 1))
            elif kind == _LOOK and arg == self._look_at:
                self._look_at = None
                self.on_look()
        self.run.end = max(self.now, self.horizon())
        for w in self.workers.values():
            if w.state == "stopping":  # its end is known: it pays to it
                w.gone_at = w.stop_at
        self.run.unfinished = total - self.done

    # -- the pool -----------------------------------------------------------------
    def live(self, role: str | None = None) -> list[_Worker]:
        """Workers in the pool: spawned and not told to stop (starting, idle, busy)."""
        return [
            w
            for w in self.workers.values()
            if w.state != "stopping" and not w.draining and (role is None or w.role == role)
        ]

    def registered(self) -> int:
        return sum(
            1 for w in self.workers.values() if w.state in ("idle", "busy") and not w.refused
        )

    def pending(self, role: str | None = None) -> int:
        """Tasks pending (of ``role``: whose role it is)."""
        if role is None:
            return len(self.waiting)
        return self._waiting_of.get(role, 0)

    def pending_tasks(self, role: str) -> list[TraceTask]:
        return [
            self.tasks_by_id[i] for i in sorted(self.waiting) if self.tasks_by_id[i].role == role
        ]

    def _add(self, task: TraceTask) -> None:
        key = sort_key(task.priority, task.arrival)
        heapq.heappush(self._best_all, (key, task.arrival, task.id))
        heapq.heappush(self._best_of[task.role], (key - ROLE_BONUS_SECONDS, task.arrival, task.id))
        self.waiting.add(task.id)
        self._waiting_of[task.role] += 1

    def _best(self, role: str) -> TraceTask | None:
        """The task a worker of ``role`` claims: the better of the two heads (corral's
        score, a task of its role with the role bonus; ties to the older task)."""
        heads = []
        for heap in (self._best_all, self._best_of.get(role, [])):
            while heap and heap[0][2] not in self.waiting:
                heapq.heappop(heap)
            if heap:
                heads.append(heap[0])
        if not heads:
            return None
        task = self.tasks_by_id[min(heads)[2]]
        self.waiting.remove(task.id)
        self._waiting_of[task.role] -= 1
        return task

    def running_of(self, role: str) -> list[tuple[TraceTask, float]]:
        return [(t, end) for t, end in self.running.values() if t.role == role]

    def spawn(
        self, role: str, n: int, cause: str, *, warm: bool = False, ceiling: int | None = None
    ) -> None:
        """Spawn ``n`` workers of ``role``; a breach if the live workers pass
        ``max_agents`` or the pool its ``ceiling`` (``max`` unless the policy has none)."""
        if n <= 0:
            return
        for _ in range(n):
            wid = len(self.run.workers)
            ready = self.now if warm else self.now + self.p.startup
            w = _Worker(wid, role, self.now, ready)
            self.workers[wid] = w
            self.run.workers.append(w)
            self.at(ready, _READY, wid)
        self._action(role, n, cause)
        alive = sum(1 for w in self.workers.values() if w.state != "stopping")
        if alive > self.p.max_agents or len(self.live(role)) > (ceiling or self.p.max):
            self.run.cap_breaches += 1

    def retire(self, role: str, n: int, cause: str, chosen: Sequence[_Worker] = ()) -> None:
        """Stop ``n`` of the role's workers: the ``chosen`` ones, else idle ones
        (idle longest first), then starting ones (newest first), then busy ones
        once their task is done."""
        pool = self.live(role)
        if not chosen:
            idle = sorted(
                (w for w in pool if w.state == "idle"), key=lambda w: (w.idle_since or 0.0, w.id)
            )
            starting = sorted((w for w in pool if w.state == "starting"), key=lambda w: -w.id)
            busy = sorted((w for w in pool if w.state == "busy"), key=lambda w: w.id)
            chosen = (idle + starting + busy)[:n]
        for w in chosen:
            self._stop(w)
        if chosen:
            self._action(role, -len(chosen), cause)

    def scale_to(self, role: str, n: int, cause: str) -> None:
        have = len(self.live(role))
        if n > have:
            self.spawn(role, n - have, cause)
        elif n < have:
            self.retire(role, have - n, cause)

    def _stop(self, w: _Worker) -> None:
        if w.state == "busy":
            w.draining = True  # stops when its task is done
            return
        self._stopping(w)
        self._size()

    def _stopping(self, w: _Worker) -> None:
        w.state = "stopping"
        w.stop_at = self.now + self.p.stop
        self.at(w.stop_at, _GONE, w.id)

    def _action(self, role: str, delta: int, cause: str) -> None:
        self.run.actions.append(Action(self.now, role, delta, cause))
        self._size()

    def _size(self) -> None:
        n = len(self.live())
        if not self.run.sizes or self.run.sizes[-1][1] != n:
            self.run.sizes.append((self.now, n))

    def _ready(self, wid: int) -> None:
        w = self.workers.get(wid)
        if w is None or w.state != "starting":
            return
        if not registration_allowed(w.role, self.registered(), self.p.max_agents):
            w.refused = True
            self.run.refused += 1
            self._stop(w)
            self._action(w.role, -1, "registration refused")
            return
        self._become_idle(w)
        self._dispatch()

    def _become_idle(self, w: _Worker) -> None:
        w.state = "idle"
        w.idle_since = self.now
        self.at(self.now + self.p.idle_timeout, _IDLE, (w.id, self.now))

    def _finish(self, wid: int) -> None:
        task, _ = self.running.pop(wid)
        w = self.workers[wid]
        w.busy += task.duration
        self.done += 1
        self.last_finish = self.now
        if w.draining:
            w.draining = False
            self._stopping(w)
            return
        self._become_idle(w)
        self._dispatch()

    def _dispatch(self) -> None:
        """Idle workers claim, the one idle longest first, any task (a task of the
        worker's role with its bonus: corral's claim)."""
        if not self.waiting:
            return
        idle = sorted(
            (w for w in self.workers.values() if w.state == "idle" and not w.refused),
            key=lambda w: (w.idle_since or 0.0, w.id),
        )
        for w in idle:
            task = self._best(w.role)
            if task is None:
                break
            self.run.waits.setdefault(task.priority, []).append(self.now - task.arrival)
            w.state = "busy"
            w.idle_since = None
            self.running[w.id] = (task, self.now + task.duration)
            self.at(self.now + task.duration, _FINISH, w.id)


# ---- the policies -------------------------------------------------------------------


def _corral(sim: Sim) -> None:
    """corral's pools: the assessment and the pool decision at every look of the
    pools, and the worker's own retirement at ``idle_timeout``."""
    p = sim.p
    limits = PoolLimits(min=0, max=p.max, cooldown=p.cooldown, scale="auto")
    last_change: dict[str, float | None] = dict.fromkeys(sim.roles)
    last_direction = dict.fromkeys(sim.roles, 0)

    def look() -> None:
        now = sim.now
        busy = sum(1 for w in sim.workers.values() if w.state == "busy" and not w.refused)
        idle_nodes = sum(1 for w in sim.workers.values() if w.state == "idle" and not w.refused)
        counts = Counts(
            pending=sim.pending(),
            in_progress=len(sim.running),
            active_count=busy + idle_nodes,
            working=busy,
            idle=idle_nodes,
            max_agents=p.max_agents,
            architect_only=sim.pending("architect"),
        )
        _, recommendation = assess(counts)
        starting = sum(1 for w in sim.workers.values() if w.state == "starting")
        live = busy + idle_nodes + starting
        wake: float | None = None
        for role in sim.roles:
            members = sim.live(role)
            looks = [(None if w.state == "starting" else w.state, w.idle_since) for w in members]
            pending = counts.pending
            idle, expired = count_members(
                looks, p.idle_timeout, now, pending=pending, reserve=p.reserve
            )
            state = PoolState(
                len(members), idle, expired, 0, last_change[role], last_direction[role]
            )
            view = FleetView(recommendation, counts.pending, live, p.max_agents)
            d = pool_decide(role, limits, state, view, now)
            if d.action == "spawn":
                sim.spawn(role, d.change, d.reason)
                live += d.change
                last_change[role], last_direction[role] = now, 1
            elif d.action == "retire":
                due = retiring(looks, p.idle_timeout, now, pending=pending, reserve=p.reserve)
                chosen = [members[i] for i in due][: -d.change]
                sim.retire(role, len(chosen), d.reason, chosen)
                last_change[role], last_direction[role] = now, -1
            times = [d.retry_at] + [
                w.idle_since + p.idle_timeout
                for w in members
                if w.state == "idle" and w.idle_since is not None
            ]
            for t in times:
                if t is not None and t > now and (wake is None or t < wake):
                    wake = t
        if wake is not None:
            sim.look_soon(wake)

    def idle(w: _Worker) -> None:
        # the SDK worker: idle for idle_timeout with nothing to claim, it retires
        if idle_past_timeout(w.idle_since, p.idle_timeout, sim.now):
            sim.retire(w.role, 1, "worker idle past idle_timeout", [w])
            last_change[w.role] = sim.now  # the pools count a member's exit as a change
            last_direction[w.role] = -1

    sim.on_change = lambda: sim.look_soon(sim.now)
    sim.on_look = look
    sim.on_idle = idle
    sim.look_soon(0.0)


def _fixed(sim: Sim) -> None:
    for role in sim.roles:
        sim.spawn(role, sim.p.max, "fixed pool", warm=True)


def _keda(sim: Sim) -> None:
    """Every poll: desired = ceil(queue / target); up at once, down to the highest
    desired count of the last cooldown."""
    p = sim.p
    history: dict[str, list[tuple[float, int]]] = {r: [] for r in sim.roles}

    def poll(_: int) -> None:
        for role in sim.roles:
            queue = sim.pending(role) + len(sim.running_of(role))
            desired = min(p.max, math.ceil(queue / p.keda_target))
            h = history[role]
            h.append((sim.now, desired))
            while h and h[0][0] < sim.now - p.keda_cooldown:
                h.pop(0)
            sim.scale_to(role, max(d for _, d in h), "keda")

    sim.on_tick = poll
    sim.every(p.keda_poll, 0)


def _dbos(sim: Sim) -> None:
    """At every look: ceil(queue depth / worker concurrency), no cooldown."""
    p = sim.p

    def look() -> None:
        for role in sim.roles:
            depth = sim.pending(role) + len(sim.running_of(role))
            sim.scale_to(role, min(p.max, math.ceil(depth / p.dbos_concurrency)), "dbos")

    sim.on_change = lambda: sim.look_soon(sim.now)
    sim.on_look = look
    sim.look_soon(0.0)


def _dask(sim: Sim) -> None:
    """Every interval: target from the queued and running work; up at once; a worker
    suggested for removal wait_count checks in a row is removed."""
    p = sim.p
    counts: dict[int, int] = {}

    def check(_: int) -> None:
        for role in sim.roles:
            running = sim.running_of(role)
            waiting = sim.pending_tasks(role)
            work = sum(t.duration for t in waiting) + sum(end - sim.now for _, end in running)
            n_tasks = len(waiting) + len(running)
            target = min(p.max, n_tasks, math.ceil(work / p.dask_target_duration))
            pool = sim.live(role)
            if target > len(pool):
                for w in pool:
                    counts.pop(w.id, None)
                sim.spawn(role, target - len(pool), "dask")
                continue
            idle = sorted(
                (w for w in pool if w.state == "idle"), key=lambda w: (w.idle_since or 0.0, w.id)
            )
            starting = sorted((w for w in pool if w.state == "starting"), key=lambda w: -w.id)
            busy = [w for w in pool if w.state == "busy"]
            suggested = (idle + starting + busy)[: len(pool) - target]
            keep = {w.id for w in suggested}
            for w in pool:
                if w.id not in keep:
                    counts.pop(w.id, None)
            close = []
            for w in suggested:
                counts[w.id] = counts.get(w.id, 0) + 1
                if counts[w.id] >= p.dask_wait_count:
                    close.append(w)
                    counts.pop(w.id)
            if close:
                sim.retire(role, len(close), "dask", close)

    sim.on_tick = check
    sim.every(p.dask_interval, 0)


def manager_decision(
    pending_tasks: int,
    in_progress: int,
    active_count: int,
    active_agents: int,
    total_active: int,
    idle_agents: int,
    max_agents: int,
) -> tuple[str, str]:
    """The specification's workload decision, as written (``active_agents``: nodes
    working; corral's own, :func:`corral.assessment.decide`, also names the role)."""
    if pending_tasks == 0 and in_progress == 0:
        return "idle", "terminate_idle"
    elif pending_tasks >= 3 and active_count < max_agents:  # noqa: SIM114 (as written)
        return "overloaded", "spawn_developer"
    elif pending_tasks > 0 and active_agents == 0 and total_active < max_agents:
        return "overloaded", "spawn_developer"
    elif pending_tasks <= 1 and total_active > 1 and idle_agents > 0:
        return "underutilized", "terminate_idle"
    else:
        return "balanced", "maintain"


def _manager(sim: Sim) -> None:
    """The manager assesses every assess_interval and spawns one node per spawn
    recommendation (active count below max_agents); a worker idle idle_timeout with
    nothing pending and the status idle or underutilized terminates; the monitor
    terminates nodes idle past idle_timeout + grace_period."""
    p = sim.p
    status = ["idle"]
    role = "developer"  # the protocol recommends spawn_developer only

    def tick(tag: int) -> None:
        if tag == 0:  # the manager's assessment
            busy = sum(1 for w in sim.workers.values() if w.state == "busy" and not w.refused)
            active = sim.registered()
            idle = active - busy
            st, rec = manager_decision(
                sim.pending(), len(sim.running), active, busy, active, idle, p.max_agents
            )
            status[0] = st
            if rec.startswith("spawn_") and active < p.max_agents:
                sim.spawn(role, 1, rec, ceiling=p.max_agents)  # its only cap
        else:  # the monitor's cleanup
            limit = p.idle_timeout + p.grace_period
            for w in list(sim.workers.values()):
                if (
                    w.state == "idle"
                    and w.idle_since is not None
                    and sim.now - w.idle_since > limit
                ):
                    sim.retire(w.role, 1, "monitor: idle > limit", [w])

    def idle(w: _Worker) -> None:
        if sim.pending() == 0 and status[0] in ("idle", "underutilized"):
            sim.retire(w.role, 1, "worker idle past grace period", [w])

    sim.on_tick = tick
    sim.on_idle = idle
    sim.every(p.assess_interval, 0)
    sim.every(p.monitor_interval, 1)


# ---- the clairvoyant comparison point and the lower bound ---------------------------


def oracle_schedule(tasks: Sequence[TraceTask], params: Params, wait: float) -> Run:
    """The ``oracle`` row: a plan made knowing the whole trace, tasks first come first
    served. For each task by arrival: the worker freed most recently, if it was freed
    less than ``startup + stop`` seconds ago (keeping it idle costs less than stopping
    it and starting another); else the worker that will be free soonest, if that is
    within ``wait`` seconds of the arrival (waiting for it costs no worker-second);
    else a new worker spawned ``startup`` seconds before the arrival (at 0 at the
    earliest), within ``max_agents`` and the role's ``max``; else, the cap reached, the
    worker free soonest. A worker stops the moment its last task is done: each worker
    pays a start-up, a stop and the gaps between its tasks, and no more.

    Not a deployable policy (it reads durations and arrivals before they happen) and
    not held to the simulator's claim (an idle worker is not made to take a task the
    plan gives another): a comparison point, not a bound; :func:`idle_lower_bound` is
    the bound."""
    p = params
    run = Run("oracle", _cooldown("oracle", p))
    keep = p.startup + p.stop
    open_: dict[int, float] = {}  # worker -> when its last task so far is done
    workers: list[_Worker] = []
    events: list[tuple[float, int, str]] = []  # (t, +1 spawn / -1 stop, role)

    def close(wid: int) -> None:
        w = workers[wid]
        w.stop_at = open_.pop(wid)
        w.gone_at = w.stop_at + p.stop
        w.state = "stopping"
        run.actions.append(Action(w.stop_at, w.role, -1, "oracle: last task done"))
        events.append((w.stop_at, -1, w.role))

    for task in sorted(tasks, key=lambda t: (t.arrival, t.id)):
        a = task.arrival
        for wid in [w for w, f in open_.items() if f + keep <= a]:
            close(wid)
        idle = [w for w, f in open_.items() if f <= a]
        soonest = min(open_, key=lambda w: (open_[w], w), default=None)
        of_role = sum(1 for w in open_ if workers[w].role == task.role)
        if idle:
            wid = max(idle, key=lambda w: (open_[w], -w))
            start = a
        elif soonest is not None and open_[soonest] <= a + wait:
            wid, start = soonest, open_[soonest]
        elif len(open_) < p.max_agents and of_role < p.max:
            spawned = max(0.0, a - p.startup)
            wid = len(workers)
            workers.append(_Worker(wid, task.role, spawned, spawned + p.startup))
            run.actions.append(Action(spawned, task.role, 1, "oracle: spawn ahead of a task"))
            events.append((spawned, 1, task.role))
            start = max(a, spawned + p.startup)
        else:
            assert soonest is not None  # a full cap has workers
            wid, start = soonest, open_[soonest]
        workers[wid].busy += task.duration
        open_[wid] = start + task.duration
        run.waits.setdefault(task.priority, []).append(start - a)
    for wid in sorted(open_, key=lambda w: (open_[w], w)):
        close(wid)
    run.workers = workers
    run.actions.sort(key=lambda x: x.at)
    live = 0
    of: dict[str, int] = {}
    for t, step, role in sorted(events, key=lambda e: (e[0], e[1])):
        live += step
        of[role] = of.get(role, 0) + step
        if step > 0 and (live > p.max_agents or of[role] > p.max):
            run.cap_breaches += 1  # counted as the simulator counts them (never, by plan)
        if run.sizes and run.sizes[-1][0] == t:
            run.sizes[-1] = (t, live)
        else:
            run.sizes.append((t, live))
    last_finish = max((w.stop_at or 0.0) for w in workers)
    run.end = max(tasks[-1].arrival, last_finish) + p.drain
    return run


def idle_lower_bound(
    tasks: Sequence[TraceTask], wait: float, *, late: int, startup: float, stop: float
) -> float:
    """A lower bound on the idle worker-seconds of every schedule of ``tasks`` in which
    at most ``late`` tasks wait more than ``wait`` seconds (for the p95: ``late`` = n
    less ceil(0.95 n)), whatever its policy, its caps or its claim order; ``stop`` is
    what the last stretch of a worker costs at least (the stop, or the drain if
    shorter).

    Why it bounds. A worker that serves a chain of tasks pays ``startup`` before its
    first, ``stop`` after its last, and every gap between two of them: its idle time is
    at least ``c = startup + stop`` plus its gaps. A task j followed on its worker by a
    task i, both waiting at most ``wait``, ends no later than ``a_j + d_j + wait`` and i
    starts no earlier than ``a_i``, so the gap is at least ``max(0, a_i - (a_j + d_j +
    wait))``; and j can precede i at all only if ``a_j + d_j <= a_i + wait``. Any
    schedule is then a matching of tasks to successors (each at most one of each), of
    idle at least ``c`` times (tasks less links) plus those gaps, so the least such
    matching, a bipartite matching between the points ``a_j + d_j + wait`` and the
    points ``a_i`` whose cost depends only on their difference and is convex in it, is
    a lower bound; for such costs an order-preserving matching is optimal, found by a
    dynamic programme over the two sorted lists (only pairs less than ``c`` apart pay
    off). The matching also admits what no schedule can (a task its own successor, a
    cycle), which only lowers it. A late task may wait any time: dropping the late
    tasks from a schedule splits at most one link each, and adding them back to a
    matching as chains of their own costs ``c`` each, so the bound with late tasks is
    the bound with none less ``2 c late``."""
    c = startup + stop
    n = len(tasks)
    ends = sorted(t.arrival + t.duration + wait for t in tasks)
    arrivals = sorted(t.arrival for t in tasks)
    # best[q]: the least (negative) saving with the ends so far and the first q
    # arrivals; nonincreasing in q, so only the band of arrivals an end can link to
    # changes, and past the band the value is ``beyond``.
    best = [0.0] * (n + 1)
    filled, beyond, lo = 1, 0.0, 0
    for e in ends:
        # a microsecond's slack: a link that rounding would refuse is admitted (the
        # bound only gets lower, so stays a bound)
        while lo < n and arrivals[lo] < e - 2 * wait - 1e-6:
            lo += 1
        hi = lo
        while hi < n and arrivals[hi] < e + c:
            hi += 1
        if hi == lo:
            continue
        while filled <= hi:
            best[filled] = beyond
            filled += 1
        old_left = new_left = best[lo]
        for q in range(lo + 1, hi + 1):
            gap = max(0.0, arrivals[q - 1] - e)
            value = min(new_left, best[q], old_left + gap - c)
            old_left, best[q], new_left = best[q], value, value
        beyond = min(beyond, new_left)
    least = n * c + min(beyond, min(best[:filled]))
    return max(0.0, least - 2 * c * late)


def _oracle_wait(tasks: Sequence[TraceTask], p: Params, dbos: Run | None = None) -> float:
    """The oracle's wait budget: ``oracle_wait``, else DBOS's p95 wait on the trace."""
    if p.oracle_wait is not None:
        return p.oracle_wait
    run = dbos if dbos is not None else simulate(tasks, "dbos", p)
    return percentile([x for waits in run.waits.values() for x in waits], 95)


_SETUP: dict[str, Callable[[Sim], None]] = {
    "corral": _corral,
    "fixed": _fixed,
    "keda": _keda,
    "dbos": _dbos,
    "dask": _dask,
    "manager": _manager,
}


def _cooldown(policy: str, p: Params) -> float:
    """The window in which a policy's reversals are counted: its own cooldown."""
    return {
        "corral": p.cooldown,
        "fixed": p.cooldown,
        "keda": p.keda_cooldown,
        "dbos": p.cooldown,
        "dask": p.dask_interval * p.dask_wait_count,
        "manager": p.assess_interval,
        "oracle": p.cooldown,
    }[policy]


# ---- the numbers --------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Result:
    """A policy's numbers on a trace (seconds unless named otherwise)."""

    policy: str
    tasks: int
    unfinished: int
    horizon: float
    worker_seconds: float
    busy_worker_seconds: float
    idle_worker_seconds: float
    startup_worker_seconds: float
    wait: dict[str, dict[str, float]]  # priority (and "all") -> p50/p95/p99
    cap_breaches: int
    refused: int
    scale_actions: int
    reversals: int
    max_reversals_per_cooldown: int
    cooldown: float
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reversals(actions: Sequence[Action], window: float) -> tuple[int, int]:
    """(reversals, the most in any ``window`` seconds of one pool): a reversal is a
    change of a pool's size the other way from its previous change."""
    by_role: dict[str, list[Action]] = {}
    for a in actions:
        by_role.setdefault(a.role, []).append(a)
    total = worst = 0
    for acts in by_role.values():
        times = [b.at for a, b in itertools.pairwise(acts) if (a.delta > 0) != (b.delta > 0)]
        total += len(times)
        lo = 0
        for hi, t in enumerate(times):
            while times[lo] <= t - window:
                lo += 1
            worst = max(worst, hi - lo + 1)
    return total, worst


def result(run: Run, tasks: Sequence[TraceTask], horizon: float, p: Params) -> Result:
    """A run's numbers, every worker paid to ``horizon`` at the latest (a policy set
    up on a :class:`Sim` outside :data:`POLICIES`, as bench/traces/frontier.py does,
    is accounted as the table's are)."""
    paid = busy = starting = 0.0
    for w in run.workers:
        end = w.gone_at if w.gone_at is not None else horizon
        paid += end - w.spawned
        busy += w.busy
        starting += min(w.ready_at, end) - w.spawned
    everything = [x for waits in run.waits.values() for x in waits]
    wait = {}
    for name, values in [("all", everything)] + [(k, run.waits.get(k, [])) for k in PRIORITIES]:
        wait[name] = {f"p{q}": round(percentile(values, q), 3) for q in (50, 95, 99)}
    reversals, worst = _reversals(run.actions, run.cooldown)
    return Result(
        policy=run.policy,
        tasks=len(tasks),
        unfinished=run.unfinished,
        horizon=round(horizon, 3),
        worker_seconds=round(paid, 3),
        busy_worker_seconds=round(busy, 3),
        idle_worker_seconds=round(paid - busy, 3),
        startup_worker_seconds=round(starting, 3),
        wait=wait,
        cap_breaches=run.cap_breaches,
        refused=run.refused,
        scale_actions=len(run.actions),
        reversals=reversals,
        max_reversals_per_cooldown=worst,
        cooldown=run.cooldown,
        cost=round(paid / 60 * p.price, 4),
    )


def simulate(tasks: Sequence[TraceTask], policy: str, params: Params | None = None) -> Run:
    """One policy's run of ``tasks`` (sorted by arrival, as :func:`parse_trace` gives)."""
    p = params or Params()
    if policy not in POLICIES:
        raise InvalidInputError(
            f"unknown policy {policy!r}; one of {', '.join(POLICIES)}", field="policy"
        )
    if policy == "oracle":
        return oracle_schedule(tasks, p, _oracle_wait(tasks, p))
    run = Run(policy, _cooldown(policy, p))
    sim = Sim(tasks, p, run)
    _SETUP[policy](sim)
    sim.loop()
    return run


def simulate_all(
    tasks: Sequence[TraceTask], policies: Sequence[str] = POLICIES, params: Params | None = None
) -> tuple[dict[str, Result], dict[str, Run]]:
    """Every policy's run and numbers, all accounted to the same horizon."""
    p = params or Params()
    runs: dict[str, Run] = {}
    for name in policies:
        if name == "oracle":
            wait = _oracle_wait(tasks, p, runs.get("dbos"))
            runs[name] = oracle_schedule(tasks, p, wait)
        else:
            runs[name] = simulate(tasks, name, p)
    horizon = max(r.end for r in runs.values())
    return {name: result(run, tasks, horizon, p) for name, run in runs.items()}, runs


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the acceptance: what, the numbers, whether it holds; ``who`` says
    whose line it is: ``corral`` (the acceptance) or ``oracle`` / ``bound`` (notes on
    what any policy could reach, which no ``--check`` fails on)."""

    what: str
    detail: str
    ok: bool
    who: str = "corral"


def acceptance(results: dict[str, Result]) -> list[Check]:
    """corral against the peers: idle worker-seconds at least 50% below KEDA's and 30%
    below DBOS's at a p95 wait no worse than theirs, 0 cap breaches, at most one
    reversal per pool per cooldown (only the peers that ran)."""
    c = results.get("corral")
    if c is None:
        return []
    out = []
    for peer, cut in (("keda", 0.5), ("dbos", 0.3)):
        r = results.get(peer)
        if r is None:
            continue
        saved = 1 - c.idle_worker_seconds / r.idle_worker_seconds if r.idle_worker_seconds else 0.0
        said = f"{saved:.0%} fewer" if saved >= 0 else f"{-saved:.0%} more"
        out.append(Check(f"idle vs {peer}", f"{said} (needs {cut:.0%} fewer)", saved >= cut))
        mine, theirs = c.wait["all"]["p95"], r.wait["all"]["p95"]
        out.append(Check(f"p95 wait vs {peer}", f"{mine:.1f} s vs {theirs:.1f} s", mine <= theirs))
    out.append(Check("cap breaches", str(c.cap_breaches), c.cap_breaches == 0))
    out.append(
        Check(
            "reversals per cooldown",
            str(c.max_reversals_per_cooldown),
            c.max_reversals_per_cooldown <= 1,
        )
    )
    return out


def reach_checks(
    tasks: Sequence[TraceTask], results: dict[str, Result], params: Params | None = None
) -> list[Check]:
    """What any policy could reach against DBOS's formula on this trace: the oracle's
    idle worker-seconds and p95 wait against DBOS's (``ok``: 30% fewer at a p95 no
    worse), and :func:`idle_lower_bound` at DBOS's p95 (``ok``: the bound leaves 30%
    fewer possible). Empty without the dbos row."""
    p = params or Params()
    d = results.get("dbos")
    if d is None:
        return []
    out = []
    theirs = d.wait["all"]["p95"]
    o = results.get("oracle")
    if o is not None and d.idle_worker_seconds:
        saved = 1 - o.idle_worker_seconds / d.idle_worker_seconds
        said = f"{saved:.0%} fewer" if saved >= 0 else f"{-saved:.0%} more"
        mine = o.wait["all"]["p95"]
        ok = saved >= 0.3 and mine <= theirs
        out.append(
            Check(
                "idle vs dbos",
                f"{said} at a p95 wait of {mine:.1f} s vs {theirs:.1f} s: 30% fewer at no "
                f"worse a p95 is {'reached' if ok else 'not reached'} by a clairvoyant plan",
                ok,
                "oracle",
            )
        )
    n = len(tasks)
    late = n - math.ceil(0.95 * n)
    # results hold waits rounded to 1 ms: a p95 that rounds to DBOS's is below this
    bound = idle_lower_bound(
        tasks, theirs + 0.0005, late=late, startup=p.startup, stop=min(p.stop, p.drain)
    )
    if d.idle_worker_seconds:
        most = 1 - bound / d.idle_worker_seconds
        possible = most >= 0.3
        out.append(
            Check(
                f"at a p95 wait of {theirs:.1f} s",
                f"every policy spends at least {bound:,.0f} idle worker-s ({late} of {n} "
                f"tasks may wait longer), at most {most:.0%} fewer than dbos: 30% fewer is "
                f"{'not ruled out' if possible else 'ruled out'}",
                possible,
                "bound",
            )
        )
    return out


# ---- the plot -----------------------------------------------------------------------


def plot(title: str, tasks: Sequence[TraceTask], runs: dict[str, Run], path: str | Path) -> None:
    """A PNG of the trace's arrivals and every policy's pool size over time.
    Needs matplotlib (the extra ``corral[sim]``): ImportError without it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    end = max(r.end for r in runs.values())
    fig, axes = plt.subplots(
        len(runs) + 1, 1, figsize=(11, 1.6 * (len(runs) + 1) + 0.6), sharex=True, squeeze=False
    )
    top = axes[0][0]
    bucket = max(60.0, end / 200)
    bins = [i * bucket / 60 for i in range(int(end // bucket) + 2)]
    top.hist([t.arrival / 60 for t in tasks], bins=bins, color="0.45")
    top.set_ylabel(f"arrivals\n/ {bucket / 60:g} min")
    top.set_title(title)
    ceiling = max((n for r in runs.values() for _, n in r.sizes), default=1)
    for row, (name, run) in zip(axes[1:], runs.items(), strict=True):
        ax = row[0]
        xs = [t / 60 for t, _ in run.sizes] + [run.end / 60]
        ys = [n for _, n in run.sizes] + [run.sizes[-1][1] if run.sizes else 0]
        ax.step(xs, ys, where="post", linewidth=0.9)
        ax.set_ylim(0, ceiling + 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"{name}\nworkers")
    axes[-1][0].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
