"""`corral supervise` and `corral ctl` end to end, as real processes: the control
commands, a supervisor SIGKILLed (with its process group) and started again
(same children, logs kept growing by the log daemon, pipe heartbeats still read, a
later crash handled by policy), rotation through the log daemon under a fast
writer, and the log daemon dying under a running supervisor."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.errors import StoreUnavailableError
from corral.supervisor.control import request
from corral.supervisor.logd import LogdClient
from corral.supervisor.process import find_marked

PY = sys.executable

# beats every 0.1 s unless the file nobeat.<its pid> exists; "work" lines too
BEATER = (
    "import os, sys, time, signal\n"
    "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
    "signal.signal(signal.SIGUSR2, lambda *a: None)\n"
    "d = sys.argv[1]\n"
    "while True:\n"
    "    print('work', flush=True)\n"
    "    if not os.path.exists(os.path.join(d, f'nobeat.{os.getpid()}')):\n"
    "        print('HEARTBEAT', time.time(), 'healthy', flush=True)\n"
    "    time.sleep(0.1)\n"
)
TICKER = "trap : USR1 USR2; while :; do echo tick; echo tock >&2; sleep 0.05; done"


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def env() -> dict[str, str]:
    e = dict(os.environ)
    for k in ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN", "CORRAL_URL"):
        e.pop(k, None)
    return e


def ctl(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A real `corral ctl` process."""
    return subprocess.run(
        [PY, "-m", "corral", "ctl", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env(),
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def transitions(state: Path, agent: str | None = None) -> list[dict[str, Any]]:
    path = state / "logs" / "supervisor" / "state.log"
    recs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in recs if agent is None or r["agent"] == agent]


class Supervise:
    """`corral supervise MANIFEST --state-dir STATE` in its own process group."""

    def __init__(self, manifest: Path, state: Path) -> None:
        self.state = state
        self.sock = state / "control.sock"
        self.out = open(state.parent / f"supervise.{time.monotonic_ns()}.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "corral", "supervise", str(manifest), "--state-dir", str(state)],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env=env(),
            start_new_session=True,
        )

    def status(self) -> dict[str, dict[str, Any]]:
        """``status`` through the control socket (this very supervisor's)."""
        if self.proc.poll() is not None:
            said = Path(self.out.name).read_text(errors="replace")
            raise AssertionError(f"corral supervise exited {self.proc.returncode}: {said}")
        try:
            rows = request(self.sock, "status", timeout=10)
        except StoreUnavailableError:
            return {}
        return {r["agent"]: r for r in rows}

    def running(self, *agents: str) -> dict[str, int] | None:
        s = self.status()
        if all(s.get(a, {}).get("state") == "RUNNING" and s[a]["pid"] for a in agents):
            return {a: s[a]["pid"] for a in agents}
        return None

    def killpg(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=20) == -signal.SIGKILL
        self.out.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The state dir; afterwards nothing of it is left running (children, logd)."""
    d = tmp_path / "state"
    yield d
    for p in find_marked(d):
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(StoreUnavailableError):
        LogdClient(d, timeout=5).shutdown()


def write_manifest(tmp_path: Path, extra: str = "", **settings: Any) -> Path:
    conf = {
        "backoff_base": 0.05,
        "backoff_cap": 0.05,
        "backoff_jitter": 0,
        "heartbeat_interval": 0.2,
        "heartbeat_timeout": 1,  # the relay's pipe heartbeat
        **settings,
    }
    head = "[supervisor]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in conf.items())
    path = tmp_path / "fleet.toml"
    path.write_text(
        head
        + f'[[agents]]\nid = "relay"\ncmd = {json.dumps(PY)}\n'
        + f'args = ["-c", {json.dumps(BEATER)}, {json.dumps(str(tmp_path))}]\n'
        + 'heartbeat = "pipe"\nrestart = "always"\n'
        + f'[[agents]]\nid = "user"\ncmd = "sh"\nargs = ["-c", "{TICKER}"]\n'
        + 'depends_on = ["relay"]\nrestart = "on-failure"\n'
        + extra
    )
    return path


def logd_streams(state: Path) -> set[tuple[str, str, int]]:
    """The streams the state dir's log daemon holds: (agent, stream, pid)."""
    with LogdClient(state, timeout=5) as c:
        return {(h["agent"], h["stream"], h["pid"]) for h in c.status()}


def size(state: Path, agent: str, stream: str = "stdout") -> int:
    return (state / "logs" / agent / f"{stream}.log").stat().st_size


# ---- the control commands, each doing what it says ------------------------------------


@pytest.mark.slow
def test_ctl_commands_against_a_real_supervisor(tmp_path: Path, state: Path) -> None:
    broken = '[[agents]]\nid = "broken"\ncmd = "sh"\nargs = ["-c", "echo boom >&2; exit 3"]\n'
    sup = Supervise(write_manifest(tmp_path, broken, restart_limit=2), state)
    try:
        pids = wait_for(lambda: sup.running("relay", "user"), what="relay and user RUNNING")
        assert stat.S_IMODE(os.stat(state / "control.sock").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(state / "logd.sock").st_mode) == 0o600
        wait_for(lambda: sup.status()["broken"]["flags"], what="broken exhausted")

        r = ctl(state, "status", "--json")
        assert r.returncode == 0, r.stderr
        rows = {row["agent"]: row for row in json.loads(r.stdout)}
        assert [rows[a]["pid"] for a in ("relay", "user")] == [pids["relay"], pids["user"]]
        assert rows["relay"]["state"] == "RUNNING" and rows["relay"]["last_beat"] > 0
        assert rows["broken"]["state"] == "STOPPED" and rows["broken"]["pid"] is None
        assert rows["broken"]["flags"] == ["restart-exhausted"]
        assert rows["broken"]["last_exit"]["describe"] == "exit code 3"
        tail = rows["broken"]["last_exit"]["stderr_tail"]
        assert tail and set(tail) == {"boom"}  # read from its stderr.log
        table = ctl(state, "status").stdout
        assert "restart-exhausted" in table and "exit code 3" in table

        r = ctl(state, "stop", "user")
        assert (r.returncode, r.stdout.strip()) == (0, "stopped user: STOPPED"), r.stderr
        assert not alive(pids["user"])
        row = sup.status()["user"]
        assert row["pid"] is None and row["last_exit"]["describe"] == "killed by SIGTERM"

        r = ctl(state, "start", "user")
        assert r.returncode == 0 and r.stdout.startswith("started user"), r.stderr
        user = wait_for(lambda: sup.running("user"), what="user back")["user"]
        assert user != pids["user"]

        r = ctl(state, "restart", "relay", "--json")
        assert r.returncode == 0, r.stderr
        relay = wait_for(lambda: sup.running("relay", "user"), what="relay restarted")
        assert relay["relay"] != pids["relay"] and not alive(pids["relay"])
        assert relay["user"] == user  # its dependent waited, it was not restarted
        seen = [(t["from"], t["to"]) for t in transitions(state, "user")][-2:]
        assert seen == [("RUNNING", "WAITING"), ("WAITING", "RUNNING")]

        r = ctl(state, "logs", "relay", "-n", "50")
        assert r.returncode == 0 and "work" in r.stdout and "HEARTBEAT" in r.stdout
        r = ctl(state, "logs", "user", "--stderr", "-n", "3")
        assert r.returncode == 0 and r.stdout.splitlines() == ["tock"] * 3

        logd_pid = int((state / "logd.pid").read_text())
        r = ctl(state, "shutdown")
        assert r.returncode == 0, r.stderr
        assert sup.proc.wait(timeout=30) == 0
        assert not any(alive(p) for p in (relay["relay"], relay["user"]))
        wait_for(lambda: not alive(logd_pid), what="logd stopped after the children")
        assert not (state / "control.sock").exists() and not (state / "logd.sock").exists()
    finally:
        sup.close()


# ---- a supervisor killed with SIGKILL and started again -------------------------------


@pytest.mark.slow
def test_sigkilled_supervisor_restarted_keeps_children_logs_and_heartbeats(
    tmp_path: Path, state: Path
) -> None:
    m = write_manifest(tmp_path)
    first = Supervise(m, state)
    try:
        pids = wait_for(lambda: first.running("relay", "user"), what="first run")
    finally:
        first.killpg()
    starts = len([t for t in transitions(state) if t["to"] == "STARTING"])
    # no supervisor: the log daemon keeps the logs growing
    before = size(state, "user")
    wait_for(lambda: size(state, "user") > before + 1000, what="user log growing unsupervised")
    assert all(alive(p) for p in pids.values())

    second = Supervise(m, state)
    try:
        assert wait_for(lambda: second.running("relay", "user"), what="adopted") == pids
        adopted_at = time.time()
        assert len([t for t in transitions(state) if t["to"] == "STARTING"]) == starts
        assert all(s["adopted"] for s in second.status().values())
        before = size(state, "relay")
        wait_for(lambda: size(state, "relay") > before, what="relay log growing")

        # its pipe heartbeats are still read: last_beat moves on, well past the
        # heartbeat timeout (1 s), and it stays RUNNING
        wait_for(
            lambda: second.status()["relay"]["last_beat"] > adopted_at + 2.5,
            what="beats read after adoption",
        )
        relay = second.status()["relay"]
        assert relay["state"] == "RUNNING" and relay["pid"] == pids["relay"]
        assert relay["beat_status"] == "healthy"
        assert not [t for t in transitions(state, "relay") if t["to"] == "UNHEALTHY"]

        # it stops beating: UNHEALTHY at its heartbeat timeout, restarted (always)
        (tmp_path / f"nobeat.{pids['relay']}").touch()
        now = wait_for(
            lambda: (r := second.running("relay", "user")) and r["relay"] != pids["relay"] and r,
            what="relay restarted after missing beats",
        )
        hung = [t for t in transitions(state, "relay") if t["to"] == "UNHEALTHY"]
        assert hung[0]["reason"] == "heartbeat timeout" and hung[0]["pid"] == pids["relay"]
        assert now["user"] == pids["user"]

        # a later crash of the adopted user: seen at once, its policy restarts it
        os.kill(pids["user"], signal.SIGKILL)
        wait_for(
            lambda: (r := second.running("user")) and r["user"] != pids["user"],
            what="user restarted",
        )
        user = second.status()["user"]
        assert user["last_exit"]["describe"] == "unknown"  # not our child: status unknown
        assert user["restarts"] == 1
        assert ctl(state, "shutdown").returncode == 0
        assert second.proc.wait(timeout=30) == 0
    finally:
        second.close()
    assert not alive(pids["relay"]) and not alive(pids["user"])


# ---- rotation through the log daemon ---------------------------------------------------

WRITER = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
    "w = sys.stdout.write\n"
    "for i in range(int(sys.argv[2])): w(f'line {i:08d} ' + 'x' * 40 + '\\n')\n"
    "w('done\\n'); sys.stdout.flush()\n"
    "time.sleep(600)\n"
)


