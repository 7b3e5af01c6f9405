"""The main job: ``corral demo`` runs the scripted fleet to the end."""

from __future__ import annotations

import json
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
    assert "monitor: Dev-3 retired after 3.0s idle" in proc.stdout
