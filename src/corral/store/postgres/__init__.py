"""The shared store: PostgreSQL through psycopg 3, by concern.

- ``store``: ``PostgresStore``, the domain operations' dialect and the hot path
  (claim, complete, bulk add as single statements);
- ``session``: the pool and how each session is set up (timeouts, keepalives), the
  transactions over named SQL, the driver errors as ``StoreUnavailableError``, the
  migrations;
- ``dedicated``: the sessions outside the pool: LISTEN for the wake-ups of waiting
  claims, the monitor leader's advisory lock.
"""

from __future__ import annotations

from corral.store.postgres.session import IDLE_IN_TRANSACTION_TIMEOUT
from corral.store.postgres.store import PostgresStore

__all__ = ["IDLE_IN_TRANSACTION_TIMEOUT", "PostgresStore"]
