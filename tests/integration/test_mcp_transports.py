"""corral's MCP server through its real transports, with the SDK's own client:

- stdio: a real ``corral mcp`` subprocess against a temporary SQLite file;
- streamable HTTP: ``build_http_app`` under uvicorn in a subprocess, killed and
  restarted on the same port while the same client keeps working;
- ``corral serve``: the same client through ``/mcp`` with the bearer token, across a
  restart of the server.

Each runs anti-idle.md scenario 3 (capacity), a claim-complete round trip through
tools only, and bad input that answers ``ERROR:`` and changes nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import corral
from tests.support.mcp_text import TOOLS, text_of

pytestmark = pytest.mark.slow

UVICORN = """
import sys, uvicorn, corral
from corral.mcp import build_http_app
uvicorn.run(build_http_app(corral.connect(sys.argv[1])), host="127.0.0.1",
            port=int(sys.argv[2]), log_level="warning")
"""


# --- helpers -----------------------------------------------------------------------------
Call = Any


def _caller(client: Client) -> Call:
    async def call(name: str, **args: Any) -> str:
        result = await client.call_tool(name, args)
        text = text_of(result.content[0])
        assert bool(result.is_error) == text.startswith("ERROR:"), text
        return text

    return call


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {deadline}s")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def serve_argv(url: str, port: int, token_file: Path, *options: str) -> list[str]:
    """``corral serve`` on ``port`` with ``token_file``, as the installed console script."""
    exe = shutil.which("corral", path=os.path.dirname(sys.executable))
    assert exe, "the corral console script is not installed in this venv"
    return [
        exe,
        "--url",
        url,
        "serve",
        "--port",
        str(port),
        "--token-file",
        str(token_file),
        *options,
    ]


class Server:
    """A server process that can be killed and started again on the same port."""

    def __init__(self, argv: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.argv, self.port, self.env = argv, port, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL)
        _wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            _kill(self.proc)

    def restart(self) -> None:
        self.kill()
        self.start()


# --- the scenarios, run over every transport ------------------------------------------------
async def listing(client: Client) -> None:
    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
    prompts = {p.name for p in (await client.list_prompts()).prompts}
    assert prompts == {"worker_protocol", "manager_protocol"}
    worker = await client.get_prompt("worker_protocol", {"agent_id": "Node-A7B3"})
    assert "STEP 2: IDLE DETECTION & SELF-TERMINATION" in text_of(worker.messages[0].content)


async def capacity_scenario(call: Call) -> None:
    """anti-idle.md scenario 3: 1 manager + 3 developers; a 5th is refused; one
    developer terminates; the 5th then registers at 4/4."""
    assert await call(
        "register_node", agent_id="Node-BM", role="bootstrap_manager", model_name="claude-opus-4"
    ) == ("Node Node-BM registered as bootstrap_manager (high). Active nodes: 1/4")
    for i in (1, 2, 3):
        assert await call(
            "register_node", agent_id=f"Node-D{i}", role="developer", model_name="claude-sonnet-4-5"
        ) == (f"Node Node-D{i} registered as developer (high). Active nodes: {i + 1}/4")
    refused = "ERROR: Cluster at capacity (4 nodes). Registration rejected."
    assert (
        await call(
            "register_node", agent_id="Node-D4", role="developer", model_name="claude-sonnet-4-5"
        )
        == refused
    )
    assert await call("set_agent_status", agent_id="Node-D1", status="terminated") == (
        "Node Node-D1 is now terminated"
    )
    assert await call(
        "register_node", agent_id="Node-D4", role="developer", model_name="claude-sonnet-4-5"
    ) == ("Node Node-D4 registered as developer (high). Active nodes: 4/4")


async def round_trip(call: Call, node: str, task_id: int, title: str) -> None:
    """add, claim, complete through tools only; the board ends empty."""
    assert (await call("add_task", title=title, priority="high", agent_id=node)).startswith(
        f"Added task {task_id}: {title} (priority: high"
    )
    assert await call("claim_best_task", agent_id=node, role="developer") == (
        f"Claimed task {task_id}: {title}"
    )
    assert f"| Task: task-{task_id}" in await call("read_state", agent_id=node)
    assert await call("complete_task", agent_id=node, task_id=task_id, result="done") == (
        f"Completed task {task_id}: {title}"
    )
    assert await call("claim_best_task", agent_id=node, role="developer") == (
        "No pending tasks to claim."
    )
    assessment = await call("assess_workload", agent_id="Node-BM")
    assert "Pending Tasks: 0\nIn Progress: 0" in assessment


async def bad_input(call: Call, url: str) -> None:
    """Errors are answers starting ERROR:, and the cluster is unchanged after them."""
    with corral.connect(url) as c:
        before = (c.list_nodes(), c.list_tasks(), c.events())
    calls: list[tuple[str, dict[str, Any]]] = [
        ("register_node", {"agent_id": "Node-X", "role": "chef", "model_name": "m"}),
        ("register_node", {"agent_id": 12, "role": "developer", "model_name": "m"}),
        ("claim_best_task", {"agent_id": "Node-ghost", "role": "developer"}),
        ("complete_task", {"agent_id": "Node-D2", "task_id": 1}),
        ("set_agent_status", {"agent_id": "Node-D2", "status": "asleep"}),
        ("add_task", {"title": ""}),
        ("no_such_tool", {}),
    ]
    for name, args in calls:
        assert (await call(name, **args)).startswith("ERROR: "), name
    with corral.connect(url) as c:
        assert (c.list_nodes(), c.list_tasks(), c.events()) == before


# --- stdio -------------------------------------------------------------------------------
def test_stdio_corral_mcp_subprocess(tmp_path: Path) -> None:
    """``corral --url sqlite:///… mcp`` spoken to over stdio by the SDK's client."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    corral_exe = shutil.which("corral", path=os.path.dirname(sys.executable))
    assert corral_exe, "the corral console script is not installed in this venv"
    params = StdioServerParameters(command=corral_exe, args=["--url", url, "mcp"])

    async def main() -> None:
        async with Client(params, mode="legacy") as client:
            call = _caller(client)
            await listing(client)
            await capacity_scenario(call)
            await round_trip(call, "Node-D4", 1, "Implement user authentication")
            await bad_input(call, url)

    anyio.run(main)


