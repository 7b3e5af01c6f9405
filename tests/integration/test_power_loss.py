"""Power loss, simulated from a trace: at ``synchronous=FULL`` no completion a caller
was answered can be lost.

Three writer processes claim and complete on one SQLite file under ``strace``, which
records, in one order, every write to the database and its WAL, every ``fsync`` and
``fdatasync`` of them, and each writer's acknowledgement (a ``write`` to a file after
the call returned). A power loss at any moment leaves each file as its last finished
flush left it (the worst case: nothing written since reached the disk). The test
rebuilds the files as they would be at each acknowledgement, opens them with SQLite
and checks that every completion acknowledged so far is there (also with a random run
of the later writes on the disk, as a disk that wrote some back). The WAL, created
during the run, is on that disk only once a flush of its directory has followed its
creation: a file's own flush does not promise its directory entry. The same run at
``NORMAL``, which does not flush commits, must fail the check: the harness can see a
loss."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import corral

WRITERS = 3
STEPS = 80  # completions per writer
CHECK_EVERY = 7  # rebuild the files at every 7th acknowledgement (and the last)

Ack = tuple[int, int]  # (task id, epoch) of an answered completion

_LINE = re.compile(r"^(\d+) +(.*)$")
_CALL = re.compile(r"^(\w+)\((.*?)(?:\) += (-?\d+).*| <unfinished \.\.\.>)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>.*\) += (-?\d+)")
_FD_PATH = re.compile(r"^\d+<((?:\\x[0-9a-f]{2})*)>")
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')
_TRACED = ("pwrite64", "write", "fsync", "fdatasync", "ftruncate", "openat")


def _unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace("\\x", ""))


@dataclass
class _File:
    """One file's bytes as the disk holds them, and the writes not yet flushed."""

    disk: bytearray
    done: list[tuple[int, bytes | None]] = field(default_factory=list)  # (offset, data)
    flushed: int = 0  # how many of ``done`` the disk holds

    def flush(self, upto: int) -> None:
        for offset, data in self.done[self.flushed : upto]:
            if data is None:  # ftruncate
                del self.disk[offset:]
            else:
                end = offset + len(data)
                if len(self.disk) < end:
                    self.disk.extend(b"\0" * (end - len(self.disk)))
                self.disk[offset:end] = data
        self.flushed = max(self.flushed, upto)

    def with_unflushed(self, n: int) -> bytes:
        """The disk had the next ``n`` unflushed writes reached it, in order."""
        disk = _File(bytearray(self.disk), self.done, self.flushed)
        disk.flush(self.flushed + n)
        return bytes(disk.disk)


@dataclass
class _Entry:
    """A file created during the run: on the disk only once a flush of its directory
    that began after the creation has returned (POSIX does not promise the directory
    entry with the file's own flush)."""

    path: str
    state: str = "absent"  # absent -> created -> durable

    def on_disk(self) -> bool:
        return self.state == "durable"


def _replay(
    trace: Path,
    files: dict[str, _File],
    acks_path: str,
    check: Callable[[list[Ack]], None],
    created: _Entry,
) -> int:
    """Walk the trace in order; call ``check(acks)`` with the acknowledgements so far
    at every CHECK_EVERY-th one and at the end, ``files`` (and ``created``) then
    holding what a power loss at that moment would leave. A write counts once it has
    returned; a flush covers the writes to its file that returned before it began,
    from the moment it returns (a write that overlaps a flush is not covered by it);
    the same for the directory entry of ``created`` and a flush of its directory; an
    acknowledgement counts from the moment its write begins. Returns how many there
    were."""
    pending: dict[int, tuple[str, str, tuple[Any, ...]]] = {}  # pid -> call in flight
    acks: list[Ack] = []
    directory = os.path.dirname(created.path)

    def acknowledge(data: bytes) -> None:
        for line in data.decode().splitlines():
            task_id, epoch = line.split()
            acks.append((int(task_id), int(epoch)))
            if len(acks) % CHECK_EVERY == 0:
                check(acks)

    def finish(call: str, path: str, args: tuple[Any, ...], result: int) -> None:
        if result < 0:
            return
        f = files.get(path)
        if call == "pwrite64" and f is not None:
            data, offset = args
            f.done.append((offset, data[:result]))
        elif call == "ftruncate" and f is not None:
            f.done.append((args[0], None))
        elif call in ("fsync", "fdatasync") and f is not None:
            f.flush(args[0])  # what was written before the flush began
        elif call == "openat" and args[0] and created.state == "absent":
            created.state = "created"
        elif path == directory and args[0]:  # fsync or fdatasync of the directory
            created.state = "durable"

    args: tuple[Any, ...]
    for raw in trace.read_text().splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        pid, rest = int(m[1]), m[2]
        if r := _RESUMED.match(rest):
            call, path, args = pending.pop(pid)
            finish(call, path, args, int(r[2]))
            continue
        c = _CALL.match(rest)
        if not c or c[1] not in _TRACED:
            continue
        call, argtext = c[1], c[2]
        if call == "openat":  # the creation of ``created`` (its first O_CREAT open)
            name = _HEX.search(argtext)
            path = _unhex(name[1]).decode() if name else ""
            args = (path == created.path and "O_CREAT" in argtext,)
            if c[3] is None:
                pending[pid] = (call, path, args)
            else:
                finish(call, path, args, int(c[3]))
            continue
        fd = _FD_PATH.match(argtext)
        if not fd:
            continue
        path = _unhex(fd[1]).decode()
        f = files.get(path)
        if path == directory:  # a flush of the directory covers a creation done before
            args = (created.state == "created",)
        elif call == "pwrite64":
            data = _unhex(_HEX.search(argtext)[1])  # type: ignore[index]
            args = (data, int(argtext.rsplit(",", 1)[1]))
        elif call == "write":
            if path == acks_path:
                acknowledge(_unhex(_HEX.search(argtext)[1]))  # type: ignore[index]
            args = ()
        elif call == "ftruncate":
            args = (int(argtext.rsplit(",", 1)[1]),)
        else:  # a flush covers the writes finished before it began
            args = (len(f.done) if f is not None else 0,)
        if c[3] is None:
            pending[pid] = (call, path, args)
        else:
            finish(call, path, args, int(c[3]))
    check(acks)
    return len(acks)


