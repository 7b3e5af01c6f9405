"""The ASGI app of ``corral serve``: JSON API under ``/v1``, ``/openapi.json``,
``/healthz``, server-sent events, ``/metrics``, and the MCP server at ``/mcp``.

The API's request path is ``corral.server.dispatch`` (plain ASGI); Starlette routes
what that path's cache does not know yet and serves the few other endpoints.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

import corral
from corral.dashboard import routes as dashboard_routes
from corral.errors import CorralError
from corral.server.auth import PRINCIPAL, Principal, Tokens, named_tokens
from corral.server.dispatch import (
    MAX_BODY_BYTES,
    ApiRouter,
    OpEndpoint,
    ShortCalls,
    allowed_methods,
    dumps,
    send_error,
)
from corral.server.errors import ApiError, envelope, from_exception
from corral.server.metrics import Metrics
from corral.server.openapi import build_openapi
from corral.server.routes import build_ops
from corral.store.base import Store, WouldBlock
from corral.types import Client

if TYPE_CHECKING:
    from corral.cluster import Cluster

__all__ = ["MAX_BODY_BYTES", "ServerState", "create_app"]

log = logging.getLogger("corral.server")

MCP_PATH = "/mcp"
_JSON = "application/json"


class _NeverRaised(Exception):
    pass


def error_response(exc: ApiError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return Response(
        envelope(exc.code, exc.message, exc.field), exc.status, headers=headers, media_type=_JSON
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class ServerState:
    """What the app's handlers share: the service, the tokens, the wake-up for
    event streams, the metrics, the worker threads."""

    def __init__(
        self,
        cluster: Cluster,
        tokens: Tokens,
        *,
        metrics_auth: bool = True,
        sse_poll: float = 0.5,
        threads: int = 4,
        inline: bool = True,
    ) -> None:
        self.cluster = cluster
        self.tokens = tokens
        self.metrics_auth = metrics_auth
        self.sse_poll = sse_poll
        # Short operations run on the event loop when the store can promise not to
        # wait (SQLite's ``nowait``); the rest hop once per operation onto a small
        # pool (the SQLite store serializes its transactions anyway; more threads only
        # contend). Claims that wait for a task hold a thread for up to MAX_CLAIM_WAIT:
        # they get their own, larger pool.
        self.nowait: Callable[[], AbstractContextManager[Any]] | None = None
        self.would_block: type[Exception] = _NeverRaised
        self.short_calls: ShortCalls | None = None
        store = getattr(cluster, "store", None)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="corral-api")
        if inline and isinstance(store, Store) and store.inline_calls:
            self.nowait = store.nowait
            self.would_block = WouldBlock
            self.short_calls = ShortCalls(store.nowait, WouldBlock, store.group, self.pool)
        self.wait_pool = ThreadPoolExecutor(256, thread_name_prefix="corral-wait")
        self.metrics = Metrics(cluster)
        self._changed: anyio.Event | None = None

    async def authenticate(
        self, header: str | None, scope: str, *, writes: bool = False
    ) -> Principal:
        """The caller named by an ``Authorization`` header value, allowed ``scope``
        ("public", "any" or "operator") and, when the call ``writes``, allowed to
        change the cluster (``Principal.refusal``); 401/403 otherwise. A named token
        is looked up in the store on a thread, every time (``Tokens``)."""
        if scope == "public":
            return Principal(None)
        principal: Principal | None
        if self.tokens.named(header):
            principal = await self.run(self.tokens.from_header, header)
        else:
            principal = self.tokens.from_header(header)
        if principal is None:
            what = "a valid bearer token" if header else "a bearer token (Authorization: Bearer …)"
            raise ApiError(401, "unauthorized", f"this endpoint needs {what}")
        refused = principal.refusal(scope, writes=writes)
        if refused is not None:
            raise ApiError(403, "forbidden", refused)
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


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    message = {
        404: f"no such endpoint {request.url.path}",
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() != "allow"}
    if exc.status_code == 405:
        # Starlette names the methods of the first route whose path matched; a path
        # several routes serve (GET and POST /v1/nodes) accepts all of theirs.
        headers["allow"] = ", ".join(allowed_methods(request.app.routes, request.url.path))
    return Response(envelope(code, message), exc.status_code, headers=headers, media_type=_JSON)


class _McpGate:
    """Bearer auth in front of the MCP app; 404 when there is none. The operator's
    token may do everything; a node token makes the tools act only as its node
    (``corral.mcp.server.CALLER``)."""

    def __init__(self, app: ASGIApp | None, st: ServerState) -> None:
        self.app = app
        self.st = st
        self.caller: Any = None
        if app is not None:
            from corral.mcp.server import CALLER

            self.caller = CALLER

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal = await self.st.authenticate(_header(scope, b"authorization"), "any")
            if self.app is None:
                raise ApiError(404, "not_found", "the MCP server is not available here")
        except ApiError as exc:
            await send_error(send, exc)
            return
        except CorralError as exc:
            await send_error(send, from_exception(exc))
            return
        reset = self.caller.set(principal.node_id)
        reset_principal = PRINCIPAL.set(principal)  # a viewer reads only (corral.mcp.roles)
        try:
            await self.app(scope, receive, send)
        finally:
            PRINCIPAL.reset(reset_principal)
            self.caller.reset(reset)


def load_mcp_app(cluster: Client, host: str = "127.0.0.1") -> ASGIApp | None:
    """The MCP server's streamable-HTTP app (``corral.mcp``), or None when it is not
    installed. The one place the MCP server is mounted."""
    try:
        import corral.mcp as mcp_module
    except ImportError:
        return None
    factory = getattr(mcp_module, "build_http_app", None)
    return None if factory is None else factory(cluster, host=host)


def create_app(
    cluster: Cluster,
    *,
    token: str,
    metrics_auth: bool = True,
    monitor: bool = True,
    mcp: bool = True,
    sse_poll: float = 0.5,
    threads: int = 4,
    host: str = "127.0.0.1",
    inline: bool = True,
) -> ASGIApp:
    """The app over ``cluster`` (a ``corral.Cluster``). ``token`` is the operator
    token; ``monitor`` runs ``corral.Monitor`` in a thread while the app lives, with
    its alerter (the ``alert_*`` settings); ``host`` is the address uvicorn binds
    (the MCP app checks Host headers on loopback);
    ``inline=False`` hops to a thread for every operation (for comparison)."""
    st = ServerState(
        cluster,
        Tokens(token, lookup=named_tokens(cluster)),
        metrics_auth=metrics_auth,
        sse_poll=sse_poll,
        threads=threads,
        inline=inline,
    )
    mcp_app = load_mcp_app(cluster, host) if mcp else None
    documents: dict[tuple[str, ...] | None, bytes] = {}

    async def openapi_json(request: Request) -> Response:
        # The document names the cluster's roles, which change with role_keywords.
        # Reading them never waits for a busy store: then the last document serves.
        roles: tuple[str, ...] | None
        try:
            if st.nowait is not None:
                with st.nowait():
                    roles = tuple(cluster.settings().roles)
            else:
                roles = tuple((await st.run(cluster.settings)).roles)
        except st.would_block:
            roles = next(iter(documents)) if documents else None
        except CorralError as exc:
            return error_response(from_exception(exc))
        body = documents.get(roles)
        if body is None:
            documents.clear()
            body = documents[roles] = dumps(
                build_openapi(ops, version=corral.__version__, roles=roles)
            )
        return Response(body, media_type=_JSON)

    async def healthz(request: Request) -> Response:
        try:
            await st.run(cluster.settings)
        except CorralError as exc:
            return error_response(from_exception(exc))
        return Response(dumps({"status": "ok", "version": corral.__version__}), media_type=_JSON)

    async def metrics(request: Request) -> Response:
        try:
            header = request.headers.get("authorization")
            await st.authenticate(header, "any" if st.metrics_auth else "public")
        except ApiError as exc:
            return error_response(exc)
        except CorralError as exc:
            return error_response(from_exception(exc))
        body = await st.run(st.metrics.render)
        return Response(body, media_type=st.metrics.content_type)

    ops = build_ops()
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *(Route(op.path, OpEndpoint(op, st), methods=[op.method], name=op.name) for op in ops),
        *dashboard_routes(st),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        mon = thread = None
        if monitor:
            # the monitor that leads also alerts (corral.alerter): one per cluster
            mon = corral.Monitor(_own_connection(cluster), alerts=True)
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
                if mon.cluster is not cluster and not thread.is_alive():
                    mon.cluster.close()
            st.shutdown()

    api = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error}
    )
    api.state.corral = st
    dispatch = ApiRouter(api, api.routes, st, mounts={MCP_PATH: _McpGate(mcp_app, st)})
    dispatch.state = st  # type: ignore[attr-defined]
    return dispatch


def _own_connection(cluster: Any) -> Any:
    """The monitor's own client over the cluster's store: its transactions never
    hold the connection (and the store's lock) the requests use, so a request never
    waits for a pass, and its passes never queue behind requests. An in-memory
    database (one connection's) is shared."""
    url = getattr(cluster, "url", None)
    if not url or ":memory:" in url:
        return cluster
    return corral.connect(url, clock=cluster.clock)


def _join(thread: threading.Thread) -> None:
    thread.join(timeout=5)
