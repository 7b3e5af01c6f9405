"""The supervisor's control socket, its command registry and `corral ctl` / `supervise`.

Real Unix sockets and real `python -m corral` processes. The supervisor is
``TableSupervisor`` below: a small class with the ``Supervisor`` methods the commands
call (status, start, stop, restart, shutdown, reopen_logs, run) over real state, served
by the same code `corral supervise` runs (``corral.supervisor.entry._serve``) in a thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from corral.cli import cli
from corral.cli.supervise import DRAWING_OPTIONS, status_table
from corral.errors import CorralError, InvalidInputError, NotFoundError, StoreUnavailableError
from corral.fleet.pools import FleetSupervisor
from corral.supervisor.commands import CLIENT_COMMANDS, COMMANDS, dispatcher
from corral.supervisor.control import MAX_REQUEST, ControlServer, request
from corral.supervisor.entry import _serve
from corral.supervisor.logs import RotatingLog
from tests.support.worker_app import wait_for

SRC = Path(__file__).resolve().parents[2] / "src"


class TableSupervisor:
    """The Supervisor's control methods over a table of agents (no processes)."""

    def __init__(self, ids: list[str]) -> None:
        self.rows: dict[str, dict[str, Any]] = {
            agent: {
                "agent": agent,
                "state": "RUNNING",
                "pid": 4000 + n,
                "restarts": 0,
                "uptime": 4980.0,
                "last_beat": None,  # status() says 2 s ago
                "flags": [],
                "last_exit": None,
            }
            for n, agent in enumerate(ids)
        }
        self.reopened = 0
        self.listeners: list[Any] = []  # state changes (none here: no transitions)
        self.calls: list[tuple[str, str | None]] = []
        self._done: asyncio.Event | None = None

    def status(self) -> list[dict[str, Any]]:
        beat = time.time() - 2.5
        return [{**r, "last_beat": beat if r["pid"] else None} for r in self.rows.values()]

    async def start(self, agent_id: str) -> None:
        self.calls.append(("start", agent_id))
        row = self.rows[agent_id]
        if row["state"] != "STOPPED":
            raise CorralError(f"{agent_id} is {row['state']}, not STOPPED")
        row.update(state="STARTING", pid=4100 + list(self.rows).index(agent_id), flags=[])

    async def stop(self, agent_id: str) -> None:
        self.calls.append(("stop", agent_id))
        await asyncio.sleep(0.05)  # the graceful stop takes a moment
        self.rows[agent_id].update(
            state="STOPPED", pid=None, uptime=None, last_exit={"code": None, "signal": 15}
        )

    async def restart(self, agent_id: str) -> None:
        self.calls.append(("restart", agent_id))
        row = self.rows[agent_id]
        row.update(
            state="STARTING",
            pid=4200 + list(self.rows).index(agent_id),
            restarts=row["restarts"] + 1,
        )

    def reopen_logs(self) -> None:
        self.calls.append(("reopen", None))
        self.reopened += 1

    async def shutdown(self) -> None:
        self.calls.append(("shutdown", None))
        for row in self.rows.values():
            await asyncio.sleep(0.05)  # cascade stop, one agent after another
            row.update(state="STOPPED", pid=None)
        assert self._done is not None
        self._done.set()

    async def run(self) -> None:
        self._done = asyncio.Event()
        await self._done.wait()


class Served:
    """``_serve(sup, state_dir)`` (what `corral supervise` runs) in a thread."""

    def __init__(self, sup: TableSupervisor, state_dir: Path) -> None:
        self.sup, self.state_dir = sup, state_dir
        self.sock = state_dir / "control.sock"
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        # Listening, not only bound: the socket's file exists from its bind, and a
        # request before its listen is refused (a run under load met that window).
        wait_for(lambda: self._listening() or self.error, what="the control socket")
        if self.error:
            raise self.error

    def _listening(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.sock))
            except (FileNotFoundError, ConnectionRefusedError):
                return False
        return True

    def _main(self) -> None:
        try:
            asyncio.run(_serve(self.sup, self.state_dir))
        except BaseException as e:
            self.error = e

    def stop(self) -> None:
        if self.thread.is_alive():
            request(self.sock, "shutdown", timeout=10)
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    sup = TableSupervisor(["relay", "mint", "user0"])
    s = Served(sup, tmp_path / "state")
    yield s
    s.stop()