@pytest.mark.slow
def test_rotation_through_logd_keeps_log_keep_files_and_loses_no_line(
    tmp_path: Path, state: Path
) -> None:
    go, lines, max_bytes, keep = tmp_path / "go", 40_000, 200_000, 5
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'[[agents]]\nid = "w"\ncmd = {json.dumps(PY)}\n'
        f'args = ["-c", {json.dumps(WRITER)}, {json.dumps(str(go))}, "{lines}"]\n'
        f'restart = "never"\nlog_max_bytes = {max_bytes}\nlog_keep = {keep}\n'
    )
    sup = Supervise(path, state)
    try:
        wait_for(lambda: sup.running("w"), what="writer RUNNING")
    finally:
        sup.killpg()  # the rotation below happens with no supervisor at all
    go.touch()
    log = state / "logs" / "w" / "stdout.log"
    wait_for(lambda: log.exists() and log.read_bytes().endswith(b"done\n"), what="all written")
    files = [log.with_name(f"stdout.log.{n}") for n in range(keep, 0, -1)] + [log]
    assert all(f.exists() for f in files)
    assert not log.with_name(f"stdout.log.{keep + 1}").exists()
    assert all(f.stat().st_size <= max_bytes for f in files)
    kept = b"".join(f.read_bytes() for f in files).decode().splitlines()
    assert kept[-1] == "done"
    numbers = [int(line.split()[1]) for line in kept[:-1]]
    # what the kept files hold is every line from the first kept one to the last
    assert numbers == list(range(numbers[0], lines))
    assert numbers[0] > 0  # older lines went with the files past log_keep


