"""An operation is declared in one place: its ``Cluster`` method (typed parameters
carrying their rules, a docstring) and its registry entry. Added here at test time,
with no other code, it is on every surface: an HTTP route with its OpenAPI entry and
validation, an MCP tool with its schema, a remote client method and a CLI command;
a bad argument is refused with the same rule's message on each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client as McpClient

import corral
from corral import operations
from corral.cli import cli
from corral.clock import FakeClock
from corral.errors import InvalidInputError
from corral.mcp import build_server
from corral.model import Event
from corral.operations import Operation
from corral.params import Message, NodeId
from corral.validation import ID, checked
from tests.support.backends.http import TOKEN, free_port, start_uvicorn, stop_uvicorn
from tests.support.mcp_text import text_of

TOO_LONG = "n" * 65  # one past the id rule's 64 characters
RULE_MESSAGE = "node_id is longer than 64 characters"  # validation.ID's, naming the parameter


@checked
def greet(self: corral.Cluster, node_id: NodeId, message: Message = "hello") -> Event:
    """Greet a node: a broadcast every node sees, naming it."""
    return self.broadcast(f"{message}, {node_id}")


GREET = Operation("greet", "POST /v1/greetings", mcp="greet", text="broadcast_text", cli="greet")


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one place: the method and its registry entry, nothing else."""
    monkeypatch.setattr(corral.Cluster, "greet", greet, raising=False)
    monkeypatch.setattr(operations, "OPERATIONS", (*operations.OPERATIONS, GREET))


@pytest.fixture
def served(added: None, tmp_path: Path) -> Iterator[tuple[corral.Cluster, str]]:
    from corral.server import create_app

    cluster = corral.connect(f"sqlite:///{tmp_path / 'c.db'}", clock=FakeClock())
    assert isinstance(cluster, corral.Cluster)  # a database URL gives the embedded client
    port = free_port()
    server, thread = start_uvicorn(create_app(cluster, token=TOKEN, monitor=False, mcp=False), port)
    try:
        yield cluster, f"http://127.0.0.1:{port}"
    finally:
        stop_uvicorn(server, thread)
        cluster.close()


def test_the_embedded_client_runs_the_rule_from_the_annotation(added: None, tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}", clock=FakeClock()) as c:
        assert c.greet("w1").data["message"] == "hello, w1"  # type: ignore[attr-defined]
        with pytest.raises(InvalidInputError) as bad:
            c.greet(TOO_LONG)  # type: ignore[attr-defined]
        assert (bad.value.field, bad.value.message) == ("node_id", RULE_MESSAGE)


def test_http_route_openapi_entry_and_validation(served: tuple[corral.Cluster, str]) -> None:
    _, url = served
    with corral.connect(url, token=TOKEN) as remote:
        assert isinstance(remote, corral.remote.HttpClient)
        ok = remote.request("POST", "/v1/greetings", {"node_id": "w1", "message": "hi"})
        assert ok["kind"] == "broadcast" and ok["data"]["message"] == "hi, w1"
        doc = remote.request("GET", "/openapi.json")
        entry = doc["paths"]["/v1/greetings"]["post"]
        assert entry["operationId"] == "greet"
        assert entry["summary"] == "Greet a node: a broadcast every node sees, naming it."
        body = entry["requestBody"]["content"]["application/json"]["schema"]
        schema = doc["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        assert schema["properties"]["node_id"] == {**ID.json_schema(), "title": "Node Id"}
        assert schema["required"] == ["node_id"]
        status, raw = _post(url, {"node_id": TOO_LONG})
        assert status == 422
        assert json.loads(raw)["error"] == {
            "code": "invalid_input",
            "message": RULE_MESSAGE,
            "field": "node_id",
        }


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{url}/v1/greetings",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_remote_client_method(served: tuple[corral.Cluster, str]) -> None:
    _, url = served
    with corral.connect(url, token=TOKEN) as remote:
        answer = remote.greet("w2", message="hey")  # type: ignore[attr-defined]
        assert answer["data"]["message"] == "hey, w2"
        with pytest.raises(InvalidInputError) as bad:
            remote.greet(TOO_LONG)  # type: ignore[attr-defined]
        assert (bad.value.field, bad.value.message) == ("node_id", RULE_MESSAGE)


def test_mcp_tool_with_its_schema(added: None, tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}", clock=FakeClock()) as cluster:

        async def main() -> tuple[Any, list[tuple[bool, str]]]:
            async with McpClient(build_server(cluster)) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                answers = []
                for args in ({"node_id": "w3"}, {"node_id": TOO_LONG}):
                    result = await client.call_tool("greet", args)
                    answers.append((bool(result.is_error), text_of(result.content[0])))
                return tools["greet"], answers

        tool, answers = anyio.run(main)
    assert tool.description == "Greet a node: a broadcast every node sees, naming it."
    props = tool.input_schema["properties"]  # the rule's schema, described by the rule
    assert props["node_id"] == {**ID.json_schema(), "title": "Node Id", "description": ID.doc}
    assert tool.input_schema["required"] == ["node_id"]
    assert answers[0][0] is False and "w3" in answers[0][1]
    assert answers[1][0] is True
    assert answers[1][1].startswith("ERROR:") and RULE_MESSAGE in answers[1][1]


def test_cli_command(added: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    runner = CliRunner()
    ok = runner.invoke(cli, ["--url", url, "greet", "--node-id", "w4", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["data"]["message"] == "hello, w4"
    assert "Greet a node" in runner.invoke(cli, ["greet", "--help"]).output
    from corral.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["--url", url, "greet", "--node-id", TOO_LONG])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and RULE_MESSAGE in err[0], err
