"""``corral serve`` as a real process: token file created 0600 at first serve, the
remote client works against it, SIGTERM stops it cleanly; ``corral init`` creates
the token too."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import corral
from corral.cli import main
from tests.support.backends.http import free_port


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        assert proc.poll() is None, "corral serve exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError("corral serve did not become healthy")


def test_serve_process_creates_token_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_TOKEN", "CORRAL_URL")}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=tmp_path,
        env=env,
        stderr=log,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        token_file = tmp_path / ".corral" / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert httpx.get(f"{url}/v1/nodes").status_code == 401
        client = corral.connect(url, token=token_file.read_text().strip())
        reg = client.register_node("w1", "developer")
        assert reg.active_nodes == 1
        assert client.read_state().nodes[0].id == "w1"
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    # uvicorn re-raises the signal after its graceful shutdown: -SIGTERM is a clean exit
    text = (tmp_path / "serve.log").read_text()
    assert code in (0, -signal.SIGTERM), text
    assert "monitor stopped" in text


def _serve(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``corral serve ARGS`` in ``cwd``, without a token or URL from the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_TOKEN", "CORRAL_URL")}
    return subprocess.run(
        [sys.executable, "-m", "corral", "serve", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_refuses_a_missing_or_empty_token_file(tmp_path: Path) -> None:
    """A bad --token-file is the error, whatever holds the port: here a listener of the
    test's own (a fixed port such as the default 7070 may be anyone's, corral up's
    included)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        r = _serve(tmp_path, "--port", port, "--token-file", str(tmp_path / "nope"))
        assert r.returncode == 2
        assert "does not exist" in r.stderr
        (tmp_path / "empty").write_text("\n")
        r = _serve(tmp_path, "--port", port, "--token-file", str(tmp_path / "empty"))
        assert r.returncode == 2
        assert r.stderr.splitlines() == [
            f"error: Invalid value for --token-file: token file {tmp_path / 'empty'} is empty"
        ]
    assert not (tmp_path / ".corral").exists()  # nothing made: no store, no token


def test_init_creates_the_token(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    monkeypatch.delenv("CORRAL_URL", raising=False)
    try:
        main(["init"])
    except SystemExit as exc:
        assert exc.code == 0
    token = tmp_path / ".corral" / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) >= 32


def test_node_token_prints_a_token_the_server_accepts_for_that_node_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``corral node token ID`` derives ID's token from the operator token file; the
    token checks as that node (and only it); a bad id exits 2 with one line naming
    the field, and a missing operator token exits 2 saying where to put one."""
    from corral.cli import cli
    from corral.cli._common import run_main
    from corral.server.auth import Tokens

    def run(argv: list[str]) -> int:
        return run_main(cli, argv)

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    (tmp_path / "op").write_text("operator-secret\n")
    assert run(["node", "token", "Node-A1", "--token-file", str(tmp_path / "op")]) == 0
    token = capsys.readouterr().out.strip()
    principal = Tokens("operator-secret").check(token)
    assert principal is not None and principal.node_id == "Node-A1"
    assert not principal.may_act_as("Node-B2")
    assert Tokens("another-secret").check(token) is None

    assert run(["node", "token", "x" * 65, "--token-file", str(tmp_path / "op")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: node_id: node_id is longer than 64 characters"]
    assert run(["node", "token", "Node-A1"]) == 2
    assert "no operator token" in capsys.readouterr().err


def test_serve_fails_at_once_on_a_taken_port_or_an_address_it_cannot_have(
    tmp_path: Path,
) -> None:
    """A port another process listens on: exit 3 and one line naming the address,
    before anything starts (no token file, no database, no monitor). A port out of
    range, or an address this machine does not have: exit 2 naming the option."""

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return _serve(tmp_path, *args)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = serve("--port", str(port))
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(is another corral serve running?)"
    ]
    assert not (tmp_path / ".corral").exists()

    r = serve("--port", "70000")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "--port" in r.stderr
    r = serve("--host", "192.0.2.1")  # TEST-NET-1: never this machine's
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: Invalid value for --host: 192.0.2.1 is not an address of this machine"
    ]
    assert not (tmp_path / ".corral").exists()
    r = serve("--host", "")  # not "every interface" by accident
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "error: Invalid value for --host: must name an address (0.0.0.0 to listen on every "
        "interface)"
    ]
    r = serve("--log-level", "loud")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "--log-level" in r.stderr


def test_serve_logs_each_request_only_when_asked(tmp_path: Path) -> None:
    """--access-log writes uvicorn's line per request; without it, none."""
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_TOKEN", "CORRAL_URL")}
    for flag, logged in (("--access-log", True), ("--no-access-log", False)):
        port = free_port()
        log_path = tmp_path / f"serve{flag}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "corral", "serve", "--port", str(port), flag],
                cwd=tmp_path,
                env=env,
                stderr=log,
                stdout=log,
            )
            try:
                _wait_healthy(f"http://127.0.0.1:{port}", proc)
                assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=15)
        text = log_path.read_text()
        assert ('"GET /healthz HTTP/1.1" 200' in text) is logged, text


def test_sigterm_removes_the_servers_wait_fifo(tmp_path: Path) -> None:
    """A served waiting claim makes the server listen on a FIFO in ``<db>-wait/``;
    SIGTERM ends the process by that signal and its FIFO is gone (uvicorn re-raises
    the signal after its graceful shutdown, so ``atexit`` handlers do not run)."""
    port = free_port()
    db = tmp_path / "c.db"
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_TOKEN", "CORRAL_URL")}
    env["CORRAL_TOKEN"] = "sigterm-token"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "--url",
            f"sqlite:///{db}",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-monitor",
        ],
        cwd=tmp_path,
        env=env,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer sigterm-token"}
    wait_dir = tmp_path / "c.db-wait"
    answers: list[object] = []

    def claim(wait: float) -> None:
        try:
            r = httpx.post(
                f"{url}/v1/nodes/n1/claim", json={"wait": wait}, headers=auth, timeout=60
            )
            # the claim cut short by the shutdown may get uvicorn's own plain 500
            answers.append(
                r.json() if r.headers.get("content-type") == "application/json" else r.status_code
            )
        except httpx.HTTPError as exc:
            answers.append(exc)

    waiting = threading.Thread(target=claim, args=(60,))
    try:
        _wait_healthy(url, proc)
        assert (
            httpx.post(
                f"{url}/v1/nodes", json={"node_id": "n1", "role": "developer"}, headers=auth
            ).status_code
            == 200
        )
        claim(0.2)  # a waiting claim that found nothing
        assert answers == [{"task": None, "text": "No pending tasks to claim."}]
        fifos = [p for p in wait_dir.iterdir() if p.name.startswith(f"{proc.pid}-")]
        assert len(fifos) == 1 and stat.S_ISFIFO(fifos[0].stat().st_mode)
        waiting.start()  # and one likely still waiting when the signal comes
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
            waiting.join(timeout=15) if waiting.ident else None
    assert code == -signal.SIGTERM, (tmp_path / "serve.log").read_text()
    assert [p.name for p in wait_dir.iterdir()] == []
