"""The remote client: ``corral.connect("http://HOST:PORT", token=...)``.

Same methods, same results (``corral.model`` records) and same exceptions
(``corral.errors``) as the embedded ``Cluster``, over the HTTP API of
``corral serve``. The transport is urllib3: one pool of keep-alive connections per
client (``TCP_NODELAY``, urllib3's default), shared by its threads, each thread
taking its own connection for a call; no urllib3 retries, no redirects. A request
whose reused connection turns out to be closed by the server (an idle keep-alive
connection ended before the request reached it) is sent again once, on a new one.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
from dataclasses import fields
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import (
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)
from urllib3.util import Timeout

from corral.errors import (
    AuthError,
    CorralError,
    InvalidInputError,
    StoreUnavailableError,
    error_class,
)
from corral.model import Assessment, CatchUp, Event, Node, Registered, Settings, State, Task
from corral.validation import check_id, check_limit, check_positive, check_seq, check_task_id

__all__ = ["AuthError", "HttpClient"]


_FIELDS: dict[type, frozenset[str]] = {}


def _build(cls: type, d: dict[str, Any]) -> Any:
    """``cls`` from a response object, ignoring fields this client does not know (a
    newer server may send more)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    if names.issuperset(d):
        return cls(**d)
    return cls(**{k: v for k, v in d.items() if k in names})


def _task(d: dict[str, Any]) -> Task:
    t = dict(d)
    t["roles"] = tuple(t.get("roles") or ())
    return _build(Task, t)


def _event(d: dict[str, Any]) -> Event:
    return _build(Event, d)


_NODE_PATHS: dict[str, str] = {}


def _node_path(node_id: Any) -> str:
    """The node id as one path segment (checked, quoted; remembered once checked)."""
    if type(node_id) is str:
        path = _NODE_PATHS.get(node_id)
        if path is not None:
            return path
    path = quote(check_id(node_id), safe="").replace(".", "%2E")
    if len(_NODE_PATHS) >= 4096:
        _NODE_PATHS.clear()
    _NODE_PATHS[node_id] = path
    return path


def _read_token() -> str | None:
    from corral.server.auth import read_client_token

    return read_client_token()


_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# Connections a client keeps open between calls (one per thread that calls at once;
# a thread beyond them opens its own and closes it after its call).
_POOL_SIZE = 32
# The errors of a connection the server closed before any of the answer arrived.
_CLOSED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_sent = threading.local()  # .reused: whether this thread's last request reused a connection


class _Connection(HTTPConnection):
    """urllib3's connection with two changes. It counts the requests sent since it
    (re)connected, so a failed request knows whether it went out on a reused
    connection. And it writes a request with a body in one ``send``: urllib3 writes
    the head, then the body; on a busy machine the first write wakes the server,
    which reads the head and waits, and the second costs another round of waking
    (measured: ~0.3 ms a call, more than the operation; ``docs/performance.md``)."""

    sent = 0
    _head: bytes | None = None  # the request head held back until its body is sent

    def request(self, method: str, url: str, body: Any = None, *args: Any, **kw: Any) -> None:
        _sent.reused = self.sent > 0
        self.sent += 1
        self._head = b"" if body else None
        try:
            super().request(method, url, body, *args, **kw)
        finally:
            self._head = None

    def send(self, data: Any) -> None:
        head = self._head
        if head is not None:
            if not head:  # the head: hold it for the body
                self._head = bytes(data)
                return
            self._head = None
            data = head + data  # the body: both in one write
        super().send(data)

    def close(self) -> None:
        self.sent = 0
        super().close()


class _TLSConnection(_Connection, HTTPSConnection):
    """The same over TLS (the system's trusted certificates, the host name checked)."""


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


