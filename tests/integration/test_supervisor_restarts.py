"""What the Processes panel promises, as real processes and signals (issue 29): an
operator's restart through the cluster raises the restart count the cluster shows
(``list_processes``), a supervisor SIGKILLed and started again keeps that count, and
an operator's restarts never spend the crash-loop budget, while a restart loop still
exhausts at ``restart_limit``; the cluster's copy of a run's stderr, and the panel,
hold exactly the last 50 lines that run wrote."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import corral
from corral.model import Process
from corral.server import create_app
from corral.types import Client
from tests.integration import test_supervisor_e2e as e2e
from tests.integration.test_supervisor_cluster import HOST, ClusterSupervise, acked, running_pid
from tests.integration.test_supervisor_e2e import alive, wait_for

state = e2e.state  # the fixture: the state dir, nothing of it left running afterwards
TOKEN = "restarts-operator-token"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'corral.db'}"


@pytest.fixture
def c(url: str) -> Iterator[Client]:
    client = corral.connect(url)
    yield client
    client.close()


def _manifest(tmp_path: Path, agents: str, restart_limit: int) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(
        "[supervisor]\nbackoff_base = 0.05\nbackoff_cap = 0.05\nbackoff_jitter = 0\n"
        f"restart_limit = {restart_limit}\nrestart_window = 300\n" + agents
    )
    return path


def _row(c: Client, agent: str) -> Process | None:
    return next((p for p in c.list_processes(HOST) if p.agent == agent), None)


def _shown(c: Client, agent: str, restarts: int) -> Process | None:
    """``agent``'s row once the cluster shows ``restarts`` restarts."""
    row = _row(c, agent)
    return row if row is not None and row.restarts == restarts else None


def _restart_through_the_cluster(c: Client, agent: str) -> int:
    """Ask the cluster to restart ``agent``; its new pid once the request is
    acknowledged and the cluster shows the new process RUNNING."""
    old = wait_for(lambda: running_pid(c, agent), what=f"{agent} RUNNING in the cluster")
    req = c.request_process_action(HOST, agent, "restart")
    done = wait_for(lambda: acked(c, req), what="the restart acknowledged")
    assert done.data["ok"] is True and done.data["actor"] == "operator"
    new: int = wait_for(lambda: running_pid(c, agent, other_than=old), what="the new pid")
    wait_for(lambda: not alive(old), what="the old process gone")
    return new


SLEEPER = (
    '[[agents]]\nid = "web"\ncmd = "sleep"\nargs = ["1000"]\nheartbeat = "none"\n'
    'restart = "always"\nstop_timeout = 5\n'
)


def test_an_operator_restart_raises_the_count_and_a_sigkilled_supervisor_keeps_it(
    tmp_path: Path, state: Path, url: str, c: Client
) -> None:
    """Three restarts through the cluster with ``restart_limit = 2``: the count the
    cluster shows goes 0, 1, 2, 3 and the agent is never exhausted (an operator's
    restart is no crash). The supervisor SIGKILLed and started again adopts the
    same process with the same count, in its own status and in the cluster."""
    m = _manifest(tmp_path, SLEEPER, restart_limit=2)
    first = ClusterSupervise(url, m, state)
    try:
        wait_for(lambda: running_pid(c, "web"), what="web reported")
        row = _row(c, "web")
        assert row is not None and row.restarts == 0
        for n in (1, 2, 3):
            pid = _restart_through_the_cluster(c, "web")
            row = wait_for(functools.partial(_shown, c, "web", n), what=f"{n} restarts shown")
            assert (row.pid, row.flags) == (pid, [])
            assert first.status()["web"]["restarts"] == n
    finally:
        first.killpg()
    assert alive(pid)  # the agent outlives its supervisor (its own session)
    second = ClusterSupervise(url, m, state)
    try:
        wait_for(lambda: second.running("web"), what="web adopted")
        status = second.status()["web"]
        assert (status["pid"], status["adopted"], status["restarts"]) == (pid, True, 3)
        # The adopting supervisor's report says the same.
        wait_for(lambda: running_pid(c, "web") == pid, what="the adopted pid reported")
        row = _row(c, "web")
        assert row is not None and (row.restarts, row.flags) == (3, [])
        # And counting goes on from there.
        _restart_through_the_cluster(c, "web")
        wait_for(lambda: _shown(c, "web", 4), what="4 restarts shown")
    finally:
        second.close()


