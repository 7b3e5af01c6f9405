"""The log daemon with real processes, pipes and signals: every line logged, HEARTBEAT
lines as events, nothing lost while no supervisor is connected, one daemon per state
dir, rotation, reopen, shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.errors import InvalidInputError, StoreUnavailableError
from corral.supervisor.logd import LogdClient, ensure_logd

DEADLINE = 30.0

# Writes "<n> ..." lines, a HEARTBEAT every 10, until SIGTERM (or argv[1] lines).
TICKER = r"""
import os, signal, sys, time
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
limit = int(sys.argv[1]) if len(sys.argv) > 1 else None
out = sys.stdout.buffer
i = 0
while not stop and (limit is None or i < limit):
    out.write(b"%07d tick\n" % i)
    if i % 10 == 0:
        out.write(b"HEARTBEAT %.3f healthy\n" % time.time())
    out.flush()
    i += 1
    if limit is None:
        time.sleep(0.002)
"""

# Copies stdin to stdout as it comes (no buffering, partial lines too).
ECHO = "import os, sys\nwhile d := os.read(0, 65536):\n    os.write(int(sys.argv[1]), d)\n"

# Fast writer for rotation: many lines, some HEARTBEATs, as fast as it can.
FAST = r"""
import sys
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    out.write(b"%07d " % i + b"x" * (i % 97) + b"\n")
    if i % 1000 == 0:
        out.write(b"HEARTBEAT %d.5 healthy\n" % (1700000000 + i))
out.flush()
"""


def wait_for(cond: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def events_until(
    client: LogdClient, cond: Callable[[dict[str, Any]], bool], timeout: float = DEADLINE
) -> list[dict[str, Any]]:
    """Read events until one satisfies ``cond`` (returned list ends with it)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in client.read_events(timeout=max(0.0, deadline - time.monotonic())):
            got.append(ev)
            if cond(ev):
                return got
    raise AssertionError(f"no matching event; got {got[-5:]}")


def daemon_pid(state: Path) -> int:
    return int((state / "logd.pid").read_text())


def gone(pid: int) -> bool:
    """Exited (a zombie counts: an init that reaps late is not the daemon's fault)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def log_lines(path: Path) -> list[bytes]:
    data = path.read_bytes() if path.exists() else b""
    return data.split(b"\n")[:-1]


def all_rotated(path: Path) -> list[bytes]:
    """Every line of ``path`` and its rotated files, oldest first."""
    n = 1
    while path.with_name(f"{path.name}.{n}").exists():
        n += 1
    files = [path.with_name(f"{path.name}.{k}") for k in range(n - 1, 0, -1)] + [path]
    out: list[bytes] = []
    for f in files:
        data = f.read_bytes()
        assert not data or data.endswith(b"\n"), f"{f} ends inside a line"
        out.extend(data.split(b"\n")[:-1])
    return out


def tick_numbers(lines: list[bytes]) -> list[int]:
    return [int(line.split()[0]) for line in lines if line.endswith(b" tick")]


class Procs:
    """Children started by a test, killed at its end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, code: str, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True, **kw)
        self.started.append(p)
        return p

    def piped(
        self,
        client: LogdClient,
        agent: str,
        code: str,
        *args: str,
        stream: str = "stdout",
        **kw: Any,
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start ``code`` with its ``stream`` on a pipe attached to logd."""
        opts = attach_opts(kw)
        r, w = os.pipe()
        try:
            p = self.spawn(code, *args, **{stream: w}, **kw)
        finally:
            os.close(w)
        try:
            sid = client.attach(agent, stream, r, pid=p.pid, **opts)
        finally:
            os.close(r)  # only logd reads it now
        return p, sid

    def kill_all(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
            for f in (p.stdin, p.stdout, p.stderr):
                if f is not None:
                    f.close()


def attach_opts(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: kw.pop(k) for k in ("max_bytes", "keep") if k in kw}


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.kill_all()


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state dir; whatever daemon runs there is stopped afterwards."""
    d = tmp_path / "state"
    yield d
    try:
        pid = daemon_pid(d)
    except (FileNotFoundError, ValueError):
        return
    if not gone(pid):
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not (d / "logd.pid").exists(), "logd to stop")


