"""What corral's pool could reach against DBOS's formula on the three shipped traces:
idle worker-seconds against the p95 wait as its parameters sweep their ranges, beside
DBOS's own point (docs/economics.md, "What an online policy reaches"). Deterministic;
run from anywhere: ``python bench/traces/frontier.py`` (Markdown on stdout).

Two sweeps:

- corral's pool, as the service runs it (``corral.scaling``), over its reserve (the
  idle members it keeps past its pending tasks: ``--reserve``) and the idle timeout
  those are kept for (``--idle-timeout``), at fleet.toml's cooldown of 10 s;
- ``dbos+wait``: not corral, and not a policy in the table: DBOS's formula with no
  cooldown, but a task counts toward a spawn only once it has waited ``D`` seconds
  (a worker freed meanwhile takes it: no start-up, no stop). Waiting for a busy worker
  is what saves the clairvoyant plan its idle time; this is the same lever used
  without knowing durations, on the policy that already spends the least.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from corral import simulate as sim

HERE = Path(__file__).resolve().parent
TRACES = ("steady", "bursty", "diurnal")
RESERVES = (0, 1, 2)
TIMEOUTS = (0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0)
WAITS = (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 15.0, 30.0)


def _dbos_wait(wait: float) -> Callable[[sim.Sim], None]:
    """DBOS's formula at every look, a pending task counted for growth once it has
    waited ``wait`` s; the pool shrinks to the tasks running or pending (idle
    workers first, then starting ones), as DBOS's does."""

    def setup(s: sim.Sim) -> None:
        p = s.p

        def look() -> None:
            for role in s.roles:
                pending = s.pending_tasks(role)
                aged = sum(1 for t in pending if s.now - t.arrival >= wait - 1e-9)
                running = len(s.running_of(role))
                have = len(s.live(role))
                grow = min(p.max, running + aged)
                keep = min(p.max, running + len(pending))
                if have < grow:
                    s.spawn(role, grow - have, "dbos+wait")
                elif have > keep:
                    s.retire(role, have - keep, "dbos+wait")
                for t in pending:
                    if s.now - t.arrival < wait - 1e-9:
                        s.look_soon(t.arrival + wait)

        s.on_change = lambda: s.look_soon(s.now)
        s.on_look = look
        s.look_soon(0.0)

    return setup


def _run(tasks: list[sim.TraceTask], setup: Callable[[sim.Sim], None], p: sim.Params) -> sim.Run:
    run = sim.Run("dbos+wait", p.cooldown)
    s = sim.Sim(tasks, p, run)
    setup(s)
    s.loop()
    return run


def _cell(r: sim.Result, dbos: sim.Result) -> str:
    saved = r.idle_worker_seconds / dbos.idle_worker_seconds - 1
    p95, theirs = r.wait["all"]["p95"], dbos.wait["all"]["p95"]
    worse = " (worse)" if p95 > theirs else ""
    return f"{r.idle_worker_seconds:,.0f} ({saved:+.0%}) | {p95:.1f}{worse}"


def main() -> None:
    base = sim.Params()
    loaded = {n: sim.load_trace(HERE / f"{n}.jsonl") for n in TRACES}
    dbos: dict[str, sim.Result] = {}
    horizon: dict[str, float] = {}
    for name, tasks in loaded.items():
        results, runs = sim.simulate_all(tasks, ["dbos"], base)
        dbos[name] = results["dbos"]
        horizon[name] = runs["dbos"].end
    head = " | ".join(f"{n}: idle (vs dbos) | {n}: p95 s" for n in TRACES)
    rule = "|---|---|" + "---|---|" * len(TRACES)
    print("| `--reserve` | `--idle-timeout` | " + head + " | most reversals per cooldown |")
    print(rule + "---|")
    dbos_row = " | ".join(_cell(dbos[n], dbos[n]) for n in TRACES)
    print(f"| dbos | | {dbos_row} | |")
    for reserve in RESERVES:
        for timeout in TIMEOUTS:
            p = replace(base, reserve=reserve, idle_timeout=timeout)
            cells, worst = [], 0
            for name, tasks in loaded.items():
                run = sim.simulate(tasks, "corral", p)
                r = sim.result(run, tasks, max(run.end, horizon[name]), p)
                cells.append(_cell(r, dbos[name]))
                worst = max(worst, r.max_reversals_per_cooldown)
            print(f"| {reserve} | {timeout:g} | {' | '.join(cells)} | {worst} |")
    print()
    print("| `dbos+wait` D s | " + head + " |")
    print("|---|" + "---|---|" * len(TRACES))
    for wait in WAITS:
        cells = []
        for name, tasks in loaded.items():
            run = _run(tasks, _dbos_wait(wait), base)
            r = sim.result(run, tasks, max(run.end, horizon[name]), base)
            cells.append(_cell(r, dbos[name]))
        print(f"| {wait:g} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
