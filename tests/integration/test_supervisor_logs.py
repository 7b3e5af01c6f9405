"""Per-agent logs: rotation by renaming under a real fast writer, no line lost or split."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.supervisor.logs import OnLine, RotatingLog
from corral.supervisor.policy import Beat, parse_heartbeat

N = 20_000
WRITER = """
import sys
out = sys.stdout.buffer
n = int(sys.argv[1])
for i in range(n):
    out.write(b"%07d " % i + b"x" * (i % 97) + b"\\n")
    if i % 1000 == 0:
        out.write(b"HEARTBEAT %d.5 healthy\\n" % (1700000000 + i))
out.flush()
"""


def expected_lines(n: int = N) -> list[bytes]:
    lines = []
    for i in range(n):
        lines.append(b"%07d " % i + b"x" * (i % 97))
        if i % 1000 == 0:
            lines.append(b"HEARTBEAT %d.5 healthy" % (1700000000 + i))
    return lines


def writer(n: int = N) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(n)], stdout=subprocess.PIPE)


def pump_from_writer(log: RotatingLog, on_line: OnLine | None = None, n: int = N) -> None:
    proc = writer(n)
    assert proc.stdout is not None
    try:
        log.pump(proc.stdout.fileno(), on_line)
    finally:
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0


def read_all(files: list[Path]) -> list[bytes]:
    out: list[bytes] = []
    for n, f in enumerate(files):
        data = f.read_bytes()
        if not data and n == len(files) - 1:
            break  # the current file, just rotated
        assert data, f"{f} is empty"
        assert data.endswith(b"\n"), f"{f} ends inside a line"
        out.extend(data[:-1].split(b"\n"))
    return out


def test_fast_writer_every_line_once_in_order(tmp_path: Path) -> None:
    path = tmp_path / "user0" / "stdout.log"
    beats: list[Beat] = []

    def on_line(line: bytes) -> None:
        if (b := parse_heartbeat(line)) is not None:
            beats.append(b)

    with RotatingLog(path, max_bytes=16 * 1024, keep=500) as log:
        pump_from_writer(log, on_line)
        files = log.files()
    assert len(files) > 60  # it did rotate, many times
    rotated = files[:-1]
    assert rotated == [path.with_name(f"stdout.log.{k}") for k in range(len(rotated), 0, -1)]
    assert read_all(files) == expected_lines()  # every line once, in order, none split
    assert all(f.stat().st_size <= 16 * 1024 for f in files)
    # the heartbeat lines reached the callback and the log
    assert [b.ts for b in beats] == [1700000000 + i + 0.5 for i in range(0, N, 1000)]
    assert {b.status for b in beats} == {"healthy"}


def test_keeps_exactly_keep_rotated_files(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    with RotatingLog(path, max_bytes=4096, keep=5) as log:
        pump_from_writer(log)
    rotated = sorted(p.name for p in tmp_path.iterdir() if p.name != "stdout.log")
    assert rotated == [f"stdout.log.{k}" for k in range(1, 6)]
    files = [path.with_name(f"stdout.log.{k}") for k in range(5, 0, -1)] + [path]
    kept = read_all(files)
    everything = expected_lines()
    # what is left is the newest lines, contiguous, each once, in order
    assert kept == everything[-len(kept) :]
    # and each rotated file was full: its next line would not have fitted
    for f in files[:-1]:
        size = f.stat().st_size
        assert 4096 - 98 - 8 < size <= 4096


def test_rotating_and_reopening_while_a_writer_pumps(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    log = RotatingLog(path, max_bytes=1 << 30, keep=1000)
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            pump_from_writer(log)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=run)
    t.start()
    rotations = 0
    while not done.is_set():
        log.rotate()
        log.reopen()
        rotations += 1
    t.join(timeout=60)
    log.close()
    assert not errors
    assert rotations > 0
    assert read_all(log.files()) == expected_lines()


def test_a_line_longer_than_max_bytes_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    with RotatingLog(path, max_bytes=10, keep=3) as log:
        log.write_line(b"abc")
        log.write_line(b"0123456789ABCDEF")
        log.write_line(b"de\n")
        log.write_line(b"fgh")
    assert path.with_name("out.log.2").read_bytes() == b"abc\n"
    assert path.with_name("out.log.1").read_bytes() == b"0123456789ABCDEF\n"
    assert path.read_bytes() == b"de\nfgh\n"


def test_partial_lines_and_carriage_returns(tmp_path: Path) -> None:
    seen: list[bytes] = []
    path = tmp_path / "out.log"
    with RotatingLog(path, max_line=8) as log:
        log.feed(b"one\ntw", seen.append)
        assert path.read_bytes() == b"one\n" and seen == [b"one"]
        log.feed(b"o\n10%\r20%\r", seen.append)
        log.feed(b"abcdefghijklmnopq", seen.append)  # longer than max_line: cut
        log.finish(seen.append)
    assert seen == [b"one", b"two", b"10%\r20%\r", b"abcdefgh", b"ijklmnop", b"q"]
    assert path.read_bytes() == b"one\ntwo\n10%\r20%\r\nabcdefgh\nijklmnop\nq\n"


def test_reopen_after_the_file_was_moved(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    moved = tmp_path / "moved.log"
    log = RotatingLog(path, max_bytes=1000)
    log.write_line(b"a")
    os.rename(path, moved)
    log.write_line(b"b")  # the writer still holds the moved file
    log.reopen()
    log.write_line(b"c")
    os.rename(path, tmp_path / "moved2.log")
    log.request_reopen()  # only a flag: honoured by the next write
    assert not path.exists()
    log.write_line(b"d")
    log.close()
    assert moved.read_bytes() == b"a\nb\n"
    assert (tmp_path / "moved2.log").read_bytes() == b"c\n"
    assert path.read_bytes() == b"d\n"


def test_appends_to_an_existing_file_and_counts_its_size(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_bytes(b"12345678\n")
    with RotatingLog(path, max_bytes=12, keep=0) as log:
        assert log.size == 9
        log.write_line(b"ab")  # fits: 12 bytes
        log.write_line(b"c")  # does not: keep=0 drops the full file
    assert path.read_bytes() == b"c\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.log"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        RotatingLog("/nonexistent/x", max_bytes=0)


def wait_for(cond: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_the_log_writer_process(tmp_path: Path) -> None:
    """python -m corral.supervisor.logs: stdin to a rotating log, SIGHUP reopens."""
    path = tmp_path / "stdout.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral.supervisor.logs",
            str(path),
            "--max-bytes",
            "4096",
            "--keep",
            "9",
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"first\n")
    proc.stdin.flush()
    wait_for(lambda: path.exists() and path.read_bytes() == b"first\n")
    os.rename(path, tmp_path / "moved.log")
    proc.send_signal(signal.SIGHUP)
    body = b"".join(b"%05d\n" % i for i in range(3000))
    proc.stdin.write(body + b"tail-without-newline")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else b""
    proc.stderr.close() if proc.stderr else None
    # SIGHUP did not end it; every line is in exactly one file, in order
    log = RotatingLog(path, max_bytes=4096, keep=9)
    log.close()
    lines = read_all([tmp_path / "moved.log", *log.files()])
    assert lines == [b"first", *(b"%05d" % i for i in range(3000)), b"tail-without-newline"]
    assert len(log.files()) == 5  # 18 kB in files of at most 4 kB
