"""The embedded store: one SQLite file in WAL mode.

Durability: ``synchronous=NORMAL`` (the default) loses nothing when any process
crashes; a power loss or OS crash can roll back the last transactions committed
before it (never corrupting the file). ``synchronous=FULL`` syncs every commit before
the call returns, sharing disk flushes among processes (``_SyncedCommits``).

Writers. corral's processes queue for the write lock on a lock file next to the
database (``<file>-lock``, ``flock``): a waiting writer spins briefly, then sleeps
between tries, for up to the busy timeout, instead of polling SQLite's lock on its
busy handler's schedule (see ``_WriterLock``).

Checkpoints. Copying the WAL back into the database file is done by a background
thread (``_Checkpointer``), not by the commit that happens to fill the WAL, so a
claim or a completion never pays for it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corral import lifecycle, scoring
from corral.defaults import (
    BUSY_TIMEOUT_SECONDS,
    SQLITE_CHECKPOINT_EVERY,
    SQLITE_WAIT_RECHECK,
    SQLITE_WAL_LIMIT_PAGES,
    SQLITE_WAL_RESTART_PAGES,
)
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.model import Task
from corral.store.base import LockHolder, WouldBlock
from corral.store.queries import load_queries, migrations
from corral.store.rows import TASK_COLUMNS as ROW_TASK_COLUMNS
from corral.store.rows import dumps, task_from_tuple
from corral.store.signal import WAKE_QUERIES, doorbell_for, signal_for
from corral.store.sqlbase import SQLStore

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - no flock: SQLite's own lock and corral's retries only
    fcntl = None

__all__ = ["SQLiteStore", "WouldBlock"]

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_QUERIES = load_queries("sqlite")
_CLAIM_TAKE = _QUERIES["claim_take"]
_TASK_COMPLETE = _QUERIES["task_complete"]
# The same without its RETURNING, for a task this store claimed (``_complete_in``): a
# RETURNING costs SQLite an ephemeral table, a third of the statement.
_TASK_COMPLETE_QUIET = _TASK_COMPLETE.removesuffix("RETURNING *").rstrip()
if _TASK_COMPLETE_QUIET == _TASK_COMPLETE:  # pragma: no cover - a queries.sql edit
    raise RuntimeError("task_complete must end with RETURNING *")
_CLAIMED_KEEP = 1024  # claimed task rows a store remembers for their completion


class _Flag(threading.local):
    """A per-thread flag, off in every thread until set (``nowait()``)."""

    on = False


class _Tx:
    """A transaction's statements, run on the store's kept row cursor (a cursor made
    per statement costs more than a short statement's own work)."""

    __slots__ = ("_cur", "nested", "wake")

    def __init__(self, cur: sqlite3.Cursor, nested: bool = False) -> None:
        self._cur = cur
        self.nested = nested  # a savepoint of a group's transaction (SQLiteStore.group)
        self.wake = False  # a task may become pending: wake waiting claims on commit

    def one(self, name: str, **params: Any) -> Any:
        self.wake = self.wake or name in WAKE_QUERIES
        rows = self._cur.execute(_QUERIES[name], params).fetchall()
        return rows[0] if rows else None

    def all(self, name: str, **params: Any) -> list[Any]:
        return self._cur.execute(_QUERIES[name], params).fetchall()

    def run(self, name: str, **params: Any) -> int:
        self.wake = self.wake or name in WAKE_QUERIES
        return self._cur.execute(_QUERIES[name], params).rowcount


# ``SELECT * FROM tasks`` in table order (tests/test_sqlite_store.py checks it): the
# shared leading columns, then SQLite's own.
TASK_COLUMNS = (*ROW_TASK_COLUMNS, "claimed_role")
_task = task_from_tuple


def _create_private(path: Path) -> None:
    """Create the database file, if missing, readable by its owner only: SQLite gives
    the WAL and shared-memory files the database's mode. An existing file keeps its
    mode; an unreadable one is left for SQLite to report."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    return StoreUnavailableError(f"SQLite store unavailable: {exc}; retry the call")


def _raise_unavailable(exc: BaseException) -> None:
    """Raise ``StoreUnavailableError`` for SQLite's own failures inside a transaction
    (a full disk, an I/O error, a damaged file): the store's condition, not the
    call's; return for anything else (the caller re-raises it)."""
    if isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError:
        raise _unavailable(exc) from exc


# A writer that finds the lock taken first retries for up to _SPIN_SECONDS, yielding
# the CPU between tries: a write transaction takes ~0.05 ms, so most waits end there.
# The spin adapts: a wait longer than _SPIN_LONG_WAIT means a long queue (more writers
# than cores), where spinning only takes CPU from the holder, so the next spin is
# halved; a shorter wait doubles it back. After the spin the writer sleeps between
# tries, _SLEEP_FIRST doubling to _SLEEP_MAX. Sleeping rather than blocking in the
# kernel's queue lets a holder with more to write go on for a few transactions with
# its page cache warm (SQLite drops a connection's cache whenever another process has
# committed); a kernel wake-up hands the lock to another process at every release.
# Side by side (bench/sqlite_throughput.py, 20,000 jobs, 2 cores, three runs), the
# worker's loop with 2 to 16 processes ran 1.1-1.7x the blocking variant's rate, with
# a third as many jobs over 10 ms.
_SPIN_SECONDS = 0.0003
_SPIN_STEP = 0.00001
_SPIN_LONG_WAIT = 0.001
_SLEEP_FIRST = 0.001
_SLEEP_MAX = 0.004
# With synchronous=FULL a holder leaves to sync its commit (``_SyncedCommits``) and
# cannot take the lock back for ~0.3 ms: waiters sleeping 1-4 ms left the lock idle,
# and the group commit gained nothing with 4 processes (bench/sqlite_throughput.py);
# with 0.2-0.5 ms it ran 1.1-1.3x SQLite's own FULL with 2 and 4.
_SLEEP_FIRST_SYNCED = 0.0002
_SLEEP_MAX_SYNCED = 0.0005


def lock_holder(fd: int) -> LockHolder | None:
    """The process holding an ``flock`` on the file open as ``fd``, from
    ``/proc/locks`` (Linux), and whether ``/proc/<pid>/stat`` says it is stopped
    (state ``T``, or ``t`` under a debugger); None when nobody holds it or the
    platform cannot tell."""
    try:
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" ("->" marks a waiter)
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != key:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            return None
        return LockHolder(pid, _stopped(pid)) if pid > 0 else None
    return None


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


class _WriterLock:
    """The queue for SQLite's write lock among corral's processes: an exclusive
    ``flock`` on ``<database>-lock``, taken before ``BEGIN IMMEDIATE`` and released
    after ``COMMIT``.

    Without it, every writer would poll SQLite's own lock on its busy handler's
    schedule (1, 2, 5, 10 … ms) and meet "database is locked" at its end. Here a
    waiter spins briefly, then sleeps between tries (see ``_SLEEP_FIRST``), for up to
    the store's busy timeout: a holder stopped inside its transaction (``SIGSTOP``, a
    debugger, a frozen container) makes the others fail with a retryable
    ``StoreUnavailableError``, never hang. The kernel releases the lock when its holder
    dies. SQLite's lock stays the authority: a writer that does not take this lock
    (another program) is still waited out by ``_retrying``."""

    def __init__(self, db_path: Path, timeout: float, synced: bool = False) -> None:
        self._fd: int | None = None
        self._timeout = timeout
        self._sleeps = (
            (_SLEEP_FIRST_SYNCED, _SLEEP_MAX_SYNCED) if synced else (_SLEEP_FIRST, _SLEEP_MAX)
        )
        self._spin = _SPIN_SECONDS  # adaptive: see _SPIN_LONG_WAIT
        self.timeouts = 0  # waits that gave up after the timeout (a store statistic)
        self._path = f"{db_path}-lock"
        if fcntl is not None and str(db_path) != ":memory:":
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self, blocking: bool) -> bool:
        """Take the lock; ``False`` only when not ``blocking`` and it is taken.
        Raises ``StoreUnavailableError`` when it stays taken for the timeout."""
        fd = self._fd
        if fd is None:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not blocking:
                return False
        start = time.perf_counter()
        spin_until = start + self._spin
        while time.perf_counter() < spin_until:
            os.sched_yield()
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._spin = min(_SPIN_SECONDS, self._spin * 2 + _SPIN_STEP)  # it pays
                return True
        deadline = start + self._timeout
        pause, longest = self._sleeps
        while True:
            time.sleep(pause)
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            if time.perf_counter() > deadline:
                self.timeouts += 1
                raise StoreUnavailableError(self._held_text())
            pause = min(pause * 2, longest)
        if time.perf_counter() - start >= _SPIN_LONG_WAIT:
            self._spin /= 2  # a long queue: spinning takes CPU from the holder
        return True

    def holder(self) -> LockHolder | None:
        """The process holding the lock now, as ``/proc/locks`` tells (Linux); None
        when it is free, not ours to see, or the platform cannot tell."""
        if self._fd is None:
            return None
        return lock_holder(self._fd)

    def _held_text(self) -> str:
        who = self.holder()
        if who is None:
            return (
                f"SQLite store unavailable: another process has held the write lock"
                f" ({self._path}) for {self._timeout:g} s; it may be stopped inside a"
                f" transaction (find it with: fuser -v {self._path}); retry the call"
            )
        if who.stopped:
            return (
                f"SQLite store unavailable: process {who.pid} is stopped (SIGSTOP, a"
                f" debugger, a frozen container) holding the write lock ({self._path});"
                f" every writer fails until it resumes or exits: resume it (kill -CONT"
                f" {who.pid}) or end it (kill {who.pid}); then retry the call"
            )
        return (
            f"SQLite store unavailable: process {who.pid} has held the write lock"
            f" ({self._path}) for {self._timeout:g} s; it may be stuck inside a transaction"
            f" (end it with: kill {who.pid}); retry the call"
        )

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# A synced commit whose sync lock stays taken this long syncs by itself instead (the
# holder may be stopped); a waiter re-checks every _SYNC_POLL_FIRST doubling to
# _SYNC_POLL_MAX seconds (one sync takes ~0.2 ms).
_SYNC_POLL_FIRST = 0.0001
_SYNC_POLL_MAX = 0.0004
_SYNC_LOCK_PATIENCE = 0.05
_U32 = 0xFFFFFFFF


