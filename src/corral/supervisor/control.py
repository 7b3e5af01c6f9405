"""The supervisor's control socket: one JSON request and one JSON answer per connection.

The running supervisor listens on ``<state dir>/control.sock``, a Unix socket with mode
0600 inside a directory with mode 0700, so only the user running the supervisor can
reach it. A client connects, sends one request and reads one answer, each a JSON object
on one line::

    -> {"id": "4f1c…", "command": "stop", "args": {"id": "user3"}}
    <- {"id": "4f1c…", "ok": true, "result": {...}}
    <- {"id": "4f1c…", "ok": false,
        "error": {"code": "not_found", "status": 404, "message": "…", "field": "id", "hint": "…"}}

``code``/``status`` are those of the ``corral.errors`` class that was raised, so the
client raises the same class (:func:`corral.errors.error_class`) and the CLI exits
with its code (1 refused, 2 bad input, 3 unavailable). A request larger than
:data:`MAX_REQUEST` bytes, one that is not a JSON object, or one whose ``id``,
``command`` or ``args`` is malformed is answered with an error envelope; the server
never crashes on a request. Commands go through a ``dispatch(command, args)``
coroutine (``corral.supervisor.commands.dispatcher``), which validates them against
the command registry.

The socket file is created by the server: an existing path is replaced only when it
is a socket that nobody answers on (a supervisor that died without cleaning up); a
live socket or any other kind of file is refused. A lock file next to it
(``control.sock.lock``) makes that check and the bind atomic between two supervisors
started at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from corral.errors import (
    AuthError,
    CorralError,
    InvalidInputError,
    StoreUnavailableError,
    error_class,
)

__all__ = ["MAX_REQUEST", "ControlServer", "Dispatch", "envelope_error", "request"]

MAX_REQUEST = 64 * 1024  # bytes of one request line
MAX_ANSWER = 16 * 1024 * 1024  # bytes of one answer line the client accepts
MAX_ID = 128  # characters of a request id
READ_TIMEOUT = 10.0  # seconds a client has to send its request
CLOSE_GRACE = 5.0  # seconds close() waits for requests in flight to be answered

Dispatch = Callable[[str, dict[str, Any]], Awaitable[Any]]


def _no_supervisor(path: str | os.PathLike[str]) -> StoreUnavailableError:
    return StoreUnavailableError(f"no supervisor at {path} (is corral supervise running?)")


def envelope_error(exc: BaseException) -> dict[str, Any]:
    """The ``error`` object of an answer for ``exc`` (a ``CorralError`` keeps its
    code, status, field and hint; anything else is an internal error, status 500)."""
    if isinstance(exc, CorralError):
        return {
            "code": exc.code,
            "status": exc.status,
            "message": exc.message,
            "field": exc.field,
            "hint": exc.hint,
        }
    return {
        "code": "internal",
        "status": 500,
        "message": f"supervisor error: {type(exc).__name__}: {exc}",
        "field": None,
        "hint": "See the supervisor's log (logs/supervisor/supervisor.log).",
    }


def _parse_request(line: bytes) -> tuple[str | None, str, dict[str, Any]]:
    """``(id, command, args)`` of a request line, or ``InvalidInputError`` naming the
    bad field (the id is returned when it was readable, for the error answer)."""
    try:
        req = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        raise InvalidInputError("request is not valid JSON", field="request") from None
    if not isinstance(req, dict):
        raise InvalidInputError("request must be a JSON object", field="request")
    unknown = sorted(set(req) - {"id", "command", "args"})
    if unknown:
        raise InvalidInputError("unknown request key", field=unknown[0])
    rid = req.get("id")
    if not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID:
        raise InvalidInputError(f"id must be a string of 1-{MAX_ID} characters", field="id")
    command = req.get("command")
    if not isinstance(command, str) or not command:
        raise _WithId(rid, InvalidInputError("command must be a string", field="command"))
    args = req.get("args", {})
    if not isinstance(args, dict):
        raise _WithId(rid, InvalidInputError("args must be a JSON object", field="args"))
    return rid, command, args


class _WithId(Exception):
    def __init__(self, rid: str, error: CorralError) -> None:
        self.rid, self.error = rid, error


def _secure_dir(directory: Path) -> None:
    """Create ``directory`` (mode 0700), or tighten an existing one we own to 0700."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.stat()
    if st.st_uid != os.getuid():
        raise AuthError(f"{directory} belongs to another user", field="state_dir")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(directory, 0o700)


