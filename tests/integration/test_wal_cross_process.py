"""Acknowledged writes on the embedded store survive other processes opening and
closing the file, and a ``kill -9`` after them.

SQLite's locks on the database file are POSIX advisory locks, dropped for the whole
process when any descriptor of that file in it is closed. ``corral serve`` (and so
``corral up``) once opened and closed the file while its first store had it open (a
second store's create-if-missing); its connections then held no lock, so the next
process to open and close the file thought itself the last connection, checkpointed
and deleted the WAL, and the server went on committing into a WAL with no name:
invisible to every other process and gone at its exit.

Each test here runs a real corral process and, between its acknowledged writes, has
other processes open and close the file in the three ordinary ways (``corral status``,
an embedded client, the ``sqlite3`` shell). Every acknowledged write must be visible
to a new reader (a separate process, a new connection per query) within 100 ms of its
acknowledgement, the WAL and shared-memory files must stay, and after ``kill -9`` of
the corral process every acknowledged write must be in the file. The monitor's test
guards its role: a lone ``corral monitor`` holds one store and did not lose writes
before the fix either. bench/wal_cross_process.py runs the same at 1,000 writes with
100 openings per trigger."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

import corral
from tests.support.backends.http import free_port
from tests.support.fleet_up import corral_cmd, env, wait_for
from tests.support.wal_procs import (
    TRIGGERS,
    VISIBLE_WITHIN,
    EmbeddedWriter,
    FreshReader,
    Served,
    Upped,
    Workload,
    interleave,
    missing,
    open_and_close,
    side_files,
)

WRITES = 90
OPENINGS = 9  # three of each trigger


def _check(process: Served | Upped | EmbeddedWriter, db: Path, seed: int) -> None:
    reader = FreshReader(db)
    try:
        work = Workload(process.client, seed=seed)
        run = interleave(work, reader, db, WRITES, OPENINGS, alive=process.alive)
        assert run.openings == OPENINGS and run.acked == WRITES
        assert run.invisible == []
        assert run.side_files_gone == []
        assert run.slowest <= VISIBLE_WITHIN
        process.kill()
        assert missing(reader, work.expected) == []
        # The writes are in the file itself, not only in what a reader was shown.
        assert reader.rows("PRAGMA integrity_check") == [["ok"]]
    finally:
        if process.alive():
            process.kill()
        reader.close()


def test_corral_serve_keeps_acknowledged_writes_while_others_open_the_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    _check(Served(db, free_port()), db, seed=1)


def test_corral_up_keeps_acknowledged_writes_while_others_open_the_file(tmp_path: Path) -> None:
    up = Upped(tmp_path)
    _check(up, up.db, seed=2)


def test_a_long_lived_embedded_client_keeps_acknowledged_writes(tmp_path: Path) -> None:
    """A program holding two clients of one file (its first open while it opens the
    second) writes through the first while others open and close the file."""
    db = tmp_path / "c.db"
    corral.connect(f"sqlite:///{db}").close()  # the file exists before the writer starts
    _check(EmbeddedWriter(db), db, seed=3)


def test_a_second_store_in_the_process_leaves_the_first_its_locks(tmp_path: Path) -> None:
    """The root cause, without a server: a store opened while another of the same
    process has the file open must not drop that store's locks. With them dropped, a
    reader process's close deletes the WAL that this process still writes into."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    first = corral.connect(url)
    second = corral.connect(url)
    try:
        first.add_task("before")
        open_and_close("sqlite3", tmp_path / "c.db")
        assert side_files(tmp_path / "c.db") == {"-wal": True, "-shm": True}
        first.add_task("after")
        reader = FreshReader(tmp_path / "c.db")
        try:
            assert reader.rows("SELECT title FROM tasks ORDER BY id") == [["before"], ["after"]]
        finally:
            reader.close()
    finally:
        second.close()
        first.close()


