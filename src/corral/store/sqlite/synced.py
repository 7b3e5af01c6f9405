"""``synchronous=FULL`` as a group commit among corral's processes (``_SyncedCommits``)."""

from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

from corral.backoff import Backoff
from corral.store.sqlite.writer import fcntl

__all__: list[str] = []


# A synced commit whose sync lock stays taken this long syncs by itself instead (the
# holder may be stopped); a waiter re-checks every _SYNC_POLL_FIRST doubling to
# _SYNC_POLL_MAX seconds (a sync is about that long).
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
            pauses = Backoff(base=_SYNC_POLL_FIRST, cap=_SYNC_POLL_MAX)
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
                    time.sleep(pauses.next())
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
