"""corral's MCP server (the official ``mcp`` SDK): tools, prompts, transports.

``build_server(client)`` is the server; ``corral mcp`` runs it over stdio and
``build_http_app(client)`` serves it over streamable HTTP (``corral serve`` mounts it
at ``/mcp``).
"""

from __future__ import annotations

from corral.mcp.http import build_http_app
from corral.mcp.server import build_server

__all__ = ["build_http_app", "build_server"]
