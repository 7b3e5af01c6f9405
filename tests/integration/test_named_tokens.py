"""Named tokens with roles on every surface (docs/security.md, "Tokens and roles"): a
viewer reads and cannot act on the page, over HTTP and over MCP (the official
client); a named operator token acts and the events name it; a revoked token is
refused at once, by every process of ``corral serve --workers 2``; the CLI makes,
lists and revokes them. Real SQLite files, a real uvicorn server, real processes."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from starlette.testclient import TestClient

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.clock import FakeClock
from corral.dashboard.session import COOKIE
from corral.mcp.http import connect as mcp_connect
from corral.operations import OPERATIONS
from corral.server import create_app
from corral.server.auth import Tokens
from corral.tokens import hash_token
from tests.contract._world import T0
from tests.integration.test_serve_workers import _children, _server_socket_owner
from tests.support.backends.http import free_port, start_uvicorn, stop_uvicorn
from tests.support.backends.postgres import fresh_database

OPERATOR = "the-operator-token"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[corral.Cluster]:
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(c, corral.Cluster)
    yield c
    c.close()


@pytest.fixture
def api(cluster: corral.Cluster) -> Iterator[TestClient]:
    app = create_app(cluster, token=OPERATOR, monitor=False, mcp=False)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the store's lookups ---------------------------------------------------------------
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_store_finds_a_token_by_its_hash_and_stamps_its_use_once_a_minute(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What the server asks per request: the row of a token's hash (none for a wrong
    or revoked token) and of a session's token id; each lookup stamps the token's
    last use, at most once a minute (the injected clock)."""
    clock = FakeClock(T0)
    url = f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else fresh_database(request)
    with corral.connect(url, clock=clock) as c:
        assert isinstance(c, corral.Cluster)
        store: Any = c.store
        made = c.create_token("alice", "viewer")
        assert made.token is not None
        found = store.token_by_hash(hash_token(made.token), clock.now())
        assert (found.id, found.name, found.role, found.token) == (made.id, "alice", "viewer", None)
        assert c.list_tokens()[0].last_used_at == T0
        clock.advance(59)
        store.token_by_hash(hash_token(made.token), clock.now())
        assert c.list_tokens()[0].last_used_at == T0  # within the minute: no write
        clock.advance(2)
        store.token_by_hash(hash_token(made.token), clock.now())
        assert c.list_tokens()[0].last_used_at == T0 + 61
        assert store.token_by_hash(hash_token(made.token + "x"), clock.now()) is None
        assert store.token_by_id(made.id).name == "alice"
        c.revoke_token("alice")
        assert store.token_by_hash(hash_token(made.token), clock.now()) is None
        assert store.token_by_id(made.id) is None


# --- HTTP ------------------------------------------------------------------------------
def test_a_viewer_reads_every_get_route_and_is_refused_every_write(
    cluster: corral.Cluster, api: TestClient
) -> None:
    """Reads are the registry's GET routes: a viewer gets each one's answer (the
    operator-only ones too); every other operation is a 403 naming the viewer role,
    and nothing changes."""
    viewer = cluster.create_token("watcher", "viewer").token
    assert viewer is not None
    cluster.register_node("w1", "developer")
    task = cluster.add_task("Implement login")
    cluster.report_processes("h1", [{"agent": "a1", "state": "RUNNING"}])
    gets = {
        "/v1/settings": 200,
        "/v1/nodes": 200,
        "/v1/nodes/w1": 200,
        f"/v1/tasks/{task.id}": 200,
        "/v1/tasks": 200,
        "/v1/state": 200,
        "/v1/stats": 200,
        "/v1/events": 200,
        "/v1/processes": 200,  # an operator-only read
        "/v1/tokens": 200,  # names and roles, never a token
    }
    for path, status in gets.items():
        answer = api.get(path, headers=_bearer(viewer))
        assert answer.status_code == status, (path, answer.text)
    assert viewer not in api.get("/v1/tokens", headers=_bearer(viewer)).text
    before = [e.seq for e in cluster.events()]
    writes = [
        ("POST", "/v1/tasks", {"title": "Sneak a task in"}),
        ("PATCH", "/v1/settings", {"max_agents": 9}),
        ("POST", "/v1/nodes/w1/terminate", {}),
        ("POST", "/v1/nodes", {"node_id": "w2", "role": "developer"}),
        ("POST", "/v1/assess", None),
        ("POST", "/v1/tokens", {"name": "mine", "role": "operator"}),
        ("POST", "/v1/tokens/watcher/revoke", {}),
        ("POST", "/v1/processes/actions", {"host": "h1", "agent": "a1", "action": "restart"}),
    ]
    for method, path, body in writes:
        answer = api.request(method, path, json=body, headers=_bearer(viewer))
        assert answer.status_code == 403, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "forbidden" and "viewer role" in error["message"], error
    assert [e.seq for e in cluster.events()] == before
    assert [t.name for t in cluster.list_tokens()] == ["watcher"]
    # The read routes are the registry's GETs: every one of them is above or read
    # the same way (no per-name list decides).
    assert {op.method for op in OPERATIONS if op.caller == "operator"} >= {"GET", "POST"}


