"""The embedded store: one SQLite file in WAL mode, by concern.

- ``store``: ``SQLiteStore``, its transactions and the hot path (claim, complete);
- ``writer``: the queue for SQLite's write lock among processes (``_WriterLock``) and
  who holds it;
- ``synced``: ``synchronous=FULL`` as a group commit among processes;
- ``checkpoint``: the background WAL checkpoint thread.
"""

from __future__ import annotations

from corral.store.base import WouldBlock
from corral.store.sqlite.store import TASK_COLUMNS, SQLiteStore

__all__ = ["TASK_COLUMNS", "SQLiteStore", "WouldBlock"]
