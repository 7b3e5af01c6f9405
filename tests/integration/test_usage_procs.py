"""Usage and model caps across real processes (docs/guardrails.md), on SQLite and
PostgreSQL: 16 processes reporting usage at once sum exactly, and ``model_caps``
holds under 550 registration races per backend with no breach (as ``max_agents``
does: the count and the insert share the registry lock)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

import corral
from tests.support import usage_procs
from tests.support.backends import postgres as pg

CTX = mp.get_context("spawn")
RACES = 550


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'usage.db'}"
    return pg.fresh_database(request)


@pytest.mark.slow
def test_model_caps_hold_under_550_registration_races(url: str) -> None:
    """One live node of ``opus`` (capped at 2): in each of 550 trials two processes
    register an ``opus`` node at the same instant; exactly one is admitted, the
    other refused with CapacityError, and the cluster never holds 3 live ``opus``
    nodes (0 breaches). The admitted node is terminated before the next trial."""
    with corral.connect(url) as c:
        c.configure(model_caps={"opus": 2}, max_agents=10_000)
        c.register_node("base", "developer", model="opus", heartbeat_interval=3600)
    barrier = CTX.Barrier(2)
    out = CTX.Queue()
    trials = [CTX.Queue(), CTX.Queue()]
    racers = [
        CTX.Process(target=usage_procs.cap_racer, args=(url, f"r{i}", barrier, trials[i], out))
        for i in range(2)
    ]
    for p in racers:
        p.start()
    breaches, outcomes = 0, []
    try:
        with corral.connect(url) as c:
            for trial in range(RACES):
                for q in trials:
                    q.put(trial)
                results = sorted(out.get(timeout=60)[1:] for _ in range(2))
                verdicts = sorted(v for _, v in results)
                outcomes.append(verdicts)
                live = [n for n in c.list_nodes() if n.status != "terminated" and n.model == "opus"]
                breaches += len(live) > 2
                for name, verdict in results:
                    if verdict == "ok":
                        c.terminate_node(f"{name}-{trial}")
    finally:
        for q in trials:
            q.put(None)
        for p in racers:
            p.join(timeout=30)
    assert len(outcomes) == RACES and breaches == 0
    assert all(v == ["capacity", "ok"] for v in outcomes), [
        v for v in outcomes if v != ["capacity", "ok"]
    ][:5]
    assert [p.exitcode for p in racers] == [0, 0]


@pytest.mark.slow
def test_usage_from_16_processes_sums_exactly(url: str) -> None:
    """16 processes each make 3 reports per round for 20 rounds (progress,
    heartbeat, completion or failure) at once: every scope's sums are exactly 960
    reports' worth (cost in micro-dollars: no float drift)."""
    procs, rounds = 16, 20
    with corral.connect(url) as c:
        c.configure(max_agents=64, max_attempts=1)
        c.add_tasks([{"title": f"Implement item {i}"} for i in range(procs * rounds)])
    barrier = CTX.Barrier(procs)
    out = CTX.Queue()
    workers = [
        CTX.Process(target=usage_procs.usage_reporter, args=(url, f"dev-{i}", rounds, barrier, out))
        for i in range(procs)
    ]
    for p in workers:
        p.start()
    reports = [out.get(timeout=300) for _ in workers]
    for p in workers:
        p.join(timeout=30)
    assert all(errors == [] for _, errors in reports), reports
    n = procs * rounds * 3
    u = usage_procs.USAGE
    with corral.connect(url) as c:
        for scope in ("cluster", "role:developer", "model:opus", "pool:dev"):
            total = c.usage(scope, "1d")
            assert (total.reports, total.input_tokens, total.output_tokens) == (
                n,
                n * u["input_tokens"],
                n * u["output_tokens"],
            ), scope
            assert round(total.cost_usd * 1_000_000) == n * 7, scope
        one = c.usage("node:dev-3", "1d")
        assert one.reports == rounds * 3
