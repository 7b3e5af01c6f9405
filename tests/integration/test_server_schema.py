"""schemathesis 4 against /openapi.json of a live server, every check: no 5xx, no
schema-valid request refused, no schema-invalid one accepted, 405s with the right
``Allow``, and every response matches the documented status codes, content types and
schemas. A bounded number of
examples per operation keeps it well under a minute.

Nothing is built at import: the tests are the registry's operations (collecting them
reads ``corral.operations`` only), and the document, built from the routes when the
first test needs it (a module fixture), gives each its strategies
(``APIOperation.as_strategy``, schema-valid and schema-violating cases), which a
hypothesis test inside the test draws from. (``schemathesis.pytest.from_fixture``,
the lazy loader, fails on pytest 9: its items have no ``_nodeid``.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

import corral
from corral.operations import OPERATIONS
from tests.support.backends.http import TOKEN, serving

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    """The document the server serves (checked below), built from the routes."""
    from corral.server.openapi import build_openapi
    from corral.server.routes import build_ops

    with corral.connect("sqlite:///:memory:") as fresh:
        roles = tuple(fresh.settings().roles)
    return build_openapi(build_ops(), version=corral.__version__, roles=roles)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("schema")) as (url, _):
        seed = corral.connect(url, token=TOKEN)
        seed.register_node("w1", "developer")
        seed.register_node("a1", "architect")
        seed.add_tasks([{"title": "implement x"}, {"title": "design y"}])
        seed.claim_best_task("w1", "developer")
        seed.broadcast("hello", node_id="w1")
        seed.close()
        yield url


def test_served_document_is_the_generated_one(base_url: str, document: dict[str, Any]) -> None:
    import httpx

    assert httpx.get(f"{base_url}/openapi.json").json() == document


# In the document's order (deeper paths first, as the routes are matched).
@pytest.mark.parametrize(
    "name", [o.name for o in sorted(OPERATIONS, key=lambda o: -o.path.count("/"))]
)
def test_api_conforms_to_its_openapi_document(
    name: str, base_url: str, document: dict[str, Any]
) -> None:
    """No 5xx for any input; every answer is documented and matches its schema."""
    api = schemathesis.openapi.from_dict(document).find_operation_by_id(name)
    cases = st.one_of(*(api.as_strategy(mode) for mode in GenerationMode))

    @given(case=cases)
    @settings(
        max_examples=15,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def conforms(case: Any) -> None:
        _call_and_validate(case, base_url)

    conforms()


def _call_and_validate(case: Any, base_url: str) -> None:
    header = case.meta.components.get("header") if case.meta is not None else None
    if header is not None and header.mode == "negative":
        return  # its broken Authorization is replaced by the token below: nothing to see
    if case.operation.path == "/v1/nodes/{node_id}/claim" and isinstance(case.body, dict):
        case.body.pop("wait", None)  # a waiting claim would hold the example for its wait
    if case.operation.path == "/v1/settings" and isinstance(case.body, dict):
        # New roles would change the document under the run (the served one follows).
        # A schema-violating body is refused whole (nothing changes), and dropping
        # its role_keywords could make it valid: keep them there.
        body = case.meta.components.get("body") if case.meta is not None else None
        if body is None or body.mode != "negative":
            case.body.pop("role_keywords", None)
    if case.operation.path == "/v1/agents" and isinstance(case.body, dict):
        # A cron entry's expression and time zone are checked beyond their shape (by
        # cronsim and the zone database): a valid-looking one may be refused.
        body = case.meta.components.get("body") if case.meta is not None else None
        config = case.body.get("config")
        if (body is None or body.mode != "negative") and isinstance(config, dict):
            config.pop("schedule_override", None)
    case.call_and_validate(base_url=base_url, headers=AUTH)


_SAMPLE = {
    "node_id": "w1",
    "task_id": "1",
    "handler_id": "h1",
    "workflow": "wf",
    "host": "host1",
    "agent_id": "w1",
    "runner_id": "w1",
    "assignment_id": "1",
    "request_id": "1",
    "name": "t1",
}


def test_every_405_lists_every_method_of_its_path(base_url: str, document: dict[str, Any]) -> None:
    """For each documented path, a method it does not serve answers 405 with an
    ``Allow`` header naming exactly the documented methods (and HEAD with GET)."""
    import httpx

    checked = 0
    for template, ops in document["paths"].items():
        path = template.format(**_SAMPLE)
        documented = {method.upper() for method in ops}
        expected = documented | ({"HEAD"} if "GET" in documented else set())
        for method in ("PUT", "DELETE", "PATCH", "POST"):
            if method in documented:
                continue
            r = httpx.request(method, base_url + path, headers=AUTH)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            allow = {m.strip() for m in r.headers["allow"].split(",")}
            assert allow == expected, (method, path, allow)
            assert r.headers.get_list("allow") == [r.headers["allow"]]
            checked += 1
    assert checked > 60
