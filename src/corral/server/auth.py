"""Bearer tokens: one operator token, and per-node tokens derived from it.

The operator token is a secret kept in ``$CORRAL_TOKEN``, a token file, or
``.corral/token`` (created with mode 0600 at ``corral init`` or the first
``corral serve``). A node token is ``node.<id in base64url>.<HMAC-SHA256 of the
operator token and the id>``: stateless (nothing stored), bound to one node id, and
revoked for every node at once by changing the operator token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from corral import defaults
from corral.errors import InvalidInputError

__all__ = [
    "TOKEN_ENV",
    "Principal",
    "Tokens",
    "default_token_path",
    "ensure_token_file",
    "load_token",
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


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the operator (``node_id`` None) or one node."""

    node_id: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.node_id is None

    def may_act_as(self, node_id: str | None) -> bool:
        return self.node_id is None or self.node_id == node_id


_VERIFIED_CACHE_SIZE = 4096


class Tokens:
    """Checks bearer tokens against the operator secret; issues node tokens.

    ``from_header`` remembers the header values that named a valid principal (up to
    4096, then the memory starts over), so a caller's repeated requests cost one dict
    lookup instead of an HMAC. Only valid values are kept: a wrong token is always
    checked in full, and a lookup finds only a value presented and verified before
    (dict lookups compare keyed SipHash hashes first, so they leak nothing useful)."""

    def __init__(self, operator_token: str) -> None:
        if not operator_token:
            raise InvalidInputError("the operator token must not be empty", field="token")
        self._operator = operator_token.encode()
        self._key = hashlib.sha256(b"corral-node-token\0" + self._operator).digest()
        self._verified: dict[str, Principal] = {}

    def _mac(self, node_id: str) -> str:
        return hmac.new(self._key, node_id.encode(), hashlib.sha256).hexdigest()

    def node_token(self, node_id: str) -> str:
        """The token that lets ``node_id`` (and only it) act as itself."""
        encoded = base64.urlsafe_b64encode(node_id.encode()).decode().rstrip("=")
        return f"{_NODE_PREFIX}{encoded}.{self._mac(node_id)}"

    def check(self, token: str) -> Principal | None:
        """The principal a token names, or None when it is not valid."""
        if token.startswith(_NODE_PREFIX):
            encoded, _, mac = token[len(_NODE_PREFIX) :].rpartition(".")
            try:
                node_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return None
            if node_id and hmac.compare_digest(mac.encode(), self._mac(node_id).encode()):
                return Principal(node_id)
            return None
        if hmac.compare_digest(token.encode(), self._operator):
            return Principal(None)
        return None

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
        if principal is not None:
            if len(self._verified) >= _VERIFIED_CACHE_SIZE:
                self._verified.clear()
            self._verified[value] = principal
        return principal
