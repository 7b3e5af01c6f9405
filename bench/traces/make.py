"""Writes the three traces ``corral simulate`` is measured on (seeded: the same files
every run). Run from anywhere: ``python bench/traces/make.py``.

Every task is of the role ``developer``; priorities are 20% high, 50% medium, 30% low;
durations are log-normal with a median of 60 s (sigma 0.6, clipped to 5..900 s).

- ``steady.jsonl``: 3 hours of Poisson arrivals, one every 25 s on average;
- ``bursty.jsonl``: 3 hours of a sparse background (one every 2 minutes) and a burst
  every 15 to 30 minutes of 20 to 60 tasks arriving within a minute;
- ``diurnal.jsonl``: 24 hours whose rate follows the day: from one every 5 minutes at
  night to one every 15 s in the afternoon (a raised cosine, peak at 14:00).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 31
PRIORITIES = (("high", 0.2), ("medium", 0.5), ("low", 0.3))
Row = dict[str, object]


def _task(rng: random.Random, arrival: float) -> Row:
    names, weights = zip(*PRIORITIES, strict=True)
    duration = min(900.0, max(5.0, rng.lognormvariate(math.log(60.0), 0.6)))
    return {
        "arrival": round(arrival, 2),
        "role": "developer",
        "priority": rng.choices(names, weights)[0],
        "duration": round(duration, 1),
    }


def steady(rng: random.Random) -> list[Row]:
    out, t = [], 0.0
    while (t := t + rng.expovariate(1 / 25)) < 3 * 3600:
        out.append(_task(rng, t))
    return out


def bursty(rng: random.Random) -> list[Row]:
    end = 3 * 3600
    times = []
    t = 0.0
    while (t := t + rng.expovariate(1 / 120)) < end:
        times.append(t)
    t = rng.uniform(60, 600)
    while t < end:
        times += [t + rng.uniform(0, 60) for _ in range(rng.randint(20, 60))]
        t += rng.uniform(15 * 60, 30 * 60)
    return [_task(rng, a) for a in sorted(x for x in times if x < end)]


def diurnal(rng: random.Random) -> list[Row]:
    day, low, peak = 24 * 3600, 1 / 300, 1 / 15

    def rate(t: float) -> float:  # raised cosine, lowest at 02:00, highest at 14:00
        return low + (peak - low) * (1 - math.cos(2 * math.pi * (t - 2 * 3600) / day)) / 2

    out, t = [], 0.0
    while (t := t + rng.expovariate(peak)) < day:  # thinning
        if rng.random() < rate(t) / peak:
            out.append(_task(rng, t))
    return out


TRACES: dict[str, Callable[[random.Random], list[Row]]] = {
    "steady": steady,
    "bursty": bursty,
    "diurnal": diurnal,
}


def main() -> None:
    for n, (name, make) in enumerate(TRACES.items()):
        rows = make(random.Random(SEED + n))
        path = HERE / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"{path.name}: {len(rows)} tasks, {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
