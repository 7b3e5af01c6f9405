"""The board's tasks: adding, reading, failing and releasing them, the operator's
cancel and requeue (one task or every task a filter matches), and the helpers the
other capabilities share (a held task back to pending, a holder's leases handed
back), and tasks with time and order: a task not ready yet (``scheduled`` until its
``ready_at``, ``blocked`` on its dependencies) is outside the claim's indexes; the
monitor makes scheduled tasks pending at their time (``make_ready``) and takes runs
past their timeout back (``time_out``), and a dependency's completion releases its
dependents in the completion's transaction (the schema's trigger
``tasks_release_dependents``). Plain functions over a ``Db``; the claim and the
completion are the adapters' own (their hot path)."""

from __future__ import annotations

from typing import Any

from corral import defaults, lifecycle, scoring
from corral.backoff import retry_ready_at
from corral.errors import ConflictError, InvalidInputError, NotFoundError
from corral.model import Event, Node, Settings, Task, TaskBatch
from corral.store import sqlusage
from corral.store.base import TaskMatch, TaskSpec
from corral.store.rows import Tx, task_from_row
from corral.store.sqldb import Db, dequeue, enqueue, refuse

__all__ = [
    "act_on_task",
    "act_on_tasks",
    "add_tasks",
    "fail",
    "get_task",
    "insert_task",
    "list_tasks",
    "make_ready",
    "ordered",
    "reindex_roles",
    "release_all",
    "release_claim",
    "requeue",
    "time_out",
    "with_progress_timeouts",
]

_BATCH = 100  # tasks a monitor duty handles per transaction
_LOCKED_RETRY = 0.05  # as sqlduties.LOCKED_RETRY: a skipped locked row, seen again then


def requeue(
    db: Db,
    tx: Tx,
    row: Any,
    now: float,
    *,
    kind: str,
    error: str,
    counts: bool,
    backs_off: bool | None = None,
    **data: Any,
) -> Task:
    """Return a held task to pending, or fail it when it has used its attempts
    and ``counts`` (a lost lease counts; a voluntary release does not). A failed
    attempt (``backs_off``, by default when it ``counts``) of a task with a
    ``retry_backoff`` is scheduled instead: claimable again at
    ``backoff.retry_ready_at``. A task failed for good fails its dependents."""
    if counts and row["attempts"] >= row["max_attempts"]:
        new = tx.one("task_fail_final", id=row["id"], error=error, now=now)
        db.event(tx, now, kind, row["assigned_to"], row["id"], outcome="failed", **data)
        end_dependents(db, tx, row["id"], "failed", error, now)
        return task_from_row(new)
    backs_off = counts if backs_off is None else backs_off
    at = retry_ready_at(row["retry_backoff"], row["attempts"], now) if backs_off else None
    if at is not None and at > now:
        new = tx.one("task_schedule", id=row["id"], ready_at=at, error=error or None, now=now)
        db.event(
            tx, now, kind, row["assigned_to"], row["id"], outcome="scheduled", ready_at=at, **data
        )
    else:
        new = tx.one("task_requeue", id=row["id"], error=error or None, now=now)
        enqueue(tx, row["id"], row["sort_key"], row["created_at"], row["roles"])
        db.event(tx, now, kind, row["assigned_to"], row["id"], outcome="pending", **data)
    return task_from_row(new)


def end_dependents(db: Db, tx: Tx, task_id: int, status: str, reason: str, now: float) -> list[int]:
    """Task ``task_id`` ended for good (``status`` failed or cancelled): every task
    blocked on it, and on those in turn, ends the same way, its error naming the
    dependency and ``reason``; an event each (``task_failed`` or ``task_cancelled``
    with ``dependency``). Returns their ids."""
    ended: list[int] = []
    todo = [task_id]
    while todo:
        dep = todo.pop()
        for row in tx.all("tasks_waiting_on", id=dep):
            error = f"dependency task {dep} {status}" + (f": {reason}" if reason else "")
            new = tx.one("task_end_blocked", id=row["id"], status=status, error=error, now=now)
            if new is None:
                continue
            db.event(
                tx,
                now,
                f"task_{status}",
                None,
                row["id"],
                outcome=status,
                dependency=dep,
                was="blocked",
                reason=error,
            )
            todo.append(row["id"])
            ended.append(row["id"])
    return ended


