"""The SQL store: the ``Store`` port composed of capability modules over named SQL.

Each operation is a plain function of a capability module (``sqlnodes``, ``sqltasks``,
``sqlviews``, ``sqlduties``, ``sqlprocs``, ``sqlworkflows``, ``sqlsched``,
``sqlspawn``, ``sqltokens``) over a ``Db``: the transactions an adapter provides and
the state its operations share. ``SQLStore`` holds the ``Db`` and answers each method
of the port with its function. An adapter (``SQLiteStore``, ``PostgresStore``)
supplies the transactions (``_write``, ``_read``, and optionally ``_write_redone``,
``_read_latest``, ``_read_row``) and a ``queries.sql`` with the names used, and may
answer an operation itself with a faster single statement (the claim and the
completion, its hot path). ``lock_registry`` and ``*_for_update`` queries are where a
dialect with row locks (PostgreSQL) takes them; SQLite's write transaction already
excludes every other writer.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from corral.errors import ConflictError, NotFoundError
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
from corral.store import (
    sqlduties,
    sqlnodes,
    sqlprocs,
    sqlprogress,
    sqlsched,
    sqlspawn,
    sqltasks,
    sqltokens,
    sqlusage,
    sqlviews,
    sqlworkflows,
)
from corral.store.base import Deadlines, NodeSpec, Store, TaskMatch, TaskSpec
from corral.store.rows import Tx, event_from_row, node_from_row, task_from_row
from corral.store.sqldb import Db
from corral.store.stats import ClusterStats, stats_in

if TYPE_CHECKING:
    from corral.scheduler.records import Agent, Assignment, Notification
    from corral.spawning import SpawnRequest
    from corral.tokens import NamedToken
    from corral.workflows.model import Handler, WorkflowHost, WorkflowWork

__all__ = ["SQLStore", "Tx", "event_from_row", "node_from_row", "task_from_row"]


class SQLStore(Store):
    """``Store`` over a ``Db`` made of the adapter's transactions."""

    def __init__(self) -> None:
        self._db = Db(
            write=self._write,
            read=self._read,
            write_redone=self._write_redone,
            read_latest=self._read_latest,
            read_row=self._read_row,
        )

    def acting_as(self, monitor: str) -> AbstractContextManager[None]:
        return self._db.acting_as(monitor)

    def stats(self, now: float | None = None) -> ClusterStats:
        return stats_in(self, self._db.read_latest, now)

    # --- the adapter's transactions ---------------------------------------------------
    @abstractmethod
    def _write(self) -> AbstractContextManager[Tx]:
        """A write transaction that excludes conflicting writers from its start."""

    def _write_redone(self) -> AbstractContextManager[Tx]:
        """A ``_write`` that the monitor would redo if a crash lost it: its rows are
        due, and stay due until a later pass commits. An adapter may commit it
        without waiting for its log to reach the disk (PostgreSQL does); any later
        commit that depends on it, being durable, makes it durable too."""
        return self._write()

    @abstractmethod
    def _read(self) -> AbstractContextManager[Tx]:
        """A read-only transaction with a consistent snapshot."""

    def _read_latest(self, single: bool = False) -> AbstractContextManager[Tx]:
        """A ``_read`` whose event reads see every event committed before it began
        (read-your-writes). ``single``: the body runs one statement, which needs no
        snapshot shared between statements."""
        return self._read()

    def _read_row(self, name: str, **params: Any) -> Sequence[Any] | None:
        """The first row of named query ``name``, one statement read on its own,
        its values by position (an adapter may answer it in one round trip)."""
        with self._read_latest(single=True) as tx:
            row = tx.one(name, **params)
        return None if row is None else tuple(row)

    # --- sqlnodes ------------------------------------------------------------
    def settings(self) -> Settings:
        return sqlnodes.settings(self._db)

    def update_settings(self, changes: dict[str, Any], now: float, *, actor: str) -> Settings:
        return sqlnodes.update_settings(self._db, changes, now, actor)

    def register_node(self, spec: NodeSpec, now: float) -> Registered:
        return sqlnodes.register_node(self._db, spec, now)

    def get_node(self, node_id: str) -> Node:
        return sqlnodes.get_node(self._db, node_id)

    def list_nodes(self, status: str | None = None, role: str | None = None) -> list[Node]:
        return sqlnodes.list_nodes(self._db, status, role)

    def set_status(
        self,
        node_id: str,
        status: str,
        current_task_id: int | None,
        now: float,
        actor: str | None = None,
    ) -> Node:
        return sqlnodes.set_status(self._db, node_id, status, current_task_id, now, actor)

    def heartbeat(
        self,
        node_id: str,
        payload: dict[str, Any],
        health: str | None,
        now: float,
        *,
        usage: dict[str, Any] | None = None,
    ) -> Node:
        return sqlnodes.heartbeat(self._db, node_id, payload, health, now, usage)

    def touch(self, node_id: str, now: float) -> bool:
        return sqlnodes.touch(self._db, node_id, now)

    # --- sqltasks ------------------------------------------------------------
    def add_tasks(self, specs: list[TaskSpec], now: float) -> list[Task]:
        return sqltasks.add_tasks(self._db, specs, now)

    def get_task(self, task_id: int) -> Task:
        return sqltasks.get_task(self._db, task_id)

    def list_tasks(
        self, status: str | None = None, assigned_to: str | None = None, limit: int = 100
    ) -> list[Task]:
        return sqltasks.list_tasks(self._db, status, assigned_to, limit)

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
        return sqltasks.fail(self._db, task_id, node_id, epoch, error, retry, now, usage)

    # --- sqlprogress ---------------------------------------------------------
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
        return sqlprogress.report_progress(self._db, task_id, node_id, epoch, note, now, usage)

    # --- sqlusage ------------------------------------------------------------
    def usage(self, scope: str, start: float, end: float) -> dict[str, Any]:
        return sqlusage.usage(self._db, scope, start, end)

    def usage_by_scope(self, start: float, end: float) -> list[dict[str, Any]]:
        return sqlusage.usage_by_scope(self._db, start, end)

    def budget_refusal(self, node_id: str, now: float) -> None:
        sqlusage.budget_refusal(self._db, node_id, now)

    def budget_spent(self, node_id: str, now: float) -> bool:
        # A worker's every step asks: without budgets, one look at the cached settings.
        return not sqlusage.budgetless(self._db) and super().budget_spent(node_id, now)

    def stop_hard(self, node_id: str, now: float) -> list[int]:
        if sqlusage.budgetless(self._db):  # a report's common case: nothing to read
            return []
        spent = sqlusage.hard_budgets_spent(self._db, node_id, now)
        if not spent:  # the common case, a report's: nothing to read
            return []
        done: list[int] = []
        for task_id, reason in sqlusage.hard_targets(self._db, spent):
            try:  # as cancel_task does, actor "budget"
                sqltasks.act_on_task(self._db, "cancel", task_id, "budget", reason, now)
            except (ConflictError, NotFoundError):  # finished meanwhile: nothing to stop
                continue
            done.append(task_id)
        return done

    def stuck_deadline(self) -> float | None:
        return sqlprogress.stuck_deadline(self._db)

    def act_on_stuck(self, now: float) -> list[Event]:
        return sqlprogress.act_on_stuck(self._db, now)

    def stuck_count(self) -> int:
        return sqlprogress.stuck_count(self._db)

    def release_claim(
        self, task_id: int, node_id: str, epoch: int, now: float, *, before: Node | None = None
    ) -> Task:
        return sqltasks.release_claim(self._db, task_id, node_id, epoch, now, before=before)

    def act_on_task(self, action: str, task_id: int, actor: str, reason: str, now: float) -> Task:
        return sqltasks.act_on_task(self._db, action, task_id, actor, reason, now)

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
        return sqltasks.act_on_tasks(self._db, action, status, match, actor, reason, dry_run, now)

    # --- sqlviews ------------------------------------------------------------
    def assess(self, now: float) -> Assessment:
        return sqlviews.assess(self._db, now)

    def snapshot(self, now: float, node_id: str | None = None, limit: int = 50) -> State:
        return sqlviews.snapshot(self._db, now, node_id, limit)

    def catch_up(self, node_id: str, since: int | None, limit: int, now: float) -> CatchUp:
        return sqlviews.catch_up(self._db, node_id, since, limit, now)

    def events(self, since: int, limit: int = 1000) -> list[Event]:
        return sqlviews.events(self._db, since, limit)

    def broadcast(self, node_id: str | None, message: str, now: float) -> Event:
        return sqlviews.broadcast(self._db, node_id, message, now)

    def record_alert(
        self, node_id: str | None, message: str, data: dict[str, Any], now: float
    ) -> Event:
        return sqlviews.record_alert(self._db, node_id, message, data, now)

    def record_sample(
        self, node_id: str, sample: dict[str, Any], keep: int | None, now: float
    ) -> Event:
        return sqlviews.record_sample(self._db, node_id, sample, keep, now)

    def samples(self, node_id: str, limit: int) -> list[Event]:
        return sqlviews.samples(self._db, node_id, limit)

    # --- sqlduties -----------------------------------------------------------
    def deadlines(self) -> Deadlines:
        return sqlduties.deadlines(self._db)

    def reap_dead(self, now: float) -> list[Event]:
        return sqlduties.reap_dead(self._db, now)

    def make_tasks_ready(self, now: float) -> list[Event]:
        return sqltasks.make_ready(self._db, now)

    def time_out_tasks(self, now: float) -> list[Event]:
        return sqltasks.time_out(self._db, now)

    def retire_idle(self, now: float) -> list[Event]:
        return sqlduties.retire_idle(self._db, now)

    def prune_events(self, now: float) -> int:
        return sqlduties.prune_events(self._db, now)

    def roll_up_usage(self, now: float) -> int:
        return sqlusage.roll_up_all(self._db)

    # --- sqlprocs ------------------------------------------------------------
    def report_processes(self, host: str, processes: list[Process], now: float) -> list[Process]:
        return sqlprocs.report_processes(self._db, host, processes, now)

    def list_processes(self, host: str | None = None) -> list[Process]:
        return sqlprocs.list_processes(self._db, host)

    def request_process_action(
        self, host: str, agent: str, action: str, now: float, *, actor: str
    ) -> Event:
        return sqlprocs.request_process_action(self._db, host, agent, action, now, actor)

    def process_actions(self, host: str, since: int, limit: int) -> list[Event]:
        return sqlprocs.process_actions(self._db, host, since, limit)

    def ack_process_action(
        self, host: str, request_seq: int, ok: bool, message: str, now: float
    ) -> Event:
        return sqlprocs.ack_process_action(self._db, host, request_seq, ok, message, now)

    # --- sqlworkflows --------------------------------------------------------
    def serve_workflows(
        self, host: str, workflows: list[tuple[str, float | None]], now: float
    ) -> list[WorkflowHost]:
        return sqlworkflows.serve_workflows(self._db, host, workflows, now)

    def take_workflow_work(self, host: str, limit: int, now: float) -> WorkflowWork:
        return sqlworkflows.take_workflow_work(self._db, host, limit, now)

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
        return sqlworkflows.report_handler(
            self._db,
            host,
            handler_id,
            state,
            waiters=waiters,
            wake_at=wake_at,
            result=result,
            error=error,
            reason=reason,
            now=now,
        )

    def release_handler(
        self, host: str, handler_id: str, checkpoint: dict[str, Any], now: float
    ) -> Handler:
        return sqlworkflows.release_handler(self._db, host, handler_id, checkpoint, now)

    def request_release(self, handler_id: str, actor: str, now: float) -> Handler:
        return sqlworkflows.request_release(self._db, handler_id, actor, now)

    def resume(self, handler_id: str, actor: str, now: float) -> Handler:
        return sqlworkflows.resume(self._db, handler_id, actor, now)

    def run_workflow(
        self, handler_id: str, workflow: str, start: dict[str, Any], now: float
    ) -> Handler:
        return sqlworkflows.run_workflow(self._db, handler_id, workflow, start, now)

    def get_handler(self, handler_id: str) -> Handler:
        return sqlworkflows.get_handler(self._db, handler_id)

    def send_event(
        self, handler_id: str, event_type: str, data: dict[str, Any], now: float
    ) -> Handler:
        return sqlworkflows.send_event(self._db, handler_id, event_type, data, now)

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
        return sqlworkflows.list_handlers(
            self._db,
            status=status,
            idle=idle,
            idle_duration_gt=idle_duration_gt,
            workflow=workflow,
            host=host,
            limit=limit,
            now=now,
        )

    # --- sqlsched ------------------------------------------------------------
    def add_agent(self, agent_id: str, config: dict[str, Any], now: float, *, actor: str) -> Agent:
        return sqlsched.add_agent(self._db, agent_id, config, now, actor)

    def get_agent(self, agent_id: str) -> Agent:
        return sqlsched.get_agent(self._db, agent_id)

    def list_agents(self, after: str, limit: int) -> list[Agent]:
        return sqlsched.list_agents(self._db, after, limit)

    def notify(self, agent_id: str, payload: Any, now: float) -> Notification:
        return sqlsched.notify(self._db, agent_id, payload, now)

    def read_inbox(self, agent_id: str, limit: int, now: float) -> list[Notification]:
        return sqlsched.read_inbox(self._db, agent_id, limit, now)

    def assign(self, runner_id: str, mode: str, now: float) -> Assignment | None:
        return sqlsched.assign(self._db, runner_id, mode, now)

    def list_assignments(self, limit: int) -> list[Assignment]:
        return sqlsched.list_assignments(self._db, limit)

    def release_activation(
        self, assignment_id: int, runner_id: str, epoch: int, outcome: dict[str, Any], now: float
    ) -> Agent:
        return sqlsched.release_activation(self._db, assignment_id, runner_id, epoch, outcome, now)

    def activation_deadline(self) -> float | None:
        return sqlsched.activation_deadline(self._db)

    def expire_activations(self, now: float) -> list[Event]:
        return sqlsched.expire_activations(self._db, now)

    def prune_notifications(self, now: float) -> int:
        return sqlsched.prune_notifications(self._db, now)

    def scheduler_stats(self, now: float) -> dict[str, Any]:
        return sqlsched.scheduler_stats(self._db, now)

    # --- sqlspawn ------------------------------------------------------------
    def request_spawn(
        self, pool: str, role: str, reason: str, requested_by: str, now: float
    ) -> SpawnRequest:
        return sqlspawn.request_spawn(self._db, pool, role, reason, requested_by, now)

    def spawn_requests(
        self, status: str | None, pool: str | None, limit: int
    ) -> list[SpawnRequest]:
        return sqlspawn.spawn_requests(self._db, status, pool, limit)

    def decide_spawn_request(
        self, request_id: int, status: str, actor: str, now: float, reason: str | None = None
    ) -> SpawnRequest:
        return sqlspawn.decide_spawn_request(self._db, request_id, status, actor, now, reason)

    def fulfil_spawn_request(self, request_id: int, member: str, now: float) -> SpawnRequest:
        return sqlspawn.fulfil_spawn_request(self._db, request_id, member, now)

    # --- sqltokens -----------------------------------------------------------
    def create_token(
        self, name: str, role: str, token_hash: str, actor: str, now: float
    ) -> NamedToken:
        return sqltokens.create_token(self._db, name, role, token_hash, actor, now)

    def list_tokens(self) -> list[NamedToken]:
        return sqltokens.list_tokens(self._db)

    def revoke_token(self, name: str, actor: str, now: float) -> NamedToken:
        return sqltokens.revoke_token(self._db, name, actor, now)

    def token_by_hash(self, token_hash: str, now: float) -> NamedToken | None:
        return sqltokens.token_by_hash(self._db, token_hash, now)

    def token_by_id(self, token_id: int) -> NamedToken | None:
        return sqltokens.token_by_id(self._db, token_id)
