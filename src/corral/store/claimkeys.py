"""Claims' idempotency keys: what a keyed claim took, for the same claim sent again.

A client that lost a claim's answer (``corral serve`` killed after the commit, before
its reply) sends the claim again with the same key (``corral.outage``). The claim
recorded the key and what it took in its own transaction (table ``claim_keys``), so
the repeat answers from that record instead of taking a second task that the node
would hold without knowing it. Keys are kept ``CLAIM_KEY_SECONDS``, longer than any
client's ``outage_tolerance``; keyed claims prune the expired ones. Each dialect
records a key its own way (SQLite in a statement after the claim's, PostgreSQL inside
the claim's one statement); the answer to a claim sent again is read the same way.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral.model import Task
from corral.store.rows import task_from_row

__all__ = ["CLAIM_KEY_SECONDS", "PRUNE_EVERY", "answer"]

CLAIM_KEY_SECONDS = 600.0  # corral.outage.MAX_OUTAGE_TOLERANCE is the same
PRUNE_EVERY = 10.0  # seconds between a store's drops of expired keys (SQLite)


class _Tx(Protocol):
    def one(self, name: str, **params: Any) -> Any: ...


def answer(tx: _Tx, node_id: str, key: str) -> tuple[Task | None, Task | None] | None:
    """What the claim sent with ``key`` took, as its answer now: (the task it finished
    for a complete_and_claim, the task it claimed if ``node_id`` still holds it at the
    claim's epoch, else None); None when no claim was made with ``key``."""
    row = tx.one("claim_key_get", node_id=node_id, key=key)
    if row is None:
        return None
    done = None
    if row["done_id"] is not None:
        found = tx.one("task_get", id=row["done_id"])
        done = None if found is None else task_from_row(found)
    held = None
    if row["task_id"] is not None:
        t = tx.one("task_get", id=row["task_id"])
        if (
            t is not None
            and t["status"] == "in_progress"
            and t["assigned_to"] == node_id
            and t["epoch"] == row["epoch"]
        ):
            held = task_from_row(t)
    return done, held