def test_a_named_operator_token_acts_and_the_events_name_it(
    cluster: corral.Cluster, api: TestClient
) -> None:
    """A named operator token may do what the operator token does, operator-only
    operations included; the events its actions record name ``token:NAME``, the
    operator token's ``operator``, and a caller cannot say otherwise."""
    ops = cluster.create_token("ops-alice", "operator").token
    assert ops is not None
    made = api.post(
        "/v1/tokens", json={"name": "ci", "role": "viewer"}, headers=_bearer(ops)
    ).json()
    assert made["created_by"] == "token:ops-alice"
    spoof = api.post("/v1/tokens", json={"name": "x", "actor": "operator"}, headers=_bearer(ops))
    assert spoof.status_code == 422 and spoof.json()["error"]["field"] == "actor"
    assert api.post("/v1/tokens/ci/revoke", json={}, headers=_bearer(ops)).status_code == 200
    assert api.post("/v1/tasks", json={"title": "Write docs"}, headers=_bearer(ops)).is_success
    assert (
        api.post("/v1/tokens", json={"name": "ci2"}, headers=_bearer(OPERATOR)).status_code == 201
    )
    actors = [
        (e.kind, e.data.get("name"), e.data.get("actor"))
        for e in cluster.events()
        if e.kind.startswith("token_")
    ]
    assert actors == [
        ("token_created", "ops-alice", "operator"),
        ("token_created", "ci", "token:ops-alice"),
        ("token_revoked", "ci", "token:ops-alice"),
        ("token_created", "ci2", "operator"),
    ]
    used = {t.name: t.last_used_at is not None for t in cluster.list_tokens()}
    assert used == {"ci2": False, "ops-alice": True}  # its last use, stamped by its lookup


def test_a_node_token_still_acts_only_as_its_node(cluster: corral.Cluster, api: TestClient) -> None:
    node = Tokens(OPERATOR).node_token("w1")
    cluster.register_node("w1", "developer")
    cluster.register_node("w2", "developer")
    assert api.post("/v1/nodes/w1/heartbeat", json={}, headers=_bearer(node)).status_code == 200
    other = api.post("/v1/nodes/w2/heartbeat", json={}, headers=_bearer(node))
    assert other.status_code == 403
    refused = api.post("/v1/tokens", json={"name": "x"}, headers=_bearer(node))
    assert refused.status_code == 403 and "operator token" in refused.json()["error"]["message"]


def test_a_revoked_token_is_refused_on_its_next_request(
    cluster: corral.Cluster, api: TestClient
) -> None:
    """No memory of a named token outlives its revocation: the request just before
    answers, the one just after is 401 (the header cache keeps only the operator's
    and nodes' tokens)."""
    viewer = cluster.create_token("short-lived", "viewer").token
    assert viewer is not None
    for _ in range(3):
        assert api.get("/v1/tasks", headers=_bearer(viewer)).status_code == 200
    api.post("/v1/tokens/short-lived/revoke", json={}, headers=_bearer(OPERATOR))
    answer = api.get("/v1/tasks", headers=_bearer(viewer))
    assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
    assert cluster.store.token_by_hash(hash_token(viewer), 0.0) is None  # type: ignore[attr-defined]


