"""A manager agent decides spawn requests through MCP (in-process) and over HTTP
with its node token, which decides only as itself; each decision names its actor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
from corral.server.auth import Tokens
from tests.integration.test_mcp_tools import run
from tests.support.backends.http import TOKEN, serving


def test_a_manager_lists_accepts_and_declines_through_mcp(sqlite_cluster: corral.Cluster) -> None:
    c = sqlite_cluster
    c.register_node("BM-1", "bootstrap_manager")
    a = c.request_spawn("coder", "developer", "spawn_developer")
    b = c.request_spawn("coder", "developer")

    async def script(call: Any, client: Any) -> None:
        err, text = await call("spawn_requests", status="pending")
        assert not err
        assert text.splitlines() == [
            f"spawn request {a.id} (pool coder, developer): pending",
            f"spawn request {b.id} (pool coder, developer): pending",
        ]
        err, text = await call("accept_spawn_request", request_id=a.id, agent_id="BM-1")
        assert (err, text) == (
            False,
            f"spawn request {a.id} (pool coder, developer): accepted by BM-1",
        )
        err, text = await call("decline_spawn_request", request_id=b.id, agent_id="BM-1")
        assert text.endswith("declined by BM-1")
        err, text = await call("accept_spawn_request", request_id=b.id, agent_id="BM-1")
        assert err and text.startswith("ERROR: spawn request") and "already declined" in text
        err, text = await call("spawn_requests", status="pending")
        assert text == "No spawn requests."

    run(c, script)
    actors = [(e.kind, e.data["actor"]) for e in c.events() if e.kind.startswith("spawn_request_")]
    assert actors == [("spawn_request_accepted", "BM-1"), ("spawn_request_declined", "BM-1")]


def test_a_node_token_decides_only_as_its_own_node(tmp_path: Path) -> None:
    with serving(tmp_path) as (url, _embedded):
        op = corral.connect(url, token=TOKEN)
        req = op.request_spawn("coder", "developer")
        other = op.request_spawn("coder", "developer")
        node = corral.connect(url, token=Tokens(TOKEN).node_token("BM-1"))
        with pytest.raises(corral.AuthError):
            node.accept_spawn_request(req.id, "BM-2")
        with pytest.raises(corral.AuthError):
            node.request_spawn("coder", "developer")  # the pools' (operator) call
        assert node.accept_spawn_request(req.id).decided_by == "BM-1"  # itself by default
        assert op.decline_spawn_request(other.id).decided_by == "operator"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as h:
            r = h.post("/v1/spawn-requests/0/accept", json={})
            assert r.status_code == 422 or r.status_code == 400
            r = h.post(f"/v1/spawn-requests/{req.id}/accept", json={"actor": "x", "extra": 1})
            assert 400 <= r.status_code < 500
        node.close()
        op.close()