# ---- the log daemon dies under a running supervisor -------------------------------------


@pytest.mark.slow
def test_a_dead_log_daemon_is_reported_and_replaced_for_new_children(
    tmp_path: Path, state: Path
) -> None:
    sup = Supervise(write_manifest(tmp_path), state)
    try:
        pids = wait_for(lambda: sup.running("relay", "user"), what="running")
        old = int((state / "logd.pid").read_text())
        os.kill(old, signal.SIGKILL)
        own_log = state / "logs" / "supervisor" / "supervisor.log"
        wait_for(lambda: "log daemon lost" in own_log.read_text(), what="loss logged")
        lost = [json.loads(x) for x in own_log.read_text().splitlines() if "log daemon lost" in x]
        assert lost[0]["level"] == "critical"
        pidfile = state / "logd.pid"
        new = wait_for(
            lambda: (t := pidfile.read_text().strip()) and int(t) != old and int(t),
            what="a new logd",
        )
        assert alive(new)
        # the beats of the old relay are lost with the old logd: it is restarted by
        # its heartbeat timeout, and the new child's output flows through the new logd
        now = wait_for(
            lambda: (r := sup.running("relay")) and r["relay"] != pids["relay"] and r,
            what="relay restarted through the new logd",
        )
        assert logd_streams(state) >= {
            ("relay", "stdout", now["relay"]),
            ("relay", "stderr", now["relay"]),
        }
    finally:
        sup.close()
