"""bench/dashboard_bench.py runs: ``--quick`` (a small board) as a real subprocess,
without the browser part (tests/integration/test_dashboard_browser.py drives chromium),
and writes its JSON. The numbers are never asserted (performance is measured in
``bench/``, not in tests); only that each part measured what it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_bench_smoke import MACHINE_KEYS, run_quick

pytestmark = pytest.mark.slow


def test_dashboard_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    data = run_quick("dashboard_bench.py", tmp_path / "dashboard.json", "--no-browser")
    assert data["bench"] == "dashboard"
    assert set(data["machine"]) >= MACHINE_KEYS
    board = data["board"]
    assert board["by_status"]["pending"] > 0 and board["nodes"] > 0
    for part in ("cold_ms", "warm_ms"):
        assert data["first_response"][part]["n"] == data["first_response"]["samples"]
    assert data["first_paint"] is None  # --no-browser
    assert data["first_response_inboxes_unread"]["cold_ms"]["n"] >= 3
    fan = data["fan_out"]
    for pages in ("pages_1", "pages_50"):
        assert fan[pages]["snapshot_reads_per_event"] > 0
        assert fan[pages]["calls"]["list_nodes"] > 0
    assert set(data["met"]) == {
        "first_response",
        "first_response_p90",
        "first_paint",
        "first_paint_p90",
        "fan_out",
    }
