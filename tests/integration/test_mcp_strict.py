"""Strict MCP tool arguments: exact JSON types, no unknown arguments, on every transport.

Each call below would have been coerced or had an argument dropped by the SDK's lax
validation (``task_id=true`` completed task 1; ``prority`` was ignored). Each must be
an ``ERROR:`` answer naming the argument, with the nodes, the tasks and the event log
unchanged: in-process, over stdio (a real ``corral mcp``) and over ``corral serve``'s
``/mcp`` (streamable HTTP), each with the SDK's own client.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import corral
from corral.mcp import build_server
from tests.integration.test_mcp_transports import Server, _free_port, serve_argv
from tests.support.mcp_text import text_of

# (tool, arguments, the argument the answer must name)
STRICT_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("complete_task", {"agent_id": "N1", "task_id": True}, "task_id"),
    ("complete_task", {"agent_id": "N1", "task_id": 1.0}, "task_id"),
    ("complete_task", {"agent_id": "N1", "task_id": 1, "epoch": "1"}, "epoch"),
    ("complete_task", {"agent_id": "N1", "task_id": 1, "epoch": 1.0}, "epoch"),
    ("complete_task", {"agent_id": "N1", "task_id": 1, "epoch": True}, "epoch"),
    ("complete_task", {"agent_id": "N1", "task_id": 1, "reslt": "done"}, "reslt"),
    ("fail_task", {"agent_id": "N1", "task_id": 1, "retry": "false"}, "retry"),
    ("fail_task", {"agent_id": "N1", "task_id": 1, "retry": 0}, "retry"),
    ("fail_task", {"agent_id": "N1", "task_id": 1, "epoch": "1"}, "epoch"),
    (
        "register_node",
        {"agent_id": "N9", "role": "developer", "model_name": "m", "heartbeat_interval": "5"},
        "heartbeat_interval",
    ),
    (
        "register_node",
        {"agent_id": "N9", "role": "developer", "model_name": "m", "heartbeat_interval": True},
        "heartbeat_interval",
    ),
    (
        "register_node",
        {"agent_id": "N9", "role": "developer", "model_name": "m", "strenght": "high"},
        "strenght",
    ),
    ("heartbeat", {"agent_id": "N1", "capacity_available": "3"}, "capacity_available"),
    ("heartbeat", {"agent_id": "N1", "capacity_available": 3.0}, "capacity_available"),
    ("heartbeat", {"agent_id": "N1", "current_tasks": [True]}, "current_tasks.0"),
    ("heartbeat", {"agent_id": "N1", "current_tasks": "[1]"}, "current_tasks"),
    ("heartbeat", {"agent_id": "N1", "metrics": '{"cpu_usage": 5}'}, "metrics"),
    (
        "set_agent_status",
        {"agent_id": "N1", "status": "working", "current_task_id": True},
        "current_task_id",
    ),
    ("add_task", {"title": "Write tests", "prority": "high"}, "prority"),
    ("add_task", {"title": 5}, "title"),
    ("broadcast", {"message": "hi", "agent_id": "N1", "urgent": True}, "urgent"),
    ("read_state", {"agent_id": True}, "agent_id"),
    ("assess_workload", {"verbose": True}, "verbose"),
    ("claim_best_task", {"agent_id": "N1", "role": ["developer"]}, "role"),
]


def _prepare(url: str) -> None:
    """N1 holds task 1 (so a coerced ``task_id=true`` would complete it), task 2 waits."""
    with corral.connect(url) as c:
        c.register_node("N1", "developer")
        c.add_task("Implement it", priority="high")
        claimed = c.claim_best_task("N1", "developer")
        assert claimed is not None and claimed.id == 1
        c.add_task("Write the docs")


def _snapshot(url: str) -> tuple[Any, ...]:
    with corral.connect(url) as c:
        return (c.list_nodes(), c.list_tasks(), c.events())


async def _refuse_all(client: Client, url: str) -> None:
    before = _snapshot(url)
    for name, args, field in STRICT_CALLS:
        result = await client.call_tool(name, args)
        answer = text_of(result.content[0])
        assert result.is_error, (name, args, answer)
        assert answer.startswith(f"ERROR: {name}: "), (name, args, answer)
        assert f"{field}: " in answer, (name, args, answer)
        assert answer.endswith("Check the tool's arguments and call again."), answer
    assert _snapshot(url) == before
    # The same calls with the right types still work: the rule is on types, not values.
    ok = await client.call_tool("complete_task", {"agent_id": "N1", "task_id": 1, "epoch": 1})
    assert (ok.is_error, text_of(ok.content[0])) == (False, "Completed task 1: Implement it")


def test_the_published_schemas_are_closed(tmp_path: Path) -> None:
    """Every tool's input schema says it takes no argument it does not name."""
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:

        async def main() -> None:
            async with Client(build_server(c)) as client:
                for tool in (await client.list_tools()).tools:
                    assert tool.input_schema.get("additionalProperties") is False, tool.name

        anyio.run(main)


