"""The operator's tools over ``corral serve``'s ``/mcp`` (the official MCP client): the
operator's token (and a named operator token) may cancel and requeue tasks, its events
naming the token; a node's token, which acts only as its node, is refused with an
``ERROR:`` answer that changes nothing, as ``/v1`` refuses it with 403."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import corral
from corral.mcp.http import connect as mcp_connect
from corral.server import create_app
from corral.server.auth import Tokens
from tests.support.backends.http import free_port, start_uvicorn, stop_uvicorn

OPERATOR = "operator-token-for-mcp-tools"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[corral.Cluster]:
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(c, corral.Cluster)
    yield c
    c.close()


def test_only_an_operator_token_cancels_or_requeues_over_mcp(cluster: corral.Cluster) -> None:
    cluster.register_node("w1", "developer")
    task = cluster.add_task("Implement the parser")
    other = cluster.add_task("Implement the lexer")
    named = cluster.create_token("night-shift", "operator").token
    assert named is not None
    node = Tokens(OPERATOR).node_token("w1")
    port = free_port()
    server, thread = start_uvicorn(create_app(cluster, token=OPERATOR, monitor=False), port)
    url = f"http://127.0.0.1:{port}/mcp"

    async def call(token: str, tool: str, **args: object) -> tuple[bool, str]:
        async with mcp_connect(url, token=token, reconnect_for=0) as client:
            result = await client.call_tool(tool, args)
            return bool(result.is_error), result.content[0].text  # type: ignore[union-attr]

    try:
        before = [e.seq for e in cluster.events()]
        refused = [
            anyio.run(lambda: call(node, "cancel_task", task_id=task.id)),
            anyio.run(lambda: call(node, "cancel_tasks", dry_run=False)),
            anyio.run(lambda: call(node, "requeue_tasks")),
        ]
        assert [e.seq for e in cluster.events()] == before
        done = anyio.run(lambda: call(named, "cancel_task", task_id=task.id, reason="dup"))
        batch = anyio.run(lambda: call(OPERATOR, "cancel_tasks", dry_run=False))
    finally:
        stop_uvicorn(server, thread)
    for error, text in refused:
        assert error and text.startswith("ERROR:") and "operator" in text, text
    assert done == (False, f"Task {task.id} cancelled (cancelled by token:night-shift: dup)")
    assert batch == (False, f"1 task changed: {other.id}")
    actors = [e.data["actor"] for e in cluster.events() if e.kind == "task_cancelled"]
    assert actors == ["token:night-shift", "operator"]
