"""corral's web dashboard, served at ``/`` by ``corral serve`` and ``corral up``.

Server-rendered Jinja2 panels (Fleet, Nodes, Tasks, Events) over the cluster's
operations, kept live by one server-sent event stream per page that htmx's SSE
extension swaps in; htmx and the extension are vendored in ``static/``. A page logs in
with a bearer token exchanged for a session cookie (``corral.dashboard.session``).
docs/dashboard.md describes what it shows and its security.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

from corral.dashboard.pages import Dashboard

if TYPE_CHECKING:
    from corral.server.app import ServerState

__all__ = ["Dashboard", "routes"]


def routes(st: ServerState) -> list[BaseRoute]:
    """The dashboard's routes over a server's state, to add to its Starlette app."""
    return Dashboard(st).routes()
