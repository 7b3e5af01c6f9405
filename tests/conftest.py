"""Fixtures shared by the suite.

``cluster`` runs a test once per backend in ``BACKENDS``: the same behaviour, every
store (huey's StorageTests idea). Each backend module in ``tests/support/backends/`` exposes
``make(tmp_path, clock) -> client`` and is listed here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral.clock import FakeClock
from corral.types import Client

BACKENDS = ["sqlite", "postgres", "http"]
# Backends whose client is a ``Cluster`` over a store (the monitor runs on these).
EMBEDDED = [b for b in BACKENDS if b != "http"]

# Tests that run alone, after the rest (``serial``: scripts/test runs the others on
# three processes first): a whole module by its name, or one test as ``module::test``
# (every parametrized case of it). Each either owns something one machine has once
# (the hosts harness's network namespaces and its PostgreSQL cluster's port) or
# measures time against a bound that a second test process beside it would eat into.
# (The benches' smoke runs check what a bench writes, not its numbers: they run beside
# the others.)
SERIAL = {
    "test_chaos": "network namespaces and the harness's PostgreSQL port; faults' bounds",
    "test_chaos_clock": "the hosts harness",
    "test_partition": "the hosts harness",
    "test_fleet_up::test_a_second_corral_up_in_the_same_directory_fails_at_once": (
        "the second corral up's refusal within a second"
    ),
    "test_fleet_up::test_the_fleet_example_drains_its_board_and_retires_its_workers": (
        "the pool's decisions a cooldown (1 s) apart, as their events record them"
    ),
    "test_wal_cross_process": "another process reads a write within 0.1 s",
    "test_mcp_transports": "a restarted server's reconnect window",
    "test_worker_outage": "workers riding out outages within their beats",
    "test_postgres_fleet": "a fleet's recovery bounds under a PostgreSQL restart",
    "test_cli_top": "the terminal shows a change within a second",
    "test_ctl_watch": "the watch's looks every 0.1 s",
}
# Tests of a serial module that hold none of its bounds: they run beside the others.
# (test_fleet_up's other tests are not serial at all: their bounds are deadlines of
# seconds to minutes, or lower bounds.)
BESIDE = {
    "test_worker_outage::"
    "test_a_claim_whose_answer_was_lost_returns_the_same_task_when_sent_again": (
        "the client's tolerance is 30 s; nothing is timed"
    ),
    "test_worker_outage::test_a_keyed_claim_sent_again_takes_nothing_more": "no process, no time",
    "test_mcp_transports::test_stdio_corral_mcp_subprocess": "no restart, no window",
    "test_mcp_transports::test_corral_serve_mcp_with_a_node_token_acts_only_as_that_node": (
        "no restart, no window"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        test = f"{item.path.stem}::{getattr(item, 'originalname', item.name)}"
        if (item.path.stem in SERIAL or test in SERIAL) and test not in BESIDE:
            item.add_marker(pytest.mark.serial)


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
