"""The dashboard's endpoints: the page at ``/``, login and logout, one panel's
fragment, the page's event stream, and the static files.

Every page needs a session (else a redirect to ``/login``); a fragment or a stream
without one is 401. A session comes from the operator token or a named token of
either role (``corral token create``); a named token's session ends the moment the
token is revoked (its row is looked up on every request, and an open stream re-checks
it when a ``token_revoked`` event arrives). Every POST needs the session's CSRF token
(``/login`` needs its request to come from this origin instead), and every action an
operator's session: a viewer's is refused with 403 naming its role, and its panels
show no controls. Every answer carries a strict Content-Security-Policy: scripts and
styles from this server's files only.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from corral.dashboard.actions import PanelActions, TaskActions
from corral.dashboard.feed import Feed, Snapshot
from corral.dashboard.session import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    Role,
    Session,
    Sessions,
    session_key,
)
from corral.dashboard.views import NODE_STATUSES, PANELS, Filters, environment, render_panel
from corral.server.events import KEEPALIVE_SECONDS

if TYPE_CHECKING:
    from corral.server.app import ServerState

__all__ = ["CSP", "STATIC_PATH", "Dashboard"]

log = logging.getLogger("corral.dashboard")

STATIC_PATH = "/dashboard/static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_MAX_FORM_BYTES = 16 * 1024


def _secured(response: Response) -> Response:
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _local(target: str) -> str:
    """``target`` when it is a path on this server, else ``/`` (no open redirect)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _revokes(snap: Snapshot, after: int) -> bool:
    """Whether a token was revoked in ``snap`` after event ``after``."""
    return any(e.kind == "token_revoked" and e.seq > after for e in snap.events)


