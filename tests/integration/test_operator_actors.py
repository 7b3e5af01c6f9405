"""Every operator action's event names its actor (issue 29, the Events panel: "every
state change and operator action with its actor"): a settings change, an agent
added, a process start/stop/restart (the request and its acknowledgement), a spawn
request accepted or declined, a token made or revoked. Called on an embedded SQLite
cluster the actor is the one given (``operator`` when none is); over HTTP, over MCP
and from the dashboard it is the caller's token (``token:NAME``), never the request's
word.
Real SQLite files, a real uvicorn server, the real app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import corral
from corral.cli import cli
from corral.mcp.http import connect as mcp_connect
from corral.model import Event
from corral.server import create_app
from corral.server.auth import Tokens
from tests.support.backends.http import TOKEN, free_port, serving, start_uvicorn, stop_uvicorn

HOST = "host-a"
PROCESS = {"agent": "web", "state": "RUNNING", "pid": 4242, "restarts": 0}
ACTIONS = (
    "settings_changed",
    "agent_added",
    "process_action_requested",
    "process_action_done",
    "spawn_request_accepted",
    "spawn_request_declined",
    "token_created",
    "token_revoked",
)


def _actors(c: Any, since: int = 0) -> list[tuple[str, Any]]:
    """The operator actions' events after ``since``: (kind, actor), oldest first."""
    events: list[Event] = c.events(since=since, limit=10_000)
    return [(e.kind, e.data.get("actor")) for e in events if e.kind in ACTIONS]


def _act_on_everything(c: Any, token: str = "ci", **actor: str) -> None:
    """One call of each operator action (``actor`` given to each, or not); the
    token made and revoked is named ``token``."""
    c.configure(max_agents=7, **actor)
    c.add_agent("agent-1", **actor)
    req = c.request_process_action(HOST, "web", "restart", **actor)
    c.ack_process_action(HOST, req.seq, True, "restart: RUNNING")  # the supervisor's answer
    yes, no = c.request_spawn("dev", "developer"), c.request_spawn("dev", "developer")
    c.accept_spawn_request(yes.id, **actor)
    c.decline_spawn_request(no.id, **actor)
    c.create_token(token, "viewer", **actor)
    c.revoke_token(token, **actor)


