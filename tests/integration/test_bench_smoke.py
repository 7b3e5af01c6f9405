"""The bench scripts run: each one, with ``--quick``, as a real subprocess.

Only that they work and write their JSON; the numbers are never asserted here
(performance is measured in ``bench/``, not in tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MACHINE_KEYS = {"cores", "usable_cores", "python", "sqlite", "loadavg", "git_commit"}


def run_quick(script: str, out: Path, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=out.parent,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_latency_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """sqlite_latency.py --quick exits 0 and writes percentiles for every board size
    and the claim p99 ratio of the largest board to the smallest; a cache dir is reused."""
    data = run_quick(
        "sqlite_latency.py", tmp_path / "latency.json", "--cache-dir", str(tmp_path / "cache")
    )
    assert data["bench"] == "sqlite_latency"
    assert set(data["machine"]) >= MACHINE_KEYS
    params = data["params"]
    assert params["checkpoint"] == ["auto", "between"]
    assert sorted((r["pending"], r["checkpoint"]) for r in data["results"]) == sorted(
        (size, mode) for size in params["sizes"] for mode in params["checkpoint"]
    )
    for r in data["results"]:
        assert r["pending_at_end"] == r["pending"]  # the board kept its size
        for op in ("claim_us", "complete_us"):
            assert r[op]["n"] == params["samples"]
            assert 0 < r[op]["p50"] <= r[op]["p99"] <= r[op]["max"]
    assert [q["checkpoint"] for q in data["ratios"]] == params["checkpoint"]
    for q in data["ratios"]:
        assert q["claim_p99_largest_over_smallest"] > 0
        assert (q["smallest"], q["largest"]) == (min(params["sizes"]), max(params["sizes"]))
        assert q["met"] == (q["claim_p99_largest_over_smallest"] <= q["target"])
    # --cache-dir keeps the loaded boards, and a second run uses them instead of loading.
    assert len(list((tmp_path / "cache").glob("board-*.db"))) == len(params["sizes"])
    again = run_quick(
        "sqlite_latency.py", tmp_path / "again.json", "--cache-dir", str(tmp_path / "cache")
    )
    assert [r["load_seconds"] for r in again["results"]] == [None] * len(again["results"])


def test_throughput_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """sqlite_throughput.py --quick exits 0 (every job done exactly once, by every
    system) and writes a rate per system and process count, the ratios and the
    locked-error run."""
    data = run_quick("sqlite_throughput.py", tmp_path / "throughput.json", "--dir", str(tmp_path))
    assert data["bench"] == "sqlite_throughput"
    assert set(data["machine"]) >= MACHINE_KEYS
    params = data["params"]
    cells = {(r["system"], r["synchronous"], r["procs"]) for r in data["runs"]}
    assert cells == {
        (s, y, p) for s in params["systems"] for y in params["synchronous"] for p in params["procs"]
    }
    assert set(params["systems"]) == {"corral", "corral_cc", "bare", "huey"}
    for r in data["runs"]:
        assert r["errors"] == []
        assert r["jobs"] == params["jobs"]
        assert r["jobs_per_s"] > 0
    for row in data["summary"]:
        assert row["corral_vs_bare"] > 0 and row["corral_vs_huey"] > 0
        assert row["corral_cc_vs_bare"] > 0 and row["corral_cc_vs_huey"] > 0
    assert {r["system"] for r in data["locked"]} == set(params["systems"])
    assert all(r["procs"] == params["locked_procs"] for r in data["locked"])
    assert {
        "corral_vs_bare_min",
        "corral_vs_huey_min",
        "corral_locked_errors",
        "corral_cc_vs_bare_min",
        "corral_cc_locked_errors",
    } <= set(data["targets"])


def test_throughput_bench_runs_a_baseline_checkout_side_by_side(tmp_path: Path) -> None:
    """--baseline DIR runs the corral loops again with the package in DIR/src (here
    this checkout itself), in spawned processes, and writes the ratio to it; a DIR
    without a corral package is refused with exit code 2."""
    root = BENCH.parent
    data = run_quick(
        "sqlite_throughput.py",
        tmp_path / "base.json",
        "--dir",
        str(tmp_path),
        "--systems",
        "corral_cc",
        "--baseline",
        str(root),
    )
    params = data["params"]
    assert params["baseline"] == str(root)
    assert params["systems"] == ["corral_cc", "corral_cc_base"]
    assert {r["system"] for r in data["runs"]} == {"corral_cc", "corral_cc_base"}
    for r in data["runs"]:
        assert r["errors"] == [] and r["jobs"] == params["jobs"]
    for row in data["summary"]:
        assert row["corral_cc_base"] > 0 and row["corral_cc_base_vs_new"] > 0
    bad = subprocess.run(
        [
            sys.executable,
            str(BENCH / "sqlite_throughput.py"),
            "--quick",
            "--baseline",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--baseline: no corral package" in bad.stderr


def test_profile_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """sqlite_profile.py --quick exits 0 and writes, per operation, the time of each
    statement, the write-lock hold time, the Python time around the statements and the
    pages each commit writes to the WAL."""
    data = run_quick("sqlite_profile.py", tmp_path / "profile.json")
    assert data["bench"] == "sqlite_profile"
    assert set(data["machine"]) >= MACHINE_KEYS
    for op in ("claim", "complete"):
        v = data["ops"][op]
        assert {"BEGIN IMMEDIATE", "COMMIT"} <= set(v["statements"])
        assert 0 < v["sql_us"] <= v["total_us"]
        assert 0 < v["lock_held_us"] <= v["total_us"]
    # A bare claim writes at least the row and its index, a bare complete the row.
    assert data["wal_frames"]["bare"]["claim"] >= 2 and data["wal_frames"]["bare"]["complete"] >= 1
    assert data["wal_frames"]["corral"]["pair"] > 0
    for system in ("corral", "bare"):
        assert data["unwrapped"][system]["wall_us"] > 0 and data["unwrapped"][system]["cpu_us"] > 0


def test_anatomy_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """sqlite_anatomy.py --quick exits 0 and writes the µs per job of every variant and
    the WAL frames per job by table: the worker's step writes its task rows, the claim
    index and the events; the bare loop its jobs table and index."""
    data = run_quick("sqlite_anatomy.py", tmp_path / "anatomy.json")
    assert data["bench"] == "sqlite_anatomy"
    assert set(data["machine"]) >= MACHINE_KEYS
    assert len(data["us_per_job"]) == 8 and all(v > 0 for v in data["us_per_job"].values())
    frames = data["frames_per_job"]
    assert {"tasks", "tasks_open", "events"} <= set(frames["corral_cc"])
    assert {"jobs", "jobs_pending"} <= set(frames["bare"])
    for kind in ("corral_cc", "corral", "bare"):
        named = sum(v for name, v in frames[kind].items() if name != "total")
        assert named == pytest.approx(frames[kind]["total"])


def test_http_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """http_bench.py --quick starts the floor and corral servers, loads them, times the
    embedded client with one and with 32 callers, and writes every ratio the targets
    read (rates against the floor, latency against the embedded client)."""
    data = run_quick("http_bench.py", tmp_path / "http.json")
    assert set(data["machine"]) >= MACHINE_KEYS
    median = data["median"]
    for name in ("floor", "corral/heartbeat", "corral/claim_complete"):
        load = median["load"][name]
        assert load["ops_per_s"] > 0 and 0 < load["p50_ms"] <= load["p99_ms"]
    for name in ("embedded32/heartbeat", "embedded32/claim_complete"):
        assert median["embedded32"][name]["ops_per_s"] > 0
    ratios = median["ratios"]
    for key in (
        "heartbeat_vs_floor_rate",
        "heartbeat_http_vs_embedded_p50",
        "heartbeat_http_vs_embedded32_mean",
        "claim_complete_http_vs_embedded32_p99",
        "floor_vs_embedded32_heartbeat_p50",
    ):
        assert ratios[key] > 0
    assert len(data["rounds"]) == data["repeat"]


def test_http_pace_quick_run_writes_its_json(tmp_path: Path) -> None:
    """http_pace.py --quick times each operation embedded and over HTTP after each
    pause, and the floor request, with corral's hand-written transport and urllib3's
    side by side, and writes the HTTP / embedded and library / hand-written ratios per
    pause; --transports hand times corral's alone, and an unknown name is exit 2."""
    data = run_quick("http_pace.py", tmp_path / "pace.json")
    assert data["bench"] == "http_pace"
    assert set(data["machine"]) >= MACHINE_KEYS
    assert data["transports"] == ["hand", "library"]
    assert set(data["median"]) == {"0", "1"}
    ops = ("heartbeat", "claim", "complete", "complete_and_claim")
    for pause in data["median"].values():
        for side in ("embedded", "http", "http_library"):
            for op in ops:
                d = pause[f"{side}/{op}"]
                assert 0 < d["p50"] <= d["p99"]
        assert pause["floor/request"]["p50"] > 0 and pause["floor_library/request"]["p50"] > 0
        ratios = pause["ratios"]
        assert {f"library_vs_hand_{op}_{q}" for op in ops for q in ("p50", "p99")} <= set(ratios)
        assert all(v > 0 for v in ratios.values())
    assert len(data["rounds"]) == data["repeat"] == 1

    alone = run_quick("http_pace.py", tmp_path / "alone.json", "--transports", "hand")
    assert alone["transports"] == ["hand"]
    for pause in alone["median"].values():
        assert "http/heartbeat" in pause and "http_library/heartbeat" not in pause
        assert not any(k.startswith("library") for k in pause["ratios"])
    bad = subprocess.run(
        [sys.executable, str(BENCH / "http_pace.py"), "--quick", "--transports", "curl"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--transports" in bad.stderr


def _pace_round(path: Path, scale: float, floor: float) -> None:
    """An http_pace.py result with every p50 ``scale`` ms and the floor's ``floor``."""
    ops = ("heartbeat", "claim", "complete", "complete_and_claim")
    cells: dict[str, Any] = {
        f"{side}/{op}": {"p50": scale, "p99": 2 * scale}
        for side in ("http", "embedded")
        for op in ops
    }
    cells["floor/request"] = {"p50": floor, "p99": 2 * floor}
    path.write_text(json.dumps({"bench": "http_pace", "median": {"1": cells, "10": cells}}))


def test_pace_compare_divides_two_trees_rounds_raw_and_per_floor(tmp_path: Path) -> None:
    """pace_compare.py: one tree's p50s twice the other's in every round are 2.00x; the
    same with its floor requests twice as slow too (the machine, not the code) is
    1.00x per floor; a directory without the rounds is exit 2 naming it."""
    for n in (1, 2):
        _pace_round(tmp_path / f"this_tree_{n}.json", scale=0.4, floor=0.2)
        _pace_round(tmp_path / f"caeb9f8_{n}.json", scale=0.2, floor=0.1)
    proc = subprocess.run(
        [sys.executable, str(BENCH / "pace_compare.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if "| http " in line]
    assert len(rows) == 2  # one per pause
    for row in rows:
        cells = [c.strip() for c in row[2:]]
        assert cells == ["2.00x"] * 4 + ["1.00x"] * 4
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run(
        [sys.executable, str(BENCH / "pace_compare.py"), str(empty)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and str(empty) in bad.stderr


def test_supervisor_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """supervisor_bench.py --quick --systems corral (the test extra installs neither
    supervisord nor circus) times kill -> replacement, idle CPU and RSS at two child
    counts, and adoption after a SIGKILL of the supervisor with every pid kept; an
    unknown system is exit 2."""
    data = run_quick("supervisor_bench.py", tmp_path / "sup.json", "--systems", "corral")
    assert data["bench"] == "supervisor_bench"
    assert set(data["machine"]) >= MACHINE_KEYS
    params = data["params"]
    assert params["systems"] == ["corral"] and params["kill_configs"] == ["corral"]
    kill = data["kill"]["corral"]["ms"]
    assert kill["n"] == params["kills"] and 0 < kill["p50"] <= kill["p90"] <= kill["max"]
    assert [(r["config"], r["children"]) for r in data["idle"]] == [
        ("corral", n) for n in params["children"]
    ]
    for r in data["idle"]:
        assert r["children_alive_at_end"] == r["children"]
        assert r["cpu_s"] >= 0 and 0 < r["rss_mb_mean"] <= r["rss_mb_peak"]
        assert any("supervise" in p["cmd"] for p in r["processes"])
    adopt = data["adopt"]
    assert adopt["children"] == params["adopt"] == adopt["same_pids"]
    assert adopt["restarts_after_adoption"] == 0
    assert 0 < adopt["first_answer_s"] <= adopt["all_watched_s"]
    assert adopt["adopted_kill_to_replacement_ms"]["p50"] > 0
    assert set(data["targets"]) == {"adoption_all_watched_s"}
    bad = subprocess.run(
        [sys.executable, str(BENCH / "supervisor_bench.py"), "--quick", "--systems", "runit"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--systems" in bad.stderr


def test_workflows_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """workflows_bench.py --quick --no-upstream (the test extra does not install
    llama-agents-server, the bench extra's) exits 0 and writes corral's heap and
    latency numbers for every run."""
    data = run_quick("workflows_bench.py", tmp_path / "workflows.json", "--no-upstream")
    assert data["bench"] == "workflows"
    assert set(data["machine"]) >= MACHINE_KEYS
    ours = data["corral"]
    assert ours["runs"] == data["params"]["runs"]
    for key in ("idle_detection_ms", "release_ms", "resume_ms"):
        assert ours[key]["n"] == ours["runs"]
    assert ours["heap_held_idle_bytes"] > 0
    assert data["llama_agents_server"] is None


def test_fleet_size_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """fleet_size.py --quick exits 0 and writes, for SQLite and PostgreSQL: registration,
    wake-read and idle-tick percentiles at both fleet sizes, a recovery per size, the
    serve runs with and without the monitor and with 1 and 2 workers (no errors), the
    paced fleet, the load client's CPU, and the summary's ratios and verdicts."""
    data = run_quick("fleet_size.py", tmp_path / "fleet.json")
    assert data["bench"] == "fleet_size"
    assert set(data["machine"]) >= MACHINE_KEYS
    params = data["params"]
    assert [r["backend"] for r in data["results"]] == ["sqlite", "postgres"]
    for res in data["results"]:
        assert [r["fleet"] for r in res["wake"]] == params["sizes"]
        for r in res["wake"]:
            for key in ("register_us", "deadlines_us", "idle_tick_us"):
                assert 0 < r[key]["p50"] <= r[key]["p99"]
        assert [r["fleet"] for r in res["recovery"]] == params["recovery_sizes"]
        for r in res["recovery"]:
            assert r["committed_after_threshold_ms"]["n"] == params["recoveries"]
        workers = {f"{kind}_{n}" for kind in ("workers", "floor", "bare") for n in (1, 2)}
        for group, names in (("monitor", {"monitor", "no_monitor"}), ("workers", workers)):
            assert set(res[group]) == names
            for runs in res[group].values():
                assert len(runs) == params["rounds"]
                for run in runs:
                    assert run["beats_per_s"] > 0 and run["errors"] == 0
                    assert run["client_cores"] > 0
        assert set(res["paced"]) == {"workers_1", "workers_2"}
        for run in res["paced"].values():
            assert run["n"] > 0 and run["errors"] == 0
        summary = data["summary"][res["backend"]]
        assert summary["register_p99_ratio"] > 0 and summary["workers2_over_1"] > 0
        # the floor's own 2/1 ratios beside corral's (the minimal app, same rounds)
        assert summary["floor2_over_1"] > 0 and summary["bare2_over_1"] > 0
        assert set(summary["met"]) == {
            "register_p99_within_2x",
            "wake_read_within_2x",
            "recovery_within_threshold_plus_5ms",
            "monitor_at_least_0.9x",
            "paced_p99_50ms_lag_100ms",
            "workers2_at_least_1.5x",
        }


def test_stuck_bench_quick_run_writes_its_json(tmp_path: Path) -> None:
    """stuck_bench.py --quick exits 0 and writes, for SQLite and PostgreSQL, each round's
    stuck detection after its deadline, the lease recovery beside it, and the verdict."""
    data = run_quick("stuck_bench.py", tmp_path / "stuck.json")
    assert data["bench"] == "stuck_bench"
    assert set(data["machine"]) >= MACHINE_KEYS
    rounds = data["params"]["rounds"]
    assert list(data["results"]) == ["sqlite", "postgres"]
    for res in data["results"].values():
        assert res["in_progress"] == data["params"]["in_progress"]
        assert res["committed_after_deadline_ms"]["n"] == rounds
        assert res["woke_after_deadline_ms"]["n"] == rounds
        assert res["lease_recovery"]["committed_after_threshold_ms"]["n"] == rounds
    assert set(data["met"]) == {"within_deadline_plus_5ms"}


def test_pg_instructions_bench_counts_the_backend(tmp_path: Path) -> None:
    """pg_instructions.py starts its own PostgreSQL under callgrind, counts the backend
    of a worker's short loop twice (10 and 40 jobs) and writes the count per job."""
    out = tmp_path / "pgi.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "pg_instructions.py"),
            "--jobs",
            "10",
            "--step",
            "30",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"pg_instructions.py failed:\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert data["bench"] == "pg_instructions" and data["jobs"] == [10, 40]
    [row] = data["results"]
    assert row["loop"] == "cc" and row["counts"][1] > row["counts"][0] > 0
    assert row["per_job"] == (row["counts"][1] - row["counts"][0]) / 30