def test_an_open_event_stream_ends_when_its_token_is_revoked(cluster: corral.Cluster) -> None:
    """``/v1/events`` as server-sent events with a viewer token: events flow until the
    token is revoked, then the server closes the stream (the revocation, written by
    another client, is seen within the stream's poll) and sends nothing after it."""
    viewer = cluster.create_token("tail", "viewer").token
    assert viewer is not None
    port = free_port()
    app = create_app(cluster, token=OPERATOR, monitor=False, mcp=False, sse_poll=0.1)
    server, thread = start_uvicorn(app, port)
    seen: list[str] = []
    try:
        headers = {**_bearer(viewer), "Accept": "text/event-stream"}
        url = f"http://127.0.0.1:{port}/v1/events"
        with httpx2.stream("GET", url, headers=headers, timeout=10) as answer:
            assert answer.status_code == 200
            lines = answer.iter_lines()
            for line in lines:
                seen.append(line)
                if line == "event: token_created":
                    cluster.add_task("Seen by the viewer")
                elif line == "event: task_added":
                    cluster.revoke_token("tail")
            # The loop ended: the server closed the stream (a hang is a read timeout).
    finally:
        stop_uvicorn(server, thread)
    events = [line.removeprefix("event: ") for line in seen if line.startswith("event: ")]
    assert events == ["token_created", "task_added"]


# --- MCP, through the official client ----------------------------------------------------
def test_over_mcp_a_viewer_reads_and_every_change_is_an_error_answer(
    cluster: corral.Cluster,
) -> None:
    """``/mcp`` with a viewer token: the tools of GET operations answer; every other
    tool, and a read naming an agent (a heartbeat), answers ``ERROR:`` naming the
    role and changes nothing. The same calls with an operator token work."""
    viewer = cluster.create_token("mcp-viewer", "viewer").token
    ops = cluster.create_token("mcp-ops", "operator").token
    assert viewer is not None and ops is not None
    cluster.register_node("w1", "developer")
    port = free_port()
    server, thread = start_uvicorn(create_app(cluster, token=OPERATOR, monitor=False), port)
    url = f"http://127.0.0.1:{port}/mcp"
    before = [e.seq for e in cluster.events()]

    async def calls(token: str) -> dict[str, tuple[bool, str]]:
        out: dict[str, tuple[bool, str]] = {}
        async with mcp_connect(url, token=token, reconnect_for=0) as client:
            for name, args in (
                ("read_state", {}),
                ("spawn_requests", {}),
                ("list_idle_workflows", {}),
                ("list_tokens", {}),
                ("read_state ", {"agent_id": "w1"}),
                ("add_task", {"title": "Sneak a task in"}),
                ("assess_workload", {}),
                ("heartbeat", {"agent_id": "w1"}),
                ("broadcast", {"message": "hello"}),
                ("create_token", {"name": f"made-by-{token[-6:]}", "role": "viewer"}),
                ("create_token ", {"name": "bad name", "role": "viewer"}),
            ):
                result = await client.call_tool(name.strip(), args)
                text = result.content[0].text  # type: ignore[union-attr]
                out[name] = (bool(result.is_error), text)
        return out

    try:
        seen = anyio.run(calls, viewer)
        assert [e.seq for e in cluster.events()] == before  # the viewer changed nothing
        done = anyio.run(calls, ops)
    finally:
        stop_uvicorn(server, thread)
    for name in ("read_state", "spawn_requests", "list_idle_workflows", "list_tokens"):
        assert seen[name][0] is False and not seen[name][1].startswith("ERROR:"), seen[name]
    assert "mcp-viewer (viewer)" in seen["list_tokens"][1] and viewer not in seen["list_tokens"][1]
    for name in ("add_task", "assess_workload", "heartbeat", "broadcast", "create_token"):
        error, text = seen[name]
        assert error and text.startswith("ERROR:") and "viewer role" in text, (name, text)
    assert seen["read_state "][0] and "without agent_id" in seen["read_state "][1]
    bad = done.pop("create_token ")
    assert bad[0] and bad[1].startswith("ERROR:") and "name must be" in bad[1], bad
    assert all(not error for error, _ in done.values()), done
    made = done["create_token"][1]
    assert re.search(r"made by token:mcp-ops: tok\.\S+ \(shown this once\)", made), made
    assert [t.name for t in cluster.list_tokens()] == [
        "made-by-" + ops[-6:],
        "mcp-ops",
        "mcp-viewer",
    ]


