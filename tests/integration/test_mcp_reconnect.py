"""An MCP client keeps its session across a ``corral serve`` restart, even when it
calls while the server is down (``corral.mcp.http``'s reconnecting transport under the
SDK's own client).

Without it, the SDK's client ends its session on the first call that cannot connect
(an ``ExceptionGroup`` holding ``httpx2.ConnectError``). Each test kills a real
``corral serve`` with SIGKILL and starts it again on the same port.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError

import corral
from corral.mcp.http import ReconnectingTransport, connect, mcp_http_client
from tests.integration.test_mcp_transports import Server, _free_port, serve_argv
from tests.support.mcp_text import text_of
from tests.support.worker_app import wait_for

pytestmark = pytest.mark.slow

TOKEN = "s3cret-operator-token"


def _serve(tmp_path: Path) -> tuple[Server, str, str]:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = _free_port()
    argv = serve_argv(url, port, token_file, "--no-monitor")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    server.start()
    return server, url, f"http://127.0.0.1:{port}/mcp"


def _text(result: Any) -> str:
    assert not result.is_error, text_of(result.content[0])
    return text_of(result.content[0])


def _titles(url: str) -> list[str]:
    with corral.connect(url) as c:
        return [t.title for t in sorted(c.list_tasks(), key=lambda t: t.id)]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_call_made_while_the_server_is_down_is_carried_out_once_it_is_back(
    tmp_path: Path, mode: str
) -> None:
    """The server is killed; a call made then waits (its connection is refused, and
    sent again) and is answered once the server is back, exactly once; the session
    then carries on."""
    server, url, endpoint = _serve(tmp_path)
    transport = ReconnectingTransport(reconnect_for=60.0)
    try:

        async def main() -> None:
            async with (
                mcp_http_client(TOKEN, transport=transport) as http,
                connect_with(endpoint, http, mode) as client,
            ):
                assert _text(await client.call_tool("add_task", {"title": "Before"})) == (
                    "Added task 1: Before (priority: medium)"
                )
                await anyio.to_thread.run_sync(server.kill)
                answers: list[str] = []

                async def call_while_down() -> None:
                    result = await client.call_tool("add_task", {"title": "While down"})
                    answers.append(_text(result))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call_while_down)
                    # The call has tried, and been refused, while nothing listens.
                    await anyio.to_thread.run_sync(
                        lambda: wait_for(lambda: transport.refused >= 1, what="a refusal")
                    )
                    assert answers == []
                    await anyio.to_thread.run_sync(server.start)
                assert answers == ["Added task 2: While down (priority: medium)"]
                assert _text(await client.call_tool("add_task", {"title": "After"})) == (
                    "Added task 3: After (priority: medium)"
                )

        anyio.run(main)
        assert _titles(url) == ["Before", "While down", "After"]
    finally:
        server.kill()


def test_a_call_past_the_reconnect_window_fails_alone_and_the_session_lives_on(
    tmp_path: Path,
) -> None:
    """Down for longer than ``reconnect_for``: that call raises ``MCPError`` saying it
    was not sent, nothing is written, and the same session works after the restart
    (``connect``, the documented helper)."""
    server, url, endpoint = _serve(tmp_path)
    try:

        async def main() -> None:
            async with connect(endpoint, token=TOKEN, reconnect_for=0.3) as client:
                _text(await client.call_tool("add_task", {"title": "Before"}))
                await anyio.to_thread.run_sync(server.kill)
                with pytest.raises(MCPError, match="the call was not sent"):
                    await client.call_tool("add_task", {"title": "Lost"})
                await anyio.to_thread.run_sync(server.start)
                assert _text(await client.call_tool("add_task", {"title": "After"})) == (
                    "Added task 2: After (priority: medium)"
                )
                assert "**Next Steps:**" in _text(await client.call_tool("read_state", {}))

        anyio.run(main)
        assert _titles(url) == ["Before", "After"]
    finally:
        server.kill()


def test_a_connection_dropped_after_the_call_was_sent_is_not_sent_again(
    tmp_path: Path,
) -> None:
    """Something accepts the connection and closes it without an answer: the call
    raises ``MCPError`` saying it may have been carried out (it is not repeated), and
    the session works again once corral serve is back."""
    server, url, endpoint = _serve(tmp_path)
    port = server.port
    transport = ReconnectingTransport(reconnect_for=60.0)
    try:

        async def main() -> None:
            async with (
                mcp_http_client(TOKEN, transport=transport) as http,
                connect_with(endpoint, http, "legacy") as client,
            ):
                _text(await client.call_tool("add_task", {"title": "Before"}))
                await anyio.to_thread.run_sync(server.kill)
                accepted = threading.Event()
                with socket.create_server(("127.0.0.1", port)) as listener:

                    def drop_one() -> None:
                        conn, _ = listener.accept()
                        conn.recv(65536)  # the request was sent
                        accepted.set()
                        conn.close()

                    dropper = threading.Thread(target=drop_one, daemon=True)
                    dropper.start()
                    with pytest.raises(MCPError, match="may have been carried out"):
                        await client.call_tool("add_task", {"title": "Dropped"})
                    assert accepted.is_set()
                    dropper.join(timeout=10)
                assert transport.refused == 0
                await anyio.to_thread.run_sync(server.start)
                assert _text(await client.call_tool("add_task", {"title": "After"})) == (
                    "Added task 2: After (priority: medium)"
                )

        anyio.run(main)
        assert _titles(url) == ["Before", "After"]
    finally:
        server.kill()


def connect_with(endpoint: str, http: Any, mode: str) -> Any:
    """The SDK's client over ``http`` (a ``mcp_http_client``)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(streamable_http_client(endpoint, http_client=http), mode=mode)


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_or_nan_reconnect_for_is_invalid_input(value: float) -> None:
    """Bad input to the transport is corral's ``InvalidInputError`` naming the field."""
    with pytest.raises(corral.InvalidInputError) as caught:
        ReconnectingTransport(reconnect_for=value)
    assert caught.value.field == "reconnect_for"
