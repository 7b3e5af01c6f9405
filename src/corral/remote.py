"""The remote client: ``corral.connect("http://HOST:PORT", token=...)``.

Same methods, same results (``corral.model`` records) and same exceptions
(``corral.errors``) as the embedded ``Cluster``, over the HTTP API of
``corral serve``: every operation's method is generated from the registry
(``corral.remote_ops``, calling ``corral.remote_calls``); written here are the
transport and what the protocol exceptions need around a call (a claim's
idempotency key and longer wait, a registration's node token).

One keep-alive connection per thread: a minimal HTTP/1.1 client over a socket with
``TCP_NODELAY`` that writes each request in one ``send`` and reads just what the
server sends (``Content-Length`` or chunked bodies). The
stdlib's ``http.client`` costs more per call than the operation itself (a second
write for the body, e-mail header parsing), and urllib3's pool, on top of it, made a
worker's paced step slower side by side (``bench/http_pace.py``; the figures are in
``docs/performance.md``), so this client stays.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal, Self, overload
from urllib.parse import urlencode, urlsplit

from corral.errors import (
    AuthError,
    CorralError,
    InvalidInputError,
    StoreUnavailableError,
    error_class,
)
from corral.operations import Operation
from corral.outage import CallLost
from corral.remote_ops import HttpOperations
from corral.wire import Closed as _Closed
from corral.wire import Connection as _Connection

__all__ = ["AuthError", "HttpClient"]


def _read_token() -> str | None:
    from corral.server.auth import read_client_token

    return read_client_token()


_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _unencodable_key(body: Any) -> str | None:
    """The first key of ``body`` whose value JSON cannot carry (the argument to name)."""
    if isinstance(body, dict):
        for key, value in body.items():
            try:
                _ENCODER.encode(value)
            except (TypeError, ValueError):
                return str(key)
    return None


class HttpClient(HttpOperations):
    """A cluster client over HTTP. ``token`` defaults to ``$CORRAL_TOKEN``, else
    ``.corral/token``. ``node_tokens`` holds the token each registration returned."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError(f"not an HTTP URL: {url!r}", field="url")
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self.token = token if token is not None else _read_token()
        self.timeout = timeout
        self.node_tokens: dict[str, str] = {}
        self._local = threading.local()
        self._conns: list[_Connection] = []
        self._lock = threading.Lock()
        host = f"[{self._host}]" if ":" in self._host else self._host
        if self._port != (443 if self._https else 80):
            host = f"{host}:{self._port}"
        head = f"Host: {host}\r\nAccept: application/json\r\n"
        if self.token:
            head += f"Authorization: Bearer {self.token}\r\n"
        self._head = head.encode("latin-1")
        self._head_json = self._head + b"Content-Type: application/json\r\n"

    # --- transport ----------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def _conn(self) -> tuple[_Connection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = _Connection(self._host, self._port, self.timeout, tls=self._https)
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        return conn, False

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    @overload
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: Literal[False] = False,
        timeout: float | None = None,
        body_field: str | None = None,
    ) -> Any: ...

    @overload
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: Literal[True],
        timeout: float | None = None,
        body_field: str | None = None,
    ) -> str: ...

    @overload
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        timeout: float | None = None,
        body_field: str | None = None,
    ) -> Any: ...

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        timeout: float | None = None,
        body_field: str | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON (or text when ``raw``). A body that
        JSON cannot carry is refused naming ``body_field`` (the argument the body is),
        else the body's key that holds the value."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = b""
        extra = self._head
        if body is not None:
            try:
                data = _ENCODER.encode(body).encode()
            except (TypeError, ValueError) as exc:
                field = body_field or _unencodable_key(body)
                raise InvalidInputError(
                    f"{field or 'arguments'} must be JSON data: {exc}", field=field
                ) from None
            extra = self._head_json
        try:
            line = f"{method} {target} HTTP/1.1\r\n".encode("ascii")
        except UnicodeEncodeError:
            raise InvalidInputError(f"not an ASCII request target: {target!r}") from None
        message = b"".join((line, extra, b"Content-Length: %d\r\n\r\n" % len(data), data))
        sent = False  # a try reached a server: it may have acted (CallLost)
        for attempt in (0, 1):
            try:
                conn, reused = self._conn()
            except OSError as exc:
                unreachable = CallLost if sent else StoreUnavailableError
                raise unreachable(
                    f"cannot reach {self.url}: {exc}; is corral serve running?"
                ) from None
            try:
                sent = True
                status, payload, close = conn.roundtrip(message, timeout or self.timeout)
            except _Closed as exc:
                self._drop(conn)
                if reused and attempt == 0 and not exc.partial:
                    continue  # the server closed an idle keep-alive connection
                raise CallLost(f"lost the connection to {self.url}: {exc}") from None
            except OSError as exc:
                self._drop(conn)
                raise CallLost(
                    f"no answer from {self.url}: {exc}; is corral serve running?"
                ) from None
            if close:
                self._drop(conn)
            break
        if status >= 400:
            raise self._error(status, payload)
        if raw:
            return payload.decode()
        return json.loads(payload.decode())

    def _error(self, status: int, payload: bytes) -> CorralError:
        try:
            err = json.loads(payload)["error"]
            code, message, field = err["code"], err["message"], err.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, field = "", payload.decode(errors="replace")[:200], None
        exc = error_class(code, status)(message or f"HTTP {status}", field=field)
        exc.status = status
        return exc

    # --- the protocol exceptions (``Operation.exception``) around the generic call ---
    @contextmanager
    def keyed(self, key: str) -> Iterator[None]:
        """This thread's claims (``claim_best_task``, ``complete_and_claim``) inside the
        block carry idempotency key ``key``: a claim sent again with the key its lost
        answer had returns what that answer held (the server keeps the key in the
        store, in the claim's own transaction) instead of taking another task."""
        before = getattr(self._local, "key", None)
        self._local.key = key
        try:
            yield
        finally:
            self._local.key = before

    def _keyed(self, op: Operation, path: str, body: dict[str, Any]) -> Any:
        key = getattr(self._local, "key", None)
        if key is not None:
            body["idempotency_key"] = key
        wait = body.get("wait")  # a waiting claim's answer comes up to ``wait`` later
        timeout = None
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
            timeout = self.timeout + wait
        return self.request(op.method, path, body, timeout=timeout)

    def _registered(self, op: Operation, path: str, body: dict[str, Any]) -> Any:
        if body.get("host") is None:  # the node's process registers it
            body["host"] = socket.gethostname()
        d = self.request(op.method, path, body)
        self.node_tokens[d["id"]] = d["token"]
        return d

    _around: ClassVar[dict[str, Callable[..., Any]]] = {
        "waiting_claim": _keyed,
        "keyed_claim": _keyed,
        "node_token": _registered,
    }

    def for_node(self, node_id: str) -> HttpClient:
        """A client that acts as ``node_id`` with the token its registration returned."""
        return HttpClient(self.url, token=self.node_tokens[node_id], timeout=self.timeout)
