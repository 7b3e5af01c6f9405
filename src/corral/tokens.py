"""Named tokens: bearer tokens with a name and a role, kept in the cluster's store.

``corral token create NAME --role operator|viewer`` makes one and shows it once;
``corral token list`` shows their names, roles and when they were made and last
used (never a token); ``corral token revoke NAME`` ends one at once, on every server
process (each request looks its token up: ``corral.server.auth``). A ``viewer`` may
call every operation that only reads (the registry's ``GET`` routes) and nothing
else; an ``operator`` token may do what the operator token does. The first-run
operator token stays, named ``operator`` (no named token takes that name).

A token is ``tok.`` and 32 random bytes from ``secrets`` in base64url; the store
keeps only its SHA-256. A fast unsalted hash is the right one here, unlike for
passwords: a 256-bit random value cannot be guessed or enumerated, so a slow salted
hash (bcrypt, scrypt) would protect nothing more, and it would forbid what the server
needs, finding a presented token's row by an index on its hash in one read. A copy of
the database holds hashes that open nothing.

:class:`TokenOperations` is the part of ``corral.Cluster`` that holds these
operations (validation, then one store transaction each).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from corral.params import ActorName, TokenName, TokenRoleName
from corral.validation import checked

if TYPE_CHECKING:
    from corral.clock import Clock
    from corral.store import Store

__all__ = [
    "OPERATOR",
    "TOKEN_PREFIX",
    "NamedToken",
    "TokenOperations",
    "hash_token",
    "new_token",
]

TOKEN_PREFIX = "tok."
OPERATOR = "operator"  # the first-run token's name, and the actor of a local call


def new_token() -> str:
    """A fresh bearer token: ``tok.`` and 256 random bits in base64url."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What the store keeps of a token, and looks it up by: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class NamedToken:
    """A named token as the store keeps it (never the token itself). ``token`` is
    the bearer token, set only in ``create_token``'s answer: it is shown once."""

    id: int
    name: str
    role: str
    created_at: float
    created_by: str
    last_used_at: float | None = None
    token: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def text(self) -> str:
        """One line: ``token alice (viewer), made by operator``; a new token's also
        carries the token (``…: tok.… (shown this once)``)."""
        line = f"token {self.name} ({self.role}), made by {self.created_by}"
        return line if self.token is None else f"{line}: {self.token} (shown this once)"


class _TokenStore(Protocol):
    def create_token(
        self, name: str, role: str, token_hash: str, actor: str, now: float
    ) -> NamedToken: ...
    def list_tokens(self) -> list[NamedToken]: ...
    def revoke_token(self, name: str, actor: str, now: float) -> NamedToken: ...
    def token_by_hash(self, token_hash: str, now: float) -> NamedToken | None: ...
    def token_by_id(self, token_id: int) -> NamedToken | None: ...


class TokenOperations:
    """The named token operations of ``corral.Cluster``."""

    if TYPE_CHECKING:
        store: Store
        clock: Clock

    @property
    def _tokens(self) -> _TokenStore:
        return cast("_TokenStore", self.store)  # SQLStore's token functions

    @checked
    def create_token(
        self, name: TokenName, role: TokenRoleName = "viewer", actor: ActorName = OPERATOR
    ) -> NamedToken:
        """Make a named bearer token with a role (``operator`` or ``viewer``): the
        answer's ``token`` is shown this once (the cluster keeps only its SHA-256).

        A ``token_created`` event names it, its role and the ``actor`` (the caller's
        name; the server sets it). A name in use is refused (``ConflictError``)."""
        token = new_token()
        made = self._tokens.create_token(name, role, hash_token(token), actor, self.clock.now())
        return NamedToken(**{**made.to_dict(), "token": token})

    def list_tokens(self) -> list[NamedToken]:
        """The named tokens by name: role, when made and by whom, when last used
        (to the minute); never a token."""
        return self._tokens.list_tokens()

    @checked
    def revoke_token(self, name: TokenName, actor: ActorName = OPERATOR) -> NamedToken:
        """Revoke a named token: refused from its next request on, by every server
        process. A ``token_revoked`` event names it and the ``actor``;
        ``NotFoundError`` when no token has that name."""
        return self._tokens.revoke_token(name, actor, self.clock.now())