class HttpClient:
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
        self._timeout = Timeout(timeout)
        headers = {"Accept": "application/json", "User-Agent": "corral"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._headers = headers
        self._headers_json = {**headers, "Content-Type": "application/json"}
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    # --- transport ----------------------------------------------------------------
    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _new_pool(self) -> HTTPConnectionPool:
        """A pool of keep-alive connections: thread-safe, never blocking (a thread
        that finds no idle connection opens one), no retries, no redirects."""
        kw: dict[str, Any] = {"maxsize": _POOL_SIZE, "block": False, "retries": False}
        if self._https:
            import ssl

            return _TLSPool(self._host, self._port, ssl_context=ssl.create_default_context(), **kw)
        return _Pool(self._host, self._port, **kw)

    def close(self) -> None:
        """Close the idle connections (one in use closes when its call ends); a later
        call opens new ones."""
        with self._lock:
            pool, self._pool = self._pool, self._new_pool()
        pool.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON (or text when ``raw``)."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        if not target.isascii():
            raise InvalidInputError(f"not an ASCII request target: {target!r}")
        data = None
        headers = self._headers
        if body is not None:
            try:
                data = _ENCODER.encode(body).encode()
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"arguments must be JSON data: {exc}") from None
            headers = self._headers_json
        limit = self._timeout if timeout is None else Timeout(timeout)
        for attempt in (0, 1):
            _sent.reused = False
            try:
                resp = self._pool.urlopen(
                    method, target, body=data, headers=headers, retries=False,
                    redirect=False, assert_same_host=False, timeout=limit,
                    preload_content=False,
                )  # fmt: skip
                break
            except ProtocolError as exc:  # the connection ended before the answer's head
                cause = exc.args[1] if len(exc.args) > 1 else exc
                if attempt == 0 and _sent.reused and isinstance(cause, _CLOSED):
                    continue  # the server closed an idle keep-alive connection
                raise self._lost(cause) from None
            except (HTTPError, OSError) as exc:
                raise self._unreachable(exc) from None
        try:
            payload = resp.data  # the body, the connection back in the pool once read
        except ProtocolError as exc:
            raise self._lost(exc.args[1] if len(exc.args) > 1 else exc) from None
        except (HTTPError, OSError) as exc:
            raise self._unreachable(exc) from None
        status = resp.status
        if status >= 400:
            raise self._error(status, payload)
        if raw:
            return payload.decode()
        return json.loads(payload.decode())

    def _lost(self, cause: object) -> StoreUnavailableError:
        return StoreUnavailableError(f"lost the connection to {self.url}: {cause}")

    def _unreachable(self, exc: BaseException) -> StoreUnavailableError:
        if isinstance(exc, ReadTimeoutError):
            reason: object = "timed out waiting for the answer"
        elif isinstance(exc, NewConnectionError) and exc.__cause__ is not None:
            reason = exc.__cause__  # the socket's error, e.g. connection refused
        else:
            reason = exc
        return StoreUnavailableError(f"cannot reach {self.url}: {reason}; is corral serve running?")

    def _error(self, status: int, payload: bytes) -> CorralError:
        try:
            err = json.loads(payload)["error"]
            code, message, field = err["code"], err["message"], err.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, field = "", payload.decode(errors="replace")[:200], None
        exc = error_class(code, status)(message or f"HTTP {status}", field=field)
        exc.status = status  # type: ignore[attr-defined]
        return exc

    # --- settings -----------------------------------------------------------------
    def settings(self) -> Settings:
        return _build(Settings, self.request("GET", "/v1/settings"))

    def configure(self, **changes: Any) -> Settings:
        return _build(Settings, self.request("PATCH", "/v1/settings", changes))

    # --- nodes --------------------------------------------------------------------
    def register_node(
        self,
        node_id: str,
        role: str,
        model: str | None = None,
        strength: str | None = None,
        heartbeat_interval: float | None = None,
        *,
        host: str | None = None,
        pid: int | None = None,
    ) -> Registered:
        body = {
            "node_id": node_id,
            "role": role,
            "model": model,
            "strength": strength,
            "heartbeat_interval": heartbeat_interval,
            "host": socket.gethostname() if host is None else host,
            "pid": os.getpid() if pid is None else pid,
        }
        d = self.request("POST", "/v1/nodes", body)
        self.node_tokens[d["id"]] = d["token"]
        return _build(Registered, d)

    def get_node(self, node_id: str) -> Node:
        return _build(Node, self.request("GET", f"/v1/nodes/{_node_path(node_id)}"))

    def list_nodes(self, status: str | None = None, role: str | None = None) -> list[Node]:
        rows = self.request("GET", "/v1/nodes", query={"status": status, "role": role})
        return [_build(Node, r) for r in rows]

    def set_agent_status(
        self, node_id: str, status: str, current_task_id: int | str | None = None
    ) -> Node:
        body = {"status": status, "current_task_id": current_task_id}
        return _build(Node, self.request("POST", f"/v1/nodes/{_node_path(node_id)}/status", body))

    def terminate_node(self, node_id: str) -> Node:
        return _build(Node, self.request("POST", f"/v1/nodes/{_node_path(node_id)}/terminate"))

    def heartbeat(self, node_id: str, **payload: Any) -> Node:
        path = f"/v1/nodes/{_node_path(node_id)}/heartbeat"
        return _build(Node, self.request("POST", path, payload))

    # --- tasks --------------------------------------------------------------------
    def add_task(
        self,
        title: str,
        description: str = "",
        priority: str = "medium",
        role: str | None = None,
        *,
        max_attempts: int | None = None,
    ) -> Task:
        body = {
            "title": title,
            "description": description,
            "priority": priority,
            "role": role,
            "max_attempts": max_attempts,
        }
        return _task(self.request("POST", "/v1/tasks", body))

    def add_tasks(self, tasks: list[dict[str, Any]]) -> list[Task]:
        if not isinstance(tasks, list):
            raise InvalidInputError("tasks must be a list of at most 100000 items", field="tasks")
        return [_task(d) for d in self.request("POST", "/v1/tasks/batch", {"tasks": tasks})]

    def get_task(self, task_id: int | str) -> Task:
        return _task(self.request("GET", f"/v1/tasks/{check_task_id(task_id)}"))

    def list_tasks(
        self, status: str | None = None, assigned_to: str | None = None, limit: int = 100
    ) -> list[Task]:
        limit = int(check_positive(limit, "limit", integer=True))
        query = {"status": status, "assigned_to": assigned_to, "limit": limit}
        return [_task(d) for d in self.request("GET", "/v1/tasks", query=query)]

    def claim_best_task(self, node_id: str, role: str, *, wait: float = 0) -> Task | None:
        if isinstance(wait, float) and not math.isfinite(wait):
            raise InvalidInputError("wait must be a finite number of seconds", field="wait")
        path = f"/v1/nodes/{_node_path(node_id)}/claim"
        timeout = None
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
            timeout = self.timeout + wait
        d = self.request("POST", path, {"role": role, "wait": wait}, timeout=timeout)
        return None if d["task"] is None else _task(d["task"])

    def complete_task(
        self, task_id: int | str, node_id: str, epoch: int | None = None, result: Any = None
    ) -> Task:
        body = {"node_id": node_id, "epoch": epoch, "result": result}
        return _task(self.request("POST", f"/v1/tasks/{check_task_id(task_id)}/complete", body))

    def complete_and_claim(
        self,
        task_id: int | str,
        node_id: str,
        role: str,
        epoch: int | None = None,
        result: Any = None,
    ) -> tuple[Task, Task | None]:
        body = {"node_id": node_id, "role": role, "epoch": epoch, "result": result}
        path = f"/v1/tasks/{check_task_id(task_id)}/complete-and-claim"
        d = self.request("POST", path, body)
        return _task(d["done"]), None if d["next"] is None else _task(d["next"])

    def fail_task(
        self,
        task_id: int | str,
        node_id: str,
        epoch: int | None = None,
        error: str = "",
        retry: bool = True,
    ) -> Task:
        body = {"node_id": node_id, "epoch": epoch, "error": error, "retry": bool(retry)}
        return _task(self.request("POST", f"/v1/tasks/{check_task_id(task_id)}/fail", body))

    # --- views --------------------------------------------------------------------
    def assess_workload(self) -> Assessment:
        return _build(Assessment, self.request("POST", "/v1/assess"))

    def read_state(self, node_id: str | None = None, *, limit: int = 50) -> State:
        if node_id is not None:
            check_id(node_id)
        limit = check_limit(limit)  # capped as the embedded client does
        d = self.request("GET", "/v1/state", query={"node_id": node_id, "limit": limit})
        d["tasks"] = [_task(t) for t in d["tasks"]]
        d["nodes"] = [_build(Node, n) for n in d["nodes"]]
        return _build(State, d)

    def read_state_text(self, node_id: str | None = None, *, limit: int = 50) -> str:
        limit = check_limit(limit)
        query = {"node_id": node_id, "limit": limit}
        return self.request("GET", "/v1/state/text", query=query, raw=True)

    def catch_up(self, node_id: str, since: int | None = None, *, limit: int = 1000) -> CatchUp:
        path = f"/v1/nodes/{_node_path(node_id)}/catch-up"
        d = self.request("POST", path, {"since": since, "limit": limit})
        return CatchUp(events=[_event(e) for e in d["events"]], cursor=d["cursor"])

    def events(self, since: int = 0, limit: int = 1000) -> list[Event]:
        since = check_seq(since)  # a query string would turn "3" into 3
        rows = self.request(
            "GET", "/v1/events", query={"since": since, "limit": check_limit(limit)}
        )
        return [_event(e) for e in rows]

    def broadcast(self, message: str, node_id: str | None = None) -> Event:
        return _event(
            self.request("POST", "/v1/broadcast", {"message": message, "node_id": node_id})
        )

    def touch(self, node_id: str) -> bool:
        return bool(self.request("POST", f"/v1/nodes/{_node_path(node_id)}/touch")["touched"])

    def alert(self, message: str, node_id: str | None = None, **data: Any) -> Event:
        body = {"message": message, "node_id": node_id, "data": data}
        return _event(self.request("POST", "/v1/alerts", body))

    def record_metrics(
        self, node_id: str, sample: dict[str, Any], *, keep: int | None = None
    ) -> Event:
        path = f"/v1/nodes/{_node_path(node_id)}/metrics"
        return _event(self.request("POST", path, {"sample": sample, "keep": keep}))

    def metrics_series(self, node_id: str, limit: int = 100) -> list[Event]:
        limit = int(check_positive(limit, "limit", integer=True))
        path = f"/v1/nodes/{_node_path(node_id)}/metrics"
        return [_event(e) for e in self.request("GET", path, query={"limit": limit})]

    def stats(self) -> Any:
        from corral.store.stats import ClusterStats

        return _build(ClusterStats, self.request("GET", "/v1/stats"))

    def for_node(self, node_id: str) -> HttpClient:
        """A client that acts as ``node_id`` with the token its registration returned."""
        return HttpClient(self.url, token=self.node_tokens[node_id], timeout=self.timeout)