def test_answers_name_the_argument_and_the_types(tmp_path: Path) -> None:
    """The answer says what was expected and what came, for each wrong argument."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _prepare(url)
    with corral.connect(url) as c:

        async def main() -> list[str]:
            async with Client(build_server(c)) as client:
                answers = []
                calls: list[tuple[str, dict[str, Any]]] = [
                    ("complete_task", {"agent_id": "N1", "task_id": True, "epoch": 1.0}),
                    ("add_task", {"title": "Write tests", "prority": "high"}),
                    ("register_node", {"agent_id": "N2", "role": "developer"}),
                ]
                for name, args in calls:
                    answers.append(text_of((await client.call_tool(name, args)).content[0]))
                return answers

        answers = anyio.run(main)
    assert answers == [
        "ERROR: complete_task: epoch: expected integer or null, got number 1.0; "
        "task_id: expected integer or string, got boolean true. "
        "Check the tool's arguments and call again.",
        "ERROR: add_task: prority: unknown argument (this tool takes title, description, "
        "priority, role, progress_timeout, timeout, not_before, depends_on, retry_backoff,"
        " agent_id). Check the tool's arguments and call again.",
        "ERROR: register_node: model_name: required argument missing. "
        "Check the tool's arguments and call again.",
    ]


def test_in_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _prepare(url)
    with corral.connect(url) as c:

        async def main() -> None:
            async with Client(build_server(c)) as client:
                await _refuse_all(client, url)

        anyio.run(main)


@pytest.mark.slow
def test_over_stdio(tmp_path: Path) -> None:
    """A real ``corral mcp`` subprocess, the SDK's stdio client."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    _prepare(url)
    corral_exe = shutil.which("corral", path=os.path.dirname(sys.executable))
    assert corral_exe, "the corral console script is not installed in this venv"
    params = StdioServerParameters(command=corral_exe, args=["--url", url, "mcp", "--no-monitor"])

    async def main() -> None:
        async with Client(params, mode="legacy") as client:
            await _refuse_all(client, url)

    anyio.run(main)


@pytest.mark.slow
def test_over_corral_serve_mcp(tmp_path: Path) -> None:
    """``corral serve``'s ``/mcp`` (streamable HTTP), the SDK's HTTP client."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    _prepare(url)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-operator-token\n")
    token_file.chmod(0o600)
    port = _free_port()
    argv = serve_argv(url, port, token_file, "--no-monitor")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    server.start()
    try:

        async def main() -> None:
            endpoint = f"http://127.0.0.1:{port}/mcp"
            headers = {"Authorization": "Bearer s3cret-operator-token"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(endpoint, http_client=http)) as client,
            ):
                await _refuse_all(client, url)

        anyio.run(main)
    finally:
        server.kill()
