"""The supervisor's process layer with real processes: spawn (session, environment
contract, marker, rlimits through prlimit), exits seen through pidfds on an asyncio
loop, group signals, pid + start time identity, the marker search, the subreaper,
and the atomic pids.json."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from corral.supervisor.manifest import AgentSpec, parse_manifest
from corral.supervisor.policy import Exit
from corral.supervisor.process import (
    Child,
    ExitWatcher,
    adopt,
    child_env,
    find_marked,
    same_process,
    signal_group,
    spawn,
)
from corral.supervisor.state import PidFile

PY = sys.executable


def agent(tmp_path: Path, code: str, **extra: object) -> AgentSpec:
    m = parse_manifest({"agents": [{"id": "a1", "cmd": PY, "args": ["-c", code], **extra}]})
    return m.agents[0]


def start(tmp_path: Path, spec: AgentSpec, state_dir: Path | None = None) -> Child:
    state_dir = state_dir or tmp_path / "state"
    env, _ = child_env(spec, state_dir=state_dir, url="http://127.0.0.1:1", token="tok")
    out = os.open(tmp_path / "out.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = os.open(tmp_path / "err.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        return spawn(spec, env=env, cwd=None, stdout_fd=out, stderr_fd=err)
    finally:
        os.close(out)
        os.close(err)


def wait_exit(child: Child) -> Exit:
    """Run a loop until the watcher reports the exit of ``child``."""

    async def main() -> Exit:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Exit] = loop.create_future()
        ExitWatcher(loop).watch(child, fut.set_result)
        return await asyncio.wait_for(fut, 20)

    return asyncio.run(main())


def until(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_spawn_own_session_with_the_environment_contract_and_marker(tmp_path: Path) -> None:
    code = (
        "import os,json;print(json.dumps({k:os.environ.get(k) for k in "
        "['CORRAL_URL','CORRAL_AGENT_ID','CORRAL_TOKEN','CORRAL_SUPERVISOR','MINE']}));"
        "print(os.getpid(),os.getpgid(0),os.getsid(0))"
    )
    spec = agent(tmp_path, code, env={"MINE": "x", "CORRAL_AGENT_ID": "spoof"})
    child = start(tmp_path, spec)
    assert wait_exit(child).code == 0
    lines = (tmp_path / "out.log").read_text().splitlines()
    env = json.loads(lines[0])
    assert env == {
        "CORRAL_URL": "http://127.0.0.1:1",
        "CORRAL_AGENT_ID": "a1",  # the manifest cannot override the contract
        "CORRAL_TOKEN": "tok",
        "CORRAL_SUPERVISOR": str((tmp_path / "state").resolve()),
        "MINE": "x",
    }
    pid, pgid, sid = map(int, lines[1].split())
    assert pid == pgid == sid == child.pid


def test_exit_code_and_signal_come_from_the_pidfd(tmp_path: Path) -> None:
    ex = wait_exit(start(tmp_path, agent(tmp_path, "raise SystemExit(3)")))
    assert (ex.code, ex.signal) == (3, None)
    child = start(tmp_path, agent(tmp_path, "import time; time.sleep(30)"))
    os.kill(child.pid, signal.SIGKILL)
    ex = wait_exit(child)
    assert (ex.code, ex.signal, ex.describe()) == (None, signal.SIGKILL, "killed by SIGKILL")
    assert child.popen is not None and child.popen.returncode == -signal.SIGKILL


def test_exit_of_a_non_child_is_seen_with_status_unknown(tmp_path: Path) -> None:
    # sh starts sleep in the background and exits: sleep is not our child
    out = subprocess.run(
        ["sh", "-c", "sleep 0.5 >/dev/null 2>&1 & echo $!"], capture_output=True, check=True
    )
    pid = int(out.stdout)
    started = psutil.Process(pid).create_time()
    child = adopt(pid, started)
    assert child is not None and child.adopted
    t0 = time.monotonic()
    ex = wait_exit(child)
    assert not ex.known and ex.describe() == "unknown"
    assert time.monotonic() - t0 < 5


def test_memory_rlimit_is_enforced_through_prlimit(tmp_path: Path) -> None:
    grab = "b = bytearray(400 * 1024 * 1024); print('got it')"
    limited = agent(tmp_path, grab, rlimits={"memory": 200 * 1024 * 1024, "open_files": 64})
    child = start(tmp_path, limited)

    # the pid is the agent's own process (prlimit execs it), with the limits set
    def execed_or_gone() -> bool:
        try:
            return psutil.Process(child.pid).cmdline()[:1] == [PY]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return True  # it already failed its allocation and exited

    until(execed_or_gone, what="the agent exec'd")
    ex = wait_exit(child)
    assert ex.code == 1, (tmp_path / "err.log").read_text()
    assert "MemoryError" in (tmp_path / "err.log").read_text()
    unlimited = agent(tmp_path, grab)
    assert wait_exit(start(tmp_path, unlimited)).code == 0
    assert "got it" in (tmp_path / "out.log").read_text()


def test_under_prlimit_the_pid_is_the_agent_itself(tmp_path: Path) -> None:
    code = "import time; print('up', flush=True); time.sleep(30)"
    child = start(tmp_path, agent(tmp_path, code, rlimits={"memory": 10**9}))
    try:
        until(lambda: "up" in (tmp_path / "out.log").read_text(), what="agent up")
        assert psutil.Process(child.pid).cmdline() == [PY, "-c", code]
        assert psutil.Process(child.pid).rlimit(psutil.RLIMIT_AS) == (10**9, 10**9)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        wait_exit(child)


def test_open_files_rlimit_is_visible_to_the_agent(tmp_path: Path) -> None:
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))"
    child = start(tmp_path, agent(tmp_path, code, rlimits={"open_files": 77}))
    assert wait_exit(child).code == 0
    assert (tmp_path / "out.log").read_text().strip() == "(77, 77)"


def test_signal_group_reaches_every_process_of_the_group(tmp_path: Path) -> None:
    code = (
        "import subprocess,sys,time;"
        "p=subprocess.Popen(['sleep','60']);print(p.pid,flush=True);time.sleep(60)"
    )
    child = start(tmp_path, agent(tmp_path, code))
    until(lambda: (tmp_path / "out.log").read_text().strip() != "", what="grandchild pid")
    grandchild = int((tmp_path / "out.log").read_text())
    assert signal_group(child.pid, signal.SIGTERM)
    assert wait_exit(child).signal == signal.SIGTERM
    until(lambda: gone(grandchild), what="grandchild gone")


def test_same_process_checks_the_start_time(tmp_path: Path) -> None:
    child = start(tmp_path, agent(tmp_path, "import time; time.sleep(30)"))
    try:
        assert same_process(child.pid, child.start_time)
        # the same pid with another start time: a reused pid, not our process
        assert not same_process(child.pid, child.start_time - 100)
        assert adopt(child.pid, child.start_time - 100) is None
    finally:
        os.kill(child.pid, signal.SIGKILL)
        wait_exit(child)
    assert not same_process(child.pid, child.start_time)


def test_find_marked_by_environment_not_command(tmp_path: Path) -> None:
    spec = agent(tmp_path, "import time; time.sleep(30)")
    mine = start(tmp_path, spec, tmp_path / "state")
    other = start(tmp_path, spec, tmp_path / "other")
    try:
        found = {p.pid for p in find_marked(tmp_path / "state")}
        assert mine.pid in found and other.pid not in found
        assert {p.pid for p in find_marked(tmp_path / "state", "a1")} == {mine.pid}
        assert find_marked(tmp_path / "state", "nobody") == []
    finally:
        for c in (mine, other):
            os.kill(c.pid, signal.SIGKILL)
            wait_exit(c)


def test_subreaper_receives_orphaned_descendants(tmp_path: Path) -> None:
    script = (
        "import os,subprocess,sys;"
        "from corral.supervisor.process import set_subreaper;"
        "assert set_subreaper();"
        "out=subprocess.run(['sh','-c','sleep 30 >/dev/null 2>&1 & echo $!'],"
        "capture_output=True,check=True).stdout;"
        "pid=int(out);"
        "import psutil;print(psutil.Process(pid).ppid()==os.getpid());"
        "os.kill(pid,9);print(os.waitpid(pid,0)[0]==pid)"
    )
    out = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_pid_file_is_replaced_atomically(tmp_path: Path) -> None:
    pf = PidFile(tmp_path / "s" / "pids.json")
    assert pf.load() == {"agents": {}}
    pf.save({"agents": {"a1": {"pid": 12, "start_time": 1.5}}})
    assert pf.load()["agents"] == {"a1": {"pid": 12, "start_time": 1.5}}
    assert (pf.path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in pf.path.parent.iterdir()] == ["pids.json"]  # no temp left
    pf.path.write_text("{torn")
    assert pf.load() == {"agents": {}}
