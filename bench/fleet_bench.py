"""The fleet: `corral up`'s pools, measured from the cluster's events.

1. Scale-up latency, over N scale-ups: a pool (auto, 0..1) idle at 0 members; one
   task is added (the board turns deep: pending and nobody working); then

   - decision: task_added -> the pool's scale event (recommendation seen, spawned);
   - start-up: the scale event -> the worker registered (the worker's own start-up:
     a Python interpreter importing corral; measured separately, as asked);
   - claim: registered -> the task claimed;
   - recommendation -> holding a claim, start-up excluded: decision + claim.

   The worker retires (idle_timeout 0.5 s) before the next round.
2. A bursty board: bursts of B tasks every P seconds for D seconds, run side by side
   on two fleets at once: `auto` (min 0, max M) against a fixed pool of M workers
   (`off`, min M). Idle worker-seconds (workers alive less workers busy, from the
   node and task events) and the p95 task wait (task_added -> first claim).

    python bench/fleet_bench.py                  # 20 scale-ups; 50 tasks / 120 s / 20 min
    python bench/fleet_bench.py --quick          # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/support/fleet_up.py

from tests.support.fleet_up import EXAMPLES, Up, wait_for

from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

POOL = """
[cluster]
settings = {{ max_agents = {cap}, idle_timeout_seconds = {idle}, grace_period_seconds = 30 }}

