"""Processes the supervisor starts, watches, signals and finds again.

- :func:`spawn`: one agent's process in its own session and process group, stdin
  from ``/dev/null``, stdout/stderr on the descriptors given, resource limits through
  util-linux ``prlimit`` used as the exec wrapper (``prlimit`` sets the limits on
  itself and execs the agent, so the pid is the agent's own process). A pidfd is
  opened at once: the pid can never be confused with a later process of that number.
- :class:`ExitWatcher`: exits as events. Each pidfd is a reader on the asyncio loop
  (no thread per child, no polling); when it becomes readable the process has ended
  and ``os.waitid(P_PIDFD, ...)`` reaps it and gives its status. For a process that
  is not our child (adopted after a supervisor restart) the exit is still seen at
  once, but the kernel gives its status only to its parent or subreaper ancestor:
  ``waitid`` fails with ``ECHILD`` and the :class:`~corral.supervisor.policy.Exit`
  is "unknown".
- :func:`signal_group`, :func:`signal_process`: signals that never raise for a
  process that is already gone.
- :func:`same_process`: a pid plus its start time (psutil ``create_time``) names one
  process; a pid reused by an unrelated process has another start time.
- :func:`find_marked`: processes carrying the environment marker
  ``CORRAL_SUPERVISOR=<state dir>`` (never matched by command line).
- :func:`set_subreaper`: ``prctl(PR_SET_CHILD_SUBREAPER)``, so descendants that
  escape their agent's group are re-parented to the supervisor, not to init.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from corral.errors import CorralError
from corral.supervisor.manifest import AgentSpec, Rlimits
from corral.supervisor.policy import Exit

__all__ = [
    "AGENT_ENV",
    "MARKER_ENV",
    "Child",
    "ExitWatcher",
    "SpawnError",
    "adopt",
    "child_env",
    "create_time",
    "find_marked",
    "marker_value",
    "prlimit_argv",
    "reap",
    "reap_strays",
    "same_process",
    "set_subreaper",
    "signal_group",
    "signal_process",
    "spawn",
]

MARKER_ENV = "CORRAL_SUPERVISOR"
AGENT_ENV = "CORRAL_AGENT_ID"
# create_time is boot time + start ticks (10 ms each): the same process always gives
# the same value, another process started a tick or more later does not
_START_TOLERANCE = 0.005


class SpawnError(CorralError):
    """The agent's process could not be started (command not found, bad cwd...);
    ``errno`` is the OS's when it gave one."""

    code = "spawn_failed"

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclass(slots=True)
class Child:
    """A running agent process: ``pid``, its ``start_time`` (psutil create_time),
    a ``pidfd`` (closed by :class:`ExitWatcher` once the exit was handled) and, for
    a process we spawned, the ``Popen`` object (``None`` when adopted)."""

    pid: int
    start_time: float
    pidfd: int
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def adopted(self) -> bool:
        return self.popen is None


def marker_value(state_dir: str | os.PathLike[str]) -> str:
    """The marker value for a state dir: its absolute, resolved path."""
    return str(Path(state_dir).resolve())


