"""A full disk under the SQLite store: a clear, retryable error, nothing half-written,
and the store goes on once there is space again."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from tests.support import procs

CTX = mp.get_context("spawn")


def test_a_full_disk_is_a_retryable_error_that_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    out = CTX.Queue()
    child = CTX.Process(target=procs.write_until_the_disk_is_full, args=(str(path), out))
    child.start()
    report = out.get(timeout=120)
    child.join(30)
    assert "unexpected" not in report, report["unexpected"]
    # One call at a time: the call that does not fit is refused with the reason.
    assert report["alone_added"] >= 1
    # (EFBIG is SQLite's "disk I/O error"; ENOSPC its "database or disk is full".)
    assert report["alone_error"] == "SQLite store unavailable: disk I/O error; retry the call"
    assert report["tasks_after_alone"] == report["alone_added"]
    # In a group (corral serve's one commit per loop turn): no call runs outside the
    # group's transaction, and the failed commit keeps none of the group's writes.
    answers = report["group_answers"]
    failed = answers.index("unavailable: SQLite store unavailable: disk I/O error; retry the call")
    assert set(answers[:failed]) == {"ok"}
    assert set(answers[failed + 1 :]) == {
        "unavailable: SQLite store unavailable: an earlier call's error rolled this group's"
        " transaction back; retry the call"
    }
    assert report["group_error"].startswith("SQLite store unavailable: an error in the")
    assert report["tasks_after_group"] == report["alone_added"]
    # Space again: the same store takes writes, claims and completions.
    assert report["after"][1] == "done"
    assert report["tasks_at_end"] == report["alone_added"] + 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