def _covers(synced: int, commit: int) -> bool:
    """Whether sync count ``synced`` covers commit number ``commit`` (both wrap at
    2**32: serial-number order)."""
    return (synced - commit) & _U32 < 0x80000000


class _SyncedCommits:
    """``synchronous=FULL`` as a group commit among corral's processes.

    SQLite at ``FULL`` syncs the WAL inside each commit, under the write lock, so
    writers queue behind each other's syncs: one job per disk flush, however many
    processes. Here SQLite runs at ``NORMAL`` (its commits are consistent, not yet
    durable) and a commit is acknowledged only after ``fdatasync`` of the WAL, done
    after the write lock is released. One flush covers every commit written before it
    started, so while one process syncs, the others commit, and the next sync covers
    them all -- as PostgreSQL's commits share a WAL flush.

    Shared state, in ``<database>-sync`` (mode 0600): two 32-bit counters, mapped into
    each process -- commits counted (bumped after ``COMMIT``, under the write lock)
    and commits known synced -- and an ``flock`` on the file that lets one process
    sync at a time. A commit finds itself already covered, or takes the lock, reads
    the commit count, syncs, and records it. The counters are only ever read to skip a
    sync: any state a crash leaves (synced <= counted always holds) is safe, and a
    sync lock held by a stopped process only makes the others sync by themselves
    after ``_SYNC_LOCK_PATIENCE``.

    What others can see: a commit is visible to other connections a moment before it
    is on disk (with SQLite's own ``FULL``, after). Nothing that depends on it can
    reach the disk without it: the WAL is replayed in order, so a later synced commit
    brings every earlier frame with it."""

    def __init__(self, db_path: Path) -> None:
        self._path = f"{db_path}-sync"
        self._wal_path = f"{db_path}-wal"
        self._wal: int | None = None
        self._threads = threading.Lock()  # flock orders processes, this the threads
        self._opening = threading.Lock()
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(self._fd).st_size < 8:
                os.ftruncate(self._fd, 8)  # zeros; never shrinks a file in use
            self._map = mmap.mmap(self._fd, 8)
        except BaseException:
            os.close(self._fd)
            raise
        # Aligned 32-bit words: each read and write is one load or store.
        self._words = memoryview(self._map).cast("I")

    def committed(self) -> int:
        """Count a commit and return its number. Call under the write lock, after
        ``COMMIT``: the commit's frames are in the WAL before it is counted."""
        n = (self._words[0] + 1) & _U32
        self._words[0] = n
        return n

    def wait_synced(self, commit: int, patient: bool = True) -> None:
        """Return once commit number ``commit`` is on disk (OSError if the sync
        fails). Not ``patient`` (an event loop's call): when another thread or
        process is syncing, sync by itself at once rather than wait for theirs."""
        words = self._words
        if _covers(words[1], commit):
            return
        if not patient:
            if not self._threads.acquire(blocking=False):
                self._sync()
                return
            try:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    self._sync()  # no skipping: the counter is the lock holder's
                    return
                try:
                    self._sync_locked(commit)
                finally:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                self._threads.release()
            return
        with self._threads:
            pause = _SYNC_POLL_FIRST
            give_up = time.perf_counter() + _SYNC_LOCK_PATIENCE
            while True:
                if _covers(words[1], commit):
                    return
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.perf_counter() > give_up:
                        self._sync()  # the holder may be stopped: no skipping then
                        return
                    time.sleep(pause)
                    pause = min(pause * 2, _SYNC_POLL_MAX)
                    continue
                try:
                    self._sync_locked(commit)
                    return
                finally:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _sync_locked(self, commit: int) -> None:
        """Sync unless ``commit`` is covered by now; holding the sync lock."""
        words = self._words
        if not _covers(words[1], commit):
            upto = words[0]  # every commit counted so far is in the WAL
            self._sync()
            words[1] = upto  # only lock holders write it: never goes back

    def _sync(self) -> None:
        fd = self._wal
        if fd is None:  # SQLite keeps the WAL while a connection is open
            fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
            with self._opening:  # an impatient sync may race the holder of _threads
                if self._wal is None:
                    self._wal = fd
                else:
                    os.close(fd)
                    fd = self._wal
        _fdatasync(fd)

    def close(self) -> None:
        self._words.release()
        self._map.close()
        os.close(self._fd)
        if self._wal is not None:
            os.close(self._wal)
            self._wal = None


