"""bench/fleet_bench.py runs: --quick, as a real subprocess, writes its JSON (the
numbers are measured in bench/, never asserted here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_bench_smoke import run_quick


@pytest.mark.slow
def test_fleet_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    data = run_quick("fleet_bench.py", tmp_path / "fleet.json")
    assert data["bench"] == "fleet_bench"
    ups = data["scale_ups"]
    assert ups["rounds"] == 2
    assert set(ups["recommendation_to_claim_excl_startup"]) >= {"p50", "p99"}
    assert set(data["bursty"]) >= {"auto", "fixed", "bursts"}
    for mode in ("auto", "fixed"):
        assert data["bursty"][mode]["done"] == data["bursty"][mode]["tasks"] > 0