def ordered(spec: TaskSpec) -> bool:
    """Whether ``spec`` has time or order (a timeout, a backoff, a not-before time or
    dependencies): added by ``insert_task``, one by one."""
    return (
        spec.timeout is not None
        or spec.retry_backoff is not None
        or spec.not_before is not None
        or bool(spec.depends_on)
    )


def _set_order(tx: Tx, row: Any, spec: TaskSpec, now: float) -> Any:
    """Give the just-inserted task ``row`` its time and order: each dependency not
    done yet counts it as a dependent (locked, so its completion sees the edge); its
    status ``blocked`` while any is not done, else ``scheduled`` until a future
    ``not_before``, else ``pending``. An unknown dependency is ``NotFoundError``, a
    failed or cancelled one ``ConflictError``, the task itself ``InvalidInputError``
    (a cycle: a task can name only tasks that exist before it, so no other cycle can
    be made); the row as it is now."""
    waiting = 0
    for dep in sorted(spec.depends_on):  # locked in id order: two adds never deadlock
        if dep == row["id"]:
            raise InvalidInputError(
                f"depends_on names task {dep}, the task itself: a dependency cycle",
                field="depends_on",
            )
        if tx.one("task_dep_add", dep_id=dep) is None:
            found = tx.one("task_get", id=dep)
            if found is None:
                raise NotFoundError(
                    f"depends_on names unknown task {dep} (a task can depend only on tasks"
                    " already on the board)",
                    field="depends_on",
                )
            if found["status"] != "done":
                raise ConflictError(
                    f"depends_on names task {dep}, which is {found['status']}: it will never"
                    " be done",
                    field="depends_on",
                )
            continue  # done already: nothing to wait for
        tx.run("task_dep_insert", dep_id=dep, task_id=row["id"])
        waiting += 1
    ready_at = spec.not_before if spec.not_before is not None and spec.not_before > now else None
    status = "blocked" if waiting else "scheduled" if ready_at is not None else "pending"
    return tx.one(
        "task_set_order",
        id=row["id"],
        timeout=spec.timeout,
        retry_backoff=spec.retry_backoff,
        not_before=spec.not_before,
        depends_on=" ".join(str(d) for d in spec.depends_on),
        ready_at=ready_at,
        waiting_on=waiting,
        status=status,
    )


def release_all(
    db: Db, tx: Tx, node: Any, now: float, *, kind: str, counts: bool, **data: Any
) -> list[Task]:
    return [
        requeue(
            db,
            tx,
            row,
            now,
            kind=kind,
            error=f"{kind}: holder {node['id']} {data['reason']}",
            counts=counts,
            attempt=row["attempts"],
            epoch=row["epoch"],
            **data,
        )
        for row in tx.all("tasks_held_by_for_update", node_id=node["id"])
    ]


def insert_task(db: Db, tx: Tx, spec: TaskSpec, s: Settings, now: float) -> Any:
    """Put one task on the board (its roles by ``scoring.task_roles``, its role
    heads, its ``task_added`` event); the inserted row."""
    roles = scoring.task_roles(spec.title, spec.description, s.role_keywords, spec.role)
    key = scoring.sort_key(spec.priority, now)
    row = tx.one(
        "task_insert",
        title=spec.title,
        description=spec.description,
        priority=spec.priority,
        role=spec.role,
        roles=roles,
        max_attempts=spec.max_attempts or s.max_attempts,
        sort_key=key,
        now=now,
    )
    if ordered(spec):
        row = _set_order(tx, row, spec, now)
    if row["status"] == "pending":
        enqueue(tx, row["id"], key, now, roles)
        db.event(
            tx, now, "task_added", None, row["id"], priority=spec.priority, roles=roles.split()
        )
    else:
        db.event(
            tx,
            now,
            "task_added",
            None,
            row["id"],
            priority=spec.priority,
            roles=roles.split(),
            status=row["status"],
            ready_at=row["ready_at"],
            depends_on=list(spec.depends_on),
        )
    if spec.progress_timeout is not None:
        row = tx.one("task_set_progress_timeout", id=row["id"], seconds=spec.progress_timeout)
    return row


def with_progress_timeouts(tx: Tx, specs: list[TaskSpec], rows: list[Any]) -> list[Any]:
    """``rows`` (the tasks of ``specs``, inserted in order) with the progress limits
    their specs give set: the rows as they are now."""
    return [
        row
        if spec.progress_timeout is None
        else tx.one("task_set_progress_timeout", id=row["id"], seconds=spec.progress_timeout)
        for spec, row in zip(specs, rows, strict=True)
    ]


