"""The supervisor's two long-lived processes stay small (issue 17's RSS target): the
log daemon and the `corral supervise` process load only what they use. Each check
runs the bootstrap those processes run (``corral.supervisor.boot``) in a fresh
interpreter and looks at what got imported; the end-to-end test runs the real
`corral supervise` and checks it continued in that process under its own pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from corral.errors import StoreUnavailableError
from corral.supervisor import boot
from corral.supervisor.control import request
from corral.supervisor.process import find_marked

PY = sys.executable

# What the library's users get from `import corral`, and the CLI: never in either daemon.
HEAVY = {
    "corral.client",
    "corral.cluster",
    "corral.store",
    "corral.monitor",
    "corral.model",
    "corral.cli",
    "click",
}


def imported_by(*modules: str) -> set[str]:
    """The modules a fresh interpreter has after the bootstrap and ``modules``."""
    code = boot.preamble() + "".join(f"import {m}\n" for m in modules)
    code += "import json\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout))


def test_the_log_daemon_loads_neither_the_manifest_nor_corrals_api() -> None:
    mods = imported_by("corral.supervisor.logd_server")
    assert "corral.supervisor.logd_server" in mods and "corral.supervisor.logs" in mods
    unwanted = HEAVY | {
        "corral.supervisor.manifest",
        "corral.supervisor.policy",
        "tomllib",
        "dataclasses",
        "asyncio",
        "pathlib",
        "typing",
        "threading",
        "argparse",
        "subprocess",
        "ssl",
    }
    assert mods & unwanted == set()


def test_the_supervisor_process_loads_no_client_cli_or_click() -> None:
    mods = imported_by(
        "corral.supervisor.entry",
        "corral.supervisor.supervisor",
        "corral.supervisor.control",
        "corral.supervisor.commands",
    )
    assert "asyncio" in mods and "corral.supervisor.supervisor" in mods
    assert mods & (HEAVY | {"argparse", "uuid", "ctypes.util", "shutil"}) == set()


def test_start_logd_runs_the_lean_daemon() -> None:
    argv = boot.argv("corral.supervisor.logd_server:boot_main", "corral.supervisor.logd", "D", "7")
    assert argv[:2] == [PY, "-c"] and argv[3:] == ["corral.supervisor.logd", "D", "7"]
    assert "import corral\n" not in argv[2] and "sys.modules['corral'] = pkg" in argv[2]


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def _env() -> dict[str, str]:
    e = dict(os.environ)
    for k in ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN", "CORRAL_URL"):
        e.pop(k, None)
    return e


def test_corral_supervise_continues_lean_under_its_own_pid(tmp_path: Path) -> None:
    manifest = tmp_path / "fleet.toml"
    manifest.write_text('[[agents]]\nid = "a"\ncmd = "sleep"\nargs = ["300"]\nheartbeat = "none"\n')
    state = tmp_path / ".corral" / "supervisor"  # the default state dir, under the cwd
    cmd = [PY, "-X", "faulthandler", "-m", "corral", "supervise", "fleet.toml"]
    out = tmp_path / "supervise.out"
    with open(out, "wb") as f:
        sup = subprocess.Popen(
            cmd,
            env=_env(),
            start_new_session=True,
            cwd=tmp_path,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:

        def running() -> int | None:
            assert sup.poll() is None, out.read_text()
            try:
                rows = request(state / "control.sock", "status", timeout=10)
            except StoreUnavailableError:
                return None
            return rows[0]["pid"] if rows[0]["state"] == "RUNNING" else None

        child = wait_for(running, what="agent a RUNNING")
        # the same process (the one the caller started and signals), now the lean one
        me = psutil.Process(sup.pid)
        assert "corral-supervise" in me.cmdline() and "-c" in me.cmdline()
        flags = me.cmdline()[1 : me.cmdline().index("-c")]
        assert "faulthandler" in flags  # the interpreter's options are kept
        assert psutil.Process(child).ppid() == sup.pid
        logd = psutil.Process(int((state / "logd.pid").read_text().split()[0]))
        assert "corral.supervisor.logd" in logd.cmdline()
        files = [
            "pids.json",
            "control.sock",
            "logs/a/stdout.log",
            "logs/a/stderr.log",
            "logs/supervisor/state.log",
            "logs/supervisor/supervisor.log",
        ]
        assert [f for f in files if not (state / f).exists()] == []
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        sup.send_signal(signal.SIGTERM)  # handled by the continued process: cascade stop
        assert sup.wait(30) == 0
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
        for p in find_marked(state):  # agents outlive a killed supervisor
            with contextlib.suppress(psutil.Error):
                p.kill()
        try:
            with open(state / "logd.pid") as pidfile:
                os.kill(int(pidfile.read().split()[0]), signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass


def test_a_second_supervisor_on_the_same_state_dir_says_why_in_one_line(tmp_path: Path) -> None:
    manifest = tmp_path / "fleet.toml"
    manifest.write_text('[[agents]]\nid = "a"\ncmd = "sleep"\nargs = ["300"]\nheartbeat = "none"\n')
    state = tmp_path / "state"
    cmd = [PY, "-m", "corral", "supervise", str(manifest), "--state-dir", str(state)]
    first = subprocess.Popen(
        cmd,
        env=_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (state / "control.sock").exists(), what="the first supervisor")
        second = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert second.stderr == f"error: another supervisor holds {state / 'control.sock'}\n"
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        try:
            with open(state / "logd.pid") as pidfile:
                os.kill(int(pidfile.read().split()[0]), signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass


def test_the_command_called_in_process_is_not_replaced() -> None:
    # a program that calls the CLI in-process (this test runner) keeps its process:
    # only the `corral` program itself re-executes (checked end to end above)
    from corral.cli.supervise import _is_the_corral_program

    assert _is_the_corral_program() is False
    code = (
        "import sys; sys.argv[0] = 'corral'\n"
        "from corral.cli.supervise import _is_the_corral_program as f\nprint(f())"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"  # named corral, but its main is not corral's
