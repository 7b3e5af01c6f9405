"""The remote client: ``corral.connect("http://HOST:PORT", token=...)``.

Same methods, same results (``corral.model`` records) and same exceptions
(``corral.errors``) as the embedded ``Cluster``, over the HTTP API of
``corral serve``. One keep-alive connection per thread (stdlib ``http.client``).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
from dataclasses import fields
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from corral.errors import (
    CapacityError,
    CorralError,
    InvalidInputError,
    LeaseError,
    NotFoundError,
    StoreUnavailableError,
)
from corral.model import Assessment, CatchUp, Event, Node, Registered, Settings, State, Task
from corral.validation import check_id, check_positive, check_task_id

__all__ = ["AuthError", "HttpClient"]


class AuthError(CorralError):
    """The server refused the token (401) or what it may do (403)."""

    code = "unauthorized"


_ERRORS: dict[str, type[CorralError]] = {
    InvalidInputError.code: InvalidInputError,
    "bad_request": InvalidInputError,
    "too_large": InvalidInputError,
    NotFoundError.code: NotFoundError,
    CapacityError.code: CapacityError,
    LeaseError.code: LeaseError,
    StoreUnavailableError.code: StoreUnavailableError,
    "unauthorized": AuthError,
    "forbidden": AuthError,
}


def _build(cls: type, d: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


def _task(d: dict[str, Any]) -> Task:
    t = dict(d)
    t["roles"] = tuple(t.get("roles") or ())
    return _build(Task, t)


def _event(d: dict[str, Any]) -> Event:
    return _build(Event, d)


def _node_path(node_id: Any) -> str:
    return quote(check_id(node_id), safe="").replace(".", "%2E")


def _read_token() -> str | None:
    from corral.server.auth import read_client_token

    return read_client_token()


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
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # --- transport ----------------------------------------------------------------
    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def _conn(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout)
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

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
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            try:
                data = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"arguments must be JSON data: {exc}") from None
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            conn, reused = self._conn()
            try:
                conn.timeout = timeout or self.timeout
                if conn.sock is not None:
                    conn.sock.settimeout(conn.timeout)
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (
                http.client.RemoteDisconnected,
                ConnectionResetError,
                BrokenPipeError,
                http.client.CannotSendRequest,
                http.client.BadStatusLine,
            ) as exc:
                self._drop(conn)
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection
                raise StoreUnavailableError(f"lost the connection to {self.url}: {exc}") from None
            except OSError as exc:
                self._drop(conn)
                raise StoreUnavailableError(
                    f"cannot reach {self.url}: {exc}; is corral serve running?"
                ) from None
            if resp.will_close:
                self._drop(conn)
            break
        if resp.status >= 400:
            raise self._error(resp.status, payload)
        if raw:
            return payload.decode()
        return json.loads(payload)

    def _error(self, status: int, payload: bytes) -> CorralError:
        try:
            err = json.loads(payload)["error"]
            code, message, field = err["code"], err["message"], err.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, field = "", payload.decode(errors="replace")[:200], None
        cls = _ERRORS.get(code)
        if cls is None:
            cls = StoreUnavailableError if status >= 500 else CorralError
        exc = cls(message or f"HTTP {status}", field=field)
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
        d = self.request("GET", "/v1/state", query={"node_id": node_id, "limit": limit})
        d["tasks"] = [_task(t) for t in d["tasks"]]
        d["nodes"] = [_build(Node, n) for n in d["nodes"]]
        return _build(State, d)

    def read_state_text(self, node_id: str | None = None, *, limit: int = 50) -> str:
        query = {"node_id": node_id, "limit": limit}
        return self.request("GET", "/v1/state/text", query=query, raw=True)

    def catch_up(self, node_id: str, since: int | None = None, *, limit: int = 1000) -> CatchUp:
        path = f"/v1/nodes/{_node_path(node_id)}/catch-up"
        d = self.request("POST", path, {"since": since, "limit": limit})
        return CatchUp(events=[_event(e) for e in d["events"]], cursor=d["cursor"])

    def events(self, since: int = 0, limit: int = 1000) -> list[Event]:
        rows = self.request(
            "GET", "/v1/events", query={"since": since, "limit": min(limit, 10_000)}
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
