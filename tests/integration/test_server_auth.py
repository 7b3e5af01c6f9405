"""Bearer auth: no token, a wrong token and a node token acting as another node are
all refused, and nothing changes; a node token acts as its own node; the operator
token does everything. Token files are created with mode 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
from corral import AuthError
from corral.server.auth import Tokens, load_token
from tests.support.backends.http import TOKEN, serving


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """A server with w1 and w2 registered; w2 holds a task and a second one waits."""
    with serving(tmp_path) as (url, embedded):
        op = corral.connect(url, token=TOKEN)
        op.register_node("w1", "developer")
        op.register_node("w2", "developer")
        op.add_task("implement one")
        op.add_task("implement two")
        op.claim_best_task("w2", "developer")
        try:
            yield url, embedded, op
        finally:
            op.close()


@pytest.fixture
def h() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def world(c: Any) -> Any:
    """Everything a refused call could have changed."""
    return (
        [n.to_dict() for n in c.list_nodes()],
        [t.to_dict() for t in c.list_tasks(limit=1000)],
        [e.to_dict() for e in c.events(0, 10_000)],
        c.settings().to_dict(),
    )


CALLS = [
    ("POST", "/v1/nodes", {"node_id": "w3", "role": "developer"}),
    ("POST", "/v1/nodes/w2/heartbeat", {}),
    ("POST", "/v1/nodes/w2/status", {"status": "idle"}),
    ("POST", "/v1/nodes/w2/terminate", None),
    ("POST", "/v1/nodes/w2/claim", {"role": "developer"}),
    ("POST", "/v1/nodes/w2/catch-up", {}),
    ("POST", "/v1/nodes/w2/touch", None),
    ("POST", "/v1/tasks/1/complete", {"node_id": "w2"}),
    ("POST", "/v1/tasks/1/fail", {"node_id": "w2"}),
    ("POST", "/v1/broadcast", {"message": "hi", "node_id": "w2"}),
    ("PATCH", "/v1/settings", {"max_agents": 10}),
]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer node.dzI.0000"},
    ],
    ids=["none", "wrong", "not-bearer", "forged-node"],
)
def test_without_a_valid_token_everything_is_refused(served: Any, headers: Any, h: Any) -> None:
    url, embedded, _ = served
    before = world(embedded)
    for method, path, body in [
        *CALLS,
        ("GET", "/v1/nodes", None),
        ("GET", "/v1/state", None),
        ("GET", "/metrics", None),
        ("POST", "/mcp", {}),
    ]:
        r = h.request(method, url + path, json=body, headers=headers)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    assert world(embedded) == before


def test_a_node_token_cannot_act_as_another_node(served: Any, h: Any) -> None:
    url, embedded, op = served
    w1 = op.for_node("w1")
    before = world(embedded)
    headers = {"Authorization": f"Bearer {w1.token}"}
    for method, path, body in CALLS:
        r = h.request(method, url + path, json=body, headers=headers)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"]["code"] == "forbidden"
    # through the client: the same refusals, as AuthError
    with pytest.raises(AuthError):
        w1.heartbeat("w2")
    with pytest.raises(AuthError):
        w1.complete_task(1, "w2")
    # naming itself does not get it another node's lease either
    with pytest.raises(corral.LeaseError):
        w1.complete_task(1, "w1")
    assert world(embedded) == before
    w1.close()


def test_a_node_token_acts_as_its_own_node(served: Any) -> None:
    _, embedded, op = served
    w1 = op.for_node("w1")
    try:
        assert w1.heartbeat("w1", capacity_available=1).heartbeat == {"capacity_available": 1}
        task = w1.claim_best_task("w1", "developer")
        assert task is not None and task.assigned_to == "w1"
        assert w1.complete_task(task.id, "w1", task.epoch).status == "done"
        event = w1.broadcast("done with two")  # sent as itself
        assert event.node_id == "w1"
        assert w1.read_state().pending_tasks == 0  # reads are open to nodes
        assert w1.register_node("w1", "developer").id == "w1"  # re-register itself
        with pytest.raises(AuthError):
            w1.configure(max_agents=9)
    finally:
        w1.close()
    assert embedded.get_task(task.id).status == "done"


def test_node_tokens_are_bound_to_the_operator_secret() -> None:
    a, b = Tokens("secret-a"), Tokens("secret-b")
    tok = a.node_token("w/1 ünï")
    node = a.check(tok)
    assert node is not None and node.node_id == "w/1 ünï"
    assert b.check(tok) is None
    assert a.check(tok[:-1] + ("0" if tok[-1] != "0" else "1")) is None
    operator = a.check("secret-a")
    assert operator is not None and operator.is_operator


def test_metrics_auth_is_configurable(tmp_path: Path) -> None:
    with serving(tmp_path, metrics_auth=False) as (url, _):
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert httpx.get(f"{url}/v1/nodes").status_code == 401


def test_token_file_is_created_with_mode_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    token = load_token()
    path = tmp_path / ".corral" / "token"
    assert path.read_text().strip() == token and len(token) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_token() == token  # read again, not recreated
    monkeypatch.setenv("CORRAL_TOKEN", "from-env")
    assert load_token() == "from-env"


def test_mcp_is_mounted_behind_the_bearer_token(tmp_path: Path) -> None:
    """/mcp answers MCP with the operator token and with a node token (whose tools act
    only as its node: tests/integration/test_mcp_transports.py), 401 without one or with a forged
    one."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    with serving(tmp_path, mcp=True) as (url, _), httpx.Client(base_url=url) as h:
        ok = h.post("/mcp", json=init, headers={**accept, "Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["result"]["capabilities"]["tools"] is not None
        assert h.post("/mcp", json=init, headers=accept).status_code == 401
        node = Tokens(TOKEN).node_token("w1")
        r = h.post("/mcp", json=init, headers={**accept, "Authorization": f"Bearer {node}"})
        assert r.status_code == 200 and r.json()["result"]["capabilities"]["tools"] is not None
        forged = Tokens("another-operator").node_token("w1")
        r = h.post("/mcp", json=init, headers={**accept, "Authorization": f"Bearer {forged}"})
        assert r.status_code == 401


def test_token_problems_are_invalid_input_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing, unreadable or empty token file and an empty operator token are
    ``InvalidInputError`` (a ``CorralError`` and still a ``ValueError``) naming what is
    wrong, not a bare ``OSError`` / ``ValueError``."""
    from corral.errors import CorralError, InvalidInputError
    from corral.server.auth import Tokens, load_token

    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    (tmp_path / "empty").write_text(" \n")
    (tmp_path / "dir").mkdir()
    cases = [
        (tmp_path / "missing", f"{tmp_path / 'missing'} does not exist"),
        (tmp_path / "empty", f"token file {tmp_path / 'empty'} is empty"),
        (tmp_path / "dir", f"cannot read the token file {tmp_path / 'dir'}: Is a directory"),
    ]
    for path, message in cases:
        with pytest.raises(InvalidInputError) as caught:
            load_token(path, create=False)
        assert (str(caught.value), caught.value.field) == (message, "token_file")
        assert isinstance(caught.value, CorralError) and isinstance(caught.value, ValueError)
    with pytest.raises(InvalidInputError) as caught:
        Tokens("")
    assert caught.value.field == "token"
