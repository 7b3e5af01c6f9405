"""The ASGI app of ``corral serve``: JSON API under ``/v1``, ``/openapi.json``,
``/healthz``, server-sent events, ``/metrics``, and the MCP server at ``/mcp``.

Each request parses its input with the pydantic models, then makes one hop to a
worker thread where the handler calls the (synchronous) service once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

import corral
from corral.errors import CorralError
from corral.server import events as sse
from corral.server.auth import Principal, Tokens
from corral.server.errors import ApiError, envelope, from_exception, from_validation
from corral.server.metrics import Metrics
from corral.server.openapi import build_openapi
from corral.server.routes import OPS, Call, Op

__all__ = ["MAX_BODY_BYTES", "ServerState", "create_app"]

log = logging.getLogger("corral.server")

MAX_BODY_BYTES = 32 * 1024 * 1024
MCP_PATH = "/mcp"
_JSON = "application/json"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def error_response(exc: ApiError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return Response(
        envelope(exc.code, exc.message, exc.field), exc.status, headers=headers, media_type=_JSON
    )


class ServerState:
    """What the app's handlers share: the service, the tokens, the wake-up for
    event streams, the metrics."""

    def __init__(
        self,
        cluster: Any,
        tokens: Tokens,
        *,
        metrics_auth: bool = True,
        sse_poll: float = 0.5,
        threads: int = 4,
    ) -> None:
        self.cluster = cluster
        self.tokens = tokens
        self.metrics_auth = metrics_auth
        self.sse_poll = sse_poll
        # One hop per operation onto a small pool (the SQLite store serializes its
        # transactions anyway; more threads only contend). Claims that wait for a task
        # hold a thread for up to MAX_CLAIM_WAIT: they get their own, larger pool.
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="corral-api")
        self.wait_pool = ThreadPoolExecutor(256, thread_name_prefix="corral-wait")
        self.metrics = Metrics(cluster)
        self._changed: anyio.Event | None = None

    def authenticate(self, request: Request | Scope, scope: str) -> Principal:
        if scope == "public":
            return Principal(None)
        headers = request.headers if isinstance(request, Request) else Request(request).headers
        header = headers.get("authorization")
        principal = self.tokens.from_header(header)
        if principal is None:
            what = "a valid bearer token" if header else "a bearer token (Authorization: Bearer …)"
            raise ApiError(401, "unauthorized", f"this endpoint needs {what}")
        if scope == "operator" and not principal.is_operator:
            raise ApiError(403, "forbidden", "this operation needs the operator token")
        return principal

    # Event streams wait on this; every write through the API sets it.
    def changed(self) -> anyio.Event:
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def run(self, fn: Callable[..., Any], *args: Any, waits: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.wait_pool if waits else self.pool, fn, *args)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.wait_pool.shutdown(wait=False, cancel_futures=True)


async def _parse_body(request: Request, op: Op) -> Any:
    if op.body is None:
        return None
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        return op.body.model_validate_json(raw if raw.strip() else b"{}")
    except ValidationError as exc:
        raise from_validation(exc, "body") from None


def _parse_query(request: Request, op: Op) -> Any:
    if op.query is None:
        if request.query_params:
            raise ApiError(
                422,
                "invalid_input",
                f"unknown query parameter {next(iter(request.query_params))!r}",
            )
        return None
    try:
        return op.query.model_validate(dict(request.query_params))
    except ValidationError as exc:
        raise from_validation(exc, "query") from None


def _endpoint(op: Op, st: ServerState) -> Callable[[Request], Any]:
    text = op.name == "read_state_text"

    async def endpoint(request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            principal = st.authenticate(request, op.scope)
            query = _parse_query(request, op)
            if op.name == "events" and sse.wants_stream(request):
                return sse.stream(request, st, query)
            call = Call(
                st.cluster,
                principal,
                st.tokens,
                request.path_params,
                query,
                await _parse_body(request, op),
            )
            result = await st.run(op.handler, call, waits=bool(getattr(call.body, "wait", 0)))
            if op.writes:
                st.notify()
            if text:
                response = Response(result, op.status, media_type="text/plain; charset=utf-8")
            else:
                response = Response(_dumps(result), op.status, media_type=_JSON)
        except ApiError as exc:
            response = error_response(exc)
        except CorralError as exc:
            response = error_response(from_exception(exc))
        except Exception:
            log.exception("unexpected error in %s", op.name, extra={"action": "server_error"})
            response = error_response(ApiError(500, "internal", "internal error; see the log"))
        st.metrics.observe(op.method, op.path, response.status_code, time.perf_counter() - t0)
        return response

    endpoint.__name__ = op.name
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    message = {
        404: f"no such endpoint {request.url.path}",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    headers = dict(exc.headers or {})
    return Response(envelope(code, message), exc.status_code, headers=headers, media_type=_JSON)


class _McpGate:
    """Bearer auth (operator token) in front of the MCP app; 404 when there is none."""

    def __init__(self, app: ASGIApp | None, st: ServerState) -> None:
        self.app = app
        self.st = st

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.st.authenticate(scope, "operator")
            if self.app is None:
                raise ApiError(404, "not_found", "the MCP server is not available here")
        except ApiError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def load_mcp_app(cluster: Any, host: str = "127.0.0.1") -> ASGIApp | None:
    """The MCP server's streamable-HTTP app (``corral.mcp``), or None when it is not
    installed. The one place the MCP server is mounted."""
    try:
        import corral.mcp as mcp_module
    except ImportError:
        return None
    factory = getattr(mcp_module, "build_http_app", None)
    return None if factory is None else factory(cluster, host=host)


class _Dispatch:
    """Send ``/mcp`` (scope unchanged) through the gate, everything else to the API."""

    def __init__(self, api: Starlette, mcp: _McpGate) -> None:
        self.api = api
        self.mcp = mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
                await self.mcp(scope, receive, send)
                return
        await self.api(scope, receive, send)


def create_app(
    cluster: Any,
    *,
    token: str,
    metrics_auth: bool = True,
    monitor: bool = True,
    mcp: bool = True,
    sse_poll: float = 0.5,
    threads: int = 4,
    host: str = "127.0.0.1",
) -> ASGIApp:
    """The app over ``cluster`` (a ``corral.Cluster``). ``token`` is the operator
    token; ``monitor`` runs ``corral.Monitor`` in a thread while the app lives; ``host``
    is the address uvicorn binds (the MCP app checks Host headers on loopback)."""
    st = ServerState(
        cluster, Tokens(token), metrics_auth=metrics_auth, sse_poll=sse_poll, threads=threads
    )
    mcp_app = load_mcp_app(cluster, host) if mcp else None
    openapi = _dumps(build_openapi(OPS, version=corral.__version__))

    async def openapi_json(request: Request) -> Response:
        return Response(openapi, media_type=_JSON)

    async def healthz(request: Request) -> Response:
        try:
            await st.run(cluster.settings)
        except CorralError as exc:
            return error_response(from_exception(exc))
        return Response(_dumps({"status": "ok", "version": corral.__version__}), media_type=_JSON)

    async def metrics(request: Request) -> Response:
        try:
            st.authenticate(request, "any" if st.metrics_auth else "public")
        except ApiError as exc:
            return error_response(exc)
        body = await st.run(st.metrics.render)
        return Response(body, media_type=st.metrics.content_type)

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *(Route(op.path, _endpoint(op, st), methods=[op.method], name=op.name) for op in OPS),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        mon = thread = None
        if monitor:
            mon = corral.Monitor(cluster)
            thread = mon.start_thread()
        try:
            async with AsyncExitStack() as stack:
                ctx = getattr(getattr(mcp_app, "router", None), "lifespan_context", None)
                if mcp_app is not None and ctx is not None:
                    await stack.enter_async_context(ctx(mcp_app))
                yield
        finally:
            if mon is not None and thread is not None:
                mon.stop()
                await anyio.to_thread.run_sync(_join, thread)
            st.shutdown()

    api = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error}
    )
    api.state.corral = st
    dispatch = _Dispatch(api, _McpGate(mcp_app, st))
    dispatch.state = st  # type: ignore[attr-defined]
    return dispatch


def _join(thread: threading.Thread) -> None:
    thread.join(timeout=5)
