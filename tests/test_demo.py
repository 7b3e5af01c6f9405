"""The main job: ``corral demo`` runs the scripted fleet to the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys


def test_demo_runs_the_whole_lifecycle():
    """Spawn to capacity, one refusal, a crash recovered by the monitor, idle retirement."""
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["tasks_done"] == summary["tasks_total"] == 10
    assert summary["refused_registrations"] == 1
    assert summary["lease_recoveries"] == 1
    assert summary["retired"] >= 3
    assert "ERROR: Cluster at capacity (4 nodes). Registration rejected." in proc.stdout
    # Retired at its idle timeout (3 s in the demo), never before; shown to a tenth of
    # a second (the event keeps milliseconds, and a real clock wakes a little late).
    retired = re.search(r"monitor: Dev-3 retired after (\d+\.\d)s idle\n", proc.stdout)
    assert retired, proc.stdout
    assert float(retired.group(1)) >= 3.0
