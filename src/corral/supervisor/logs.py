"""Per-agent log files the writer owns: append, rotate by renaming, never lose a line.

:class:`RotatingLog` appends whole lines to ``path`` (opened ``O_APPEND``). When the
next line would take the file past ``max_bytes`` it renames ``path`` to ``path.1``
(``path.1`` to ``path.2`` ... keeping ``keep`` rotated files, the oldest dropped) and
starts a new ``path``. Lines are never split across files: a line is written with a
single ``write`` into one file (a line longer than ``max_bytes`` gets a file of its
own). Nothing is copied or truncated, so no line written before, during or after a
rotation is lost (copy-and-truncate rotation loses the lines written between the
copy and the truncate).

Input comes as raw bytes from a pipe: :meth:`RotatingLog.feed` takes any chunk,
writes its complete lines, and keeps a trailing partial line until its newline
arrives; :meth:`RotatingLog.finish` writes that remainder at EOF (with a newline
added). :meth:`RotatingLog.pump` does both for a blocking fd until EOF. An
``on_line`` callback sees every line after it reached the file (the supervisor looks
for ``HEARTBEAT`` lines there). A partial line longer than ``max_line`` is written as
a line of its own at that length: the only case where one line of input becomes two.

:meth:`RotatingLog.reopen` closes and reopens ``path`` (after an outside tool moved
it); :meth:`RotatingLog.request_reopen` only sets a flag honoured before the next
write, which is safe from a signal handler. All methods are thread-safe.

``python -m corral.supervisor.logs PATH [--max-bytes N] [--keep K]`` copies its
standard input into such a log until EOF (SIGHUP reopens): a writer that can outlive
the process that started it.
"""

from __future__ import annotations

import contextlib
import os
from _thread import RLock  # threading.RLock, without loading threading
from collections.abc import Callable

# Annotations only: the log daemon, which uses this module, loads no pathlib (its
# paths are strings); rotated_path/files/path load it when called.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["DEFAULT_KEEP", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_LINE", "RotatingLog", "main", "unlink"]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_KEEP = 5
DEFAULT_MAX_LINE = 1024 * 1024
OnLine = Callable[[bytes], object]


