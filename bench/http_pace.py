"""One caller at a worker's pace: latency of each operation, embedded and over HTTP,
when calls are spaced the way a worker spaces them.

``http_bench.py`` times one caller calling back to back. A worker does not: it
heartbeats every few seconds, claims after its last task's work, completes after
this one's. Between two calls the machine runs other things, and a call finds its
code and data out of the CPU's caches. This script times the same operations one
at a time after a pause (0, 1, 10 and 100 ms by default), on both sides:

- **embedded**: ``corral.connect("sqlite:///...")`` in this process;
- **HTTP**: ``corral.connect("http://...")`` against ``corral serve``'s app on
  uvicorn (uvloop + httptools, as ``http_bench.py`` runs it), a node token, its own
  fresh board seeded like the embedded one;
- **floor**: one request to ``http_bench.py``'s floor app (a Starlette route that
  updates one SQLite row), what one HTTP round trip costs at best here.

Operations: heartbeat; claim_best_task; complete_task; complete_and_claim (a
worker's step in one call). The sides take turns call by call in a shuffled order
(seeded), each call after its own pause, so a burst of machine load hits every
side alike; latency is the call alone, the pause excluded. Ratios are HTTP /
embedded p50 (and p99) per operation and pause, taken within a round, median over
``--repeat`` rounds. Run: ``python bench/http_pace.py [--repeat 3] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corral
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json
from corral.remote import HttpClient
from http_bench import TOKEN, Server, _median, seed

PAUSES_MS = (0.0, 1.0, 10.0, 100.0)
# Samples per (side, operation) at each pause: about 25 s of pauses at 100 ms.
SAMPLES = {0.0: 2000, 1.0: 1000, 10.0: 300, 100.0: 30}
OPS = ("heartbeat", "claim", "complete", "complete_and_claim")
NODE = "n0"


class Side:
    """One client and the lease it holds, timing each operation."""

    def __init__(self, client: Any) -> None:
        self.c = client
        self.held: Any = None  # the task claimed by the last claim or step
        self.lat: dict[str, list[float]] = {op: [] for op in OPS}

    def reset(self) -> None:
        self.lat = {op: [] for op in OPS}

    def _timed(self, op: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        self.lat[op].append(time.perf_counter() - t0)
        return out

    def call(self, op: str) -> None:
        c = self.c
        if op == "heartbeat":
            self._timed(op, lambda: c.heartbeat(NODE, health_status="healthy"))
        elif op == "claim":
            if self.held is not None:  # let go of the lease a step left (untimed)
                c.complete_task(self.held.id, NODE, self.held.epoch)
            self.held = self._timed(op, lambda: c.claim_best_task(NODE, "developer"))
            assert self.held is not None, "board ran out of tasks"
        elif op == "complete":
            t = self.held
            if t is None:  # nothing held: claim one first (untimed)
                t = c.claim_best_task(NODE, "developer")
            self._timed(op, lambda: c.complete_task(t.id, NODE, t.epoch))
            self.held = None
        else:
            t = self.held if self.held is not None else c.claim_best_task(NODE, "developer")
            _, self.held = self._timed(
                op, lambda: c.complete_and_claim(t.id, NODE, "developer", epoch=t.epoch)
            )
            assert self.held is not None, "board ran out of tasks"


class FloorSide:
    def __init__(self, client: HttpClient) -> None:
        self.c = client
        self.lat: dict[str, list[float]] = {"request": []}

    def reset(self) -> None:
        self.lat = {"request": []}

    def call(self, op: str) -> None:
        t0 = time.perf_counter()
        self.c.request("POST", "/hb", {})
        self.lat["request"].append(time.perf_counter() - t0)


def _pause(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def one_round(tmp: Path, r: int, pauses: list[float], scale: float, seed_: int) -> dict[str, Any]:
    tasks = 5000 + int(sum(SAMPLES.get(p, 100) for p in pauses) * 3 * scale)
    emb_db, http_db = str(tmp / f"embedded{r}.db"), str(tmp / f"http{r}.db")
    seed(emb_db, tasks)
    seed(http_db, tasks)
    corral_srv = Server("corral", http_db)
    floor_srv = Server("floor", str(tmp / f"floor{r}.db"))
    embedded = corral.connect(f"sqlite:///{emb_db}")
    admin = corral.connect(f"http://127.0.0.1:{corral_srv.port}", token=TOKEN)
    floor_client = HttpClient(f"http://127.0.0.1:{floor_srv.port}", token=None)
    try:
        admin.register_node(NODE, "developer", heartbeat_interval=3600)
        http = admin.for_node(NODE)
        sides: dict[str, Any] = {
            "embedded": Side(embedded),
            "http": Side(http),
            "floor": FloorSide(floor_client),
        }
        turns = [(s, op) for s in ("embedded", "http") for op in OPS] + [("floor", "request")]
        rng = random.Random(seed_ + r)
        for side in sides.values():  # warm both paths and connections up, untimed
            for op in OPS if isinstance(side, Side) else ("request",):
                for _ in range(50):
                    side.call(op)
        out: dict[str, Any] = {}
        for pause_ms in pauses:
            for side in sides.values():
                side.reset()
            n = max(5, int(SAMPLES.get(pause_ms, 100) * scale))
            for _ in range(n):
                rng.shuffle(turns)
                for name, op in turns:
                    _pause(pause_ms / 1e3)
                    sides[name].call(op)
            res: dict[str, Any] = {
                name: {op: percentiles(lat) for op, lat in side.lat.items()}
                for name, side in sides.items()
            }
            ratios = {}
            for op in OPS:
                for q in ("p50", "p99"):
                    ratios[f"{op}_{q}"] = res["http"][op][q] / res["embedded"][op][q]
            ratios["floor_vs_embedded_heartbeat_p50"] = (
                res["floor"]["request"]["p50"] / res["embedded"]["heartbeat"]["p50"]
            )
            ratios["http_heartbeat_vs_floor_p50"] = (
                res["http"]["heartbeat"]["p50"] / res["floor"]["request"]["p50"]
            )
            res["ratios"] = ratios
            out[f"{pause_ms:g}"] = res
        return out
    finally:
        for c in (embedded, admin, floor_client):
            c.close()
        corral_srv.stop()
        floor_srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--pauses",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=list(PAUSES_MS),
        help="milliseconds between calls, comma-separated (default 0,1,10,100)",
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the samples per pause")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "http_pace.json")
    ap.add_argument("--quick", action="store_true", help="a short run (smoke)")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.pauses, args.scale = 1, [0.0, 1.0], 0.05
    tmp = Path(tempfile.mkdtemp(prefix="corral-http-pace-"))
    rounds = []
    try:
        for r in range(args.repeat):
            t0 = time.monotonic()
            rounds.append(one_round(tmp, r, args.pauses, args.scale, args.seed))
            line = ", ".join(
                f"{k} ms: heartbeat {v['ratios']['heartbeat_p50']:.1f}x, "
                f"step {v['ratios']['complete_and_claim_p50']:.1f}x"
                for k, v in rounds[-1].items()
            )
            print(
                f"round {r + 1}/{args.repeat} ({time.monotonic() - t0:.0f} s): {line}", flush=True
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(*path: str) -> float:
        return _median(rounds, *path)

    summary: dict[str, Any] = {}
    for pause in rounds[0]:
        s: dict[str, Any] = {}
        for side, ops in (("embedded", OPS), ("http", OPS), ("floor", ("request",))):
            for op in ops:
                s[f"{side}/{op}"] = {q: med(pause, side, op, q) * 1e3 for q in ("p50", "p99")}
        s["ratios"] = {k: med(pause, "ratios", k) for k in rounds[0][pause]["ratios"]}
        summary[pause] = s
    write_json(
        args.out,
        {
            "bench": "http_pace",
            "machine": machine_info(),
            "repeat": args.repeat,
            "pauses_ms": args.pauses,
            "scale": args.scale,
            "median": summary,
            "rounds": rounds,
        },
    )
    names = {
        "heartbeat": "heartbeat",
        "claim": "claim_best_task",
        "complete": "complete_task",
        "complete_and_claim": "complete_and_claim",
    }
    print(f"\nOne caller, a pause before each call; ms, median of {args.repeat} rounds\n")
    rows = []
    for pause, s in summary.items():
        for op in OPS:
            e, h, r = s[f"embedded/{op}"], s[f"http/{op}"], s["ratios"]
            rows.append([pause, names[op], e["p50"], h["p50"], r[f"{op}_p50"], e["p99"],
                         h["p99"], r[f"{op}_p99"]])  # fmt: skip
        f = s["floor/request"]
        rows.append([pause, "floor request", None, f["p50"], s["ratios"]
                     ["floor_vs_embedded_heartbeat_p50"], None, f["p99"], None])  # fmt: skip
    heads = ["pause ms", "operation", "embedded p50", "HTTP p50", "HTTP/emb p50",
             "embedded p99", "HTTP p99", "HTTP/emb p99"]  # fmt: skip
    print(table(heads, rows))
    print("\n(floor request row: HTTP/emb p50 is one floor request over an embedded heartbeat)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
