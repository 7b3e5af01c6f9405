"""The SQLite adapter: schema, migrations, pragmas, opening races."""

from __future__ import annotations

import multiprocessing as mp
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any, NoReturn

import pytest

import corral
from corral import ConflictError, InvalidInputError
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.store.queries import load_queries, migrations, schema
from corral.store.sqlite import SQLiteStore

CTX = mp.get_context("spawn")


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()

    # Comments and whitespace aside (ALTER TABLE ... ADD COLUMN rewrites the stored text).
    def shape(sql: str) -> str:
        return re.sub(r"\s*([(),])\s*", r"\1", " ".join(re.sub(r"--[^\n]*", "", sql).split()))

    return [(t, n, shape(s)) for t, n, s in rows]


def test_migrations_produce_schema_sql(tmp_path: Path) -> None:
    """Applying every migration gives exactly the schema in schema.sql."""
    store = SQLiteStore(tmp_path / "migrated.db")
    migrated = _objects(store._conn)
    store.close()
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    fresh.executescript(schema("sqlite"))
    assert migrated == _objects(fresh)
    assert sqlite3.connect(tmp_path / "migrated.db").execute("PRAGMA user_version").fetchone()[
        0
    ] == max(v for v, _ in migrations("sqlite"))


def test_a_store_of_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A file a newer corral migrated (a user_version past this corral's last
    migration) is refused with a ConflictError naming both versions and the file;
    nothing in it changes."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_task("Implement persistence")
    newer = max(v for v, _ in migrations("sqlite")) + 1
    raw = sqlite3.connect(tmp_path / "c.db")
    raw.execute(f"PRAGMA user_version={newer}")
    raw.close()
    before = (tmp_path / "c.db").read_bytes()
    with pytest.raises(ConflictError) as exc:
        corral.connect(url)
    assert exc.value.field == "url"
    assert f"schema version {newer}, newer than this corral's {newer - 1}" in exc.value.message
    assert str(tmp_path / "c.db") in exc.value.message
    assert (tmp_path / "c.db").read_bytes() == before


def test_opening_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_task("Implement persistence")
    for _ in range(3):
        with corral.connect(url) as c:
            assert [t.title for t in c.list_tasks()] == ["Implement persistence"]


def _open_and_add(url: str, barrier: Barrier, out: Queue[Any]) -> None:
    barrier.wait(timeout=30)
    try:
        with corral.connect(url) as c:
            c.add_task("Implement from a racer")
        out.put("ok")
    except Exception as exc:
        out.put(repr(exc))


