"""The store port: a short list of domain operations.

Every operation that changes anything is one transaction and appends its events in
that transaction. ``now`` is always an argument: the store never reads a clock.
Inputs arrive validated (the service checks them); the store enforces what only a
transaction can: capacity, lease ownership and epochs, the liveness double-check.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from corral.deadlines import Deadlines
from corral.errors import BudgetError, CorralError, InvalidInputError
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
)

if TYPE_CHECKING:
    from corral.scheduler.records import Agent, Assignment, Notification
    from corral.store.stats import ClusterStats
    from corral.workflows.model import Handler, WorkflowHost, WorkflowWork

__all__ = [
    "Deadlines",
    "LockHolder",
    "NodeSpec",
    "Store",
    "TaskMatch",
    "TaskSpec",
    "WouldBlock",
]


class WouldBlock(CorralError):
    """Raised inside ``Store.nowait()`` when a transaction would have to wait for
    another thread or process; that transaction has done nothing. Internal: the
    server's event loop catches it and runs the call on a thread instead."""

    code = "would_block"
    status = 503
    exit_code = 3
    hint = "Nothing was changed; run the call where it may wait."


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: str
    role: str
    model: str | None = None
    strength: str | None = None
    heartbeat_interval: float | None = None
    host: str | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class TaskSpec:
    title: str
    description: str = ""
    priority: str = "medium"
    role: str | None = None
    max_attempts: int | None = None
    progress_timeout: float | None = None  # its own limit without progress (stuck)
    # Time and order: a run's limit (seconds from its claim), a failed attempt's
    # backoff, not claimable before this time, the tasks it waits on (their ids).
    timeout: float | None = None
    retry_backoff: float | None = None
    not_before: float | None = None
    depends_on: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskMatch:
    """A bulk action's filter on tasks (``None``: any): a role among a task's matched
    roles, its priority, its holder, a text its title contains (case-insensitive),
    and created at or before ``created_before`` (a minimum age, as a time)."""

    role: str | None = None
    priority: str | None = None
    assigned_to: str | None = None
    title_contains: str | None = None
    created_before: float | None = None


@dataclass(frozen=True, slots=True)
class LockHolder:
    """A process holding a backend's write lock (SQLite): its pid, and whether the
    OS reports it stopped (SIGSTOP, a debugger), so it holds the lock until resumed."""

    pid: int
    stopped: bool


