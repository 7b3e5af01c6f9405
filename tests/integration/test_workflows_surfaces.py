"""The workflow operations on the surfaces: HTTP answers (ISO 8601 ``idle_since``,
``active_waiters``), the CLI (`corral workflows …`, with the operator's ``release``
and ``resume``), the MCP tool ``list_idle_workflows``; and ``list_handlers``' filters
and a host's release list (with the operator's requests) against a model."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.clock import FakeClock
from tests.integration.test_mcp_tools import run as run_mcp

WAIT = {"step": "ask", "event_type": "Answer", "waiter_id": "w", "deadline": None}


def _idle_run(c: Any, host: str = "h1", workflow: str = "hitl") -> str:
    c.serve_workflows(host, [{"name": workflow}])
    handler_id = c.run_workflow(workflow)
    c.take_workflow_work(host)
    c.report_handler(host, handler_id, "idle", [WAIT])
    return str(handler_id)


@pytest.fixture
def wf_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Callable[..., tuple[int, str, str]], str]:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("CORRAL_URL", url)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        code = run_main(cli, list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    run("init")
    return run, url


def test_the_cli_lists_idle_runs_starts_and_sends(wf_cli: Any) -> None:
    run, url = wf_cli
    with corral.connect(url) as c:
        handler_id = _idle_run(c)
    code, out, _ = run("workflows", "list", "--idle")
    assert code == 0 and handler_id in out and "Answer" in out and "hitl" in out
    code, out, _ = run("workflows", "list", "--idle", "--json")
    (item,) = json.loads(out)
    assert item["handler_id"] == handler_id and item["idle_since"].endswith("+00:00")
    assert item["active_waiters"] == [WAIT]
    assert run("workflows", "list", "--busy")[1].strip() == "(no workflow runs)"
    code, out, _ = run("workflows", "run", "hitl", "--kwargs", '{"topic": "x"}')
    assert code == 0 and len(out.strip()) == 32
    code, out, _ = run("workflows", "send", handler_id, "Answer", "--data", '{"text": "y"}')
    assert code == 0 and handler_id in out
    code, out, _ = run("workflows", "show", handler_id, "--json")
    assert json.loads(out)["status"] == "running"


def test_the_cli_releases_and_resumes_a_run(wf_cli: Any) -> None:
    """``workflows release``: the run's row, its host's next take lists it; asked again,
    exit 1 with the refusal. ``workflows resume`` of the released run: due at once (with
    ``--wait 0`` it is printed still released, a line on stderr saying so); of a running
    one, exit 1."""
    run, url = wf_cli
    with corral.connect(url) as c:
        handler_id = _idle_run(c)
    code, out, _ = run("workflows", "release", handler_id, "--json")
    assert code == 0 and json.loads(out)["release_requested_at"] is not None
    code, out, err = run("workflows", "release", handler_id)
    assert (code, out) == (1, "") and "asked for already" in err and err.count("\n") == 1
    code, out, err = run("workflows", "resume", handler_id)
    assert (code, out) == (1, "") and "only a released run" in err, err
    with corral.connect(url) as c:
        assert c.take_workflow_work("h1").release == [handler_id]
        c.release_handler("h1", handler_id, {"state": 1})
    code, out, err = run("workflows", "resume", handler_id, "--wait", "0")
    assert code == 0 and handler_id in out and "released" in out
    assert f"run {handler_id} still released after 0 s" in err
    with corral.connect(url) as c:
        (taken,) = c.take_workflow_work("h1").runs
        assert (taken.handler.handler_id, taken.checkpoint) == (handler_id, {"state": 1})
        actors = [e.data["actor"] for e in c.events() if e.kind.endswith("_requested")]
    assert actors == ["operator", "operator"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["workflows", "release", "bad\nid"], "handler_id"),
        (["workflows", "resume", ""], "handler_id"),
        (["workflows", "resume", "nope"], "handler_id"),
        (["workflows", "run", "hitl", "--kwargs", "[1]"], "--kwargs"),
        (["workflows", "send", "abc", "not a class"], "event_type"),
        (["workflows", "send", "abc", "Answer", "--data", "{"], "--data"),
        (["workflows", "show", "nope"], "handler_id"),
        (["workflows", "serve", "no_such_module_here:wf"], "MODULE:ATTR"),
        (["workflows", "serve", "tests.support.workflow_app:REACHED"], "MODULE:ATTR"),
        (["workflows", "serve", "no-colon"], "MODULE:ATTR"),
    ],
)
def test_cli_bad_input_exits_2_naming_the_field(wf_cli: Any, args: list[str], field: str) -> None:
    run, _ = wf_cli
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {field}:"), err


def test_cli_refuses_a_negative_idle_duration(wf_cli: Any) -> None:
    run, _ = wf_cli
    code, _, err = run("workflows", "list", "--idle-duration-gt", "-1")
    assert code == 2 and err.count("\n") == 1 and "--idle-duration-gt" in err


def test_the_mcp_tool_lists_idle_runs_in_one_line(sqlite_cluster: corral.Cluster) -> None:
    handler_id = _idle_run(sqlite_cluster)

    async def script(call: Any, client: Any) -> None:
        error, text = await call("list_idle_workflows")
        assert not error and text.startswith("1 idle workflow run: " + handler_id)
        assert "waits for Answer" in text and "\n" not in text
        error, text = await call("list_idle_workflows", idle_duration_gt=3600)
        assert (error, text) == (False, "No idle workflow runs.")
        error, text = await call("list_idle_workflows", idle_duration_gt=-1)
        assert error and text.startswith("ERROR:") and "idle_duration_gt" in text

    run_mcp(sqlite_cluster, script)


def test_the_mcp_tools_start_show_and_answer_a_run(sqlite_cluster: corral.Cluster) -> None:
    """run_workflow starts a run for a live host, get_workflow_run shows it in one line
    (idle, what it waits for), send_workflow_event queues the answer; bad input is an
    ERROR: answer naming the argument, and nothing is written."""
    c = sqlite_cluster
    c.serve_workflows("h1", [{"name": "hitl"}])

    async def script(call: Any, client: Any) -> None:
        error, text = await call("run_workflow", workflow="hitl", start={"topic": "x"})
        assert not error and text.startswith("Started workflow run "), text
        handler_id = text.split()[3].rstrip(":")
        assert c.get_handler(handler_id).status == "running"
        c.take_workflow_work("h1")
        c.report_handler("h1", handler_id, "idle", [WAIT])
        error, text = await call("get_workflow_run", handler_id=handler_id)
        assert not error and "\n" not in text
        assert text.startswith(f"Run {handler_id} (hitl on h1): running, idle since ")
        assert text.endswith("waits for Answer")
        error, text = await call(
            "send_workflow_event", handler_id=handler_id, event_type="Answer", data={"a": 1}
        )
        assert not error and text.startswith(f"Run {handler_id} (hitl on h1): running")
        (delivery,) = c.take_workflow_work("h1").deliveries
        assert (delivery.handler_id, delivery.event_type, delivery.data) == (
            handler_id,
            "Answer",
            {"a": 1},
        )
        before = len(c.list_handlers())
        error, text = await call("run_workflow", workflow="no-such-flow")
        assert error and text.startswith("ERROR:")
        error, text = await call("send_workflow_event", handler_id=handler_id, event_type=7)
        assert error and text.startswith("ERROR:") and "event_type" in text
        error, text = await call("get_workflow_run", handler_id="nope")
        assert error and text.startswith("ERROR:")
        assert len(c.list_handlers()) == before

    run_mcp(sqlite_cluster, script)


@pytest.mark.parametrize("cluster", ["http"], indirect=True)
def test_http_answers_carry_iso_idle_since_and_waiters(cluster: Any, clock: FakeClock) -> None:
    handler_id = _idle_run(cluster)
    clock.advance(301)
    query = {
        "status": "running",
        "idle": "true",
        "idle_duration_gt": 300,
        "workflow": "hitl",
        "host": "h1",
    }
    (item,) = cluster.request("GET", "/v1/handlers", query=query)
    assert item["handler_id"] == handler_id
    assert item["idle_since"] == "2023-11-14T22:13:20+00:00"
    assert item["active_waiters"] == [WAIT]
    query["idle_duration_gt"] = 302
    assert cluster.request("GET", "/v1/handlers", query=query) == []


# --- list_handlers against a model --------------------------------------------------------
_ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["hitl", "other"]),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from(["busy", "idle", "released", "completed"]),
        st.integers(0, 20),  # seconds advanced before
    ),
    max_size=12,
)
_FILTERS = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["running", "released", "completed", "failed"]),
        "idle": st.booleans(),
        "idle_duration_gt": st.integers(0, 60),
        "workflow": st.sampled_from(["hitl", "other"]),
        "host": st.sampled_from(["h1", "h2"]),
    },
)


def _matches(h: Any, f: dict[str, Any], now: float) -> bool:
    idle = h.idle_since is not None
    if "status" in f and h.status != f["status"]:
        return False
    if "idle" in f and idle != f["idle"]:
        return False
    if "idle_duration_gt" in f and not (idle and now - h.idle_since > f["idle_duration_gt"]):
        return False
    if "workflow" in f and h.workflow != f["workflow"]:
        return False
    return not ("host" in f and h.host != f["host"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ACTIONS, st.lists(_FILTERS, min_size=1, max_size=5))
def test_list_handlers_returns_exactly_the_models_selection(
    actions: list[tuple[str, str, str, int]], filters: list[dict[str, Any]]
) -> None:
    clock = FakeClock(1_700_000_000.0)
    with tempfile.TemporaryDirectory() as tmp:
        c = corral.connect(f"sqlite:///{tmp}/f.db", clock=clock)
        try:
            for workflow, host, state, wait in actions:
                clock.advance(wait)
                c.serve_workflows(host, [{"name": "hitl"}, {"name": "other"}])
                handler_id = c.run_workflow(workflow)
                c.take_workflow_work(host)
                if state != "busy":
                    c.report_handler(host, handler_id, "idle", [WAIT])
                if state == "released":
                    c.release_handler(host, handler_id, {})
                if state == "completed":
                    c.report_handler(host, handler_id, "completed", result=1)
            clock.advance(5)
            now = clock.now()
            every = c.list_handlers(limit=10_000)
            assert len(every) == len(actions)
            for f in filters:
                got = [h.handler_id for h in c.list_handlers(**f)]
                want = [h for h in every if _matches(h, f, now)]
                if f.get("idle") or "idle_duration_gt" in f:
                    want.sort(key=lambda h: (h.idle_since, h.handler_id))
                assert got == [h.handler_id for h in want], f
        finally:
            c.close()


def test_the_handler_queries_read_their_indexes_not_the_table(tmp_path: Path) -> None:
    """SQLite's plans: idle handlers by idle_since, a host's idle runs by (host,
    idle_since), due runs by (workflow, claim_at): index searches, no table scan."""
    import sqlite3

    from corral.store.queries import load_queries, schema

    conn = sqlite3.connect(":memory:")
    conn.executescript(schema("sqlite"))
    queries = load_queries("sqlite")
    params = {
        "before": 1.0,
        "status": None,
        "workflow": None,
        "host": "h",
        "limit": 10,
        "now": 1.0,
        "oldest": 5,
    }

    def plan(name: str) -> str:
        sql = queries[name]
        used = {k: v for k, v in params.items() if f":{k}" in sql}
        return " | ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, used))

    assert "USING INDEX handlers_idle" in plan("handlers_idle_list")
    on_host = plan("handlers_idle_on_host")  # with the requested runs' index
    assert "USING INDEX handlers_host_idle" in on_host, on_host
    assert "handlers_release_requested" in on_host and "SCAN handlers" not in on_host, on_host
    claim = plan("handlers_claim")
    assert "handlers_claim" in claim and "SCAN h" not in claim
    take = plan("inbox_take")  # from the inbox (pending events only), not every handler
    assert "SCAN i" in take and "handlers_by_status" not in take


# --- the release policy in SQL agrees with idle.release_due -----------------------------
_RUNS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["idle", "idle", "busy", "resident", "requested"]),
        st.integers(0, 30),  # seconds advanced before it goes idle
    ),
    max_size=15,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _RUNS,
    st.none() | st.integers(1, 40),  # workflow a's own delay (b: the cluster's)
    st.none() | st.integers(1, 40),  # ... re-declared before the take
    st.integers(1, 40),  # the cluster's idle_release_after
    st.integers(1, 16),  # max_resident_idle
    st.integers(0, 60),  # seconds after the last run went idle
)
def test_the_hosts_release_list_is_the_rule_over_all_its_idle_runs(
    runs: list[tuple[str, str, int]],
    delay_a: int | None,
    redeclared: int | None,
    cluster_delay: int,
    cap: int,
    later: int,
) -> None:
    from corral.workflows.idle import IdleRun, release_due

    clock = FakeClock(1_700_000_000.0)
    with tempfile.TemporaryDirectory() as tmp:
        c = corral.connect(f"sqlite:///{tmp}/r.db", clock=clock)
        try:
            c.serve_workflows("h", [{"name": "a", "idle_release_after": delay_a}, {"name": "b"}])
            c.configure(idle_release_after=cluster_delay, max_resident_idle=cap)
            for workflow, state, wait in runs:
                clock.advance(wait)
                handler_id = c.run_workflow(workflow)
                c.take_workflow_work("h", limit=1)
                if state != "busy":
                    c.report_handler("h", handler_id, "idle", [WAIT])
                if state == "resident":
                    c.report_handler("h", handler_id, "resident", reason="cannot checkpoint")
                if state == "requested":  # an operator's Release
                    c.release_workflow(handler_id)
            c.serve_workflows("h", [{"name": "a", "idle_release_after": redeclared}, {"name": "b"}])
            clock.advance(later)
            delays = {"a": redeclared or cluster_delay, "b": cluster_delay}
            handlers = c.list_handlers(status="running", idle=True, limit=10_000)
            assert all(h.idle_since is not None for h in handlers)  # idle=True: idle ones only
            idle = [
                IdleRun(
                    h.handler_id,
                    h.idle_since,
                    delays[h.workflow],
                    requested=h.release_requested_at is not None,
                )
                for h in handlers
                if h.resident_reason is None and h.idle_since is not None
            ]
            expected = release_due(idle, clock.now(), cap)
            assert c.take_workflow_work("h").release == expected
        finally:
            c.close()
