"""The dashboard's Processes, Pools, Workflows, Activations and Events panels without a
browser: each shows what its operations answer (over a real SQLite cluster and the
real app), each button calls its operation through the action gate (session, CSRF,
operator role) and records its actor, a viewer sees every panel and no control, and
the Events panel's filters (kind, node, task) are kept in the URL. The browser's side,
with a real ``corral up``, is tests/integration/test_dashboard_panels_browser.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

import corral
from corral.dashboard.views import Filters
from corral.server import create_app
from tests.support.backends.http import TOKEN

NEW_PANELS = ("Processes", "Pools", "Workflows", "Activations")
WAIT = {"step": "ask", "event_type": "Answer", "waiter_id": "w1", "deadline": None}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    yield c
    c.close()


@pytest.fixture
def app_client(cluster: Any) -> Iterator[TestClient]:
    app = create_app(cluster, token=TOKEN, monitor=False, mcp=False)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        yield client


def _log_in(client: TestClient, token: str = TOKEN) -> str:
    """Log in; the page's CSRF token."""
    answer = client.post("/login", data={"token": token}, headers={"Origin": "http://testserver"})
    assert answer.status_code == 303, answer.text
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', client.get("/").text)
    assert found
    return found[1]


def _panel(client: TestClient, name: str, **query: str) -> str:
    answer = client.get(f"/dashboard/panels/{name}", params=query)
    assert answer.status_code == 200, answer.text
    return answer.text


def _act(client: TestClient, path: str, csrf: str | None, **form: str) -> httpx2.Response:
    headers = {} if csrf is None else {"X-CSRF-Token": csrf}
    return client.post(path, data=form, headers=headers)


def _world(c: Any) -> dict[str, Any]:
    """A host with two supervised agents (one restart-exhausted with a stderr tail), a
    pending spawn request, an idle workflow run waiting for an Answer, three agents to
    activate (one activated once, one held by a runner, one never)."""
    c.register_node("host-a", "developer")
    c.report_processes(
        "host-a",
        [
            {
                "agent": "relay",
                "state": "RUNNING",
                "pid": 4242,
                "restarts": 2,
                "started_at": c.clock.now() - 90,
                "last_beat": c.clock.now() - 1,
                "flags": [],
                "last_exit": None,
            },
            {
                "agent": "flaky",
                "state": "STOPPED",
                "pid": None,
                "restarts": 5,
                "started_at": None,
                "last_beat": None,
                "flags": ["restart-exhausted"],
                "last_exit": {
                    "code": 1,
                    "stderr_tail": [
                        "Traceback (most recent call last):",
                        "ValueError: the <bad> input",
                    ],
                },
            },
        ],
    )
    ask = c.request_spawn("dev", "developer", reason="spawn_developer: 3 pending tasks")
    c.serve_workflows("wf-host", [{"name": "hitl"}])
    run = c.run_workflow("hitl")
    c.take_workflow_work("wf-host")
    c.report_handler("wf-host", run, "idle", [WAIT])
    c.add_agent("stale-agent")
    c.add_agent("busy-agent")
    c.add_agent("done-agent")
    c.register_node("runner-1", "developer")
    c.notify("done-agent", {"hello": 0})
    done = c.get_assignment("runner-1", "notification")
    assert done is not None and done.agent_id == "done-agent"
    c.release_assignment(done.id, "runner-1", done.epoch)
    c.notify("busy-agent", {"hello": 1})
    held = c.get_assignment("runner-1", "notification")
    assert held is not None and held.agent_id == "busy-agent"
    return {"ask": ask.id, "run": run, "assignment": held.id}


