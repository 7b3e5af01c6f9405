"""CPU and RSS of an idle corral worker (issue 4, heartbeat-protocol.md "Performance").

Starts, side by side against one SQLite cluster: an idle ``corral.Worker``
heartbeating every 5 s, one every 1 s, and a bare interpreter that only sleeps (the
floor). After a warm-up, measures each process's CPU time over ``--seconds`` (60 by
default) and its resident memory. Targets: < 0.2 % CPU at 5 s, < 25 MB RSS
including the interpreter (the document says "<1% CPU, 10–20 MB" per worker).

    python bench/worker_idle.py [--seconds 60]

Prints a table and writes ``bench/results/worker_idle.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WORKER = """
import sys, corral
w = corral.Worker(sys.argv[1], "developer", heartbeat_interval=float(sys.argv[2]),
                  idle_timeout_seconds=86400)
sys.exit(w.run(lambda task: None))
"""
FLOOR = "import time\nwhile True: time.sleep(3600)"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=5.0)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    env = {
        **os.environ,
        "CORRAL_URL": f"sqlite:///{tmp / 'corral.db'}",
        "PYTHONPATH": str(ROOT / "src"),
    }
    cases = {
        "worker, heartbeat 5 s": [sys.executable, "-c", WORKER, "W5", "5"],
        "worker, heartbeat 1 s": [sys.executable, "-c", WORKER, "W1", "1"],
        "bare interpreter (floor)": [sys.executable, "-c", FLOOR],
    }
    procs = {name: subprocess.Popen(cmd, env=env) for name, cmd in cases.items()}
    try:
        time.sleep(a.warmup)  # registration and imports are not idle time
        ps = {name: psutil.Process(proc.pid) for name, proc in procs.items()}
        start = {name: sum(p.cpu_times()[:2]) for name, p in ps.items()}
        t0 = time.monotonic()
        peak = {name: 0 for name in ps}
        while time.monotonic() - t0 < a.seconds:
            for name, proc in ps.items():
                peak[name] = max(peak[name], proc.memory_info().rss)
            time.sleep(1.0)
        wall = time.monotonic() - t0
        rows = []
        for name, proc in ps.items():
            cpu = sum(proc.cpu_times()[:2]) - start[name]
            rows.append(
                {
                    "case": name,
                    "seconds": round(wall, 1),
                    "cpu_percent": round(100 * cpu / wall, 3),
                    "rss_mb": round(proc.memory_info().rss / 2**20, 1),
                    "peak_rss_mb": round(peak[name] / 2**20, 1),
                }
            )
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(10)
    print(f"{'case':<28} {'CPU %':>8} {'RSS MB':>8} {'peak MB':>8}")
    for r in rows:
        print(
            f"{r['case']:<28} {r['cpu_percent']:>8.3f} {r['rss_mb']:>8.1f} {r['peak_rss_mb']:>8.1f}"
        )
    print("targets: < 0.2 % CPU at 5 s; < 25 MB RSS including the interpreter")
    out = ROOT / "bench" / "results" / "worker_idle.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "bench": "worker_idle",
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
