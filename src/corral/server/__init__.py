"""``corral serve``: the HTTP API, live events, metrics and the MCP mount."""

from __future__ import annotations

from corral.server.app import create_app
from corral.server.auth import Principal, Tokens, ensure_token_file, load_token

__all__ = ["Principal", "Tokens", "create_app", "ensure_token_file", "load_token"]