def test_each_new_panel_shows_what_its_operations_answer(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    _log_in(app_client)
    page = app_client.get("/").text
    for name in NEW_PANELS:
        assert re.search(rf"<h2 id=\"\w+-title\">{name}</h2>", page), name
    procs = _panel(app_client, "processes")
    assert "Host host-a: 2 supervised agents" in procs
    relay = procs[procs.index('data-process="relay"') :].split("</tr>")[0]
    assert "RUNNING" in relay and "pid 4242" in relay and '"restarts">2<' in relay
    assert "<td>90 s</td>" in relay and "1 s ago" in relay  # uptime, last beat
    flaky = procs[procs.index('data-process="flaky"') :].split("</tr>")[0]
    assert "restart-exhausted" in flaky and '"restarts">5<' in flaky
    assert "ValueError: the &lt;bad&gt; input" in flaky  # the stderr tail, escaped
    assert 'aria-label="Restart relay on host-a"' in procs

    pools = _panel(app_client, "pools")
    assert "Pool dev" in pools and f'id="request-{w["ask"]}"' in pools
    assert "spawn_developer: 3 pending tasks" in pools
    assert f'aria-label="Accept request-{w["ask"]}"' in pools

    runs = _panel(app_client, "workflows")
    assert f'data-run="{w["run"]}"' in runs and "Answer" in runs and "hitl" in runs
    assert 'value="Answer"' in runs  # the event type it waits for, ready to send
    # idle for more than 5 minutes: not this one (idle for less than a second)
    assert f'data-run="{w["run"]}"' not in _panel(app_client, "workflows", idle_minutes="5")
    assert "No runs idle for more than 5 min." in _panel(app_client, "workflows", idle_minutes="5")

    acts = _panel(app_client, "activations")
    agents = re.findall(r'data-agent="([^"]+)"', acts)
    assert agents == ["busy-agent", "stale-agent", "done-agent"]  # never activated first
    assert f'data-assignment="{w["assignment"]}"' in acts
    assert 'data-figure="mode-notification">1<' in acts
    busy = acts[acts.index('data-agent="busy-agent"') :].split("</tr>")[0]
    assert "runner-1" in busy


def test_restart_start_stop_each_request_a_process_action(
    cluster: Any, app_client: TestClient
) -> None:
    """Each button records the request its host's supervisor follows
    (``process_action_requested``); an unknown agent is refused with the
    operation's message and records nothing."""
    _world(cluster)
    csrf = _log_in(app_client)
    for action in ("restart", "stop", "start"):
        done = _act(
            app_client,
            "/dashboard/processes/act",
            csrf,
            host="host-a",
            agent="relay",
            action=action,
        )
        assert done.status_code == 200, done.text
        assert f"Asked host-a to {action} relay" in done.text
    asked = cluster.process_actions("host-a")
    assert [(e.data.get("agent"), e.data.get("action")) for e in asked] == [
        ("relay", "restart"),
        ("relay", "stop"),
        ("relay", "start"),
    ]
    unknown = _act(
        app_client,
        "/dashboard/processes/act",
        csrf,
        host="host-a",
        agent="ghost",
        action="restart",
    )
    assert unknown.status_code == 422 and "ghost" in unknown.text
    bad = _act(
        app_client,
        "/dashboard/processes/act",
        csrf,
        host="host-a",
        agent="relay",
        action="explode",
    )
    assert bad.status_code == 422
    assert len(cluster.process_actions("host-a")) == 3


def test_accept_and_decline_name_the_token_that_decided(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    second = cluster.request_spawn("dev", "developer", reason="another").id
    ops = cluster.create_token("ops-alice", "operator").token
    csrf = _log_in(app_client, ops)
    accepted = _act(
        app_client, "/dashboard/spawn/act", csrf, request_id=str(w["ask"]), action="accept"
    )
    assert accepted.status_code == 200, accepted.text
    assert f"Spawn request {w['ask']} (pool dev, developer): accepted by token:ops-alice" in (
        accepted.text
    )
    declined = _act(
        app_client, "/dashboard/spawn/act", csrf, request_id=str(second), action="decline"
    )
    assert declined.status_code == 200 and "declined by token:ops-alice" in declined.text
    again = _act(app_client, "/dashboard/spawn/act", csrf, request_id=str(second), action="accept")
    assert again.status_code == 422 and "already declined" in again.text
    status = {r.id: (r.status, r.decided_by) for r in cluster.spawn_requests()}
    assert status == {
        w["ask"]: ("accepted", "token:ops-alice"),
        second: ("declined", "token:ops-alice"),
    }
    kinds = [e for e in cluster.events(0, 1000) if e.kind.startswith("spawn_request_")]
    assert [e.data["actor"] for e in kinds] == ["token:ops-alice", "token:ops-alice"]
    shown = _panel(app_client, "events", event_kind="spawn_request_accepted")
    assert '<td class="actor">token:ops-alice</td>' in shown  # the Events panel's actor


def test_send_event_reaches_a_waiting_run_and_bad_data_is_refused(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    csrf = _log_in(app_client)
    bad = _act(
        app_client,
        "/dashboard/workflows/act",
        csrf,
        handler_id=w["run"],
        event_type="Answer",
        data="{not json",
    )
    assert bad.status_code == 422 and "JSON object" in bad.text
    wrong = _act(
        app_client, "/dashboard/workflows/act", csrf, handler_id=w["run"], event_type="not a class"
    )
    assert wrong.status_code == 422 and "event_type" in wrong.text
    sent = _act(
        app_client,
        "/dashboard/workflows/act",
        csrf,
        handler_id=w["run"],
        event_type="Answer",
        data='{"text": "yes"}',
    )
    assert sent.status_code == 200, sent.text
    assert f"Sent Answer to {w['run']}" in sent.text
    got = cluster.take_workflow_work("wf-host").deliveries  # its host receives it
    assert [(d.handler_id, d.event_type, d.data) for d in got] == [
        (w["run"], "Answer", {"text": "yes"})
    ]


def test_release_and_resume_call_their_operations_as_the_session(
    cluster: Any, app_client: TestClient
) -> None:
    """A run idle on its host has a Release button, a released one a Resume button;
    each calls its operation as the session's caller (the events' actor), and a
    refusal is shown in the operation's words (422), nothing changed."""
    w = _world(cluster)
    run = w["run"]
    csrf = _log_in(app_client)
    html = _panel(app_client, "workflows")
    assert f'aria-label="Release {run}"' in html and f'aria-label="Resume {run}"' not in html

    def act(action: str) -> httpx2.Response:
        return _act(app_client, "/dashboard/workflows/act", csrf, handler_id=run, action=action)

    done = act("release")
    assert done.status_code == 200 and f"Asked wf-host to release {run}" in done.text
    html = _panel(app_client, "workflows")
    assert "(release requested)" in html and f'aria-label="Release {run}"' not in html
    seqs = [e.seq for e in cluster.events()]
    for action, words in (("release", "asked for already"), ("resume", "only a released run")):
        refused = act(action)
        assert refused.status_code == 422 and words in refused.text, refused.text
    unknown = act("delete")
    assert unknown.status_code == 422 and "Unknown action" in unknown.text
    assert [e.seq for e in cluster.events()] == seqs
    assert cluster.take_workflow_work("wf-host").release == [run]  # its host lets it go
    cluster.release_handler("wf-host", run, {"state": 1})
    html = _panel(app_client, "workflows")
    assert f'aria-label="Resume {run}"' in html and f'aria-label="Release {run}"' not in html
    resumed = act("resume")
    assert resumed.status_code == 200 and f"Resumed {run}" in resumed.text
    (taken,) = cluster.take_workflow_work("wf-host").runs
    assert (taken.handler.handler_id, taken.checkpoint) == (run, {"state": 1})
    asked = ("workflow_release_requested", "workflow_resume_requested")
    actors = [(e.kind, e.data["actor"]) for e in cluster.events() if e.kind in asked]
    assert actors == [
        ("workflow_release_requested", "operator"),
        ("workflow_resume_requested", "operator"),
    ]


def test_a_viewer_sees_each_panel_and_no_control_and_cannot_act(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    viewer = cluster.create_token("watcher", "viewer").token
    csrf = _log_in(app_client, viewer)
    page = app_client.get("/").text
    for name in NEW_PANELS:
        assert re.search(rf"<h2 id=\"\w+-title\">{name}</h2>", page), name
    for panel in ("processes", "pools", "workflows", "activations"):
        html = _panel(app_client, panel)
        assert "<button" not in html and "hx-post" not in html, panel
    assert 'data-process="relay"' in _panel(app_client, "processes")
    assert f'data-request="{w["ask"]}"' in _panel(app_client, "pools")
    for path, form in (
        ("/dashboard/processes/act", {"host": "host-a", "agent": "relay", "action": "restart"}),
        ("/dashboard/spawn/act", {"request_id": str(w["ask"]), "action": "accept"}),
        ("/dashboard/workflows/act", {"handler_id": w["run"], "event_type": "Answer"}),
        ("/dashboard/workflows/act", {"handler_id": w["run"], "action": "release"}),
    ):
        refused = _act(app_client, path, csrf, **form)
        assert refused.status_code == 403 and "a viewer may not act" in refused.text, path
    assert cluster.process_actions("host-a") == []
    assert cluster.get_handler(w["run"]).release_requested_at is None
    assert cluster.spawn_requests("pending")[0].id == w["ask"]


def test_every_new_action_needs_a_session_and_its_csrf_token(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    forms = {
        "/dashboard/processes/act": {"host": "host-a", "agent": "relay", "action": "restart"},
        "/dashboard/spawn/act": {"request_id": str(w["ask"]), "action": "accept"},
        "/dashboard/workflows/act": {"handler_id": w["run"], "event_type": "Answer"},
    }
    for path, form in forms.items():
        assert _act(app_client, path, None, **form).status_code == 401, path
    csrf = _log_in(app_client)
    for path, form in forms.items():
        assert _act(app_client, path, None, **form).status_code == 403, path
        assert _act(app_client, path, "x" + csrf, **form).status_code == 403, path
    assert cluster.process_actions("host-a") == []
    assert cluster.spawn_requests("pending")[0].id == w["ask"]


def test_the_events_panel_filters_by_kind_node_and_task_and_links_each_object(
    cluster: Any, app_client: TestClient
) -> None:
    w = _world(cluster)
    task = cluster.add_task("Write the docs")
    _log_in(app_client)
    everything = _panel(app_client, "events")
    assert f'href="#request-{w["ask"]}"' in everything  # a spawn request's event
    assert f'href="#run-{w["run"]}"' in everything  # a workflow run's
    assert "process relay" in everything  # a process's
    by_node = _panel(app_client, "events", event_node="runner-1")
    seqs = re.findall(r'data-seq="(\d+)"', by_node)
    assert seqs
    mine = {e.seq for e in cluster.events(0, 1000) if e.node_id == "runner-1"}
    assert {int(s) for s in seqs} == mine
    by_task = _panel(app_client, "events", event_task=f"task-{task.id}")
    assert {int(s) for s in re.findall(r'data-seq="(\d+)"', by_task)} == {
        e.seq for e in cluster.events(0, 1000) if e.task_id == task.id
    }
    assert f"/?event_task={task.id}#events-title" in everything  # the task's link
    both = _panel(app_client, "events", event_kind="node_registered", event_node="host-a")
    assert len(re.findall(r'data-seq="', both)) == 1
    # the filters are kept in the URL, and a bad one is the default
    f = Filters.from_query({"event_node": "w1", "event_task": "task-7", "idle_minutes": "5"})
    assert f.query() == "event_node=w1&event_task=7&idle_minutes=5"
    assert Filters.from_query({"event_task": "<x>", "idle_minutes": "soon"}).query() == ""
    page = app_client.get("/", params={"event_node": "runner-1", "idle_minutes": "3"}).text
    assert 'name="event_node" value="runner-1"' in page
    assert 'name="idle_minutes" value="3"' in page
    # a filter form of another panel carries them along
    assert page.count('type="hidden" name="event_node" value="runner-1"') >= 2


def _scaled(c: Any, old: int, new: int, why: str) -> None:
    """A pool's size change as ``corral up``'s pools record it."""
    c.alert(
        f"pool dev: {old} -> {new} members ({why})",
        reason="pool_scaled",
        pool="dev",
        role="developer",
        why=why,
        cause="decision",
        at=c.clock.now(),
        min=0,
        max=3,
        scale="ask",
        **{"from": old, "to": new},
    )


def test_the_pools_panel_counts_members_against_min_max_and_reversals(
    cluster: Any, app_client: TestClient
) -> None:
    """Members are the pool's live nodes (``dev-<n>``) against the limits its last
    ``pool_scaled`` event gave; a change against the one before is a reversal; the
    timeline lists each change, newest first."""
    _log_in(app_client)
    _scaled(cluster, 0, 1, "spawn_developer")
    _scaled(cluster, 1, 2, "spawn_developer")  # onward: no reversal
    _scaled(cluster, 2, 1, "idle")  # a reversal
    cluster.register_node("dev-1", "developer")
    cluster.register_node("dev-2", "developer")
    cluster.terminate_node("dev-2")
    cluster.register_node("devops", "developer")  # not a member: no number
    pools = _panel(app_client, "pools")
    assert '"members">1 (min 0, max 3)<' in pools
    assert '"reversals">1<' in pools
    timeline = re.findall(r"ago: (\d) → (\d) members \((\w+)\)", pools)
    assert timeline == [
        ("2", "1", "idle"),
        ("1", "2", "spawn_developer"),
        ("0", "1", "spawn_developer"),
    ]
