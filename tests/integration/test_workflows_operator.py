"""The operator's Release and Resume of a workflow run over the network (docs/workflows.md,
"Release and Resume by hand"): a viewer's token and a node's are refused on HTTP (403)
and over MCP (an ``ERROR:`` answer), changing nothing; a named operator token acts and
the events name it. A real uvicorn server over a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

import corral
from corral.mcp.http import connect as mcp_connect
from corral.server import create_app
from corral.server.auth import Tokens
from tests.support.backends.http import free_port, start_uvicorn, stop_uvicorn

OPERATOR = "the-operator-token"
WAIT = {"step": "ask", "event_type": "Answer", "waiter_id": "w", "deadline": None}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[corral.Cluster]:
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(c, corral.Cluster)
    yield c
    c.close()


@pytest.fixture
def base(cluster: corral.Cluster) -> Iterator[str]:
    port = free_port()
    server, thread = start_uvicorn(create_app(cluster, token=OPERATOR, monitor=False), port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_uvicorn(server, thread)


def _runs(c: corral.Cluster) -> tuple[str, str]:
    """An idle run on host h1, and a released one."""
    c.serve_workflows("h1", [{"name": "hitl"}])
    idle, released = c.run_workflow("hitl"), c.run_workflow("hitl")
    c.take_workflow_work("h1")
    for run in (idle, released):
        c.report_handler("h1", run, "idle", [WAIT])
    c.release_handler("h1", released, {"state": 1})
    return idle, released


def _seen(c: corral.Cluster) -> tuple[Any, ...]:
    return tuple(h.to_dict() for h in c.list_handlers()), [e.seq for e in c.events()]


def test_over_http_a_viewer_or_a_node_is_refused_and_an_operator_acts(
    cluster: corral.Cluster, base: str
) -> None:
    """``POST /v1/handlers/{id}/release-request`` and ``/resume`` with a viewer's token
    or a node's: 403 naming what is needed, nothing changed. A named operator token:
    200, the run's answer, each event's actor the token's name."""
    idle, released = _runs(cluster)
    viewer = cluster.create_token("wall", "viewer").token
    ops = cluster.create_token("ops-alice", "operator").token
    cluster.register_node("w1", "developer")
    node = Tokens(OPERATOR).node_token("w1")
    assert viewer is not None and ops is not None
    before = _seen(cluster)
    calls = (
        (f"/v1/handlers/{idle}/release-request", idle),
        (f"/v1/handlers/{released}/resume", released),
    )
    with httpx2.Client(base_url=base, timeout=10) as http:
        for token in (viewer, node):
            for path, _ in calls:
                answer = http.post(path, json={}, headers={"Authorization": f"Bearer {token}"})
                assert answer.status_code == 403, (path, answer.text)
                assert "operator" in answer.json()["error"]["message"], answer.text
        assert _seen(cluster) == before
        for path, run in calls:
            answer = http.post(path, json={}, headers={"Authorization": f"Bearer {ops}"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["handler_id"] == run
        # the actor is the caller's token: a request naming one is refused
        again = http.post(
            f"/v1/handlers/{released}/resume",
            json={"actor": "someone-else"},
            headers={"Authorization": f"Bearer {ops}"},
        )
        assert again.status_code == 422, again.text
        assert again.json()["error"]["field"] == "actor", again.text
    assert cluster.get_handler(idle).release_requested_at is not None
    assert cluster.take_workflow_work("h1").release == [idle]
    kinds = [(e.kind, e.data["actor"]) for e in cluster.events() if "requested" in e.kind]
    assert kinds == [
        ("workflow_release_requested", "token:ops-alice"),
        ("workflow_resume_requested", "token:ops-alice"),
    ]


def test_over_mcp_a_viewer_is_refused_and_an_operator_acts(
    cluster: corral.Cluster, base: str
) -> None:
    """``release_workflow_run`` and ``resume_workflow_run`` on ``/mcp``: a viewer's
    token gets an ``ERROR:`` answer naming its role and changes nothing; a named
    operator's acts, answering the run's line, and the events name it; a refusal from
    the run's state is an ``ERROR:`` answer too."""
    idle, released = _runs(cluster)
    viewer = cluster.create_token("mcp-viewer", "viewer").token
    ops = cluster.create_token("mcp-ops", "operator").token
    assert viewer is not None and ops is not None
    before = _seen(cluster)

    async def calls(token: str) -> list[tuple[bool, str]]:
        out = []
        async with mcp_connect(f"{base}/mcp", token=token, reconnect_for=0) as client:
            for name, run in (
                ("release_workflow_run", idle),
                ("resume_workflow_run", released),
                ("resume_workflow_run", idle),  # running: not released
            ):
                result = await client.call_tool(name, {"handler_id": run})
                out.append((bool(result.is_error), result.content[0].text))  # type: ignore[union-attr]
        return out

    refused = anyio.run(calls, viewer)
    assert all(error and text.startswith("ERROR:") for error, text in refused), refused
    assert all("viewer role" in text for _, text in refused), refused
    assert _seen(cluster) == before
    release, resume, wrong = anyio.run(calls, ops)
    assert release == (False, release[1]) and release[1].startswith(f"Run {idle} (hitl on h1)")
    assert release[1].endswith("release requested"), release[1]
    assert resume == (False, resume[1]) and f"Run {released} (hitl on -): released" in resume[1]
    assert wrong[0] and wrong[1].startswith("ERROR:") and "only a released run" in wrong[1]
    kinds = [(e.kind, e.data["actor"]) for e in cluster.events() if "requested" in e.kind]
    assert kinds == [
        ("workflow_release_requested", "token:mcp-ops"),
        ("workflow_resume_requested", "token:mcp-ops"),
    ]
