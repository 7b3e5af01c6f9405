"""corral simulate: each policy's numbers on hand-built traces (derived here by
reasoning), the CLI's refusals, determinism, and that the simulator runs the very
functions the service runs."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import corral.fleet.pools
import corral.store.sqlviews
from corral import simulate
from corral.cli import cli
from corral.cli._common import run_main
from corral.simulate import (
    Params,
    TraceTask,
    acceptance,
    idle_lower_bound,
    percentile,
    reach_checks,
    simulate_all,
)

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "bench" / "traces"

# start-up 10 s, stop 2 s, idle_timeout 30 s (the cluster's default), drain 100 s
P = Params(max=2, max_agents=2, startup=10.0, stop=2.0, drain=100.0, price=0.6)


def one_task(duration: float = 60.0, priority: str = "medium") -> list[TraceTask]:
    return [TraceTask(0, 0.0, "developer", priority, duration)]


def run(policy: str, tasks: list[TraceTask], params: Params = P) -> simulate.Result:
    results, _ = simulate_all(tasks, [policy], params)
    return results[policy]


# ---- the policies' formulas ---------------------------------------------------------


def test_fixed_pool_pays_max_workers_for_the_whole_horizon() -> None:
    """Two warm workers; the task is claimed at once and done at 60 s; the run lasts
    to 60 + drain = 160 s: 2 x 160 paid, 60 busy, the rest idle; the price is per
    worker-minute."""
    r = run("fixed", one_task())
    assert r.horizon == 160.0
    assert (r.worker_seconds, r.busy_worker_seconds, r.idle_worker_seconds) == (320, 60, 260)
    assert r.wait["all"] == {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    assert r.cost == pytest.approx(320 / 60 * 0.6)
    assert (r.scale_actions, r.reversals, r.cap_breaches) == (1, 0, 0)


def test_corral_spawns_on_the_assessment_and_the_worker_retires_at_idle_timeout() -> None:
    """At 0 the board has 1 pending and nobody working: the assessment says
    spawn_developer and the pool spawns one member; ready at 10 it claims (wait 10),
    is done at 70, idle 30 s, retires at 100 and is gone at 102: 102 paid, 60 busy,
    42 idle (10 start-up + 30 idle + 2 stop); +1 then -1: one reversal."""
    r = run("corral", one_task())
    assert r.wait["all"]["p50"] == 10.0
    assert r.worker_seconds == pytest.approx(102.0)
    assert r.idle_worker_seconds == pytest.approx(42.0)
    assert r.startup_worker_seconds == pytest.approx(10.0)
    assert (r.scale_actions, r.reversals, r.max_reversals_per_cooldown) == (2, 1, 1)


def test_corral_retires_an_idle_member_beyond_the_reserve_at_once() -> None:
    """The second tune: two tasks at 0 (60 s and 80 s), two members spawned at 0,
    ready at 10. The first is done at 70 and idles: the pool's only idle member is its
    reserve, kept. The second is done at 90: two idle, the one idle longer (since 70)
    is spare and retires at once (gone at 92: 10 start-up + 20 idle + 2 stop); the
    other retires at 90 + 30 = 120 (gone at 122: 10 + 30 + 2). 74 idle worker-s; with
    every idle member kept till the timeout (the rule before, a reserve of 2 here) 84;
    with no reserve 24 (both go the moment they are idle)."""
    tasks = [
        TraceTask(0, 0.0, "developer", "medium", 60.0),
        TraceTask(1, 0.0, "developer", "medium", 80.0),
    ]
    r = run("corral", tasks)
    assert r.idle_worker_seconds == pytest.approx(74.0)
    assert r.wait["all"]["p95"] == pytest.approx(10.0)
    assert (r.scale_actions, r.reversals, r.max_reversals_per_cooldown) == (3, 1, 1)
    assert run("corral", tasks, replace(P, reserve=2)).idle_worker_seconds == pytest.approx(84.0)
    assert run("corral", tasks, replace(P, reserve=0)).idle_worker_seconds == pytest.approx(24.0)


def test_corral_serves_a_task_waiting_behind_busy_members() -> None:
    """The tune (maintain grows): one member works on a 100 s task, a second task
    arrives at 20 s. Pending 1 with a node working is the assessment's balanced /
    maintain; the pool spawns for the task nobody idle will take (at 20 s: the cooldown
    of 10 s since the first spawn at 0 is over), ready at 30: a wait of 10 s, not 80."""
    tasks = [
        TraceTask(0, 0.0, "developer", "medium", 100.0),
        TraceTask(1, 20.0, "developer", "medium", 10.0),
    ]
    r = run("corral", tasks)
    assert r.wait["all"]["p95"] == pytest.approx(10.0)


def test_corral_grows_again_inside_the_cooldown_but_never_reverses_in_it() -> None:
    """The tune (growth after growth is no flap): a task at 0 and another at 2 s,
    100 s each. At 0 the pool spawns one member; at 2 s the second task is more than
    the starting member will take, and growing again is not held back by the 10 s
    cooldown: spawned at 2, ready at 12, a wait of 10 (18 if it waited for the
    cooldown). Both members retire 30 s after their task: no reversal within 10 s."""
    tasks = [
        TraceTask(0, 0.0, "developer", "medium", 100.0),
        TraceTask(1, 2.0, "developer", "medium", 100.0),
    ]
    r = run("corral", tasks)
    assert r.wait["all"]["p95"] == pytest.approx(10.0)
    assert r.max_reversals_per_cooldown == 1


def test_keda_scales_down_only_after_the_cooldown() -> None:
    """Polls at 0, 30, 60 …: at 0 the queue is 1, so 1 replica (ready at 10, wait 10);
    the last poll that sees the task (running) is 60; the highest desired count of the
    last 300 s stays 1 until a poll more than 300 s after 60: 390; gone at 392 (the run
    drains 1,000 s past the task, past KEDA's cooldown)."""
    r = run("keda", one_task(), replace(P, keda_target=1.0, drain=1000.0))
    assert r.wait["all"]["p50"] == 10.0
    assert r.worker_seconds == pytest.approx(392.0)
    assert r.idle_worker_seconds == pytest.approx(332.0)


def test_keda_desired_is_the_queue_over_the_target() -> None:
    """Five tasks at 0 with a target of 2 per replica: ceil(5 / 2) = 3 replicas
    (max 8); with one task per worker, two wait for a free worker."""
    tasks = [TraceTask(i, 0.0, "developer", "medium", 60.0) for i in range(5)]
    params = replace(P, max=8, max_agents=8, keda_target=2.0)
    _, runs = simulate_all(tasks, ["keda"], params)
    assert runs["keda"].actions[0].delta == 3


def test_dbos_follows_the_queue_depth_with_no_cooldown() -> None:
    """ceil(depth / 1): 1 at 0 (spawned, ready at 10), 0 when the task is done at 70:
    the worker stops at once, gone at 72: 12 idle (10 start-up + 2 stop)."""
    r = run("dbos", one_task())
    assert r.wait["all"]["p50"] == 10.0
    assert r.worker_seconds == pytest.approx(72.0)
    assert r.idle_worker_seconds == pytest.approx(12.0)


def test_dbos_concurrency_divides_the_depth() -> None:
    """Five tasks at 0 with a worker concurrency of 2: ceil(5 / 2) = 3 workers."""
    tasks = [TraceTask(i, 0.0, "developer", "medium", 60.0) for i in range(5)]
    params = replace(P, max=8, max_agents=8, dbos_concurrency=2)
    _, runs = simulate_all(tasks, ["dbos"], params)
    assert runs["dbos"].actions[0].delta == 3


def test_dask_removes_a_worker_after_three_idle_checks() -> None:
    """Target min(tasks, ceil(work / 5 s)) = min(1, 12) = 1 at 0; done at 70; checks
    at 70, 71, 72 suggest removing it: removed at 72, gone at 74: 14 idle."""
    r = run("dask", one_task())
    assert r.wait["all"]["p50"] == 10.0
    assert r.worker_seconds == pytest.approx(74.0)
    assert r.idle_worker_seconds == pytest.approx(14.0)


def test_dask_target_is_the_work_over_the_target_duration() -> None:
    """Four 5 s tasks at 0 (20 s of work): min(4, ceil(20 / 5)) = 4; one 12 s task
    with three 1 s tasks: min(4, ceil(15 / 5)) = 3."""
    params = replace(P, max=8, max_agents=8)
    even = [TraceTask(i, 0.0, "developer", "medium", 5.0) for i in range(4)]
    _, runs = simulate_all(even, ["dask"], params)
    assert runs["dask"].actions[0].delta == 4
    mixed = [TraceTask(0, 0.0, "developer", "medium", 12.0)] + [
        TraceTask(i, 0.0, "developer", "medium", 1.0) for i in range(1, 4)
    ]
    _, runs = simulate_all(mixed, ["dask"], params)
    assert runs["dask"].actions[0].delta == 3


def test_manager_as_written() -> None:
    """The manager assesses at 0, 25, 50, …: at 0, 1 pending and nobody working:
    spawn_developer (one node); ready at 10 (wait 10), done at 70; the assessment at
    75 says idle; the worker, idle since 70, checks at 100: nothing pending and the
    status idle: it terminates, gone at 102."""
    r = run("manager", one_task())
    assert r.wait["all"]["p50"] == 10.0
    assert r.worker_seconds == pytest.approx(102.0)


def _four_tasks() -> list[TraceTask]:
    return [
        TraceTask(0, 100.0, "developer", "medium", 20.0),
        TraceTask(1, 125.0, "developer", "medium", 10.0),
        TraceTask(2, 150.0, "developer", "medium", 10.0),
        TraceTask(3, 155.0, "developer", "medium", 10.0),
    ]


def test_oracle_reuses_waits_and_spawns_ahead() -> None:
    """Start-up 10 + stop 2 = 12 s is what a worker kept idle must beat. Task 0 (100 s,
    20 s long): a worker spawned at 90, ready at 100, done at 120. Task 1 at 125: that
    worker was freed 5 s ago (< 12): reused, 5 s idle, done at 135. Task 2 at 150: the
    worker was freed 15 s ago: it stopped at 135 (gone at 137); a new one spawned at
    140 serves it at once, done at 160. Task 3 at 155 with a wait budget of 6 s: the
    worker free at 160 is within it: a wait of 5, done at 170, stops. Idle: first worker
    10 + 5 + 2, second 10 + 2 = 29, of which 20 start-up; every wait but one 0."""
    r = run("oracle", _four_tasks(), replace(P, oracle_wait=6.0))
    assert r.idle_worker_seconds == pytest.approx(29.0)
    assert r.startup_worker_seconds == pytest.approx(20.0)
    assert r.wait["all"] == {"p50": 0.0, "p95": 5.0, "p99": 5.0}
    assert (r.scale_actions, r.cap_breaches, r.unfinished) == (4, 0, 0)
    _, runs = simulate_all(_four_tasks(), ["oracle"], replace(P, oracle_wait=6.0))
    assert [(a.at, a.delta) for a in runs["oracle"].actions] == [
        (90.0, 1),
        (135.0, -1),
        (140.0, 1),
        (170.0, -1),
    ]


def test_oracle_spawns_when_the_wait_would_pass_its_budget_and_waits_at_the_cap() -> None:
    """The same trace with a budget of 4 s: task 3 would wait 5, so a third worker is
    spawned at 145 for it (the cap of 2 allows it: one other worker alive), done at
    165: 17 + 12 + 12 = 41 idle, no wait. With a cap of 1 it cannot spawn: it waits 5
    for the busy worker, as with the larger budget."""
    r = run("oracle", _four_tasks(), replace(P, oracle_wait=4.0))
    assert r.idle_worker_seconds == pytest.approx(41.0)
    assert r.wait["all"]["p99"] == 0.0
    capped = run("oracle", _four_tasks(), replace(P, oracle_wait=4.0, max=1, max_agents=1))
    assert capped.idle_worker_seconds == pytest.approx(29.0)
    assert capped.wait["all"]["p99"] == 5.0
    assert capped.cap_breaches == 0


def test_oracle_wait_budget_is_dbos_p95_on_the_same_trace() -> None:
    """Without --oracle-wait the oracle may make a task wait as long as DBOS's p95 wait
    on the trace (one task: DBOS's wait is its start-up, 10 s)."""
    tasks = _four_tasks()
    dbos = run("dbos", tasks)
    both, _ = simulate_all(tasks, ["dbos", "oracle"], P)
    alone = run("oracle", tasks)  # runs DBOS itself for its p95
    given = run("oracle", tasks, replace(P, oracle_wait=dbos.wait["all"]["p95"]))
    assert both["oracle"].idle_worker_seconds == given.idle_worker_seconds
    assert alone.idle_worker_seconds == given.idle_worker_seconds


def test_idle_lower_bound_by_hand() -> None:
    """Tasks at 0 and 15, 10 s each; c = 10 + 2. No wait: the only link is 0 -> 1 with
    a gap of 5: 12 + 5 = 17 (one worker). With 5 s of wait the first may end at 15 and
    the second start then: 12, which a schedule reaches (the first waits 5). One late
    task takes 2 c off: 0."""
    tasks = [
        TraceTask(0, 0.0, "developer", "medium", 10.0),
        TraceTask(1, 15.0, "developer", "medium", 10.0),
    ]
    assert idle_lower_bound(tasks, 0.0, late=0, startup=10.0, stop=2.0) == pytest.approx(17.0)
    assert idle_lower_bound(tasks, 5.0, late=0, startup=10.0, stop=2.0) == pytest.approx(12.0)
    assert idle_lower_bound(tasks, 5.0, late=1, startup=10.0, stop=2.0) == 0.0
    far = [tasks[0], TraceTask(1, 40.0, "developer", "medium", 10.0)]  # gap 30 > 12
    assert idle_lower_bound(far, 0.0, late=0, startup=10.0, stop=2.0) == pytest.approx(24.0)


def _least_matching(tasks: list[TraceTask], wait: float, c: float) -> float:
    """The relaxed problem by brute force: every partial matching of ends to arrivals."""
    ends = [t.arrival + t.duration + wait for t in tasks]
    arrivals = [t.arrival for t in tasks]
    best = 0.0

    def walk(i: int, used: frozenset[int], total: float) -> None:
        nonlocal best
        if i == len(ends):
            best = min(best, total)
            return
        walk(i + 1, used, total)
        for j, a in enumerate(arrivals):
            x = a - ends[i]
            if j not in used and -2 * wait <= x:
                walk(i + 1, used | {j}, total + max(0.0, x) - c)

    walk(0, frozenset(), 0.0)
    return len(tasks) * c + best


def test_idle_lower_bound_is_the_least_relaxed_matching() -> None:
    """The dynamic programme over the two sorted lists finds the least matching that
    brute force finds over all matchings (small random traces, seeded)."""
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(1, 6)
        tasks = [
            TraceTask(i, round(rng.uniform(0, 80), 1), "developer", "medium", rng.uniform(1, 30))
            for i in range(n)
        ]
        wait = rng.choice([0.0, 3.0, 8.0])
        got = idle_lower_bound(tasks, wait, late=0, startup=10.0, stop=2.0)
        assert got == pytest.approx(_least_matching(tasks, wait, 12.0)), (tasks, wait)


def test_idle_lower_bound_is_below_every_policys_run() -> None:
    """Every policy's run spends at least the bound at its own longest wait (no task
    late), and at least the bound at its own p95 wait with the tasks above it late
    (random traces, seeded)."""
    rng = random.Random(5)
    for _ in range(20):
        n = rng.randint(5, 60)
        arrivals = sorted(rng.uniform(0, 600) for _ in range(n))
        tasks = [
            TraceTask(i, a, "developer", "high", rng.uniform(5, 90)) for i, a in enumerate(arrivals)
        ]
        results, runs = simulate_all(tasks, simulate.POLICIES, P)
        for name, r in results.items():
            waits = sorted(w for ws in runs[name].waits.values() for w in ws)
            late = n - math.ceil(0.95 * n)
            at_most = idle_lower_bound(tasks, waits[-1], late=0, startup=10.0, stop=2.0)
            at_p95 = idle_lower_bound(tasks, waits[n - late - 1], late=late, startup=10.0, stop=2.0)
            assert r.idle_worker_seconds >= max(at_most, at_p95) - 1e-6, (name, at_most, at_p95)


def test_reach_checks_are_notes_with_the_bound() -> None:
    """With DBOS's row: the oracle's line and the bound's, marked as theirs."""
    results, _ = simulate_all(_four_tasks(), ["dbos", "oracle"], P)
    checks = reach_checks(_four_tasks(), results, P)
    assert [c.who for c in checks] == ["oracle", "bound"]
    assert "idle worker-s" in checks[1].detail
    assert reach_checks(_four_tasks(), {}, P) == []


def test_manager_decision_is_the_documents() -> None:
    d = simulate.manager_decision
    assert d(0, 0, 1, 0, 1, 1, 4) == ("idle", "terminate_idle")
    assert d(3, 1, 2, 2, 2, 0, 4) == ("overloaded", "spawn_developer")
    assert d(1, 0, 1, 0, 1, 1, 4) == ("overloaded", "spawn_developer")
    assert d(1, 1, 3, 1, 3, 2, 4) == ("underutilized", "terminate_idle")
    assert d(2, 2, 2, 2, 2, 0, 4) == ("balanced", "maintain")


def test_any_worker_claims_any_task_and_corral_grows_the_recommended_roles_pool() -> None:
    """A role is a bonus in corral's claim, not a filter: the manager protocol spawns
    only developers and they do the architect's tasks too. corral's assessment
    recommends spawn_architect when most pending tasks are the architect's only, so the
    architect pool grows, not the developer one."""
    tasks = [TraceTask(i, 0.0, "architect", "medium", 30.0) for i in range(3)]
    _, runs = simulate_all(tasks, ["manager", "corral"], replace(P, max=3))
    assert runs["manager"].unfinished == 0
    assert {w.role for w in runs["manager"].workers} == {"developer"}
    assert runs["corral"].unfinished == 0
    assert {w.role for w in runs["corral"].workers} == {"architect"}


def test_the_claim_order_is_corrals_score_and_waits_are_by_priority() -> None:
    """One warm worker busy 0-10 s; a low task at 1 s and a high one at 2 s: at 10 the
    high one goes first (30 points beat 10, an age of 1 s does not), wait 8; the low
    one at 20, wait 19."""
    tasks = [
        TraceTask(0, 0.0, "developer", "low", 10.0),
        TraceTask(1, 1.0, "developer", "low", 10.0),
        TraceTask(2, 2.0, "developer", "high", 10.0),
    ]
    r = run("fixed", tasks, replace(P, max=1))
    assert r.wait["high"]["p50"] == 8.0
    assert r.wait["low"] == {"p50": 0.0, "p95": 19.0, "p99": 19.0}


def test_a_scale_down_never_kills_a_busy_worker() -> None:
    """DBOS with a busy worker and a queue that empties: every task runs its whole
    duration (busy seconds = the trace's work) and none is left unfinished."""
    rng = random.Random(7)
    tasks = sorted(
        (
            TraceTask(i, rng.uniform(0, 600), "developer", "high", rng.uniform(5, 90))
            for i in range(60)
        ),
        key=lambda t: t.arrival,
    )
    tasks = [TraceTask(i, t.arrival, t.role, t.priority, t.duration) for i, t in enumerate(tasks)]
    results, _ = simulate_all(tasks, simulate.POLICIES, P)
    work = sum(t.duration for t in tasks)
    for r in results.values():
        assert r.unfinished == 0
        assert r.busy_worker_seconds == pytest.approx(work)
        assert r.cap_breaches == 0


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (5, 10, 10)
    assert percentile([], 95) == 0.0


# ---- the same functions as the service ----------------------------------------------


def test_the_simulator_runs_the_services_own_functions() -> None:
    """The pool decision, the member counts and the retirement rule are the objects
    the pools' step calls; the assessment is the one the store records."""
    # The names each module imported for its own use (not re-exported): the test
    # checks they are one object, so it reads them where mypy says they are private.
    assert simulate.pool_decide is corral.fleet.pools.decide  # type: ignore[attr-defined]
    assert simulate.count_members is corral.fleet.pools.count_members  # type: ignore[attr-defined]
    assert simulate.retiring is corral.fleet.pools.retiring  # type: ignore[attr-defined]
    assert simulate.assess is corral.store.sqlviews.assessment.decide  # type: ignore[attr-defined]
    assert simulate.Params().look == corral.fleet.pools.POOL_INTERVAL


def test_the_simulator_calls_the_pool_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = simulate.pool_decide  # type: ignore[attr-defined]  # imported, not re-exported

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulate, "pool_decide", spy)
    run("corral", one_task())
    assert calls and all(a[0] == "developer" for a in calls)