class ControlServer:
    """The asyncio Unix-socket server of the control protocol.

    ``await start()`` binds ``path`` (replacing a stale socket, refusing a live one
    with a ``CorralError``); ``await close()`` stops accepting, waits up to
    :data:`CLOSE_GRACE` seconds for requests in flight (so ``shutdown`` is answered
    before the supervisor exits) and removes the socket file if it is still ours.
    """

    def __init__(self, path: str | os.PathLike[str], dispatch: Dispatch) -> None:
        self.path = Path(path)
        self.dispatch = dispatch
        self._server: asyncio.AbstractServer | None = None
        self._lock_fd: int | None = None
        self._inode: int | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        _secure_dir(self.path.parent)
        lock = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            raise CorralError(f"another supervisor holds {self.path}", field="state_dir") from None
        try:
            self._replace_stale()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(self.path))
                os.chmod(self.path, 0o600)  # the 0700 directory guards the moment before
                sock.listen(64)
                sock.setblocking(False)
                self._inode = os.stat(self.path).st_ino
                self._server = await asyncio.start_unix_server(
                    self._on_connect, sock=sock, limit=MAX_REQUEST + 1
                )
            except BaseException:
                sock.close()
                raise
        except BaseException:
            os.close(lock)
            raise
        self._lock_fd = lock

    def _replace_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise InvalidInputError(f"{self.path} exists and is not a socket", field="state_dir")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(self.path))
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # nobody listens: a dead supervisor's socket
            return
        finally:
            probe.close()
        raise CorralError(f"a supervisor already listens on {self.path}", field="state_dir")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            pending = {t for t in self._handlers if t is not asyncio.current_task()}
            if pending:
                await asyncio.wait(pending, timeout=CLOSE_GRACE)
            try:
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def __aenter__(self) -> ControlServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            answer = await self._answer(reader)
            writer.write(json.dumps(answer, default=str).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader) -> dict[str, Any]:
        rid: str | None = None
        try:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), READ_TIMEOUT)
            except asyncio.IncompleteReadError as e:
                line = e.partial  # the client closed its side without a newline
            except asyncio.LimitOverrunError:
                raise InvalidInputError(
                    f"request larger than {MAX_REQUEST} bytes", field="request"
                ) from None
            except (TimeoutError, ValueError):
                # ValueError: the stream's limit was hit (an over-long line)
                raise InvalidInputError(
                    f"no complete request within {READ_TIMEOUT:g} s or larger than "
                    f"{MAX_REQUEST} bytes",
                    field="request",
                ) from None
            if len(line) > MAX_REQUEST:
                raise InvalidInputError(f"request larger than {MAX_REQUEST} bytes", field="request")
            try:
                rid, command, args = _parse_request(line)
            except _WithId as e:
                rid = e.rid
                raise e.error from None
            result = await self.dispatch(command, args)
            return {"id": rid, "ok": True, "result": result}
        except Exception as exc:  # every failure is an answer, never a crash
            return {"id": rid, "ok": False, "error": envelope_error(exc)}


def request(
    path: str | os.PathLike[str], command: str, /, *, timeout: float | None = None, **args: Any
) -> Any:
    """Send one command to the supervisor listening on ``path`` and return its result.

    Raises the ``CorralError`` subclass the answer names (``NotFoundError`` for an
    unknown agent, ``InvalidInputError`` for a bad argument …), and
    ``StoreUnavailableError`` "no supervisor at PATH (is corral supervise running?)"
    when nothing listens there. ``timeout`` bounds the whole exchange (``None``: wait
    for the answer; a ``stop`` takes up to the agent's ``stop_timeout``).
    """
    import uuid  # the client's side only: not loaded by the supervisor

    rid = uuid.uuid4().hex
    payload = json.dumps({"id": rid, "command": command, "args": args}).encode() + b"\n"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(5.0 if timeout is None else min(timeout, 5.0))
        try:
            sock.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise _no_supervisor(path) from None
        except PermissionError:
            raise AuthError(f"no permission to use {path}", field="state_dir") from None
        except OSError as e:
            if e.errno in (errno.ENOTSOCK, errno.ECONNREFUSED, errno.ENOENT):
                raise _no_supervisor(path) from None
            raise StoreUnavailableError(f"cannot reach the supervisor at {path}: {e}") from None
        sock.settimeout(timeout)
        try:
            sock.sendall(payload)
            data = bytearray()
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_ANSWER:
                    raise StoreUnavailableError(f"answer from {path} is too large")
        except TimeoutError:
            raise StoreUnavailableError(
                f"the supervisor at {path} did not answer {command} within {timeout:g} s"
            ) from None
        except OSError as e:
            raise StoreUnavailableError(f"lost the supervisor at {path}: {e}") from None
    finally:
        sock.close()
    if not data:
        raise StoreUnavailableError(f"the supervisor at {path} closed without answering {command}")
    try:
        answer = json.loads(data)
    except ValueError:
        raise StoreUnavailableError(f"unreadable answer from {path}") from None
    if not isinstance(answer, dict) or answer.get("id") not in (rid, None):
        raise StoreUnavailableError(f"answer from {path} is not for this request")
    if answer.get("ok") is True:
        return answer.get("result")
    found = answer.get("error")
    err: dict[str, Any] = found if isinstance(found, dict) else {}
    status = err["status"] if isinstance(err.get("status"), int) else 400
    cls = error_class(str(err.get("code", "")), status)
    raise cls(str(err.get("message", "the supervisor refused")), field=err.get("field"))