def test_an_embedded_cluster_records_the_actor_given_else_the_operator(tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        c.report_processes(HOST, [PROCESS])
        start = c.events(limit=10_000)[-1].seq
        _act_on_everything(c)
        assert _actors(c, start) == [(kind, "operator") for kind in ACTIONS]
        middle = c.events(limit=10_000)[-1].seq
        _act_on_everything(c, "ci-2", actor="alice")
        assert _actors(c, middle) == [(kind, "alice") for kind in ACTIONS]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    with serving(tmp_path) as (url, embedded):
        yield url, embedded


def test_over_http_every_action_names_the_named_token_that_made_it(
    served: tuple[str, Any],
) -> None:
    """A named operator token acts through the remote client: every event names
    ``token:ops-bob``; the operator token's own calls name ``operator``."""
    url, embedded = served
    bob = embedded.create_token("ops-bob", "operator").token
    with corral.connect(url, token=bob) as remote:
        remote.report_processes(HOST, [PROCESS])
        start = embedded.events(limit=10_000)[-1].seq
        _act_on_everything(remote)
    assert _actors(embedded, start) == [(kind, "token:ops-bob") for kind in ACTIONS]
    with corral.connect(url, token=TOKEN) as operator:
        middle = embedded.events(limit=10_000)[-1].seq
        operator.configure(max_agents=9)
        operator.request_process_action(HOST, "web", "stop")
    assert _actors(embedded, middle) == [
        ("settings_changed", "operator"),
        ("process_action_requested", "operator"),
    ]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", "/v1/settings", {"max_agents": 5, "actor": "mallory"}),
        ("POST", "/v1/agents", {"agent_id": "agent-2", "actor": "mallory"}),
        (
            "POST",
            "/v1/processes/actions",
            {"host": HOST, "agent": "web", "action": "stop", "actor": "mallory"},
        ),
        ("POST", "/v1/nodes/w1/terminate", {"actor": "mallory"}),
    ],
)
def test_over_http_an_actor_in_the_request_is_refused_and_changes_nothing(
    served: tuple[str, Any], method: str, path: str, body: dict[str, Any]
) -> None:
    url, embedded = served
    embedded.report_processes(HOST, [PROCESS])
    before = embedded.events(limit=10_000)
    answer = httpx.request(
        method, url + path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "actor"
    assert embedded.events(limit=10_000) == before
    assert embedded.settings().max_agents != 5


def test_a_terminated_node_names_who_ended_it(served: tuple[str, Any]) -> None:
    """``terminate_node``'s ``node_status`` event names its caller over HTTP: a named
    operator token (``token:ops-bob``), a node ending itself with its own token
    (``node:w2``); called on the embedded cluster with no actor, none is recorded."""
    url, embedded = served
    embedded.configure(max_agents=10)
    for node in ("w1", "w2", "w3"):
        embedded.register_node(node, "developer")
    start = embedded.events(limit=10_000)[-1].seq
    bob = embedded.create_token("ops-bob", "operator").token
    with corral.connect(url, token=bob) as remote:
        remote.terminate_node("w1")
    with corral.connect(url, token=Tokens(TOKEN).node_token("w2")) as itself:
        itself.terminate_node("w2")
    embedded.terminate_node("w3")
    ended = [
        (e.node_id, e.data.get("actor"))
        for e in embedded.events(since=start, limit=10_000)
        if e.kind == "node_status" and e.data["new"] == "terminated"
    ]
    assert ended == [("w1", "token:ops-bob"), ("w2", "node:w2"), ("w3", None)]


def test_the_dashboard_restart_names_the_token_logged_in(tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        c.report_processes(HOST, [PROCESS])
        alice = c.create_token("ops-alice", "operator").token
        app = create_app(c, token=TOKEN, monitor=False, mcp=False)
        with TestClient(app, base_url="http://testserver", follow_redirects=False) as page:
            logged = page.post(
                "/login", data={"token": alice}, headers={"Origin": "http://testserver"}
            )
            assert logged.status_code == 303, logged.text
            found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.get("/").text)
            assert found is not None
            done = page.post(
                "/dashboard/processes/act",
                data={"host": HOST, "agent": "web", "action": "restart"},
                headers={"X-CSRF-Token": found[1]},
            )
            assert done.status_code == 200, done.text
            asked = c.process_actions(HOST)
            assert [(e.data["action"], e.data["actor"]) for e in asked] == [
                ("restart", "token:ops-alice")
            ]


def test_the_cli_refuses_actor_as_a_setting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        before = c.events(limit=10_000)
    result = CliRunner().invoke(cli, ["--url", url, "config", "set", "actor", "mallory"])
    assert result.exit_code == 2, result.output
    assert "actor is not a setting" in result.output
    with corral.connect(url) as c:
        assert c.events(limit=10_000) == before


def test_over_mcp_a_named_operator_token_deciding_a_spawn_request_is_its_actor(
    tmp_path: Path,
) -> None:
    """``/mcp`` with a named operator token: accepting and declining without an
    ``agent_id`` record ``token:NAME``; naming a manager agent records the agent."""
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        ops = c.create_token("mcp-ops", "operator").token
        assert ops is not None
        c.register_node("BM-1", "bootstrap_manager")
        asks = [c.request_spawn("dev", "developer").id for _ in range(3)]
        port = free_port()
        server, thread = start_uvicorn(create_app(c, token=TOKEN, monitor=False), port)

        async def decide() -> list[tuple[bool, str]]:
            out = []
            async with mcp_connect(
                f"http://127.0.0.1:{port}/mcp", token=ops, reconnect_for=0
            ) as client:
                for tool, args in (
                    ("accept_spawn_request", {"request_id": asks[0]}),
                    ("decline_spawn_request", {"request_id": asks[1]}),
                    ("accept_spawn_request", {"request_id": asks[2], "agent_id": "BM-1"}),
                ):
                    result = await client.call_tool(tool, args)
                    out.append((bool(result.is_error), result.content[0].text))  # type: ignore[union-attr]
            return out

        try:
            answers = anyio.run(decide)
        finally:
            stop_uvicorn(server, thread)
        assert [error for error, _ in answers] == [False, False, False], answers
        assert answers[0][1].endswith("accepted by token:mcp-ops")
        assert [(r.id, r.decided_by) for r in c.spawn_requests()] == [
            (asks[0], "token:mcp-ops"),
            (asks[1], "token:mcp-ops"),
            (asks[2], "BM-1"),
        ]