def test_two_processes_create_a_new_file_at_once(tmp_path: Path) -> None:
    """Both open (and migrate) the same new file concurrently; both succeed."""
    for trial in range(5):
        url = f"sqlite:///{tmp_path / f'new-{trial}.db'}"
        barrier, out = CTX.Barrier(2), CTX.Queue()
        procs = [CTX.Process(target=_open_and_add, args=(url, barrier, out)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert results == ["ok", "ok"]
        with corral.connect(url) as c:
            assert len(c.list_tasks()) == 2


def test_pragmas_wal_and_durability(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    # FULL is corral's group commit: SQLite at NORMAL, each commit synced before the
    # call returns (test_full_* below).
    full = corral.connect(f"sqlite:///{tmp_path / 'b.db'}?synchronous=FULL")
    assert isinstance(full, Cluster)  # a database URL gives the embedded client
    assert isinstance(full.store, SQLiteStore)
    assert full.store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert full.store._synced is not None and store._synced is None
    full.close()
    with pytest.raises(InvalidInputError, match="synchronous"):
        SQLiteStore(tmp_path / "c.db", synchronous="SOMETIMES")


def test_a_new_database_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """Whatever the umask, a database corral creates, its WAL and its shared memory are
    mode 0600 (tasks and events are the fleet's business); a file that already exists
    keeps the mode its owner gave it."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        c = corral.connect(f"sqlite:///{tmp_path / 'new.db'}")
        c.add_task("Implement a private board")
        for suffix in ("", "-wal", "-shm", "-lock"):
            mode = stat.S_IMODE(os.stat(f"{tmp_path / 'new.db'}{suffix}").st_mode)
            assert mode == 0o600, (suffix, oct(mode))
        c.close()

        shared = tmp_path / "shared.db"
        sqlite3.connect(shared).close()
        shared.chmod(0o640)
        c = corral.connect(f"sqlite:///{shared}")
        c.add_task("Implement a shared board")
        assert stat.S_IMODE(shared.stat().st_mode) == 0o640
        assert stat.S_IMODE(os.stat(f"{shared}-wal").st_mode) == 0o640
        c.close()
    finally:
        os.umask(old)


def test_every_query_compiles_against_the_schema() -> None:
    """Every named query compiles; the TEMP triggers (trigger_*) as the store creates
    them, their rules' parameters written in."""
    import re

    from corral.store.sqlite.store import _BOOKKEEPING

    conn = sqlite3.connect(":memory:")
    conn.executescript(schema("sqlite"))
    for name, sql in load_queries("sqlite").items():
        if not name.startswith("trigger_"):
            conn.execute("EXPLAIN " + sql, {p: None for p in re.findall(r":(\w+)", sql)})
    for sql in _BOOKKEEPING:
        conn.execute(sql)
    assert len(conn.execute("SELECT name FROM sqlite_temp_master").fetchall()) == len(_BOOKKEEPING)


def test_claim_plans_use_the_indexes(tmp_path: Path) -> None:
    """The claim reads two index heads: no scan of the pending set, no sort of it."""
    store = SQLiteStore(tmp_path / "plan.db")
    sql = load_queries("sqlite")["claim_take"]
    plan = " | ".join(
        r[3]
        for r in store._conn.execute(
            "EXPLAIN QUERY PLAN " + sql,
            {"role": "developer", "node_id": "A", "now": 0.0, "bonus": 900, "session_id": "s"},
        )
    )
    assert "SEARCH ready USING PRIMARY KEY (role=?)" in plan
    assert "SEARCH tasks USING COVERING INDEX tasks_open (status=? AND assigned_to=?)" in plan
    assert "SCAN tasks" not in plan
    assert "SEARCH nodes USING INDEX nodes_live_id (id=?)" in plan  # only a live node claims


def test_bad_urls_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="sqlite:///"):
        corral.connect("sqlite://relative.db")
    with pytest.raises(InvalidInputError, match="unsupported"):
        corral.connect("mysql://x")


def test_task_rows_unpack_in_schema_order(tmp_path: Path) -> None:
    """The SQLite store's hot statements read task rows as ``TaskRow``s, made from the
    column list: it is the table's leading columns (the columns added since, the
    ``TASK_TAIL``, are found by name), and a row read that way equals the one read by
    name (a completion's row is the claim's, ``_replace``d by name)."""
    from corral.store.rows import task_from_row, task_tail
    from corral.store.sqlite.store import TASK_COLUMNS, _task

    store = SQLiteStore(tmp_path / "cols.db")
    columns = tuple(r[1] for r in store._conn.execute("PRAGMA table_info(tasks)"))
    assert columns[: len(TASK_COLUMNS)] == TASK_COLUMNS
    tail = task_tail(columns)  # the columns added since, found by name
    store._conn.execute(
        "INSERT INTO tasks (title, priority, roles, status, max_attempts, sort_key, created_at,"
        " updated_at, result) VALUES ('t', 'high', 'developer tester', 'done', 3, 1.5, 2.0,"
        " 3.0, '{\"ok\": [1, 2]}')"
    )
    store._conn.execute("UPDATE tasks SET session_id = 's-1', progress_timeout = 30")
    row = store._conn.execute("SELECT * FROM tasks").fetchone()
    assert _task(row, tail) == task_from_row(row)
    task = _task(row, tail)
    assert task.roles == ("developer", "tester") and task.result == {"ok": [1, 2]}
    assert (task.session_id, task.progress_timeout) == ("s-1", 30.0)
    store.close()


def test_the_claim_hands_over_the_task_row_columns(tmp_path: Path) -> None:
    """claim_take's trigger hands the claimed row to the store as ``TaskRow``'s
    columns in its order (the store makes the claimed row from them by position), and
    a claimed task, and the record its completion returns, equal the task read back."""
    import corral
    from corral.store.rows import TaskRow
    from corral.store.sqlite.store import _BOOKKEEPING

    [claimed] = [sql for sql in _BOOKKEEPING if "corral_task_claimed" in sql]
    call = re.search(r"SELECT corral_claimed\((.*?)\);", claimed, re.DOTALL)
    assert call is not None
    assert tuple(c.strip().removeprefix("new.") for c in call[1].split(",")) == TaskRow._fields
    with corral.connect(f"sqlite:///{tmp_path / 'claimcols.db'}") as c:
        [first] = c.add_tasks([{"title": "implement it", "progress_timeout": 30}])
        c.add_tasks([{"title": "review it", "timeout": 60, "depends_on": [first.id]}])
        c.register_node("A", "developer")
        for _ in range(2):
            task = c.claim_best_task("A", "developer")
            assert task is not None and task == c.get_task(task.id)
            assert task.session_id is not None
            done = c.complete_task(task.id, "A", task.epoch, result={"ok": True})
            assert done == c.get_task(task.id) and done.result == {"ok": True}
        assert c.claim_best_task("A", "developer") is None


def _hold_lock_file(path: str, held: Event, suffix: str, in_transaction: bool = False) -> None:
    import fcntl
    import os
    import sqlite3

    fd = os.open(f"{path}{suffix}", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    if in_transaction:  # SQLite's own write lock too, like a writer mid-transaction
        sqlite3.connect(path, isolation_level=None).execute("BEGIN IMMEDIATE")
    held.set()
    time.sleep(120)  # until the test kills it


@contextmanager
def _holder(path: Path, *, suffix: str = "-lock", in_transaction: bool = False) -> Iterator[Any]:
    """Another process holding the writer lock of ``path`` (or, with ``suffix="-sync"``,
    its sync lock): the Process, once it holds it; killed, if still alive, on the way
    out."""
    held = CTX.Event()
    holder = CTX.Process(target=_hold_lock_file, args=(str(path), held, suffix, in_transaction))
    holder.start()
    try:
        assert held.wait(30)
        yield holder
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join(30)


def test_writers_queue_on_the_lock_file_and_a_dead_holder_frees_it(tmp_path: Path) -> None:
    """Another process holding the writer lock: a ``nowait`` write refuses at once and
    changes nothing, a plain write waits (it does not fail), and when the holder is
    killed the kernel frees the lock and the waiting write goes through."""
    import os
    import signal
    import threading

    from corral.store.base import WouldBlock

    path = tmp_path / "queue.db"
    c = corral.connect(f"sqlite:///{path}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    try:
        with _holder(path) as holder:
            assert oct(os.stat(f"{path}-lock").st_mode & 0o777) == "0o600"
            with pytest.raises(WouldBlock), c.store.nowait():
                c.add_task("Implement while locked")
            assert c.list_tasks() == []
            done = threading.Event()

            def write() -> None:
                c.add_task("Implement queued")
                done.set()

            writer = threading.Thread(target=write)
            writer.start()
            assert not done.wait(0.3)  # queued behind the holder, not failed
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(30)
            assert done.wait(30)
            writer.join(30)
            assert [t.title for t in c.list_tasks()] == ["Implement queued"]
    finally:
        c.close()


def test_a_writer_stopped_inside_its_transaction_makes_others_fail_not_hang(tmp_path: Path) -> None:
    """A holder stopped with SIGSTOP inside its transaction: a write waits the busy
    timeout, then fails with a retryable StoreUnavailableError and writes nothing
    (reads go on); a second try fails the same way; when the holder dies, the next
    write goes through, and none of the waits that gave up keeps the lock from
    another store."""
    import os
    import signal

    path = tmp_path / "stopped.db"
    c = corral.connect(f"sqlite:///{path}?busy_timeout=0.4")
    c.add_task("Implement before")
    try:
        with _holder(path, in_transaction=True) as holder:
            os.kill(holder.pid, signal.SIGSTOP)
            for _ in range(2):
                start = time.monotonic()
                stopped = f"process {holder.pid} is stopped .* holding the write lock"
                with pytest.raises(corral.StoreUnavailableError, match=stopped):
                    c.add_task("Implement while stopped")
                assert 0.4 <= time.monotonic() - start < 15
            assert [t.title for t in c.list_tasks()] == ["Implement before"]
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(30)
            other = corral.connect(f"sqlite:///{path}")
            try:
                other.add_task("Implement from another store")
            finally:
                other.close()
            c.add_task("Implement after")
            assert [t.title for t in sorted(c.list_tasks(), key=lambda t: t.id)] == [
                "Implement before",
                "Implement from another store",
                "Implement after",
            ]
    finally:
        c.close()


def test_busy_timeout_is_validated(tmp_path: Path) -> None:
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(corral.InvalidInputError, match="busy_timeout"):
            corral.connect(f"sqlite:///{tmp_path / 'b.db'}?busy_timeout={bad}")


def _wait_and_claim(url: str, n: int, ready: Event, out: Queue[Any]) -> None:
    c = corral.connect(url)
    c.register_node("W-far", "developer")
    for _ in range(n):
        ready.set()
        task = c.claim_best_task("W-far", "developer", wait=30)
        assert task is not None
        out.put((task.id, time.time()))
        c.complete_task(task.id, "W-far", task.epoch)
    c.close()


def _fifos(path: Path) -> list[str]:
    import os

    d = f"{path}-wait"
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_a_claim_waiting_in_another_process_wakes_at_the_commit(tmp_path: Path) -> None:
    """A claim waiting in another process takes a task this process adds at once (a
    doorbell FIFO, mode 0600 in a 0700 directory), not at the periodic re-check; a
    listener that exits removes its FIFO, and one that was killed has it removed by
    the next writer."""
    import os
    import signal

    from corral.defaults import SQLITE_WAIT_RECHECK
    from tests.support.worker_app import wait_for

    path = tmp_path / "bell.db"
    url = f"sqlite:///{path}"
    c = corral.connect(url)
    n = 10
    ready, out = CTX.Event(), CTX.Queue()
    far = CTX.Process(target=_wait_and_claim, args=(url, n, ready, out))
    far.start()
    try:
        latencies = []
        for i in range(n):
            assert ready.wait(30)
            ready.clear()
            wait_for(lambda: len(_fifos(path)) == 1, timeout=30, what="the far process listening")
            time.sleep(0.05)  # let it block in the wait (a claim before it is no harm)
            added_at = time.time()
            task = c.add_task(f"Implement part {i}")
            task_id, got_at = out.get(timeout=30)
            assert task_id == task.id
            latencies.append(got_at - added_at)
        far.join(30)
        assert far.exitcode == 0
        # Every pickup beat the re-check by far (without the doorbell: ~0.95 s each).
        assert max(latencies) < SQLITE_WAIT_RECHECK / 2, latencies
        assert _fifos(path) == []  # it removed its FIFO at exit
        assert oct(os.stat(f"{path}-wait").st_mode & 0o777) == "0o700"

        killed = CTX.Process(target=_wait_and_claim, args=(url, 1, ready, out))
        killed.start()
        assert ready.wait(30)
        wait_for(lambda: len(_fifos(path)) == 1, timeout=30, what="the listener's FIFO")
        (fifo,) = _fifos(path)
        assert oct(os.stat(f"{path}-wait/{fifo}").st_mode & 0o777) == "0o600"
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)
        killed.join(30)
        c.add_task("Implement after the kill")  # its ring finds nobody reading
        assert _fifos(path) == []
    finally:
        for p in (far, locals().get("killed")):
            if p is not None and p.is_alive():
                p.kill()
                p.join(30)
        c.close()


def test_a_forked_child_leaves_its_parents_doorbell_alone(tmp_path: Path) -> None:
    """A child forked from a process that listens inherits its exit handlers: at its
    exit it must not remove the parent's FIFO (the parent would no longer be rung)."""
    import os

    path = tmp_path / "fork.db"
    c = corral.connect(f"sqlite:///{path}")
    c.register_node("W", "developer")
    assert c.claim_best_task("W", "developer", wait=0.01) is None  # listens now
    listening = _fifos(path)
    assert len(listening) == 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            import atexit

            atexit._run_exitfuncs()  # what a normal exit runs
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _fifos(path) == listening
    c.close()


def test_checkpoints_run_off_the_commit_path(tmp_path: Path) -> None:
    """No checkpoint thread for a store that has written little; after
    SQLITE_CHECKPOINT_EVERY commits one starts, copies the WAL into the database file
    and leaves nothing to checkpoint; closing the store stops it."""
    from corral.defaults import SQLITE_CHECKPOINT_EVERY, SQLITE_WAL_LIMIT_PAGES

    store_url = f"sqlite:///{tmp_path / 'ckpt.db'}"
    c = corral.connect(store_url)
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    assert isinstance(c.store, SQLiteStore)
    conn = c.store._conn
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == SQLITE_WAL_LIMIT_PAGES
    c.register_node("W", "developer")
    checkpoints = c.store._checkpoints
    assert checkpoints is not None
    assert checkpoints._thread is None
    for i in range(SQLITE_CHECKPOINT_EVERY):
        c.add_task(f"Implement part {i}")
    deadline = time.monotonic() + 30
    while checkpoints.runs < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpoints.runs >= 1
    busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and log == done  # everything already copied back
    thread = checkpoints._thread
    assert thread is not None
    c.close()
    assert not thread.is_alive()


def _wait_for(cond: Callable[[], object], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_full_restarts_the_wal_and_a_reader_on_it_only_delays_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At FULL the checkpoint thread restarts the WAL once it holds
    SQLITE_WAL_RESTART_PAGES frames, so commits write over the file's start instead of
    growing it; a reader holding a snapshot on the WAL makes it skip the restart
    without blocking the writer; at NORMAL it never restarts. Every commit is kept."""
    from corral.store.sqlite import store as sqlite_store

    monkeypatch.setattr(sqlite_store, "SQLITE_CHECKPOINT_EVERY", 10)
    monkeypatch.setattr(sqlite_store, "SQLITE_WAL_RESTART_PAGES", 30)
    normal = corral.connect(f"sqlite:///{tmp_path / 'normal.db'}")
    assert isinstance(normal, Cluster)  # a database URL gives the embedded client
    assert isinstance(normal.store, SQLiteStore)
    assert normal.store._checkpoints is not None
    assert normal.store._checkpoints._restart_after == 0
    normal.close()

    path = tmp_path / "restart.db"
    c = corral.connect(f"sqlite:///{path}?synchronous=FULL")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    assert isinstance(c.store, SQLiteStore)
    checkpoints = c.store._checkpoints
    assert checkpoints is not None
    assert checkpoints._restart_after == 30
    written = 0

    def write(n: int) -> None:
        nonlocal written
        for _ in range(n):
            c.add_task(f"Implement part {written}")
            written += 1

    reader = sqlite3.connect(path, isolation_level=None)
    try:
        write(1)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM tasks").fetchone()  # a snapshot on the WAL
        runs = checkpoints.runs
        while checkpoints.runs < runs + 3:  # three turns, each past the threshold
            write(10)
            assert written < 5_000, "the checkpoint thread never ran"
        assert checkpoints.restarts == 0
        reader.execute("COMMIT")

        while checkpoints.restarts < 2:
            write(10)
            assert written < 5_000, "the WAL never restarted"
        # Each commit adds at least one frame, and only a restart takes the count down.
        frames_before = c.store._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        write(100)
        _wait_for(lambda: checkpoints.restarts >= 3)
        frames = c.store._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        assert frames < frames_before + 100
        assert reader.execute("SELECT count(*) FROM tasks").fetchone()[0] == written
        assert reader.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        reader.close()
        c.close()
    c = corral.connect(f"sqlite:///{path}?synchronous=FULL")
    assert len(c.list_tasks(limit=10_000)) == written
    c.close()


def test_a_claim_drops_every_role_head_of_its_task(tmp_path: Path) -> None:
    """Role heads go with the claim: one by the trigger (one role), several by the
    store (several roles); none is left once every task is claimed."""
    c = corral.connect(f"sqlite:///{tmp_path / 'heads.db'}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    assert isinstance(c.store, SQLiteStore)
    c.configure(role_keywords={"developer": ["implement"], "architect": ["design", "implement"]})
    tasks = [c.add_task(t) for t in ("implement and design it", "design x", "implement y", "z")]
    assert [t.roles for t in tasks] == [
        ("architect", "developer"),
        ("architect",),
        ("architect", "developer"),
        (),
    ]
    heads = c.store._conn.execute("SELECT count(*) FROM ready").fetchone()[0]
    assert heads == 5
    c.register_node("A", "developer")
    claimed = [c.claim_best_task("A", "developer") for _ in tasks]
    assert None not in claimed
    assert sorted(t.id for t in claimed if t is not None) == [t.id for t in tasks]
    assert c.store._conn.execute("SELECT count(*) FROM ready").fetchone()[0] == 0
    roles = [e.data["role"] for e in c.events() if e.kind == "task_claimed"]
    assert roles == ["developer"] * 4
    c.close()


def test_a_rolled_back_claim_is_not_remembered(tmp_path: Path) -> None:
    """complete_and_claim that fails after its claim rolls the claim back, and the
    store forgets the claim's row (a completion builds its record from it)."""
    c = corral.connect(f"sqlite:///{tmp_path / 'rb.db'}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    c.register_node("A", "developer")
    for i in range(2):
        c.add_task(f"Implement part {i}")
    first = c.claim_best_task("A", "developer")
    assert first is not None
    store = c.store
    assert isinstance(store, SQLiteStore)
    real = store._claim_in

    def claim_then_fail(*args: Any) -> NoReturn:
        real(*args)
        raise RuntimeError("after the claim")

    store._claim_in = claim_then_fail  # type: ignore[method-assign,assignment]  # a step that fails after it
    with pytest.raises(RuntimeError):
        c.complete_and_claim(first.id, "A", "developer", first.epoch)
    store._claim_in = real  # type: ignore[method-assign]  # the store's own step back
    assert store._claimed == {}
    assert c.get_task(first.id).status == "in_progress"  # the completion rolled back too
    done = c.complete_task(first.id, "A", first.epoch)
    assert done == c.get_task(first.id)
    c.close()


def test_a_group_commits_its_calls_once_and_a_failed_call_undoes_only_itself(
    tmp_path: Path,
) -> None:
    """In store.group() every write transaction is a savepoint of one transaction:
    nothing is visible to another connection until the block ends, a call that fails
    undoes only its own writes, reads see the block's writes, and then everything the
    other calls did is committed together."""
    from corral import LeaseError

    path = tmp_path / "group.db"
    c = corral.connect(f"sqlite:///{path}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    c.register_node("A", "developer")
    other = sqlite3.connect(path)
    with c.store.group():
        c.add_task("Implement one")
        task = c.claim_best_task("A", "developer")
        assert task is not None
        with pytest.raises(LeaseError):
            c.complete_task(task.id, "A", task.epoch + 1)  # refused: changes nothing
        c.heartbeat("A", health_status="healthy")
        assert c.get_task(task.id).status == "in_progress"  # reads see the group
        assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0
    assert other.execute("SELECT status FROM tasks").fetchall() == [("in_progress",)]
    kinds = [e.kind for e in c.events()]
    assert kinds.count("task_claimed") == 1 and "task_completed" not in kinds
    other.close()
    c.close()


def test_a_group_under_nowait_refuses_at_once_when_another_process_writes(tmp_path: Path) -> None:
    from corral.store.base import WouldBlock

    path = tmp_path / "busy.db"
    c = corral.connect(f"sqlite:///{path}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    with _holder(path):
        with pytest.raises(WouldBlock), c.store.nowait(), c.store.group():
            c.add_task("Implement never")
        assert c.list_tasks() == []
    with c.store.group():
        c.add_task("Implement now")
    assert [t.title for t in c.list_tasks()] == ["Implement now"]
    c.close()


# --- synchronous=FULL: the group commit (_SyncedCommits) --------------------------------


@contextmanager
def _watching_syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The inode of every file corral's synced commits ``fdatasync`` (the real call
    still runs)."""
    import os

    import corral.store.sqlite.synced as sqlite_store

    synced: list[int] = []
    real = sqlite_store._fdatasync

    def watched(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_ino)

    monkeypatch.setattr(sqlite_store, "_fdatasync", watched)
    yield synced


def test_full_returns_each_write_only_after_a_sync_of_the_wal_that_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At FULL every write call syncs the WAL (the ``-wal`` file itself) after its
    commit and before it returns, and the shared counters say it is covered; reads
    sync nothing. The ``-sync`` file is 0600 and exists only at FULL."""
    import os

    path = tmp_path / "full.db"
    with _watching_syncs(monkeypatch) as synced:
        normal = corral.connect(f"sqlite:///{tmp_path / 'normal.db'}")
        normal.add_task("Implement at NORMAL")
        assert synced == [] and not os.path.exists(f"{tmp_path / 'normal.db'}-sync")
        normal.close()

        c = corral.connect(f"sqlite:///{path}?synchronous=FULL")
        assert isinstance(c, Cluster)  # a database URL gives the embedded client
        assert isinstance(c.store, SQLiteStore)
        try:
            assert oct(os.stat(f"{path}-sync").st_mode & 0o777) == "0o600"
            assert c.store._synced is not None
            words = c.store._synced._words
            c.register_node("W", "developer")
            for i in range(5):
                before = len(synced)
                task = c.add_task(f"Implement part {i}")
                counted = words[0]
                assert len(synced) == before + 1  # one sync per call: no one else writes
                assert synced[-1] == os.stat(f"{path}-wal").st_ino
                assert words[1] == counted  # the sync covered this commit
            before = len(synced)
            c.list_tasks()
            c.get_task(task.id)
            assert len(synced) == before
            claimed = c.claim_best_task("W", "developer")
            assert claimed is not None
            assert len(synced) == before + 1 and words[1] == words[0]
            c.complete_task(claimed.id, "W", claimed.epoch)
            assert len(synced) == before + 2 and words[1] == words[0]
        finally:
            c.close()


def _full_writer(path: str, name: str, count: int, start: Event) -> None:
    c = corral.connect(f"sqlite:///{path}?synchronous=FULL")
    start.wait(30)
    for i in range(count):
        c.add_task(f"Implement {name} part {i}")
    c.close()


def test_full_counts_and_syncs_every_commit_of_several_processes(tmp_path: Path) -> None:
    """Four processes writing at FULL at once: every commit is counted in the shared
    counter and every one is covered by a sync, and none is lost."""
    path = tmp_path / "group.db"
    first = corral.connect(f"sqlite:///{path}?synchronous=FULL")
    assert isinstance(first, Cluster)  # a database URL gives the embedded client
    assert isinstance(first.store, SQLiteStore)
    try:
        assert first.store._synced is not None
        words = first.store._synced._words
        counted = words[0]
        start = CTX.Event()
        procs = [
            CTX.Process(target=_full_writer, args=(str(path), f"w{n}", 50, start)) for n in range(4)
        ]
        for proc in procs:
            proc.start()
        start.set()
        for proc in procs:
            proc.join(60)
            assert proc.exitcode == 0
        assert first.store._conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 200
        assert words[0] == counted + 200
        assert words[1] == words[0]
    finally:
        first.close()


def test_full_commits_sync_by_themselves_when_the_sync_lock_holder_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stopped while holding the sync lock does not hang the others: after
    a short wait each write syncs the WAL itself and returns; a write under
    ``nowait()`` (corral serve's event loop) syncs itself without waiting at all."""
    import os
    import signal

    path = tmp_path / "stopped-sync.db"
    with _watching_syncs(monkeypatch) as synced:
        c = corral.connect(f"sqlite:///{path}?synchronous=FULL")
        assert isinstance(c, Cluster)  # a database URL gives the embedded client
        c.add_task("Implement before")
        try:
            with _holder(path, suffix="-sync") as holder:
                os.kill(holder.pid, signal.SIGSTOP)
                for i in range(2):
                    before = len(synced)
                    start = time.monotonic()
                    c.add_task(f"Implement while stopped {i}")
                    assert time.monotonic() - start < 10
                    assert synced[before:] == [os.stat(f"{path}-wal").st_ino]
                # An event loop's call (``nowait``) does not even wait that long: it
                # syncs at once, without a single sleep on this thread.
                import threading

                import corral.store.sqlite.store as sqlite_store

                me, slept, real_sleep = threading.get_ident(), [], time.sleep

                def sleep(seconds: float) -> None:
                    if threading.get_ident() == me:
                        slept.append(seconds)
                    real_sleep(seconds)

                # the store module's own import of time (not re-exported)
                monkeypatch.setattr(sqlite_store.time, "sleep", sleep)  # type: ignore[attr-defined]
                before = len(synced)
                with c.store.nowait():
                    c.add_task("Implement from an event loop")
                monkeypatch.setattr(sqlite_store.time, "sleep", real_sleep)  # type: ignore[attr-defined]
                assert slept == []
                assert synced[before:] == [os.stat(f"{path}-wal").st_ino]
                assert len(c.list_tasks()) == 4
        finally:
            c.close()


def test_covers_orders_commit_numbers_across_the_wrap() -> None:
    from corral.store.sqlite.synced import _covers

    assert _covers(7, 7) and _covers(8, 7) and not _covers(6, 7)
    assert _covers(3, 2**32 - 2)  # synced past the wrap covers a commit before it
    assert not _covers(2**32 - 2, 3)


def _wal_btrees(db: Path, start: int) -> set[str]:
    """The b-trees (tables and indexes) of the pages the WAL frames after byte
    ``start`` hold (each frame: a 24-byte header whose first 4 bytes are its page
    number, then the page)."""
    wal = (db.parent / (db.name + "-wal")).read_bytes()
    size = 24 + int.from_bytes(wal[8:12], "big")  # the page size is in the WAL header
    pages = {
        int.from_bytes(wal[at : at + 4], "big") for at in range(start, len(wal) - size + 1, size)
    }
    names = dict(sqlite3.connect(db).execute("SELECT pageno, name FROM dbstat").fetchall())
    return {names[p] for p in pages}


def test_a_status_flip_rewrites_only_the_node_row_and_its_idle_entry(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A lone claim makes its idle node working, a lone completion makes it idle
    again: each writes the node's row and its nodes_idle_since entry, and no page of
    the live-node indexes (they follow terminated_at, and a flip does not re-stamp the
    node when its stamp is not due), read from the frames the call adds to the WAL."""
    db = tmp_path / "c.db"
    wal = tmp_path / "c.db-wal"
    c = corral.connect(f"sqlite:///{db}", clock=clock)
    try:
        c.register_node("W", "developer")
        c.add_tasks([{"title": f"Implement {i}"} for i in range(3)])
        first = c.claim_best_task("W", "developer")  # warm: the first frames of each page
        assert first is not None
        c.complete_task(first.id, "W", first.epoch)
        start = wal.stat().st_size
        task = c.claim_best_task("W", "developer")
        assert task is not None and c.get_node("W").status == "working"
        claimed = _wal_btrees(db, start)
        start = wal.stat().st_size
        c.complete_task(task.id, "W", task.epoch)
        assert c.get_node("W").status == "idle"
        completed = _wal_btrees(db, start)
    finally:
        c.close()
    assert {"tasks", "nodes", "nodes_idle_since"} <= claimed
    assert {"tasks", "nodes", "nodes_idle_since"} <= completed
    assert not (claimed | completed) & {"nodes_live_id", "nodes_dead_at", "nodes_by_id"}