_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has fsync only


# The checkpoint thread's tries for the writers' lock before a RESTART checkpoint: every
# _RESTART_POLL seconds for up to _RESTART_PATIENCE, then it waits for its next turn.
_RESTART_POLL = 0.0005
_RESTART_PATIENCE = 1.0


class _Checkpointer:
    """Checkpoints the WAL on a background thread every ``every`` commits.

    SQLite's automatic checkpoint runs inside the commit that crosses its threshold:
    that caller pays for copying the WAL back into the database file (a third of a
    claim's time, on average). Here the store's own commits wake a thread that runs a
    ``PASSIVE`` checkpoint on its own connection, which never blocks a reader or a
    writer. The thread starts at the first checkpoint (a store that only reads never
    has one) and sleeps, without a timer, between them. The store's connection keeps
    an automatic checkpoint at ``SQLITE_WAL_LIMIT_PAGES`` as a bound on the WAL should
    the thread fall behind.

    A ``PASSIVE`` checkpoint never lets the WAL start over while writers keep
    committing: new frames arrive while it copies, so the WAL grows to that bound.
    For a store that syncs its commits (``FULL``), when the WAL holds
    ``restart_after`` frames the thread therefore takes the writers'
    lock (``_WriterLock``) and finishes with a ``RESTART`` checkpoint, which copies
    the few frames written since and makes the next commit write from the WAL's start,
    over the file's existing pages. Writing over existing pages is cheaper to sync
    than growing the file (about half the ``fdatasync`` time here), and the WAL stays
    a few MB. The lock is held for that finishing copy only; a reader still on the
    WAL makes SQLite skip the restart (its busy handler is off), never wait."""

    def __init__(self, path: str, synchronous: str, every: int, restart_after: int = 0) -> None:
        self._path = path
        self._sync = synchronous
        self._every = every
        self._restart_after = restart_after  # 0: never restart
        self._count = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.runs = 0  # checkpoints done (tests wait on it)
        self.restarts = 0  # RESTART checkpoints that restarted the WAL

    def committed(self) -> None:
        """Called after each commit, under the store's lock."""
        self._count += 1
        if self._count < self._every or self._closed:
            return
        self._count = 0
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="corral-sqlite-checkpoint", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, timeout=0, isolation_level=None)
        except sqlite3.Error:
            return  # the store's automatic checkpoint still bounds the WAL
        lock: _WriterLock | None = None
        try:
            conn.execute(f"PRAGMA synchronous={self._sync}")
            if self._restart_after:
                # Its own open of the lock file: flock excludes per open file, so this
                # process's writers wait for the thread too (the store's fd would not).
                lock = _WriterLock(Path(self._path), BUSY_TIMEOUT_SECONDS)
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closed:
                    return
                with contextlib.suppress(sqlite3.Error):  # busy: the next wake-up retries
                    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if lock is not None and frames >= self._restart_after:
                        self._restart(conn, lock)
                self.runs += 1
        except OSError:
            return  # no lock file: the store's automatic checkpoint still bounds the WAL
        finally:
            if lock is not None:
                lock.close()
            conn.close()

    def _restart(self, conn: sqlite3.Connection, lock: _WriterLock) -> None:
        deadline = time.monotonic() + _RESTART_PATIENCE
        while not lock.acquire(blocking=False):
            if self._closed or time.monotonic() > deadline:
                return  # the writers keep it: the next wake-up tries again
            time.sleep(_RESTART_POLL)
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            self.restarts += not busy
        finally:
            lock.release()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class SQLiteStore(SQLStore):
    """One connection per store, shared by the process's threads under a lock.
    Open a new store in each process (never share one across ``fork``)."""

    inline_calls = True  # nowait() and group() below: corral serve's fast path

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float | str = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__()
        sync = str(synchronous).upper()
        if sync not in _SYNCHRONOUS:
            raise InvalidInputError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}", field="synchronous"
            )
        try:
            busy_timeout = float(busy_timeout)
        except (TypeError, ValueError):
            busy_timeout = -1.0
        if not 0 < busy_timeout < float("inf"):
            raise InvalidInputError(
                "busy_timeout must be a positive number of seconds", field="busy_timeout"
            )
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(self.path)
        self._lock = threading.RLock()
        self._claimed: dict[int, tuple[Any, ...]] = {}  # task id -> its claim's row
        self._group: tuple[int, _Tx] | None = None  # (thread, transaction) of a group()
        self._nowait = _Flag()
        self._busy_timeout = busy_timeout
        self._ready = signal_for(path)
        self._bell = None if memory else doorbell_for(path, self._ready)
        synced = sync == "FULL" and not memory and fcntl is not None
        try:
            self._writer = _WriterLock(self.path, busy_timeout, synced)
        except OSError as exc:
            raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
        # FULL is a group commit (``_SyncedCommits``): SQLite itself runs at NORMAL.
        self._synced: _SyncedCommits | None = None
        if synced:
            try:
                self._synced = _SyncedCommits(self.path)
            except OSError as exc:
                self._writer.close()
                raise StoreUnavailableError(f"SQLite store unavailable: {exc}") from exc
            sync = "NORMAL"
        self._checkpoints = (
            None
            if memory
            else _Checkpointer(
                str(path),
                sync,
                SQLITE_CHECKPOINT_EVERY,
                SQLITE_WAL_RESTART_PAGES if synced else 0,
            )
        )
        try:
            # SQLite's busy handler is off (timeout=0): waits are ours (``_retrying``).
            self._conn = sqlite3.connect(
                str(path), timeout=0, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._rows = self._conn.cursor()  # _Tx's statements: sqlite3.Row rows
            self._hot = self._conn.cursor()  # the hot statements' rows: plain tuples
            self._hot.row_factory = None
            self._retrying("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={sync}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_LIMIT_PAGES}")
            self._migrate()
        except sqlite3.Error as exc:
            self._writer.close()
            if self._synced is not None:
                self._synced.close()
            raise _unavailable(exc) from exc

    def _retrying(self, sql: str) -> None:
        """Run ``sql``, waiting out a busy database in short sleeps.

        corral's own writers queue on ``_WriterLock`` and rarely get here; this waits
        out the rest (another program's writer, a checkpoint taking the WAL's recovery
        lock). SQLite's own busy handler sleeps 1, 2, 5, 10 ... ms between tries, far
        longer than a write transaction (about 0.1 ms), so corral waits itself: 50 us
        doubling to 2 ms, with jitter, up to the busy timeout; then
        ``StoreUnavailableError``."""
        deadline = None
        pause = 0.00005
        while True:
            try:
                self._conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise _unavailable(exc) from exc
                if self._nowait.on:
                    raise WouldBlock("another process holds the database") from None
                now = time.monotonic()
                deadline = deadline or now + self._busy_timeout
                if now > deadline:
                    raise _unavailable(exc) from exc
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.002)

    def write_lock_holder(self) -> LockHolder | None:
        return self._writer.holder()

    def write_lock_timeouts(self) -> int:
        return self._writer.timeouts

    @contextmanager
    def nowait(self) -> Iterator[None]:
        """Transactions started in this block, on this thread, never wait: when
        another thread or process holds the store or the database is busy, they
        raise ``WouldBlock`` before doing anything. An event loop runs short
        operations inline this way and hops to a thread only on contention (corral
        serve)."""
        self._nowait.on = True
        try:
            yield
        finally:
            self._nowait.on = False

    def _acquire(self) -> bool:
        """Take the store (threads); whether this thread is in ``nowait()``."""
        nowait = self._nowait.on
        if not self._lock.acquire(blocking=not nowait):
            raise WouldBlock("the store is busy in another thread")
        return nowait

    def _migrate(self) -> None:
        self._retrying("PRAGMA user_version")
        current = self._conn.execute("PRAGMA user_version").fetchone()[0]
        pending = [(v, sql) for v, sql in migrations("sqlite") if v > current]
        if not pending:
            return
        with self._write() as _:
            # Re-read under the write lock: another process may have migrated first.
            current = self._conn.execute("PRAGMA user_version").fetchone()[0]
            for version, sql in pending:
                if version <= current:
                    continue
                for statement in _statements(sql):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version={version}")

    # --- write transactions -----------------------------------------------------------
    def _begin(self) -> _Tx:
        """Take the store (threads), the writer lock (processes), then SQLite's write
        lock; in a ``group``, a savepoint of its transaction. Pair with ``_end``."""
        if self._group is not None and self._group[0] == threading.get_ident():
            self._lock.acquire()  # held by this thread already
            try:
                if not self._conn.in_transaction:
                    # SQLite rolled the group's transaction back after an error (a full
                    # disk, say): a savepoint now would be a transaction of its own,
                    # committed at once, and the group's end would report it failed.
                    raise StoreUnavailableError(
                        "SQLite store unavailable: an earlier call's error rolled this"
                        " group's transaction back; retry the call"
                    )
                self._hot.execute("SAVEPOINT corral_call")
            except BaseException:
                self._lock.release()
                raise
            return _Tx(self._rows, nested=True)
        nowait = self._acquire()
        try:
            if not self._writer.acquire(blocking=not nowait):
                raise WouldBlock("another process is writing")
            try:
                try:
                    self._hot.execute("BEGIN IMMEDIATE")  # a kept cursor: none made per call
                except sqlite3.OperationalError:  # another program writes: wait it out
                    self._retrying("BEGIN IMMEDIATE")
            except BaseException:
                self._writer.release()
                raise
        except BaseException:
            self._lock.release()
            raise
        return _Tx(self._rows)

    def _end(self, tx: _Tx, commit: bool) -> None:
        if tx.nested:
            try:
                if commit:
                    try:
                        self._hot.execute("RELEASE corral_call")
                    except sqlite3.Error as exc:
                        raise _unavailable(exc) from exc
                    if tx.wake and self._group is not None:
                        self._group[1].wake = True
                else:
                    self._claimed.clear()
                    self._rollback("ROLLBACK TO corral_call", "RELEASE corral_call")
            finally:
                self._lock.release()
            return
        number = None
        try:
            if commit:
                try:
                    if not self._conn.in_transaction:  # a group's, rolled back by SQLite
                        raise sqlite3.OperationalError(
                            "an error in the transaction made SQLite roll it back"
                        )
                    self._hot.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._claimed.clear()  # it may hold a claim that did not happen
                    self._rollback("ROLLBACK")
                    raise _unavailable(exc) from exc
                if self._synced is not None:
                    number = self._synced.committed()
            else:
                self._claimed.clear()
                self._rollback("ROLLBACK")
        finally:
            self._writer.release()
            if commit and self._checkpoints is not None:
                self._checkpoints.committed()
            self._lock.release()
        if number is not None:
            try:
                self._synced.wait_synced(  # type: ignore[union-attr]
                    number, patient=not self._nowait.on
                )
            except OSError as exc:
                raise StoreUnavailableError(
                    f"SQLite store unavailable: the commit was made but syncing it to"
                    f" disk failed ({exc}); it may be lost on a power failure"
                ) from exc
        if commit and tx.wake:
            self._ready.bump()
            if self._bell is not None:
                self._bell.ring()

    def _abort(self, tx: _Tx, exc: BaseException) -> None:
        """End ``tx`` undone after ``exc``; raise ``StoreUnavailableError`` instead of
        SQLite's own failures (the caller re-raises anything else)."""
        self._end(tx, commit=False)
        _raise_unavailable(exc)

    def _rollback(self, *statements: str) -> None:
        """Undo the transaction (or the call's savepoint) after an error, unless SQLite
        has rolled it back itself (it may, on a full disk or an I/O error). Never
        raises: the error being handled is the one to report."""
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                for statement in statements:
                    self._conn.execute(statement)

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        tx = self._begin()
        try:
            yield tx
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)

    @contextmanager
    def group(self) -> Iterator[None]:
        """Write transactions started in this block, on this thread, share one commit.

        Each runs as a savepoint of the block's transaction, so a call that fails
        undoes only its own writes, and the block commits once at its end (a failed
        commit raises, and none of the block's writes is kept). Whoever answers for
        the calls must do so after the block, so every answer is durable. Reads in
        the block see its writes. Under ``nowait()`` the block raises ``WouldBlock``
        at its start, having done nothing, if the store or the database is busy.
        ``corral serve`` runs the short calls of one event-loop turn this way."""
        if self._group is not None and self._group[0] == threading.get_ident():
            raise RuntimeError("SQLiteStore.group() does not nest")
        tx = self._begin()
        self._group = (threading.get_ident(), tx)
        try:
            yield
        except BaseException as exc:
            self._group = None
            self._abort(tx, exc)
            raise
        self._group = None
        self._end(tx, commit=True)

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        if self._group is not None and self._group[0] == threading.get_ident():
            with self._lock:  # inside the group's transaction, which sees its writes
                yield _Tx(self._rows)
            return
        self._acquire()
        try:
            self._hot.execute("BEGIN")
            try:
                # Take the read snapshot now, where a busy database can be waited out.
                self._retrying("SELECT 1 FROM meta LIMIT 1")
                yield _Tx(self._rows)
            except BaseException as exc:
                self._rollback("ROLLBACK")
                _raise_unavailable(exc)
                raise
            self._hot.execute("COMMIT")
        finally:
            self._lock.release()

    # --- the hot path: a claim and a completion are one statement each ----------------
    # Their bookkeeping (the holder's activity stamp, the event, a claim's role head) is
    # in the schema's triggers, so the write lock is held for three round trips from
    # Python, like the bare loop's: BEGIN, UPDATE, COMMIT. (A task matching several
    # roles adds a DELETE of its role heads.) The statements run on the connection
    # directly, without ``_Tx``.
    def _claim_in(self, tx: _Tx, node_id: str, role: str, now: float) -> Any:
        """The claim inside a write transaction; the task's row (a tuple in
        ``TASK_COLUMNS`` order), or None."""
        rows = self._hot.execute(
            _CLAIM_TAKE,
            {"role": role, "node_id": node_id, "now": now, "bonus": scoring.ROLE_BONUS_SECONDS},
        ).fetchall()
        if not rows:  # nothing pending, or the node is not live (which raises)
            node = tx.one("node_claim_state", id=node_id) or self._live(tx, node_id)
            if lifecycle.stamp_due(node["dead_at"], node["live_window"], now):
                tx.run("node_touch", id=node_id, now=now)
            return None
        row = rows[0]
        task_id, roles, sort_key, created_at = row[0], row[5], row[11], row[12]
        if " " in roles:  # a task matching several roles: the trigger drops only one head
            self._dequeue(tx, task_id, sort_key, created_at, roles)
        claimed = self._claimed
        if len(claimed) >= _CLAIMED_KEEP:
            del claimed[next(iter(claimed))]
        claimed[task_id] = row
        return row

    def _complete_in(
        self, tx: _Tx, task_id: int, node_id: str, epoch: int | None, result: Any, now: float
    ) -> Task:
        """The completion inside a write transaction (or LeaseError).

        A task this store claimed, completed with its epoch, is unchanged since its
        claim but for what the completion sets (only a claim changes an in-progress
        task, and a claim changes its epoch), so its record is built from the claim's
        row and the statement skips its RETURNING."""
        text = None if result is None else dumps(result)
        params = {"id": task_id, "node_id": node_id, "epoch": epoch, "result": text, "now": now}
        held = self._claimed.pop(task_id, None)
        if held is not None and epoch is not None and held[8] == epoch:
            if self._hot.execute(_TASK_COMPLETE_QUIET, params).rowcount == 1:
                # status done, then claimed_at kept, updated_at, finished_at, result, error.
                return _task((*held[:6], "done", *held[7:14], now, now, text, None, *held[18:]))
            self._refuse(tx, task_id, node_id, epoch)
        rows = self._hot.execute(_TASK_COMPLETE, params).fetchall()
        if not rows:
            self._refuse(tx, task_id, node_id, epoch)
        return _task(rows[0])

    def claim(self, node_id: str, role: str, now: float) -> Task | None:
        tx = self._begin()
        try:
            self._check_role(tx, role)
            row = self._claim_in(tx, node_id, role, now)
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)
        return None if row is None else _task(row)

    def complete(
        self, task_id: int, node_id: str, epoch: int | None, result: Any, now: float
    ) -> Task:
        tx = self._begin()
        try:
            done = self._complete_in(tx, task_id, node_id, epoch, result, now)
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)
        return done

    def complete_and_claim(
        self, task_id: int, node_id: str, epoch: int | None, result: Any, role: str, now: float
    ) -> tuple[Task, Task | None]:
        """One transaction: a worker's finish-then-next costs one commit, not two."""
        tx = self._begin()
        try:
            self._check_role(tx, role)
            done = self._complete_in(tx, task_id, node_id, epoch, result, now)
            nxt = self._claim_in(tx, node_id, role, now)
        except BaseException as exc:
            self._abort(tx, exc)
            raise
        self._end(tx, commit=True)
        return done, None if nxt is None else _task(nxt)

    def ready_token(self) -> int:
        # Listen before the claim that takes this token: a task another process adds
        # after that claim rings this process.
        if self._bell is not None:
            self._bell.listen()
        return self._ready.token()

    def wait_ready(self, token: Any, timeout: float) -> None:
        """Woken at once by this process's commits and, through the ``Doorbell``, by
        other corral processes'; a task added by another program is seen at the next
        re-check (every ``SQLITE_WAIT_RECHECK`` seconds)."""
        self._ready.wait(token, min(timeout, SQLITE_WAIT_RECHECK))

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
        with self._lock:
            self._conn.close()
            self._writer.close()
            if self._synced is not None:
                self._synced.close()


def _statements(script: str) -> Iterator[str]:
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            yield text
            buf = []
    if "".join(buf).strip():
        raise ValueError(f"incomplete SQL statement in migration: {''.join(buf)[:80]}")
