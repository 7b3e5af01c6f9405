"""``corral.connect``: the one entry point for every backend."""

from __future__ import annotations

from typing import Any

from corral.clock import Clock
from corral.cluster import Cluster
from corral.store import check_url, default_url, open_store
from corral.types import Client

__all__ = ["connect"]


def connect(url: str | None = None, *, clock: Clock | None = None, **overrides: Any) -> Client:
    """A client for the cluster at ``url``: ``sqlite:///PATH``, ``postgresql://…`` or
    ``http(s)://HOST:PORT``. All three offer the same operations with the same results.

    ``url`` defaults to ``$CORRAL_URL``, else ``sqlite:///.corral/corral.db``.
    ``overrides`` go to the backend (e.g. ``synchronous="FULL"`` for SQLite,
    ``token=`` for HTTP). ``clock`` injects time (tests).
    """
    url = check_url(url or default_url())
    if url.startswith(("http://", "https://")):
        from corral.remote import HttpClient

        return HttpClient(url, **overrides)
    return Cluster(open_store(url, **overrides), clock=clock, url=url)
