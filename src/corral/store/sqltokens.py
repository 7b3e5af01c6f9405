"""The named tokens of ``SQLStore`` (``corral.tokens``): made, listed, revoked, and
looked up by hash on every request that presents one.

A token's row holds its SHA-256, never the token. Making and revoking one are one
transaction each that appends its event (``token_created``, ``token_revoked``) with
the token's name, role and actor. A lookup is one indexed read; it stamps the
token's last use at most once a minute (a second, rare write), so a busy token costs
no write per request.
"""

from __future__ import annotations

from typing import Any

from corral.errors import ConflictError, NotFoundError
from corral.store.sqldb import Db
from corral.tokens import NamedToken

__all__ = [
    "LAST_USED_RESOLUTION",
    "create_token",
    "list_tokens",
    "revoke_token",
    "token_by_hash",
    "token_by_id",
    "token_from_row",
]

LAST_USED_RESOLUTION = 60.0  # seconds: a token's last use is stamped at most this often


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def token_from_row(row: Any) -> NamedToken:
    return NamedToken(
        id=int(row["id"]),
        name=row["name"],
        role=row["role"],
        created_at=float(row["created_at"]),
        created_by=row["created_by"],
        last_used_at=_f(row["last_used_at"]),
    )


def create_token(
    db: Db, name: str, role: str, token_hash: str, actor: str, now: float
) -> NamedToken:
    with db.write() as tx:
        row = tx.one(
            "token_insert", token_name=name, role=role, hash=token_hash, now=now, actor=actor
        )
        if row is None:
            raise ConflictError(
                f"a token named {name!r} exists; revoke it first or choose another name",
                field="name",
            )
        token = token_from_row(row)
        db.event(tx, now, "token_created", name=name, role=role, actor=actor)
        return token


def list_tokens(db: Db) -> list[NamedToken]:
    with db.read() as tx:
        rows = tx.all("tokens_list")
    return [token_from_row(r) for r in rows]


def revoke_token(db: Db, name: str, actor: str, now: float) -> NamedToken:
    with db.write() as tx:
        row = tx.one("token_delete", token_name=name)
        if row is None:
            raise NotFoundError(f"no token named {name!r} (corral token list)", field="name")
        token = token_from_row(row)
        db.event(tx, now, "token_revoked", name=name, role=token.role, actor=actor)
        return token


def token_by_hash(db: Db, token_hash: str, now: float) -> NamedToken | None:
    with db.read() as tx:
        row = tx.one("token_by_hash", hash=token_hash)
    if row is None:
        return None
    token = token_from_row(row)
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        with db.write() as tx:
            tx.run("token_used", id=token.id, now=now, stale=now - LAST_USED_RESOLUTION)
    return token


def token_by_id(db: Db, token_id: int) -> NamedToken | None:
    with db.read() as tx:
        row = tx.one("token_by_id", id=token_id)
    return None if row is None else token_from_row(row)
