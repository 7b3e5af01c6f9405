"""Bearer tokens: the operator token, per-node tokens derived from it, and named
tokens with a role.

The operator token is a secret kept in ``$CORRAL_TOKEN``, a token file, or
``.corral/token`` (created with mode 0600 at ``corral init`` or the first
``corral serve``); its principal is named ``operator``. A node token is
``node.<id in base64url>.<HMAC-SHA256 of the operator token and the id>``: stateless
(nothing stored), bound to one node id, and revoked for every node at once by
changing the operator token. A named token (``corral token create NAME --role
operator|viewer``, ``corral.tokens``) is ``tok.<random>``, stored in the cluster only
as its SHA-256: each request presenting one looks its hash up in the store (one
indexed read), so a revoked token is refused at once by every server process.

A principal is who calls, with a role: ``operator`` (may do everything), ``viewer``
(may call the operations that only read: the registry's ``GET`` routes) or ``node``
(acts only as its node). ``Principal.actor`` is the name events record for it:
``operator``, ``token:NAME`` or ``node:ID``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from corral import defaults
from corral.errors import InvalidInputError
from corral.tokens import OPERATOR, TOKEN_PREFIX, hash_token

if TYPE_CHECKING:
    from corral.tokens import NamedToken

__all__ = [
    "PRINCIPAL",
    "TOKEN_ENV",
    "Principal",
    "Role",
    "Tokens",
    "default_token_path",
    "ensure_token_file",
    "load_token",
    "named_tokens",
    "read_client_token",
]

TOKEN_ENV = "CORRAL_TOKEN"
_NODE_PREFIX = "node."


def default_token_path() -> Path:
    return Path(defaults.DEFAULT_DIR) / "token"


def ensure_token_file(path: str | os.PathLike[str] | None = None) -> Path:
    """Create the token file (mode 0600) with a fresh secret unless it exists."""
    p = Path(path) if path is not None else default_token_path()
    if p.exists():
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return p


def _read(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise InvalidInputError(f"{path} does not exist", field="token_file") from None
    except OSError as exc:
        raise InvalidInputError(
            f"cannot read the token file {path}: {exc.strerror or exc}", field="token_file"
        ) from None
    if not token:
        raise InvalidInputError(f"token file {path} is empty", field="token_file")
    return token


def load_token(token_file: str | os.PathLike[str] | None = None, *, create: bool = True) -> str:
    """The server's operator token: ``$CORRAL_TOKEN``, else ``token_file``, else
    ``.corral/token`` (created when missing and ``create``)."""
    env = os.environ.get(TOKEN_ENV)
    if env and env.strip():
        return env.strip()
    if token_file is not None:
        return _read(Path(token_file))
    path = default_token_path()
    if create:
        ensure_token_file(path)
    return _read(path)


def read_client_token() -> str | None:
    """The token a client uses when none is given: ``$CORRAL_TOKEN``, else
    ``.corral/token`` if it exists."""
    env = os.environ.get(TOKEN_ENV)
    if env and env.strip():
        return env.strip()
    path = default_token_path()
    if path.is_file():
        return _read(path)
    return None


Role = Literal["operator", "viewer", "node"]
"""What a principal may do: everything, read only, or act as its node."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the operator token (the defaults), a named token (``name``,
    its ``role`` and ``token_id``) or one node (``node_id``, role ``node``)."""

    node_id: str | None = None
    name: str = OPERATOR
    role: Role = "operator"
    token_id: int | None = None  # a named token's row: sessions re-check it

    @classmethod
    def node(cls, node_id: str) -> Principal:
        return cls(node_id, name=node_id, role="node")

    @classmethod
    def named(cls, token: NamedToken) -> Principal:
        # Only a row that says operator gives the operator's powers (least privilege).
        role: Role = "operator" if token.role == "operator" else "viewer"
        return cls(None, name=token.name, role=role, token_id=token.id)

    @property
    def is_operator(self) -> bool:
        """The operator token or a named token with the operator's role."""
        return self.role == "operator"

    @property
    def may_write(self) -> bool:
        """Whether it may call an operation that changes the cluster."""
        return self.role != "viewer"

    @property
    def actor(self) -> str:
        """Its name as events record it (the one place it is made): ``operator``
        (the operator token), ``token:NAME`` (a named token), ``node:ID``."""
        if self.role == "node":
            return f"node:{self.node_id}"
        if self.token_id is not None:
            return f"token:{self.name}"
        return OPERATOR

    def may_act_as(self, node_id: str | None) -> bool:
        return self.role != "node" or self.node_id == node_id

    def refusal(self, scope: str, *, writes: bool) -> str | None:
        """Why this principal may not call an operation of ``scope`` ("public",
        "any" or "operator") that ``writes`` (or not), or None when it may. A viewer
        may call every operation that only reads, whatever its scope."""
        if scope == "public":
            return None
        if self.role == "viewer":
            if writes:
                return (
                    f"the token {self.name!r} has the viewer role: it may only read, and "
                    "this operation changes the cluster (use an operator token)"
                )
            return None
        if scope == "operator" and self.role == "node":
            return "this operation needs the operator token (or a named operator token)"
        return None


