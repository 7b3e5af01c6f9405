"""The embedded backend: a fresh SQLite file per test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import corral
from corral.clock import FakeClock


def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Any:
    return corral.connect(f"sqlite:///{tmp_path / 'corral.db'}", clock=clock)
