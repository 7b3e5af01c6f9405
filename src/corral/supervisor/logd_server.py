"""The log daemon's loop (:class:`Logd`); the behaviour and the protocol are
described in :mod:`corral.supervisor.logd`, which starts it."""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import functools
import json
import os
import selectors
import signal
import socket
import stat
import sys
import time

from corral.errors import InvalidInputError, StoreUnavailableError
from corral.supervisor.ids import AGENT_ID, RESERVED_IDS
from corral.supervisor.logs import DEFAULT_KEEP, DEFAULT_MAX_BYTES, RotatingLog, unlink

# Annotations only: the daemon does not import typing (nor pathlib; its paths are
# strings), to stay a small process. A checker reads TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CHUNK",
    "DEFAULT_CLIENT_BUFFER",
    "PID_NAME",
    "SOCKET_NAME",
    "STREAMS",
    "Logd",
    "jsonline",
]

STREAMS = ("stdout", "stderr")
DEFAULT_CLIENT_BUFFER = 1024 * 1024
SOCKET_NAME = "logd.sock"
PID_NAME = "logd.pid"
HEARTBEAT_PREFIX = b"HEARTBEAT "
CHUNK = 65536
_MAX_REQUEST = 64 * 1024


def jsonline(obj: dict[str, Any]) -> bytes:
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
        self.truncated = False