class _Monitor:
    """``corral monitor -v``: each pass it logs is its acknowledgement of the writes
    the pass made."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            corral_cmd("--url", f"sqlite:///{db}", "monitor", "-v", "--max-sleep", "0.2"),
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.recovered: list[float] = []  # when each pass that recovered a lease was logged
        self._out = threading.Thread(target=self._read, daemon=True)
        self._out.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if "pass: recovered 1 lease" in line:
                self.recovered.append(time.monotonic())

    def has_open(self, db: Path) -> bool:
        with contextlib.suppress(psutil.Error):
            return any(f.path == str(db) for f in psutil.Process(self.proc.pid).open_files())
        return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._out.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def test_corral_monitor_keeps_its_writes_while_others_open_the_file(tmp_path: Path) -> None:
    """Each round another process (this test's, through a client it closes after)
    registers a node that never beats, which claims a task; one of the three triggers
    opens and closes the file; the monitor finds the node dead and hands its task back.
    Once the monitor has logged that pass, a new reader must see it."""
    db = tmp_path / "c.db"
    url = f"sqlite:///{db}"
    setup = corral.connect(url)
    setup.configure(missed_beats=1)
    setup.close()
    monitor = _Monitor(db)
    reader = FreshReader(db)
    try:
        # Until the monitor has the file open, the rounds' own closes are the last ones.
        wait_for(lambda: monitor.has_open(db), 30, "the monitor to open the database")
        expected: dict[str, tuple[str, list[list[object]]]] = {}
        for i in range(6):
            c = corral.connect(url)
            c.register_node(f"silent-{i}", "developer", heartbeat_interval=0.3)
            c.add_task(f"for silent-{i}")
            task = c.claim_best_task(f"silent-{i}", "developer")
            assert task is not None
            c.close()
            open_and_close(TRIGGERS[i % 3], db)
            assert side_files(db) == {"-wal": True, "-shm": True}

            def recovered(n: int = i) -> bool:
                return len(monitor.recovered) > n

            logged = wait_for(recovered, 20, f"recovery {i}")
            assert logged
            q = (
                f"SELECT n.status, (SELECT count(*) FROM events e WHERE e.kind ="
                f" 'lease_recovered' AND e.node_id = n.id AND e.task_id = {task.id})"
                f" FROM nodes n WHERE n.id = 'silent-{i}'"
            )
            want: list[list[object]] = [["terminated", 1]]
            expected[f"round {i}"] = (q, want)
            deadline = monitor.recovered[i] + VISIBLE_WITHIN
            while (got := reader.rows(q)) != want:
                assert time.monotonic() < deadline, f"round {i}: a new reader sees {got}"
                time.sleep(0.002)
        monitor.kill()
        assert missing(reader, expected) == []
    finally:
        if monitor.proc.poll() is None:
            monitor.kill()
        reader.close()


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_each_opener_alone_leaves_the_server_its_wal(tmp_path: Path, trigger: str) -> None:
    """The issue's reproduction, one trigger at a time: a task, one open and close by
    another process, five more tasks, then SIGTERM: all six are in the file."""
    db = tmp_path / "c.db"
    served = Served(db, free_port())
    reader = FreshReader(db)
    try:
        served.client.add_task("task 1")
        open_and_close(trigger, db)
        assert side_files(db) == {"-wal": True, "-shm": True}
        for n in range(2, 7):
            served.client.add_task(f"task {n}")
        assert reader.rows("SELECT count(*) FROM tasks") == [[6]]
        served.stop(signal.SIGTERM)
        assert reader.rows("SELECT count(*) FROM tasks") == [[6]]
    finally:
        if served.alive():
            served.kill()
        reader.close()


def test_the_contract_suites_http_backend_reads_each_write_back_from_another_process(
    tmp_path: Path,
) -> None:
    """The contract suite's HTTP client (``ReadBack``) checks every write from a
    separate process. Shown here by doing to the server's process what the defect did:
    a descriptor of the file opened and closed beside the store drops its locks, the
    next opener elsewhere deletes the WAL, and the next write through the client fails
    its check although the server answered it."""
    from tests.support.backends.http import ReadBack, serving

    with serving(tmp_path) as (base, _):
        db = tmp_path / "served.db"
        client = ReadBack(corral.connect(base, token="test-operator-token"), db)
        try:
            client.add_task("checked from another process")
            os.close(os.open(db, os.O_RDONLY))  # the hazard docs/core.md names
            open_and_close("sqlite3", db)
            assert side_files(db) == {"-wal": False, "-shm": False}
            # (a new connection in the server's own process cannot read the file either)
            lost = r"after add_task: (another process reads a different|this process cannot)"
            with pytest.raises(AssertionError, match=lost):
                client.add_task("committed where no other process can see it")
        finally:
            client.close()
