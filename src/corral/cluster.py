"""The cluster service: one method per operation, each one store transaction.

Every interface (Python, CLI, HTTP, MCP) calls these methods; none holds logic of
its own. Arguments are validated here, at the edge of the core, so a bad call raises
``InvalidInputError`` and writes nothing: each parameter's type carries its rule
(``corral.params``), which ``@checked`` runs before the method's body; the body checks
only what depends on the cluster (a role among the settings' roles) or on several
fields together (a heartbeat's payload, a batch's items).
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any, Self

from corral import budgets, defaults
from corral.clock import Clock, ServerClock, SystemClock
from corral.errors import ConflictError, InvalidInputError
from corral.health import health_status
from corral.model import (
    Assessment,
    CatchUp,
    Event,
    Node,
    Process,
    Registered,
    Settings,
    State,
    Task,
    TaskBatch,
    UsageTotals,
)
from corral.params import (
    DESCRIPTION,
    PRIORITY,
    TASK_IDS,
    TASK_TIME,
    TITLE,
    ActorName,
    Epoch,
    Flag,
    HostName,
    JsonObject,
    JsonValue,
    Limit,
    Message,
    ModelName,
    NodeId,
    NodeStatusName,
    PositiveInt,
    PriorityName,
    ProcessActionName,
    Reason,
    RoleName,
    Seconds,
    Seq,
    StrengthName,
    TaskAge,
    TaskCancelStatus,
    TaskIds,
    TaskRef,
    TaskRequeueStatus,
    TaskStatusName,
    TaskTime,
    Text,
    Title,
    Usage,
    UsageScope,
    UsageWindow,
    Wait,
)
from corral.scheduler.ops import SchedulerOps
from corral.spawning import SpawnRequestsMixin
from corral.store import NodeSpec, Store, TaskMatch, TaskSpec
from corral.tokens import TokenOperations
from corral.validation import (
    MAX_INT,
    POSITIVE,
    POSITIVE_INT,
    check_choice,
    check_id,
    check_payload,
    check_task_id,
    check_usage,
    checked,
)
from corral.workflows.service import WorkflowOperations

if TYPE_CHECKING:
    from corral.store.stats import ClusterStats

__all__ = ["Cluster"]

OPERATOR = "operator"  # the actor of an action no caller names (the embedded client)


def _actor(actor: str | None) -> str:
    """Who an operator action records as its actor: the one given (the server gives
    the caller's name), else ``operator``."""
    return OPERATOR if actor is None else actor


_HEARTBEAT_FIELDS = ("health_status", "current_tasks", "capacity_available", "metrics")
_PROCESS_KEYS = frozenset(
    {"agent", "state", "pid", "restarts", "started_at", "last_beat", "flags", "last_exit"}
)


def _process_item(item: Any, i: int) -> Process:
    """One item of a ``report_processes`` list, checked; errors name ``processes``
    and say which item and key."""
    where = f"processes[{i}]"

    def bad(msg: str) -> InvalidInputError:
        return InvalidInputError(f"{where}{msg}", field="processes")

    if not isinstance(item, dict):
        raise bad(" must be an object")
    unknown = set(item) - _PROCESS_KEYS
    if unknown:
        raise bad(f" has unknown keys {sorted(unknown)}")
    for key in ("agent", "state"):
        if key not in item:
            raise bad(f" has no {key}")
    try:
        agent = check_id(item["agent"], "agent")
        state = check_choice(item["state"], defaults.PROCESS_STATES, "state")
    except InvalidInputError as e:
        raise bad(f".{e.field}: {e}") from None
    pid = item.get("pid")
    if pid is not None and (
        isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_INT
    ):
        raise bad(".pid must be a positive integer or null")
    restarts = item.get("restarts", 0)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= MAX_INT:
        raise bad(".restarts must be a non-negative integer")
    times = {}
    for key in ("started_at", "last_beat"):
        v = item.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e12
        ):
            raise bad(f".{key} must be a unix time or null")
        times[key] = None if v is None else float(v)
    flags = item.get("flags", [])
    if (
        not isinstance(flags, list)
        or len(flags) > 32
        or not all(isinstance(f, str) and 0 < len(f) <= 64 for f in flags)
    ):
        raise bad(".flags must be a list of at most 32 short strings")
    last_exit = item.get("last_exit")
    if last_exit is not None:
        if not isinstance(last_exit, dict):
            raise bad(".last_exit must be an object or null")
        try:
            check_payload(last_exit, "last_exit")
        except InvalidInputError as e:
            raise bad(f".last_exit: {e}") from None
    return Process(
        host="",
        agent=agent,
        state=state,
        pid=pid,
        restarts=restarts,
        started_at=times["started_at"],
        last_beat=times["last_beat"],
        flags=list(flags),
        last_exit=last_exit,
    )


