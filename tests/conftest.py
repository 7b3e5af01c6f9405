"""Fixtures shared by the suite.

``cluster`` runs a test once per backend in ``BACKENDS``: the same behaviour, every
store (huey's StorageTests idea). Each backend module in ``tests/support/backends/`` exposes
``make(tmp_path, clock) -> client`` and is listed here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral.clock import FakeClock
from corral.types import Client

BACKENDS = ["sqlite", "postgres", "http"]
# Backends whose client is a ``Cluster`` over a store (the monitor runs on these).
EMBEDDED = [b for b in BACKENDS if b != "http"]

IN_CI = bool(os.environ.get("CI"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'corral.db'}"


def _backend_client(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Client]:
    backend = importlib.import_module(f"tests.support.backends.{request.param}")
    client: Client = backend.make(request, tmp_path, clock)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=BACKENDS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Client]:
    """A fresh, empty cluster on each backend, on the fake clock."""
    yield from _backend_client(request, tmp_path, clock)


@pytest.fixture(params=EMBEDDED)
def embedded(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[corral.Cluster]:
    """A fresh cluster on each embedded backend (a ``Cluster`` with a ``.store``)."""
    for client in _backend_client(request, tmp_path, clock):
        assert isinstance(client, corral.Cluster)  # the embedded backends make one
        yield client


@pytest.fixture
def sqlite_cluster(db_url: str, clock: FakeClock) -> Iterator[corral.Cluster]:
    """A fresh SQLite cluster on the fake clock (for SQLite-only tests)."""
    c = corral.connect(db_url, clock=clock)
    assert isinstance(c, corral.Cluster)  # a database URL gives the embedded client
    try:
        yield c
    finally:
        c.close()
