"""Progress and stuck tasks: a holder's progress reports, and the monitor's stuck duty
(plain functions over a ``Db``; docs/guardrails.md).

A task in progress has a stuck deadline (``stuck_at``) while a progress limit applies
to it (its own ``progress_timeout``, else the cluster's): its claim sets it, each
progress report moves it on (the rule ``progress_deadline`` of queries.sql, which is
``deadlines.progress_deadline``). The monitor reads the earliest one from an index
head (``stuck_deadline``) and acts on the tasks past it (``act_on_stuck``) by the
cluster's ``stuck_action``: flag, requeue or fail.
"""

from __future__ import annotations

from typing import Any

from corral.backoff import retry_ready_at
from corral.model import Event, Task
from corral.store import sqlusage
from corral.store.rows import Tx, task_from_row
from corral.store.sqldb import Db, enqueue, refuse
from corral.store.sqltasks import end_dependents

__all__ = ["act_on_stuck", "report_progress", "stuck_count", "stuck_deadline"]

_BATCH = 100  # stuck tasks the monitor handles per transaction


def report_progress(
    db: Db,
    task_id: int,
    node_id: str,
    epoch: int | None,
    note: str | None,
    now: float,
    usage: dict[str, Any] | None = None,
) -> Task:
    """Record progress on ``task_id`` held by ``node_id`` (at ``epoch`` when given):
    its deadline moved on, and a task flagged stuck no longer is (a ``task_unstuck``
    event). Refused like a completion when the node does not hold it at that epoch."""
    with db.write() as tx:
        # Node row, then its task: the order every transaction locks them in.
        tx.one("node_live_for_update", id=node_id)
        row = tx.one("task_held_for_update", id=task_id, node_id=node_id)
        if row is None or (epoch is not None and row["epoch"] != epoch):
            refuse(tx, task_id, node_id, epoch)
        new = tx.one("task_progress", id=task_id, note=note, now=now)
        if usage is not None:
            sqlusage.record(db, tx, node_id, task_id, usage, now)
        if row["stuck_since"] is not None:
            db.event(
                tx,
                now,
                "task_unstuck",
                node_id,
                task_id,
                epoch=row["epoch"],
                stuck_seconds=round(now - row["stuck_since"], 3),
            )
        return task_from_row(new)


def stuck_deadline(db: Db) -> float | None:
    """The earliest stuck deadline of a task in progress (None: none has one)."""
    row = db.read_row("stuck_head")
    return None if row is None else float(row[0])


def stuck_count(db: Db) -> int:
    """How many tasks in progress are flagged stuck."""
    with db.read() as tx:
        return int(tx.one("tasks_stuck_count")["n"])


def _locked(tx: Tx, task_id: int, holder: str) -> Any:
    """Task ``task_id``'s row locked after its holder's node row (the order every
    transaction takes them in), or None when it is no longer ``holder``'s task in
    progress past a deadline (the double-check)."""
    tx.one("node_live_for_update", id=holder)
    row = tx.one("task_for_update", id=task_id)
    if row is None or row["status"] != "in_progress" or row["assigned_to"] != holder:
        return None
    return row if row["stuck_at"] is not None else None


def act_on_stuck(db: Db, now: float) -> list[Event]:
    """The tasks in progress whose stuck deadline is at or before ``now``, handled by
    the cluster's ``stuck_action``: ``flag`` (``stuck_since`` set, the holder keeps
    it), ``requeue`` (taken back at a new epoch while attempts remain: pending, or
    scheduled after its ``retry_backoff`` as any failed attempt; else failed) or
    ``fail``; each a ``task_stuck`` event naming the action and outcome."""
    with db.capturing() as events, db.write_redone() as tx:
        action = db.settings_in(tx).stuck_action
        for found in tx.all("tasks_stuck", now=now, limit=_BATCH):
            row = _locked(tx, found["id"], found["assigned_to"])
            if row is None or row["stuck_at"] > now:
                continue
            _act(db, tx, row, action, now)
    return events


def _act(db: Db, tx: Tx, row: Any, action: str, now: float) -> None:
    task_id, holder = row["id"], row["assigned_to"]
    since = row["stuck_at"]
    last = row["progress_at"] if row["progress_at"] is not None else row["claimed_at"]
    silent = round(since - last, 3)
    error = f"stuck: no progress for {silent:g}s (holder {holder}, epoch {row['epoch']})"
    outcome = "in_progress"
    ready_at = retry_ready_at(row["retry_backoff"], row["attempts"], now)
    if action == "requeue" and row["attempts"] < row["max_attempts"]:
        if ready_at is not None and ready_at > now:
            new = tx.one(
                "task_take_back_later", id=task_id, error=error, ready_at=ready_at, now=now
            )
            outcome = "scheduled"
        else:
            new = tx.one("task_take_back", id=task_id, error=error, now=now)
            enqueue(tx, task_id, row["sort_key"], row["created_at"], row["roles"])
            outcome = "pending"
    elif action in ("requeue", "fail"):
        tx.one("task_fail_final", id=task_id, error=error, now=now)
        outcome = "failed"
    else:
        new = tx.one("task_flag_stuck", id=task_id, now=now)
    if outcome != "in_progress":
        tx.run("node_drop_task", node_id=holder, id=task_id, now=now)
        # The node it was taken from, as the monitor's other take-backs record it.
        tx.run("task_taken_from", id=task_id, node_id=holder)
    data: dict[str, Any] = {
        "action": action,
        "outcome": outcome,
        "epoch": row["epoch"],
        "attempt": row["attempts"],
        "stuck_since": since,
        "silent_seconds": silent,
    }
    if outcome in ("pending", "scheduled"):
        data["new_epoch"] = new["epoch"]
    if outcome == "scheduled":
        data["ready_at"] = new["ready_at"]
    db.event(tx, now, "task_stuck", holder, task_id, **data)
    if outcome == "failed":  # for good: the tasks waiting on it fail with it
        end_dependents(db, tx, task_id, "failed", error, now)
