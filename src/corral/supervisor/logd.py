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
reopens every log (after an outside tool moved the files).

Events go to every connected supervisor (a subscribed connection) as JSON lines:

- ``{"kind": "line", "sid", "agent", "stream", "pid", "line"}`` for each line that
  starts with ``HEARTBEAT `` (the line is logged too);
- ``{"kind": "eof", "sid", "agent", "stream", "pid"}`` when the child's end closed
  (every writer exited) and the log was finished;
- on subscribing, ``{"kind": "attached", ...}`` for every stream logd still holds,
  then ``{"kind": "synced"}``;
- ``{"kind": "dropped", "count"}`` after events were dropped for this client.
  A client that does not read is never waited for: once ``client_buffer`` bytes are
  queued for it, its events are dropped (logged in ``logd.log``) until it catches up.
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

import argparse
import collections
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from corral.errors import InvalidInputError, StoreUnavailableError, error_class
from corral.supervisor.logs import DEFAULT_KEEP, DEFAULT_MAX_BYTES, RotatingLog
from corral.supervisor.manifest import _ID, RESERVED_IDS

__all__ = [
    "DEFAULT_CLIENT_BUFFER",
    "STREAMS",
    "Logd",
    "LogdClient",
    "ensure_logd",
    "main",
    "start_logd",
]

STREAMS = ("stdout", "stderr")
DEFAULT_CLIENT_BUFFER = 1024 * 1024
SOCKET_NAME = "logd.sock"
PID_NAME = "logd.pid"
LOCK_NAME = "logd.lock"
HEARTBEAT_PREFIX = b"HEARTBEAT "
_CHUNK = 65536
_MAX_REQUEST = 64 * 1024
# never passed on to the daemon: it must not look like one of the supervisor's agents
_CHILD_MARKERS = ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN")


def _jsonline(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class _Source:
    """One attached pipe read end."""

    def __init__(self, sid: int, agent: str, stream: str, fd: int, pid: int | None) -> None:
        self.sid, self.agent, self.stream, self.fd, self.pid = sid, agent, stream, fd, pid
        self.partial = b""

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent, self.stream)

    def describe(self, kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "sid": self.sid,
            "agent": self.agent,
            "stream": self.stream,
            "pid": self.pid,
        }


class _Conn:
    """One client connection (a request, or a subscribed supervisor)."""

    def __init__(self, cid: int, sock: socket.socket) -> None:
        self.cid, self.sock = cid, sock
        self.inbuf = b""
        self.fds: collections.deque[int] = collections.deque()
        self.out = bytearray()
        self.subscribed = False
        self.dropped = 0
        self.writing = False