class RotatingLog:
    """An append-only log file rotated at ``max_bytes`` keeping ``keep`` old files."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        *,
        max_line: int = DEFAULT_MAX_LINE,
        mode: int = 0o644,
    ) -> None:
        if max_bytes < 1 or keep < 0 or max_line < 1:
            raise ValueError("need max_bytes >= 1, keep >= 0 and max_line >= 1")
        self._name = os.fspath(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.max_line = max_line
        self._mode = mode
        self._lock = RLock()
        self._partial = b""
        self._reopen_requested = False
        os.makedirs(os.path.dirname(os.path.abspath(self._name)), exist_ok=True)
        self._fd: int | None = None
        self._size = 0
        self._open()

    # ---- file handling ----

    def _open(self) -> None:
        fd = os.open(self._name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, self._mode)
        old, self._fd = self._fd, fd
        self._size = os.fstat(fd).st_size
        if old is not None:
            os.close(old)

    @property
    def size(self) -> int:
        """Bytes in the current file."""
        return self._size

    @property
    def path(self) -> Path:
        """The current file."""
        from pathlib import Path

        return Path(self._name)

    def _rotated(self, n: int) -> str:
        return f"{self._name}.{n}"

    def rotated_path(self, n: int) -> Path:
        """``path.n``: the n-th newest rotated file (1 is the newest)."""
        from pathlib import Path

        return Path(self._rotated(n))

    def files(self) -> list[Path]:
        """The files that exist, oldest first: ``path.keep`` ... ``path.1``, ``path``."""
        from pathlib import Path

        rotated = [self._rotated(n) for n in range(self.keep, 0, -1)]
        return [Path(p) for p in [*rotated, self._name] if os.path.exists(p)]

    def rotate(self) -> None:
        """Rotate now (the current file becomes ``path.1``) even if not full; an
        empty file is left as it is."""
        with self._lock:
            if self._size:
                self._rotate()

    def _rotate(self) -> None:
        if self.keep == 0:
            unlink(self._name)
        else:
            for n in range(self.keep - 1, 0, -1):
                src = self._rotated(n)
                if os.path.exists(src):
                    os.replace(src, self._rotated(n + 1))
            if os.path.exists(self._name):
                os.replace(self._name, self._rotated(1))
        self._open()

    def reopen(self) -> None:
        """Close and reopen ``path`` (creating it if an outside tool moved it away)."""
        with self._lock:
            self._reopen_requested = False
            self._open()

    def request_reopen(self) -> None:
        """Reopen before the next write; only sets a flag (signal-handler safe)."""
        self._reopen_requested = True

    def close(self) -> None:
        """Write any partial line, then close the file."""
        with self._lock:
            self._flush_partial(None)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> RotatingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing ----

    def _write(self, data: bytes) -> None:
        """Write bytes that hold whole lines, all into the current file."""
        if self._fd is None:
            raise ValueError("write to a closed RotatingLog")
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)

    def _write_lines(self, lines: list[bytes], on_line: OnLine | None) -> None:
        """Write lines (each ending in a newline), batching those that fit, rotating
        before any line that would pass ``max_bytes``; then call ``on_line``."""
        if self._reopen_requested:
            self._reopen_requested = False
            self._open()
        batch: list[bytes] = []
        batch_len = 0
        for line in lines:
            if self._size + batch_len + len(line) > self.max_bytes and self._size + batch_len:
                if batch:
                    self._write(b"".join(batch))
                    batch, batch_len = [], 0
                if self._size:
                    self._rotate()
            batch.append(line)
            batch_len += len(line)
        if batch:
            self._write(b"".join(batch))
        if on_line is not None:
            for line in lines:
                on_line(line[:-1])

    def write_line(self, line: bytes, on_line: OnLine | None = None) -> None:
        """Append one line (a newline is added if it has none)."""
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            self._write_lines([line], on_line)

    def feed(self, data: bytes, on_line: OnLine | None = None) -> None:
        """Take a chunk read from a pipe: write its complete lines, keep the rest.
        ``on_line`` gets each line without its newline, after it was written."""
        with self._lock:
            data = self._partial + data
            end = data.rfind(b"\n") + 1
            # split on b"\n" only: a "\r" (a progress bar) stays inside its line
            lines = [part + b"\n" for part in data[: end - 1].split(b"\n")] if end else []
            rest = data[end:]
            while len(rest) > self.max_line:
                lines.append(rest[: self.max_line] + b"\n")
                rest = rest[self.max_line :]
            self._partial = rest
            if lines:
                self._write_lines(lines, on_line)

    def finish(self, on_line: OnLine | None = None) -> None:
        """At EOF: write the partial line left by :meth:`feed` (newline added)."""
        with self._lock:
            self._flush_partial(on_line)

    def _flush_partial(self, on_line: OnLine | None) -> None:
        if self._partial:
            rest, self._partial = self._partial, b""
            self._write_lines([rest + b"\n"], on_line)

    def pump(self, fd: int, on_line: OnLine | None = None, *, chunk: int = 65536) -> int:
        """Copy everything from the readable (blocking) ``fd`` into the log, line by
        line, until EOF; return the bytes read. Does not close ``fd``."""
        total = 0
        while data := os.read(fd, chunk):
            total += len(data)
            self.feed(data, on_line)
        self.finish(on_line)
        return total


def unlink(path: str) -> None:
    """Remove ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    """Copy standard input into a :class:`RotatingLog` until EOF; SIGHUP reopens."""
    import argparse  # here, not at the top: the log daemon imports this module
    import signal
    import sys

    parser = argparse.ArgumentParser(prog="python -m corral.supervisor.logs")
    parser.add_argument("path")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES)
    parser.add_argument("--keep", type=int, default=DEFAULT_KEEP)
    args = parser.parse_args(argv)
    with RotatingLog(args.path, args.max_bytes, args.keep) as log:
        signal.signal(signal.SIGHUP, lambda *_: log.request_reopen())
        log.pump(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