def child_env(
    spec: AgentSpec,
    *,
    state_dir: str | os.PathLike[str],
    base: Mapping[str, str] | None = None,
    url: str | None = None,
    token: str | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The agent's environment: ``base`` (default ``os.environ``), the manifest's
    ``env``, then the contract (``CORRAL_AGENT_ID``, ``CORRAL_SUPERVISOR``, and
    ``CORRAL_URL`` / ``CORRAL_TOKEN`` when given), which the manifest cannot
    override. Returns the environment and the names of overridden manifest keys."""
    env = dict(os.environ if base is None else base)
    env.update(spec.env)
    contract = {AGENT_ENV: spec.id, MARKER_ENV: marker_value(state_dir)}
    if url is not None:
        contract["CORRAL_URL"] = url
    if token is not None:
        contract["CORRAL_TOKEN"] = token
    overridden = sorted(k for k in contract if k in spec.env and spec.env[k] != contract[k])
    env.update(contract)
    return env, overridden


def prlimit_argv(rlimits: Rlimits) -> list[str]:
    """The ``prlimit ... --`` prefix for ``rlimits`` (empty when none are set)."""
    opts = []
    if rlimits.memory is not None:
        opts.append(f"--as={rlimits.memory}")
    if rlimits.open_files is not None:
        opts.append(f"--nofile={rlimits.open_files}")
    if not opts:
        return []
    import shutil  # only with rlimits: the supervisor's process stays small

    exe = shutil.which("prlimit")
    if exe is None:
        raise SpawnError("rlimits need util-linux prlimit on PATH")
    return [exe, *opts, "--"]


def spawn(
    spec: AgentSpec,
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None,
    stdout_fd: int,
    stderr_fd: int,
) -> Child:
    """Start ``spec``'s command in a new session (its own process group, pgid = pid).

    The descriptors are duplicated into the child; the caller still owns (and
    should close) its copies. Raises :class:`SpawnError` if it cannot start."""
    argv = [*prlimit_argv(spec.rlimits), *spec.argv]
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout_fd,
            stderr=stderr_fd,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise SpawnError(
            f"cannot start {spec.argv[0]!r}: {e.strerror or e}", errno=e.errno
        ) from None
    pidfd = os.pidfd_open(popen.pid)
    return Child(popen.pid, create_time(popen.pid) or time.time(), pidfd, popen)


def adopt(pid: int, start_time: float) -> Child | None:
    """A :class:`Child` for a live process that is not ours (``None`` if it is gone
    or the pid now names another process)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if not same_process(pid, start_time):  # checked after pidfd_open: no race
        os.close(pidfd)
        return None
    return Child(pid, start_time, pidfd, None)


def create_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), ``None`` if gone."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def same_process(pid: int, start_time: float) -> bool:
    """Whether ``pid`` is alive and is the process that started at ``start_time``
    (a zombie counts as gone)."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(p.create_time() - start_time) <= _START_TOLERANCE
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pgid``; False when no such group."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def signal_process(pid: int, sig: int) -> bool:
    """Send ``sig`` to one process; False when it is gone."""
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def find_marked(
    state_dir: str | os.PathLike[str], agent_id: str | None = None
) -> list[psutil.Process]:
    """Live processes whose environment carries this state dir's marker (and, when
    ``agent_id`` is given, ``CORRAL_AGENT_ID=agent_id``); the caller excluded."""
    want = marker_value(state_dir)
    me = os.getpid()
    found = []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            env = p.environ()
            if env.get(MARKER_ENV) != want:
                continue
            if agent_id is not None and env.get(AGENT_ENV) != agent_id:
                continue
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        found.append(p)
    return found


_PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool = True) -> bool:
    """Make this process the subreaper of its descendants (Linux); False if the
    call is not available."""
    import ctypes

    try:  # the C library is linked into the interpreter: its symbols are the program's
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap_strays(known: set[int]) -> list[int]:
    """Reap zombie children that are not agents we watch (descendants re-parented
    to us as subreaper); an agent's own status is left for its pidfd. Returns the
    pids reaped."""
    reaped: list[int] = []
    try:
        kids = psutil.Process().children()
    except psutil.Error:
        return reaped
    for p in kids:
        if p.pid in known:
            continue
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                continue
            pid, _ = os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue
        if pid:
            reaped.append(pid)
    return reaped


OnExit = Callable[[Exit], None]


class ExitWatcher:
    """Watches pidfds on an asyncio loop and calls back once per process exit.

    ``before_reap(child)`` runs when the exit is seen but before a child is reaped
    (while its pid, and so its process group id, cannot be reused)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Callable[[], float] = time.time
    ) -> None:
        self._loop = loop
        self._clock = clock
        self._watched: dict[int, tuple[Child, OnExit, Callable[[Child], None] | None]] = {}

    def watch(
        self, child: Child, on_exit: OnExit, before_reap: Callable[[Child], None] | None = None
    ) -> None:
        self._watched[child.pidfd] = (child, on_exit, before_reap)
        self._loop.add_reader(child.pidfd, self._ready, child.pidfd)

    def unwatch(self, child: Child) -> None:
        """Stop watching and close the pidfd (the process is not reaped)."""
        if self._watched.pop(child.pidfd, None) is not None:
            self._loop.remove_reader(child.pidfd)
            os.close(child.pidfd)

    @property
    def pids(self) -> set[int]:
        return {c.pid for c, _, _ in self._watched.values()}

    def close(self) -> None:
        for child, _, _ in list(self._watched.values()):
            self.unwatch(child)

    def _ready(self, fd: int) -> None:
        entry = self._watched.pop(fd, None)
        self._loop.remove_reader(fd)
        if entry is None:
            return
        child, on_exit, before_reap = entry
        at = self._clock()
        if before_reap is not None:
            before_reap(child)
        ex = reap(child, at)
        os.close(fd)
        on_exit(ex)


def reap(child: Child, at: float | None = None) -> Exit:
    """Reap an ended process through its pidfd: its :class:`Exit`, "unknown" when it
    is not our child."""
    at = time.time() if at is None else at
    try:
        res = os.waitid(os.P_PIDFD, child.pidfd, os.WEXITED | os.WNOHANG)
    except ChildProcessError:
        return Exit(at=at)
    if res is None:  # not ended after all (cannot happen once the pidfd is readable)
        return Exit(at=at)
    ex = Exit.from_siginfo(res.si_code, res.si_status, at=at)
    if child.popen is not None:  # Popen must not wait for (or warn about) it again
        child.popen.returncode = ex.code if ex.code is not None else -(ex.signal or 0)
    return ex