class Logd:
    """The daemon's state and loop. Build it (takes the pid lock, binds the socket),
    then :meth:`serve` until shutdown."""

    def __init__(
        self, state_dir: str | os.PathLike[str], *, client_buffer: int = DEFAULT_CLIENT_BUFFER
    ) -> None:
        self.dir = os.path.realpath(state_dir)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.client_buffer = client_buffer
        self._pidfd = self._lock_pidfile()
        self.log = RotatingLog(os.path.join(self.dir, "logs", "supervisor", "logd.log"))
        self.sel = selectors.DefaultSelector()
        self.sources: dict[int, _Source] = {}
        self.logs: dict[tuple[str, str], tuple[RotatingLog, int]] = {}
        self.conns: dict[int, _Conn] = {}
        self._next_sid = 1
        self._next_cid = 1
        self._stop = False
        self._hup = False
        self._stopper: _Conn | None = None
        self.sock_path = os.path.join(self.dir, SOCKET_NAME)
        unlink(self.sock_path)  # stale: the pid lock says nobody serves
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(self.sock_path)
        finally:
            os.umask(old)
        os.chmod(self.sock_path, 0o600)
        self._sock_ino = os.stat(self.sock_path).st_ino
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # kept for EMFILE
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._note("start", pid=os.getpid(), socket=self.sock_path)

    # ---- setup ----

    def _lock_pidfile(self) -> int:
        path = os.path.join(self.dir, PID_NAME)
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
        self.log.write_line(jsonline({"ts": round(time.time(), 6), "event": event, **fields}))

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
        except OSError as e:  # out of fds: refuse this one rather than spin on it
            os.close(self._spare)
            with contextlib.suppress(OSError):
                self.listener.accept()[0].close()
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            self._note("accept-failed", error=e.strerror)
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
            data = os.read(src.fd, CHUNK)
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
                log.feed(chunk, functools.partial(self._on_line, src))
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
            data, fds, flags, _ = socket.recv_fds(conn.sock, CHUNK, 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds, flags = b"", [], 0
        conn.fds.extend(fds)
        if flags & socket.MSG_CTRUNC:  # the kernel could not give us the fd (EMFILE)
            conn.truncated = True
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
                    {**s.describe("attached"), "path": self._path(*s.key)}
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
        except OSError as e:  # out of fds, disk trouble: the caller is told, logd goes on
            self._note("request-failed", op=op, error=str(e))
            message = f"logd could not {op}: {e.strerror or e}"
            error = {"code": StoreUnavailableError.code, "message": message, "field": None}
            self._send(conn, {"ok": False, "error": error})
            return
        self._send(conn, {"ok": True, "result": result})

    def _path(self, agent: str, stream: str) -> str:
        return os.path.join(self.dir, "logs", agent, f"{stream}.log")

    def _attach(self, conn: _Conn, req: dict[str, Any]) -> dict[str, Any]:
        fd = conn.fds.popleft() if conn.fds else None
        try:
            agent, stream = req.get("agent"), req.get("stream")
            max_bytes, keep = req.get("max_bytes", DEFAULT_MAX_BYTES), req.get("keep", DEFAULT_KEEP)
            pid = req.get("pid")
            if not isinstance(agent, str) or not AGENT_ID.fullmatch(agent) or agent in RESERVED_IDS:
                raise InvalidInputError(f"agent: not a valid agent id: {agent!r}", field="agent")
            if stream not in STREAMS:
                raise InvalidInputError("stream: must be stdout or stderr", field="stream")
            if type(max_bytes) is not int or max_bytes < 1:
                raise InvalidInputError("max_bytes: must be an integer >= 1", field="max_bytes")
            if type(keep) is not int or keep < 0:
                raise InvalidInputError("keep: must be an integer >= 0", field="keep")
            if pid is not None and (type(pid) is not int or pid < 1):
                raise InvalidInputError("pid: must be a positive integer or null", field="pid")
            if fd is None and conn.truncated:
                raise OSError(errno.EMFILE, "logd is out of file descriptors")
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
            try:
                self.logs[key] = (RotatingLog(self._path(agent, stream), max_bytes, keep), 1)
            except OSError:
                os.close(fd)
                raise
        os.set_blocking(fd, False)
        src = _Source(self._next_sid, agent, stream, fd, pid)
        self._next_sid += 1
        self.sources[src.sid] = src
        self.sel.register(fd, selectors.EVENT_READ, ("src", src))
        self._note("attach", sid=src.sid, agent=agent, stream=stream, pid=pid)
        return {"sid": src.sid, "path": self._path(agent, stream)}

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
        data = jsonline(event)
        for conn in list(self.conns.values()):
            if not conn.subscribed:
                continue
            droppable = event["kind"] == "line"  # an eof is rare and always sent
            if droppable and len(conn.out) + len(data) > self.client_buffer:
                if not conn.dropped:
                    self._note("client-slow", client=conn.cid, queued=len(conn.out))
                conn.dropped += 1
                continue
            self._send(conn, event, data)

    def _send(self, conn: _Conn, obj: dict[str, Any], data: bytes | None = None) -> None:
        conn.out += data if data is not None else jsonline(obj)
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
                conn.out += jsonline({"kind": "dropped", "count": conn.dropped})
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
                while data := os.read(src.fd, CHUNK):
                    self._feed(src, data)
            except OSError:
                pass
            self._close_source(src, "stopped")
        try:
            if os.stat(self.sock_path).st_ino == self._sock_ino:
                os.unlink(self.sock_path)
        except FileNotFoundError:
            pass
        self.listener.close()
        unlink(os.path.join(self.dir, PID_NAME))  # still locked: nobody raced us
        self._note("shutdown", by="request" if self._stopper else "signal")
        self.log.close()
        os.close(self._spare)
        conns = sorted(self.conns.values(), key=lambda c: c is not self._stopper)
        for conn in conns:  # the one who asked first: everything is finished now
            if conn is self._stopper:
                conn.out += jsonline({"ok": True, "result": None})
            elif conn.subscribed:
                conn.out += jsonline({"kind": "shutdown"})
            try:  # best effort, bounded: a stuck client does not hold the exit
                conn.sock.settimeout(1.0)
                conn.sock.sendall(conn.out)
            except OSError:
                pass
            conn.sock.close()
        os.close(self._pidfd)


# ---- the daemon's process ----


def _serve(state_dir: str, client_buffer: int, ready: int | None) -> int:
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


def run(
    state_dir: str | os.PathLike[str],
    client_buffer: int = DEFAULT_CLIENT_BUFFER,
    *,
    foreground: bool = False,
) -> int:
    """Start the daemon for ``state_dir`` (double fork, a session of its own, standard
    streams on ``/dev/null``, cwd ``/``) and return 0 once it listens, 1 with the
    reason on stderr if it could not start; ``foreground``: serve in this process.
    The body of ``python -m corral.supervisor.logd``, and of :func:`boot_main`."""
    state = os.path.realpath(state_dir)
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    if foreground:
        return _serve(state, client_buffer, None)
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
        code = _serve(state, client_buffer, w)
    finally:
        os._exit(code)


def boot_main(argv: list[str]) -> int:
    """:func:`run` for ``[state_dir, client_buffer]``: what
    :func:`~corral.supervisor.logd.start_logd` runs through
    :func:`corral.supervisor.boot.argv` (no ``argparse``: the daemon keeps what its
    launcher imported)."""
    state_dir, client_buffer = argv
    return run(state_dir, int(client_buffer))
