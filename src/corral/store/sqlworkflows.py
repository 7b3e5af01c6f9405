"""Workflow runs in ``SQLStore``: the hosts that serve each workflow, the handlers
(one per run) with their idle state, waits and checkpoints, and the events sent to
them. Hosts take their work (new runs, due resumes, events, releases) in one
transaction; a resume is one guarded UPDATE, so a released run resumes on one host.
"""

from __future__ import annotations

from typing import Any

from corral.errors import ConflictError, InvalidInputError, LeaseError, NotFoundError
from corral.store.rows import Tx, _dumps, _loads
from corral.store.sqldb import Db
from corral.workflows.idle import IdleRun, idle_transition, release_due
from corral.workflows.model import (
    FINISHED,
    Delivery,
    Handler,
    HandlerRun,
    WorkflowHost,
    WorkflowWork,
)

__all__ = [
    "HOST_WINDOW",
    "get_handler",
    "handler_from_row",
    "list_handlers",
    "release_handler",
    "report_handler",
    "request_release",
    "resume",
    "run_workflow",
    "send_event",
    "serve_workflows",
    "take_workflow_work",
]

HOST_WINDOW = 30.0
"""Seconds after its last poll that a host still counts as serving its workflows."""
_NO_BOUND = 1e18
_SLACK = 1e-3  # the SQL bound is looser than the rule; the rule decides