class Store(ABC):
    """What every backend implements, with the same behaviour."""

    #: Whether ``nowait()`` can run short calls without waiting (an event loop may run
    #: them inline, hopping to a thread only on ``WouldBlock``); False: never try.
    inline_calls: ClassVar[bool] = False

    # --- settings -------------------------------------------------------------
    @abstractmethod
    def settings(self) -> Settings:
        """The cluster's settings (cached until another process changes them)."""

    @abstractmethod
    def update_settings(self, changes: dict[str, Any], now: float, *, actor: str) -> Settings:
        """Apply validated changes atomically; re-index pending tasks when role
        keywords change and re-time live nodes when liveness numbers change; a
        ``settings_changed`` event names the changes and ``actor``."""

    # --- nodes ----------------------------------------------------------------
    @abstractmethod
    def register_node(self, spec: NodeSpec, now: float) -> Registered:
        """Atomically count live nodes and insert (or refresh a live node of the same
        id). Raises ``CapacityError`` when full; a terminated id gets a new incarnation."""

    @abstractmethod
    def get_node(self, node_id: str) -> Node:
        """The newest incarnation of ``node_id``; ``NotFoundError`` if none."""

    @abstractmethod
    def list_nodes(self, status: str | None = None, role: str | None = None) -> list[Node]:
        """The newest incarnation of each node id, filtered."""

    @abstractmethod
    def set_status(
        self,
        node_id: str,
        status: str,
        current_task_id: int | None,
        now: float,
        actor: str | None = None,
    ) -> Node:
        """Set a live node's status; ``terminated`` also returns its leases to the queue.
        The ``node_status`` event names ``actor`` when given."""

    @abstractmethod
    def heartbeat(
        self,
        node_id: str,
        payload: dict[str, Any],
        health: str | None,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Node:
        """One guarded update of a live node's heartbeat; renews its leases. ``usage``
        (checked deltas) is added to the node's sums in the same transaction."""

    @abstractmethod
    def touch(self, node_id: str, now: float) -> bool:
        """Count a call by a live node as its heartbeat: one guarded UPDATE of its last
        activity, last heartbeat and death deadline (its heartbeat payload is kept).
        False when the node is unknown or terminated; nothing is written then."""

    # --- tasks ----------------------------------------------------------------
    @abstractmethod
    def add_tasks(self, specs: list[TaskSpec], now: float) -> list[Task]:
        """Add tasks in one transaction (all or none), in order."""

    def add_task(self, spec: TaskSpec, now: float) -> Task:
        return self.add_tasks([spec], now)[0]

    @abstractmethod
    def get_task(self, task_id: int) -> Task: ...

    @abstractmethod
    def list_tasks(
        self, status: str | None = None, assigned_to: str | None = None, limit: int = 100
    ) -> list[Task]:
        """Pending tasks in the order they will be claimed; in-progress ones by id;
        any other selection newest first."""

    @abstractmethod
    def claim(self, node_id: str, role: str, now: float, *, key: str | None = None) -> Task | None:
        """Atomically take the best pending task for ``role`` (highest score:
        priority points + 15 for a role match + age in minutes),
        bump its epoch and mark the node working on it. None when nothing is pending.

        With an idempotency ``key`` (``store.claimkeys``), a claim that takes a task
        records it in its own transaction; a claim by the same node with a key already
        recorded takes nothing and answers the task that claim took if the node
        still holds it at that claim's epoch, else None. (A claim that took nothing
        records nothing: sent again, it is a new try.)"""

    @abstractmethod
    def complete(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Task:
        """Finish a task the node holds (at ``epoch`` if given); ``LeaseError`` otherwise.
        ``usage`` (checked deltas) is added to the sums in the same transaction."""

    def complete_and_claim(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        result: Any,
        role: str,
        now: float,
        *,
        key: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> tuple[Task, Task | None]:
        """Complete a held task and claim the next best one for ``role``: exactly
        ``complete`` then ``claim`` (same checks, same events). A backend may do both in
        one transaction; this default does two. With ``key``, as ``claim``'s: sent
        again, it answers the finished task and what its claim took. A node covered by
        a spent budget completes and claims nothing (its next ``claim`` is refused)."""
        roles = self.settings().roles
        if role not in roles:  # refuse before the completion: bad input changes nothing
            raise InvalidInputError(
                f"role must be one of {', '.join(roles)}; got {role!r:.40}", field="role"
            )
        done = self.complete(task_id, node_id, epoch, result, now, usage=usage)
        if self.budget_spent(node_id, now):
            return done, None
        return done, self.claim(node_id, role, now, key=key)

    @abstractmethod
    def fail(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        error: str,
        retry: bool,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Task:
        """Fail a held task: back to pending while attempts remain and ``retry``;
        ``usage`` added to the sums in the same transaction."""

    @abstractmethod
    def report_progress(
        self,
        task_id: int,
        node_id: str,
        epoch: int | None,
        note: str | None,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Task:
        """Record progress on a held task (one transaction, ``usage`` added to the sums
        in it): its progress time and
        note, its stuck deadline moved on, a stuck flag cleared (``task_unstuck``
        event). ``LeaseError`` (or ``TaskCancelledError``) when ``node_id`` does not
        hold it at ``epoch``, as a completion."""

    # --- usage and budgets (corral.budgets, docs/guardrails.md) -----------------------
    @abstractmethod
    def usage(self, scope: str, start: float, end: float) -> dict[str, Any]:
        """``scope``'s usage sums over the hours in ``[start, end)``: input_tokens,
        output_tokens, cost_usd and the number of reports."""

    @abstractmethod
    def usage_by_scope(self, start: float, end: float) -> list[dict[str, Any]]:
        """Every scope's sums (but tasks') over ``[start, end)``, ordered by scope."""

    @abstractmethod
    def budget_refusal(self, node_id: str, now: float) -> None:
        """Raise ``BudgetError`` (naming the budget and when it frees) when a budget
        covering ``node_id`` is spent. No read when no budget is set."""

    def budget_spent(self, node_id: str, now: float) -> bool:
        """Whether a budget covering ``node_id`` is spent (``budget_refusal``)."""
        try:
            self.budget_refusal(node_id, now)
        except BudgetError:
            return True
        return False

    @abstractmethod
    def stop_hard(self, node_id: str, now: float) -> list[int]:
        """Cancel the tasks in progress in the scope of each spent ``hard`` budget
        covering ``node_id`` (as ``cancel_task``, actor ``budget``); their ids."""

    @abstractmethod
    def stuck_deadline(self) -> float | None:
        """The earliest stuck deadline of a task in progress (an index head; None:
        no task in progress has one)."""

    @abstractmethod
    def act_on_stuck(self, now: float) -> list[Event]:
        """Handle the tasks in progress stuck at ``now`` by the ``stuck_action``
        setting (flag, requeue or fail), in short transactions; a ``task_stuck``
        event each, returned."""

    @abstractmethod
    def stuck_count(self) -> int:
        """How many tasks in progress are flagged stuck."""

    def release_claim(
        self, task_id: int, node_id: str, epoch: int, now: float, *, before: Node | None = None
    ) -> Task:
        """Hand back a claim its caller never received (the server's waiting claim
        whose client left): the task pending again with the attempt undone (its epoch
        stays bumped), the node as ``before`` the claim (else as after finishing
        it), a ``lease_released`` event (``reason: abandoned``). ``LeaseError`` when
        ``node_id`` does not hold it at ``epoch``."""
        raise NotImplementedError(f"{type(self).__name__} cannot hand back a claim")

    @abstractmethod
    def act_on_task(self, action: str, task_id: int, actor: str, reason: str, now: float) -> Task:
        """The operator's ``action`` on one task, in one transaction with its event
        (``task_cancelled`` or ``task_requeued``, naming ``actor``): ``cancel`` a pending
        or in-progress task (its holder lets it go; its late completion is refused
        with ``TaskCancelledError``), or ``requeue`` a failed or in-progress one
        (pending, a new epoch, its attempts reset). ``NotFoundError`` when unknown,
        ``ConflictError`` from any other status (nothing changes)."""

    @abstractmethod
    def act_on_tasks(
        self,
        action: str,
        status: str | None,
        match: TaskMatch,
        actor: str,
        reason: str,
        dry_run: bool,
        now: float,
    ) -> TaskBatch:
        """``act_on_task`` on every task ``match`` selects whose status the action
        applies to (only ``status`` when given), in one transaction; with ``dry_run``
        the count and ids of those tasks, nothing changed."""

    # --- cluster views ----------------------------------------------------------
    @abstractmethod
    def assess(self, now: float) -> Assessment:
        """Count, decide (``assessment.decide``) and record the assessment."""

    @abstractmethod
    def snapshot(self, now: float, node_id: str | None = None, limit: int = 50) -> State:
        """Everything ``read_state`` shows, from one consistent read."""

    @abstractmethod
    def catch_up(self, node_id: str, since: int | None, limit: int, now: float) -> CatchUp:
        """Events after the node's cursor (or ``since``); moves the cursor."""

    @abstractmethod
    def events(self, since: int, limit: int = 1000) -> list[Event]:
        """Events after ``since``, in order."""

    @abstractmethod
    def broadcast(self, node_id: str | None, message: str, now: float) -> Event: ...

    # --- alerts and the heartbeat metrics series (worker SDK) ---------------------
    @abstractmethod
    def record_alert(
        self, node_id: str | None, message: str, data: dict[str, Any], now: float
    ) -> Event:
        """Append an ``alert`` event (e.g. a heartbeat destination failing) and return it."""

    @abstractmethod
    def record_sample(
        self, node_id: str, sample: dict[str, Any], keep: int | None, now: float
    ) -> Event:
        """Append a ``heartbeat_sample`` event for ``node_id``; when ``keep`` is given,
        delete that node's older samples beyond the newest ``keep``, in the same
        transaction. Returns the new event."""

    @abstractmethod
    def samples(self, node_id: str, limit: int) -> list[Event]:
        """The newest ``limit`` heartbeat samples of ``node_id``, oldest first."""

    # --- supervised processes (corral supervise) -----------------------------------
    @abstractmethod
    def report_processes(self, host: str, processes: list[Process], now: float) -> list[Process]:
        """Replace ``host``'s process rows with ``processes`` (stamped ``now``); a
        ``process_state`` event per agent whose state changed (or that is new) and a
        ``process_removed`` per agent no longer reported. Returns the stored rows."""

    @abstractmethod
    def list_processes(self, host: str | None = None) -> list[Process]:
        """Every reported process (or ``host``'s), by host then agent."""

    @abstractmethod
    def request_process_action(
        self, host: str, agent: str, action: str, now: float, *, actor: str
    ) -> Event:
        """Record a ``process_action_requested`` event naming ``actor``;
        ``NotFoundError`` when ``host`` reports no such agent."""

    @abstractmethod
    def process_actions(self, host: str, since: int, limit: int) -> list[Event]:
        """``host``'s ``process_action_requested`` events after ``since``, in order."""

    @abstractmethod
    def ack_process_action(
        self, host: str, request_seq: int, ok: bool, message: str, now: float
    ) -> Event:
        """Record a ``process_action_done`` event answering request ``request_seq``,
        with the request's actor (``NotFoundError`` unless it is one of ``host``'s
        requests)."""

    # --- workflow runs (corral.workflows) --------------------------------------------
    @abstractmethod
    def serve_workflows(
        self, host: str, workflows: list[tuple[str, float | None]], now: float
    ) -> list[WorkflowHost]:
        """Replace the workflows ``host`` serves (name, its own release delay or None)
        and stamp it seen; returns them by name."""

    @abstractmethod
    def take_workflow_work(self, host: str, limit: int, now: float) -> WorkflowWork:
        """One transaction: stamp ``host`` seen, claim up to ``limit`` runs of its
        workflows that are due (new, or released with an event or a deadline due; one
        guarded UPDATE, so a run goes to one host), take the events sent to its
        running handlers, and pick its idle runs to release (``idle.release_due``).
        ``NotFoundError`` when the host serves nothing."""

    @abstractmethod
    def report_handler(
        self,
        host: str,
        handler_id: str,
        state: str,
        *,
        waiters: list[dict[str, Any]] | None,
        wake_at: float | None,
        result: Any,
        error: str | None,
        reason: str | None,
        now: float,
    ) -> Handler:
        """Record a run's transition on its host (idle, busy, resident, or finished):
        ``idle_since`` per ``idle.idle_transition`` and its events. ``LeaseError``
        unless ``host`` runs it."""

    @abstractmethod
    def release_handler(
        self, host: str, handler_id: str, checkpoint: dict[str, Any], now: float
    ) -> Handler:
        """Store an idle run's checkpoint and mark it released in one transaction
        (resumable from then on). ``LeaseError`` unless ``host`` runs it, it is idle
        and no event waits for it."""

    @abstractmethod
    def request_release(self, handler_id: str, actor: str, now: float) -> Handler:
        """An operator's request that an idle run be released now: stamped on the run
        with a ``workflow_release_requested`` event naming ``actor``, in one
        transaction; the next ``take_workflow_work`` of its host lists it for release
        whatever its delay. ``ConflictError`` unless it is idle on a host, not kept
        resident and not asked for already (nothing changes)."""

    @abstractmethod
    def resume(self, handler_id: str, actor: str, now: float) -> Handler:
        """An operator's resume of a released run: due at once (as an event makes it),
        with a ``workflow_resume_requested`` event naming ``actor``, in one
        transaction. ``ConflictError`` unless it is released (nothing changes)."""

    @abstractmethod
    def run_workflow(
        self, handler_id: str, workflow: str, start: dict[str, Any], now: float
    ) -> Handler:
        """Add a run for any live host serving ``workflow`` to take; ``NotFoundError``
        when none does."""

    @abstractmethod
    def get_handler(self, handler_id: str) -> Handler: ...

    @abstractmethod
    def send_event(
        self, handler_id: str, event_type: str, data: dict[str, Any], now: float
    ) -> Handler:
        """Queue an event for a run; a released run becomes due at once."""

    @abstractmethod
    def list_handlers(
        self,
        *,
        status: str | None,
        idle: bool | None,
        idle_duration_gt: float | None,
        workflow: str | None,
        host: str | None,
        limit: int,
        now: float,
    ) -> list[Handler]:
        """Handlers, filtered: idle ones longest idle first (on an index of
        ``idle_since``), the others oldest first."""

    # --- the activation scheduler (corral.scheduler) ---------------------------------
    @abstractmethod
    def add_agent(self, agent_id: str, config: dict[str, Any], now: float, *, actor: str) -> Agent:
        """Add an agent to activate, or replace its config (its counts and place in the
        order stay); its next cron override is computed from ``now``; an
        ``agent_added`` event names ``actor``."""

    @abstractmethod
    def get_agent(self, agent_id: str) -> Agent:
        """One agent; ``NotFoundError`` when unknown."""

    @abstractmethod
    def list_agents(self, after: str, limit: int) -> list[Agent]:
        """Agents by id, those after ``after`` (a page)."""

    @abstractmethod
    def notify(self, agent_id: str, payload: Any, now: float) -> Notification:
        """Add an inbox item and count it unread (``NotFoundError``: unknown agent)."""

    @abstractmethod
    def read_inbox(self, agent_id: str, limit: int, now: float) -> list[Notification]:
        """The oldest ``limit`` unread items, marked read in the same transaction."""

    @abstractmethod
    def assign(self, runner_id: str, mode: str, now: float) -> Assignment | None:
        """Atomically take the next agent for a runner in ``mode``
        (``corral.scheduler.policy``'s order) under an activation lease until
        ``now + activation_ttl``; None when nothing is due for the mode."""

    @abstractmethod
    def list_assignments(self, limit: int) -> list[Assignment]:
        """The live activations, oldest first (without their inbox items)."""

    @abstractmethod
    def release_activation(
        self, assignment_id: int, runner_id: str, epoch: int, outcome: dict[str, Any], now: float
    ) -> Agent:
        """End a live activation ``runner_id`` holds at ``epoch`` (``LeaseError``
        otherwise, nothing changed): the agent stamped and counted, its inbox items read."""

    @abstractmethod
    def activation_deadline(self) -> float | None:
        """When the next activation lease expires (None: none is held)."""

    @abstractmethod
    def expire_activations(self, now: float) -> list[Event]:
        """End the activations expired at ``now`` (their TTL, or their runner's node
        ended): an ``activation_expired`` event each; the agents assignable again."""

    @abstractmethod
    def prune_notifications(self, now: float) -> int:
        """Delete inbox items read longer than ``event_retention_seconds`` ago."""

    @abstractmethod
    def scheduler_stats(self, now: float) -> dict[str, Any]:
        """The scheduler's scaling signals for ``/metrics``."""

    # --- the monitor's duties -----------------------------------------------------
    @abstractmethod
    def deadlines(self) -> Deadlines: ...

    @abstractmethod
    def make_tasks_ready(self, now: float) -> list[Event]:
        """Make the scheduled tasks whose ``ready_at`` is at or before ``now`` pending
        (their role heads added, waiting claims woken at the commit): a ``task_ready``
        event each, in batches."""

    @abstractmethod
    def time_out_tasks(self, now: float) -> list[Event]:
        """Take back the runs past their ``timeout`` at ``now`` (re-checked under the
        holder's and the task's locks): pending again, or scheduled after the task's
        backoff, while attempts remain, else failed for good (and its dependents with
        it); a ``task_timed_out`` event each, naming the holder, which its heartbeat's
        ``cancelled_tasks`` answer tells to stop."""

    @abstractmethod
    def reap_dead(self, now: float) -> list[Event]:
        """Terminate nodes silent past their window and recover their leases (the
        double-check happens inside the transaction). A dead bootstrap manager also
        leaves a recovery task and sets ``ask_user``."""

    @abstractmethod
    def retire_idle(self, now: float) -> list[Event]:
        """Terminate non-manager nodes idle past ``idle_timeout + grace_period``."""

    @abstractmethod
    def prune_events(self, now: float) -> int: ...

    def roll_up_usage(self, now: float) -> int:
        """Add the usage reports a store keeps on its completed tasks to their
        hours (docs/guardrails.md); how many. Every read counts them either way: this
        keeps the reads short. None by default (the reports went to their hours)."""
        return 0

    def try_lead(self, holder: str) -> bool:
        """Whether ``holder``'s monitor may do the duties now. The duties are
        idempotent and double-checked, so by default every monitor may; a shared
        backend elects one leader."""
        return True

    def acting_as(self, monitor: str) -> AbstractContextManager[None]:
        """Tag the events this thread writes with ``monitor`` while inside (the
        monitor's duties), so the event log says which monitor acted."""
        return nullcontext()

    # --- the write lock (a backend with one lock for every writer: SQLite) ------------
    def write_lock_holder(self) -> LockHolder | None:
        """The process holding the store's write lock right now, when the backend
        has a single one and can tell (else None)."""
        return None

    def write_lock_timeouts(self) -> int:
        """How many of this store's writes gave up waiting for the write lock."""
        return 0

    # --- statistics and the server's fast path ------------------------------------
    def stats(self, now: float | None = None) -> ClusterStats:
        """The counts ``/metrics`` and ``/v1/stats`` show, from one consistent read
        (with ``now``, the tasks finished in the hour before it too)."""
        raise NotImplementedError(f"{type(self).__name__} has no statistics")

    @contextmanager
    def nowait(self) -> Iterator[None]:
        """Transactions started in this block, on this thread, never wait: when they
        would, they raise ``WouldBlock`` before doing anything. This default cannot
        promise that, so the block raises ``WouldBlock`` at its start (see
        ``inline_calls``)."""
        raise WouldBlock(f"{type(self).__name__} cannot run a call without waiting")
        yield  # pragma: no cover - a generator for contextmanager

    def group(self) -> AbstractContextManager[None]:
        """Write transactions started in this block, on this thread, may share one
        commit (answer their callers after the block). By default each commits by
        itself, which keeps every answer as durable."""
        return nullcontext()

    # --- waiting claims -----------------------------------------------------------
    def ready_token(self) -> Any:
        """A marker of the wake-ups seen so far; take it *before* a claim attempt."""
        return None

    def wait_ready(self, token: Any, timeout: float) -> None:
        """Block until a task may have become pending since ``token`` was taken (or
        ``timeout`` seconds pass). Backends without a wake-up re-check every second."""
        time.sleep(min(timeout, 1.0))

    def wake_waiters(self) -> None:
        """Wake this process's ``wait_ready`` callers now (each re-checks, then waits
        again): a server whose caller went away ends that caller's wait at once."""
        return None  # backends without a wake-up: their waiters re-check every second

    def close_listeners(self) -> None:
        """Stop listening for other processes' wake-ups (remove what a listener left
        on disk); the store stays usable. For a process that is about to die by a
        signal, where exit handlers do not run."""
        return None  # nothing listens by default

    @abstractmethod
    def close(self) -> None: ...
