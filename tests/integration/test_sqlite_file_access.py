"""No code path of corral opens its database file, WAL or shared-memory file in a way
that can drop the SQLite locks of the process's own connections.

SQLite's locks on the database file are POSIX advisory locks: closing any descriptor
of the file in a process drops all of that process's locks on it. docs/core.md ("What
a corral process must never do to its database file") names the places in corral that
open these files and why each is safe; this module fails when another one appears:

- by reading the source: every ``sqlite3.connect`` in the package, and every
  ``open``/``os.open`` in the store package, is either a named safe place or one that
  opens a file of its own (listed here with the file);
- by running corral: ``corral serve`` (one worker and two), ``corral up`` with the
  example fleet (its pool's workers included), ``corral monitor``, the CLI and an
  embedded client at ``synchronous=FULL``, each process under an audit hook
  (``sitecustomize``) that records every ``open``, ``os.open`` and
  ``sqlite3.connect`` of the database, its WAL or its ``-shm``, with the corral
  function that made it. Each must come from a named place; an ``open`` of the
  database or ``-shm`` file must also be an exclusive create (``O_EXCL``: a new file
  or no descriptor at all), since that alone cannot close a descriptor of a file a
  connection has open."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import corral
from tests.support.backends.http import free_port
from tests.support.fleet_up import ROOT, Up, copy_example, corral_cmd, env, wait_for
from tests.support.wal_procs import Served

SRC = ROOT / "src" / "corral"
DOC = ROOT / "docs" / "core.md"

# open()/os.open() in the store package that open a file of their own, never the
# database, its WAL or its -shm (what each opens).
OWN_FILES = {
    "corral.store.sqlite.writer.lock_holder": "/proc/locks",
    "corral.store.sqlite.writer._stopped": "/proc/<pid>/stat",
    "corral.store.sqlite.writer._WriterLock.__init__": "<database>-lock (flock)",
    "corral.store.sqlite.leader.MonitorLeader.try_lead": "<database>-monitor (flock)",
    "corral.store.sqlite.synced._SyncedCommits.__init__": "<database>-sync (flock, mmap)",
    "corral.store.signal.Doorbell.listen": "its own FIFO in <database>-wait/",
    "corral.store.signal.Doorbell.ring": "the FIFOs in <database>-wait/",
}


def documented_safe() -> set[str]:
    """The places docs/core.md names as safe openers of the database's files."""
    text = DOC.read_text()
    start = text.index("The places in corral that open the database file")
    end = text.index("corral's own lock files", start)
    return set(re.findall(r"`(corral\.[A-Za-z_.]+)`", text[start:end]))


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


_CALLEES = {("sqlite3", "connect"), ("os", "open"), ("io", "open")}


def _calls(path: Path) -> list[tuple[str, str]]:
    """``(qualified function, callee)`` of each call in ``path`` of ``sqlite3.connect``,
    ``os.open``, ``io.open`` or ``open``."""
    found: list[tuple[str, str]] = []
    module = _module_name(path)

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                f = child.func
                callee = None
                if isinstance(f, ast.Name) and f.id == "open":
                    callee = "open"
                elif (
                    isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Name)
                    and (f.value.id, f.attr) in _CALLEES
                ):
                    callee = f"{f.value.id}.{f.attr}"
                if callee is not None:
                    found.append((".".join([module, *scope]), callee))
            visit(child, scope)

    visit(ast.parse(path.read_text()), [])
    return found


def test_the_docs_name_the_safe_places_and_each_exists() -> None:
    safe = documented_safe()
    assert len(safe) >= 4
    every = {site for path in SRC.rglob("*.py") for site, _ in _calls(path)}
    assert safe <= every, f"named in docs/core.md but making no such call: {safe - every}"


def test_every_sqlite_connection_in_the_package_is_a_named_place() -> None:
    connects = {
        site
        for path in SRC.rglob("*.py")
        for site, callee in _calls(path)
        if callee == "sqlite3.connect"
    }
    assert connects, "the scan found no sqlite3.connect at all"
    assert connects <= documented_safe(), (
        f"sqlite3.connect in {sorted(connects - documented_safe())}: a second connection"
        " to the database in a process that holds the store must be named safe in"
        " docs/core.md"
    )


def test_every_file_open_in_the_store_is_a_named_place_or_a_file_of_its_own() -> None:
    opens = {
        site
        for path in (SRC / "store").rglob("*.py")
        for site, callee in _calls(path)
        if callee != "sqlite3.connect"
    }
    unknown = opens - documented_safe() - set(OWN_FILES)
    assert not unknown, (
        f"open() or os.open() in {sorted(unknown)}: if it can open the database, its WAL"
        " or its -shm, name it safe in docs/core.md (and say why); else list the file it"
        " opens in OWN_FILES"
    )
    assert set(OWN_FILES) <= opens, f"stale OWN_FILES entries: {set(OWN_FILES) - opens}"


# --- the same, seen from running processes --------------------------------------------

_AUDIT = r"""
import os, sys

def _install():
    log = os.environ.get("CORRAL_OPEN_AUDIT")
    db = os.environ.get("CORRAL_OPEN_AUDIT_DB")
    if not log or not db:
        return
    db = os.path.realpath(db)
    watched = {db: "db", db + "-wal": "wal", db + "-shm": "shm"}
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def site():
        f = sys._getframe(2)
        first = None
        while f is not None:
            name = f.f_globals.get("__name__", "?")
            where = f"{name}.{f.f_code.co_qualname}"
            first = first or where
            if name == "corral" or name.startswith("corral."):
                return where
            f = f.f_back
        return f"outside corral: {first}"

    def hook(event, args):
        if event not in ("open", "sqlite3.connect"):
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or path == ":memory:":
            return
        which = watched.get(os.path.realpath(path))
        if which is None:
            return
        flags = args[2] if event == "open" and len(args) > 2 and args[2] is not None else 0
        excl = int(bool(flags & os.O_EXCL) and bool(flags & os.O_CREAT))
        line = f"{os.getpid()}\t{event}\t{which}\t{excl}\t{site()}\n"
        os.write(out, line.encode())

    sys.addaudithook(hook)

_install()
del _install
"""


