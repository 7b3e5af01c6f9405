"""corral's MCP server over streamable HTTP, as an ASGI app to mount.

The transport is stateless with JSON responses: the server keeps no session between
requests and issues no ``Mcp-Session-Id``, so a client keeps working when the server
restarts (MCP clients do not refresh a stale session id). Every request is a whole
exchange with the store behind it; nothing lives in the server's memory.

Lifespan: the SDK serves each request inside a task group that must stay open for the
app's lifetime. Run standalone (``uvicorn.run(build_http_app(client))``) the app answers
the ASGI lifespan itself. Mounted inside another app, the parent must enter the app's
``lifespan()`` in its own lifespan (the ASGI lifespan does not reach mounted apps)::

    mcp_app = build_http_app(cluster)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp_app.lifespan():
            yield

    Starlette(routes=[Route("/mcp", mcp_app), ...], lifespan=lifespan)

``lifespan()`` may be entered once per app object; build a new app to start again.
The app answers on any path it is given, so ``Route("/mcp", mcp_app)`` serves ``/mcp``
without a redirect (``Mount("/mcp", …)`` would answer ``/mcp`` with a 307 to ``/mcp/``).
Authentication is the parent's job (a bearer-token middleware in front of it).
"""

from __future__ import annotations

import contextlib
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from corral.mcp.server import build_server

__all__ = ["McpHttpApp", "build_http_app"]

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


class McpHttpApp:
    """The ASGI app: MCP streamable HTTP (stateless, JSON) on any path."""

    def __init__(self, client: Any, *, host: str = "127.0.0.1") -> None:
        self.server = build_server(client)
        # Builds the session manager the SDK keeps on the server; its Starlette
        # wrapper (one route, its own lifespan) is not used.
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=_security(host),
            host=host,
        )
        self.session_manager = self.server.session_manager

    def lifespan(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The task group every request runs in; enter it once, for the app's life."""
        return self.session_manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self.session_manager.handle_request(scope, receive, send)
        else:  # websocket: not an MCP transport
            await send({"type": "websocket.close", "code": 1000})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        started = False
        try:
            async with self.lifespan():
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
        except Exception as exc:
            phase = "shutdown" if started else "startup"
            await send({"type": f"lifespan.{phase}.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})


def build_http_app(client: Any, *, host: str = "127.0.0.1") -> McpHttpApp:
    """corral's MCP server over streamable HTTP for ``client`` (see the module's
    docstring for its lifespan). ``host`` is the address the server binds: on
    loopback the Host header is checked against loopback names."""
    return McpHttpApp(client, host=host)
