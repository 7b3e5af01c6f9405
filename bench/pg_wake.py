"""How soon a waiting claim on PostgreSQL is woken by a task added elsewhere.

An idle worker blocks in ``claim_best_task(wait=...)`` on one connection; another
adds a task; the time from ``add_task``'s call to the worker holding the task is one
sample (the commit's NOTIFY wakes the waiter: there is no polling). The target: p99
within 50 ms. The suite's test_waiting_claim_is_woken_by_add_task checks only that
every wait ends with its task; the figure is measured here, on a quiet machine.

    python bench/pg_wake.py                # 500 trials
    python bench/pg_wake.py --trials 100
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json
from pg_latency import ADMIN

TARGET_P99_MS = 50.0


def measure(url: str, trials: int) -> list[float]:
    """Seconds from each ``add_task`` to the waiting claim's answer with that task."""
    adder = corral.connect(url)
    waiter = corral.connect(url)
    waiter.register_node("W", "developer", heartbeat_interval=60)
    waiter.claim_best_task("W", "developer", wait=0.01)  # start LISTENing
    answered = threading.Condition()
    got: list[tuple[int, float]] = []

    def wait_loop() -> None:
        for _ in range(trials):
            task = waiter.claim_best_task("W", "developer", wait=30)
            with answered:
                got.append((task.id if task else -1, time.perf_counter()))
                answered.notify()
            if task is not None:
                waiter.complete_task(task.id, "W", task.epoch)

    thread = threading.Thread(target=wait_loop, daemon=True)
    thread.start()
    samples = []
    try:
        for i in range(trials):
            time.sleep(0.02)  # let the claim block in its wait (the bench's pacing)
            start = time.perf_counter()
            task = adder.add_task(f"job {i}")
            with answered:
                if not answered.wait_for(lambda n=i: len(got) > n, timeout=40):
                    raise SystemExit(f"trial {i}: the waiting claim did not answer")
            if got[i][0] != task.id:
                raise SystemExit(f"trial {i}: woken without the task ({got[i][0]})")
            samples.append(got[i][1] - start)
    finally:
        thread.join(timeout=40)
        adder.close()
        waiter.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    args = parser.parse_args()
    name = f"corral_wake_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(ADMIN)._replace(path=f"/{name}"))
    try:
        samples = measure(url, args.trials)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    ms = {k: (v * 1000 if k != "n" else v) for k, v in percentiles(samples).items()}
    met = ms["p99"] <= TARGET_P99_MS
    headers = ["trials", "p50 ms", "p90 ms", "p99 ms", "max ms", "target p99 ms", "met"]
    row = [ms["n"], ms["p50"], ms["p90"], ms["p99"], ms["max"], TARGET_P99_MS, met]
    print(table(headers, [row]))
    write_json(
        RESULTS_DIR / "pg_wake.json",
        {"machine": machine_info(), "wake_ms": ms, "target_p99_ms": TARGET_P99_MS, "met": met},
    )


if __name__ == "__main__":
    main()
