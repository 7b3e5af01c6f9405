"""``corral serve --workers N``: N server processes accepting on one socket.

The parent binds the port (so a taken port fails at once, as with one process),
then forks the workers: each opens its own connection to the store, builds the app
and serves the listening socket it inherited; the kernel hands each new connection
to one of them. Each worker runs a monitor thread, and one of them leads (PostgreSQL:
the session advisory lock; SQLite: the ``flock`` on ``<file>-monitor``), so the
duties are done once. The parent only watches: a worker that dies is started again
(its monitor's lead passes to another worker at that one's next pass), and SIGINT or
SIGTERM stops them all, then the parent itself, by the same signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["run_workers"]

log = logging.getLogger("corral.server")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STOP_GRACE = 5.0  # seconds the workers get to finish their requests when stopping
_RESTART_PAUSE = 0.5  # a worker that keeps dying at once is started again this often


def _die_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies (a parent killed with
    SIGKILL leaves no worker serving on its own)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


_WATCHED = {signal.SIGCHLD, *_STOP_SIGNALS}


def _fork(serve: Callable[[], int], mask: set[int | signal.Signals]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # the parent's, before it watched
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        _die_with_parent()
        code = serve()
    except BaseException:  # the worker's own error: logged, the parent restarts it
        log.exception("worker %d failed", os.getpid())
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    return 0  # never reached: the worker leaves through os._exit


def run_workers(count: int, serve: Callable[[], int]) -> int | None:
    """Run ``count`` forked workers, each calling ``serve`` (it returns the worker's
    exit status), until SIGINT or SIGTERM; return that signal (None if every worker
    ended by itself, as when none could start).

    The parent blocks the signals it watches and takes them with ``sigtimedwait``: a
    stop request or a worker's end is handled where the loop is, never mid-fork."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    caught: int | None = None
    workers: dict[int, float] = {}  # pid -> when it started
    try:
        for _ in range(count):
            workers[_fork(serve, mask)] = time.monotonic()
        while workers and caught is None:
            info = signal.sigtimedwait(_WATCHED, 1.0)
            if info is not None and info.si_signo in _STOP_SIGNALS:
                caught = info.si_signo
                break
            for pid, code in _reap():
                started = workers.pop(pid, None)
                if started is None:
                    continue
                if code == 3 and time.monotonic() - started < 2.0:
                    log.error("worker %d could not start (exit 3); not restarting it", pid)
                    continue
                log.warning(
                    "worker %d ended (%s); starting another",
                    pid,
                    code,
                    extra={"action": "worker_restart", "pid": pid},
                )
                pause = _RESTART_PAUSE - (time.monotonic() - started)
                if pause > 0:
                    time.sleep(pause)
                workers[_fork(serve, mask)] = time.monotonic()
    finally:
        _stop(workers)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return caught


def _reap() -> list[tuple[int, int]]:
    """The workers that ended since the last look: (pid, exit status)."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if not pid:
            return ended
        ended.append((pid, os.waitstatus_to_exitcode(status)))


def _stop(workers: dict[int, float]) -> None:
    """SIGTERM every worker, wait up to ``_STOP_GRACE``, then SIGKILL the rest."""
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE
    left = set(workers)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.02)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
