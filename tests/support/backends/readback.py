"""What another process reads from an SQLite file: the contract suite's HTTP backend
checks each write there (``tests/support/backends/http.py``).

``digest`` is the whole file's content (every table's rows, in order) as one hash.
Run as a process (``python -m tests.support.backends.readback``), it answers each line naming a
database file with that file's digest, read on a connection opened for it and closed
after it: what a new reader in another process sees."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys


def digest(conn: sqlite3.Connection) -> str:
    """A hash of every row of every table of ``conn``'s database, read in one
    transaction."""
    h = hashlib.sha256()
    conn.execute("BEGIN")
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        for table in tables:
            h.update(table.encode())
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                h.update(repr(row).encode())
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")  # it only read
    return h.hexdigest()


def file_digest(path: str) -> str:
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        return digest(conn)
    finally:
        conn.close()


def main() -> None:
    for line in sys.stdin:
        try:
            out = {"digest": file_digest(json.loads(line))}
        except sqlite3.Error as exc:
            out = {"error": str(exc)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
