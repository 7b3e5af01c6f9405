"""The log daemon: one process per state dir that reads every agent's output and
outlives the supervisor.

A child's stdout and stderr are pipes whose read ends belong to logd, not to the
supervisor: the supervisor creates the pipe, hands the read end over a Unix socket
(``SCM_RIGHTS``) with :meth:`LogdClient.attach` and closes its own copy. logd appends
every line to ``DIR/logs/<agent>/<stream>.log`` through
:class:`~corral.supervisor.logs.RotatingLog` (rotation by renaming, no line lost, no
copy-and-truncate) whether or not a supervisor is connected, so a supervisor that is
killed loses nothing and its children never write into a pipe nobody reads.

``python -m corral.supervisor.logd --state-dir DIR`` starts it as a daemon (double
fork, a session of its own so a signal to the supervisor's process group never
reaches it, standard streams on ``/dev/null``, cwd ``/``). It holds an ``flock`` on
``DIR/logd.pid`` (its pid) for its whole life, listens on ``DIR/logd.sock`` (mode
0600) and the launching command exits 0 once it accepts connections. It is
single-threaded: one ``selectors`` loop over the listening socket, the client
connections and every attached pipe (non-blocking), with no periodic wake-up. It
logs its own doings as JSON lines to ``DIR/logs/supervisor/logd.log``.

It stays up until asked to stop (:meth:`LogdClient.shutdown` or SIGTERM), even
when it holds no stream and no client: a supervisor that restarts finds it there.
Stopping reads what the pipes hold at that moment, finishes every log (a last
partial line gets its newline) and removes the socket and pid file; a child that
writes afterwards gets EPIPE, so a supervisor stops its children first. SIGHUP
reopens every log (after an outside tool moved the files). Out of file descriptors,
an attach is refused (``StoreUnavailableError``) and the held streams keep flowing.

The daemon's parent is init, unless the process that started it is a child
subreaper (``PR_SET_CHILD_SUBREAPER``): then logd is reparented to that process,
which should reap it. A supervisor calls :func:`ensure_logd` before becoming a
subreaper to avoid that.

Events go to every connected supervisor (a subscribed connection) as JSON lines:

- ``{"kind": "line", "sid", "agent", "stream", "pid", "line"}`` for each line that
  starts with ``HEARTBEAT `` (the line is logged too);
- ``{"kind": "eof", "sid", "agent", "stream", "pid"}`` when the child's end closed
  (every writer exited) and the log was finished;
- on subscribing, ``{"kind": "attached", ...}`` for every stream logd still holds,
  then ``{"kind": "synced"}``;
- ``{"kind": "dropped", "count"}`` after events were dropped for this client.
  A client that does not read is never waited for: once ``client_buffer`` bytes are
  queued for it, its ``line`` events are dropped (logged in ``logd.log``) until it
  catches up; ``eof`` and the other events are always queued.
- ``{"kind": "shutdown"}`` when logd stops.

Events happening while no supervisor is connected are not kept (the lines are in
the logs); the ``attached`` list tells a new supervisor what is still open.
``sid`` numbers the attachments: two streams of one agent (an old child's
descendant still holding the pipe while the new child runs) share one log file and
are told apart by ``sid``.

The wire protocol (JSON lines on ``logd.sock``): requests ``{"op": "attach", "agent",
"stream", "max_bytes", "keep", "pid"}`` with exactly one fd, ``subscribe``, ``reopen``
(``agent`` or null), ``status``, ``shutdown``; answers ``{"ok": true, "result": ...}``
or ``{"ok": false, "error": {"code", "message", "field"}}``. :class:`LogdClient` sends
each request on a connection of its own and keeps one subscribed connection for
events.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from corral.errors import StoreUnavailableError, error_class
from corral.supervisor import boot
from corral.supervisor.logd_server import (
    CHUNK,
    DEFAULT_CLIENT_BUFFER,
    SOCKET_NAME,
    STREAMS,
    Logd,
    jsonline,
    run,
)
from corral.supervisor.logs import DEFAULT_KEEP, DEFAULT_MAX_BYTES

__all__ = [
    "DEFAULT_CLIENT_BUFFER",
    "STREAMS",
    "Logd",
    "LogdClient",
    "ensure_logd",
    "main",
    "start_logd",
]

LOCK_NAME = "logd.lock"
# never passed on to the daemon: it must not look like one of the supervisor's agents
_CHILD_MARKERS = ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN")


# ---- the client ----


class LogdClient:
    """A connection to the log daemon of ``state_dir``: one subscribed socket for
    events (:meth:`fileno`, :meth:`read_events`), plus a short connection per
    request. Requests block for at most ``timeout`` seconds."""

    def __init__(self, state_dir: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.socket_path = self.state_dir / SOCKET_NAME
        self.timeout = timeout
        self._buf = b""
        self.closed = False
        self._sock = self._connect()
        self._sock.sendall(jsonline({"op": "subscribe"}))
        self._sock.setblocking(False)

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except OSError as e:
            sock.close()
            raise StoreUnavailableError(
                f"no log daemon at {self.socket_path}: {e.strerror}"
            ) from None
        return sock

    def fileno(self) -> int:
        """The event socket (for ``loop.add_reader``)."""
        return self._sock.fileno()

    def read_events(self, timeout: float = 0.0) -> list[dict[str, Any]]:
        """The events received so far, without blocking (``timeout`` > 0: wait that
        long for the first one). When logd goes away the last event is ``{"kind":
        "disconnected"}`` and :attr:`closed` is true (stop watching :meth:`fileno`)."""
        if self.closed:
            return []
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                data = self._sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data:
                self._buf += data
                *lines, self._buf = self._buf.split(b"\n")
                events.extend(json.loads(line) for line in lines if line)
                continue
            if data == b"":
                events.append({"kind": "disconnected"})
                self.close()
                return events
            left = deadline - time.monotonic()
            if events or left <= 0:
                return events
            select.select([self._sock], [], [], left)

    def _request(self, req: dict[str, Any], fds: list[int] | None = None) -> Any:
        with self._connect() as sock:
            try:
                data = jsonline(req)
                if fds:
                    socket.send_fds(sock, [data], fds)
                else:
                    sock.sendall(data)
                buf = b""
                while not buf.endswith(b"\n"):
                    part = sock.recv(CHUNK)
                    if not part:
                        break
                    buf += part
            except OSError as e:
                raise StoreUnavailableError(f"log daemon at {self.socket_path}: {e}") from None
        if not buf.endswith(b"\n"):
            raise StoreUnavailableError(f"log daemon at {self.socket_path} closed the connection")
        answer = json.loads(buf)
        if not answer.get("ok"):
            err = answer.get("error") or {}
            cls = error_class(err.get("code", ""), 400)
            raise cls(err.get("message", "log daemon error"), field=err.get("field"))
        return answer.get("result")

    def attach(
        self,
        agent: str,
        stream: str,
        fd: int,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        pid: int | None = None,
    ) -> int:
        """Hand the read end ``fd`` of ``agent``'s ``stream`` pipe to logd, which
        logs it to ``logs/<agent>/<stream>.log``; returns the stream's ``sid``. The
        caller then closes its own ``fd``. ``pid`` is echoed in the events."""
        req = {
            "op": "attach",
            "agent": agent,
            "stream": stream,
            "max_bytes": max_bytes,
            "keep": keep,
            "pid": pid,
        }
        return int(self._request(req, [fd])["sid"])

    def reopen(self, agent: str | None = None) -> int:
        """Reopen the log files of ``agent`` (all when None); returns how many."""
        return int(self._request({"op": "reopen", "agent": agent}))

    def status(self) -> list[dict[str, Any]]:
        """The streams logd holds: sid, agent, stream, pid, path."""
        return list(self._request({"op": "status"}))

    def shutdown(self) -> None:
        """Stop logd; returns once every log is finished and the socket removed."""
        self._request({"op": "shutdown"})
        self.close()

    def close(self) -> None:
        """Close the event connection (logd keeps running)."""
        if not self.closed:
            self.closed = True
            self._sock.close()

    def __enter__(self) -> LogdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_logd(
    state_dir: str | os.PathLike[str], *, timeout: float = 10.0, client_buffer: int | None = None
) -> None:
    """Run the log daemon for ``state_dir`` like ``python -m corral.supervisor.logd
    --state-dir DIR`` does (in a new session,
    no inherited fds, without the agents' environment markers) and wait until it
    accepts connections. Raises ``StoreUnavailableError`` with its message if not."""
    if client_buffer is None:
        client_buffer = DEFAULT_CLIENT_BUFFER
    # The same daemon as ``python -m corral.supervisor.logd``, in an interpreter that
    # does not load the package corral's __init__ (see corral.supervisor.boot).
    argv = boot.argv(
        "corral.supervisor.logd_server:boot_main",
        "corral.supervisor.logd",
        str(state_dir),
        str(int(client_buffer)),
    )
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_MARKERS}
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StoreUnavailableError(
            f"log daemon for {state_dir} did not start in {timeout}s"
        ) from None
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise StoreUnavailableError(f"log daemon for {state_dir} did not start: {why}")


def ensure_logd(
    state_dir: str | os.PathLike[str], *, timeout: float = 10.0, client_buffer: int | None = None
) -> LogdClient:
    """A client of ``state_dir``'s log daemon, started first if none answers. Safe
    when several callers race: starting happens under an ``flock`` on
    ``DIR/logd.lock``, so one daemon runs. A stale socket or pid file is replaced."""
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return LogdClient(state, timeout=timeout)
    except StoreUnavailableError:
        pass
    fd = os.open(state / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            return LogdClient(state, timeout=timeout)  # started by whoever held the lock
        except StoreUnavailableError:
            pass
        start_logd(state, timeout=timeout, client_buffer=client_buffer)
        return LogdClient(state, timeout=timeout)
    finally:
        os.close(fd)  # releases the lock


# ---- the command ----


def main(argv: list[str] | None = None) -> int:
    """Start the daemon for ``--state-dir``; exit 0 once it listens (``--foreground``:
    run it in this process instead)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m corral.supervisor.logd")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--client-buffer", type=int, default=DEFAULT_CLIENT_BUFFER)
    parser.add_argument("--foreground", action="store_true")
    args = parser.parse_args(argv)
    return run(args.state_dir, args.client_buffer, foreground=args.foreground)


if __name__ == "__main__":
    raise SystemExit(main())
