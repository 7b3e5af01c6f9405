"""bench/scheduler_bench.py --quick runs (both backends) and writes its JSON: corral's
assignment + release percentiles and the original query shape's, per size, and the
claim's plan (an index, no sort). The numbers are not asserted."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_bench_smoke import MACHINE_KEYS, run_quick


def test_scheduler_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    data = run_quick("scheduler_bench.py", tmp_path / "sched.json")
    assert data["bench"] == "scheduler_bench"
    assert set(data["machine"]) >= MACHINE_KEYS
    params = data["params"]
    cells = {(r["backend"], r["agents"]) for r in data["results"]}
    assert cells == {(b, n) for b in params["backends"] for n in params["sizes"]}
    for r in data["results"]:
        assert r["corral"]["n"] == r["corral_discovery"]["n"] == params["samples"]
        assert r["original"]["n"] == params["original_samples"]
        assert sum(r["kinds"].values()) == params["samples"]
        assert "agents_inbox" in r["plan"]
    assert set(data["summary"]) == {"sqlite", "postgres"}