class Cluster(WorkflowOperations, SchedulerOps, SpawnRequestsMixin, TokenOperations):
    """The embedded client: ``corral.connect("sqlite:///…")`` returns one."""

    def __init__(self, store: Store, *, clock: Clock | None = None, url: str | None = None) -> None:
        self.store = store
        # On a store that several hosts share, time is the database server's, so
        # that every host agrees on deadlines whatever its own wall clock says.
        server_time = getattr(store, "server_time", None)
        if clock is None:
            clock = SystemClock() if server_time is None else ServerClock(server_time)
        self.clock: Clock = clock
        self.url = url

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    # --- validation helpers -------------------------------------------------------
    def _role(self, role: Any, field: str = "role") -> str:
        return check_choice(role, self.store.settings().roles, field)

    # --- settings -----------------------------------------------------------------
    def settings(self) -> Settings:
        """The cluster's settings, as every process sees them."""
        return self.store.settings()

    @checked
    def configure(self, *, actor: ActorName | None = None, **changes: Any) -> Settings:
        """Change cluster settings (validated; unknown keys are refused).

        A ``settings_changed`` event names the changes and the ``actor`` (``operator``
        when not given; the server names the caller)."""
        return self.store.update_settings(changes, self.clock.now(), actor=_actor(actor))

    # --- nodes --------------------------------------------------------------------
    @checked
    def register_node(
        self,
        node_id: NodeId,
        role: str,
        model: ModelName | None = None,
        strength: StrengthName | None = None,
        heartbeat_interval: Seconds | None = None,
        *,
        host: HostName | None = None,
        pid: PositiveInt | None = None,
    ) -> Registered:
        """Register a node in a role; refused with ``CapacityError`` at ``max_agents``
        (a ``bootstrap_manager`` is always admitted). The result's ``.text`` is the
        one-line answer of the ``register_node`` tool.

        ``pid`` is recorded only when given: a node's own process passes
        ``os.getpid()`` (``corral.Worker`` does); a process registering on behalf of a
        node (``corral node register``, the server, the MCP tools) names none."""
        spec = NodeSpec(
            id=node_id,
            role=self._role(role),
            model=model,
            strength=strength,
            heartbeat_interval=heartbeat_interval,
            host=socket.gethostname() if host is None else host,
            pid=pid,
        )
        return self.store.register_node(spec, self.clock.now())

    @checked
    def get_node(self, node_id: NodeId) -> Node:
        """One node (its newest incarnation); ``NotFoundError`` when unknown."""
        return self.store.get_node(node_id)

    @checked
    def list_nodes(
        self, status: NodeStatusName | None = None, role: str | None = None
    ) -> list[Node]:
        """Nodes (the newest incarnation of each), filtered by status and role."""
        if role is not None:
            self._role(role)
        return self.store.list_nodes(status=status, role=role)

    @checked
    def set_agent_status(
        self, node_id: NodeId, status: NodeStatusName, current_task_id: TaskRef | None = None
    ) -> Node:
        """Set a node's status (working, idle, waiting or terminated); ``idle_since``
        tracks idle spells, and terminated is final. A node that holds a task cannot
        be idle, and an idle node names no current task (``ConflictError``, naming the
        task and what to do)."""
        task_id = None if current_task_id is None else int(current_task_id)
        if status == "idle" and task_id is not None:
            raise ConflictError(
                "an idle node works on no task: leave current_task_id out, or say working"
                " or waiting",
                field="current_task_id",
            )
        return self.store.set_status(node_id, status, task_id, self.clock.now())

    @checked
    def terminate_node(self, node_id: NodeId, *, actor: ActorName | None = None) -> Node:
        """Mark a node terminated (its leases go back to the queue). Its ``node_status``
        event names ``actor`` when known: over the server, the caller (``node:ID`` for
        a node ending itself, the operator's token otherwise)."""
        return self.store.set_status(node_id, "terminated", None, self.clock.now(), actor=actor)

    @checked
    def heartbeat(self, node_id: NodeId, **payload: Any) -> Node:
        """Record a node's proof of life (health, current tasks, capacity, metrics and
        free-form fields); renews its leases. Health is derived from ``metrics`` when
        not given. ``usage`` (``{input_tokens, output_tokens, cost_usd}``, deltas) is
        added to the node's usage sums (docs/guardrails.md)."""
        check_payload(payload, "heartbeat")
        usage = payload.pop("usage", None)
        if usage is not None:
            usage = check_usage(usage, "usage")
        health = payload.get("health_status")
        if health is not None:
            check_choice(health, defaults.HEALTH_STATUSES, "health_status")
        tasks = payload.get("current_tasks")
        if tasks is not None:
            if not isinstance(tasks, list):
                raise InvalidInputError(
                    "current_tasks must be a list of task ids", field="current_tasks"
                )
            for t in tasks:
                check_task_id(t, "current_tasks")
        cap = payload.get("capacity_available")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise InvalidInputError(
                "capacity_available must be a non-negative integer", field="capacity_available"
            )
        metrics = payload.get("metrics")
        if metrics is not None:
            if not isinstance(metrics, dict):
                raise InvalidInputError("metrics must be an object", field="metrics")
            for key in ("cpu_usage", "memory_usage"):
                value = metrics.get(key)
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int | float)
                ):
                    raise InvalidInputError(
                        f"metrics.{key} must be a number", field=f"metrics.{key}"
                    )
            if health is None:
                health = health_status(metrics)
        if usage is None:
            return self.store.heartbeat(node_id, payload, health, self.clock.now())
        node = self.store.heartbeat(node_id, payload, health, self.clock.now(), usage=usage)
        self.store.stop_hard(node_id, self.clock.now())
        return node

    @checked
    def touch(self, node_id: NodeId) -> bool:
        """Count a call by ``node_id`` as its heartbeat: stamp its last heartbeat and
        push its death deadline out, keeping its heartbeat payload.

        The MCP tools do this for every call that names an agent. False when the node
        is unknown or terminated."""
        return self.store.touch(node_id, self.clock.now())

    # --- tasks --------------------------------------------------------------------
    def _task_spec(
        self,
        title: Any,
        description: Any = "",
        priority: Any = "medium",
        role: Any = None,
        max_attempts: Any = None,
        *,
        progress_timeout: Any = None,
        timeout: Any = None,
        not_before: Any = None,
        depends_on: Any = None,
        retry_backoff: Any = None,
        roles: tuple[str, ...] | None = None,
    ) -> TaskSpec:
        """A validated task; ``roles`` are the known roles when the caller already
        read them (a batch reads the settings once)."""
        if role is not None:
            role = check_choice(role, roles or self.store.settings().roles, "role")
        return TaskSpec(
            title=TITLE.check(title, "title").strip(),
            description=DESCRIPTION.check(description, "description"),
            priority=PRIORITY.check(priority, "priority"),
            role=role,
            max_attempts=None
            if max_attempts is None
            else POSITIVE_INT.check(max_attempts, "max_attempts"),
            progress_timeout=None
            if progress_timeout is None
            else float(POSITIVE.check(progress_timeout, "progress_timeout")),
            timeout=None if timeout is None else float(POSITIVE.check(timeout, "timeout")),
            not_before=None if not_before is None else TASK_TIME.check(not_before, "not_before"),
            depends_on=()
            if depends_on is None
            else tuple(TASK_IDS.check(depends_on, "depends_on")),
            retry_backoff=None
            if retry_backoff is None
            else float(POSITIVE.check(retry_backoff, "retry_backoff")),
        )

    @checked
    def add_task(
        self,
        title: Title,
        description: Text = "",
        priority: PriorityName = "medium",
        role: str | None = None,
        *,
        max_attempts: PositiveInt | None = None,
        progress_timeout: Seconds | None = None,
        timeout: Seconds | None = None,
        not_before: TaskTime | None = None,
        depends_on: TaskIds | None = None,
        retry_backoff: Seconds | None = None,
    ) -> Task:
        """Put a task on the board.

        Its role matches are fixed now: keywords in the title and description, plus
        ``role``. ``progress_timeout``: seconds without a progress report after which
        the task in progress is stuck (else the cluster's ``progress_timeout``).

        Time and order (docs/core.md, "Tasks with time and order"): ``timeout``
        (seconds): a run longer than that from its claim is taken back by the monitor
        (pending again while attempts remain, else failed) and its worker stops it;
        ``not_before`` (a time, seconds since the epoch): not claimable before it;
        ``depends_on`` (task ids): claimable only once every one of them is done, and
        failed (or cancelled) with them if one fails (or is cancelled) for good; an
        unknown id is refused; ``retry_backoff`` (seconds): a failed attempt is
        claimable again only after ``retry_backoff * 2**(attempt-1)`` seconds (at
        most ``RETRY_BACKOFF_CAP``). A task not ready yet is ``scheduled`` or
        ``blocked``, outside the claim's indexes."""
        spec = self._task_spec(
            title,
            description,
            priority,
            role,
            max_attempts,
            progress_timeout=progress_timeout,
            timeout=timeout,
            not_before=not_before,
            depends_on=depends_on,
            retry_backoff=retry_backoff,
        )
        return self.store.add_task(spec, self.clock.now())

    def add_tasks(self, tasks: list[dict[str, Any]]) -> list[Task]:
        """Add many tasks in one transaction: each item has ``add_task``'s arguments.
        One bad item refuses the whole batch."""
        if not isinstance(tasks, list) or len(tasks) > 100_000:
            raise InvalidInputError("tasks must be a list of at most 100000 items", field="tasks")
        specs = []
        roles = (
            self.store.settings().roles
            if any(isinstance(item, dict) and item.get("role") is not None for item in tasks)
            else None
        )
        for i, item in enumerate(tasks):
            if not isinstance(item, dict):
                raise InvalidInputError(f"tasks[{i}] must be an object", field="tasks")
            unknown = set(item) - {
                "title",
                "description",
                "priority",
                "role",
                "max_attempts",
                "progress_timeout",
                "timeout",
                "not_before",
                "depends_on",
                "retry_backoff",
            }
            if unknown:
                raise InvalidInputError(
                    f"tasks[{i}] has unknown keys {sorted(unknown)}", field="tasks"
                )
            if "title" not in item:
                raise InvalidInputError(f"tasks[{i}] has no title", field="tasks")
            specs.append(self._task_spec(**item, roles=roles))
        return self.store.add_tasks(specs, self.clock.now())

    @checked
    def get_task(self, task_id: TaskRef) -> Task:
        """One task (``3`` or ``task-3``); ``NotFoundError`` when unknown."""
        return self.store.get_task(int(task_id))

    @checked
    def list_tasks(
        self,
        status: TaskStatusName | None = None,
        assigned_to: NodeId | None = None,
        limit: Limit = 100,
    ) -> list[Task]:
        """Tasks, filtered by status and holder (at most ``limit``)."""
        return self.store.list_tasks(status=status, assigned_to=assigned_to, limit=limit)

    @checked
    def claim_best_task(self, node_id: NodeId, role: NodeId, *, wait: Wait = 0) -> Task | None:
        """Claim the best pending task for a role (priority, role match, age).

        None when nothing is pending. The task carries its lease ``epoch``.

        ``wait`` (seconds, at most ``MAX_CLAIM_WAIT``): when nothing is pending, block
        until a task is added (woken by the store, no polling) or the time is up."""
        if not wait:
            return self.store.claim(node_id, role, self.clock.now())
        deadline = time.monotonic() + wait
        while True:
            token = self.store.ready_token()
            task = self.store.claim(node_id, role, self.clock.now())
            left = deadline - time.monotonic()
            if task is not None or left <= 0:
                return task
            self.store.wait_ready(token, left)

    @checked
    def complete_task(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        result: JsonValue = None,
        usage: Usage | None = None,
    ) -> Task:
        """Finish a held task; ``LeaseError`` if the lease was lost or ``epoch`` is stale.

        ``usage`` (``{input_tokens, output_tokens, cost_usd}``, deltas) is added to the
        usage sums in the completion's transaction (docs/guardrails.md)."""
        if usage is None:
            return self.store.complete(int(task_id), node_id, epoch, result, self.clock.now())
        done = self.store.complete(
            int(task_id), node_id, epoch, result, self.clock.now(), usage=usage
        )
        self.store.stop_hard(node_id, self.clock.now())
        return done

    @checked
    def complete_and_claim(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        role: NodeId,
        epoch: Epoch | None = None,
        result: JsonValue = None,
        usage: Usage | None = None,
    ) -> tuple[Task, Task | None]:
        """Finish a held task and claim the next one for ``role``.

        The same checks and events as ``complete_task`` then ``claim_best_task``, in
        one transaction where the backend allows (a worker's loop: one commit per task
        instead of two). A node covered by a spent budget claims nothing (its next
        ``claim_best_task`` is refused with ``BudgetError``)."""
        if usage is None:
            return self.store.complete_and_claim(
                int(task_id), node_id, epoch, result, role, self.clock.now()
            )
        done = self.store.complete_and_claim(
            int(task_id), node_id, epoch, result, role, self.clock.now(), usage=usage
        )
        self.store.stop_hard(node_id, self.clock.now())
        return done

    @checked
    def fail_task(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        error: Text = "",
        retry: bool = True,
        usage: Usage | None = None,
    ) -> Task:
        """Give a held task up: back to pending while attempts remain (and ``retry``).
        ``usage`` (deltas) is added to the usage sums in the same transaction."""
        now = self.clock.now()
        if usage is None:
            return self.store.fail(int(task_id), node_id, epoch, error, bool(retry), now)
        task = self.store.fail(int(task_id), node_id, epoch, error, bool(retry), now, usage=usage)
        self.store.stop_hard(node_id, self.clock.now())
        return task

    @checked
    def report_progress(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        note: Reason | None = None,
        usage: Usage | None = None,
    ) -> Task:
        """Report progress on a held task: its stuck deadline moves on; ``usage``
        (deltas) is added to the usage sums in the same transaction.

        A task in progress with no progress report for its ``progress_timeout`` (its
        own, else the cluster's) is stuck, and the cluster's ``stuck_action`` applies
        (docs/guardrails.md). A report on a task flagged stuck clears the flag (a
        ``task_unstuck`` event). ``note`` (optional) is kept as the task's
        ``progress_note``. Refused as a completion is: ``LeaseError`` if the lease
        was lost or ``epoch`` is stale (the refusal names the epochs),
        ``TaskCancelledError`` if the operator cancelled it."""
        if usage is None:
            return self.store.report_progress(int(task_id), node_id, epoch, note, self.clock.now())
        task = self.store.report_progress(
            int(task_id), node_id, epoch, note, self.clock.now(), usage=usage
        )
        self.store.stop_hard(node_id, self.clock.now())
        return task

    # --- usage and spend (docs/guardrails.md) -------------------------------------------
    @checked
    def usage(self, scope: UsageScope = "cluster", window: UsageWindow = "1d") -> UsageTotals:
        """Usage sums (tokens in and out, cost) of a scope in the window holding now.

        ``scope``: ``cluster``, ``role:R``, ``model:M``, ``pool:P``, ``node:N`` or
        ``task:T``; ``window``: ``1h``, ``5h``, ``1d`` or ``7d``, fixed windows aligned
        to UTC that roll over at their ``end``. The sums are of the usage reported
        with ``complete_task``, ``fail_task``, ``report_progress`` and ``heartbeat``."""
        start, end = budgets.window_bounds(window, self.clock.now())
        sums = self.store.usage(scope, start, end)
        return UsageTotals(scope=scope, window=window, start=start, end=end, **sums)

    # --- the operator's hands on the work: cancel and requeue -------------------------
    @checked
    def cancel_task(
        self, task_id: TaskRef, reason: Reason = "", *, actor: ActorName | None = None
    ) -> Task:
        """Cancel a pending, scheduled, blocked or in-progress task: status
        ``cancelled`` and a ``task_cancelled`` event naming the actor and the reason.

        The tasks blocked on it (``depends_on``) are cancelled with it.

        An in-progress task's holder is let go at once: its next heartbeat answers the
        task in ``cancelled_tasks`` (its worker stops the task's process), and its
        completion or failure is refused with ``TaskCancelledError``. A done, failed
        or cancelled task is refused with ``ConflictError``; nothing changes. ``actor``
        is who acts (``operator`` when not given; the server names the caller)."""
        return self.store.act_on_task(
            "cancel", int(task_id), _actor(actor), reason, self.clock.now()
        )

    @checked
    def requeue_task(self, task_id: TaskRef, *, actor: ActorName | None = None) -> Task:
        """Put a failed or in-progress task back to pending, with a new epoch and its
        attempts reset; a ``task_requeued`` event names the actor.

        The old holder of an in-progress task is let go at once, and its completion
        is refused by the epoch fencing (``LeaseError``). A pending, done or cancelled
        task is refused with ``ConflictError``; nothing changes."""
        return self.store.act_on_task("requeue", int(task_id), _actor(actor), "", self.clock.now())

    @checked
    def cancel_tasks(
        self,
        *,
        status: TaskCancelStatus | None = None,
        role: RoleName | None = None,
        priority: PriorityName | None = None,
        assigned_to: NodeId | None = None,
        title_contains: Title | None = None,
        min_age: TaskAge | None = None,
        reason: Reason = "",
        dry_run: Flag = True,
        actor: ActorName | None = None,
    ) -> TaskBatch:
        """Cancel every task the filter matches that is not finished (pending,
        scheduled, blocked or in progress), in one transaction; with ``dry_run`` (the
        default) only count them.

        The filter: ``status`` (one of those four), ``role`` (among a task's
        matched roles), ``priority``, ``assigned_to`` (its holder), ``title_contains``
        (case-insensitive) and ``min_age`` (seconds since it was added); each left
        out matches every task. The answer is the ``count`` and the first 1,000
        ``task_ids``; each task cancelled is ``cancel_task``'s."""
        now = self.clock.now()
        match = self._match(role, priority, assigned_to, title_contains, min_age, now)
        return self.store.act_on_tasks(
            "cancel", status, match, _actor(actor), reason, bool(dry_run), now
        )

    @checked
    def requeue_tasks(
        self,
        *,
        status: TaskRequeueStatus | None = None,
        role: RoleName | None = None,
        priority: PriorityName | None = None,
        assigned_to: NodeId | None = None,
        title_contains: Title | None = None,
        min_age: TaskAge | None = None,
        dry_run: Flag = True,
        actor: ActorName | None = None,
    ) -> TaskBatch:
        """Requeue every failed or in-progress task the filter matches, in one
        transaction; with ``dry_run`` (the default) only count them.

        The filter is ``cancel_tasks``' (``status``: failed or in_progress). The
        answer is the ``count`` and the first 1,000 ``task_ids``; each task requeued
        is ``requeue_task``'s."""
        now = self.clock.now()
        match = self._match(role, priority, assigned_to, title_contains, min_age, now)
        return self.store.act_on_tasks(
            "requeue", status, match, _actor(actor), "", bool(dry_run), now
        )

    def _match(
        self,
        role: str | None,
        priority: str | None,
        assigned_to: str | None,
        title_contains: str | None,
        min_age: float | None,
        now: float,
    ) -> TaskMatch:
        """A bulk action's filter, its role checked against the settings' roles."""
        return TaskMatch(
            role=None if role is None else self._role(role),
            priority=priority,
            assigned_to=assigned_to,
            title_contains=title_contains,
            created_before=None if min_age is None else now - min_age,
        )

    # --- views --------------------------------------------------------------------
    def assess_workload(self) -> Assessment:
        """Assess the workload and recommend spawning or retiring nodes.

        The assessment is recorded as the cluster's work distribution, which
        ``read_state`` shows."""
        return self.store.assess(self.clock.now())

    @checked
    def read_state(self, node_id: NodeId | None = None, *, limit: Limit = 50) -> State:
        """The board, the nodes and the cluster's metadata; ``.text`` is the text block
        the ``read_state`` tool answers."""
        return self.store.snapshot(self.clock.now(), node_id=node_id, limit=limit)

    def read_state_text(self, node_id: NodeId | None = None, *, limit: Limit = 50) -> str:
        """``read_state`` as its text block (what the ``read_state`` tool answers)."""
        return self.read_state(node_id, limit=limit).text

    @checked
    def catch_up(
        self, node_id: NodeId, since: Seq | None = None, *, limit: Limit = 1000
    ) -> CatchUp:
        """Events since the node's cursor (or ``since``), and the cursor to use next."""
        return self.store.catch_up(node_id, since, limit, self.clock.now())

    @checked
    def events(self, since: Seq = 0, limit: Limit = 1000) -> list[Event]:
        """Events after sequence number ``since``, oldest first (at most 10,000)."""
        return self.store.events(since, limit)

    @checked
    def broadcast(self, message: Message, node_id: NodeId | None = None) -> Event:
        """A message every node sees on its next ``catch_up``."""
        return self.store.broadcast(node_id, message, self.clock.now())

    # --- alerts and heartbeat metrics (worker SDK) ----------------------------------
    @checked
    def alert(self, message: Message, node_id: NodeId | None = None, **data: Any) -> Event:
        """Record an ``alert`` event.

        A heartbeat destination that failed 3 times in a row raises one; ``data`` is
        free-form JSON."""
        check_payload(data, "data")
        return self.store.record_alert(node_id, message, data, self.clock.now())

    @checked
    def record_metrics(
        self, node_id: NodeId, sample: JsonObject, *, keep: PositiveInt | None = None
    ) -> Event:
        """Append one point to a node's heartbeat metrics series.

        The point is a ``heartbeat_sample`` event; with ``keep``, only the newest
        ``keep`` stay."""
        return self.store.record_sample(node_id, sample, keep, self.clock.now())

    @checked
    def metrics_series(self, node_id: NodeId, limit: Limit = 100) -> list[Event]:
        """A node's newest heartbeat metrics points (at most ``limit``), oldest first."""
        return self.store.samples(node_id, limit)

    def stats(self) -> ClusterStats:
        """Counts for dashboards and ``/metrics`` (a ``ClusterStats``)."""
        from corral.store.stats import read_stats

        return read_stats(self.store, self.clock.now())

    # --- supervised processes (corral supervise) -------------------------------------
    @checked
    def report_processes(self, host: NodeId, processes: list[dict[str, Any]]) -> list[Process]:
        """Replace a host's supervised processes with its supervisor's full view.

        Each item has ``agent``, ``state`` (STOPPED, STARTING, RUNNING, UNHEALTHY or
        WAITING), ``pid``, ``restarts``, ``started_at``, ``last_beat``, ``flags`` and
        ``last_exit``; at most 10,000 items (a later item for the same agent replaces an
        earlier one). A ``process_state`` event
        is recorded for each agent whose state changed and a ``process_removed`` for
        each agent the host no longer reports. Returns the stored processes."""
        if not isinstance(processes, list) or len(processes) > defaults.MAX_PROCESSES:
            raise InvalidInputError(
                f"processes must be a list of at most {defaults.MAX_PROCESSES} items",
                field="processes",
            )
        # One row per agent: a later item for the same agent replaces an earlier one.
        items = {p.agent: p for p in (_process_item(x, i) for i, x in enumerate(processes))}
        return self.store.report_processes(host, list(items.values()), self.clock.now())

    @checked
    def list_processes(self, host: NodeId | None = None) -> list[Process]:
        """Supervised processes as their hosts last reported them (or one host's)."""
        return self.store.list_processes(host)

    @checked
    def request_process_action(
        self,
        host: NodeId,
        agent: NodeId,
        action: ProcessActionName,
        *,
        actor: ActorName | None = None,
    ) -> Event:
        """Ask a host's supervisor to start, stop or restart one of its agents.

        Records a ``process_action_requested`` event naming the ``actor`` (its ``seq``
        is the request's id), which the supervisor reads with ``process_actions`` and
        answers with ``ack_process_action`` (its event names the same actor).
        ``NotFoundError`` when the host reports no such agent."""
        return self.store.request_process_action(
            host, agent, action, self.clock.now(), actor=_actor(actor)
        )

    @checked
    def process_actions(self, host: NodeId, since: Seq = 0, limit: Limit = 1000) -> list[Event]:
        """The start/stop/restart requests for a host after event ``since``, oldest
        first (a supervisor's inbox; at most ``limit``)."""
        return self.store.process_actions(host, since, limit)

    @checked
    def ack_process_action(
        self, host: NodeId, request_seq: Seq, ok: Flag, message: Text = ""
    ) -> Event:
        """Answer a process action request: a ``process_action_done`` event with the
        host, agent, action, the request's ``seq`` and actor, ``ok`` and a message."""
        return self.store.ack_process_action(host, request_seq, ok, message, self.clock.now())