def corral(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A real `python -m corral` process."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("CORRAL_SUPERVISOR", None)
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def raw(path: Path, data: bytes) -> dict[str, Any]:
    """Send ``data`` as is and read the one answer line."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # an over-long request is answered before it was all read
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.endswith(b"\n") and answer.count(b"\n") == 1
    found: dict[str, Any] = json.loads(answer)
    return found


# ---- the registry and the CLI ----------------------------------------------------------


def test_ctl_subcommands_are_the_registry() -> None:
    ctl = cli.commands["ctl"]
    assert isinstance(ctl, click.Group)
    assert set(ctl.commands) == {c.name for c in COMMANDS} | set(CLIENT_COMMANDS)
    assert {"status", "start", "stop", "restart", "reopen", "shutdown"} <= {
        c.name for c in COMMANDS
    }
    for cmd in COMMANDS:
        sub = ctl.commands[cmd.name]
        assert sub.help == cmd.doc and cmd.doc, cmd.name
        params = {p.name for p in sub.params} - {"as_json", "help"}
        params -= set(DRAWING_OPTIONS.get(cmd.name, ()))  # the CLI's own (--watch)
        assert params == {a.name for a in cmd.args}, cmd.name
        # the spawn request commands call corral up's supervisor (it has pools)
        owner = (
            FleetSupervisor if cmd.name in ("requests", "accept", "decline") else TableSupervisor
        )
        assert callable(getattr(owner, cmd.method)), cmd.method


def test_dispatch_refuses_unknown_commands_and_arguments_by_name() -> None:
    sup = TableSupervisor(["a"])
    dispatch = dispatcher(sup)

    async def go(name: str, args: dict[str, Any]) -> Any:
        return await dispatch(name, args)

    cases: list[tuple[str, dict[str, Any], str]] = [
        ("reboot", {}, "command"),
        ("stop", {}, "id"),
        ("stop", {"id": "a", "force": True}, "force"),
        ("stop", {"id": 7}, "id"),
        ("stop", {"id": ""}, "id"),
        ("status", {"verbose": True}, "verbose"),
    ]
    for name, args, field in cases:
        with pytest.raises(InvalidInputError) as e:
            asyncio.run(go(name, args))
        assert e.value.field == field, (name, args)
    with pytest.raises(NotFoundError) as nf:
        asyncio.run(go("stop", {"id": "ghost"}))
    assert nf.value.field == "id"
    assert sup.calls == []  # nothing reached the supervisor
    assert asyncio.run(go("stop", {"id": "a"}))["state"] == "STOPPED"


# ---- the socket ------------------------------------------------------------------------


def test_socket_is_0600_in_a_0700_dir_and_answers_request(served: Served) -> None:
    assert stat.S_IMODE(os.stat(served.sock).st_mode) == 0o600
    assert stat.S_ISSOCK(os.stat(served.sock).st_mode)
    assert stat.S_IMODE(os.stat(served.state_dir).st_mode) == 0o700
    rows = request(served.sock, "status")
    assert [r["agent"] for r in rows] == ["relay", "mint", "user0"]
    row = request(served.sock, "stop", id="mint")
    assert (row["agent"], row["state"], row["pid"]) == ("mint", "STOPPED", None)
    with pytest.raises(NotFoundError) as nf:
        request(served.sock, "start", id="ghost")
    assert nf.value.field == "id" and "ghost" in nf.value.message
    with pytest.raises(CorralError) as refused:
        request(served.sock, "start", id="relay")
    assert type(refused.value) is CorralError and refused.value.exit_code == 1
    with pytest.raises(InvalidInputError) as bad:
        request(served.sock, "restart", id="relay", now=True)
    assert bad.value.field == "now"


def test_a_bad_request_gets_an_error_envelope_and_the_server_keeps_serving(served: Served) -> None:
    cases = [
        (b"not json\n", None, "request"),
        (b"[1, 2]\n", None, "request"),
        (b'{"command": "status"}\n', None, "id"),
        (b'{"id": "r1", "command": "status", "extra": 1}\n', None, "extra"),
        (b'{"id": "r2", "command": 5}\n', "r2", "command"),
        (b'{"id": "r3", "command": "status", "args": []}\n', "r3", "args"),
        (b'{"id": "r4", "command": "explode"}\n', "r4", "command"),
        (b'{"id": "r5", "command": "stop", "args": {"id": "relay", "x": 1}}\n', "r5", "x"),
        (b'{"id": "r6", "command": "stop", "args": {"id": 3}}\n', "r6", "id"),
        (b'{"id": "r7", "command": "stop", "args": {"id": "nope"}}', "r7", "id"),  # no newline
        (b"x" * (MAX_REQUEST + 10) + b"\n", None, "request"),
    ]
    for data, rid, field in cases:
        answer = raw(served.sock, data)
        assert answer["ok"] is False and answer["id"] == rid, data[:60]
        assert answer["error"]["field"] == field, (data[:60], answer)
        code = "not_found" if rid == "r7" else "invalid_input"
        assert answer["error"]["code"] == code
    ok = raw(served.sock, b'{"id": "fine", "command": "status"}\n')
    assert ok["ok"] is True and ok["id"] == "fine" and len(ok["result"]) == 3
    assert served.sup.calls == []


def test_no_supervisor_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "control.sock"
    with pytest.raises(StoreUnavailableError) as e:
        request(path, "status")
    assert str(path) in e.value.message and "is corral supervise running?" in e.value.message
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # a socket file nobody listens on
    dead.close()
    with pytest.raises(StoreUnavailableError):
        request(path, "status")


def test_a_stale_socket_is_replaced_a_live_one_or_a_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    path = state / "control.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()
    sup = TableSupervisor(["a"])

    async def scenario() -> None:
        async with ControlServer(path, dispatcher(sup)):
            assert stat.S_IMODE(os.stat(state).st_mode) == 0o700  # tightened
            second = ControlServer(path, dispatcher(sup))
            with pytest.raises(CorralError) as busy:
                await second.start()
            assert str(path) in busy.value.message
            answer = await asyncio.to_thread(request, path, "status")
            assert answer[0]["agent"] == "a"  # the first one still serves
        assert not path.exists()  # removed on close

    asyncio.run(scenario())
    path.write_text("not a socket")
    with pytest.raises(InvalidInputError) as e:
        asyncio.run(ControlServer(path, dispatcher(sup)).start())
    assert "not a socket" in e.value.message
    assert path.read_text() == "not a socket"


def test_shutdown_is_answered_after_the_cascade_then_the_socket_goes(tmp_path: Path) -> None:
    sup = TableSupervisor(["a", "b"])
    s = Served(sup, tmp_path / "state")
    assert request(s.sock, "shutdown", timeout=10) == {"shutdown": True}
    assert [r["state"] for r in sup.status()] == ["STOPPED", "STOPPED"]
    s.thread.join(10)
    assert not s.thread.is_alive() and s.error is None
    assert not s.sock.exists()
    with pytest.raises(StoreUnavailableError):
        request(s.sock, "status")


# ---- corral ctl, a real process ----------------------------------------------------------


def test_ctl_commands_in_real_processes(served: Served) -> None:
    d = str(served.state_dir)
    r = corral("ctl", "--state-dir", d, "status")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "STATE", "PID", "LAST", "BEAT", "UPTIME", "RESTARTS"]
    assert lines[2].split() == ["relay", "RUNNING", "4000", "2", "s", "ago", "1h", "23m", "0"]

    r = corral("ctl", "--state-dir", d, "stop", "user0")
    assert (r.returncode, r.stdout.strip()) == (0, "stopped user0: STOPPED")
    r = corral("ctl", "--state-dir", d, "start", "user0")
    assert (r.returncode, r.stdout.strip()) == (0, "started user0: STARTING (pid 4102)")
    r = corral("ctl", "--state-dir", d, "restart", "relay", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["restarts"] == 1
    r = corral("ctl", "--state-dir", d, "reopen")
    assert (r.returncode, served.sup.reopened) == (0, 1)

    r = corral("ctl", "--state-dir", d, "status", "--json")
    rows = json.loads(r.stdout)
    keys = {"agent", "state", "pid", "restarts", "uptime", "last_beat", "flags", "last_exit"}
    assert all(keys <= set(row) for row in rows)
    assert [(x["agent"], x["state"]) for x in rows] == [
        ("relay", "STARTING"),
        ("mint", "RUNNING"),
        ("user0", "STARTING"),
    ]

    refused = corral("ctl", "--state-dir", d, "start", "mint")
    assert refused.returncode == 1 and refused.stderr.startswith("error: mint is RUNNING")
    unknown = corral("ctl", "--state-dir", d, "stop", "ghost")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "error: id: no agent ghost in the manifest"
    assert served.sup.calls == [
        ("stop", "user0"),
        ("start", "user0"),
        ("restart", "relay"),
        ("reopen", None),
        ("start", "mint"),
    ]


def test_ctl_without_a_supervisor_exits_3_and_names_the_socket(tmp_path: Path) -> None:
    r = corral("ctl", "--state-dir", str(tmp_path), "status")
    assert r.returncode == 3
    assert r.stderr.strip() == (
        f"error: no supervisor at {tmp_path}/control.sock (is corral supervise running?)"
    )


def test_status_table_shows_flags_and_last_exit() -> None:
    now = 1_000_000.0
    rows = [
        {
            "agent": "relay",
            "state": "RUNNING",
            "last_beat": now - 1.4,
            "uptime": 83 * 60 + 5,
            "restarts": 0,
            "flags": [],
            "last_exit": None,
            "pid": 10,
        },
        {
            "agent": "user1",
            "state": "STOPPED",
            "last_beat": now - 18,
            "uptime": None,
            "restarts": 10,
            "flags": ["restart-exhausted"],
            "last_exit": {"code": 1, "signal": None},
            "pid": None,
        },
    ]
    text = status_table(rows, now=now)
    lines = text.splitlines()
    assert lines[2].split() == ["relay", "RUNNING", "10", "1", "s", "ago", "1h", "23m", "0"]
    assert lines[3].split() == ["user1", "STOPPED", "—", "18", "s", "ago", "—", "10"]
    assert lines[-1] == "user1: restart-exhausted; last exit: exit code 1"


# ---- logs ----------------------------------------------------------------------------


def test_logs_prints_the_last_lines_and_stderr(tmp_path: Path) -> None:
    d = tmp_path / "state"
    out = RotatingLog(d / "logs" / "a" / "stdout.log")
    for i in range(30):
        out.write_line(f"out {i}".encode())
    err = RotatingLog(d / "logs" / "a" / "stderr.log")
    err.write_line(b"Traceback: boom")
    r = corral("ctl", "--state-dir", str(d), "logs", "a", "-n", "3")
    assert (r.returncode, r.stdout.splitlines()) == (0, ["out 27", "out 28", "out 29"])
    r = corral("ctl", "--state-dir", str(d), "logs", "a", "--stderr")
    assert r.stdout == "Traceback: boom\n"
    r = corral("ctl", "--state-dir", str(d), "logs", "nobody")
    assert r.returncode == 2 and r.stderr.startswith("error: id: no log for agent nobody")
    r = corral("ctl", "--state-dir", str(d), "logs", "../a")
    assert r.returncode == 2 and r.stderr.strip() == "error: id: not an agent id"


def test_logs_follow_keeps_every_line_across_rotations(tmp_path: Path) -> None:
    d = tmp_path / "state"
    log = RotatingLog(d / "logs" / "w" / "stdout.log", max_bytes=300, keep=100)
    log.write_line(b"line 0")
    sink = tmp_path / "followed.txt"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with open(sink, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral", "ctl", "--state-dir", str(d), "logs", "w", "-f"],
            stdout=f,
            env=env,
        )
    try:
        wait_for(lambda: sink.read_bytes() == b"line 0\n", timeout=30, what="the first line")
        n = 2000  # ~65 rotations, several of them between two looks of the follower
        for i in range(1, n):
            log.write_line(f"line {i}".encode())
        want = [f"line {i}" for i in range(n)]
        wait_for(
            lambda: sink.read_text().splitlines() == want, timeout=30, what="every line, in order"
        )
        assert len(log.files()) > 10  # it did rotate
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


# ---- corral supervise ----------------------------------------------------------------


def test_supervise_refuses_a_bad_manifest_in_one_line(tmp_path: Path) -> None:
    m = tmp_path / "fleet.toml"
    m.write_text('[[agents]]\nid = "user3"\ncmd = "./user"\nrestart = "sometimes"\n')
    r = corral("supervise", str(m), "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2
    assert r.stderr == f"error: {m}: agent user3: restart: must be always, on-failure or never\n"
    assert not (tmp_path / "s").exists()
    r = corral("supervise", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "missing.toml: cannot read" in r.stderr


def test_corral_help_lists_supervise_and_ctl() -> None:
    r = corral("--help")
    assert r.returncode == 0
    assert "supervise" in r.stdout and "ctl" in r.stdout
