"""Real OS processes on one SQLite file: the capacity race and concurrent claims."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from pathlib import Path

import pytest

import corral
from tests.support import procs

CTX = mp.get_context("spawn")


@pytest.mark.slow
def test_capacity_race_between_two_processes(tmp_path: Path) -> None:
    """With three live nodes, two processes register at the same instant: exactly one
    succeeds, in each of 50 trials, and the cluster never holds more than four."""
    barrier = CTX.Barrier(2)
    out = CTX.Queue()
    urls = [CTX.Queue(), CTX.Queue()]
    racers = [
        CTX.Process(target=procs.race_server, args=(urls[i], f"Racer-{i}", barrier, out))
        for i in range(2)
    ]
    for p in racers:
        p.start()
    try:
        for trial in range(50):
            url = f"sqlite:///{tmp_path / f'race-{trial}.db'}"
            with corral.connect(url) as c:
                for i in range(3):
                    c.register_node(f"Node-{i}", "developer")
            for q in urls:
                q.put(url)
            results = dict(out.get(timeout=60) for _ in range(2))
            assert sorted(results.values()) == ["capacity", "ok"], (trial, results)
            with corral.connect(url) as c:
                live = [n for n in c.list_nodes() if n.status != "terminated"]
                assert len(live) == 4
    finally:
        for q in urls:
            q.put(None)
        for p in racers:
            p.join(timeout=30)
    assert [p.exitcode for p in racers] == [0, 0]


@pytest.mark.slow
def test_eight_processes_claim_each_task_exactly_once(tmp_path: Path) -> None:
    """8 processes claiming from 2,000 tasks: every task claimed and completed once."""
    url = f"sqlite:///{tmp_path / 'claims.db'}"
    with corral.connect(url) as c:
        c.configure(max_agents=16)
        c.add_tasks(
            [
                {"title": f"Implement item {i}", "priority": ("high", "medium", "low")[i % 3]}
                for i in range(2000)
            ]
        )
    barrier = CTX.Barrier(8)
    out = CTX.Queue()
    workers = [
        CTX.Process(target=procs.claim_until_empty, args=(url, f"W{i}", barrier, out))
        for i in range(8)
    ]
    for p in workers:
        p.start()
    reports = [out.get(timeout=240) for _ in workers]
    for p in workers:
        p.join(timeout=30)
    assert all(errors == [] for _, _, errors in reports), reports
    done = Counter(t for _, ids, _ in reports for t in ids)
    assert len(done) == 2000 and set(done.values()) == {1}
    assert sum(1 for _, ids, _ in reports if ids) >= 2, "the claims were not concurrent"
    with corral.connect(url) as c:
        tasks = c.list_tasks(status="done", limit=5000)
        assert len(tasks) == 2000
        assert {t.attempts for t in tasks} == {1}
        by_holder = {t.id: t.result["by"] for t in tasks}
        for node_id, ids, _ in reports:
            assert all(by_holder[t] == node_id for t in ids)
        kinds = Counter(e.kind for e in c.events(limit=10_000))
        assert kinds["task_claimed"] == kinds["task_completed"] == 2000