PRINCIPAL: ContextVar[Principal | None] = ContextVar("corral_principal", default=None)
"""The principal of the request being served, for a surface that cannot pass it as
an argument (the MCP tools behind ``corral serve``'s ``/mcp``); None: no
restriction (stdio, an embedded client)."""


def named_tokens(cluster: Any) -> Callable[[str], NamedToken | None] | None:
    """The lookup of named tokens by hash in ``cluster``'s store (stamping their
    last use), or None when its store keeps none."""
    store = getattr(cluster, "store", None)
    find = getattr(store, "token_by_hash", None)
    if find is None:
        return None
    clock = cluster.clock

    def lookup(token_hash: str) -> NamedToken | None:
        found: NamedToken | None = find(token_hash, clock.now())
        return found

    return lookup


_VERIFIED_CACHE_SIZE = 4096


class Tokens:
    """Checks bearer tokens: the operator secret, node tokens, and named tokens
    (``lookup``: a named token's record by its hash, from the cluster's store, or
    None when it has none; without it named tokens are refused).

    ``from_header`` remembers the header values that named the operator or a node
    (up to 4096, then the memory starts over), so a caller's repeated requests cost
    one dict lookup instead of an HMAC. Only valid values are kept: a wrong token is
    always checked in full, and a lookup finds only a value presented and verified
    before (dict lookups compare keyed SipHash hashes first, so they leak nothing
    useful). A named token is never remembered: each request looks it up (``named``
    says which header values need that), so a revoked one is refused at once."""

    def __init__(
        self,
        operator_token: str,
        *,
        lookup: Callable[[str], NamedToken | None] | None = None,
    ) -> None:
        if not operator_token:
            raise InvalidInputError("the operator token must not be empty", field="token")
        self._operator = operator_token.encode()
        self._key = hashlib.sha256(b"corral-node-token\0" + self._operator).digest()
        self._verified: dict[str, Principal] = {}
        self._lookup = lookup

    def _mac(self, node_id: str) -> str:
        return hmac.new(self._key, node_id.encode(), hashlib.sha256).hexdigest()

    def node_token(self, node_id: str) -> str:
        """The token that lets ``node_id`` (and only it) act as itself."""
        encoded = base64.urlsafe_b64encode(node_id.encode()).decode().rstrip("=")
        return f"{_NODE_PREFIX}{encoded}.{self._mac(node_id)}"

    def check(self, token: str) -> Principal | None:
        """The principal a token names, or None when it is not valid (a named token:
        one read of the store)."""
        if token.startswith(_NODE_PREFIX):
            encoded, _, mac = token[len(_NODE_PREFIX) :].rpartition(".")
            try:
                node_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
            if node_id and hmac.compare_digest(mac.encode(), self._mac(node_id).encode()):
                return Principal.node(node_id)
            return None
        if hmac.compare_digest(token.encode(), self._operator):
            return Principal(None)
        if token.startswith(TOKEN_PREFIX) and self._lookup is not None:
            found = self._lookup(hash_token(token))
            return None if found is None else Principal.named(found)
        return None

    def named(self, value: str | None) -> bool:
        """Whether the ``Authorization`` header value presents a named token (whose
        check reads the store: an async caller runs it on a thread)."""
        return (
            value is not None
            and value not in self._verified
            and value[7:].lstrip().startswith(TOKEN_PREFIX)
        )

    def from_header(self, value: str | None) -> Principal | None:
        """Parse an ``Authorization: Bearer …`` header value."""
        if not value:
            return None
        known = self._verified.get(value)
        if known is not None:
            return known
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        principal = self.check(token.strip())
        if principal is not None and principal.token_id is None:
            if len(self._verified) >= _VERIFIED_CACHE_SIZE:
                self._verified.clear()
            self._verified[value] = principal
        return principal