def handler_from_row(row: Any) -> Handler:
    return Handler(
        handler_id=row["handler_id"],
        workflow=row["workflow"],
        status=row["status"],
        host=row["host"],
        idle_since=row["idle_since"],
        active_waiters=list(_loads(row["waiters"]) or []),
        wake_at=row["wake_at"],
        result=_loads(row["result"]),
        error=row["error"],
        resident_reason=row["resident_reason"],
        resumes=int(row["resumes"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        released_at=row["released_at"],
        finished_at=row["finished_at"],
        release_requested_at=row["release_requested_at"],
    )


def _host_row(row: Any) -> WorkflowHost:
    return WorkflowHost(
        workflow=row["workflow"],
        host=row["host"],
        idle_release_after=row["idle_release_after"],
        seen_at=float(row["seen_at"]),
    )


def _handler(db: Db, tx: Tx, handler_id: str, query: str = "handler_get") -> Any:
    row = tx.one(query, handler_id=handler_id)
    if row is None:
        raise NotFoundError(f"unknown handler {handler_id}", field="handler_id")
    return row


def _owned(db: Db, tx: Tx, host: str, handler_id: str) -> Any:
    row = _handler(db, tx, handler_id, "handler_lock")
    if row["status"] != "running" or row["host"] != host:
        raise LeaseError(
            f"handler {handler_id} is {row['status']} on {row['host'] or 'no host'},"
            f" not running on {host}"
        )
    return row


def _wf_event(db: Db, tx: Tx, now: float, kind: str, row: Any, **data: Any) -> None:
    db.event(tx, now, kind, handler_id=row["handler_id"], workflow=row["workflow"], **data)


# --- hosts ------------------------------------------------------------------------
def serve_workflows(
    db: Db, host: str, workflows: list[tuple[str, float | None]], now: float
) -> list[WorkflowHost]:
    with db.write() as tx:
        tx.run("wf_hosts_clear", host=host)
        for name, release_after in workflows:
            tx.run(
                "wf_host_insert",
                workflow=name,
                host=host,
                idle_release_after=release_after,
                now=now,
            )
        tx.run("handlers_release_after", host=host)  # its runs follow its delays
        db.event(tx, now, "workflow_host", host=host, workflows=[n for n, _ in workflows])
        return [_host_row(r) for r in tx.all("wf_hosts_of", host=host)]


def take_workflow_work(db: Db, host: str, limit: int, now: float) -> WorkflowWork:
    with db.write() as tx:
        if not tx.run("wf_host_seen", host=host, now=now):
            raise NotFoundError(
                f"host {host} serves no workflow; call serve_workflows first", field="host"
            )
        runs = []
        for row in sorted(
            tx.all("handlers_claim", host=host, now=now, limit=limit),
            key=lambda r: (r["updated_at"], r["handler_id"]),
        ):
            resumed = row["checkpoint"] is not None
            _wf_event(
                db,
                tx,
                now,
                "workflow_resumed" if resumed else "workflow_started",
                row,
                host=host,
                restored=resumed,
            )
            runs.append(
                HandlerRun(
                    handler=handler_from_row(row),
                    start=_loads(row["start"]) or {},
                    checkpoint=_loads(row["checkpoint"]) if resumed else None,
                    release_after=row["release_after"],
                )
            )
        deliveries = sorted(
            (
                Delivery(
                    seq=int(r["seq"]),
                    handler_id=r["handler_id"],
                    event_type=r["event_type"],
                    data=_loads(r["data"]) or {},
                    sent_at=float(r["sent_at"]),
                )
                for r in tx.all("inbox_take", host=host, limit=limit)
            ),
            key=lambda d: d.seq,
        )
        pending = {d.handler_id for d in deliveries}
        release = [h for h in _release_due(db, tx, host, now) if h not in pending]
        return WorkflowWork(runs=runs, deliveries=deliveries, release=release, now=now)


def _release_due(db: Db, tx: Tx, host: str, now: float) -> list[str]:
    """``idle.release_due`` over the host's idle runs, read through the index: only
    the candidates (idle longer than the shortest delay any of them has, and the
    oldest beyond the cap), which give the function's answer on all of them."""
    settings = db.settings_in(tx)
    cap = settings.max_resident_idle
    total = int(tx.one("handlers_idle_count_on_host", host=host)["n"])
    if total == 0:
        return []
    delays = [settings.idle_release_after] + [
        float(r["idle_release_after"])
        for r in tx.all("wf_hosts_of", host=host)
        if r["idle_release_after"] is not None
    ]
    excess = max(0, total - cap)
    candidates = [
        IdleRun(
            r["handler_id"],
            float(r["idle_since"]),
            settings.idle_release_after
            if r["release_after"] is None
            else float(r["release_after"]),
            requested=r["release_requested_at"] is not None,
        )
        for r in tx.all(
            "handlers_idle_on_host",
            host=host,
            before=now - min(delays) + _SLACK,
            oldest=excess,
        )
    ]
    # The candidates hold the oldest ``excess`` runs: a cap lowered by the runs
    # left out keeps the same excess.
    return release_due(candidates, now, cap - (total - len(candidates)))


def report_handler(
    db: Db,
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
    with db.write() as tx:
        row = _owned(db, tx, host, handler_id)
        if state in ("idle", "busy"):
            since, change = idle_transition(row["idle_since"], state == "idle", now)
            tx.run(
                "handler_set_idle",
                handler_id=handler_id,
                idle_since=since,
                waiters=row["waiters"] if waiters is None else _dumps(waiters),
                wake_at=wake_at if state == "idle" else row["wake_at"],
                # an operator's request to release it lasts while it stays idle
                release_requested_at=None if since is None else row["release_requested_at"],
                now=now,
            )
            if change == "idle":
                _wf_event(db, tx, now, "workflow_idle", row, host=host)
            elif change == "resumed":
                _wf_event(db, tx, now, "workflow_resumed", row, host=host, restored=False)
        elif state == "resident":
            tx.run("handler_resident", handler_id=handler_id, reason=reason, now=now)
        else:
            assert state in FINISHED
            tx.run(
                "handler_finish",
                handler_id=handler_id,
                status=state,
                result=None if result is None else _dumps(result),
                error=error,
                now=now,
            )
            _wf_event(db, tx, now, "workflow_finished", row, host=host, status=state)
        return handler_from_row(_handler(db, tx, handler_id))


def release_handler(
    db: Db, host: str, handler_id: str, checkpoint: dict[str, Any], now: float
) -> Handler:
    with db.write() as tx:
        row = _owned(db, tx, host, handler_id)
        if row["idle_since"] is None:
            raise LeaseError(f"handler {handler_id} is not idle; only idle runs release")
        if tx.one("inbox_count", handler_id=handler_id)["n"]:
            raise LeaseError(f"handler {handler_id} has events to deliver; not released")
        tx.run(
            "handler_release",
            handler_id=handler_id,
            host=host,
            checkpoint=_dumps(checkpoint),
            now=now,
        )
        _wf_event(db, tx, now, "workflow_released", row, host=host, wake_at=row["wake_at"])
        return handler_from_row(_handler(db, tx, handler_id))


# --- the operator's hands on runs -----------------------------------------------------
def _where(row: Any) -> str:
    """A run's state in a refusal: ``running on h1, busy``, ``released``, ..."""
    if row["status"] != "running":
        return str(row["status"])
    if row["host"] is None:
        return "running, not yet taken by a host"
    if row["idle_since"] is None:
        return f"running on {row['host']}, busy"
    return f"running on {row['host']}, idle"


def request_release(db: Db, handler_id: str, actor: str, now: float) -> Handler:
    with db.write() as tx:
        row = _handler(db, tx, handler_id, "handler_lock")
        idle_on_host = (
            row["status"] == "running" and row["host"] is not None and row["idle_since"] is not None
        )
        if not idle_on_host:
            raise ConflictError(
                f"handler {handler_id} is {_where(row)}: only a run idle on a host can be released",
                field="handler_id",
            )
        if row["resident_reason"] is not None:
            raise ConflictError(
                f"handler {handler_id} is kept resident on {row['host']}"
                f" ({row['resident_reason']}): it cannot be released",
                field="handler_id",
            )
        if row["release_requested_at"] is not None:
            raise ConflictError(
                f"handler {handler_id}'s release was asked for already; its host"
                f" {row['host']} releases it at its next poll",
                field="handler_id",
            )
        tx.run("handler_request_release", handler_id=handler_id, now=now)
        _wf_event(db, tx, now, "workflow_release_requested", row, host=row["host"], actor=actor)
        return handler_from_row(_handler(db, tx, handler_id))


def resume(db: Db, handler_id: str, actor: str, now: float) -> Handler:
    with db.write() as tx:
        row = _handler(db, tx, handler_id, "handler_lock")
        if row["status"] != "released":
            raise ConflictError(
                f"handler {handler_id} is {_where(row)}: only a released run can be resumed",
                field="handler_id",
            )
        tx.run("handler_wake", handler_id=handler_id, now=now)
        _wf_event(db, tx, now, "workflow_resume_requested", row, actor=actor)
        return handler_from_row(_handler(db, tx, handler_id))


# --- callers ------------------------------------------------------------------------
def run_workflow(
    db: Db, handler_id: str, workflow: str, start: dict[str, Any], now: float
) -> Handler:
    with db.write() as tx:
        if tx.one("wf_host_live", workflow=workflow, since=now - HOST_WINDOW) is None:
            raise NotFoundError(f"no live host serves workflow {workflow}", field="workflow")
        tx.run(
            "handler_insert",
            handler_id=handler_id,
            workflow=workflow,
            start=_dumps(start),
            now=now,
        )
        return handler_from_row(_handler(db, tx, handler_id))


def get_handler(db: Db, handler_id: str) -> Handler:
    with db.read() as tx:
        return handler_from_row(_handler(db, tx, handler_id))


def send_event(
    db: Db, handler_id: str, event_type: str, data: dict[str, Any], now: float
) -> Handler:
    with db.write() as tx:
        row = _handler(db, tx, handler_id, "handler_lock")
        if row["status"] in FINISHED:
            raise InvalidInputError(
                f"handler {handler_id} is {row['status']}; it takes no more events",
                field="handler_id",
            )
        tx.run(
            "inbox_insert",
            handler_id=handler_id,
            event_type=event_type,
            data=_dumps(data),
            now=now,
        )
        tx.run("handler_wake", handler_id=handler_id, now=now)
        return handler_from_row(_handler(db, tx, handler_id))


def list_handlers(
    db: Db,
    *,
    status: str | None,
    idle: bool | None,
    idle_duration_gt: float | None,
    workflow: str | None,
    host: str | None,
    limit: int,
    now: float,
) -> list[Handler]:
    common = {"workflow": workflow, "host": host, "limit": limit}
    with db.read() as tx:
        if idle or idle_duration_gt is not None:
            if idle is False:
                return []  # not idle, yet idle for longer than something: nothing
            before = _NO_BOUND if idle_duration_gt is None else now - idle_duration_gt
            rows = tx.all("handlers_idle_list", status=status, before=before, **common)
        elif status is not None:
            busy = 1 if idle is False else None
            rows = tx.all("handlers_by_status", status=status, busy=busy, **common)
        else:
            rows = tx.all("handlers_all", busy=1 if idle is False else None, **common)
    return [handler_from_row(r) for r in rows]