def _run(tmp_path: Path, synchronous: str) -> tuple[int, list[str], _Entry]:
    """The traced run and its replay: (acknowledgements, problems found, the WAL's
    directory entry as the run left it)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed (apt-get install strace; .ci/run does)")
    db = tmp_path / "power.db"
    url = f"sqlite:///{db}"
    with corral.connect(url, synchronous=synchronous) as c:
        c.configure(max_agents=10)
        c.add_tasks([{"title": f"Implement part {i}"} for i in range(WRITERS * STEPS + 50)])
    os.sync()  # the starting files are on disk (the store's close checkpointed the WAL)
    files = {
        str(db): _File(bytearray(db.read_bytes())),
        f"{db}-wal": _File(bytearray()),
    }
    assert not Path(f"{db}-wal").exists()
    acks = tmp_path / "acks"
    acks.touch()
    trace = tmp_path / "trace.txt"
    writer = [sys.executable, "-m", "tests.support.power_writer", url, synchronous]
    writers = " & ".join(
        shlex.join([*writer, f"P{i}", str(STEPS), str(acks)]) for i in range(WRITERS)
    )
    subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-y",
            "-xx",
            "-s",
            "1000000",
            "-o",
            str(trace),
            "-e",
            f"trace={','.join(_TRACED)}",
            "-P",
            str(db),
            "-P",
            f"{db}-wal",
            "-P",
            str(acks),
            "-P",
            str(tmp_path),
            "sh",
            "-c",
            f"{writers} & wait",
        ],
        check=True,
        cwd=Path(__file__).parents[2],
        timeout=300,
    )
    problems: list[str] = []
    wal = _Entry(f"{db}-wal")  # created by the first writer to open the database

    rng = random.Random(20261123)

    def check(acked: list[Ack]) -> None:
        # Two disks per moment: only what finished flushes cover, and that plus a
        # random run of the later writes in order (a disk that wrote some back).
        for partial in (False, True):
            crash = tmp_path / "crash"
            shutil.rmtree(crash, ignore_errors=True)
            crash.mkdir()
            for name, f in (("power.db", files[str(db)]), ("power.db-wal", files[f"{db}-wal"])):
                if name == "power.db-wal" and not wal.on_disk():
                    continue  # its directory entry was never flushed: no WAL after the loss
                (crash / name).write_bytes(
                    f.with_unflushed(rng.randint(0, len(f.done) - f.flushed)) if partial else f.disk
                )
            with sqlite3.connect(crash / "power.db") as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                for task_id, epoch in acked:
                    row = conn.execute(
                        "SELECT status, epoch FROM tasks WHERE id = ?", (task_id,)
                    ).fetchone()
                    if row != ("done", epoch):
                        kind = "partial" if partial else "flushed only"
                        problems.append(f"after {len(acked)} acks ({kind}): {task_id} is {row}")
                        return

    return _replay(trace, files, str(acks), check, wal), problems, wal


@pytest.mark.slow
def test_at_full_an_answered_completion_survives_a_power_loss(tmp_path: Path) -> None:
    count, problems, wal = _run(tmp_path, "FULL")
    assert count == WRITERS * STEPS
    assert problems == []
    # The WAL was created in the run and its directory flushed (SQLite syncs the
    # directory with a new WAL's header), so the checks above had it on the disk.
    assert wal.on_disk()
    # The run copied its WAL back and started it over (a new header at offset 0).
    restarts = (tmp_path / "trace.txt").read_text().count(", 32, 0) = 32")
    assert restarts >= 3


@pytest.mark.slow
def test_at_normal_the_same_check_finds_a_loss(tmp_path: Path) -> None:
    """The harness's control: NORMAL acknowledges commits it has not flushed."""
    count, problems, _ = _run(tmp_path, "NORMAL")
    assert count == WRITERS * STEPS
    assert problems, "the replay found no unflushed acknowledged commit at NORMAL"