def reindex_roles(db: Db, tx: Tx, settings: Settings) -> None:
    tx.run("ready_clear")
    for row in tx.all("tasks_pending_all"):
        roles = scoring.task_roles(
            row["title"], row["description"], settings.role_keywords, row["role"]
        )
        tx.run("task_set_roles", id=row["id"], roles=roles)
        enqueue(tx, row["id"], row["sort_key"], row["created_at"], roles)
    for row in tx.all("tasks_not_ready_all"):  # their role heads come when they are ready
        roles = scoring.task_roles(
            row["title"], row["description"], settings.role_keywords, row["role"]
        )
        tx.run("task_set_roles", id=row["id"], roles=roles)


def add_tasks(db: Db, specs: list[TaskSpec], now: float) -> list[Task]:
    with db.write() as tx:
        s = db.settings_in(tx)
        return [task_from_row(insert_task(db, tx, spec, s, now)) for spec in specs]


def get_task(db: Db, task_id: int) -> Task:
    with db.read() as tx:
        row = tx.one("task_get", id=task_id)
    if row is None:
        raise NotFoundError(f"unknown task {task_id}", field="task_id")
    return task_from_row(row)


def list_tasks(
    db: Db, status: str | None = None, assigned_to: str | None = None, limit: int = 100
) -> list[Task]:
    with db.read() as tx:
        if status is not None and assigned_to is not None:
            rows = tx.all(
                "tasks_by_status_holder", status=status, assigned_to=assigned_to, limit=limit
            )
        elif status == "pending":
            rows = tx.all("tasks_pending", limit=limit)
        elif status == "in_progress":
            rows = tx.all("tasks_in_progress", limit=limit)
        elif status is not None:
            rows = tx.all("tasks_by_status", status=status, limit=limit)
        elif assigned_to is not None:
            rows = tx.all("tasks_by_holder", assigned_to=assigned_to, limit=limit)
        else:
            rows = tx.all("tasks_all", limit=limit)
    return [task_from_row(r) for r in rows]


def fail(
    db: Db,
    task_id: int,
    node_id: str,
    epoch: int | None,
    error: str,
    retry: bool,
    now: float,
    usage: dict[str, Any] | None = None,
) -> Task:
    with db.write() as tx:
        # Node row, then its task: the order every transaction locks them in, so
        # a session stopped inside this one holds its node too (the reaper skips
        # that node rather than wait on the task).
        tx.one("node_live_for_update", id=node_id)
        row = tx.one("task_held_for_update", id=task_id, node_id=node_id)
        if row is None or (epoch is not None and row["epoch"] != epoch):
            refuse(tx, task_id, node_id, epoch)
        if usage is not None:
            sqlusage.record(db, tx, node_id, task_id, usage, now)
        if retry and row["attempts"] < row["max_attempts"]:
            task = requeue(
                db,
                tx,
                row,
                now,
                kind="task_failed",
                error=error,
                counts=False,
                backs_off=True,
                attempt=row["attempts"],
                error_text=error,
            )
        else:
            task = task_from_row(tx.one("task_fail_final", id=task_id, error=error, now=now))
            db.event(
                tx,
                now,
                "task_failed",
                node_id,
                task_id,
                outcome="failed",
                attempt=row["attempts"],
                error_text=error,
            )
            end_dependents(db, tx, task_id, "failed", error, now)
        tx.run(
            "node_done_with",
            node_id=node_id,
            id=task_id,
            now=now,
            stamp=1 - lifecycle.STAMP_FRACTION,
        )
        return task


def release_claim(
    db: Db, task_id: int, node_id: str, epoch: int, now: float, *, before: Node | None = None
) -> Task:
    with db.write() as tx:
        # Node row, then its task (the lock order of every transaction).
        tx.one("node_live_for_update", id=node_id)
        row = tx.one("task_held_for_update", id=task_id, node_id=node_id)
        if row is None or row["epoch"] != epoch:
            refuse(tx, task_id, node_id, epoch)
        new = tx.one("task_release_claim", id=task_id, now=now)
        enqueue(tx, task_id, row["sort_key"], row["created_at"], row["roles"])
        if before is None:
            tx.run(
                "node_done_with",
                node_id=node_id,
                id=task_id,
                now=now,
                stamp=1 - lifecycle.STAMP_FRACTION,
            )
        else:
            tx.run(
                "node_release_claim",
                id=node_id,
                task_id=task_id,
                status=before.status,
                idle_since=before.idle_since,
                current_task_id=before.current_task_id,
            )
        db.event(
            tx,
            now,
            "lease_released",
            node_id,
            task_id,
            reason="abandoned",
            outcome="pending",
            attempt=row["attempts"],
            epoch=row["epoch"],
        )
        return task_from_row(new)