def _same_origin(request: Request) -> bool:
    """A browser's POST names its origin; one from another site is refused."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        site = request.headers.get("sec-fetch-site")
        return site in (None, "same-origin", "none")
    return urlsplit(origin).netloc == request.headers.get("host", "")


class Dashboard:
    """The dashboard over one server's state (its cluster, tokens and wake-ups)."""

    def __init__(
        self,
        st: ServerState,
        *,
        sessions: Sessions | None = None,
        feed: Feed | None = None,
        ping: float = KEEPALIVE_SECONDS,
    ) -> None:
        self.st = st
        self.sessions = (
            sessions if sessions is not None else Sessions(secret=session_key(st.tokens))
        )
        self.feed = feed if feed is not None else Feed(st)
        self.ping = ping  # seconds without news before a stream sends a ping comment
        self.env = environment()
        self.tasks = TaskActions(st, self.env)  # the Tasks panel's Cancel and Requeue
        self.buttons = PanelActions(st, self.env)  # Processes', Pools' and Workflows'

    # --- sessions --------------------------------------------------------------
    async def session(self, request: Request) -> Session | None:
        """The request's session: a valid cookie, and its named token still there
        (one indexed read of the store; the operator token's needs none)."""
        return await self._still_valid(self.sessions.check(request.cookies.get(COOKIE)))

    async def _still_valid(self, session: Session | None) -> Session | None:
        if session is None or session.token_id is None:
            return session
        find = getattr(self.st.cluster.store, "token_by_id", None)
        found = None if find is None else await self.st.run(find, session.token_id)
        return session if found is not None else None

    async def _csrf_ok(self, request: Request, session: Session) -> bool:
        presented = request.headers.get(CSRF_HEADER)
        if presented is None and request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            form = await request.form(max_files=0, max_fields=20)
            value = form.get(CSRF_FIELD)
            presented = value if isinstance(value, str) else None
        return self.sessions.csrf_ok(session, presented)

    def action(
        self,
        handler: Callable[[Request, Session], Awaitable[Response]],
        *,
        any_role: bool = False,
    ) -> Callable[[Request], Awaitable[Response]]:
        """A state-changing endpoint: a session (401), its CSRF token (403) and a
        role that may act (403; ``any_role`` for logging out) before ``handler`` runs."""

        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return _secured(PlainTextResponse("log in first: no valid session", 401))
            if not await self._csrf_ok(request, session):
                return _secured(PlainTextResponse("missing or wrong CSRF token", 403))
            if not (session.may_act or any_role):
                why = f"a {session.role} may not act: this needs an operator's token"
                return _secured(PlainTextResponse(why, 403))
            return _secured(await handler(request, session))

        return endpoint

    # --- pages -----------------------------------------------------------------
    def _render(self, name: str, status: int = 200, **context: object) -> Response:
        html = self.env.get_template(name).render(static=STATIC_PATH, **context)
        return _secured(HTMLResponse(html, status))

    async def login_page(self, request: Request) -> Response:
        if await self.session(request) is not None:
            return _secured(RedirectResponse(_local(request.query_params.get("next", "/")), 303))
        nxt = _local(request.query_params.get("next", "/"))
        return self._render("login.html", next=nxt, error=None, csrf=None)

    async def login(self, request: Request) -> Response:
        """Exchange a bearer token for a session cookie (the token is not kept)."""
        if not _same_origin(request):
            return _secured(PlainTextResponse("a login must come from this page", 403))
        if int(request.headers.get("content-length") or 0) > _MAX_FORM_BYTES:
            return _secured(PlainTextResponse("the login form is too large", 413))
        form = await request.form(max_files=0, max_fields=10)
        token = form.get("token")
        nxt = form.get("next")
        target = _local(nxt if isinstance(nxt, str) else "/")
        principal = None
        if isinstance(token, str) and token.strip():
            # A named token's check reads the store: on a thread.
            principal = await self.st.run(self.st.tokens.check, token.strip())
        if principal is None or principal.role == "node":
            error = (
                "That token is not valid here."
                if principal is None
                else "A node's token cannot open the dashboard: use the operator token"
                " or a named token."
            )
            return self._render("login.html", 401, next=target, error=error, csrf=None)
        role: Role = "viewer" if principal.role == "viewer" else "operator"
        session, cookie = self.sessions.issue(
            role, name=principal.name, token_id=principal.token_id
        )
        log.info(
            "dashboard login",
            extra={"action": "dashboard_login", "role": session.role, "actor": principal.actor},
        )
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=int(self.sessions.lifetime),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return _secured(response)

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.forget(session)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def index(self, request: Request) -> Response:
        session = await self.session(request)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            login = "/login?" + urlencode({"next": target})
            return _secured(RedirectResponse(login, 303))
        filters = Filters.from_query(request.query_params)
        snap = await self.feed.current()
        query = filters.query()
        panels = {p: render_panel(self.env, p, snap, filters, session.may_act) for p in PANELS}
        kinds = sorted({e.kind for e in snap.events} | {filters.event_kind} - {""})
        return self._render(
            "index.html",
            session=session,
            csrf=self.sessions.csrf_token(session),
            filters=filters,
            statuses=NODE_STATUSES,
            kinds=kinds,
            panels=panels,
            stream="/dashboard/stream" + (f"?{query}" if query else ""),
        )

    async def fragment(self, request: Request) -> Response:
        """One panel's HTML as the page shows it now."""
        session = await self.session(request)
        if session is None:
            return _secured(PlainTextResponse("log in first: no valid session", 401))
        panel = request.path_params["panel"]
        if panel not in PANELS:
            return _secured(PlainTextResponse(f"no panel {panel!r}", 404))
        snap = await self.feed.current()
        filters = Filters.from_query(request.query_params)
        html = render_panel(self.env, panel, snap, filters, session.may_act)
        return _secured(HTMLResponse(html))

    async def stream(self, request: Request) -> Response:
        """The page's server-sent events: every panel (a named event each, ``id:``
        the last event seen) whenever the feed has a new snapshot; a ping comment
        when nothing changes for a while; ``expired`` when the session ends (its
        cookie expired, or its named token revoked: re-checked at each ping and when
        a ``token_revoked`` event arrives)."""
        session = await self.session(request)
        if session is None:
            return _secured(PlainTextResponse("log in first: no valid session", 401))
        filters = Filters.from_query(request.query_params)
        resume = request.headers.get("last-event-id", "").strip()

        async def body() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            skip = resume  # a reconnecting page has the panels of that event already
            seen = -1  # the last event whose token revocations were checked
            async with self.feed.subscribe() as sub:
                while True:
                    snap = await sub.next(self.ping)
                    now = self.sessions.check(request.cookies.get(COOKIE))
                    if now is not None and (snap is None or _revokes(snap, seen)):
                        now = await self._still_valid(now)
                    if snap is not None:
                        seen = snap.seq
                    if now is None:
                        yield b"event: expired\ndata: the session has ended\n\n"
                        return
                    if snap is None:
                        yield b": ping\n\n"
                        continue
                    if skip and skip == str(snap.seq):
                        skip = ""
                        continue
                    skip = ""
                    yield self._message(snap, filters, now.may_act).encode()

        headers = {"X-Accel-Buffering": "no"}
        response = StreamingResponse(body(), media_type="text/event-stream", headers=headers)
        return _secured(response)

    def _message(self, snap: Snapshot, filters: Filters, may_act: bool) -> str:
        out = []
        for panel in PANELS:
            html = render_panel(self.env, panel, snap, filters, may_act)
            data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
            out.append(f"event: {panel}\n{data}\n")
        out.append(f"id: {snap.seq}\n\n")
        return "".join(out)

    # --- the routes ------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        static = StaticFiles(directory=Path(__file__).parent / "static")
        return [
            Route("/", self.index, methods=["GET"], name="dashboard"),
            Route("/login", self.login_page, methods=["GET"], name="dashboard_login_page"),
            Route("/login", self.login, methods=["POST"], name="dashboard_login"),
            Route("/logout", self.action(self.logout, any_role=True), methods=["POST"]),
            Route("/dashboard/tasks/act", self.action(self.tasks.act), methods=["POST"]),
            Route("/dashboard/processes/act", self.action(self.buttons.process), methods=["POST"]),
            Route("/dashboard/spawn/act", self.action(self.buttons.spawn), methods=["POST"]),
            Route("/dashboard/workflows/act", self.action(self.buttons.workflow), methods=["POST"]),
            Route("/dashboard/panels/{panel}", self.fragment, methods=["GET"]),
            Route("/dashboard/stream", self.stream, methods=["GET"], name="dashboard_stream"),
            Mount(STATIC_PATH, app=static, name="dashboard_static"),
        ]
