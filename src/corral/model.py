"""corral's data: plain frozen records, no I/O."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral import defaults, render

__all__ = [
    "Assessment",
    "CatchUp",
    "Event",
    "Node",
    "Process",
    "Registered",
    "Settings",
    "State",
    "Task",
    "TaskBatch",
    "UsageTotals",
    "last_seen",
]


def last_seen(last_activity: float, last_heartbeat: float | None, registered_at: float) -> float:
    """A node's last sign of life: its latest heartbeat, call or registration (the
    one place this is computed: ``Node.last_seen``, the stores and the statistics)."""
    return max(last_activity, last_heartbeat or 0.0, registered_at)


def unfrozen_twin(cls: type) -> type | None:
    """A class with the slots of record class ``cls`` and no ``__setattr__`` of its
    own; None when ``cls`` is not a plain slotted dataclass (no base class, its slots
    its fields in order, every field in ``__init__``, no ``__post_init__``).

    A frozen dataclass's ``__init__`` sets each field through a call: most of a
    record's cost where one is built per row or per answer. An instance of the twin
    takes plain attribute stores (one bytecode each); once every field is set, it is
    given ``cls`` as its class (CPython allows it between classes of the same slots)
    and is then a ``cls`` in every way, frozen from then on (tests/unit/test_rows.py,
    tests/unit/test_remote_build.py)."""
    fs = dataclasses.fields(cls)
    slots = tuple(getattr(cls, "__slots__", ()))
    if (
        cls.__bases__ != (object,)
        or slots != tuple(f.name for f in fs)
        or not all(f.init for f in fs)
        or hasattr(cls, "__post_init__")
    ):
        return None
    return type(f"_{cls.__name__}Building", (), {"__slots__": slots})


_READERS: dict[type, tuple[tuple[str, ...], Callable[[Any], Any]]] = {}


def _one(get: Callable[[Any], Any]) -> Callable[[Any], tuple[Any]]:
    return lambda obj: (get(obj),)


def _as_dict(obj: Any) -> dict[str, Any]:
    """A record's fields by name, shallow. Its class's field names and a getter of
    them all are made once (``dataclasses.fields`` builds its tuple on every call)."""
    cls = type(obj)
    reader = _READERS.get(cls)
    if reader is None:
        names = tuple(f.name for f in dataclasses.fields(obj))
        getter: Callable[[Any], Any] = operator.attrgetter(*names)
        if len(names) == 1:  # attrgetter of one name gives the value, not a tuple
            getter = _one(getter)
        reader = _READERS[cls] = (names, getter)
    names, read = reader
    return dict(zip(names, read(obj), strict=True))


@dataclass(frozen=True, slots=True)
class Node:
    """A registered participant (one incarnation of a node id)."""

    id: str
    role: str
    status: str
    model: str | None = None
    strength: str | None = None
    current_task_id: int | None = None
    idle_since: float | None = None
    last_activity: float = 0.0
    last_heartbeat: float | None = None
    heartbeat_interval: float | None = None
    health: str | None = None
    heartbeat: dict[str, Any] = field(default_factory=dict)
    host: str | None = None
    pid: int | None = None
    registered_at: float = 0.0
    terminated_at: float | None = None
    dead_at: float | None = None
    incarnation: int = 0
    cursor: int = 0
    # A heartbeat's answer only: of the tasks the beat named as current, those the node
    # no longer holds and did not finish (the operator cancelled or requeued them, the
    # monitor took them back: stuck, timed out); the worker stops their processes.
    cancelled_tasks: list[int] = field(default_factory=list)

    @property
    def last_seen(self) -> float:
        return last_seen(self.last_activity, self.last_heartbeat, self.registered_at)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class Process:
    """A supervised process as its host's supervisor last reported it
    (``report_processes``): one row per (host, agent)."""

    host: str
    agent: str
    state: str  # STOPPED, STARTING, RUNNING, UNHEALTHY or WAITING
    pid: int | None = None
    restarts: int = 0
    started_at: float | None = None
    last_beat: float | None = None
    flags: list[str] = field(default_factory=list)
    last_exit: dict[str, Any] | None = None
    reported_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["flags"] = list(self.flags)
        return d


@dataclass(frozen=True, slots=True)
class Registered(Node):
    """The node as registered, with the capacity seen in the same transaction."""

    active_nodes: int = 0
    max_agents: int = 0

    @property
    def text(self) -> str:
        return render.registered_text(self)


@dataclass(frozen=True, slots=True)
class Settings:
    """The cluster's settings, declared once: each field's name, type and default.

    Stored in the cluster itself, so every process agrees. ``config.check_changes``
    validates changes by these fields, and the HTTP API's request and answer models
    are built from them (``corral.server.models.settings_model``)."""

    # The fleet: capacity, idle retirement, the manager's and the assessment's pace
    max_agents: int = 4
    idle_timeout_seconds: float = 30.0
    manager_heartbeat_interval: float = 20.0
    workload_assessment_interval: float = 25.0
    grace_period_seconds: float = 30.0
    # Liveness: the heartbeat window, the longest silence, heartbeat delivery retries
    heartbeat_interval: float = 300.0
    stale_threshold: float = 600.0
    detection_interval: float = 60.0
    retry_attempts: int = 3
    retry_delay: float = 5.0
    # corral's own
    missed_beats: int = 3
    max_attempts: int = 3
    role_keywords: dict[str, list[str]] = field(
        default_factory=lambda: {k: list(v) for k, v in defaults.DEFAULT_ROLE_KEYWORDS.items()}
    )
    model_strengths: list[list[str]] = field(
        default_factory=lambda: [list(p) for p in defaults.MODEL_STRENGTHS]
    )
    project_summary: str = ""
    event_retention_seconds: float = 7 * 24 * 3600.0
    # Workflow runs: release a run idle this long (a host may set its own per
    # workflow), and keep at most this many idle runs resident on a host
    idle_release_after: float = 60.0
    max_resident_idle: int = 10_000
    # The activation scheduler: an activation lease's longest life (it also ends
    # with its runner's node), and the least time between two discovery activations
    # of an agent (0: off; an agent's config may set its own)
    activation_ttl: float = 900.0
    min_activation_interval: float = 0.0
    # Alerts (corral.alerts): the webhooks each alert is POSTed to (none: alerts are
    # events only), their retries, one alert per subject per rate limit window, a
    # crash loop's restarts and window, and how long a spawn request may stay pending
    alert_webhooks: list[str] = field(default_factory=list)
    alert_retry_attempts: int = 3
    alert_retry_delay: float = 5.0
    alert_rate_limit_seconds: float = 300.0
    alert_crash_loop_restarts: int = 5
    alert_crash_loop_window: float = 600.0
    alert_spawn_pending_seconds: float = 900.0
    # Stuck tasks (docs/guardrails.md): a task in progress without a progress report
    # for this many seconds is stuck (0: off; a task may set its own on add_task), and
    # what then happens to it (defaults.STUCK_ACTIONS: flag, requeue or fail)
    progress_timeout: float = 0.0
    stuck_action: defaults.StuckAction = "flag"
    # Budgets and per-model caps (docs/guardrails.md, corral.budgets): each budget
    # {scope, window, tokens, cost_usd, hard}; a model's most live nodes
    budgets: list[dict[str, Any]] = field(default_factory=list)
    model_caps: dict[str, int] = field(default_factory=dict)

    @property
    def roles(self) -> tuple[str, ...]:
        """Every role a node may register as or claim for."""
        return (defaults.MANAGER_ROLE, defaults.RUNNER_ROLE, *sorted(self.role_keywords))

    @property
    def idle_limit(self) -> float:
        """Seconds idle after which the monitor retires a node (60 s by default)."""
        return self.idle_timeout_seconds + self.grace_period_seconds

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


_DEFAULTS = Settings()


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    title: str
    priority: str
    status: str
    description: str = ""
    role: str | None = None
    roles: tuple[str, ...] = ()
    assigned_to: str | None = None
    epoch: int = 0
    attempts: int = 0
    max_attempts: int = _DEFAULTS.max_attempts
    created_at: float = 0.0
    claimed_at: float | None = None
    updated_at: float = 0.0
    finished_at: float | None = None
    result: Any = None
    error: str | None = None
    # The agent session a worker runs the task in: fixed by the first claim, the same
    # for every attempt (docs/guardrails.md, "Sessions").
    session_id: str | None = None
    # The task's own limit without progress (None: the cluster's progress_timeout).
    progress_timeout: float | None = None
    # The attempt in progress: its last progress report (time and note), and since
    # when it is stuck (None for a task not in progress).
    progress_at: float | None = None
    progress_note: str | None = None
    stuck_since: float | None = None
    # Time and order (docs/core.md, "Tasks with time and order"): a run's limit in
    # seconds from its claim, the backoff of a failed attempt's retry (doubling per
    # attempt), the time before which it is not claimable, the tasks it waits on, and
    # when a scheduled task becomes pending (its not_before or its backoff's end).
    timeout: float | None = None
    retry_backoff: float | None = None
    not_before: float | None = None
    depends_on: tuple[int, ...] = ()
    ready_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["roles"] = list(self.roles)
        d["depends_on"] = list(self.depends_on)
        return d


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """A scope's usage sums over a window (``usage``): tokens in and out, cost in US
    dollars and how many reports, from ``start`` to ``end`` (seconds since the epoch:
    the window holding now, which rolls over at ``end``)."""

    scope: str
    window: str
    start: float
    end: float
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reports: int = 0

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)

    @property
    def text(self) -> str:
        """One line: ``Usage of cluster (1d): 1200 in, 300 out tokens, $0.42, 5 reports``."""
        return (
            f"Usage of {self.scope} ({self.window}): {self.input_tokens} in,"
            f" {self.output_tokens} out tokens, ${self.cost_usd:g}, {self.reports} reports"
        )


@dataclass(frozen=True, slots=True)
class TaskBatch:
    """What a bulk action on tasks (``cancel_tasks``, ``requeue_tasks``) matched:
    ``count`` tasks, the first ``defaults.MAX_BATCH_IDS`` of their ``task_ids`` (by id), and
    whether it was a ``dry_run`` (nothing changed) or the action itself."""

    count: int
    task_ids: list[int] = field(default_factory=list)
    dry_run: bool = True

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)

    @property
    def text(self) -> str:
        """One line: ``2 tasks would change (dry run): 4, 7`` or ``2 tasks changed: 4, 7``."""
        ids = ", ".join(str(i) for i in self.task_ids)
        more = ", …" if self.count > len(self.task_ids) else ""
        what = "task" if self.count == 1 else "tasks"
        done = "would change (dry run)" if self.dry_run else "changed"
        return f"{self.count} {what} {done}" + (f": {ids}{more}" if ids else "")


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    ts: float
    kind: str
    node_id: str | None = None
    task_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class CatchUp:
    """Events since a cursor, and the cursor to pass next time."""

    events: list[Event]
    cursor: int

    def to_dict(self) -> dict[str, Any]:
        return {"events": [e.to_dict() for e in self.events], "cursor": self.cursor}


@dataclass(frozen=True, slots=True)
class Assessment:
    status: str
    recommendation: str
    max_agents: int
    active_count: int
    idle_count: int
    working_count: int
    pending_tasks: int
    in_progress: int
    architect_only_pending: int = 0
    manager_id: str | None = None
    assessed_at: float = 0.0

    @property
    def text(self) -> str:
        return render.render_assessment(self)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class State:
    """What ``read_state`` shows: the board, the swarm, metadata and distribution."""

    now: float
    summary: str
    tasks: list[Task]
    tasks_omitted: int
    nodes: list[Node]
    max_agents: int
    pending_tasks: int
    in_progress: int
    metadata: dict[str, Any]
    work_distribution: dict[str, Any]
    last_event_ts: float | None
    last_heartbeat: float | None
    liveness_window: float = 0.0
    processes: list[Process] = field(default_factory=list)  # every host's, by host
    # Live nodes whose every task in progress is stuck (heartbeating, no progress).
    stuck_nodes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return render.render_state(self)

    def to_dict(self) -> dict[str, Any]:
        d = _as_dict(self)
        d["tasks"] = [t.to_dict() for t in self.tasks]
        d["nodes"] = [n.to_dict() for n in self.nodes]
        d["processes"] = [p.to_dict() for p in self.processes]
        return d
