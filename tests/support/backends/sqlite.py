"""The embedded backend: a fresh SQLite file per test."""

from __future__ import annotations

from pathlib import Path

import pytest

import corral
from corral.clock import FakeClock


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> corral.Cluster:
    client = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
    assert isinstance(client, corral.Cluster)  # a database URL gives the embedded client
    return client