# --- the operator's actions (cancel_task, requeue_task, and in bulk) ---------------------
# What a task is cancelled or requeued from: a cancel takes a task not ready yet too
# (scheduled or blocked).
_FROM = {
    "cancel": ("pending", "in_progress", "scheduled", "blocked"),
    "requeue": ("failed", "in_progress"),
}
_VERB = {"cancel": "cancelled", "requeue": "requeued"}


def _locked(tx: Tx, task_id: int) -> Any:
    """Task ``task_id``'s row, locked after its holder's node row when it is held (the
    order every transaction takes them in); ``NotFoundError`` when unknown."""
    for _ in range(3):
        row = tx.one("task_get", id=task_id)
        if row is None:
            raise NotFoundError(f"unknown task {task_id}", field="task_id")
        holder = row["assigned_to"] if row["status"] == "in_progress" else None
        if holder is not None:
            tx.one("node_live_for_update", id=holder)
        locked = tx.one("task_for_update", id=task_id)
        if locked["status"] != "in_progress" or locked["assigned_to"] == holder:
            return locked
    return locked  # claimed again meanwhile, three times: acted on as it is now


def _act(
    db: Db,
    tx: Tx,
    row: Any,
    action: str,
    actor: str,
    reason: str,
    now: float,
    ended: list[int] | None = None,
) -> Task:
    """Cancel or requeue the locked task ``row`` (its status one ``action`` applies
    to): the task's statement, its role heads, its holder let go, and the event. A
    cancel adds the ids of the tasks blocked on it, cancelled with it, to ``ended``."""
    task_id, was = row["id"], row["status"]
    holder = row["assigned_to"] if was == "in_progress" else None
    if action == "cancel":
        error = f"cancelled by {actor}" + (f": {reason}" if reason else "")
        new = tx.one("task_cancel", id=task_id, error=error, now=now)
        if was == "pending":
            dequeue(tx, task_id, row["sort_key"], row["created_at"], row["roles"])
        cascaded = end_dependents(db, tx, task_id, "cancelled", error, now)
        if ended is not None:
            ended.extend(cascaded)
    else:
        new = tx.one("task_requeue_fresh", id=task_id, now=now)
        enqueue(tx, task_id, row["sort_key"], row["created_at"], row["roles"])
    if holder is not None:
        tx.run("node_drop_task", node_id=holder, id=task_id, now=now)
    data: dict[str, Any] = {"actor": actor, "was": was, "epoch": new["epoch"]}
    if action == "cancel":
        data["reason"] = reason
    db.event(tx, now, f"task_{_VERB[action]}", holder or row["assigned_to"], task_id, **data)
    return task_from_row(new)


def act_on_task(db: Db, action: str, task_id: int, actor: str, reason: str, now: float) -> Task:
    """Cancel (``action`` "cancel") or requeue one task; ``ConflictError`` when its
    status is not one the action applies to (nothing changes)."""
    with db.write() as tx:
        row = _locked(tx, task_id)
        if row["status"] not in _FROM[action]:
            raise ConflictError(
                f"task {task_id} is {row['status']}: only a {' or '.join(_FROM[action])}"
                f" task can be {_VERB[action]}",
                field="task_id",
            )
        return _act(db, tx, row, action, actor, reason, now)


