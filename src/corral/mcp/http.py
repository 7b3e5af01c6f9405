"""corral's MCP over streamable HTTP: the server as an ASGI app to mount, and a
client helper that survives the server being down.

The transport is stateless with JSON responses: the server keeps no session between
requests and issues no ``Mcp-Session-Id``. Every request is a whole exchange with the
store behind it; nothing lives in the server's memory, so nothing has to be restored
after a restart, and a client whose session is open keeps working across one.

A call made *while* the server is down is the client's business. The official SDK's
client ends its session on a request it cannot send (an ``ExceptionGroup`` holding
``httpx2.ConnectError``) and the session cannot be used again. ``connect(url)`` (or
``mcp_http_client()`` passed as the SDK's ``http_client``) gives it a transport that
reconnects instead: a request whose connection is refused is sent again, with
``corral.backoff`` delays, for up to ``reconnect_for`` seconds; past that, or when the
connection drops after the request was sent, that one call fails with a JSON-RPC error
(``mcp.MCPError``) saying so, and the session stays usable for the next call. A refused
connection means nothing was sent, so it is safe to send again; a dropped one may have
been carried out, so it is never sent twice.

Lifespan: the SDK serves each request inside a task group that must stay open for the
app's lifetime; the app's lifespan opens it. Run standalone
(``uvicorn.run(build_http_app(client))``) that happens by itself. Mounted inside
another app, the parent must enter it in its own lifespan (ASGI lifespan events do not
reach mounted apps)::

    mcp_app = build_http_app(cluster)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp_app.router.lifespan_context(mcp_app):
            yield

    Starlette(routes=[Route("/mcp", mcp_app), ...], lifespan=lifespan)

The lifespan may be entered once per app object; build a new app to start again.
The app answers on any path it is given, so ``Route("/mcp", mcp_app)`` (or passing the
unchanged scope for ``/mcp``) serves ``/mcp`` without a redirect; ``Mount("/mcp", …)``
would answer ``/mcp`` with a 307 to ``/mcp/``. Authentication is the parent's job (a
bearer-token check in front of it).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from corral.backoff import delay
from corral.errors import InvalidInputError
from corral.mcp.server import build_server
from corral.types import Client as CorralClient

__all__ = ["ReconnectingTransport", "build_http_app", "connect", "mcp_http_client"]

Scope = dict[str, Any]
Receive = Any
Send = Any

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection when bound to loopback (the Host header must name a
    loopback address); on other interfaces the bearer token is the guard."""
    if host in _LOOPBACK:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def build_http_app(client: CorralClient, *, host: str = "127.0.0.1") -> Starlette:
    """corral's MCP server over streamable HTTP for ``client``, answering on every path
    (see the module's docstring for its lifespan). ``host`` is the address the server
    binds: on loopback the Host header is checked against loopback names."""
    server = build_server(client)
    # Builds the session manager the SDK keeps on the server; its own Starlette
    # wrapper (one fixed path) is not used.
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=_security(host),
        host=host,
    )
    manager = server.session_manager

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        await manager.handle_request(scope, receive, send)

    app = Starlette(
        routes=[Route("/{path:path}", endpoint=_Asgi(handle))],
        lifespan=lambda _app: manager.run(),
    )
    app.state.mcp_server = server
    return app


class _Asgi:
    """An ASGI callable Starlette's ``Route`` passes requests to unchanged."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.fn(scope, receive, send)


# --- the client side ---------------------------------------------------------------------
# The SDK client's timeouts (mcp.shared._httpx_utils): 30 s to connect, write or wait
# for the pool; 300 s to read, since a server may hold a stream open.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
# A JSON-RPC "server error" code (-32000..-32099 are the implementation's).
SERVER_UNREACHABLE = -32000


class ReconnectingTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport for the SDK's MCP client that outlives a server restart.

    A request whose connection is refused (nothing was sent) is sent again with
    ``corral.backoff`` delays until it connects or ``reconnect_for`` seconds have
    passed since the first try. Every failure that would end the SDK client's session
    is answered instead with an HTTP error carrying a JSON-RPC error, which the SDK
    raises from that one call as ``mcp.MCPError``:

    - still refused after ``reconnect_for``: nothing was sent, call again later;
    - the connection dropped or timed out after the request was sent: the call may
      have been carried out, so it is not sent again (check before repeating it).

    ``refused`` counts the connection attempts refused so far (a test or a status line
    can read it).
    """

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        reconnect_for: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not reconnect_for >= 0:
            raise InvalidInputError(
                "reconnect_for must be at least 0 seconds", field="reconnect_for"
            )
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self.reconnect_for = reconnect_for
        self._monotonic = monotonic
        self.refused = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = self._monotonic() + self.reconnect_for
        attempt = 0
        while True:
            try:
                return await self.inner.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
                self.refused += 1
                left = deadline - self._monotonic()
                if left <= 0:
                    return _rpc_error(
                        request,
                        503,
                        f"corral at {request.url} did not accept a connection for "
                        f"{self.reconnect_for:g} s ({exc or type(exc).__name__}); the call "
                        "was not sent. Call again once the server is back.",
                    )
                pause = delay(attempt, base=0.05, cap=1.0, jitter=0.5)
                await anyio.sleep(min(pause, left))
                attempt += 1
            except httpx2.TransportError as exc:
                return _rpc_error(
                    request,
                    502,
                    f"the connection to corral at {request.url} failed after the call was "
                    f"sent ({exc or type(exc).__name__}); it may have been carried out. "
                    "Check with read_state before you repeat it.",
                )

    async def aclose(self) -> None:
        await self.inner.aclose()


def _rpc_error(request: httpx2.Request, status: int, message: str) -> httpx2.Response:
    """An HTTP error whose body is a JSON-RPC error (the SDK client matches it to the
    request by itself)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": SERVER_UNREACHABLE, "message": message}}
    return httpx2.Response(
        status,
        headers={"content-type": "application/json"},
        content=json.dumps(body).encode(),
        request=request,
    )


def mcp_http_client(
    token: str | None = None,
    *,
    reconnect_for: float = 30.0,
    headers: dict[str, str] | None = None,
    transport: ReconnectingTransport | None = None,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for the SDK's ``streamable_http_client(url,
    http_client=…)``: the SDK's timeouts, ``Authorization: Bearer <token>`` when
    ``token`` is given, and ``transport`` (a new ``ReconnectingTransport(reconnect_for=
    reconnect_for)`` when omitted; see the module docstring). The caller closes it
    (``async with``)."""
    all_headers = dict(headers or {})
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(
        headers=all_headers,
        timeout=_TIMEOUT,
        transport=transport or ReconnectingTransport(reconnect_for=reconnect_for),
    )


@asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    reconnect_for: float = 30.0,
    **client_options: Any,
) -> AsyncIterator[Client]:
    """The SDK's ``mcp.Client`` on corral's ``/mcp`` at ``url`` through
    ``mcp_http_client``: its session survives calls made while the server is down.
    ``client_options`` go to ``mcp.Client`` (``mode="legacy"``, callbacks …)."""
    async with (
        mcp_http_client(token, reconnect_for=reconnect_for) as http,
        Client(streamable_http_client(url, http_client=http), **client_options) as client,
    ):
        yield client