[[pools]]
id = "w"
cmd = "{python}"
args = ["fleet_worker.py"]
cwd = "."
env = {{ FLEET_WORK_SECONDS = "{work}" }}
role = "developer"
min = {lo}
max = {hi}
cooldown = {cooldown}
scale = "{scale}"
"""


def _fleet(
    directory: Path,
    *,
    scale: str,
    lo: int,
    hi: int,
    idle: float,
    work: float,
    cooldown: float = 0.0,
) -> Up:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "fleet_worker.py", directory / "fleet_worker.py")
    (directory / "corral.toml").write_text(
        POOL.format(
            cap=hi + 2,
            idle=idle,
            python=sys.executable,
            work=work,
            lo=lo,
            hi=hi,
            cooldown=cooldown,
            scale=scale,
        )
    )
    return Up(directory, "corral.toml")


def scale_ups(root: Path, rounds: int) -> dict[str, Any]:
    up = _fleet(root / "scale", scale="auto", lo=0, hi=1, idle=0.5, work=0.05)
    decision, startup, claim, total = [], [], [], []
    try:
        for i in range(rounds):
            wait_for(
                lambda: (
                    not up.cluster.list_nodes(status="idle")
                    and not up.cluster.list_nodes(status="working")
                ),
                30,
                "no worker",
            )
            since = up.events()[-1].seq
            up.cluster.add_task(f"round {i}")
            wait_for(
                lambda s=since: any(e.kind == "task_claimed" for e in up.cluster.events(s)),
                30,
                "the claim",
            )
            ev = up.cluster.events(since, 10_000)
            added = next(e.ts for e in ev if e.kind == "task_added")
            scaled = next(
                e.ts for e in ev if e.kind == "alert" and e.data.get("reason") == "pool_scaled"
            )
            registered = next(e.ts for e in ev if e.kind == "node_registered")
            claimed = next(e.ts for e in ev if e.kind == "task_claimed")
            decision.append(scaled - added)
            startup.append(registered - scaled)
            claim.append(claimed - registered)
            total.append((scaled - added) + (claimed - registered))
            wait_for(lambda n=i + 1: up.done() == n, 30, "the task done")
    finally:
        up.stop()
    return {
        "rounds": rounds,
        "recommendation_to_claim_excl_startup": percentiles(total),
        "decision": percentiles(decision),
        "worker_startup": percentiles(startup),
        "registered_to_claim": percentiles(claim),
    }


def _economics(up: Up, end: float) -> dict[str, Any]:
    events = up.events()
    born: dict[tuple[str, int], float] = {}
    alive = 0.0
    incarnation: dict[str, int] = {}
    for e in events:
        if e.kind == "node_registered":
            incarnation[e.node_id] = e.data.get("incarnation", 0)
            born[(e.node_id, incarnation[e.node_id])] = e.ts
        elif (e.kind == "node_status" and e.data.get("new") == "terminated") or e.kind in (
            "node_retired",
            "node_dead",
        ):
            key = (e.node_id, incarnation.get(e.node_id, 0))
            if key in born:
                alive += e.ts - born.pop(key)
    alive += sum(end - t for t in born.values())
    added: dict[int, float] = {}
    claimed: dict[int, float] = {}
    busy = 0.0
    for e in events:
        if e.kind == "task_added":
            added[e.task_id] = e.ts
        elif e.kind == "task_claimed":
            claimed.setdefault(e.task_id, e.ts)
            claimed[-e.task_id] = e.ts  # the latest claim, for the busy time
        elif e.kind == "task_completed":
            busy += e.ts - claimed.get(-e.task_id, e.ts)
    waits = [claimed[t] - added[t] for t in added if t in claimed]
    return {
        "tasks": len(added),
        "done": up.done(),
        "worker_seconds": round(alive, 1),
        "busy_worker_seconds": round(busy, 1),
        "idle_worker_seconds": round(alive - busy, 1),
        "task_wait": percentiles(waits) if waits else {},
        "task_wait_p95": sorted(waits)[int(0.95 * (len(waits) - 1))] if waits else None,
    }


def bursty(
    root: Path, *, burst: int, every: float, duration: float, hi: int, work: float, idle: float
) -> dict[str, Any]:
    fleets = {
        "auto": _fleet(
            root / "auto", scale="auto", lo=0, hi=hi, idle=idle, work=work, cooldown=1.0
        ),
        "fixed": _fleet(root / "fixed", scale="off", lo=hi, hi=hi, idle=10**6, work=work),
    }
    try:
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < duration:
            threads = [
                threading.Thread(
                    target=up.cluster.add_tasks,
                    args=([{"title": f"b{n}-{i}"} for i in range(burst)],),
                )
                for up in fleets.values()
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            n += 1
            time.sleep(max(0.0, start + n * every - time.monotonic()))
        for up in fleets.values():
            wait_for(lambda up=up: up.done() == n * burst, 120, "every burst done")
        end = time.time()
        return {name: _economics(up, end) for name, up in fleets.items()} | {"bursts": n}
    finally:
        for up in fleets.values():
            up.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--every", type=float, default=120.0)
    ap.add_argument("--duration", type=float, default=1200.0)
    ap.add_argument("--max", type=int, default=3)
    ap.add_argument("--work", type=float, default=2.0, help="seconds per task")
    ap.add_argument("--idle", type=float, default=10.0, help="idle_timeout of auto workers")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "fleet_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.burst, args.every, args.duration = 2, 4, 3.0, 5.0
        args.work, args.idle = 0.1, 1.0
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    try:
        ups = scale_ups(root, args.rounds)
        eco = bursty(
            root,
            burst=args.burst,
            every=args.every,
            duration=args.duration,
            hi=args.max,
            work=args.work,
            idle=args.idle,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ms = 1000.0
    print(
        table(
            ["scale-up (ms)", "p50", "p99", "max"],
            [
                [k, v["p50"] * ms, v["p99"] * ms, v["max"] * ms]
                for k, v in ups.items()
                if isinstance(v, dict)
            ],
        )
    )
    print()
    print(
        table(
            ["bursty board", "tasks", "worker-s", "idle worker-s", "p95 wait (s)"],
            [
                [k, v["tasks"], v["worker_seconds"], v["idle_worker_seconds"], v["task_wait_p95"]]
                for k, v in eco.items()
                if isinstance(v, dict)
            ],
        )
    )
    write_json(
        args.out,
        {
            "bench": "fleet_bench",
            "machine": machine_info(),
            "params": {k: str(v) for k, v in vars(args).items()},
            "scale_ups": ups,
            "bursty": eco,
        },
    )


if __name__ == "__main__":
    main()
