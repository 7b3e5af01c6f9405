"""The remote client: ``corral.connect("http://HOST:PORT", token=...)``.

Same methods, same results (``corral.model`` records) and same exceptions
(``corral.errors``) as the embedded ``Cluster``, over the HTTP API of
``corral serve``. One keep-alive connection per thread: a minimal HTTP/1.1 client
over a socket with ``TCP_NODELAY`` that writes each request in one ``send`` and
reads just what the server sends (``Content-Length`` or chunked bodies). The
stdlib's ``http.client`` costs more per call than the operation itself (a second
write for the body, e-mail header parsing), and urllib3's pool, on top of it, made a
worker's paced step slower side by side (``bench/http_pace.py``; the figures are in
``docs/performance.md``), so this client stays.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, Self, overload
from urllib.parse import urlencode, urlsplit

from corral.errors import (
    AuthError,
    CorralError,
    InvalidInputError,
    StoreUnavailableError,
    error_class,
)
from corral.model import (
    CatchUp,
    Event,
    Node,
    Process,
    Registered,
    State,
    Task,
)
from corral.operations import OPERATIONS
from corral.outage import CallLost
from corral.params import (
    Epoch,
    HostName,
    JsonValue,
    Limit,
    Message,
    ModelName,
    NodeId,
    PositiveInt,
    Seconds,
    Seq,
    StrengthName,
    TaskRef,
    Text,
    Wait,
)
from corral.remote_calls import build, one, segment
from corral.remote_ops import HttpOperations
from corral.scheduler.remote import SchedulerRemote
from corral.spawning import SpawnRequest, check_request_id
from corral.types import SpawnStatus
from corral.validation import check_limit, check_task_id
from corral.wire import Closed as _Closed
from corral.wire import Connection as _Connection
from corral.workflows.remote import WorkflowsHttp

__all__ = ["AuthError", "HttpClient"]


def _task(d: dict[str, Any]) -> Task:
    return one(Task, d)


def _event(d: dict[str, Any]) -> Event:
    return build(Event, d)


_NODE_PATHS: dict[str, str] = {}


def _node_path(node_id: Any) -> str:
    """The node id as one path segment (checked, quoted; remembered once checked)."""
    if type(node_id) is str:
        path = _NODE_PATHS.get(node_id)
        if path is not None:
            return path
    path = segment("node_id", node_id)
    if len(_NODE_PATHS) >= 4096:
        _NODE_PATHS.clear()
    _NODE_PATHS[node_id] = path
    return path


_NO_PATH: Any = object()  # ``_call``'s path parameters when not given
_OPS = {op.name: op for op in OPERATIONS}


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


class HttpClient(WorkflowsHttp, SchedulerRemote, HttpOperations):
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

    def _call(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        raw: bool = False,
        timeout: float | None = None,
        node: Any = _NO_PATH,
        task: Any = _NO_PATH,
        body_field: str | None = None,
    ) -> Any:
        """Call operation ``name`` at its route (``corral.operations``) with ``node``
        and ``task`` as its path's node id and task id: ``args`` go in the query
        string of a GET, else in the JSON body."""
        op = _OPS[name]
        path = op.path
        if node is not _NO_PATH:
            path = path.replace("{node_id}", _node_path(node))
        if task is not _NO_PATH:
            path = path.replace("{task_id}", str(check_task_id(task)))
        if op.method == "GET":
            return self.request(op.method, path, query=args, raw=raw, timeout=timeout)
        return self.request(op.method, path, args, raw=raw, timeout=timeout, body_field=body_field)

    # --- written by hand: what the generated methods (corral.remote_ops) cannot do ---
    # (keep a token, validate before a query string loses a type, a hot path's cached
    # node path, nested records, a longer timeout for a waiting claim)
    # --- nodes --------------------------------------------------------------------
    def register_node(
        self,
        node_id: NodeId,
        role: str,
        model: ModelName | None = None,
        strength: StrengthName | None = None,
        heartbeat_interval: Seconds | None = None,
        *,
        host: HostName | None = None,
        pid: PositiveInt | None = None,
    ) -> Registered:
        body = {
            "node_id": node_id,
            "role": role,
            "model": model,
            "strength": strength,
            "heartbeat_interval": heartbeat_interval,
            "host": socket.gethostname() if host is None else host,
            "pid": pid,  # only a node's own process names it (Cluster.register_node)
        }
        d = self._call("register_node", body)
        self.node_tokens[d["id"]] = d["token"]
        return build(Registered, d)

    def heartbeat(self, node_id: NodeId, **payload: Any) -> Node:
        # The payload is one argument to the service (``check_payload(.., "heartbeat")``).
        return build(Node, self._call("heartbeat", payload, node=node_id, body_field="heartbeat"))

    def touch(self, node_id: NodeId) -> bool:
        return bool(self._call("touch", node=node_id)["touched"])

    # --- tasks --------------------------------------------------------------------
    def add_tasks(self, tasks: list[dict[str, Any]]) -> list[Task]:
        if not isinstance(tasks, list):
            raise InvalidInputError("tasks must be a list of at most 100000 items", field="tasks")
        return [_task(d) for d in self._call("add_tasks", {"tasks": tasks})]

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

    def _keyed(self, body: dict[str, Any]) -> dict[str, Any]:
        key = getattr(self._local, "key", None)
        if key is not None:
            body["idempotency_key"] = key
        return body

    def claim_best_task(self, node_id: NodeId, role: NodeId, *, wait: Wait = 0) -> Task | None:
        if isinstance(wait, float) and not math.isfinite(wait):
            raise InvalidInputError("wait must be a finite number of seconds", field="wait")
        timeout = None
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
            timeout = self.timeout + wait
        d = self._call(
            "claim_best_task",
            self._keyed({"role": role, "wait": wait}),
            timeout=timeout,
            node=node_id,
        )
        return None if d["task"] is None else _task(d["task"])

    def complete_task(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        result: JsonValue = None,
    ) -> Task:
        body = {"node_id": node_id, "epoch": epoch, "result": result}
        return _task(self._call("complete_task", body, task=task_id))

    def complete_and_claim(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        role: NodeId,
        epoch: Epoch | None = None,
        result: JsonValue = None,
    ) -> tuple[Task, Task | None]:
        body = {"node_id": node_id, "role": role, "epoch": epoch, "result": result}
        d = self._call("complete_and_claim", self._keyed(body), task=task_id)
        return _task(d["done"]), None if d["next"] is None else _task(d["next"])

    def fail_task(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        error: Text = "",
        retry: bool = True,
    ) -> Task:
        body = {"node_id": node_id, "epoch": epoch, "error": error, "retry": bool(retry)}
        return _task(self._call("fail_task", body, task=task_id))

    # --- views --------------------------------------------------------------------
    def read_state(self, node_id: NodeId | None = None, *, limit: Limit = 50) -> State:
        d = self._invoke("read_state", {"node_id": node_id, "limit": limit})
        d["tasks"] = [_task(t) for t in d["tasks"]]
        d["nodes"] = [build(Node, n) for n in d["nodes"]]
        d["processes"] = [build(Process, p) for p in d.get("processes", ())]
        return build(State, d)

    def catch_up(
        self, node_id: NodeId, since: Seq | None = None, *, limit: Limit = 1000
    ) -> CatchUp:
        body = {"since": since, "limit": limit}
        d = self._call("catch_up", body, node=node_id)
        return CatchUp(events=[_event(e) for e in d["events"]], cursor=d["cursor"])

    def alert(self, message: Message, node_id: NodeId | None = None, **data: Any) -> Event:
        body = {"message": message, "node_id": node_id, "data": data}
        return _event(self._call("alert", body))

    # --- spawn requests -------------------------------------------------------------
    def spawn_requests(
        self, status: SpawnStatus | None = None, pool: str | None = None, limit: int = 100
    ) -> list[SpawnRequest]:
        query = {"status": status, "pool": pool, "limit": check_limit(limit)}
        return [build(SpawnRequest, r) for r in self._call("spawn_requests", query)]

    def accept_spawn_request(self, request_id: int, actor: str | None = None) -> SpawnRequest:
        return self._spawn_step(request_id, "accept", {"actor": actor})

    def decline_spawn_request(self, request_id: int, actor: str | None = None) -> SpawnRequest:
        return self._spawn_step(request_id, "decline", {"actor": actor})

    def fulfil_spawn_request(self, request_id: int, member: str) -> SpawnRequest:
        return self._spawn_step(request_id, "fulfil", {"member": member})

    def _spawn_step(self, request_id: Any, step: str, body: dict[str, Any]) -> SpawnRequest:
        path = f"/v1/spawn-requests/{check_request_id(request_id)}/{step}"
        return build(SpawnRequest, self.request("POST", path, body))

    def for_node(self, node_id: str) -> HttpClient:
        """A client that acts as ``node_id`` with the token its registration returned."""
        return HttpClient(self.url, token=self.node_tokens[node_id], timeout=self.timeout)
