"""``corral serve``: the HTTP API, live events, metrics and the MCP mount.

``corral.server.auth`` needs only the standard library (the CLI and the remote
client use it); the app itself needs ``corral[server]`` and is imported on use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "ensure_token_file", "load_token"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from corral.server.app import create_app

        return create_app
    if name in ("ensure_token_file", "load_token"):
        from corral.server import auth

        return getattr(auth, name)
    raise AttributeError(name)
