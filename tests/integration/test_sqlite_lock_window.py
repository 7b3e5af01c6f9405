"""Issue 16 defect 2: while a corral process holds SQLite's write lock it runs corral's
store code and the standard library only (no user code), and does no I/O of its own
(SQLite's file access is C code and not audited; the synced commit's flush, waking
waiting claims and checkpoints come after the lock is released). The window in which a
stopped process blocks every writer is then only SQLite's own statements.

The workload runs in a child interpreter: the audit hook it installs cannot be
removed, so it must not outlive the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORKLOAD = r"""
import json, sys, threading
import corral
from corral.store.sqlite import writer as writer_module

url, synchronous = sys.argv[1], sys.argv[2]
held = threading.local()
audited, called = [], set()

def audit(event, args):
    if getattr(held, "on", False):
        audited.append(event)

def profile(frame, event, arg):
    if event == "call":  # (frame.f_code would be an audited access)
        name = frame.f_globals.get("__name__", "?")
        if name != "__main__":  # this harness's own wrappers
            called.add(name)
    elif event == "c_call":  # a builtin method's module is its object's type's
        owner = getattr(arg, "__self__", None)
        called.add(arg.__module__ or type(owner).__module__)

sys.addaudithook(audit)
client = corral.connect(f"{url}?synchronous={synchronous}")
lock = client.store._writer
acquire, release = lock.acquire, lock.release

def watched_acquire(*args, **kwargs):
    got = acquire(*args, **kwargs)
    if got:
        sys.setprofile(profile)
        held.on = True
    return got

def watched_release(*args, **kwargs):
    held.on = False
    sys.setprofile(None)
    return release(*args, **kwargs)

lock.acquire, lock.release = watched_acquire, watched_release

# Every kind of write a cluster makes.
c = client
c.configure(idle_timeout_seconds=600)
c.register_node("m", "bootstrap_manager", pid=1)
c.register_node("d", "developer", heartbeat_interval=5)
c.register_node("e", "developer")
c.heartbeat("d", health="ok", capacity_available=1, metrics={"cpu": 1.0}, note="x")
c.touch("e")
c.set_agent_status("e", "waiting")
c.add_task("one", priority="high", role="developer")
c.add_tasks([{"title": f"t{i}"} for i in range(5)])
got = c.claim_best_task("d", "developer")
c.complete_task(got.id, "d", epoch=got.epoch, result={"ok": True})
got = c.claim_best_task("d", "developer")
_, nxt = c.complete_and_claim(got.id, "d", "developer", epoch=got.epoch)
c.fail_task(nxt.id, "d", epoch=nxt.epoch, error="boom")
c.catch_up("d")
c.broadcast("hello", node_id="m")
c.alert("careful", node_id="m", reason="test")
c.record_metrics("d", {"cpu": 0.5})
c.report_processes("h", [{"agent": "a", "state": "RUNNING", "pid": 7}])
req = c.request_process_action("h", "a", "restart")
c.ack_process_action("h", req.seq, True, "done")
c.assess_workload()
c.terminate_node("e")
client.close()
print(json.dumps({"audited": sorted(set(audited)), "called": sorted(called)}))
"""

# What may run under the lock: corral's store and the pure modules it uses, and the
# standard library pieces a transaction needs. Nothing else (a worker's or a user's
# code, a network client, a logger's handlers).
ALLOWED = (
    "corral.store",
    "corral.model",
    "corral.lifecycle",
    "corral.scoring",
    "corral.assessment",
    "corral.health",
    "corral.types",
    "corral.errors",
    "corral.backoff",  # a failed attempt's retry time (pure)
    "corral.config",  # settings validated where they are written
    "builtins",
    "json",
    "_json",
    "sqlite3",
    "_sqlite3",
    "threading",
    "_thread",
    "contextlib",
    "dataclasses",
    "typing",
    "math",
    "collections",
    "abc",
    "enum",
    "time",
    "functools",
    "copy",
    "re",
    "_sre",
    "sys",  # the harness's own sys.setprofile(None) at the release
)


# Audit events that are not I/O: ``obj.__class__ = cls`` raises "object.__setattr__".
NOT_IO = frozenset({"object.__setattr__"})


def _allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def _run(tmp_path: Path, synchronous: str) -> dict[str, list[str]]:
    url = f"sqlite:///{tmp_path / f'corral-{synchronous}.db'}"
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, url, synchronous],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_write_lock_is_held_for_store_code_only_and_no_io(tmp_path: Path) -> None:
    for synchronous in ("NORMAL", "FULL"):
        seen = _run(tmp_path, synchronous)
        assert "corral.store.sqlite.store" in seen["called"], seen  # the watch works
        # No audited event but a record's class set (rows: a node record is built on
        # its class's slots, then given the class, which CPython audits): no I/O.
        io = [e for e in seen["audited"] if e not in NOT_IO]
        assert io == [], (synchronous, seen["audited"])
        foreign = [m for m in seen["called"] if not _allowed(m)]
        assert foreign == [], (synchronous, foreign)