class Logd:
    """The daemon's state and loop. Build it (takes the pid lock, binds the socket),
    then :meth:`serve` until shutdown."""

    def __init__(
        self, state_dir: str | os.PathLike[str], *, client_buffer: int = DEFAULT_CLIENT_BUFFER
    ) -> None:
        self.dir = Path(state_dir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.client_buffer = client_buffer
        self._pidfd = self._lock_pidfile()
        self.log = RotatingLog(self.dir / "logs" / "supervisor" / "logd.log")
        self.sel = selectors.DefaultSelector()
        self.sources: dict[int, _Source] = {}
        self.logs: dict[tuple[str, str], tuple[RotatingLog, int]] = {}
        self.conns: dict[int, _Conn] = {}
        self._next_sid = 1
        self._next_cid = 1
        self._stop = False
        self._hup = False
        self._stopper: _Conn | None = None
        self.sock_path = self.dir / SOCKET_NAME
        self.sock_path.unlink(missing_ok=True)  # stale: the pid lock says nobody serves
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(str(self.sock_path))
        finally:
            os.umask(old)
        os.chmod(self.sock_path, 0o600)
        self._sock_ino = os.stat(self.sock_path).st_ino
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._note("start", pid=os.getpid(), socket=str(self.sock_path))

    # ---- setup ----

    def _lock_pidfile(self) -> int:
        path = self.dir / PID_NAME
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                raise RuntimeError(f"already running (pid {other or '?'})") from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a file a stopping daemon unlinked meanwhile
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
            os.close(fd)

    def install_signals(self) -> None:
        """SIGHUP reopens every log, SIGTERM/SIGINT stop; both wake the loop."""
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "_hup", True))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(self, "_stop", True))

    def _note(self, event: str, **fields: Any) -> None:
        self.log.write_line(_jsonline({"ts": round(time.time(), 6), "event": event, **fields}))

    # ---- the loop ----

    def serve(self) -> None:
        while not self._stop:
            for key, mask in self.sel.select():
                try:
                    self._dispatch(key.data, mask)
                except Exception as e:  # one bad event never stops the daemon
                    self._note("error", error=repr(e))
                if self._stop:
                    break
            if self._hup:
                self._hup = False
                self._reopen(None, "SIGHUP")
        self._shutdown()

    def _dispatch(self, data: tuple[str, Any], mask: int) -> None:
        kind, obj = data
        if kind == "src":
            if obj.sid in self.sources:
                self._read_source(obj)
        elif kind == "conn":
            if obj.cid in self.conns and mask & selectors.EVENT_WRITE:
                self._flush(obj)
            if obj.cid in self.conns and mask & selectors.EVENT_READ:
                self._read_conn(obj)
        elif kind == "listen":
            self._accept()
        else:  # the signal wake-up socket: drain it
            try:
                while self._wake_r.recv(512):
                    pass
            except BlockingIOError:
                pass

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        conn = _Conn(self._next_cid, sock)
        self._next_cid += 1
        self.conns[conn.cid] = conn
        self.sel.register(sock, selectors.EVENT_READ, ("conn", conn))

    def _close_conn(self, conn: _Conn) -> None:
        if self.conns.pop(conn.cid, None) is None:
            return
        self.sel.unregister(conn.sock)
        conn.sock.close()
        while conn.fds:
            os.close(conn.fds.popleft())
        if conn.subscribed:
            self._note("client-gone", client=conn.cid, dropped=conn.dropped)

    # ---- pipes ----

    def _read_source(self, src: _Source) -> None:
        try:
            data = os.read(src.fd, _CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self._feed(src, data)
        else:
            self._close_source(src, "eof")

    def _feed(self, src: _Source, data: bytes) -> None:
        log = self.logs[src.key][0]
        data = src.partial + data
        end = data.rfind(b"\n") + 1
        rest = data[end:]
        whole = [data[:end]] if end else []
        while len(rest) > log.max_line:  # a runaway line: cut, like RotatingLog.feed
            whole.append(rest[: log.max_line] + b"\n")
            rest = rest[log.max_line :]
        src.partial = rest
        for chunk in whole:  # each ends in a newline: the log keeps no partial line
            if HEARTBEAT_PREFIX in chunk:
                log.feed(chunk, lambda line, s=src: self._on_line(s, line))
            else:
                log.feed(chunk)

    def _on_line(self, src: _Source, line: bytes) -> None:
        if line.startswith(HEARTBEAT_PREFIX):
            event = src.describe("line")
            event["line"] = line.decode("utf-8", "replace")
            self._emit(event)

    def _close_source(self, src: _Source, why: str) -> None:
        """The pipe reached EOF (or logd stops): write the partial line, close."""
        del self.sources[src.sid]
        self.sel.unregister(src.fd)
        if src.partial:
            self._feed(src, b"\n")
        os.close(src.fd)
        log, refs = self.logs[src.key]
        if refs == 1:
            log.close()
            del self.logs[src.key]
        else:
            self.logs[src.key] = (log, refs - 1)
        self._note(why, sid=src.sid, agent=src.agent, stream=src.stream, pid=src.pid)
        if why == "eof":
            self._emit(src.describe("eof"))

    # ---- client connections ----

    def _read_conn(self, conn: _Conn) -> None:
        try:
            data, fds, flags, _ = socket.recv_fds(conn.sock, _CHUNK, 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds, flags = b"", [], 0
        conn.fds.extend(fds)
        if flags & socket.MSG_CTRUNC:
            self._note("fds-truncated", client=conn.cid)
        if not data:
            self._close_conn(conn)
            return
        conn.inbuf += data
        while conn.cid in self.conns and (nl := conn.inbuf.find(b"\n")) >= 0:
            raw, conn.inbuf = conn.inbuf[:nl], conn.inbuf[nl + 1 :]
            try:
                req = json.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError
            except ValueError:
                self._close_conn(conn)  # its fds can no longer be matched to requests
                return
            self._request(conn, req)
        if len(conn.inbuf) > _MAX_REQUEST:
            self._close_conn(conn)

    def _request(self, conn: _Conn, req: dict[str, Any]) -> None:
        op = req.get("op")
        try:
            if op == "attach":
                result: Any = self._attach(conn, req)
            elif op == "subscribe":
                self._subscribe(conn)
                return
            elif op == "reopen":
                agent = req.get("agent")
                if agent is not None and not isinstance(agent, str):
                    raise InvalidInputError("agent must be a string or null", field="agent")
                result = self._reopen(agent, "request")
            elif op == "status":
                result = [
                    {**s.describe("attached"), "path": str(self._path(*s.key))}
                    for s in self.sources.values()
                ]
            elif op == "shutdown":
                self._stop, self._stopper = True, conn
                return
            else:
                raise InvalidInputError(f"unknown op {op!r}", field="op")
        except InvalidInputError as e:
            self._send(
                conn,
                {"ok": False, "error": {"code": e.code, "message": e.message, "field": e.field}},
            )
            return
        self._send(conn, {"ok": True, "result": result})

    def _path(self, agent: str, stream: str) -> Path:
        return self.dir / "logs" / agent / f"{stream}.log"

    def _attach(self, conn: _Conn, req: dict[str, Any]) -> dict[str, Any]:
        fd = conn.fds.popleft() if conn.fds else None
        try:
            agent, stream = req.get("agent"), req.get("stream")
            max_bytes, keep = req.get("max_bytes", DEFAULT_MAX_BYTES), req.get("keep", DEFAULT_KEEP)
            pid = req.get("pid")
            if not isinstance(agent, str) or not _ID.fullmatch(agent) or agent in RESERVED_IDS:
                raise InvalidInputError(f"agent: not a valid agent id: {agent!r}", field="agent")
            if stream not in STREAMS:
                raise InvalidInputError("stream: must be stdout or stderr", field="stream")
            if type(max_bytes) is not int or max_bytes < 1:
                raise InvalidInputError("max_bytes: must be an integer >= 1", field="max_bytes")
            if type(keep) is not int or keep < 0:
                raise InvalidInputError("keep: must be an integer >= 0", field="keep")
            if pid is not None and (type(pid) is not int or pid < 1):
                raise InvalidInputError("pid: must be a positive integer or null", field="pid")
            if fd is None:
                raise InvalidInputError("fd: attach carries one file descriptor", field="fd")
            mode = os.fstat(fd).st_mode
            if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
                raise InvalidInputError("fd: must be a pipe or a socket", field="fd")
        except InvalidInputError:
            if fd is not None:
                os.close(fd)
            raise
        key = (agent, stream)
        if key in self.logs:
            log, refs = self.logs[key]
            log.max_bytes, log.keep = max_bytes, keep
            self.logs[key] = (log, refs + 1)
        else:
            self.logs[key] = (RotatingLog(self._path(agent, stream), max_bytes, keep), 1)
        os.set_blocking(fd, False)
        src = _Source(self._next_sid, agent, stream, fd, pid)
        self._next_sid += 1
        self.sources[src.sid] = src
        self.sel.register(fd, selectors.EVENT_READ, ("src", src))
        self._note("attach", sid=src.sid, agent=agent, stream=stream, pid=pid)
        return {"sid": src.sid, "path": str(self._path(agent, stream))}

    def _subscribe(self, conn: _Conn) -> None:
        conn.subscribed = True
        self._note("client", client=conn.cid, streams=len(self.sources))
        for src in self.sources.values():
            self._send(conn, src.describe("attached"))
        self._send(conn, {"kind": "synced"})

    def _reopen(self, agent: str | None, why: str) -> int:
        n = 0
        for (name, _), (log, _) in self.logs.items():
            if agent is None or name == agent:
                log.reopen()
                n += 1
        self.log.reopen()
        self._note("reopen", agent=agent, logs=n, by=why)
        return n

    # ---- output to clients ----

    def _emit(self, event: dict[str, Any]) -> None:
        data = _jsonline(event)
        for conn in list(self.conns.values()):
            if not conn.subscribed:
                continue
            if len(conn.out) + len(data) > self.client_buffer:
                if not conn.dropped:
                    self._note("client-slow", client=conn.cid, queued=len(conn.out))
                conn.dropped += 1
                continue
            self._send(conn, event, data)

    def _send(self, conn: _Conn, obj: dict[str, Any], data: bytes | None = None) -> None:
        conn.out += data if data is not None else _jsonline(obj)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        while conn.out:
            try:
                n = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close_conn(conn)
                return
            del conn.out[:n]
            if not conn.out and conn.dropped:
                self._note("client-caught-up", client=conn.cid, dropped=conn.dropped)
                conn.out += _jsonline({"kind": "dropped", "count": conn.dropped})
                conn.dropped = 0
        want = bool(conn.out)
        if want != conn.writing:
            conn.writing = want
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.sel.modify(conn.sock, events, ("conn", conn))

    # ---- stopping ----

    def _shutdown(self) -> None:
        for src in list(self.sources.values()):
            try:  # what the pipe holds now, then the partial line
                while data := os.read(src.fd, _CHUNK):
                    self._feed(src, data)
            except OSError:
                pass
            self._close_source(src, "stopped")
        try:
            if os.stat(self.sock_path).st_ino == self._sock_ino:
                self.sock_path.unlink()
        except FileNotFoundError:
            pass
        self.listener.close()
        self._note("shutdown", by="request" if self._stopper else "signal")
        for conn in list(self.conns.values()):
            if conn is self._stopper:
                conn.out += _jsonline({"ok": True, "result": None})
            elif conn.subscribed:
                conn.out += _jsonline({"kind": "shutdown"})
            try:  # best effort, bounded: a stuck client does not hold the exit
                conn.sock.settimeout(1.0)
                conn.sock.sendall(conn.out)
            except OSError:
                pass
            conn.sock.close()
        (self.dir / PID_NAME).unlink(missing_ok=True)  # still locked: nobody raced us
        self.log.close()
        os.close(self._pidfd)


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
        self._sock.sendall(_jsonline({"op": "subscribe"}))
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
                data = self._sock.recv(_CHUNK)
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
                data = _jsonline(req)
                if fds:
                    socket.send_fds(sock, [data], fds)
                else:
                    sock.sendall(data)
                buf = b""
                while not buf.endswith(b"\n"):
                    part = sock.recv(_CHUNK)
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
    """Run ``python -m corral.supervisor.logd --state-dir DIR`` (in a new session,
    no inherited fds, without the agents' environment markers) and wait until it
    accepts connections. Raises ``StoreUnavailableError`` with its message if not."""
    argv = [sys.executable, "-m", "corral.supervisor.logd", "--state-dir", str(state_dir)]
    if client_buffer is not None:
        argv += ["--client-buffer", str(client_buffer)]
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


def _serve(state_dir: Path, client_buffer: int, ready: int | None) -> int:
    try:
        daemon = Logd(state_dir, client_buffer=client_buffer)
        daemon.install_signals()
    except Exception as e:  # told to the launcher, which prints it
        if ready is not None:
            os.write(ready, f"logd: {state_dir}: {e}\n".encode())
            os.close(ready)
        else:
            print(f"logd: {state_dir}: {e}", file=sys.stderr)
        return 1
    if ready is not None:
        os.write(ready, b"ok\n")
        os.close(ready)
    daemon.serve()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Start the daemon for ``--state-dir``; exit 0 once it listens (``--foreground``:
    run it in this process instead)."""
    parser = argparse.ArgumentParser(prog="python -m corral.supervisor.logd")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--client-buffer", type=int, default=DEFAULT_CLIENT_BUFFER)
    parser.add_argument("--foreground", action="store_true")
    args = parser.parse_args(argv)
    state = Path(args.state_dir).resolve()
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    if args.foreground:
        return _serve(state, args.client_buffer, None)
    r, w = os.pipe()
    if os.fork():  # the launcher: wait for the grandchild's word
        os.close(w)
        msg = b""
        while part := os.read(r, 4096):
            msg += part
        os.wait()
        if msg == b"ok\n":
            return 0
        sys.stderr.write(msg.decode(errors="replace") or "logd: exited before listening\n")
        return 1
    os.close(r)
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for n in (0, 1, 2):
        os.dup2(null, n)
    os.close(null)
    code = 1
    try:
        code = _serve(state, args.client_buffer, w)
    finally:
        os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
