"""The shared store: PostgreSQL through psycopg 3 (``store``)."""

from __future__ import annotations

from corral.store.postgres.store import IDLE_IN_TRANSACTION_TIMEOUT, PostgresStore

__all__ = ["IDLE_IN_TRANSACTION_TIMEOUT", "PostgresStore"]