def _audited(tmp_path: Path, db: Path) -> dict[str, str]:
    hooks = tmp_path / "audit-site"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(_AUDIT)
    path = os.pathsep.join(p for p in (str(hooks), os.environ.get("PYTHONPATH")) if p)
    return {
        "PYTHONPATH": path,
        "CORRAL_OPEN_AUDIT": str(tmp_path / "opens.log"),
        "CORRAL_OPEN_AUDIT_DB": str(db),
    }


def _records(tmp_path: Path) -> list[tuple[str, str, str, bool, str]]:
    log = tmp_path / "opens.log"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        pid, event, which, excl, site = line.split("\t")
        out.append((pid, event, which, excl == "1", site))
    return out


def _unsafe(records: list[tuple[str, str, str, bool, str]]) -> list[str]:
    safe = documented_safe()
    bad = []
    for pid, event, which, excl, site in records:
        if site not in safe:
            bad.append(f"{site} ({event} of the {which} file, process {pid}): not named safe")
        elif event == "open" and which in ("db", "shm") and not excl:
            bad.append(f"{site} opened the existing {which} file (process {pid})")
    return bad


def _run_ok(cmd: list[str], extra: dict[str, str], cwd: Path | None = None) -> None:
    done = subprocess.run(
        cmd, env=env(**extra), cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{cmd}: {done.stderr[-1000:]}"


_EMBEDDED = """
import sys, corral
url = sys.argv[1]
first = corral.connect(url)
second = corral.connect(url)           # a second client while the first is open
first.register_node("emb-1", "developer")
t = first.add_task("through the first")
c = second.claim_best_task("emb-1", "developer")
second.complete_task(c.id, "emb-1", epoch=c.epoch)
for i in range(250):                   # past a checkpoint (every 200 commits)
    first.add_task(f"more {i}")
second.close()
first.close()
"""


def test_running_corral_opens_its_database_files_only_in_the_named_places(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    url = f"sqlite:///{db}"
    extra = _audited(tmp_path, db)

    # An embedded client with two stores, at FULL (the group commit opens the WAL).
    _run_ok([sys.executable, "-c", _EMBEDDED, f"{url}?synchronous=FULL"], extra)
    # The CLI.
    _run_ok(corral_cmd("--url", url, "task", "add", "from the CLI"), extra)
    _run_ok(corral_cmd("--url", url, "status"), extra)

    # corral serve: writes, reads, metrics; then SIGTERM.
    served = Served(db, free_port(), **extra)
    try:
        served.client.register_node("srv-1", "developer")
        for i in range(5):
            served.client.add_task(f"over HTTP {i}")
        task = served.client.claim_best_task("srv-1", "developer")
        served.client.complete_task(task.id, "srv-1", epoch=task.epoch)
        served.client.read_state()
    finally:
        served.stop(signal.SIGTERM)

    # corral serve --workers 2.
    port = free_port()
    workers = subprocess.Popen(
        corral_cmd("--url", url, "serve", "--port", str(port), "--workers", "2"),
        env=env(CORRAL_TOKEN=Served.TOKEN, **extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = corral.connect(f"http://127.0.0.1:{port}", token=Served.TOKEN)

        def answers() -> bool:
            try:
                client.add_task("to a worker")
            except corral.CorralError:
                return False
            return True

        wait_for(answers, 60, "corral serve --workers 2")
        client.close()
    finally:
        workers.send_signal(signal.SIGTERM)
        workers.wait(30)

    # corral monitor, with a dead node's lease to recover.
    c = corral.connect(url)
    c.register_node("silent", "developer", heartbeat_interval=0.2)
    c.add_task("held by the silent")
    c.claim_best_task("silent", "developer")
    c.close()
    monitor = subprocess.Popen(
        corral_cmd("--url", url, "monitor", "--max-sleep", "0.1"),
        env=env(**extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def recovered() -> bool:
            r = corral.connect(url)
            try:
                return bool([e for e in r.events(0, 10_000) if e.kind == "lease_recovered"])
            finally:
                r.close()

        wait_for(recovered, 30, "the monitor's recovery")
    finally:
        monitor.send_signal(signal.SIGTERM)
        monitor.wait(30)

    records = _records(tmp_path)
    sites = {site for *_, site in records}
    # The hook sees what it should: the named places themselves were recorded.
    assert "corral.store.sqlite.store.SQLiteStore.__init__" in sites
    assert "corral.store.sqlite.synced._SyncedCommits._sync" in sites
    assert "corral.store.sqlite.checkpoint._Checkpointer._run" in sites
    assert len({pid for pid, *_ in records}) >= 6  # every process above
    assert _unsafe(records) == []


def test_corral_up_and_its_workers_open_the_database_files_only_in_the_named_places(
    tmp_path: Path,
) -> None:
    copy_example(tmp_path)
    db = tmp_path / ".corral" / "corral.db"
    up = Up(tmp_path, **_audited(tmp_path, db))
    try:
        wait_for(lambda: up.done() == 12, 120, "the example fleet's 12 tasks")
    finally:
        up.stop()
    records = _records(tmp_path)
    assert "corral.store.sqlite.store.SQLiteStore.__init__" in {s for *_, s in records}
    assert _unsafe(records) == []
