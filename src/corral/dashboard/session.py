"""The dashboard's sessions: a bearer token exchanged for a signed, expiring cookie.

A session is ``{sid, node, role, exp}`` signed with HMAC-SHA256 under a key derived
from the operator token (``session_key``): every ``corral serve`` process (and
worker) with that token accepts the cookie, a restart keeps pages logged in, and a
new operator token logs every page out. The token is never in the cookie. The
cookie is ``HttpOnly; SameSite=Strict; Path=/`` (``Secure`` behind HTTPS).

Every state-changing request carries the session's CSRF token, an HMAC of its
``sid`` under a second key, in the ``X-CSRF-Token`` header (set by the page's
script) or a ``csrf`` form field. Logging out forgets the ``sid`` for the rest of
its life in the process that served the logout (with ``--workers``, the browser's
cookie is gone, but another worker would accept a copy until it expires).

A session records who logged in and as what: the operator token, or a named token
(``corral token create NAME --role operator|viewer``: its name, role and row id), and
its role: ``operator`` may act, ``viewer`` sees every panel and may act on nothing. A
named token's session holds only while the token does: the dashboard looks its row up
on every request (``Dashboard.session``), so revoking the token ends its sessions at
once, on every server process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from corral.server.auth import Principal, Tokens

__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "SESSION_SECONDS",
    "Role",
    "Session",
    "Sessions",
    "session_key",
]

Role = Literal["operator", "viewer"]

COOKIE = "corral_session"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
SESSION_SECONDS = 8 * 3600.0
_MAX_FORGOTTEN = 10_000


@dataclass(frozen=True, slots=True)
class Session:
    """One logged-in page: who (``name``: ``operator`` for the operator token, else a
    named token's name, with its ``token_id``), as what, until when."""

    sid: str
    role: Role
    expires_at: float
    node: str | None = None
    name: str = "operator"
    token_id: int | None = None

    @property
    def may_act(self) -> bool:
        return self.role == "operator"

    @property
    def principal(self) -> Principal:
        """The caller the page's actions are made as (its ``actor`` names the token)."""
        from corral.server.auth import Principal

        return Principal(None, name=self.name, role=self.role, token_id=self.token_id)


def session_key(tokens: Tokens) -> bytes:
    """The sessions' key, derived from the operator token through ``Tokens``' public
    derivation: the token of a node id no node can have (ids refuse control
    characters), hashed. It is never sent anywhere."""
    return hashlib.sha256(tokens.node_token("\0corral-dashboard-sessions\0").encode()).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    """Issues and checks session cookies and their CSRF tokens. ``clock`` is the
    wall clock (injected in tests); ``secret`` defaults to a fresh random key."""

    def __init__(
        self,
        *,
        secret: bytes | None = None,
        lifetime: float = SESSION_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        key = secret if secret is not None else secrets.token_bytes(32)
        self._sign_key = hashlib.sha256(b"corral-dashboard-session\0" + key).digest()
        self._csrf_key = hashlib.sha256(b"corral-dashboard-csrf\0" + key).digest()
        self.lifetime = lifetime
        self.clock = clock
        self._forgotten: dict[str, float] = {}  # sid -> its expiry

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._sign_key, payload, hashlib.sha256).digest())

    def issue(
        self,
        role: Role,
        node: str | None = None,
        *,
        name: str = "operator",
        token_id: int | None = None,
    ) -> tuple[Session, str]:
        """A new session and its cookie value (``name`` and ``token_id``: a named
        token's)."""
        session = Session(
            sid=secrets.token_urlsafe(18),
            role=role,
            expires_at=self.clock() + self.lifetime,
            node=node,
            name=name,
            token_id=token_id,
        )
        body = {
            "sid": session.sid,
            "role": role,
            "exp": session.expires_at,
            "node": node,
            "name": name,
            "tid": token_id,
        }
        payload = json.dumps(body, separators=(",", ":")).encode()
        return session, f"{_b64(payload)}.{self._sign(payload)}"

    def check(self, cookie: str | None) -> Session | None:
        """The session a cookie value carries, or None (absent, forged, expired,
        logged out)."""
        if not cookie or cookie.count(".") != 1:
            return None
        encoded, mac = cookie.split(".")
        try:
            payload = _unb64(encoded)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(mac.encode(), self._sign(payload).encode()):
            return None
        try:
            body = json.loads(payload)
            tid = body.get("tid")
            session = Session(
                sid=str(body["sid"]),
                role=body["role"],
                expires_at=float(body["exp"]),
                node=body["node"],
                name=str(body.get("name", "operator")),
                token_id=None if tid is None else int(tid),
            )
        except (ValueError, KeyError, TypeError):
            return None
        if session.role not in ("operator", "viewer") or session.expires_at <= self.clock():
            return None
        if session.sid in self._forgotten:
            return None
        return session

    def csrf_token(self, session: Session) -> str:
        """The CSRF token every state-changing request of this session carries."""
        return _b64(hmac.new(self._csrf_key, session.sid.encode(), hashlib.sha256).digest())

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(
            str(presented).encode(), self.csrf_token(session).encode()
        )

    def forget(self, session: Session) -> None:
        """Log a session out: its cookie is refused from now on."""
        now = self.clock()
        if len(self._forgotten) >= _MAX_FORGOTTEN:
            self._forgotten = {s: t for s, t in self._forgotten.items() if t > now}
        self._forgotten[session.sid] = session.expires_at
