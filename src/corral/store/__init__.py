"""Storage: one port (``Store``), an adapter per backend, chosen by URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from corral import defaults
from corral.errors import InvalidInputError
from corral.store.base import Deadlines, NodeSpec, Store, TaskMatch, TaskSpec

__all__ = [
    "Deadlines",
    "NodeSpec",
    "Store",
    "TaskMatch",
    "TaskSpec",
    "check_url",
    "default_url",
    "open_store",
]

_MAX_PORT = 65535


def default_url() -> str:
    """``$CORRAL_URL``, else an SQLite file under ``.corral/`` in the working directory."""
    env = os.environ.get("CORRAL_URL")
    if env:
        return env
    return f"sqlite:///{Path(defaults.DEFAULT_DIR) / defaults.DEFAULT_SQLITE_FILE}"


def sqlite_path(url: str) -> str:
    """``sqlite:///rel/path.db`` -> ``rel/path.db``; ``sqlite:////abs.db`` -> ``/abs.db``."""
    rest = url[len("sqlite://") :]
    if not rest.startswith("/"):
        raise InvalidInputError("an SQLite URL looks like sqlite:///path/to/file.db", field="url")
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise InvalidInputError("the SQLite URL names no file", field="url")
    return path


def _shown(url: str) -> str:
    """``url`` with its password (if any) hidden, for messages."""
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, hosts = rest[:end].rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{userinfo}{at}{hosts}{rest[end:]}"


def _bad_url(url: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"malformed URL {_shown(url)!r:.200}: {why}", field="url")


def _check_host(url: str, spec: str) -> None:
    """One ``host[:port]`` or ``[v6]:port`` of a URL's authority: the brackets closed,
    the port (when given) a number from 1 to 65535."""
    if spec.startswith("["):
        close = spec.find("]")
        if close < 0:
            raise _bad_url(url, "an IPv6 address opened with [ is not closed with ]")
        host, rest = spec[1:close], spec[close + 1 :]
        if rest and not rest.startswith(":"):
            raise _bad_url(url, f"unexpected {rest!r:.40} after the IPv6 address")
        port = rest[1:]
    elif "]" in spec:
        raise _bad_url(url, "a ] with no [ before it")
    else:
        host, _, port = spec.partition(":")
    if not host and port:
        raise _bad_url(url, "a port with no host")
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= _MAX_PORT):
        raise _bad_url(url, f"the port must be a number from 1 to {_MAX_PORT}; got {port!r:.40}")


def check_url(url: str) -> str:
    """``url`` if it is well formed: a known scheme and, for ``http(s)://`` and
    ``postgresql://``, hosts and ports that parse (a port from 1 to 65535). Raises
    ``InvalidInputError`` (field ``url``) at once instead of a parser's traceback or a
    connection attempt that can only fail."""
    if not isinstance(url, str):
        raise InvalidInputError("the URL must be a string", field="url")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in ("sqlite", "postgresql", "postgres", "http", "https"):
        raise InvalidInputError(
            f"unsupported URL {url!r:.200}: use sqlite:///PATH, postgresql://… or http://HOST:PORT",
            field="url",
        )
    if scheme == "sqlite":
        return url
    authority = url.split("://", 1)[1]
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    hosts = authority.rpartition("@")[2]
    if scheme in ("http", "https"):
        if not hosts or hosts.startswith(":"):
            raise _bad_url(url, "no host")
        _check_host(url, hosts)
    else:  # libpq: several hosts are host1:port1,host2:port2; none is the socket default
        for spec in hosts.split(",") if hosts else ():
            _check_host(url, spec)
    try:
        urlsplit(url).port  # noqa: B018 - what the clients parse later must parse now
    except ValueError as exc:
        if scheme in ("http", "https"):
            raise _bad_url(url, str(exc)) from None
    return url


def open_store(url: str, **options: Any) -> Store:
    """The store a URL names: ``sqlite:///PATH[?synchronous=FULL]`` or ``postgresql://…``."""
    check_url(url)
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        from corral.store.sqlite import SQLiteStore

        query = dict(parse_qsl(urlsplit(url).query))
        return SQLiteStore(sqlite_path(url), **{**query, **options})
    if scheme in ("postgresql", "postgres"):
        try:
            from corral.store.postgres import PostgresStore
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise InvalidInputError(
                f"PostgreSQL support is not installed ({exc}); pip install 'corral[postgres]'",
                field="url",
            ) from None
        return PostgresStore(url, **options)
    raise InvalidInputError(
        f"unsupported store URL {url!r}: use sqlite:///PATH, postgresql://… or http://HOST:PORT",
        field="url",
    )