@pytest.fixture
def logd(state: Path) -> Iterator[LogdClient]:
    client = ensure_logd(state)
    yield client
    client.close()


def test_every_line_of_a_child_reaches_its_log(logd: LogdClient, state: Path, procs: Procs) -> None:
    p, sid = procs.piped(logd, "worker1", TICKER, "3000")
    events = events_until(logd, lambda e: e["kind"] == "eof")
    assert p.wait(timeout=DEADLINE) == 0
    assert events[-1] == {
        "kind": "eof",
        "sid": sid,
        "agent": "worker1",
        "stream": "stdout",
        "pid": p.pid,
    }
    lines = log_lines(state / "logs" / "worker1" / "stdout.log")
    assert tick_numbers(lines) == list(range(3000))
    assert sum(line.startswith(b"HEARTBEAT ") for line in lines) == 300


def test_heartbeat_lines_are_events_and_stay_in_the_log(
    logd: LogdClient, state: Path, procs: Procs
) -> None:
    p, sid = procs.piped(logd, "worker1", ECHO, "1", stdin=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write(b"starting up\nHEARTBEAT 1700000000.25 healthy\nplain line\n")
    p.stdin.flush()
    events = events_until(logd, lambda e: e["kind"] == "line")
    beat = events[-1]
    assert beat == {
        "kind": "line",
        "sid": sid,
        "agent": "worker1",
        "stream": "stdout",
        "pid": p.pid,
        "line": "HEARTBEAT 1700000000.25 healthy",
    }
    log = state / "logs" / "worker1" / "stdout.log"
    wait_for(lambda: b"plain line" in log.read_bytes(), "the last line in the log")
    assert log_lines(log) == [b"starting up", b"HEARTBEAT 1700000000.25 healthy", b"plain line"]
    # a HEARTBEAT on stderr is an event of that stream; other lines are not events
    q, sid2 = procs.piped(logd, "worker2", ECHO, "2", stream="stderr", stdin=subprocess.PIPE)
    assert q.stdin is not None
    q.stdin.write(b"oops\nHEARTBEAT 5 busy\n")
    q.stdin.close()
    events = events_until(logd, lambda e: e["kind"] == "eof" and e["sid"] == sid2)
    assert [e["line"] for e in events if e["kind"] == "line"] == ["HEARTBEAT 5 busy"]
    assert log_lines(state / "logs" / "worker2" / "stderr.log") == [b"oops", b"HEARTBEAT 5 busy"]


SUPERVISOR = r"""
import os, subprocess, sys
from corral.supervisor.logd import ensure_logd
client = ensure_logd(sys.argv[1])
r, w = os.pipe()
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=w, start_new_session=True)
os.close(w)
client.attach("ticker", "stdout", r, pid=child.pid)
os.close(r)
print(child.pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_supervisor_killed_lines_keep_reaching_the_log_and_a_new_client_resyncs(
    state: Path, procs: Procs
) -> None:
    sup = procs.spawn(SUPERVISOR, str(state), TICKER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert sup.stdout is not None
    child_pid = int(sup.stdout.readline())
    child = psutil.Process(child_pid)
    logd_pid = daemon_pid(state)
    assert os.getpgid(logd_pid) != sup.pid and os.getsid(logd_pid) != sup.pid
    log = state / "logs" / "ticker" / "stdout.log"
    wait_for(lambda: len(tick_numbers(log_lines(log))) > 50, "the first lines")

    os.killpg(sup.pid, signal.SIGKILL)  # the supervisor's whole process group
    sup.wait(timeout=DEADLINE)
    seen = len(tick_numbers(log_lines(log)))
    wait_for(lambda: len(tick_numbers(log_lines(log))) > seen + 200, "lines after the kill")
    assert psutil.pid_exists(logd_pid) and child.is_running()

    client = LogdClient(state)  # the supervisor, started again
    try:
        events = events_until(client, lambda e: e["kind"] == "synced")
        assert events == [
            {"kind": "attached", "sid": 1, "agent": "ticker", "stream": "stdout", "pid": child_pid},
            {"kind": "synced"},
        ]
        beat = events_until(client, lambda e: e["kind"] == "line")[-1]
        assert beat["sid"] == 1 and beat["line"].startswith("HEARTBEAT ")
        assert time.time() - float(beat["line"].split()[1]) < DEADLINE  # a new one
        child.send_signal(signal.SIGTERM)
        events = events_until(client, lambda e: e["kind"] == "eof")
        assert events[-1]["pid"] == child_pid
    finally:
        client.close()
        child.wait(timeout=DEADLINE) if child.is_running() else None
    ticks = tick_numbers(log_lines(log))
    assert ticks == list(range(len(ticks)))  # none lost, before, during or after the kill


def test_rotation_under_a_fast_writer_loses_no_line(
    logd: LogdClient, state: Path, procs: Procs
) -> None:
    n = 20_000
    procs.piped(logd, "fast", FAST, str(n), max_bytes=16 * 1024, keep=500)
    events = events_until(logd, lambda e: e["kind"] == "eof")
    assert len([e for e in events if e["kind"] == "line"]) == n // 1000
    log = state / "logs" / "fast" / "stdout.log"
    assert log.with_name("stdout.log.60").exists()  # it rotated, many times
    assert all(f.stat().st_size <= 16 * 1024 for f in log.parent.iterdir())
    expected = []
    for i in range(n):
        expected.append(b"%07d " % i + b"x" * (i % 97))
        if i % 1000 == 0:
            expected.append(b"HEARTBEAT %d.5 healthy" % (1700000000 + i))
    assert all_rotated(log) == expected


def test_rotation_keeps_only_keep_files(logd: LogdClient, state: Path, procs: Procs) -> None:
    procs.piped(logd, "fast", FAST, "20000", max_bytes=16 * 1024, keep=5)
    events_until(logd, lambda e: e["kind"] == "eof")
    names = sorted(f.name for f in (state / "logs" / "fast").iterdir())
    assert names == ["stdout.log"] + [f"stdout.log.{k}" for k in range(1, 6)]
    lines = all_rotated(state / "logs" / "fast" / "stdout.log")
    numbers = [int(line.split()[0]) for line in lines if not line.startswith(b"HEARTBEAT")]
    assert numbers == list(range(numbers[0], 20_000))  # the newest, contiguous, to the end


@pytest.mark.parametrize("how", ["request", "SIGHUP"])
def test_reopen_after_the_log_was_moved(
    logd: LogdClient, state: Path, procs: Procs, how: str
) -> None:
    p, _ = procs.piped(logd, "echo", ECHO, "1", stdin=subprocess.PIPE)
    assert p.stdin is not None
    log = state / "logs" / "echo" / "stdout.log"
    p.stdin.write(b"before\n")
    p.stdin.flush()
    wait_for(lambda: log.exists() and log_lines(log) == [b"before"], "the first line")
    log.rename(log.with_name("moved.log"))
    if how == "request":
        assert logd.reopen("echo") == 1
        assert logd.reopen("nobody") == 0
    else:
        os.kill(daemon_pid(state), signal.SIGHUP)
        notes = state / "logs" / "supervisor" / "logd.log"
        wait_for(lambda: b'"by":"SIGHUP"' in notes.read_bytes(), "logd to note the reopen")
    p.stdin.write(b"after\n")
    p.stdin.close()
    events_until(logd, lambda e: e["kind"] == "eof")
    assert log_lines(log.with_name("moved.log")) == [b"before"]
    assert log_lines(log) == [b"after"]


def test_two_concurrent_ensure_logd_start_one_daemon(state: Path, procs: Procs) -> None:
    racer = (
        "import os, sys\nfrom corral.supervisor.logd import ensure_logd\n"
        "sys.stdin.read()\nc = ensure_logd(sys.argv[1])\n"
        "print(open(os.path.join(sys.argv[1], 'logd.pid')).read().strip(), flush=True)\n"
    )
    racers = [
        procs.spawn(racer, str(state), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    for r in racers:  # released together: each is blocked on its stdin
        assert r.stdin is not None
        r.stdin.close()
    pids = {r.stdout.read().strip() for r in racers if r.stdout is not None}
    assert [r.wait(timeout=DEADLINE) for r in racers] == [0, 0, 0, 0]
    assert len(pids) == 1
    (pid,) = pids
    logds = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "corral.supervisor.logd" in (p.info["cmdline"] or [])
        and str(state) in (p.info["cmdline"] or [])
    ]
    assert logds == [int(pid)]


def test_socket_mode_and_daemon_detached(logd: LogdClient, state: Path) -> None:
    sock = state / "logd.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    pid = daemon_pid(state)
    proc = psutil.Process(pid)
    assert os.getsid(pid) != os.getsid(0) and os.getpgid(pid) != os.getpgid(0)
    assert proc.ppid() != os.getpid()  # double-forked: not our child
    assert proc.cwd() == "/"
    assert {"CORRAL_SUPERVISOR", "CORRAL_AGENT_ID"}.isdisjoint(proc.environ())


def test_shutdown_finishes_every_log(logd: LogdClient, state: Path, procs: Procs) -> None:
    p, _ = procs.piped(logd, "echo", ECHO, "1", stdin=subprocess.PIPE)
    assert p.stdin is not None
    log = state / "logs" / "echo" / "stdout.log"
    p.stdin.write(b"whole\npartial")
    p.stdin.flush()
    wait_for(lambda: log.exists() and log_lines(log) == [b"whole"], "the whole line")
    pid = daemon_pid(state)
    watcher = LogdClient(state)
    try:
        logd.shutdown()  # returns once the logs are finished
        assert log.read_bytes() == b"whole\npartial\n"
        assert not (state / "logd.sock").exists() and not (state / "logd.pid").exists()
        events = events_until(watcher, lambda e: e["kind"] == "disconnected")
        assert events[-2] == {"kind": "shutdown"}
    finally:
        watcher.close()
    wait_for(lambda: gone(pid), "the daemon to exit")
    with pytest.raises(StoreUnavailableError):
        LogdClient(state)
    notes = [json.loads(line) for line in log_lines(state / "logs" / "supervisor" / "logd.log")]
    assert notes[-1]["event"] == "shutdown"


def test_stale_socket_and_pid_file_are_replaced(state: Path) -> None:
    state.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(state / "logd.sock"))
    dead.close()  # a socket file nobody listens on
    (state / "logd.pid").write_text("999999\n")
    with pytest.raises(StoreUnavailableError):
        LogdClient(state)
    with ensure_logd(state) as client:
        assert client.status() == []
        assert daemon_pid(state) != 999999


def test_a_slow_client_is_never_waited_for(state: Path, procs: Procs) -> None:
    n = 30_000
    fast = ensure_logd(state, client_buffer=64 * 1024)
    slow = LogdClient(state)  # subscribed, never reads until the end

    def accounted(client: LogdClient) -> Callable[[dict[str, Any]], bool]:
        seen = {"line": 0, "dropped": 0, "eof": 0}

        def cond(e: dict[str, Any]) -> bool:
            seen[e["kind"]] = seen.get(e["kind"], 0) + (e["count"] if e["kind"] == "dropped" else 1)
            return seen["eof"] == 1 and seen["line"] + seen["dropped"] == n

        return cond

    try:
        beats = "import sys\nfor i in range(int(sys.argv[1])):\n    print('HEARTBEAT', i, 'ok')\n"
        procs.piped(fast, "noisy", beats, str(n))
        events_until(fast, accounted(fast))  # every event delivered or counted as dropped
        lines = log_lines(state / "logs" / "noisy" / "stdout.log")
        assert lines == [b"HEARTBEAT %d ok" % i for i in range(n)]  # the log has them all
        notes = (state / "logs" / "supervisor" / "logd.log").read_text()
        assert '"event":"client-slow"' in notes
        got = events_until(slow, accounted(slow))  # what it missed is counted, eof kept
        dropped = sum(e["count"] for e in got if e["kind"] == "dropped")
        assert dropped > n // 2
        assert got[-1]["kind"] in ("eof", "dropped")
        assert (
            '"event":"client-caught-up"' in (state / "logs" / "supervisor" / "logd.log").read_text()
        )
    finally:
        slow.close()
        fast.close()


def test_bad_attach_is_refused_naming_the_field(logd: LogdClient, state: Path) -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(InvalidInputError) as e:
            logd.attach("../etc", "stdout", r)
        assert e.value.field == "agent"
        with pytest.raises(InvalidInputError) as e:
            logd.attach("ok", "stdin", r)
        assert e.value.field == "stream"
        with pytest.raises(InvalidInputError) as e:
            logd.attach("supervisor", "stdout", r)
        assert e.value.field == "agent"
        with pytest.raises(InvalidInputError) as e:
            logd.attach("ok", "stdout", r, max_bytes=0)
        assert e.value.field == "max_bytes"
        with open(state / "plain", "wb") as f, pytest.raises(InvalidInputError) as e:
            logd.attach("ok", "stdout", f.fileno())
        assert e.value.field == "fd"
    finally:
        os.close(r)
        os.close(w)
    assert logd.status() == []
    assert not (state / "logs" / "ok").exists()


def test_two_hundred_streams_one_small_daemon(logd: LogdClient, state: Path) -> None:
    writers = []
    try:
        for i in range(200):
            r, w = os.pipe()
            writers.append(w)
            logd.attach(f"a{i:03d}", "stdout", r)
            os.close(r)
        assert len(logd.status()) == 200
        for i, w in enumerate(writers):
            os.write(w, b"hello from %d\n" % i)
        for i in range(200):
            log = state / "logs" / f"a{i:03d}" / "stdout.log"

            def written(log: Path = log) -> bool:
                return log.exists() and log.stat().st_size > 0

            wait_for(written, f"a{i:03d}'s line")
            assert log_lines(log) == [b"hello from %d" % i]
        rss = psutil.Process(daemon_pid(state)).memory_info().rss
        assert rss < 64 * 1024 * 1024, rss
    finally:
        for w in writers:
            os.close(w)
    wait_for(lambda: logd.status() == [], "every stream to reach eof")


def test_out_of_file_descriptors_refuses_the_attach_and_keeps_logging(
    logd: LogdClient, state: Path
) -> None:
    daemon = psutil.Process(daemon_pid(state))
    daemon.rlimit(psutil.RLIMIT_NOFILE, (daemon.num_fds() + 5, daemon.num_fds() + 5))
    writers: list[int] = []
    try:
        with pytest.raises(StoreUnavailableError) as exc:
            for i in range(10):  # two fds each: the pipe and its log file
                r, w = os.pipe()
                writers.append(w)
                try:
                    logd.attach(f"a{i}", "stdout", r)
                finally:
                    os.close(r)
        # out of fds when receiving the pipe or opening its log, or the connection refused
        assert "could not attach" in str(exc.value) or "log daemon" in str(exc.value)
        attached = len(logd.status())
        assert 1 <= attached < 10
        for i, w in enumerate(writers[:attached]):
            os.write(w, b"still logged %d\n" % i)
        for i in range(attached):
            log = state / "logs" / f"a{i}" / "stdout.log"

            def written(log: Path = log) -> bool:
                return log.exists() and log.stat().st_size > 0

            wait_for(written, f"a{i}'s line")
            assert log_lines(log) == [b"still logged %d" % i]
    finally:
        for w in writers:
            os.close(w)
    wait_for(lambda: logd.status() == [], "every stream to reach eof")
    r, w = os.pipe()  # fds freed: attaching works again
    logd.attach("again", "stdout", r)
    os.close(r)
    os.close(w)
    wait_for(lambda: logd.status() == [], "the last eof")


def test_a_second_daemon_for_the_same_dir_refuses(logd: LogdClient, state: Path) -> None:
    pid = daemon_pid(state)
    second = subprocess.run(
        [sys.executable, "-m", "corral.supervisor.logd", "--state-dir", str(state)],
        capture_output=True,
        timeout=DEADLINE,
    )
    assert second.returncode == 1
    assert f"already running (pid {pid})" in second.stderr.decode()
    assert daemon_pid(state) == pid and logd.status() == []  # the first one still serves
