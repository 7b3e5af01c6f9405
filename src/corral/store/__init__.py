"""Storage: one port (``Store``), an adapter per backend, chosen by URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from corral import defaults
from corral.errors import InvalidInputError
from corral.store.base import Deadlines, NodeSpec, Store, TaskSpec

__all__ = ["Deadlines", "NodeSpec", "Store", "TaskSpec", "default_url", "open_store"]


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


def open_store(url: str, **options: Any) -> Store:
    """The store a URL names: ``sqlite:///PATH[?synchronous=FULL]`` or ``postgresql://…``."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        from corral.store.sqlite import SQLiteStore

        query = dict(parse_qsl(urlsplit(url).query))
        return SQLiteStore(sqlite_path(url), **{**query, **options})
    if scheme in ("postgresql", "postgres"):
        try:
            from corral.store.postgres import PostgresStore  # type: ignore[import-not-found]
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
