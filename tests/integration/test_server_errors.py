"""Error envelopes: 400/401/403/404/409/422 with {"error": {code, message, field}},
nothing changed, never a 5xx for client input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
from tests.support.backends.http import TOKEN, serving


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[httpx.Client, Any]]:
    with serving(tmp_path) as (url, embedded):
        embedded.configure(max_agents=1)
        embedded.register_node("w1", "developer")
        embedded.add_task("implement it")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=headers) as h:
            yield h, embedded


def world(c: Any) -> Any:
    return (
        [n.to_dict() for n in c.list_nodes()],
        [t.to_dict() for t in c.list_tasks()],
        [e.seq for e in c.events(0, 10_000)],
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "field"),
    [
        ("POST", "/v1/tasks", b"{not json", 400, "bad_request", None),
        ("POST", "/v1/nodes", {"node_id": "w2", "role": "developer"}, 409, "capacity", None),
        ("POST", "/v1/tasks/1/complete", {"node_id": "w1"}, 409, "lease", "task_id"),
        ("GET", "/v1/nodes/ghost", None, 404, "not_found", "node_id"),
        ("GET", "/v1/tasks/99", None, 404, "not_found", "task_id"),
        ("GET", "/v1/nope", None, 404, "not_found", None),
        ("POST", "/v1/nodes", {"node_id": "w2", "role": "wizard"}, 422, "invalid_input", "role"),
        ("POST", "/v1/nodes", {"node_id": 7, "role": "developer"}, 422, "invalid_input", "node_id"),
        ("POST", "/v1/tasks", {"title": "t", "colour": "red"}, 422, "invalid_input", "colour"),
        ("POST", "/v1/tasks", [1, 2], 422, "invalid_input", None),
        ("GET", "/v1/tasks?limit=lots", None, 422, "invalid_input", "limit"),
        ("GET", "/v1/tasks/abc", None, 422, "invalid_input", "task_id"),
        ("POST", "/v1/nodes/w1/heartbeat", {"node_id": "x"}, 422, "invalid_input", "node_id"),
        ("PATCH", "/v1/settings", {"max_agents": -1}, 422, "invalid_input", "max_agents"),
        ("DELETE", "/v1/tasks", None, 405, "method_not_allowed", None),
        # a write whose arguments are all in its path refuses any body field
        ("POST", "/v1/nodes/w1/terminate", {"force": True}, 422, "invalid_input", "force"),
        ("POST", "/v1/tasks/1/requeue", {"reason": "x"}, 422, "invalid_input", "reason"),
        ("POST", "/v1/nodes/w1/touch", [1], 422, "invalid_input", "body"),
        ("POST", "/v1/nodes/w1/touch", b"{not json", 400, "bad_request", None),
    ],
)
def test_error_envelope(
    api: Any, method: str, path: str, body: Any, status: int, code: str, field: str | None
) -> None:
    h, embedded = api
    before = world(embedded)
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = h.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"code", "message", "field"}
    assert (err["code"], err["field"]) == (code, field)
    assert err["message"]
    assert world(embedded) == before


def test_remote_client_raises_the_embedded_exceptions(api: Any) -> None:
    h, _ = api
    client = corral.connect(str(h.base_url), token=TOKEN)
    try:
        with pytest.raises(corral.CapacityError, match="at capacity"):
            client.register_node("w2", "developer")
        with pytest.raises(corral.NotFoundError):
            client.get_task(99)
        with pytest.raises(corral.LeaseError):
            client.fail_task(1, "w1")
        with pytest.raises(corral.InvalidInputError) as info:
            client.add_task("")
        assert info.value.field == "title"
    finally:
        client.close()


def test_unreachable_server_is_store_unavailable() -> None:
    from tests.support.backends.http import free_port

    client = corral.connect(f"http://127.0.0.1:{free_port()}", token=TOKEN)
    with pytest.raises(corral.StoreUnavailableError):
        client.settings()
    client.close()


def test_an_agent_configs_whole_float_counts_are_integers(tmp_path: Path) -> None:
    """The agent config's daily caps are integers in the OpenAPI document, whose
    integers include ``5.0`` (JSON Schema): the API takes a whole float as its
    integer there as it does everywhere, instead of refusing a schema-valid body."""
    with serving(tmp_path) as (url, embedded):
        config = {"max_daily_posts": 730686088.0, "max_daily_comments": 3.0}
        r = httpx.post(
            f"{url}/v1/agents",
            json={"agent_id": "a1", "config": config},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 201, r.text
        assert r.json()["config"]["max_daily_posts"] == 730686088
        assert embedded.get_agent("a1").config["max_daily_comments"] == 3