# --- streamable HTTP -----------------------------------------------------------------------
@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[Server, str, str]]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    port = _free_port()
    server = Server([sys.executable, "-c", UVICORN, url, str(port)], port)
    server.start()
    try:
        yield server, url, f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_streamable_http_survives_a_server_restart(
    http_server: tuple[Server, str, str], mode: str
) -> None:
    """The scenarios over streamable HTTP; then the server process is killed and
    started again on the same port, and the same client carries on."""
    server, url, endpoint = http_server

    async def main() -> None:
        async with Client(endpoint, mode=mode) as client:
            call = _caller(client)
            await listing(client)
            await capacity_scenario(call)
            await round_trip(call, "Node-D4", 1, "Implement user authentication")
            await bad_input(call, url)
            await anyio.to_thread.run_sync(server.restart)
            await round_trip(call, "Node-D4", 2, "Write tests")
            assert "🟢 Node-D4: developer" in await call("read_state")
            await listing(client)

    anyio.run(main)


# --- through corral serve ---------------------------------------------------------------------
def test_corral_serve_mounts_mcp_and_survives_a_restart(tmp_path: Path) -> None:
    """``corral serve`` answers MCP at ``/mcp`` behind its bearer token; refuses a
    client without it; the same client keeps working after serve is restarted; and
    ``corral --url http://… mcp`` (stdio over the HTTP client) works against it."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-operator-token\n")
    token_file.chmod(0o600)
    port = _free_port()
    argv = serve_argv(url, port, token_file)
    corral_exe = argv[0]
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    server.start()
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:

        async def main() -> None:
            anonymous = httpx2.AsyncClient()
            with pytest.raises(Exception):  # noqa: B017 - any refusal; checked below
                async with Client(streamable_http_client(endpoint, http_client=anonymous)):
                    pass
            r = await anonymous.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert r.status_code == 401
            await anonymous.aclose()

            authed = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-operator-token"})
            async with Client(
                streamable_http_client(endpoint, http_client=authed), mode="legacy"
            ) as client:
                call = _caller(client)
                await listing(client)
                await capacity_scenario(call)
                await round_trip(call, "Node-D4", 1, "Implement user authentication")
                await anyio.to_thread.run_sync(server.restart)
                await round_trip(call, "Node-D4", 2, "Write tests")
            await authed.aclose()

            # corral mcp on another machine: stdio in front, the HTTP client behind it.
            remote = StdioServerParameters(
                command=corral_exe,
                args=["--url", f"http://127.0.0.1:{port}", "mcp"],
                env={"CORRAL_TOKEN": "s3cret-operator-token"},
                cwd=tmp_path,
            )
            async with Client(remote, mode="legacy") as client:
                await round_trip(_caller(client), "Node-D4", 3, "Document the API")

        anyio.run(main)
    finally:
        server.kill()


def test_corral_serve_mcp_with_a_node_token_acts_only_as_that_node(tmp_path: Path) -> None:
    """Through ``/mcp``, a node token's tools act only as its node: naming another
    agent is an ``ERROR:`` answer that changes nothing; its own calls work; a
    broadcast goes out as it; a token that is not valid is refused with 401."""
    from corral.server.auth import Tokens

    url = f"sqlite:///{tmp_path / 'corral.db'}"
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-operator-token\n")
    token_file.chmod(0o600)
    node_token = Tokens("s3cret-operator-token").node_token("Node-A1")
    port = _free_port()
    argv = serve_argv(url, port, token_file, "--no-monitor")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    with corral.connect(url) as c:
        c.register_node("Node-B2", "developer")
        c.add_task("Implement user authentication", priority="high")
    server.start()
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:

        async def main() -> None:
            forged = httpx2.AsyncClient(headers={"Authorization": f"Bearer {node_token}x"})
            r = await forged.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert r.status_code == 401
            await forged.aclose()

            as_node = httpx2.AsyncClient(headers={"Authorization": f"Bearer {node_token}"})
            async with Client(
                streamable_http_client(endpoint, http_client=as_node), mode="legacy"
            ) as client:
                call = _caller(client)
                with corral.connect(url) as c:
                    before = (c.list_nodes(), c.list_tasks(), c.events())
                for name, args in [
                    (
                        "register_node",
                        {"agent_id": "Node-B3", "role": "developer", "model_name": "m"},
                    ),
                    ("heartbeat", {"agent_id": "Node-B2"}),
                    ("set_agent_status", {"agent_id": "Node-B2", "status": "terminated"}),
                    ("claim_best_task", {"agent_id": "Node-B2", "role": "developer"}),
                    ("read_state", {"agent_id": "Node-B2"}),
                    ("broadcast", {"message": "hello", "agent_id": "Node-B2"}),
                ]:
                    answer = await call(name, **args)
                    assert answer.startswith(
                        "ERROR: this token acts only as node Node-A1, not 'Node-B"
                    ), (name, answer)
                    assert "agent_id='Node-A1'" in answer
                with corral.connect(url) as c:
                    assert (c.list_nodes(), c.list_tasks(), c.events()) == before

                assert await call(
                    "register_node",
                    agent_id="Node-A1",
                    role="developer",
                    model_name="claude-sonnet-4-5",
                ) == ("Node Node-A1 registered as developer (high). Active nodes: 2/4")
                assert await call("claim_best_task", agent_id="Node-A1", role="developer") == (
                    "Claimed task 1: Implement user authentication"
                )
                assert "Pending Tasks: 0" in await call("assess_workload")
                await call("broadcast", message="taking a break")
            await as_node.aclose()
            with corral.connect(url) as c:
                assert c.get_task(1).assigned_to == "Node-A1"
                sent = [e for e in c.events() if e.kind == "broadcast"]
                assert [(e.node_id, e.data["message"]) for e in sent] == [
                    ("Node-A1", "taking a break")
                ]

        anyio.run(main)
    finally:
        server.kill()