def test_over_mcp_a_node_token_may_not_call_an_operator_only_tool(
    cluster: corral.Cluster,
) -> None:
    """The HTTP API's caller rule holds on ``/mcp``: an operator-only operation's tool
    answers a node token ``ERROR:`` and changes nothing; its own node's tools work."""
    cluster.register_node("w1", "developer")
    task = cluster.add_task("Implement login")
    node = Tokens(OPERATOR).node_token("w1")
    port = free_port()
    server, thread = start_uvicorn(create_app(cluster, token=OPERATOR, monitor=False), port)
    before = [e.seq for e in cluster.events()]

    async def calls() -> list[tuple[bool, str]]:
        out = []
        async with mcp_connect(
            f"http://127.0.0.1:{port}/mcp", token=node, reconnect_for=0
        ) as client:
            for name, args in (
                ("create_token", {"name": "mine", "role": "operator"}),
                ("cancel_task", {"task_id": task.id}),
                ("read_state", {"agent_id": "w1"}),
            ):
                result = await client.call_tool(name, args)
                out.append((bool(result.is_error), result.content[0].text))  # type: ignore[union-attr]
        return out

    try:
        made, cancel, state = anyio.run(calls)
    finally:
        stop_uvicorn(server, thread)
    for error, text in (made, cancel):
        assert error and text.startswith("ERROR:") and "operator token" in text, text
    assert not state[0]
    assert cluster.list_tokens() == [] and cluster.get_task(task.id).status == "pending"
    assert [e.seq for e in cluster.events()] == before  # (a call naming w1 touches it only)


# --- the dashboard ---------------------------------------------------------------------
def _log_in(client: TestClient, token: str) -> httpx2.Response:
    return client.post("/login", data={"token": token}, headers={"Origin": "http://testserver"})


def test_a_viewer_sees_every_panel_and_can_act_on_nothing(
    cluster: corral.Cluster, api: TestClient
) -> None:
    """A viewer token logs in; its page shows every panel, says it is read only, and
    offers no control that changes anything (its only form that posts is Log out);
    every action of the dashboard refuses it with 403 naming the role, even with its
    CSRF token. An operator's named token logs in as an operator."""
    viewer = cluster.create_token("wall-screen", "viewer").token
    assert viewer is not None
    cluster.add_task("Implement login")
    assert _log_in(api, viewer).status_code == 303
    page = api.get("/")
    assert page.status_code == 200
    for name in ("Fleet", "Nodes", "Tasks", "Events"):
        assert re.search(rf"<h2 id=\"\w+-title\">{name}</h2>", page.text), name
    assert "wall-screen (viewer: read only)" in page.text
    posts = re.findall(r'<form[^>]*method="post"[^>]*action="([^"]+)"', page.text)
    assert posts == ["/logout"]
    assert "hx-post" not in page.text
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert csrf
    for path in [a for a in _dashboard_actions(api) if a != "/logout"]:
        refused = api.post(path, headers={"X-CSRF-Token": csrf[1]})
        assert refused.status_code == 403 and "viewer" in refused.text, path
    api.cookies.clear()
    operator = cluster.create_token("ops-bob", "operator").token
    assert operator is not None
    assert _log_in(api, operator).status_code == 303
    assert "ops-bob (operator)" in api.get("/").text


def _dashboard_actions(api: TestClient) -> list[str]:
    """The dashboard's state-changing routes: every POST but the login and the API's."""
    return [
        r.path
        for r in api.app.routes  # type: ignore[attr-defined]
        if "POST" in (getattr(r, "methods", None) or ())
        and r.path != "/login"
        and not r.path.startswith("/v1/")
    ]


def test_every_dashboard_action_needs_a_session_and_its_csrf_token(
    cluster: corral.Cluster, api: TestClient
) -> None:
    """Each action of the dashboard (logging out included): 401 without a session, 403
    with an operator's session but without its CSRF token or with a wrong one."""
    actions = _dashboard_actions(api)
    assert "/logout" in actions
    for path in actions:
        assert api.post(path).status_code == 401, path
    ops = cluster.create_token("ops-carol", "operator").token
    assert ops is not None
    assert _log_in(api, ops).status_code == 303
    for path in actions:
        assert api.post(path).status_code == 403, path
        assert api.post(path, headers={"X-CSRF-Token": "forged"}).status_code == 403, path
        assert api.post(path, data={"csrf": "forged"}).status_code == 403, path
    assert api.get("/dashboard/panels/fleet").status_code == 200  # still logged in


def test_revoking_a_token_ends_its_dashboard_session_at_once(
    cluster: corral.Cluster, api: TestClient
) -> None:
    token = cluster.create_token("kiosk", "viewer").token
    assert token is not None
    assert _log_in(api, token).status_code == 303
    cookie = api.cookies[COOKIE]
    assert api.get("/dashboard/panels/fleet").status_code == 200
    cluster.revoke_token("kiosk")
    assert api.get("/dashboard/panels/fleet").status_code == 401
    assert api.get("/").status_code == 303  # back to the login page
    api.cookies.set(COOKIE, cookie)
    assert api.get("/dashboard/stream").status_code == 401
    assert _log_in(api, token).status_code == 401


