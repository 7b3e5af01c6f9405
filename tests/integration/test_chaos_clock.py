"""Hosts whose wall clocks disagree agree on who is silent: on PostgreSQL the
cluster's clock is the database server's (``corral.clock.ServerClock``: its offset
from the local monotonic clock, measured now and then), so a monitor whose host's clock
is stepped 30 s ahead recovers no beating holder's lease, and one stepped 30 s behind
recovers a silent holder's lease at its threshold, not 30 s late. The chaos campaign
(bench/chaos.py) found both when each process judged liveness by its own wall clock.
The step is real: the monitor runs in a process of its own whose CLOCK_REALTIME alone
is moved (bench/hosts/clockstep.c, an LD_PRELOAD shim: what a step does; its monotonic
clock is untouched)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import corral
from corral.types import Client
from tests.support.backends import postgres as pg

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "bench" / "hosts" / "clockstep.c"
HB = 1.0
WINDOW = 3 * HB  # missed_beats x heartbeat interval
MONITOR = (
    "from tests.support.pg_procs import coordinator; import sys; "
    "coordinator(sys.argv[1], 'stepped', 0.1)"
)


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc, "a C compiler (gcc) is needed to build bench/hosts/clockstep.c"
    out = tmp_path / "clockstep.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM), "-ldl"], check=True)
    return out


def stepped_monitor(url: str, shim: Path, tmp_path: Path, step: float) -> subprocess.Popen[bytes]:
    """The only monitor of ``url``, in a process whose wall clock is ``step`` s off."""
    offset = tmp_path / "offset"
    offset.write_text(f"{step}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    env.update(LD_PRELOAD=str(shim), CORRAL_CLOCKSTEP_FILE=str(offset), PYTHONPATH=path)
    check = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"], env=env, capture_output=True
    )
    assert abs(float(check.stdout) - time.time() - step) < 2, "the shim did not step the clock"
    return subprocess.Popen([sys.executable, "-c", MONITOR, url], env=env, cwd=ROOT)


def recovered(c: Client) -> list[corral.Event]:
    return [e for e in c.events(limit=10_000) if e.kind == "lease_recovered"]


def test_a_monitor_30s_ahead_recovers_no_beating_holder(
    request: pytest.FixtureRequest, shim: Path, tmp_path: Path
) -> None:
    url = pg.fresh_database(request)
    c = corral.connect(url, pool_size=2)
    monitor = stepped_monitor(url, shim, tmp_path, +30.0)
    try:
        c.register_node("w", "developer", heartbeat_interval=HB)
        c.add_task("work", role="developer")
        task = c.claim_best_task("w", "developer")
        assert task is not None
        end = time.monotonic() + 3 * WINDOW
        while time.monotonic() < end:  # beating every 0.3 s: never silent
            c.heartbeat("w")
            assert recovered(c) == [], "a beating holder's lease was recovered"
            time.sleep(0.3)
        assert c.get_task(task.id).status == "in_progress"
    finally:
        monitor.kill()
        monitor.wait(10)
        c.close()


def test_a_monitor_30s_behind_recovers_a_silent_holder_at_its_threshold(
    request: pytest.FixtureRequest, shim: Path, tmp_path: Path
) -> None:
    url = pg.fresh_database(request)
    c = corral.connect(url, pool_size=2)
    monitor = stepped_monitor(url, shim, tmp_path, -30.0)
    try:
        c.register_node("w", "developer", heartbeat_interval=HB)
        c.add_task("work", role="developer")
        assert c.claim_best_task("w", "developer") is not None
        c.heartbeat("w")
        silent = time.monotonic()  # the holder says nothing more
        while not recovered(c):
            assert time.monotonic() - silent < WINDOW + 1.5, (
                f"the silent holder's lease not recovered {WINDOW + 1.5}s after its last beat"
            )
            time.sleep(0.05)
    finally:
        monitor.kill()
        monitor.wait(10)
        c.close()
