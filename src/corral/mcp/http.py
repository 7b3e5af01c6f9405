"""corral's MCP server over streamable HTTP, as an ASGI app to mount.

The transport is stateless with JSON responses: the server keeps no session between
requests and issues no ``Mcp-Session-Id``, so a client keeps working when the server
restarts (MCP clients do not refresh a stale session id). Every request is a whole
exchange with the store behind it; nothing lives in the server's memory.

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

from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from corral.mcp.server import build_server
from corral.types import Client

__all__ = ["build_http_app"]

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


def build_http_app(client: Client, *, host: str = "127.0.0.1") -> Starlette:
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