# --- the CLI ---------------------------------------------------------------------------
def test_the_cli_makes_lists_and_revokes_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``token create`` prints the token alone on stdout (what it is on stderr);
    ``token list`` never shows one; a bad name or role is exit 2 with one line
    naming it; a taken name exit 1; ``token revoke`` of an unknown name exit 2."""
    monkeypatch.setenv("CORRAL_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        code = run_main(cli, list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = run("token", "create", "alice", "--role", "operator")
    token = out.strip()
    assert code == 0 and token.startswith("tok.") and "\n" not in token
    assert "alice (operator)" in err and "once" in err
    code, out, _ = run("token", "create", "bob")
    assert code == 0
    code, out, _ = run("token", "list")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].split()[:2] == ["NAME", "ROLE"]
    assert [line.split()[:2] for line in lines[1:]] == [["alice", "operator"], ["bob", "viewer"]]
    assert token not in out
    listed = json.loads(run("token", "list", "--json")[1])
    assert [(t["name"], t["token"]) for t in listed] == [("alice", None), ("bob", None)]
    for args, field in (
        (("token", "create", "a b"), "name"),
        (("token", "create", "operator"), "name"),
        (("token", "create", "carol", "--role", "admin"), "role"),
        (("token", "revoke", "nobody"), "name"),
    ):
        code, out, err = run(*args)
        assert (code, out) == (2, ""), args
        assert err.startswith(f"error: {field}: ") and err.count("\n") == 1, err
    code, _, err = run("token", "create", "alice")
    assert code == 1 and "exists" in err
    assert run("token", "revoke", "alice")[:2] == (0, "revoked token alice (operator)\n")
    assert [t["name"] for t in json.loads(run("token", "list", "--json")[1])] == ["bob"]


# --- corral serve --workers 2 ------------------------------------------------------------
def _get(port: int, token: str) -> tuple[int, int]:
    """``GET /v1/tasks`` on a new connection: (its status, the client's port)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:  # closed even when the server is not up yet (a refused or reset request)
        conn.request("GET", "/v1/tasks", headers=_bearer(token))
        response = conn.getresponse()
        response.read()
        assert conn.sock is not None
        here = int(conn.sock.getsockname()[1])
    finally:
        conn.close()
    return response.status, here


def _by_worker(port: int, token: str, workers: set[int], rounds: int = 200) -> dict[int, int]:
    """New connections until each worker has answered one: worker -> its answer."""
    seen: dict[int, int] = {}
    for _ in range(rounds):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v1/tasks", headers=_bearer(token))
        response = conn.getresponse()
        response.read()
        assert conn.sock is not None
        owner = _server_socket_owner(port, conn.sock.getsockname()[1], workers)
        conn.close()
        if owner is not None:
            seen.setdefault(owner, response.status)
            assert seen[owner] == response.status
        if set(seen) == workers:
            return seen
    raise AssertionError(f"answered by {sorted(seen)} of {sorted(workers)}")


@pytest.mark.slow
def test_a_revoked_token_is_refused_at_once_by_every_worker_process(tmp_path: Path) -> None:
    """``corral serve --workers 2``: a named token answered by both workers, revoked
    through one of them, is refused by both on their very next request."""
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    with corral.connect(url) as c:
        token = c.create_token("roaming", "viewer").token
    assert token is not None
    port = free_port()
    env = {**os.environ, "CORRAL_TOKEN": OPERATOR, "CORRAL_URL": url}
    log = (tmp_path / "serve.log").open("wb")
    argv = [sys.executable, "-m", "corral", "serve", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=log)
    try:
        deadline = time.monotonic() + 30
        workers: set[int] = set()
        while len(workers) != 2 or _status(port) != 200:
            assert time.monotonic() < deadline, "corral serve --workers 2 did not start"
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert _by_worker(port, token, workers) == dict.fromkeys(workers, 200)
        status, _ = _revoke(port, "roaming")
        assert status == 200
        assert _by_worker(port, token, workers) == dict.fromkeys(workers, 401)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


def _status(port: int) -> int:
    try:
        return _get(port, OPERATOR)[0]
    except OSError:
        return 0


def _revoke(port: int, name: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        f"/v1/tokens/{name}/revoke",
        body=b"{}",
        headers={**_bearer(OPERATOR), "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    answer = response.status, json.loads(response.read())
    conn.close()
    return answer