CRASHER = '[[agents]]\nid = "loop"\ncmd = "sh"\nargs = ["-c", "exit 3"]\nrestart = "always"\n'


def test_a_restart_loop_still_exhausts_at_its_limit(
    tmp_path: Path, state: Path, url: str, c: Client
) -> None:
    """A process that exits at once, ``restart_limit = 3``: three restarts by the
    policy, then STOPPED with ``restart-exhausted``, in the cluster as on the host.
    The operator's restart starts it again (one more restart shown, the budget
    cleared): three more by the policy, exhausted again, seven in all."""
    sup = ClusterSupervise(url, _manifest(tmp_path, CRASHER, restart_limit=3), state)
    try:
        exhausted = wait_for(
            lambda: (r := _row(c, "loop")) and r.flags == ["restart-exhausted"] and r,
            what="loop exhausted in the cluster",
        )
        assert (exhausted.state, exhausted.restarts) == ("STOPPED", 3)
        assert exhausted.last_exit is not None
        assert exhausted.last_exit["describe"] == "exit code 3"
        req = c.request_process_action(HOST, "loop", "restart")
        wait_for(lambda: acked(c, req), what="the restart acknowledged")
        again = wait_for(
            lambda: (r := _row(c, "loop")) and r.flags and r.restarts > 3 and r,
            what="loop exhausted again",
        )
        assert (again.state, again.restarts, again.flags) == ("STOPPED", 7, ["restart-exhausted"])
        assert sup.status()["loop"]["restarts"] == 7
    finally:
        sup.close()


LINES = 80
NOISY = (
    '[[agents]]\nid = "noisy"\ncmd = "sh"\n'
    f'args = ["-c", "i=1; while [ $i -le {LINES} ]; do echo err line $i >&2; i=$((i+1)); done;'
    ' exit 5"]\nrestart = "never"\n'
)


def test_the_cluster_and_the_panel_keep_the_last_50_stderr_lines_of_a_run(
    tmp_path: Path, state: Path, url: str, c: Client
) -> None:
    """A child writes 80 lines to stderr and exits 5: the cluster's copy of its last
    exit holds exactly lines 31 to 80, and the dashboard's Processes panel shows
    exactly those 50, in order."""
    last_50 = [f"err line {i}" for i in range(LINES - 49, LINES + 1)]
    sup = ClusterSupervise(url, _manifest(tmp_path, NOISY, restart_limit=3), state)
    try:
        row = wait_for(
            lambda: (
                (r := _row(c, "noisy"))
                and r.last_exit is not None
                and r.last_exit.get("stderr_tail")
                and r
            ),
            what="noisy's exit and its stderr reported",
        )
        assert row.state == "STOPPED" and row.last_exit is not None
        assert row.last_exit["describe"] == "exit code 5"
        assert row.last_exit["stderr_tail"] == last_50
    finally:
        sup.close()
    app = create_app(c, token=TOKEN, monitor=False, mcp=False)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as page:
        logged = page.post("/login", data={"token": TOKEN}, headers={"Origin": "http://testserver"})
        assert logged.status_code == 303, logged.text
        panel = page.get("/dashboard/panels/processes")
        assert panel.status_code == 200, panel.text
    html: Any = panel.text
    noisy = html[html.index('data-process="noisy"') :].split("</tr>")[0]
    assert "stderr of the latest run (last 50 lines)" in noisy
    shown = re.search(r"<pre>(.*?)</pre>", noisy, re.S)
    assert shown is not None and shown[1].splitlines() == last_50