def act_on_tasks(
    db: Db,
    action: str,
    status: str | None,
    match: TaskMatch,
    actor: str,
    reason: str,
    dry_run: bool,
    now: float,
) -> TaskBatch:
    """Cancel or requeue every task matching ``match`` whose status the action applies
    to (``status``: only those of that one), in one transaction; with ``dry_run``,
    count them and change nothing."""
    statuses = (status,) if status is not None else _FROM[action]
    params = {
        **{f"s{i}": statuses[(i - 1) % len(statuses)] for i in range(1, 5)},
        "role": match.role,
        "priority": match.priority,
        "assigned_to": match.assigned_to,
        "title": match.title_contains,
        "created_before": match.created_before,
    }
    if dry_run:
        with db.read() as tx:
            ids = [r["id"] for r in tx.all("tasks_matching", **params)]
        return TaskBatch(count=len(ids), task_ids=ids[: defaults.MAX_BATCH_IDS], dry_run=True)
    done: list[int] = []
    ended: list[int] = []  # blocked tasks a cancel here cancelled with their dependency
    with db.write() as tx:
        for found in tx.all("tasks_matching", **params):
            if found["id"] in ended:  # matched, and cancelled already with its dependency
                done.append(found["id"])
                continue
            row = _locked(tx, found["id"])
            if row["status"] in statuses:  # still one the action applies to
                done.append(_act(db, tx, row, action, actor, reason, now, ended).id)
    return TaskBatch(count=len(done), task_ids=done[: defaults.MAX_BATCH_IDS], dry_run=False)


# --- the monitor's task duties (tasks with time and order) -------------------------------
def deadline_heads(db: Db) -> tuple[float | None, float | None]:
    """The earliest ``ready_at`` of a scheduled task and the earliest end of a run
    with a timeout (None: none), two index heads in one statement."""
    row = db.read_row("task_deadline_heads")
    assert row is not None  # scalar subqueries: always one row
    return row[0], row[1]


def make_ready(db: Db, now: float) -> list[Event]:
    """The scheduled tasks due at ``now`` made pending, with their role heads, in
    their claim order (their sort keys are unchanged); the commit wakes waiting
    claims (``task_make_pending`` is a wake query). A batch per call: the monitor
    comes back at once while the deadline is still past."""
    with db.capturing() as events, db.write_redone() as tx:
        found = tx.all("tasks_due", now=now, limit=_BATCH)
        for due in found:
            row = tx.one("task_make_pending", id=due["id"], now=now)
            if row is None:
                continue
            enqueue(tx, row["id"], row["sort_key"], row["created_at"], row["roles"])
            db.event(tx, now, "task_ready", None, row["id"], ready_at=due["ready_at"])
        # Due rows the query skipped, held by another session (PostgreSQL): come back
        # to them a little later rather than at once (sqlduties.LOCKED_RETRY).
        locked = len(found) < _BATCH and tx.one("tasks_due_left", now=now) is not None
        db.locked["ready"] = (now, now + _LOCKED_RETRY) if locked else None
    return events


def time_out(db: Db, now: float) -> list[Event]:
    """The runs past their timeout at ``now`` taken back from their holders (the
    holder's row locked, then the task's, and the deadline re-checked: the
    documents' double-check): ``requeue`` with ``kind`` ``task_timed_out`` (pending,
    or scheduled after its backoff, while attempts remain, else failed for good), the
    task at a new epoch, the holder let go (``taken_from`` records it); its next
    heartbeat naming the task has it in ``cancelled_tasks`` (one it neither holds nor
    finished), so its worker stops the run."""
    skipped = False
    with db.capturing() as events, db.write_redone() as tx:
        for due in tx.all("tasks_timed_out", now=now, limit=_BATCH):
            holder = due["assigned_to"]
            if tx.one("node_lock_skip_locked", id=holder) is None and tx.one(
                "node_live", id=holder
            ):
                # Another session holds the holder's row (PostgreSQL): never wait on
                # it; come back after _LOCKED_RETRY.
                skipped = True
                continue
            row = tx.one("task_held_for_update", id=due["id"], node_id=holder)
            if (
                row is None
                or row["epoch"] != due["epoch"]
                or row["timeout"] is None
                or row["claimed_at"] + row["timeout"] > now
            ):
                continue  # finished, or claimed again, meanwhile
            tx.run("task_taken_from", id=row["id"], node_id=holder)
            # A new epoch at once: the holder's late completion names the old one.
            tx.run("task_new_epoch", id=row["id"])
            requeue(
                db,
                tx,
                row,
                now,
                kind="task_timed_out",
                error=f"timed out: ran longer than its timeout of {row['timeout']:g}s"
                f" (holder {holder}, attempt {row['attempts']})",
                counts=True,
                attempt=row["attempts"],
                epoch=row["epoch"],
                new_epoch=row["epoch"] + 1,
                timeout=row["timeout"],
                ran_seconds=round(now - row["claimed_at"], 3),
            )
            tx.run("node_drop_task", node_id=holder, id=row["id"], now=now)
        db.locked["timeout"] = (now, now + _LOCKED_RETRY) if skipped else None
    return events
