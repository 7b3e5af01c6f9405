"""The spawn requests of ``SQLStore``: a pool in ``ask`` mode records the member it
wants; an operator or a manager agent accepts or declines it; the pool spawns an
accepted one and records the member it became. Each step is one transaction that
appends its event (``spawn_requested``, ``spawn_request_accepted``,
``spawn_request_declined``, ``spawn_request_withdrawn`` with its reason,
``spawn_request_fulfilled``) with the actor."""

from __future__ import annotations

from typing import Any

from corral.errors import InvalidInputError, NotFoundError
from corral.spawning import SpawnRequest
from corral.store.sqldb import Db

__all__ = [
    "decide_spawn_request",
    "fulfil_spawn_request",
    "request_spawn",
    "spawn_request_from_row",
    "spawn_requests",
]


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def spawn_request_from_row(row: Any) -> SpawnRequest:
    return SpawnRequest(
        id=int(row["id"]),
        pool=row["pool"],
        role=row["role"],
        status=row["status"],
        reason=row["reason"],
        requested_by=row["requested_by"],
        decided_by=row["decided_by"],
        member=row["member"],
        created_at=float(row["created_at"]),
        decided_at=_f(row["decided_at"]),
        spawned_at=_f(row["spawned_at"]),
    )


def request_spawn(
    db: Db, pool: str, role: str, reason: str, requested_by: str, now: float
) -> SpawnRequest:
    with db.write() as tx:
        row = tx.one(
            "spawn_request_insert",
            pool=pool,
            role=role,
            reason=reason,
            requested_by=requested_by,
            now=now,
        )
        req = spawn_request_from_row(row)
        db.event(
            tx,
            now,
            "spawn_requested",
            id=req.id,
            pool=pool,
            role=role,
            status="pending",
            actor=requested_by,
            reason=reason,
        )
        return req


def spawn_requests(db: Db, status: str | None, pool: str | None, limit: int) -> list[SpawnRequest]:
    with db.read() as tx:
        rows = tx.all("spawn_requests_list", status=status, pool=pool, limit=limit)
    return [spawn_request_from_row(r) for r in rows]


def decide_spawn_request(
    db: Db, request_id: int, status: str, actor: str, now: float, reason: str | None = None
) -> SpawnRequest:
    with db.write() as tx:
        row = tx.one("spawn_request_decide", id=request_id, status=status, actor=actor, now=now)
        if row is None:
            _refuse_decision(db, tx, request_id)
        req = spawn_request_from_row(row)
        why: dict[str, Any] = {} if reason is None else {"reason": reason}  # a withdrawal's
        db.event(
            tx,
            now,
            f"spawn_request_{status}",
            id=req.id,
            pool=req.pool,
            role=req.role,
            status=status,
            actor=actor,
            **why,
        )
        return req


def fulfil_spawn_request(db: Db, request_id: int, member: str, now: float) -> SpawnRequest:
    with db.write() as tx:
        row = tx.one("spawn_request_fulfil", id=request_id, member=member, now=now)
        if row is None:
            old = tx.one("spawn_request_get", id=request_id)
            if old is None:
                raise NotFoundError(f"no spawn request {request_id}", field="request_id")
            if old["status"] != "accepted":
                raise InvalidInputError(
                    f"spawn request {request_id} is {old['status']}, not accepted",
                    field="request_id",
                )
            raise InvalidInputError(
                f"spawn request {request_id} already spawned {old['member']}",
                field="request_id",
            )
        req = spawn_request_from_row(row)
        db.event(
            tx,
            now,
            "spawn_request_fulfilled",
            req.member,
            id=req.id,
            pool=req.pool,
            role=req.role,
            status=req.status,
            member=member,
        )
        return req


def _refuse_decision(db: Db, tx: Any, request_id: int) -> None:
    old = tx.one("spawn_request_get", id=request_id)
    if old is None:
        raise NotFoundError(f"no spawn request {request_id}", field="request_id")
    raise InvalidInputError(
        f"spawn request {request_id} is already {old['status']}", field="request_id"
    )