# ---- the shipped traces -------------------------------------------------------------


def _make_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("traces_make", TRACES / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_traces_are_what_the_seeded_script_makes() -> None:
    make = _make_module()
    for n, (name, build) in enumerate(make.TRACES.items()):
        rows = build(random.Random(make.SEED + n))
        path = TRACES / f"{name}.jsonl"
        assert path.read_text() == "".join(json.dumps(r) + "\n" for r in rows)
        assert path.stat().st_size < 1_000_000


@pytest.mark.parametrize("name", ["steady", "bursty", "diurnal"])
def test_corral_against_keda_on_the_shipped_traces(name: str) -> None:
    """The acceptance against the KEDA-style policy: at least 50% fewer idle
    worker-seconds at a p95 wait no worse, no cap breach, at most one reversal per
    pool per cooldown (against DBOS's formula it is missed: docs/economics.md)."""
    tasks = simulate.load_trace(TRACES / f"{name}.jsonl")
    results, _ = simulate_all(tasks, ["corral", "keda"])
    checks = {c.what: c for c in acceptance(results)}
    assert checks["idle vs keda"].ok, checks["idle vs keda"].detail
    assert checks["p95 wait vs keda"].ok, checks["p95 wait vs keda"].detail
    assert results["corral"].cap_breaches == 0
    assert results["corral"].max_reversals_per_cooldown <= 1
    assert results["corral"].unfinished == 0


def test_docs_economics_shows_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/economics.md's results are the command's output at the current code: each
    trace's table and acceptance lines, as printed (a change of a policy that moves a
    number fails here until the page is rerun)."""
    doc = (ROOT / "docs" / "economics.md").read_text()
    after = doc.split("## Results", 1)[1].split("### Before the tune", 1)[0]
    paths = [str(TRACES / f"{n}.jsonl") for n in ("steady", "bursty", "diurnal")]
    code, out, _ = cli_run(capsys, *paths, "--markdown")
    assert code == 0
    blocks = out.split("### ")[1:]
    assert len(blocks) == 3
    for block in blocks:
        lines = [x for x in block.splitlines() if x.startswith(("|", "- "))]
        assert "\n".join(lines) in after, block.splitlines()[0]


def test_a_run_is_deterministic() -> None:
    tasks = simulate.load_trace(TRACES / "bursty.jsonl")
    first, _ = simulate_all(tasks)
    again, _ = simulate_all(tasks)
    assert {k: r.to_dict() for k, r in first.items()} == {k: r.to_dict() for k, r in again.items()}


# ---- the CLI ------------------------------------------------------------------------


def cli_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_main(cli, ["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_bad_input_is_exit_2_with_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = str(TRACES / "steady.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"arrival": 0, "role": "developer", "priority": "high", "duration": 5}\n{oops\n'
    )
    neg = tmp_path / "neg.jsonl"
    neg.write_text('{"arrival": 0, "role": "developer", "priority": "high", "duration": -5}\n')
    cases = [
        ([str(tmp_path / "missing.jsonl")], "missing.jsonl: no such file"),
        ([str(bad)], "bad.jsonl: line 2: not JSON"),
        ([str(neg)], "line 1: duration must be a number of seconds above 0"),
        ([trace, "--policy", "corral,nope"], "unknown policy 'nope'"),
        ([trace, "--price", "cheap"], "'--price': 'cheap' is not a number"),
        ([trace, "--startup", "-1"], "'--startup': must be a number from 0"),
        ([trace, "--max", "0"], "'--max'"),
        ([trace, "--reserve", "-1"], "'--reserve'"),
        ([trace, "--frobnicate"], "No such option"),
        ([], "Missing argument"),
    ]
    for args, needle in cases:
        code, out, err = cli_run(capsys, *args)
        assert code == 2, args
        assert out == ""
        assert err.count("\n") == 1 and err.startswith("error: "), err
        assert needle in err, (needle, err)


def test_cli_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = str(TRACES / "steady.jsonl")
    code, out, _ = cli_run(
        capsys, trace, "--policy", "corral", "--policy", "keda", "--json", "--plot", str(tmp_path)
    )
    assert code == 0
    report = json.loads(out)
    steady = report["traces"]["steady"]
    assert set(steady["results"]) == {"corral", "keda"}
    assert steady["results"]["corral"]["cap_breaches"] == 0
    assert (tmp_path / "steady.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["params"]["keda_poll"] == 30.0


def test_cli_reserve_sets_the_pools_reserve(capsys: pytest.CaptureFixture[str]) -> None:
    """``--reserve`` is the idle members corral's pool keeps (the service's 1 unless
    given): keeping every idle member till the timeout (8, the pool's ceiling) is the
    rule before the second tune, and spends more idle time on the steady trace."""
    trace = str(TRACES / "steady.jsonl")
    idle = {}
    for given in ([], ["--reserve", "8"]):
        code, out, _ = cli_run(capsys, trace, "--policy", "corral", "--json", *given)
        assert code == 0
        report = json.loads(out)
        reserve = report["params"]["reserve"]
        idle[reserve] = report["traces"]["steady"]["results"]["corral"]["idle_worker_seconds"]
    assert set(idle) == {1, 8}
    assert idle[1] < idle[8]


def test_cli_without_matplotlib_says_so_and_runs_without_plot(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    trace = str(TRACES / "steady.jsonl")
    code, out, err = cli_run(capsys, trace, "--policy", "corral", "--plot", str(tmp_path))
    assert code == 2 and "needs matplotlib" in err and "corral[sim]" in err
    code, out, _ = cli_run(capsys, trace, "--policy", "corral")
    assert code == 0 and "corral" in out


def test_cli_check_exits_1_when_corral_misses(capsys: pytest.CaptureFixture[str]) -> None:
    """Against DBOS's formula corral misses on the steady trace (docs/economics.md)."""
    trace = str(TRACES / "steady.jsonl")
    code, out, _ = cli_run(capsys, trace, "--policy", "corral,dbos", "--check")
    assert code == 1 and "MISSED: corral idle vs dbos" in out
    code, _, _ = cli_run(capsys, trace, "--policy", "corral,keda", "--check")
    assert code == 0
    # the oracle's and the bound's lines are notes: they never fail --check
    code, out, _ = cli_run(capsys, trace, "--policy", "dbos,oracle", "--check", "--markdown")
    assert code == 0
    assert "- note: oracle idle vs dbos:" in out and "- note: bound at a p95 wait" in out
